//! The software offload driver (Menon 2006 §3, "high-level virtual interface").
//!
//! Guests hand the driver domain large TCP packets (GSO/TSO) and packets whose
//! checksum is still to be computed (netif `csum_blank`, virtio `NEEDS_CSUM`).
//! Just before a packet leaves through an egress, [`prepare`] compares what the
//! packet still needs with what the egress can do ([`Offloads`]) and does the
//! rest in software: it segments, and it computes checksums.
//!
//! Everything here reads untrusted bytes. Every read goes through a bounds
//! checked helper; a short or inconsistent frame is an [`OffloadError`], never
//! a panic.

pub use crate::error::OffloadError;
use crate::error::{get, get_mut, malformed, rd16, rd32, to_u16, unsupported, wr16, wr32, Result};
use crate::headers::{l4_csum_offset, not_tcp_udp};
pub use crate::headers::{
    parse_headers, parse_headers_of, partial_csum_at, partial_csum_for, partial_csum_of,
};
use crate::packet::{Csum, FrameRef, Gso, GsoKind, Packet};
use crate::wire::{self, ipv6::HLEN as IPV6_HLEN, PROTO_TCP, PROTO_UDP};
pub use crate::wire::{Headers, L3, L4};

/// Smallest GSO segment size accepted from a peer (Linux's TCP_MIN_MSS);
/// it bounds how many segments one 64 KiB packet becomes.
pub const MIN_GSO_SIZE: u16 = 88;

// ---------------------------------------------------------------------------
// Header parsing.

#[cfg(test)]
const MAX_IPV6_EXT_HEADERS: usize = wire::ipv6::MAX_EXT_HEADERS;

// Offsets of the checksum field inside the transport header.
use wire::tcp::CSUM_OFF as TCP_CSUM_OFF;
use wire::udp::CSUM_OFF as UDP_CSUM_OFF;

// TCP flag bits (byte 13 of the header).
use wire::tcp::{CWR as TCP_CWR, FIN as TCP_FIN, PSH as TCP_PSH};

// ---------------------------------------------------------------------------
// The Internet checksum (RFC 1071).

/// Adds `data` to a running one's-complement sum, as big-endian 16-bit words
/// (an odd last byte is padded with zero). `data` must start at an even
/// offset of the checksummed region. The result is folded to 16 bits, so
/// several results can be added together safely.
pub fn csum_add(acc: u32, data: &[u8]) -> u32 {
    // Summing 32-bit words is equivalent (2^16 ≡ 1 mod 0xffff) and halves the work.
    let mut sum = u64::from(acc);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    u32::from(fold64(sum))
}

fn fold64(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Folds a one's-complement sum to 16 bits (end-around carry). Not complemented.
pub fn fold(sum: u32) -> u16 {
    fold64(u64::from(sum))
}

/// The Internet checksum of `data`: the complement of its folded sum.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(csum_add(0, data))
}

/// The checksum an IPv4 header should carry. The checksum field (bytes 10..12)
/// is taken as zero, so the result can be compared with the stored value.
pub fn ipv4_header_checksum(hdr: &[u8]) -> u16 {
    let before = hdr.get(..10).unwrap_or(hdr);
    let after = hdr.get(12..).unwrap_or(&[]);
    !fold(csum_add(csum_add(0, before), after))
}

/// Sum of the TCP/UDP pseudo-header (RFC 793 / RFC 768 for IPv4, RFC 8200 §8.1
/// for IPv6) for the transport segment `h.l4_off..h.end`, folded, not
/// complemented. This is what a `Csum::Partial` field holds. For IPv6 the
/// destination is the one in the fixed header (as in Linux), not the final
/// destination of a routing header.
pub fn pseudo_header_sum(frame: &[u8], h: &Headers) -> Result<u16> {
    let proto = match h.l4 {
        L4::Tcp => PROTO_TCP,
        L4::Udp => PROTO_UDP,
        _ => return Err(not_tcp_udp(h)),
    };
    let addrs = pseudo_addr_sum(frame, h)?;
    let len = h.end.checked_sub(h.l4_off).ok_or_else(|| {
        malformed(
            "transport segment",
            h.l4_off,
            "ends before it starts".into(),
        )
    })?;
    Ok(pseudo_sum(addrs, proto, len))
}

fn pseudo_addr_sum(frame: &[u8], h: &Headers) -> Result<u32> {
    match h.l3 {
        L3::Ipv4 => Ok(csum_add(0, get(frame, h.l3_off + 12, 8, "IPv4 addresses")?)),
        L3::Ipv6 => Ok(csum_add(0, get(frame, h.l3_off + 8, 32, "IPv6 addresses")?)),
        L3::Other(t) => Err(unsupported(
            "network protocol",
            h.l3_off,
            format!("EtherType {t:#06x} has no pseudo-header"),
        )),
    }
}

fn pseudo_sum(addrs: u32, proto: u8, l4_len: usize) -> u16 {
    // The IPv6 pseudo-header has a 32-bit length; for IPv4 the high half is 0.
    let len = l4_len as u64;
    fold64(u64::from(addrs) + u64::from(proto) + (len >> 16) + (len & 0xffff))
}

/// Computes a `Csum::Partial` checksum in software: sums from `start` to the
/// end of the frame (the field already holds the pseudo-header sum) and stores
/// the complement at `start + offset`. Like Linux `skb_checksum_help`, a zero
/// result is written as 0xffff, which UDP requires and TCP accepts as equal.
/// The packet then has `Csum::Valid`. Packets in other states are unchanged.
pub fn complete_checksum(pkt: &mut Packet) -> Result<()> {
    pkt.csum = complete_checksum_in(&mut pkt.data, pkt.csum)?;
    Ok(())
}

/// [`complete_checksum`] on the bytes of a frame in state `csum`, wherever
/// they live: the state the frame is in afterwards.
pub fn complete_checksum_in(data: &mut [u8], csum: Csum) -> Result<Csum> {
    let Csum::Partial { start, offset } = csum else {
        return Ok(csum);
    };
    let start = usize::from(start);
    let field = start + usize::from(offset);
    get(data, field, 2, "partial checksum field")?;
    let region = get(data, start, data.len() - start, "partial checksum region")?;
    let c = match !fold(csum_add(0, region)) {
        0 => 0xffff,
        c => c,
    };
    wr16(data, field, c, "partial checksum field")?;
    Ok(Csum::Valid)
}

/// Computes the TCP or UDP checksum of `frame` from scratch (pseudo-header plus
/// segment) and stores it. Whatever the field held before is ignored.
pub fn fill_l4_checksum(frame: &mut [u8]) -> Result<()> {
    let h = parse_headers(frame)?;
    let field = h.l4_off + usize::from(l4_csum_offset(&h)?);
    wr16(frame, field, 0, "transport checksum field")?;
    let c = !fold(l4_sum(frame, &h)?);
    let c = if c == 0 && h.l4 == L4::Udp { 0xffff } else { c };
    wr16(frame, field, c, "transport checksum field")
}

/// Checks the TCP or UDP checksum of `frame`. A UDP/IPv4 checksum of zero
/// means "none" and is accepted; over IPv6 it is refused (RFC 8200 §8.1).
pub fn verify_l4_checksum(frame: &[u8]) -> Result<bool> {
    let h = parse_headers(frame)?;
    let field = h.l4_off + usize::from(l4_csum_offset(&h)?);
    if h.l4 == L4::Udp && rd16(frame, field, "UDP checksum")? == 0 {
        return Ok(h.l3 == L3::Ipv4);
    }
    Ok(fold(l4_sum(frame, &h)?) == 0xffff)
}

/// Pseudo-header plus the transport segment, folded.
fn l4_sum(frame: &[u8], h: &Headers) -> Result<u32> {
    let pseudo = pseudo_header_sum(frame, h)?;
    let segment = get(frame, h.l4_off, h.end - h.l4_off, "transport segment")?;
    Ok(csum_add(u32::from(pseudo), segment))
}

