//! The IPv6 header (RFC 8200 §3) and its extension headers (§4).
//!
//! [`Packet::new_checked`] checks the fixed 40 bytes; the payload length is
//! checked by the walk ([`super::parse_of`]) against the frame's real
//! length, so a header copy shorter than the packet can be read.

use super::{
    be16, be32, bytes, from, need, view, within, Error, Reason, Result, PROTO_DSTOPTS,
    PROTO_HOPOPTS, PROTO_ROUTING,
};

/// Length of the fixed header.
pub const HLEN: usize = 40;
/// Longest extension header chain walked (every loop driven by untrusted
/// bytes is bounded).
pub const MAX_EXT_HEADERS: usize = 8;

const WHAT: &str = "IPv6 header";
const EXT: &str = "IPv6 extension header";

view!(
    /// An IPv6 header and what follows it.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the fixed 40 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), HLEN, WHAT)
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.b(), 0) >> 4) as u8
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }

    /// Bytes after this header, extension headers included (as claimed).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// The first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    #[inline]
    pub fn src(&self) -> [u8; 16] {
        bytes(self.b(), 8)
    }

    #[inline]
    pub fn dst(&self) -> [u8; 16] {
        bytes(self.b(), 24)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets version 6, the traffic class and the flow label.
    #[inline]
    pub fn set_class_and_flow(&mut self, class: u8, flow: u32) {
        let w = (6u32 << 28) | (u32::from(class) << 20) | (flow & 0x000f_ffff);
        self.m()[..4].copy_from_slice(&w.to_be_bytes());
    }

    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        self.m()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.m()[6] = v;
    }

    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.m()[7] = v;
    }

    #[inline]
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.m()[8..24].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.m()[24..40].copy_from_slice(&a);
    }
}

/// [`Repr::parse`]'s check without the copy: version 6.
#[inline]
pub fn check<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<()> {
    if p.version() != 6 {
        return Err(Error::Malformed {
            what: WHAT,
            at: 0,
            reason: Reason::Version {
                got: p.version(),
                want: 6,
            },
        });
    }
    Ok(())
}

/// An IPv6 header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub next_header: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    /// Bytes after the fixed header.
    pub payload_len: usize,
}

impl Repr {
    /// Validates the version. A zero payload length with a jumbo option
    /// (RFC 2675) is not supported: the walk then finds the packet short.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        check(p)?;
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: usize::from(p.payload_len()),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_class_and_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
    }
}

view!(
    /// The common start of a hop-by-hop, routing or destination-options
    /// extension header (RFC 8200 §4.3, §4.4, §4.6).
    ExtHeader
);

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Checks that the buffer holds the first 8 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), 8, EXT)
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The header's length in bytes (as claimed): 8-byte units after the
    /// first 8.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }
}

view!(
    /// A fragment header (RFC 8200 §4.5).
    FragmentHeader
);

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Length of a fragment header.
    pub const LEN: usize = 8;

    /// Checks that the buffer holds the 8 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), Self::LEN, "IPv6 fragment header")
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The fragment offset, in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), 2) >> 3
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[3] & 1 != 0
    }

    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
}

/// Walks the hop-by-hop, routing and destination-options headers of the
/// packet `packet` from `at`, where a header of kind `next` starts:
/// returns the first other kind (the upper-layer protocol, or
/// [`PROTO_FRAGMENT`]) and its offset. `first`: `at` is right after the
/// fixed header, the only place hop-by-hop options may be (RFC 8200 §4.1).
/// Every header must lie within `packet`; at most [`MAX_EXT_HEADERS`].
#[inline]
pub fn walk_ext(packet: &[u8], next: u8, at: usize, first: bool) -> Result<(u8, usize)> {
    walk(packet, next, at, first, true)
}

/// [`walk_ext`] over a header copy that may end inside the chain: only the
/// first 8 bytes of each header must be in `head`; a header's claimed
/// length is skipped without being read, so the offset returned may lie
/// beyond `head` (the caller finds what it needs there missing).
pub fn skip_ext(head: &[u8], next: u8, at: usize, first: bool) -> Result<(u8, usize)> {
    walk(head, next, at, first, false)
}

