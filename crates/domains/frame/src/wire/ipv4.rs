//! The IPv4 header (RFC 791 §3.1).
//!
//! [`Packet::new_checked`] checks the fixed 20 bytes only, so that a header
//! copy shorter than the packet can be read (Menon 2006 §4.1): the claimed
//! header and total lengths are checked by [`Repr::parse`] and by the walk
//! ([`super::parse_of`]) against the frame's real length.

use super::{be16, bytes, need, view, Error, Reason, Result};

/// Length of the header without options.
pub const MIN_HLEN: usize = 20;

const WHAT: &str = "IPv4 header";

view!(
    /// An IPv4 header and what follows it.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the fixed 20 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), MIN_HLEN, WHAT)
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }

    /// The header's length in bytes, options included (as claimed).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// DSCP and ECN.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }

    /// Header and payload, in bytes (as claimed).
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.b(), 2)
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// The fragment offset, in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.b(), 6) & 0x1fff
    }

    /// A fragment (not the whole datagram): its transport header is
    /// elsewhere or incomplete.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// The transport protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }

    #[inline]
    pub fn src(&self) -> [u8; 4] {
        bytes(self.b(), 12)
    }

    #[inline]
    pub fn dst(&self) -> [u8; 4] {
        bytes(self.b(), 16)
    }

    /// The options, as far as the buffer holds them.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let end = self.header_len().clamp(MIN_HLEN, self.b().len());
        &self.b()[MIN_HLEN..end]
    }

    /// Whether the stored checksum is right (the whole header must be in
    /// the buffer).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        self.b()
            .get(..self.header_len())
            .is_some_and(|h| header_checksum(h) == self.checksum())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets version 4 and the header length (a multiple of 4, at most 60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.m()[0] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    #[inline]
    pub fn set_tos(&mut self, v: u8) {
        self.m()[1] = v;
    }

    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.m()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.m()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets DF, MF and the fragment offset (8-byte units).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | (offset & 0x1fff);
        self.m()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.m()[8] = v;
    }

    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.m()[9] = v;
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.m()[10..12].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.m()[12..16].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.m()[16..20].copy_from_slice(&a);
    }

    /// Writes the header checksum over the header the buffer holds.
    #[inline]
    pub fn fill_checksum(&mut self) {
        let n = self.header_len().clamp(MIN_HLEN, self.b().len());
        let c = header_checksum(&self.b()[..n]);
        self.set_checksum(c);
    }
}

/// The checksum an IPv4 header should carry (RFC 1071), its checksum field
/// (bytes 10..12) taken as zero.
pub fn header_checksum(hdr: &[u8]) -> u16 {
    let mut sum = 0u32;
    for (i, w) in hdr.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// [`Repr::parse`]'s checks without the copy: `(header_len, total_len)`
/// (the walk, [`super::parse_of`], reads no more than it needs).
#[inline]
pub fn check<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<(usize, usize)> {
    let malformed = |reason| Error::Malformed {
        what: WHAT,
        at: 0,
        reason,
    };
    if p.version() != 4 {
        return Err(malformed(Reason::Version {
            got: p.version(),
            want: 4,
        }));
    }
    let header_len = p.header_len();
    if header_len < MIN_HLEN {
        return Err(malformed(Reason::HeaderLen {
            len: header_len,
            min: MIN_HLEN,
        }));
    }
    let total_len = usize::from(p.total_len());
    if total_len < header_len {
        return Err(malformed(Reason::TotalLen {
            total: total_len,
            header: header_len,
        }));
    }
    Ok((header_len, total_len))
}

/// An IPv4 header's fields (options are counted in `header_len`, not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub protocol: u8,
    pub ttl: u8,
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    pub frag_offset: u16,
    /// Header length with options, 20 to 60.
    pub header_len: usize,
    /// Header and payload.
    pub total_len: usize,
}

impl Repr {
    /// Validates the version and the lengths' consistency: version 4, a
    /// header of at least 20 bytes, a total length not below it. Whether
    /// the total length fits the frame is the walk's to check.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let (header_len, total_len) = check(p)?;
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            header_len,
            total_len,
        })
    }

    /// A fragment of a datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Writes the fixed header and its checksum (over the options already
    /// in the buffer, if `header_len` claims any).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_header_len(self.header_len);
        p.set_tos(self.tos);
        p.set_total_len(self.total_len as u16);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src(self.src);
        p.set_dst(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> Repr {
        Repr {
            src: [10, 0, 0, 5],
            dst: [10, 0, 0, 254],
            protocol: 17,
            ttl: 64,
            tos: 0,
            ident: 0x1234,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            header_len: 20,
            total_len: 28,
        }
    }

    #[test]
    fn emits_a_header_that_parses_back_with_a_valid_checksum() {
        let mut b = [0u8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        assert_eq!(
            (p.version(), p.is_fragment(), p.options()),
            (4, false, &[][..])
        );
    }

    #[test]
    fn options_count_in_the_header_and_are_read_as_far_as_present() {
        let mut b = [0u8; 24];
        Repr {
            header_len: 24,
            ..repr()
        }
        .emit(&mut Packet::new_unchecked(&mut b[..]));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.header_len(), p.options().len()), (24, 4));
        assert!(p.verify_checksum());
        // A header copy cut inside the options: no panic, fewer options.
        let p = Packet::new_checked(&b[..22]).unwrap();
        assert_eq!(p.options().len(), 2);
        assert!(!p.verify_checksum());
    }

    #[test]
    fn each_malformed_length_field_is_refused() {
        let mut b = [0u8; 20];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        let parse = |b: &[u8]| Repr::parse(&Packet::new_checked(b).unwrap()).map(|_| ());
        let reason = |r: Result<()>| match r {
            Err(Error::Malformed { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        let mut v6 = b;
        v6[0] = 0x65;
        assert_eq!(reason(parse(&v6)), Reason::Version { got: 6, want: 4 });
        let mut short = b;
        short[0] = 0x44;
        assert_eq!(
            reason(parse(&short)),
            Reason::HeaderLen { len: 16, min: 20 }
        );
        let mut total = b;
        total[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            reason(parse(&total)),
            Reason::TotalLen {
                total: 19,
                header: 20
            }
        );
        for n in 0..20 {
            assert!(matches!(
                Packet::new_checked(&b[..n]),
                Err(Error::Truncated { need: 20, .. })
            ));
        }
    }

    #[test]
    fn fragments_are_told_apart_from_dont_fragment() {
        let mut b = [0u8; 20];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_frag(true, false, 0);
        assert!(!p.is_fragment());
        p.set_frag(false, true, 0);
        assert!(p.is_fragment());
        p.set_frag(false, false, 5);
        assert_eq!((p.is_fragment(), p.frag_offset()), (true, 5));
    }
}