/// Turns a TCP/UDP packet into `Csum::Partial`, finding the offsets by parsing
/// (Linux `skb_checksum_setup`). With `recalculate`, the checksum field is
/// first overwritten with the pseudo-header sum; without, the field must
/// already hold it (netif `csum_blank`).
pub fn checksum_setup(pkt: &mut Packet, recalculate: bool) -> Result<()> {
    pkt.csum = partial_setup(&mut pkt.data, recalculate)?;
    Ok(())
}

/// [`checksum_setup`] on the bytes of a frame: returns its `Csum::Partial`.
pub fn partial_setup(frame: &mut [u8], recalculate: bool) -> Result<Csum> {
    let h = parse_headers(frame)?;
    let offset = l4_csum_offset(&h)?;
    let start = to_u16(h.l4_off, "transport header offset", h.l4_off)?;
    if recalculate {
        let sum = pseudo_header_sum(frame, &h)?;
        let field = h.l4_off + usize::from(offset);
        wr16(frame, field, sum, "transport checksum field")?;
    }
    Ok(Csum::Partial { start, offset })
}

// ---------------------------------------------------------------------------
// Software segmentation (TSO, USO).

/// Where the offload driver puts the frames it makes: a `Vec` of owned
/// packets (the ports), or storage allocated once (netback's RX slab).
pub trait FrameSink {
    /// A buffer of exactly `len` bytes for the next frame, or None when
    /// the sink is full. The frame counts only once committed.
    fn begin(&mut self, len: usize) -> Option<&mut [u8]>;
    /// Keeps the frame last begun, with its offload state.
    fn commit(&mut self, csum: Csum, gso: Option<Gso>);
    /// Frames kept so far.
    fn frames(&self) -> usize;
    /// Forgets the frames kept after the first `frames`.
    fn rollback_to(&mut self, frames: usize);
}

impl FrameSink for Vec<Packet> {
    fn begin(&mut self, len: usize) -> Option<&mut [u8]> {
        self.push(Packet::new(vec![0; len]));
        self.last_mut().map(|p| &mut p.data[..])
    }

    fn commit(&mut self, csum: Csum, gso: Option<Gso>) {
        if let Some(p) = self.last_mut() {
            p.csum = csum;
            p.gso = gso;
        }
    }

    fn frames(&self) -> usize {
        self.len()
    }

    fn rollback_to(&mut self, frames: usize) {
        self.truncate(frames);
    }
}

/// Software TSO and USO: splits a TCP or UDP GSO packet into frames of at
/// most `gso.size` payload bytes each and appends them to `out`.
///
/// Each segment is a complete frame with copied Ethernet/IP/TCP headers; IPv4
/// total length, an incrementing IP ID and the header checksum; IPv6 payload
/// length; the sequence number advanced; FIN and PSH only on the last segment,
/// CWR only on the first; and a computed TCP checksum (`Csum::Valid`, no GSO).
/// A UDP GSO packet becomes whole datagrams, each with its own UDP length
/// and computed checksum, as Linux's `__udp_gso_segment` makes them.
/// A packet without GSO is appended unchanged (cloned). On error nothing is
/// appended.
pub fn segment(pkt: &Packet, out: &mut Vec<Packet>) -> Result<()> {
    segment_for(pkt, false, out)
}

/// [`segment`] for an egress that fills transport checksums itself when
/// `csum` is true: each segment then leaves with `Csum::Partial` (the field
/// holds its pseudo-header sum), as Linux's `skb_segment` leaves them
/// `CHECKSUM_PARTIAL` for a device with checksum offload and sums them
/// during its copy for one without (Menon 2006 §4.1, Figure 7's Csum NIC).
pub fn segment_for(pkt: &Packet, csum: bool, out: &mut Vec<Packet>) -> Result<()> {
    let Some(gso) = pkt.gso else {
        out.push(pkt.clone());
        return Ok(());
    };
    let f = FrameRef::private(&pkt.data, pkt.csum, pkt.gso);
    segment_frame(&f, gso, csum, out).map(|_| ())
}

/// Headers of a frame whose first bytes are not all private are copied
/// here to be parsed (Ethernet, a tag, IPv6 with extensions, TCP).
const SEG_HEAD: usize = 256;

/// [`segment_for`] from a frame wherever its bytes lie, into any sink:
/// false when the sink filled up. On error or a full sink nothing is kept.
fn segment_frame(f: &FrameRef<'_>, gso: Gso, csum: bool, out: &mut impl FrameSink) -> Result<bool> {
    each_segment(f, gso, out, |seg, headers, out, s| {
        let Some(data) = out.begin(headers.len() + s.len) else {
            return Ok(false);
        };
        let (hdr, payload) = data.split_at_mut(headers.len());
        hdr.copy_from_slice(headers);
        f.copy_out(seg.h.payload_off + s.lo, payload);
        let c = if csum {
            seg.fix_partial(hdr, s.i, s.lo, s.len)?
        } else {
            seg.fix(data, s.i, s.lo)?;
            Csum::Valid
        };
        out.commit(c, None);
        Ok(true)
    })
}

/// Segment `i` of a GSO frame: its payload's `len` bytes start `lo`
/// bytes into the GSO packet's payload.
#[derive(Clone, Copy)]
struct Seg {
    i: usize,
    lo: usize,
    len: usize,
}

/// Plans `f`'s segments and hands each, in order, to `one` with the
/// frame's headers; `one` says false when `out` is full. On error or a
/// full sink nothing is kept in `out`: what segmenting and gathered
/// segmenting share.
fn each_segment<S: FrameSink>(
    f: &FrameRef<'_>,
    gso: Gso,
    out: &mut S,
    mut one: impl FnMut(&Segmenting, &[u8], &mut S, Seg) -> Result<bool>,
) -> Result<bool> {
    let mark = out.frames();
    let mut copy = [0u8; SEG_HEAD];
    let head = head_of(f, &mut copy);
    let r = Segmenting::plan(head, f.len, gso).and_then(|(seg, mss)| {
        let headers = get(head, 0, seg.h.payload_off, "GSO headers")?;
        let payload_len = seg.h.end - seg.h.payload_off;
        for i in 0..seg.count {
            let lo = i * mss;
            let len = (lo + mss).min(payload_len) - lo.min(payload_len);
            if !one(&seg, headers, out, Seg { i, lo, len })? {
                return Ok(false);
            }
        }
        Ok(true)
    });
    if !matches!(r, Ok(true)) {
        out.rollback_to(mark);
    }
    r
}

/// The frame's first bytes, enough to parse its headers: its private head
/// if it holds the whole frame, else a copy in `copy`.
fn head_of<'a>(f: &'a FrameRef<'_>, copy: &'a mut [u8; SEG_HEAD]) -> &'a [u8] {
    if f.head.len() >= f.len {
        f.head
    } else {
        let n = f.len.min(SEG_HEAD);
        f.copy_out(0, &mut copy[..n]);
        &copy[..n]
    }
}

/// Software TSO and USO for an egress that gathers a frame from pieces and
/// fills transport checksums itself: a NIC with scatter/gather and
/// checksum offload, whose offload driver then copies no payload (Menon
/// 2006 §4.1, Figure 7). Each segment's rewritten headers go to `heads` as
/// one frame with `Csum::Partial` (the field holds the pseudo-header sum,
/// for the egress to complete), and `payload` is told where in `f` its
/// payload lies, `(offset, length)`: the caller gathers it from there.
/// Headers and lengths are as [`segment`] makes them. False when `heads`
/// filled up; on error or a full sink nothing is kept in `heads`.
pub fn segment_gathered(
    f: &FrameRef<'_>,
    gso: Gso,
    heads: &mut impl FrameSink,
    payload: &mut impl FnMut(usize, usize),
) -> Result<bool> {
    each_segment(f, gso, heads, |seg, headers, heads, s| {
        let Some(data) = heads.begin(headers.len()) else {
            return Ok(false);
        };
        data.copy_from_slice(headers);
        let csum = seg.fix_partial(data, s.i, s.lo, s.len)?;
        heads.commit(csum, None);
        payload(seg.h.payload_off + s.lo, s.len);
        Ok(true)
    })
}

