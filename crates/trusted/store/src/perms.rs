//! Node permissions, xenstore-style: an owner, a default for everyone else,
//! and per-domain exceptions. xenstore.txt, "SET_PERMS".

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{shown, StoreError};
use crate::{DomId, DOM0};

/// What a domain may do with a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Perm {
    /// `n`: nothing.
    None,
    /// `r`: read the value, list children, read permissions, get watch events.
    Read,
    /// `w`: write, create children, remove.
    Write,
    /// `b`: both read and write.
    Both,
}

impl Perm {
    /// The letter xenstore uses for this permission.
    pub fn as_char(self) -> char {
        match self {
            Perm::None => 'n',
            Perm::Read => 'r',
            Perm::Write => 'w',
            Perm::Both => 'b',
        }
    }

    /// Parses xenstore's letter.
    pub fn from_char(c: char) -> Option<Perm> {
        match c {
            'n' => Some(Perm::None),
            'r' => Some(Perm::Read),
            'w' => Some(Perm::Write),
            'b' => Some(Perm::Both),
            _ => None,
        }
    }

    pub fn can_read(self) -> bool {
        matches!(self, Perm::Read | Perm::Both)
    }

    pub fn can_write(self) -> bool {
        matches!(self, Perm::Write | Perm::Both)
    }
}

/// A node's permission list. In text form the first entry names the owner
/// and the default for every other domain (`n0`: owned by dom0, others get
/// nothing); each following entry grants one domain a permission (`r5`).
/// The owner and dom0 always have full access.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perms {
    pub owner: DomId,
    pub others: Perm,
    pub acl: Vec<(DomId, Perm)>,
}

impl Perms {
    /// A list with no per-domain entries.
    pub fn new(owner: DomId, others: Perm) -> Perms {
        Perms {
            owner,
            others,
            acl: Vec::new(),
        }
    }

    /// Adds an entry giving `domid` the permission `perm`.
    pub fn with(mut self, domid: DomId, perm: Perm) -> Perms {
        self.acl.push((domid, perm));
        self
    }

    /// What `domid` may do under this list: dom0 and the owner may do
    /// anything, then the first entry naming the domain applies, else the
    /// default.
    pub fn access(&self, domid: DomId) -> Perm {
        if domid == DOM0 || domid == self.owner {
            return Perm::Both;
        }
        self.acl
            .iter()
            .find(|(d, _)| *d == domid)
            .map_or(self.others, |(_, p)| *p)
    }

    /// The entries in text form, owner first: `["b0", "r5"]`.
    pub fn entries(&self) -> Vec<String> {
        std::iter::once((self.owner, self.others))
            .chain(self.acl.iter().copied())
            .map(|(d, p)| format!("{}{d}", p.as_char()))
            .collect()
    }

    /// The wire form: each entry followed by a NUL.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for e in self.entries() {
            out.extend_from_slice(e.as_bytes());
            out.push(0);
        }
        out
    }

    /// Parses a list of entries such as `["b0", "r5"]`. `caller` only
    /// labels the error.
    pub fn parse_entries<'a, I>(caller: DomId, entries: I) -> Result<Perms, StoreError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut iter = entries.into_iter();
        let (owner, others) = match iter.next() {
            Some(e) => parse_entry(caller, e)?,
            None => {
                return Err(bad(
                    caller,
                    "the list is empty; it needs at least the owner entry",
                ))
            }
        };
        let acl = iter
            .map(|e| parse_entry(caller, e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Perms { owner, others, acl })
    }

    /// Parses the text form, entries separated by whitespace or NULs (so
    /// both `"b0 r5"` and the wire form `"b0\0r5\0"` work).
    pub fn parse(caller: DomId, text: &str) -> Result<Perms, StoreError> {
        Perms::parse_entries(
            caller,
            text.split(|c: char| c == '\0' || c.is_whitespace())
                .filter(|e| !e.is_empty()),
        )
    }
}

fn bad(caller: DomId, reason: impl Into<String>) -> StoreError {
    StoreError::InvalidArgument {
        caller,
        what: "permission list",
        reason: reason.into(),
    }
}

fn parse_entry(caller: DomId, entry: &str) -> Result<(DomId, Perm), StoreError> {
    let mut chars = entry.chars();
    let perm = chars.next().and_then(Perm::from_char).ok_or_else(|| {
        bad(
            caller,
            format!(
                "entry {:?} does not start with one of n r w b",
                shown(entry)
            ),
        )
    })?;
    let digits = chars.as_str();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            caller,
            format!(
                "entry {:?} needs a decimal domain id after the letter",
                shown(entry)
            ),
        ));
    }
    let domid = digits.parse::<DomId>().map_err(|_| {
        bad(
            caller,
            format!(
                "entry {:?} names a domain id above {}",
                shown(entry),
                DomId::MAX
            ),
        )
    })?;
    Ok((domid, perm))
}

impl fmt::Display for Perms {
    /// Space-separated entries: `b0 r5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entries().join(" "))
    }
}

impl FromStr for Perms {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Perms, StoreError> {
        Perms::parse(DOM0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        let p: Perms = "n3 r5 b7".parse().unwrap();
        assert_eq!(
            p,
            Perms::new(3, Perm::None)
                .with(5, Perm::Read)
                .with(7, Perm::Both)
        );
        assert_eq!(p.to_string(), "n3 r5 b7");
        assert_eq!(p.to_wire(), b"n3\0r5\0b7\0");
        assert_eq!(Perms::parse(0, "n3\0r5\0b7\0").unwrap(), p);
        assert_eq!(p.entries(), ["n3", "r5", "b7"]);
    }

    #[test]
    fn parse_rejects_garbage() {
        for bad in ["", "x1", "r", "r-1", "r+1", "r70000", "b0 q", "rr1"] {
            let e = Perms::parse(2, bad).unwrap_err();
            assert_eq!(e.errno(), "EINVAL", "{bad:?}");
        }
    }

    #[test]
    fn access_rules() {
        let p = Perms::new(3, Perm::None)
            .with(5, Perm::Read)
            .with(5, Perm::Write);
        assert_eq!(p.access(0), Perm::Both);
        assert_eq!(p.access(3), Perm::Both);
        assert_eq!(p.access(5), Perm::Read, "first matching entry wins");
        assert_eq!(p.access(6), Perm::None);
        assert!(Perm::Both.can_read() && Perm::Both.can_write());
        assert!(!Perm::Write.can_read() && !Perm::Read.can_write());
    }
}
