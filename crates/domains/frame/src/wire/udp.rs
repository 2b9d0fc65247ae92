//! The UDP header (RFC 768).

use super::{be16, need, view, Error, Reason, Result};

/// Length of the header.
pub const HLEN: usize = 8;
/// Offset of the checksum field.
pub const CSUM_OFF: u16 = 6;

view!(
    /// A UDP header and what follows it.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), HLEN, "UDP header")
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Header and payload, in bytes (as claimed).
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Whether the claimed length is 0 (then malformed, see [`Repr::parse`]).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[..2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }
}

/// [`Repr::parse`]'s check without the copy: the length.
#[inline]
pub fn check<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<usize> {
    let len = usize::from(p.len());
    if len < HLEN {
        return Err(Error::Malformed {
            what: "UDP header",
            at: 0,
            reason: Reason::UdpLength { len },
        });
    }
    Ok(len)
}

/// A UDP header's fields (the checksum is the offload driver's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Header and payload.
    pub len: usize,
}

impl Repr {
    /// Validates the length: at least the header. Whether it fits the IP
    /// packet is the walk's to check.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let len = check(p)?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            len,
        })
    }

    /// Writes the header with a zero checksum (none computed, RFC 768).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(self.len as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_a_length_below_the_header() {
        let r = Repr {
            src_port: 68,
            dst_port: 67,
            len: 308,
        };
        let mut b = [0xffu8; 8];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, [0, 68, 0, 67, 1, 52, 0, 0]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (Repr::parse(&p), p.checksum(), p.is_empty()),
            (Ok(r), 0, false)
        );
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed {
                reason: Reason::UdpLength { len: 7 },
                ..
            })
        ));
        assert!(Packet::new_checked(&b[..7]).is_err());
    }
}