impl Segmenting {
    /// Parses a GSO frame's headers (`head`, of a frame of `len` bytes)
    /// and plans its segments: the plan and the segment size.
    fn plan(head: &[u8], len: usize, gso: Gso) -> Result<(Segmenting, usize)> {
        const WHAT: &str = "GSO packet";
        let h = parse_headers_of(head, len)?;
        gso_fits(gso.kind, &h)?;
        let mss = usize::from(gso.size);
        if mss == 0 {
            return Err(malformed(WHAT, 0, "GSO size (MSS) is 0".into()));
        }
        get(head, 0, h.payload_off, "GSO headers")?;
        let payload_len = h.end - h.payload_off;
        let (seq0, flags0) = match h.l4 {
            L4::Tcp => (
                rd32(head, h.l4_off + 4, "TCP sequence number")?,
                get(head, h.l4_off + 13, 1, "TCP flags")?[0],
            ),
            _ => (0, 0),
        };
        let id0 = match h.l3 {
            L3::Ipv4 => rd16(head, h.l3_off + 4, "IPv4 identification")?,
            _ => 0,
        };
        let seg = Segmenting {
            h,
            addrs: pseudo_addr_sum(head, &h)?,
            seq0,
            flags0,
            id0,
            count: payload_len.div_ceil(mss).max(1),
        };
        Ok((seg, mss))
    }
}

/// Refuses a GSO kind the frame's headers do not match: TCP GSO of its
/// IP version over TCP, UDP segmentation over UDP.
pub fn gso_fits(kind: GsoKind, h: &Headers) -> Result<()> {
    const WHAT: &str = "GSO packet";
    let want = match (kind, h.l3) {
        (GsoKind::TcpV4, L3::Ipv4) | (GsoKind::TcpV6, L3::Ipv6) => L4::Tcp,
        (GsoKind::UdpL4, L3::Ipv4 | L3::Ipv6) => L4::Udp,
        (kind, l3) => {
            return Err(malformed(
                WHAT,
                h.l3_off,
                format!("{kind:?} GSO on an {l3:?} frame"),
            ))
        }
    };
    if h.l4 != want {
        return Err(malformed(
            WHAT,
            h.l4_off,
            format!("{kind:?} GSO without a {want:?} header ({:?})", h.l4),
        ));
    }
    Ok(())
}

/// What every segment of one GSO packet shares.
struct Segmenting {
    h: Headers,
    addrs: u32,
    seq0: u32,
    flags0: u8,
    id0: u16,
    count: usize,
}

impl Segmenting {
    /// Rewrites segment `i`, whose payload starts `lo` bytes into the GSO
    /// packet's: lengths, IPv4 ID and header checksum, then the transport
    /// header's (for TCP the sequence number and flags; for UDP the
    /// datagram's length) and its checksum.
    fn fix(&self, data: &mut [u8], i: usize, lo: usize) -> Result<()> {
        self.fix_ip(data, i, data.len() - self.h.payload_off)?;
        match self.h.l4 {
            L4::Udp => self.fix_udp(data),
            _ => self.fix_tcp(data, i, lo),
        }
    }

    /// Rewrites the headers alone (`hdr`, the frame's headers) of segment
    /// `i`, whose `chunk` bytes of payload start `lo` bytes into the GSO
    /// packet's, as [`Segmenting::fix`] does, but leaves the transport
    /// checksum partial: the field holds the pseudo-header sum, and the
    /// egress sums the rest. Returns that `Csum::Partial`.
    fn fix_partial(&self, hdr: &mut [u8], i: usize, lo: usize, chunk: usize) -> Result<Csum> {
        let h = &self.h;
        self.fix_ip(hdr, i, chunk)?;
        let seg_len = h.payload_off - h.l4_off + chunk;
        let proto = match h.l4 {
            L4::Udp => {
                let ulen = to_u16(seg_len, "UDP length", h.l4_off)?;
                wr16(hdr, h.l4_off + 4, ulen, "UDP length")?;
                PROTO_UDP
            }
            _ => {
                self.fix_tcp_seq_flags(hdr, i, lo)?;
                PROTO_TCP
            }
        };
        let offset = l4_csum_offset(h)?;
        let start = to_u16(h.l4_off, "transport header offset", h.l4_off)?;
        let sum = pseudo_sum(self.addrs, proto, seg_len);
        wr16(
            hdr,
            h.l4_off + usize::from(offset),
            sum,
            "transport checksum field",
        )?;
        Ok(Csum::Partial { start, offset })
    }

    /// The IP header of segment `i`, of `chunk` payload bytes: its length,
    /// and for IPv4 its ID and header checksum.
    fn fix_ip(&self, data: &mut [u8], i: usize, chunk: usize) -> Result<()> {
        let h = &self.h;
        let ip_len_base = h.payload_off - h.l3_off; // IP header(s) + L4 header
        match h.l3 {
            L3::Ipv4 => {
                let ihl = h.l4_off - h.l3_off; // no extension headers in IPv4
                let total = to_u16(ip_len_base + chunk, "IPv4 total length", h.l3_off)?;
                wr16(data, h.l3_off + 2, total, "IPv4 total length")?;
                let id = self.id0.wrapping_add(i as u16);
                wr16(data, h.l3_off + 4, id, "IPv4 identification")?;
                let c = ipv4_header_checksum(get(data, h.l3_off, ihl, "IPv4 header")?);
                wr16(data, h.l3_off + 10, c, "IPv4 header checksum")?;
            }
            _ => {
                let plen = ip_len_base - IPV6_HLEN + chunk;
                let plen = to_u16(plen, "IPv6 payload length", h.l3_off)?;
                wr16(data, h.l3_off + 4, plen, "IPv6 payload length")?;
            }
        }
        Ok(())
    }

    /// A UDP segment: a whole datagram, its length and checksum its own
    /// (a computed zero is sent as 0xffff, RFC 768).
    fn fix_udp(&self, data: &mut [u8]) -> Result<()> {
        let h = &self.h;
        let seg_len = data.len() - h.l4_off;
        let ulen = to_u16(seg_len, "UDP length", h.l4_off)?;
        wr16(data, h.l4_off + 4, ulen, "UDP length")?;
        let field = h.l4_off + usize::from(UDP_CSUM_OFF);
        wr16(data, field, 0, "UDP checksum")?;
        let pseudo = pseudo_sum(self.addrs, PROTO_UDP, seg_len);
        let udp = get(data, h.l4_off, seg_len, "UDP datagram")?;
        let c = match !fold(csum_add(u32::from(pseudo), udp)) {
            0 => 0xffff,
            c => c,
        };
        wr16(data, field, c, "UDP checksum")
    }

    /// A TCP segment: its sequence number, its flags (FIN and PSH on the
    /// last only, CWR on the first only) and its checksum.
    fn fix_tcp(&self, data: &mut [u8], i: usize, lo: usize) -> Result<()> {
        self.fix_tcp_seq_flags(data, i, lo)?;
        let h = &self.h;
        let field = h.l4_off + usize::from(TCP_CSUM_OFF);
        wr16(data, field, 0, "TCP checksum")?;
        let seg_len = data.len() - h.l4_off;
        let pseudo = pseudo_sum(self.addrs, PROTO_TCP, seg_len);
        let tcp = get(data, h.l4_off, seg_len, "TCP segment")?;
        let c = !fold(csum_add(u32::from(pseudo), tcp));
        wr16(data, field, c, "TCP checksum")
    }

