//! Header views and reprs, smoltcp style: for each header a zero-copy
//! `Packet<T: AsRef<[u8]>>` whose `new_checked` verifies the length once, so
//! that its accessors never panic afterwards (setters where `T: AsMut`), and
//! an owned `Repr` whose `parse` validates the fields and whose `emit` writes
//! them back. [`parse`] walks a frame's headers once, Ethernet → VLAN tags →
//! IPv4/IPv6 → TCP/UDP, and returns the offsets every layer works from.
//!
//! Every byte here may come from a hostile peer: nothing reads past the
//! slice it is given, nothing allocates, and every loop driven by the bytes
//! is bounded.

pub mod arp;
pub mod eth;
mod headers;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use headers::{parse, parse_net, parse_of, Frame, Headers, L3, L4};
pub use vlan::Link;

/// Length of an Ethernet II header: two MACs and the EtherType.
pub const ETH_HLEN: usize = 14;
/// Length of the two MACs, where a VLAN tag is inserted (IEEE 802.1Q §9.3).
pub const ETH_MACS: usize = 12;
/// Length of an 802.1Q or 802.1ad tag: TPID and TCI.
pub const VLAN_HLEN: usize = 4;
/// VLAN tags looked through before the network layer (an 802.1ad S-tag and
/// an 802.1Q C-tag, [`vlan`]).
pub const MAX_VLAN_TAGS: usize = 2;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Tag protocol identifier of an 802.1Q customer tag (C-tag).
pub const TPID_8021Q: u16 = 0x8100;
/// Tag protocol identifier of an 802.1ad service tag (S-tag, "QinQ").
pub const TPID_8021AD: u16 = 0x88a8;

/// IPv6 hop-by-hop options (RFC 8200 §4.3).
pub const PROTO_HOPOPTS: u8 = 0;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv6 routing header (RFC 8200 §4.4).
pub const PROTO_ROUTING: u8 = 43;
/// IPv6 fragment header (RFC 8200 §4.5).
pub const PROTO_FRAGMENT: u8 = 44;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;
/// IPv6 destination options (RFC 8200 §4.6).
pub const PROTO_DSTOPTS: u8 = 60;

/// Whether `ethertype` announces a VLAN tag.
pub fn is_tpid(ethertype: u16) -> bool {
    ethertype == TPID_8021Q || ethertype == TPID_8021AD
}

/// Why a header could not be read. Offsets are from the start of the frame
/// for [`parse`], from the start of the view's buffer for a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before a structure it announces.
    #[error("{what} truncated: needs {need} bytes at offset {at}, only {have} available")]
    Truncated {
        what: &'static str,
        at: usize,
        need: usize,
        have: usize,
    },
    /// A field holds a value that cannot be right.
    #[error("malformed {what} at offset {at}: {reason}")]
    Malformed {
        what: &'static str,
        at: usize,
        reason: Reason,
    },
    /// Well formed, but beyond what is walked.
    #[error("unsupported {what} at offset {at}: {reason}")]
    Unsupported {
        what: &'static str,
        at: usize,
        reason: Reason,
    },
}

/// What is wrong with a malformed or unsupported header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("version {got}, expected {want}")]
    Version { got: u8, want: u8 },
    #[error("header length {len} < {min}")]
    HeaderLen { len: usize, min: usize },
    #[error("total length {total} < header length {header}")]
    TotalLen { total: usize, header: usize },
    #[error("data offset {len} < 20")]
    DataOffset { len: usize },
    #[error("length {len} < 8")]
    UdpLength { len: usize },
    #[error("hop-by-hop options not first")]
    HopByHopNotFirst,
    #[error("more than {max} extension headers")]
    ExtChain { max: usize },
    #[error("hardware type {htype}, protocol {ptype:#06x}, lengths {hlen} and {plen}: not Ethernet/IPv4")]
    ArpKind {
        htype: u16,
        ptype: u16,
        hlen: u8,
        plen: u8,
    },
}

impl Error {
    /// The same error, its offset moved on by `by` (a view's error, placed
    /// in the frame the view was taken from).
    pub fn shifted(self, by: usize) -> Error {
        match self {
            Error::Truncated {
                what,
                at,
                need,
                have,
            } => Error::Truncated {
                what,
                at: at + by,
                need,
                have,
            },
            Error::Malformed { what, at, reason } => Error::Malformed {
                what,
                at: at + by,
                reason,
            },
            Error::Unsupported { what, at, reason } => Error::Unsupported {
                what,
                at: at + by,
                reason,
            },
        }
    }

    /// The header the error is about.
    pub fn what(&self) -> &'static str {
        match self {
            Error::Truncated { what, .. }
            | Error::Malformed { what, .. }
            | Error::Unsupported { what, .. } => what,
        }
    }
}

/// Result of reading a header.
pub type Result<T> = std::result::Result<T, Error>;

/// Checks that `n` bytes from `at` lie within `len` bytes.
#[inline]
pub fn within(len: usize, at: usize, n: usize, what: &'static str) -> Result<()> {
    if at.checked_add(n).is_some_and(|e| e <= len) {
        Ok(())
    } else {
        Err(Error::Truncated {
            what,
            at,
            need: n,
            have: len.saturating_sub(at),
        })
    }
}

/// `buf[at..]`, empty past the end.
#[inline]
pub(crate) fn from(buf: &[u8], at: usize) -> &[u8] {
    buf.get(at..).unwrap_or(&[])
}

/// Reads a big-endian u16 at `at` (the caller checked the length).
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at` (the caller checked the length).
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Copies `N` bytes from `at` (the caller checked the length).
#[inline]
pub(crate) fn bytes<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Declares a view type: the buffer, `new_unchecked`, `new_checked` (which
/// calls the type's `check_len`), `into_inner` and `as_bytes`.
macro_rules! view {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buffer` without checking it: accessors may then panic.
            pub fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` after [`Self::check_len`]: the accessors then
            /// never panic.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// The buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The bytes from the start of the header to the end of the buffer.
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}
pub(crate) use view;

/// `Truncated` unless `buf` holds `need` bytes.
#[inline]
pub(crate) fn need(buf: &[u8], need: usize, what: &'static str) -> Result<()> {
    within(buf.len(), 0, need, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_where_and_why() {
        let e = Error::Malformed {
            what: "IPv4 header",
            at: 0,
            reason: Reason::Version { got: 6, want: 4 },
        };
        assert_eq!(
            e.shifted(14).to_string(),
            "malformed IPv4 header at offset 14: version 6, expected 4"
        );
        let t = within(20, 14, 8, "UDP header").unwrap_err();
        assert_eq!(
            t.to_string(),
            "UDP header truncated: needs 8 bytes at offset 14, only 6 available"
        );
        assert_eq!(t.what(), "UDP header");
        assert!(within(usize::MAX, usize::MAX, 2, "x").is_err());
        assert!(is_tpid(TPID_8021Q) && is_tpid(TPID_8021AD) && !is_tpid(ETHERTYPE_IPV4));
    }
}
