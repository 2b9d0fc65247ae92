//! The Ethernet II header (IEEE 802.3 §3.1.1 with an EtherType): destination
//! and source MACs and the EtherType, or a TPID when a VLAN tag follows.

use super::{be16, bytes, need, view, Result, ETH_HLEN};
use std::ops::Range;

/// Where the destination MAC is.
pub const DST: Range<usize> = 0..6;
/// Where the source MAC is.
pub const SRC: Range<usize> = 6..12;

view!(
    /// An Ethernet II header and what follows it.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the 14-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), ETH_HLEN, "Ethernet header")
    }

    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        bytes(self.buffer.as_ref(), DST.start)
    }

    #[inline]
    pub fn src(&self) -> [u8; 6] {
        bytes(self.buffer.as_ref(), SRC.start)
    }

    /// The EtherType, or a TPID ([`super::is_tpid`]).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }

    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[ETH_HLEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[DST].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[SRC].copy_from_slice(&mac);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[12..14].copy_from_slice(&t.to_be_bytes());
    }
}

/// Whether `mac` is a group (multicast or broadcast) address: the I/G bit.
pub fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// An Ethernet II header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub ethertype: u16,
}

impl Repr {
    /// Every value of an Ethernet header is valid; this only reads it.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            dst: p.dst(),
            src: p.src(),
            ethertype: p.ethertype(),
        }
    }

    /// Header length in bytes.
    pub const fn header_len(&self) -> usize {
        ETH_HLEN
    }

    /// Writes the header into `p`'s first 14 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_dst(self.dst);
        p.set_src(self.src);
        p.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        1, 2, 3, 4, 5, 6, 0, 0x16, 0x3e, 0, 0, 1, 0x08, 0x00, 0xaa, 0xbb,
    ];

    #[test]
    fn parses_and_emits_the_same_bytes() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        let r = Repr::parse(&p);
        assert_eq!(r.dst, [1, 2, 3, 4, 5, 6]);
        assert_eq!(r.src, [0, 0x16, 0x3e, 0, 0, 1]);
        assert_eq!(r.ethertype, 0x0800);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        let mut out = [0u8; 16];
        out[14..].copy_from_slice(&BYTES[14..]);
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
        assert!(!is_group(&r.src) && is_group(&[0xff; 6]) && is_group(&[0x33, 0x33, 0, 0, 0, 1]));
    }

    #[test]
    fn a_header_cut_short_is_truncated() {
        for n in 0..ETH_HLEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]).unwrap_err(),
                super::super::Error::Truncated {
                    what: "Ethernet header",
                    at: 0,
                    need: 14,
                    have: n
                }
            );
        }
    }
}