    /// Segment `i`'s TCP sequence number and flags (FIN and PSH on the
    /// last only, CWR on the first only).
    fn fix_tcp_seq_flags(&self, data: &mut [u8], i: usize, lo: usize) -> Result<()> {
        let h = &self.h;
        let seq = self.seq0.wrapping_add(lo as u32);
        wr32(data, h.l4_off + 4, seq, "TCP sequence number")?;
        let mut flags = self.flags0;
        if i + 1 < self.count {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            flags &= !TCP_CWR;
        }
        get_mut(data, h.l4_off + 13, 1, "TCP flags")?[0] = flags;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The offload driver proper.

/// What an egress (a port, a guest's virtual NIC) accepts and does itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Offloads {
    /// Takes a frame in several pieces (gathered); without, the frame is
    /// copied into one contiguous buffer first.
    pub sg: bool,
    /// Takes `Csum::Partial` packets and fills the checksum.
    pub csum: bool,
    /// Takes TCP/IPv4 GSO packets.
    pub tso4: bool,
    /// Takes TCP/IPv6 GSO packets.
    pub tso6: bool,
    /// Takes UDP GSO packets (USO), IPv4 and IPv6.
    pub uso: bool,
}

impl Offloads {
    /// A plain NIC: everything must be done in software.
    pub const NONE: Offloads = Offloads {
        sg: false,
        csum: false,
        tso4: false,
        tso6: false,
        uso: false,
    };
    /// Takes everything as is.
    pub const ALL: Offloads = Offloads {
        sg: true,
        csum: true,
        tso4: true,
        tso6: true,
        uso: true,
    };

    /// Whether a GSO packet of `kind` may pass. TSO needs scatter-gather and
    /// checksum offload too (as Linux drops TSO from a device without them).
    pub fn accepts_gso(self, kind: GsoKind) -> bool {
        self.sg
            && self.csum
            && match kind {
                GsoKind::TcpV4 => self.tso4,
                GsoKind::TcpV6 => self.tso6,
                GsoKind::UdpL4 => self.uso,
            }
    }

    /// Whether [`prepare`] would pass a frame with this offload state
    /// untouched, so it can go out without being copied into a [`Packet`].
    pub fn passes_as_is(self, csum: Csum, gso: Option<crate::packet::Gso>) -> bool {
        match gso {
            Some(g) => self.accepts_gso(g.kind) && matches!(csum, Csum::Partial { .. }),
            None => self.csum || !matches!(csum, Csum::Partial { .. }),
        }
    }
}

impl From<abi::offloads::Caps> for Offloads {
    /// A negotiated or declared capability set. Checksum offload counts only
    /// when it holds for IPv4 and IPv6 alike (a frame of the other version
    /// then gets its checksum here, which every receiver takes); TSO only
    /// with it, as a TAP and Linux refuse TSO without checksum offload.
    fn from(c: abi::offloads::Caps) -> Offloads {
        let c = c.sound();
        let csum = c.csum && c.csum6;
        Offloads {
            sg: c.sg,
            csum,
            tso4: csum && c.tso4,
            tso6: csum && c.tso6,
            uso: csum && c.uso,
        }
    }
}

/// The software offload driver (Menon 2006 §3): makes `pkt` fit an egress with
/// capabilities `caps` and appends the result to `out`.
///
/// A GSO packet of a kind the egress cannot take is segmented (the segments'
/// checksums computed, or left partial for an egress with checksum
/// offload); one it can take passes with `Csum::Partial`
/// (set up from the headers if it was not). A `Csum::Partial` packet gets its
/// checksum computed when the egress has no checksum offload. Everything else
/// passes through untouched; the data is moved, never copied, unless segmented.
pub fn prepare(mut pkt: Packet, caps: Offloads, out: &mut Vec<Packet>) -> Result<()> {
    if let Some(gso) = pkt.gso {
        if !caps.accepts_gso(gso.kind) {
            return segment_for(&pkt, caps.csum, out);
        }
        if !matches!(pkt.csum, Csum::Partial { .. }) {
            // A GSO packet handed to hardware must carry the pseudo-header sum.
            checksum_setup(&mut pkt, true)?;
        }
    } else if !caps.csum {
        complete_checksum(&mut pkt)?;
    }
    out.push(pkt);
    Ok(())
}

/// [`prepare`] for a frame wherever its bytes lie, into any sink (netback's
/// RX slab: no allocation per frame). The frame is copied once into the
/// sink and shaped there; false when the sink is full. On error or a full
/// sink nothing is kept.
pub fn prepare_frame(f: &FrameRef<'_>, caps: Offloads, out: &mut impl FrameSink) -> Result<bool> {
    if let Some(gso) = f.gso {
        if !caps.accepts_gso(gso.kind) {
            return segment_frame(f, gso, caps.csum, out);
        }
    }
    let mark = out.frames();
    let Some(data) = out.begin(f.len) else {
        return Ok(false);
    };
    f.copy_out(0, data);
    let csum = match (f.gso, f.csum) {
        (Some(_), Csum::Partial { .. }) => Ok(f.csum),
        // A GSO packet handed to hardware must carry the pseudo-header sum.
        (Some(_), _) => partial_setup(data, true),
        (None, c) if !caps.csum => complete_checksum_in(data, c),
        (None, c) => Ok(c),
    };
    match csum {
        Ok(c) => {
            out.commit(c, f.gso);
            Ok(true)
        }
        Err(e) => {
            out.rollback_to(mark);
            Err(e)
        }
    }
}

#[cfg(test)]
mod caps_tests {
    use super::Offloads;

