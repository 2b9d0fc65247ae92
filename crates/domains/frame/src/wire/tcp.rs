//! The TCP header (RFC 9293 §3.1).

use super::{be16, be32, need, view, Error, Reason, Result};

/// Length of the header without options.
pub const MIN_HLEN: usize = 20;
/// Offset of the checksum field.
pub const CSUM_OFF: u16 = 16;

/// Flag bits (byte 13).
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;
pub const ECE: u8 = 0x40;
pub const CWR: u8 = 0x80;

view!(
    /// A TCP header and what follows it.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the fixed 20 bytes; the options the
    /// data offset claims are checked by [`Repr::parse`].
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), MIN_HLEN, "TCP header")
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }

    #[inline]
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }

    #[inline]
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }

    /// The header's length in bytes, options included (as claimed).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// The reserved bits (low nibble of byte 12; 0 from a conforming sender).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.b()[12] & 0x0f
    }

    /// FIN, SYN, RST, PSH, ACK, URG, ECE, CWR.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }

    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }

    /// The options, as far as the buffer holds them.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let end = self.header_len().clamp(MIN_HLEN, self.b().len());
        &self.b()[MIN_HLEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.m()[..2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.m()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        self.m()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_ack(&mut self, v: u32) {
        self.m()[8..12].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the data offset (header length, a multiple of 4 up to 60),
    /// clearing the reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.m()[12] = ((len / 4) as u8) << 4;
    }

    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.m()[13] = v;
    }

    #[inline]
    pub fn set_window(&mut self, v: u16) {
        self.m()[14..16].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.m()[16..18].copy_from_slice(&v.to_be_bytes());
    }
}

/// [`Repr::parse`]'s checks without the copy: the header length.
#[inline]
pub fn check<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<usize> {
    let header_len = p.header_len();
    if header_len < MIN_HLEN {
        return Err(Error::Malformed {
            what: "TCP header",
            at: 0,
            reason: Reason::DataOffset { len: header_len },
        });
    }
    need(p.b(), header_len, "TCP header with options")?;
    Ok(header_len)
}

/// A TCP header's fields (options are counted in `header_len`, not kept;
/// the checksum is the offload driver's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    /// Header length with options, 20 to 60.
    pub header_len: usize,
}

impl Repr {
    /// Validates the data offset (at least 20) and that the options it
    /// claims are in the buffer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let header_len = check(p)?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            header_len,
        })
    }

    /// Writes the fixed header with a zero checksum and urgent pointer;
    /// options already in the buffer are left as they are.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_header_len(self.header_len);
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.m()[18..20].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> Repr {
        Repr {
            src_port: 40000,
            dst_port: 80,
            seq: 0xdead_beef,
            ack: 7,
            flags: ACK | PSH,
            window: 512,
            header_len: 32,
        }
    }

    #[test]
    fn round_trips_with_options() {
        let mut b = [0u8; 32];
        b[20..24].copy_from_slice(&[1, 1, 8, 10]);
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(repr()));
        assert_eq!(
            (p.options().len(), &p.options()[..4]),
            (12, &[1, 1, 8, 10][..])
        );
        assert_eq!((p.reserved(), p.checksum()), (0, 0));
    }

    #[test]
    fn a_short_data_offset_or_missing_options_are_refused() {
        let mut b = [0u8; 32];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        // Options claimed but cut off by the buffer.
        let p = Packet::new_checked(&b[..31]).unwrap();
        assert_eq!(p.options().len(), 11);
        assert!(matches!(
            Repr::parse(&p),
            Err(Error::Truncated {
                what: "TCP header with options",
                need: 32,
                have: 31,
                ..
            })
        ));
        b[12] = 0x40; // 16 bytes
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed {
                reason: Reason::DataOffset { len: 16 },
                ..
            })
        ));
        assert!(Packet::new_checked(&b[..19]).is_err());
    }
}