#[inline]
fn walk(buf: &[u8], mut next: u8, mut at: usize, first: bool, whole: bool) -> Result<(u8, usize)> {
    for i in 0..=MAX_EXT_HEADERS {
        if !matches!(next, PROTO_HOPOPTS | PROTO_ROUTING | PROTO_DSTOPTS) {
            return Ok((next, at));
        }
        if i == MAX_EXT_HEADERS {
            break;
        }
        if next == PROTO_HOPOPTS && (i != 0 || !first) {
            return Err(Error::Malformed {
                what: EXT,
                at,
                reason: Reason::HopByHopNotFirst,
            });
        }
        let e = ExtHeader::new_checked(from(buf, at)).map_err(|e| e.shifted(at))?;
        let len = e.header_len();
        if whole {
            within(buf.len(), at, len, EXT)?;
        }
        next = e.next_header();
        at += len;
    }
    Err(Error::Unsupported {
        what: EXT,
        at,
        reason: Reason::ExtChain {
            max: MAX_EXT_HEADERS,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::{PROTO_FRAGMENT, PROTO_TCP, PROTO_UDP};
    use super::*;

    fn repr() -> Repr {
        Repr {
            src: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x16, 0x3e, 0xff, 0xfe, 0, 0, 1,
            ],
            dst: [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            next_header: PROTO_UDP,
            hop_limit: 255,
            traffic_class: 0xb8,
            flow_label: 0xabcde,
            payload_len: 8,
        }
    }

    #[test]
    fn emits_a_header_that_parses_back() {
        let mut b = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        assert!(Packet::new_checked(&b[..39]).is_err());
        b[0] = 0x45;
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed {
                reason: Reason::Version { got: 4, want: 6 },
                ..
            })
        ));
    }

    /// Extension headers `kinds` (each 8 bytes, chained), then `upper`.
    fn chain(kinds: &[u8], upper: u8) -> Vec<u8> {
        let mut b = Vec::new();
        for (i, _) in kinds.iter().enumerate() {
            let next = kinds.get(i + 1).copied().unwrap_or(upper);
            b.extend_from_slice(&[next, 0, 0, 0, 0, 0, 0, 0]);
        }
        b.extend_from_slice(&[0; 8]);
        b
    }

    #[test]
    fn the_walk_finds_the_upper_layer_after_extension_headers() {
        let b = chain(&[PROTO_HOPOPTS, PROTO_ROUTING, PROTO_DSTOPTS], PROTO_TCP);
        assert_eq!(walk_ext(&b, PROTO_HOPOPTS, 0, true), Ok((PROTO_TCP, 24)));
        assert_eq!(walk_ext(&b, PROTO_UDP, 0, true), Ok((PROTO_UDP, 0)));
        // It stops at a fragment header, which says where its part lies.
        let b = chain(&[PROTO_DSTOPTS], PROTO_FRAGMENT);
        assert_eq!(
            walk_ext(&b, PROTO_DSTOPTS, 0, true),
            Ok((PROTO_FRAGMENT, 8))
        );
        let f = FragmentHeader::new_checked(&[PROTO_TCP, 0, 0x05, 0x29, 0, 0, 0, 7][..]).unwrap();
        assert_eq!(
            (f.next_header(), f.frag_offset(), f.more_frags(), f.ident()),
            (6, 165, true, 7)
        );
    }

    #[test]
    fn the_walk_refuses_what_rfc_8200_does_not_allow_and_long_chains() {
        let b = chain(&[PROTO_DSTOPTS, PROTO_HOPOPTS], PROTO_TCP);
        assert!(matches!(
            walk_ext(&b, PROTO_DSTOPTS, 0, true),
            Err(Error::Malformed {
                at: 8,
                reason: Reason::HopByHopNotFirst,
                ..
            })
        ));
        assert!(walk_ext(&b[8..], PROTO_HOPOPTS, 0, false).is_err());
        let long = chain(&[PROTO_DSTOPTS; MAX_EXT_HEADERS + 1], PROTO_TCP);
        assert!(matches!(
            walk_ext(&long, PROTO_DSTOPTS, 0, true),
            Err(Error::Unsupported { .. })
        ));
        let most = chain(&[PROTO_DSTOPTS; MAX_EXT_HEADERS], PROTO_TCP);
        assert_eq!(walk_ext(&most, PROTO_DSTOPTS, 0, true), Ok((PROTO_TCP, 64)));
    }

    #[test]
    fn an_extension_header_beyond_the_packet_is_truncated() {
        let mut b = chain(&[PROTO_DSTOPTS], PROTO_TCP);
        b[1] = 1; // claims 16 bytes; 16 are there
        assert_eq!(walk_ext(&b, PROTO_DSTOPTS, 0, true), Ok((PROTO_TCP, 16)));
        b[1] = 2; // claims 24
        assert!(matches!(
            walk_ext(&b, PROTO_DSTOPTS, 0, true),
            Err(Error::Truncated {
                need: 24,
                have: 16,
                ..
            })
        ));
        assert!(matches!(
            walk_ext(&b[..7], PROTO_DSTOPTS, 0, true),
            Err(Error::Truncated { need: 8, .. })
        ));
        // Over a header copy, a header's claimed length is skipped unread.
        assert_eq!(skip_ext(&b, PROTO_DSTOPTS, 0, true), Ok((PROTO_TCP, 24)));
        assert!(skip_ext(&b[..7], PROTO_DSTOPTS, 0, true).is_err());
    }
}