    #[test]
    fn tso_goes_with_checksum_offload_for_one_ip_version() {
        let c = abi::offloads::Caps::parse("sg+csum4+tso4").unwrap();
        let o = Offloads::from(c);
        assert!(!o.csum && !o.tso4 && !o.tso6 && o.sg, "{o:?}");
        let all = Offloads::from(abi::offloads::Caps::parse("tso").unwrap());
        assert!(all.csum && all.tso4 && all.tso6 && all.sg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    // ---- Checksum arithmetic. ----

    #[test]
    fn ipv4_header_checksum_known_vector() {
        // The classic worked example: 192.168.0.1 -> 192.168.0.199, UDP, checksum 0xb861.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_header_checksum(&hdr), 0xb861);
        let mut zeroed = hdr;
        zeroed[10] = 0;
        zeroed[11] = 0;
        assert_eq!(ipv4_header_checksum(&zeroed), 0xb861);
        assert_eq!(internet_checksum(&hdr), 0, "a correct header sums to zero");
    }

    #[test]
    fn rfc1071_example_sum() {
        // RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(csum_add(0, &data)), 0xddf2);
        assert_eq!(internet_checksum(&data), !0xddf2);
    }

    #[test]
    fn csum_add_matches_reference() {
        let mut rng = Rng::new(1);
        for len in (0..70).chain([1499, 1500, 9001, 65535]) {
            let data = rng.bytes(len);
            assert_eq!(
                internet_checksum(&data),
                ref_checksum(&[&data]),
                "len {len}"
            );
            // Split at an even offset and add the parts.
            let cut = (len / 2) & !1;
            let (a, b) = data.split_at(cut);
            assert_eq!(!fold(csum_add(csum_add(0, a), b)), ref_checksum(&[&data]));
        }
        assert_eq!(internet_checksum(&[0xff; 64]), 0);
        assert_eq!(internet_checksum(&[]), 0xffff);
    }

    // ---- Parsing. ----

    #[test]
    fn parse_tcp4_udp4() {
        let f = tcp4(&[1, 2, 3]);
        let h = parse_headers(&f).unwrap();
        assert_eq!(
            h,
            Headers {
                l3: L3::Ipv4,
                l3_off: 14,
                l4: L4::Tcp,
                l4_off: 34,
                payload_off: 34 + 32,
                end: f.len()
            }
        );
        let f = frame(&v4(), 17, udp_seg(&[9; 5]), true);
        let h = parse_headers(&f).unwrap();
        assert_eq!(
            (h.l4, h.l4_off, h.payload_off, h.end),
            (L4::Udp, 34, 42, 47)
        );
    }

    #[test]
    fn parse_ipv4_options_and_padding() {
        let spec = Spec {
            ip_opts: vec![1, 1, 1, 0, 1, 1, 1, 0],
            ..v4()
        };
        let mut f = frame(&spec, 6, tcp_seg(0, 0x02, &[], &[]), true);
        let real_len = f.len();
        f.extend_from_slice(&[0xaa; 6]); // trailing link-layer bytes
        let h = parse_headers(&f).unwrap();
        assert_eq!(
            (h.l4_off, h.payload_off, h.end),
            (14 + 28, 14 + 28 + 20, real_len)
        );
        assert!(
            verify_l4_checksum(&f).unwrap(),
            "padding is not checksummed"
        );

        // A short UDP datagram padded to the Ethernet minimum.
        let mut f = frame(&v4(), 17, udp_seg(&[1, 2]), true);
        assert_eq!(f.len(), 44);
        f.resize(60, 0x55);
        let h = parse_headers(&f).unwrap();
        assert_eq!(h.end, 44);
        assert!(verify_l4_checksum(&f).unwrap());
        fill_l4_checksum(&mut f).unwrap();
        assert!(verify_l4_checksum(&f).unwrap());
    }

    #[test]
    fn parse_vlan() {
        let spec = Spec {
            vlan: Some(0x2005),
            ..v6()
        };
        let f = frame(&spec, 6, tcp_seg(0, 0x10, &[], &[7; 10]), true);
        let h = parse_headers(&f).unwrap();
        assert_eq!(
            (h.l3, h.l3_off, h.l4, h.l4_off),
            (L3::Ipv6, 18, L4::Tcp, 58)
        );
        assert_eq!(partial_csum_for(&f).unwrap(), (58, 16));
        assert!(verify_l4_checksum(&f).unwrap());
    }

    #[test]
    fn parse_ipv6_extension_headers() {
        let spec = Spec {
            ext: vec![0, 43, 60],
            ..v6()
        };
        let f = frame(&spec, 17, udp_seg(&[1; 33]), true);
        let h = parse_headers(&f).unwrap();
        let l4_off = 14 + 40 + 8 + 8 + 16;
        assert_eq!(
            (h.l3, h.l4, h.l4_off, h.payload_off),
            (L3::Ipv6, L4::Udp, l4_off, l4_off + 8)
        );
        assert_eq!(partial_csum_for(&f).unwrap(), (l4_off as u16, 6));
        assert!(verify_l4_checksum(&f).unwrap());

        // Hop-by-hop options anywhere but first are refused.
        let bad = Spec {
            ext: vec![60, 0],
            ..v6()
        };
        let f = frame(&bad, 6, tcp_seg(0, 0x10, &[], &[]), false);
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Malformed { .. })
        ));

