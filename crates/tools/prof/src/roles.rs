//! Who takes part in a session, and how (Menon 2005 §4.2).
//!
//! Xenoprof has one *initiator* per session, the privileged domain that
//! chooses the domains to profile, starts the session and stops it; only one
//! session runs at a time. Participants are *active*, running a profiler of
//! their own that resolves their samples to routines, or *passive*, whose
//! samples are only counted, to estimate the aggregate cost accruing to the
//! domain. Here the initiator is the process holding the session lock, and a
//! passive domain's samples keep their domain and kernel/user mode but are
//! not resolved to functions (and so fall in the class `other`). hv, idle and
//! the host are always resolved, as Xen's own samples are.

use crate::attribution::{Domain, DomainKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How a domain takes part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Samples resolved to functions and classes.
    Active,
    /// Samples counted in aggregate only.
    Passive,
}

/// The function and module a passive domain's samples are filed under.
pub const PASSIVE: &str = "(passive)";

/// The initiator's choice of participants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    /// When set, only these domains are active and every other is passive.
    pub active: Option<BTreeSet<String>>,
    /// Domains that are passive.
    pub passive: BTreeSet<String>,
}

impl Roles {
    /// Checks that no domain is both active and passive.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(a) = &self.active {
            if let Some(both) = a.intersection(&self.passive).next() {
                return Err(format!("domain {both} cannot be both active and passive"));
            }
        }
        Ok(())
    }

    /// Every domain the roles name.
    pub fn named(&self) -> impl Iterator<Item = &String> {
        self.active.iter().flatten().chain(&self.passive)
    }

    /// The mode of `d`'s samples.
    pub fn mode(&self, d: &Domain) -> Mode {
        if d.kind != DomainKind::Domain {
            return Mode::Active;
        }
        // An emulated NIC's device side (`guest1/dm`) goes with its guest.
        let owner = d.name.split('/').next().unwrap_or(&d.name);
        let named = |set: &BTreeSet<String>| set.contains(&d.name) || set.contains(owner);
        let active = self.active.as_ref().is_none_or(named);
        if active && !named(&self.passive) {
            Mode::Active
        } else {
            Mode::Passive
        }
    }
}

/// The machine-wide session lock: held by the initiator while the session
/// runs, released by the kernel if it dies.
#[derive(Debug)]
pub struct SessionLock {
    _file: File,
}

/// Where the lock lives unless told otherwise.
pub fn default_lock_path() -> PathBuf {
    let run_lock = Path::new("/run/lock");
    let dir = if run_lock.is_dir() {
        run_lock.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join("splitnet-profile.lock")
}

impl SessionLock {
    /// Becomes the initiator, or says who is. `about` is written into the
    /// lock file for the next would-be initiator's error message.
    pub fn acquire(path: &Path, about: &str) -> Result<SessionLock, String> {
        let mut f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("opening the session lock {}: {e}", path.display()))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = f.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(format!(
                    "another profiling session is running ({}); Xenoprof allows one at a time",
                    if holder.is_empty() {
                        "unknown initiator"
                    } else {
                        holder
                    }
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(format!("locking {}: {e}", path.display()));
            }
        }
        let _ = f.set_len(0);
        let _ = f.seek(SeekFrom::Start(0));
        let _ = write!(f, "initiator pid {}, {about}", std::process::id());
        Ok(SessionLock { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn modes() {
        let all_active = Roles::default();
        assert_eq!(all_active.mode(&Domain::named("guest1")), Mode::Active);
        let r = Roles {
            active: None,
            passive: set(&["guest2"]),
        };
        assert_eq!(r.mode(&Domain::named("guest2")), Mode::Passive);
        assert_eq!(r.mode(&Domain::named("guest1")), Mode::Active);
        let r = Roles {
            active: Some(set(&["drv"])),
            passive: BTreeSet::new(),
        };
        assert_eq!(r.mode(&Domain::named("drv")), Mode::Active);
        assert_eq!(r.mode(&Domain::named("guest1")), Mode::Passive);
        // hv, idle and the host are always resolved.
        assert_eq!(r.mode(&Domain::hv()), Mode::Active);
        assert_eq!(r.mode(&Domain::host()), Mode::Active);
        let both = Roles {
            active: Some(set(&["drv"])),
            passive: set(&["drv"]),
        };
        assert!(both.validate().unwrap_err().contains("drv"));
    }

    #[test]
    fn one_initiator_at_a_time() {
        let path = std::env::temp_dir().join(format!("splitnet-lock-test-{}", std::process::id()));
        let first = SessionLock::acquire(&path, "test session").unwrap();
        let err = SessionLock::acquire(&path, "second").unwrap_err();
        assert!(err.contains("another profiling session"), "{err}");
        assert!(err.contains("test session"), "{err}");
        drop(first);
        let again = SessionLock::acquire(&path, "third");
        assert!(again.is_ok(), "{again:?}");
        drop(again);
        let _ = std::fs::remove_file(&path);
    }
}
