//! ARP (RFC 826) for IPv4 over Ethernet, the only kind a vif speaks.

use super::{be16, bytes, need, view, Error, Reason, Result, ETHERTYPE_IPV4};

/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;
/// Hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

view!(
    /// An ARP packet.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the fixed part (hardware and protocol
    /// types and lengths, operation: 8 bytes); the addresses are checked by
    /// [`Repr::parse`], whose lengths the fixed part gives.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), 8, "ARP header")
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn htype(&self) -> u16 {
        be16(self.b(), 0)
    }

    #[inline]
    pub fn ptype(&self) -> u16 {
        be16(self.b(), 2)
    }

    #[inline]
    pub fn hlen(&self) -> u8 {
        self.b()[4]
    }

    #[inline]
    pub fn plen(&self) -> u8 {
        self.b()[5]
    }

    /// 1: request, 2: reply.
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// Whether the lengths and types are those of Ethernet/IPv4.
    pub fn is_ethernet_ipv4(&self) -> bool {
        (self.htype(), self.ptype(), self.hlen(), self.plen())
            == (HTYPE_ETHERNET, ETHERTYPE_IPV4, 6, 4)
    }
}

/// An Ethernet/IPv4 ARP packet's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub operation: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: [u8; 4],
    pub target_mac: [u8; 6],
    pub target_ip: [u8; 4],
}

impl Repr {
    /// Reads an Ethernet/IPv4 ARP packet; any other kind is malformed (for
    /// a vif), and the addresses must be in the buffer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        if !p.is_ethernet_ipv4() {
            return Err(Error::Malformed {
                what: "ARP header",
                at: 0,
                reason: Reason::ArpKind {
                    htype: p.htype(),
                    ptype: p.ptype(),
                    hlen: p.hlen(),
                    plen: p.plen(),
                },
            });
        }
        let b = p.b();
        need(b, LEN, "ARP addresses")?;
        Ok(Repr {
            operation: p.operation(),
            sender_mac: bytes(b, 8),
            sender_ip: bytes(b, 14),
            target_mac: bytes(b, 18),
            target_ip: bytes(b, 24),
        })
    }

    /// Writes the packet into the buffer's first 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        b[..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        b[4..6].copy_from_slice(&[6, 4]);
        b[6..8].copy_from_slice(&self.operation.to_be_bytes());
        b[8..14].copy_from_slice(&self.sender_mac);
        b[14..18].copy_from_slice(&self.sender_ip);
        b[18..24].copy_from_slice(&self.target_mac);
        b[24..28].copy_from_slice(&self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPR: Repr = Repr {
        operation: 2,
        sender_mac: [0, 0x16, 0x3e, 0, 0, 1],
        sender_ip: [10, 0, 0, 5],
        target_mac: [0; 6],
        target_ip: [10, 0, 0, 254],
    };

    #[test]
    fn round_trips_and_checks_its_kind_and_length() {
        let mut b = [0u8; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut b[..]));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_ethernet_ipv4());
        assert_eq!(Repr::parse(&p), Ok(REPR));
        // The addresses cut short.
        let p = Packet::new_checked(&b[..17]).unwrap();
        assert!(matches!(
            Repr::parse(&p),
            Err(Error::Truncated {
                what: "ARP addresses",
                need: 28,
                have: 17,
                ..
            })
        ));
        assert!(Packet::new_checked(&b[..7]).is_err());
        let mut other = b;
        other[5] = 16; // IPv6-sized protocol addresses
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&other[..]).unwrap()),
            Err(Error::Malformed { .. })
        ));
    }
}