        // A chain longer than the bound is refused, not walked forever.
        let long = Spec {
            ext: vec![60; MAX_IPV6_EXT_HEADERS + 1],
            ..v6()
        };
        let f = frame(&long, 6, tcp_seg(0, 0x10, &[], &[]), false);
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Unsupported { .. })
        ));
    }

    #[test]
    fn fragments_are_not_l4() {
        for frag in [0x2000u16, 0x0001, 0x2010, 0x0100] {
            let spec = Spec { frag, ..v4() };
            let f = frame(&spec, 6, tcp_seg(0, 0x10, &[], &[1; 20]), false);
            let h = parse_headers(&f).unwrap();
            assert_eq!((h.l4, h.l4_off, h.payload_off), (L4::Other(6), 34, 34));
            assert!(matches!(
                partial_csum_for(&f),
                Err(OffloadError::Unsupported { .. })
            ));
            assert!(verify_l4_checksum(&f).is_err());
        }
        // DF alone is not a fragment.
        let spec = Spec {
            frag: 0x4000,
            ..v4()
        };
        let f = frame(&spec, 6, tcp_seg(0, 0x10, &[], &[1; 20]), true);
        assert_eq!(parse_headers(&f).unwrap().l4, L4::Tcp);

        let spec = Spec {
            ext: vec![0, 44],
            ..v6()
        };
        let f = frame(&spec, 6, tcp_seg(0, 0x10, &[], &[]), false);
        let h = parse_headers(&f).unwrap();
        assert_eq!((h.l4, h.l4_off), (L4::Other(44), 14 + 40 + 8));
    }

    #[test]
    fn non_ip_and_bad_versions() {
        let mut arp = vec![0xff; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        let h = parse_headers(&arp).unwrap();
        assert_eq!(
            (h.l3, h.l4, h.end),
            (L3::Other(0x0806), L4::Absent, arp.len())
        );
        assert!(matches!(
            partial_csum_for(&arp),
            Err(OffloadError::Unsupported { .. })
        ));

        let mut f = tcp4(&[]);
        f[14] = 0x65; // version 6 in an IPv4 EtherType
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Malformed { .. })
        ));
        let mut f = tcp4(&[]);
        f[14] = 0x44; // IHL 16 bytes
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Malformed { .. })
        ));
        let mut f = tcp4(&[]);
        f[34 + 12] = 0x40; // TCP data offset 16 bytes
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Malformed { .. })
        ));
        let mut f = frame(&v4(), 17, udp_seg(&[1; 8]), true);
        f[34 + 4..34 + 6].copy_from_slice(&4u16.to_be_bytes());
        assert!(matches!(
            parse_headers(&f),
            Err(OffloadError::Malformed { .. })
        ));
    }

    #[test]
    fn error_messages_say_what_and_where() {
        let f = tcp4(&[1; 10]);
        let e = parse_headers(&f[..40]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "IPv4 packet truncated: needs 62 bytes at offset 14, only 26 available"
        );
    }

    // ---- Checksums on frames. ----

    #[test]
    fn fill_and_verify_match_reference() {
        for (name, good) in samples() {
            if name.contains("fragment") {
                continue;
            }
            assert!(verify_l4_checksum(&good).unwrap(), "{name}");
            let h = parse_headers(&good).unwrap();
            let field = h.l4_off + if h.l4 == L4::Tcp { 16 } else { 6 };
            let mut f = good.clone();
            f[field] ^= 0x5a;
            assert!(!verify_l4_checksum(&f).unwrap(), "{name}: corrupted field");
            fill_l4_checksum(&mut f).unwrap();
            assert_eq!(f, good, "{name}: fill reproduces the reference checksum");
            let last = f.len() - 1;
            f[last] ^= 1;
            assert!(
                !verify_l4_checksum(&f).unwrap(),
                "{name}: corrupted payload"
            );
        }
    }

    #[test]
    fn udp_zero_checksum() {
        // A datagram whose checksum computes to 0 is sent as 0xffff.
        let mut f = frame(&v4(), 17, udp_seg(&[0, 0, 0x12, 0x34]), false);
        let h = parse_headers(&f).unwrap();
        fill_l4_checksum(&mut f).unwrap();
        let c = be16(&f, h.l4_off + 6);
        // Put c (the complement of the sum) into the payload word that was 0:
        // the sum becomes 0xffff and the checksum 0.
        f[h.payload_off..h.payload_off + 2].copy_from_slice(&c.to_be_bytes());
        fill_l4_checksum(&mut f).unwrap();
        assert_eq!(be16(&f, h.l4_off + 6), 0xffff);
        assert!(verify_l4_checksum(&f).unwrap());

        // Zero means "no checksum" over IPv4, and is invalid over IPv6.
        let f = frame(&v4(), 17, udp_seg(&[1, 2, 3]), false);
        assert_eq!(be16(&f, 14 + 20 + 6), 0);
        assert!(verify_l4_checksum(&f).unwrap());
        let mut f6 = frame(&v6(), 17, udp_seg(&[1, 2, 3]), false);
        assert!(!verify_l4_checksum(&f6).unwrap());
        fill_l4_checksum(&mut f6).unwrap();
        assert!(verify_l4_checksum(&f6).unwrap());
    }

    #[test]
    fn complete_checksum_from_pseudo_header() {
        for (name, good) in samples() {
            if name.contains("fragment") {
                continue;
            }
            // What a guest hands over: pseudo-header sum in the field.
            let h = parse_headers(&good).unwrap();
            let (start, offset) = partial_csum_for(&good).unwrap();
            let field = usize::from(start + offset);
            let mut data = good.clone();
            data[field..field + 2]
                .copy_from_slice(&pseudo_header_sum(&good, &h).unwrap().to_be_bytes());
            let mut pkt = Packet {
                data,
                csum: Csum::Partial { start, offset },
                gso: None,
            };
            assert!(!verify_l4_checksum(&pkt.data).unwrap());
            complete_checksum(&mut pkt).unwrap();
            assert_eq!(pkt.csum, Csum::Valid);
            assert!(verify_l4_checksum(&pkt.data).unwrap(), "{name}");
            assert_eq!(pkt.data, good, "{name}");

            // checksum_setup(recalculate) produces the same partial packet.
            let mut p2 = Packet::new(good.clone());
            checksum_setup(&mut p2, true).unwrap();
            assert_eq!(p2.csum, Csum::Partial { start, offset });
            complete_checksum(&mut p2).unwrap();
            assert_eq!(p2.data, good);
        }
        // Other states are left alone.
        let mut p = Packet::new(vec![1, 2, 3]);
        complete_checksum(&mut p).unwrap();
        assert_eq!(p, Packet::new(vec![1, 2, 3]));
        // Offsets past the end are an error, not a panic.
        let mut p = Packet {
            data: vec![0; 20],
            csum: Csum::Partial {
                start: 10,
                offset: 9,
            },
            gso: None,
        };
        assert!(matches!(
            complete_checksum(&mut p),
            Err(OffloadError::Truncated { .. })
        ));
        assert_eq!(
            p.csum,
            Csum::Partial {
                start: 10,
                offset: 9
            }
        );
    }

    // ---- Segmentation. ----

    fn check_segments(pkt: &Packet, segs: &[Packet], payload: &[u8], mss: usize) {
        let h0 = parse_headers(&pkt.data).unwrap();
        let hdrs = h0.payload_off;
        assert_eq!(segs.len(), payload.len().div_ceil(mss).max(1));
        let seq0 = be32(&pkt.data, h0.l4_off + 4);
        let id0 = be16(&pkt.data, h0.l3_off + 4);
        let flags0 = pkt.data[h0.l4_off + 13];
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let d = &s.data;
            assert!(d.len() <= hdrs + mss, "segment {i} too long: {}", d.len());
            assert_eq!((s.csum, s.gso), (Csum::Valid, None));
            let h = parse_headers(d).unwrap();
            assert_eq!((h.l4_off, h.payload_off, h.end), (h0.l4_off, hdrs, d.len()));
            assert_eq!(
                d[..h.l3_off],
                pkt.data[..h.l3_off],
                "Ethernet header copied"
            );
            match h.l3 {
                L3::Ipv4 => {
                    let ip = &d[h.l3_off..h.l4_off];
                    assert_eq!(ipv4_header_checksum(ip), be16(ip, 10));
                    assert_eq!(ref_checksum(&[ip]), 0, "IPv4 header {i}");
                    assert_eq!(usize::from(be16(ip, 2)), d.len() - h.l3_off);
                    assert_eq!(be16(ip, 4), id0.wrapping_add(i as u16));
                }
                _ => assert_eq!(usize::from(be16(d, h.l3_off + 4)), d.len() - h.l3_off - 40),
            }
            // TCP checksum, by the library and independently.
            assert!(verify_l4_checksum(d).unwrap(), "TCP checksum {i}");
            let tcp = &d[h.l4_off..];
            let mut zeroed = tcp.to_vec();
            zeroed[16] = 0;
            zeroed[17] = 0;
            let len = tcp.len() as u32;
            let pseudo: Vec<u8> = match h.l3 {
                L3::Ipv4 => [&SRC4[..], &DST4[..], &[0, 6], &(len as u16).to_be_bytes()].concat(),
                _ => [&SRC6[..], &DST6[..], &len.to_be_bytes(), &[0, 0, 0, 6]].concat(),
            };
            assert_eq!(be16(tcp, 16), ref_checksum(&[&pseudo, &zeroed]));
            // Sequence numbers contiguous (wrapping), flags placed right.
            assert_eq!(be32(tcp, 4), seq0.wrapping_add(joined.len() as u32));
            let flags = tcp[13];
            let last = i + 1 == segs.len();
            assert_eq!(
                flags & (TCP_FIN | TCP_PSH),
                if last { flags0 & 0x09 } else { 0 }
            );
            assert_eq!(flags & TCP_CWR, if i == 0 { flags0 & 0x80 } else { 0 });
            assert_eq!(flags & 0x10, flags0 & 0x10, "ACK kept");
            joined.extend_from_slice(&d[hdrs..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn segment_64k_tcpv4() {
        let payload = Rng::new(4).bytes(65535 - 20 - 32);
        let mut spec = v4();
        spec.id = 0xfff0; // the IP ID wraps during the burst
        let pkt = gso_packet(&spec, &payload, 0x80 | 0x10 | 0x08 | 0x01, 1448);
        let mut out = Vec::new();
        segment(&pkt, &mut out).unwrap();
        assert_eq!(out.len(), 46);
        check_segments(&pkt, &out, &payload, 1448);
    }

    #[test]
    fn segment_64k_tcpv6() {
        let payload = Rng::new(6).bytes(65535 - 32); // odd length
        let pkt = gso_packet(&v6(), &payload, 0x10 | 0x08 | 0x01, 1428);
        let mut out = Vec::new();
        segment(&pkt, &mut out).unwrap();
        assert_eq!(out.len(), 46);
        check_segments(&pkt, &out, &payload, 1428);
    }

    #[test]
    fn segment_tcpv6_with_extension_header_and_vlan() {
        let spec = Spec {
            vlan: Some(7),
            ext: vec![0, 60],
            ..v6()
        };
        let payload = Rng::new(7).bytes(5000);
        let pkt = gso_packet(&spec, &payload, 0x18, 1000);
        let mut out = Vec::new();
        segment(&pkt, &mut out).unwrap();
        assert_eq!(out.len(), 5);
        check_segments(&pkt, &out, &payload, 1000);
    }

    /// A QinQ frame (an 802.1ad S-tag outside the C-tag) is found to be
    /// TCP behind its two tags, so checksummed and segmented as a frame
    /// with one tag is. The driver's own parser stopped at the S-tag
    /// (`L3::Other(0x88a8)`) and refused both.
    #[test]
    fn segment_qinq() {
        let spec = Spec {
            vlan: Some(7),
            ..v4()
        };
        let payload = Rng::new(9).bytes(3000);
        let mut data = frame(&spec, 6, tcp_seg(1, 0x18, &TS_OPT, &payload), false);
        data.splice(12..12, [0x88, 0xa8, 0x00, 0x64]);
        let mut pkt = Packet::new(data);
        pkt.gso = Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1000,
            ecn: false,
        });
        checksum_setup(&mut pkt, true).unwrap();
        assert_eq!(
            pkt.csum,
            Csum::Partial {
                start: 14 + 8 + 20,
                offset: 16
            }
        );
        let mut out = Vec::new();
        segment(&pkt, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        check_segments(&pkt, &out, &payload, 1000);
    }

    #[test]
    fn segment_small_and_empty() {
        for len in [0, 1, 1447, 1448] {
            let payload = vec![0xab; len];
            let pkt = gso_packet(&v4(), &payload, 0x19, 1448);
            let mut out = Vec::new();
            segment(&pkt, &mut out).unwrap();
            assert_eq!(out.len(), 1, "len {len}");
            check_segments(&pkt, &out, &payload, 1448);
        }
        // Not GSO: passed through as is.
        let plain = Packet::new(tcp4(&[1, 2]));
        let mut out = Vec::new();
        segment(&plain, &mut out).unwrap();
        assert_eq!(out, vec![plain]);
    }

    /// A UDP GSO datagram of `payload`, to be cut at `size`, as a TAP with
    /// USO hands it over (partial checksum, the UDP length the whole's).
    fn udp_gso_packet(spec: &Spec, payload: &[u8], size: u16) -> Packet {
        let mut p = Packet::new(frame(spec, 17, udp_seg(payload), false));
        checksum_setup(&mut p, true).unwrap();
        p.gso = Some(Gso {
            kind: GsoKind::UdpL4,
            size,
            ecn: false,
        });
        p
    }

    /// Each segment a whole datagram: its IP and UDP lengths its own, its
    /// checksum right by an independent sum, the payloads in order.
    fn check_udp_segments(pkt: &Packet, segs: &[Packet], payload: &[u8], size: usize) {
        let h0 = parse_headers(&pkt.data).unwrap();
        assert_eq!(segs.len(), payload.len().div_ceil(size).max(1));
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let d = &s.data;
            assert_eq!((s.csum, s.gso), (Csum::Valid, None));
            let h = parse_headers(d).unwrap();
            assert_eq!(
                (h.l4, h.l4_off, h.payload_off),
                (L4::Udp, h0.l4_off, h0.payload_off)
            );
            assert_eq!(
                d[..h.l3_off],
                pkt.data[..h.l3_off],
                "Ethernet header copied"
            );
            let ports = h.l4_off..h.l4_off + 4;
            assert_eq!(d[ports.clone()], pkt.data[ports], "UDP ports copied");
            let udp = &d[h.l4_off..];
            assert_eq!(usize::from(be16(udp, 4)), udp.len(), "UDP length {i}");
            assert!(udp.len() - 8 <= size);
            let mut zeroed = udp.to_vec();
            zeroed[6] = 0;
            zeroed[7] = 0;
            let len = udp.len() as u32;
            let pseudo: Vec<u8> = match h.l3 {
                L3::Ipv4 => [&SRC4[..], &DST4[..], &[0, 17], &(len as u16).to_be_bytes()].concat(),
                _ => [&SRC6[..], &DST6[..], &len.to_be_bytes(), &[0, 0, 0, 17]].concat(),
            };
            assert_eq!(
                be16(udp, 6),
                ref_checksum(&[&pseudo, &zeroed]),
                "UDP checksum {i}"
            );
            assert!(verify_l4_checksum(d).unwrap());
            if h.l3 == L3::Ipv4 {
                let ip = &d[h.l3_off..h.l4_off];
                assert_eq!(ref_checksum(&[ip]), 0, "IPv4 header {i}");
                assert_eq!(usize::from(be16(ip, 2)), d.len() - h.l3_off);
            } else {
                assert_eq!(usize::from(be16(d, h.l3_off + 4)), udp.len());
            }
            joined.extend_from_slice(&udp[8..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn segment_udp_into_whole_datagrams() {
        for (spec, len) in [(v4(), 65_000), (v6(), 4001), (v4(), 1400), (v4(), 0)] {
            let payload = Rng::new(len as u64).bytes(len);
            let pkt = udp_gso_packet(&spec, &payload, 1400);
            let mut out = Vec::new();
            segment(&pkt, &mut out).unwrap();
            check_udp_segments(&pkt, &out, &payload, 1400);
            // The offload driver cuts it for an egress without USO, and
            // passes it whole to one with.
            let mut out = Vec::new();
            let no_uso = Offloads {
                uso: false,
                ..Offloads::ALL
            };
            prepare(pkt.clone(), no_uso, &mut out).unwrap();
            completed_by_the_egress(&mut out);
            check_udp_segments(&pkt, &out, &payload, 1400);
            let mut out = Vec::new();
            prepare(pkt.clone(), Offloads::ALL, &mut out).unwrap();
            assert_eq!(out, vec![pkt]);
        }
    }

    /// Segments made for an egress with checksum offload leave partial;
    /// completes them as that egress would.
    fn completed_by_the_egress(segs: &mut [Packet]) {
        for s in segs {
            assert!(matches!(s.csum, Csum::Partial { .. }), "{:?}", s.csum);
            complete_checksum(s).unwrap();
        }
    }

    /// Gathered segmentation, its headers joined to the payload ranges it
    /// names and the partial checksums completed as the egress would, is
    /// byte for byte what copying segmentation makes; a malformed packet
    /// leaves nothing.
    #[test]
    fn gathered_segments_completed_equal_copied_ones() {
        let tcp = |spec: Spec, len: usize, mss: u16| {
            gso_packet(&spec, &Rng::new(len as u64).bytes(len), 0x10 | 0x08, mss)
        };
        let cases = [
            tcp(v4(), 65535 - 20 - 32, 1448),
            tcp(v6(), 4001, 1428),
            tcp(v4(), 100, 1448),
            udp_gso_packet(&v4(), &Rng::new(9).bytes(5000), 1400),
            udp_gso_packet(&v6(), &Rng::new(8).bytes(2801), 1400),
        ];
        for pkt in cases {
            let mut copied = Vec::new();
            segment(&pkt, &mut copied).unwrap();
            let mut heads: Vec<Packet> = vec![Packet::new(vec![0xee])];
            let mut ranges = Vec::new();
            let f = FrameRef::private(&pkt.data, pkt.csum, pkt.gso);
            let kept = segment_gathered(&f, pkt.gso.unwrap(), &mut heads, &mut |o, n| {
                ranges.push((o, n))
            });
            assert_eq!(kept, Ok(true));
            assert_eq!(heads.len(), copied.len() + 1, "one head per segment");
            for ((h, (o, n)), want) in heads[1..].iter().zip(&ranges).zip(&copied) {
                assert!(matches!(h.csum, Csum::Partial { .. }), "{:?}", h.csum);
                let mut whole = h.clone();
                whole.data.extend_from_slice(&pkt.data[*o..o + n]);
                complete_checksum(&mut whole).unwrap();
                assert_eq!(whole.data, want.data);
            }
        }
        let mut bad = gso_packet(&v4(), &[0; 3000], 0x10, 1000);
        bad.gso = Some(Gso {
            size: 0,
            ..bad.gso.unwrap()
        });
        let mut heads: Vec<Packet> = vec![Packet::new(vec![0xee])];
        let f = FrameRef::private(&bad.data, bad.csum, bad.gso);
        let r = segment_gathered(&f, bad.gso.unwrap(), &mut heads, &mut |_, _| {});
        assert!(r.is_err());
        assert_eq!(heads.len(), 1, "nothing kept");
    }

    #[test]
    fn segment_refuses_inconsistent_packets() {
        let mut out = vec![Packet::new(vec![0xee])];
        let mut p = gso_packet(&v4(), &[0; 3000], 0x10, 1000);
        p.gso = Some(Gso {
            kind: GsoKind::TcpV6,
            size: 1000,
            ecn: false,
        });
        assert!(segment(&p, &mut out).is_err());
        p.gso = Some(Gso {
            kind: GsoKind::TcpV4,
            size: 0,
            ecn: false,
        });
        assert!(segment(&p, &mut out).is_err());
        let mut u = Packet::new(frame(&v4(), 17, udp_seg(&[0; 3000]), true));
        u.gso = Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1000,
            ecn: false,
        });
        assert!(segment(&u, &mut out).is_err());
        // UDP segmentation of a TCP segment.
        p.gso = Some(Gso {
            kind: GsoKind::UdpL4,
            size: 1000,
            ecn: false,
        });
        assert!(segment(&p, &mut out).is_err());
        assert_eq!(
            out,
            vec![Packet::new(vec![0xee])],
            "nothing appended on error"
        );
    }

    // ---- The offload driver. ----

    #[test]
    fn prepare_with_no_offloads() {
        let payload = Rng::new(9).bytes(10_000);
        let gso = gso_packet(&v4(), &payload, 0x18, 1448);
        let mut out = Vec::new();
        prepare(gso.clone(), Offloads::NONE, &mut out).unwrap();
        assert_eq!(out.len(), 7);
        check_segments(&gso, &out, &payload, 1448);

        let good = tcp4(&payload[..999]);
        let mut partial = Packet::new(good.clone());
        checksum_setup(&mut partial, true).unwrap();
        let mut out = Vec::new();
        prepare(partial, Offloads::NONE, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].csum, Csum::Valid);
        assert_eq!(out[0].data, good);

        // Unknown and Valid pass untouched, and the buffer is moved.
        for csum in [Csum::Unknown, Csum::Valid] {
            let p = Packet {
                data: good.clone(),
                csum,
                gso: None,
            };
            let ptr = p.data.as_ptr();
            let mut out = Vec::new();
            prepare(p, Offloads::NONE, &mut out).unwrap();
            assert_eq!(out[0].csum, csum);
            assert_eq!(out[0].data.as_ptr(), ptr);
        }
    }

    #[test]
    fn prepare_with_all_offloads() {
        let payload = Rng::new(10).bytes(20_000);
        for spec in [v4(), v6()] {
            let gso = gso_packet(&spec, &payload, 0x18, 1448);
            let expected = gso.clone();
            let ptr = gso.data.as_ptr();
            let mut out = Vec::new();
            prepare(gso, Offloads::ALL, &mut out).unwrap();
            assert_eq!(out, vec![expected]);
            assert_eq!(out[0].data.as_ptr(), ptr, "moved, not copied");
        }
        let mut partial = Packet::new(tcp4(&payload[..100]));
        checksum_setup(&mut partial, true).unwrap();
        let mut out = Vec::new();
        prepare(partial.clone(), Offloads::ALL, &mut out).unwrap();
        assert_eq!(out, vec![partial]);

        // A GSO packet without a partial checksum is set up for the hardware.
        let mut g = gso_packet(&v4(), &payload, 0x18, 1448);
        fill_l4_checksum(&mut g.data).unwrap();
        g.csum = Csum::Valid;
        let mut out = Vec::new();
        prepare(g, Offloads::ALL, &mut out).unwrap();
        assert_eq!(
            out[0].csum,
            Csum::Partial {
                start: 34,
                offset: 16
            }
        );
        complete_checksum(&mut out[0]).unwrap();
        assert!(verify_l4_checksum(&out[0].data).unwrap());
    }

    #[test]
    fn prepare_with_some_offloads() {
        let payload = Rng::new(11).bytes(4000);
        let only_v4 = Offloads {
            sg: true,
            csum: true,
            tso4: true,
            tso6: false,
            uso: false,
        };
        let g4 = gso_packet(&v4(), &payload, 0x18, 1448);
        let g6 = gso_packet(&v6(), &payload, 0x18, 1448);
        let mut out = Vec::new();
        prepare(g4.clone(), only_v4, &mut out).unwrap();
        assert_eq!(out, vec![g4.clone()]);
        out.clear();
        prepare(g6.clone(), only_v4, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        completed_by_the_egress(&mut out);
        check_segments(&g6, &out, &payload, 1448);

        // TSO without checksum offload is not TSO.
        let tso_no_csum = Offloads {
            csum: false,
            ..Offloads::ALL
        };
        out.clear();
        prepare(g4.clone(), tso_no_csum, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        check_segments(&g4, &out, &payload, 1448);
        // Nor TSO without scatter-gather.
        let tso_no_sg = Offloads {
            sg: false,
            ..Offloads::ALL
        };
        out.clear();
        prepare(g6.clone(), tso_no_sg, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        completed_by_the_egress(&mut out);
        check_segments(&g6, &out, &payload, 1448);
        assert_eq!(Offloads::default(), Offloads::NONE);
        // A declared set: "csum" takes partial checksums, no GSO.
        let c = Offloads::from(abi::offloads::Caps::CSUM);
        assert!(c.csum && !c.sg && !c.accepts_gso(GsoKind::TcpV4));
        assert_eq!(Offloads::from(abi::offloads::Caps::ALL), Offloads::ALL);
        let tso = Offloads::from(abi::offloads::Caps::TSO);
        assert!(tso.accepts_gso(GsoKind::TcpV6) && !tso.accepts_gso(GsoKind::UdpL4));
        // Checksum offload for IPv4 only is none here (IPv6 is completed).
        let v4only = abi::offloads::Caps {
            csum6: false,
            ..abi::offloads::Caps::SG_CSUM
        };
        assert!(!Offloads::from(v4only).csum);
    }

    // ---- Hostile input. ----

    /// Runs every entry point on `data`; only panics matter.
    pub(crate) fn exercise(data: &[u8], rng: &mut Rng) {
        let _ = parse_headers(data);
        let _ = partial_csum_for(data);
        let _ = verify_l4_checksum(data);
        let _ = fill_l4_checksum(&mut data.to_vec());
        let mut p = Packet::new(data.to_vec());
        let _ = checksum_setup(&mut p, rng.next() & 1 == 0);
        p.csum = Csum::Partial {
            start: rng.below(data.len() + 4) as u16,
            offset: rng.below(40) as u16,
        };
        let _ = complete_checksum(&mut p.clone());
        for kind in [GsoKind::TcpV4, GsoKind::TcpV6] {
            p.gso = Some(Gso {
                kind,
                size: rng.below(3000) as u16,
                ecn: false,
            });
            let _ = p.vnet_hdr();
            let mut out = Vec::new();
            if segment(&p, &mut out).is_err() {
                assert!(out.is_empty());
            }
            let _ = prepare(p.clone(), Offloads::NONE, &mut out);
            let _ = prepare(p.clone(), Offloads::ALL, &mut out);
        }
        let mut q = Packet::new(data.to_vec());
        q.csum = p.csum;
        let _ = prepare(q, Offloads::NONE, &mut Vec::new());
    }

    #[test]
    fn every_prefix_is_an_error_not_a_panic() {
        let mut rng = Rng::new(12);
        for (name, f) in samples() {
            assert!(parse_headers(&f).is_ok(), "{name}");
            for n in 0..f.len() {
                let prefix = &f[..n];
                assert!(parse_headers(prefix).is_err(), "{name}: prefix {n} parsed");
                assert!(partial_csum_for(prefix).is_err());
                assert!(verify_l4_checksum(prefix).is_err());
                exercise(prefix, &mut rng);
            }
        }
    }

    #[test]
    fn random_and_mutated_frames_do_not_panic() {
        let mut rng = Rng::new(13);
        let samples = samples();
        for _ in 0..20_000 {
            let len = rng.below(160);
            let mut data = rng.bytes(len);
            // Steer some random frames into the IP parsers.
            if data.len() > 18 && rng.below(2) == 0 {
                let (t, v) = [(0x0800u16, 0x45u8), (0x86dd, 0x60), (0x8100, 0x45)][rng.below(3)];
                data[12..14].copy_from_slice(&t.to_be_bytes());
                data[14] = v | (data[14] & 0x0f);
                if t == 0x8100 {
                    data[16..18].copy_from_slice(&[0x08, 0x00]);
                    data[18] = 0x45;
                }
            }
            exercise(&data, &mut rng);
        }
        for _ in 0..20_000 {
            let (_, f) = &samples[rng.below(samples.len())];
            let mut data = f.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(data.len());
                data[at] = rng.next() as u8;
            }
            if rng.below(4) == 0 {
                data.truncate(rng.below(data.len()));
            }
            exercise(&data, &mut rng);
        }
    }
}
