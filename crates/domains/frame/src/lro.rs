//! Large receive offload (Ram thesis 5.1): in-order TCP segments of one
//! flow become one GSO frame, so the receiving stack handles one large
//! packet instead of many small ones.
//!
//! The merge rules are those of Linux's TCP GRO (`tcp_gro_receive`): same
//! addresses and ports; every header byte equal except the lengths, the
//! IPv4 identification (which must count up by one per segment), the
//! checksums and the sequence number (which must continue the flow);
//! flags ACK or ACK|PSH; no TCP option but timestamps; no IP options,
//! extension headers or fragments. A PSH or a short segment ends a frame.
//! Only frames whose checksum is known good (`Csum::Valid`) or not yet
//! computed (`Csum::Partial`, from a local sender) are merged: an unknown
//! one passes through for the receiver to check. The result carries a
//! partial checksum and the flow's MSS as `gso_size`, so that segmenting
//! it ([`crate::offload::segment`]) gives back the segments that came in.
//!
//! Storage is a few flow buffers of a frame's largest size, allocated
//! once: nothing is allocated per packet. Frames in flight are copied into
//! them; the caller calls [`Lro::flush`] at the end of each receive batch.

use crate::offload::{self, Headers, L3, L4};
use crate::packet::{Csum, FrameRef, Gso, GsoKind};

/// Flows held at once; a new flow beyond them flushes the oldest.
pub const FLOWS: usize = 4;
/// Largest merged frame: a netif request's and a TAP write's 16-bit size.
pub const MAX_FRAME: usize = u16::MAX as usize;
/// Header bytes read to classify a frame (Ethernet, IPv6, TCP with options).
const HEAD: usize = 14 + 40 + 60;
const ETH_HLEN: usize = 14;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
/// The only TCP option merged: NOP, NOP, timestamps (RFC 7323 appendix A).
const TS_PREFIX: [u8; 4] = [1, 1, 8, 10];

/// What the coalescer did, for the vif's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LroStats {
    /// Frames folded into a frame held before them.
    pub merged: u64,
    /// Frames the coalescer put out (merged or held alone).
    pub flushed: u64,
}

/// A flow: the addresses and ports, as bytes (IPv4: 8 + 4, IPv6: 32 + 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    len: u8,
    bytes: [u8; 36],
}

impl Key {
    fn of(head: &[u8], h: &Headers) -> Option<Key> {
        let (at, n) = match h.l3 {
            L3::Ipv4 => (h.l3_off + 12, 8),
            L3::Ipv6 => (h.l3_off + 8, 32),
            L3::Other(_) => return None,
        };
        let mut k = Key {
            len: (n + 4) as u8,
            bytes: [0; 36],
        };
        k.bytes[..n].copy_from_slice(head.get(at..at + n)?);
        k.bytes[n..n + 4].copy_from_slice(head.get(h.l4_off..h.l4_off + 4)?);
        Some(k)
    }
}

/// A segment the coalescer may merge: where its parts are and what the
/// merge rules compare.
#[derive(Debug, Clone, Copy)]
struct Seg {
    key: Key,
    v6: bool,
    l4_off: usize,
    payload_off: usize,
    payload: usize,
    seq: u32,
    id: u16,
    /// Payload bytes per segment: the GSO size, or the whole payload.
    mss: usize,
    /// A GSO frame (its segments have exactly `mss` bytes but the last).
    gso: bool,
    /// Segments it stands for.
    count: usize,
    /// PSH: the sender wants it delivered, so it ends a merged frame.
    psh: bool,
}

/// A flow being merged, in its own buffer.
struct Flow {
    buf: Box<[u8]>,
    /// Bytes held; 0 when the slot is free.
    len: usize,
    key: Key,
    v6: bool,
    l4_off: usize,
    payload_off: usize,
    mss: usize,
    frames: u64,
    next_seq: u32,
    next_id: u16,
    /// The first frame's offload state, put out unchanged if nothing joins it.
    csum: Csum,
    gso: Option<Gso>,
    /// When the flow started, to pick the oldest.
    born: u64,
}

/// The coalescer: [`Lro::push`] each received frame, [`Lro::flush`] at the
/// end of the batch.
pub struct Lro {
    flows: Vec<Flow>,
    clock: u64,
    pub stats: LroStats,
}

impl Default for Lro {
    fn default() -> Lro {
        Lro::new()
    }
}

impl Lro {
    /// [`FLOWS`] flows with their buffers (about 256 KiB, allocated here once).
    pub fn new() -> Lro {
        let flows = (0..FLOWS)
            .map(|_| Flow {
                buf: vec![0; MAX_FRAME].into_boxed_slice(),
                len: 0,
                key: Key {
                    len: 0,
                    bytes: [0; 36],
                },
                v6: false,
                l4_off: 0,
                payload_off: 0,
                mss: 0,
                frames: 0,
                next_seq: 0,
                next_id: 0,
                csum: Csum::Unknown,
                gso: None,
                born: 0,
            })
            .collect();
        Lro {
            flows,
            clock: 0,
            stats: LroStats::default(),
        }
    }

    /// Offers a received frame. True when the coalescer took it (it comes
    /// out later through `emit`, merged or not); false when the caller must
    /// pass it on itself, right after whatever of its flow this call put
    /// out through `emit` (so a flow's order holds).
    pub fn push(&mut self, f: &FrameRef<'_>, emit: &mut dyn FnMut(&FrameRef<'_>)) -> bool {
        let mut hb = [0u8; HEAD];
        let head = &mut hb[..f.len.min(HEAD)];
        f.copy_out(0, head);
        let Ok(h) = offload::parse_headers_of(head, f.len) else {
            return false;
        };
        if h.l4 != L4::Tcp {
            return false;
        }
        let Some(seg) = mergeable(head, &h, f) else {
            // Not mergeable, but maybe part of a held flow: that goes first.
            if let Some(k) = Key::of(head, &h) {
                if let Some(i) = self.find(&k) {
                    self.flush_flow(i, emit);
                }
            }
            return false;
        };
        if let Some(i) = self.find(&seg.key) {
            if self.flows[i].joins(head, &seg) {
                self.append(i, f, &seg, emit);
                return true;
            }
            self.flush_flow(i, emit);
        }
        if seg.psh || !seg.payload.is_multiple_of(seg.mss) {
            // It would end its frame at once: nothing to merge it with.
            return false;
        }
        let i = self.free_slot(emit);
        self.start(i, f, &seg);
        true
    }

    /// Puts out every held flow: the end of a receive batch.
    pub fn flush(&mut self, emit: &mut dyn FnMut(&FrameRef<'_>)) {
        for i in 0..self.flows.len() {
            self.flush_flow(i, emit);
        }
    }

    /// Whether any flow is held.
    pub fn holding(&self) -> bool {
        self.flows.iter().any(|fl| fl.len > 0)
    }

    fn find(&self, k: &Key) -> Option<usize> {
        self.flows.iter().position(|fl| fl.len > 0 && fl.key == *k)
    }

    /// A free flow slot, flushing the oldest flow when none is.
    fn free_slot(&mut self, emit: &mut dyn FnMut(&FrameRef<'_>)) -> usize {
        if let Some(i) = self.flows.iter().position(|fl| fl.len == 0) {
            return i;
        }
        let (i, _) = self
            .flows
            .iter()
            .enumerate()
            .min_by_key(|(_, fl)| fl.born)
            .expect("FLOWS > 0");
        self.flush_flow(i, emit);
        i
    }

    fn start(&mut self, i: usize, f: &FrameRef<'_>, s: &Seg) {
        self.clock += 1;
        let fl = &mut self.flows[i];
        f.copy_out(0, &mut fl.buf[..f.len]);
        fl.len = f.len;
        fl.key = s.key;
        fl.v6 = s.v6;
        fl.l4_off = s.l4_off;
        fl.payload_off = s.payload_off;
        fl.mss = s.mss;
        fl.frames = 1;
        fl.next_seq = s.seq.wrapping_add(s.payload as u32);
        fl.next_id = s.id.wrapping_add(s.count as u16);
        fl.csum = f.csum;
        fl.gso = f.gso;
        fl.born = self.clock;
    }

    /// Appends the payload of `f`, which [`Flow::joins`] flow `i`; a frame
    /// that ends the flow's frame flushes it.
    fn append(&mut self, i: usize, f: &FrameRef<'_>, s: &Seg, emit: &mut dyn FnMut(&FrameRef<'_>)) {
        let fl = &mut self.flows[i];
        f.copy_out(s.payload_off, &mut fl.buf[fl.len..fl.len + s.payload]);
        fl.len += s.payload;
        fl.frames += 1;
        fl.next_seq = s.seq.wrapping_add(s.payload as u32);
        fl.next_id = s.id.wrapping_add(s.count as u16);
        // PSH travels to the merged header (segmenting puts it on the last).
        if s.psh {
            fl.buf[fl.l4_off + 13] |= TCP_PSH;
        }
        self.stats.merged += 1;
        if s.psh || !s.payload.is_multiple_of(fl.mss) {
            self.flush_flow(i, emit);
        }
    }

    /// Puts out flow `i` (if held) and frees its slot.
    fn flush_flow(&mut self, i: usize, emit: &mut dyn FnMut(&FrameRef<'_>)) {
        let fl = &mut self.flows[i];
        if fl.len == 0 {
            return;
        }
        let len = std::mem::take(&mut fl.len);
        self.stats.flushed += 1;
        if fl.frames == 1 {
            emit(&FrameRef::private(&fl.buf[..len], fl.csum, fl.gso));
            return;
        }
        match fl.finish(len) {
            Some((csum, gso)) => emit(&FrameRef::private(&fl.buf[..len], csum, Some(gso))),
            // Checked when each part joined; cannot fail, but never panic.
            None => self.stats.flushed -= 1,
        }
    }
}

impl Flow {
    /// Whether `s` continues this flow: its header equals the held one
    /// but for the fields that change per segment, its sequence number and
    /// IPv4 identification follow, its segments have the flow's MSS, and
    /// the merged frame stays within [`MAX_FRAME`].
    fn joins(&self, head: &[u8], s: &Seg) -> bool {
        s.v6 == self.v6
            && s.payload_off == self.payload_off
            && s.seq == self.next_seq
            && (self.v6 || s.id == self.next_id)
            && (if s.gso {
                s.mss == self.mss
            } else {
                s.payload <= self.mss
            })
            && self.len + s.payload <= MAX_FRAME
            && same_header(&self.buf[..self.payload_off], head, self.v6, self.l4_off)
    }

    /// Writes the merged frame's lengths and checksums; returns its offload state.
    fn finish(&mut self, len: usize) -> Option<(Csum, Gso)> {
        let frame = &mut self.buf[..len];
        let l3 = ETH_HLEN;
        if self.v6 {
            let plen = u16::try_from(len - l3 - 40).ok()?;
            frame[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        } else {
            let total = u16::try_from(len - l3).ok()?;
            frame[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            frame[l3 + 10..l3 + 12].fill(0);
            let c = offload::ipv4_header_checksum(&frame[l3..self.l4_off]);
            frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let csum = offload::partial_setup(frame, true).ok()?;
        let kind = if self.v6 {
            GsoKind::TcpV6
        } else {
            GsoKind::TcpV4
        };
        let size = u16::try_from(self.mss).ok()?;
        Some((
            csum,
            Gso {
                kind,
                size,
                ecn: false,
            },
        ))
    }
}

/// Whether two headers of one flow agree on everything but what changes
/// per segment: IPv4 total length, identification and header checksum;
/// IPv6 payload length; TCP sequence number, flags and checksum (the flags
/// are ACK or ACK|PSH in both, checked apart).
fn same_header(a: &[u8], b: &[u8], v6: bool, l4: usize) -> bool {
    let l3 = ETH_HLEN;
    let tcp = [(l4 + 4, l4 + 8), (l4 + 13, l4 + 14), (l4 + 16, l4 + 18)];
    let ip: &[(usize, usize)] = if v6 {
        &[(l3 + 4, l3 + 6)]
    } else {
        &[(l3 + 2, l3 + 6), (l3 + 10, l3 + 12)]
    };
    let Some(b) = b.get(..a.len()) else {
        return false;
    };
    let mut at = 0;
    for &(s, e) in ip.iter().chain(tcp.iter()) {
        if a[at..s] != b[at..s] {
            return false;
        }
        at = e;
    }
    a[at..] == b[at..]
}

/// The segment `f` is, if the merge rules allow merging it (module docs).
fn mergeable(head: &[u8], h: &Headers, f: &FrameRef<'_>) -> Option<Seg> {
    let csum_ok = match f.csum {
        Csum::Valid => true,
        Csum::Partial { start, offset } => usize::from(start) == h.l4_off && offset == 16,
        Csum::Unknown => false,
    };
    let v6 = h.l3 == L3::Ipv6;
    let fixed = if v6 { ETH_HLEN + 40 } else { ETH_HLEN + 20 };
    if !csum_ok
        || f.vlan.is_some()
        || f.len > MAX_FRAME
        || h.l3_off != ETH_HLEN
        || h.l4_off != fixed
        || h.end != f.len
    {
        return None;
    }
    let id = if v6 {
        0
    } else {
        let ip = head.get(h.l3_off..h.l4_off)?;
        let stored = u16::from_be_bytes([ip[10], ip[11]]);
        if offload::ipv4_header_checksum(ip) != stored {
            return None;
        }
        u16::from_be_bytes([ip[4], ip[5]])
    };
    let tcp = head.get(h.l4_off..h.payload_off)?;
    let flags = tcp[13];
    let opts = &tcp[20..];
    let opts_ok = opts.is_empty() || (opts.len() == 12 && opts[..4] == TS_PREFIX);
    if !opts_ok || tcp[12] & 0x0f != 0 || (flags != TCP_ACK && flags != TCP_ACK | TCP_PSH) {
        return None;
    }
    let payload = f.len - h.payload_off;
    if payload == 0 {
        return None;
    }
    let (mss, count) = match f.gso {
        None => (payload, 1),
        Some(g) => {
            let kind_ok = matches!(
                (g.kind, v6),
                (GsoKind::TcpV4, false) | (GsoKind::TcpV6, true)
            );
            if !kind_ok || g.ecn || g.size == 0 || !matches!(f.csum, Csum::Partial { .. }) {
                return None;
            }
            let mss = usize::from(g.size);
            (mss, payload.div_ceil(mss))
        }
    };
    Some(Seg {
        key: Key::of(head, h)?,
        v6,
        l4_off: h.l4_off,
        payload_off: h.payload_off,
        payload,
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        id,
        mss,
        gso: f.gso.is_some(),
        count,
        psh: flags & TCP_PSH != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::{checksum_setup, complete_checksum, segment, verify_l4_checksum};
    use crate::packet::Packet;
    use crate::testing::{frame, tcp_seg, udp_seg, Rng, Spec, TS_OPT};

    /// One flow's sender: addresses family, ports, options, next seq and id.
    struct Sender {
        v6: bool,
        port: u16,
        opts: Vec<u8>,
        seq: u32,
        id: u16,
        mss: usize,
    }

    impl Sender {
        fn frame(&mut self, flags: u8, payload: &[u8], csum: Csum, gso: bool) -> Packet {
            let mut l4 = tcp_seg(self.seq, flags, &self.opts, payload);
            l4[..2].copy_from_slice(&self.port.to_be_bytes());
            let spec = Spec {
                v6: self.v6,
                id: self.id,
                frag: 0x4000,
                ..Spec::default()
            };
            let mut p = Packet::new(frame(&spec, 6, l4, true));
            let segs = if gso {
                payload.len().div_ceil(self.mss)
            } else {
                1
            };
            self.seq = self.seq.wrapping_add(payload.len() as u32);
            self.id = self.id.wrapping_add(segs as u16);
            match csum {
                Csum::Partial { .. } => checksum_setup(&mut p, true).unwrap(),
                other => p.csum = other,
            }
            if gso {
                p.gso = Some(Gso {
                    kind: if self.v6 {
                        GsoKind::TcpV6
                    } else {
                        GsoKind::TcpV4
                    },
                    size: self.mss as u16,
                    ecn: false,
                });
            }
            p
        }
    }

    fn sender(v6: bool, port: u16, ts: bool, mss: usize) -> Sender {
        Sender {
            v6,
            port,
            opts: if ts { TS_OPT.to_vec() } else { vec![] },
            seq: 1000 + u32::from(port),
            id: port,
            mss,
        }
    }

    const PARTIAL: Csum = Csum::Partial {
        start: 0,
        offset: 0,
    };

    /// Runs `batches` through a coalescer; returns what came out, in order.
    fn run(lro: &mut Lro, batches: &[Vec<Packet>]) -> Vec<Packet> {
        let mut out = Vec::new();
        for b in batches {
            for p in b {
                let f = FrameRef::private(&p.data, p.csum, p.gso);
                let mut emit = |g: &FrameRef<'_>| out.push(g.to_packet());
                if !lro.push(&f, &mut emit) {
                    out.push(p.clone());
                }
            }
            lro.flush(&mut |g: &FrameRef<'_>| out.push(g.to_packet()));
            assert!(!lro.holding());
        }
        out
    }

    /// What a receiver sees of `frames`: every GSO frame segmented, the TCP
    /// checksum field blanked (its state is checked apart), grouped by
    /// flow (non-TCP frames in a group of their own), in order.
    fn seen(frames: &[Packet]) -> std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
        let mut m = std::collections::BTreeMap::<Vec<u8>, Vec<Vec<u8>>>::new();
        for p in frames {
            let mut segs = Vec::new();
            segment(p, &mut segs).unwrap();
            for mut s in segs.into_iter().map(|s| s.data) {
                let key = match offload::parse_headers(&s) {
                    Ok(h) if h.l4 == L4::Tcp => {
                        s[h.l4_off + 16..h.l4_off + 18].fill(0);
                        Key::of(&s, &h).unwrap().bytes.to_vec()
                    }
                    _ => vec![],
                };
                m.entry(key).or_default().push(s);
            }
        }
        m
    }

    /// Merged frames carry a partial checksum the kernel can finish.
    fn check_merged(out: &[Packet]) {
        for p in out.iter().filter(|p| p.is_gso()) {
            assert!(matches!(p.csum, Csum::Partial { .. }));
            let mut done = p.clone();
            done.gso = None;
            complete_checksum(&mut done).unwrap();
            assert!(verify_l4_checksum(&done.data).unwrap());
            assert!(p.len() <= MAX_FRAME);
        }
    }

    #[test]
    fn merges_in_order_segments_into_one_gso_frame() {
        let mut s = sender(false, 40000, true, 1448);
        let segs: Vec<Packet> = (0..5)
            .map(|i| {
                let flags = if i == 4 { 0x18 } else { 0x10 };
                s.frame(flags, &[i as u8; 1448], Csum::Valid, false)
            })
            .collect();
        let mut lro = Lro::new();
        let out = run(&mut lro, std::slice::from_ref(&segs));
        assert_eq!(out.len(), 1);
        let m = &out[0];
        assert_eq!(
            m.gso.map(|g| (g.kind, g.size)),
            Some((GsoKind::TcpV4, 1448))
        );
        assert_eq!(m.len(), 14 + 20 + 32 + 5 * 1448);
        let h = offload::parse_headers(&m.data).unwrap();
        assert_eq!(
            usize::from(u16::from_be_bytes([m.data[16], m.data[17]])),
            m.len() - 14
        );
        assert_eq!(m.data[h.l4_off + 13], 0x18, "PSH from the last segment");
        assert_eq!(
            m.data[h.l4_off + 4..h.l4_off + 8],
            segs[0].data[h.l4_off + 4..h.l4_off + 8]
        );
        assert_eq!(
            lro.stats,
            LroStats {
                merged: 4,
                flushed: 1
            }
        );
        check_merged(&out);
        assert_eq!(seen(&out), seen(&segs));
    }

    #[test]
    fn leaves_alone_what_it_must_not_merge() {
        let mut s = sender(true, 40001, false, 1000);
        let a = s.frame(0x10, &[1; 1000], Csum::Unknown, false);
        let b = s.frame(0x10, &[2; 1000], Csum::Unknown, false);
        let mut lro = Lro::new();
        assert_eq!(run(&mut lro, &[vec![a.clone(), b.clone()]]), vec![a, b]);
        // Out of order: each goes out on its own, in the order it came.
        let c = s.frame(0x10, &[3; 1000], Csum::Valid, false);
        let d = s.frame(0x10, &[4; 1000], Csum::Valid, false);
        assert_eq!(run(&mut lro, &[vec![d.clone(), c.clone()]]), vec![d, c]);
        // A FIN flushes what the flow held before it passes.
        let e = s.frame(0x10, &[5; 1000], Csum::Valid, false);
        let f = s.frame(0x11, &[6; 10], Csum::Valid, false);
        assert_eq!(run(&mut lro, &[vec![e.clone(), f.clone()]]), vec![e, f]);
        // An option other than timestamps (a SACK block) is not merged.
        let mut sack = sender(false, 40002, false, 500);
        sack.opts = vec![1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let g = sack.frame(0x10, &[7; 500], Csum::Valid, false);
        let h = sack.frame(0x10, &[8; 500], Csum::Valid, false);
        assert_eq!(run(&mut lro, &[vec![g.clone(), h.clone()]]), vec![g, h]);
        // A frame longer than a merged frame may be passes as it is.
        let mut big = sender(false, 40004, false, 1460);
        let i = big.frame(0x10, &vec![1; 65495], Csum::Valid, false);
        assert_eq!(i.len(), MAX_FRAME + 14);
        assert_eq!(run(&mut lro, &[vec![i.clone()]]), vec![i]);
        assert_eq!(lro.stats.merged, 0);
    }

    #[test]
    fn flushes_at_64k_and_evicts_the_oldest_flow() {
        let mut s = sender(false, 40003, false, 1460);
        let segs: Vec<Packet> = (0..60)
            .map(|_| s.frame(0x10, &[9; 1460], PARTIAL, false))
            .collect();
        let mut lro = Lro::new();
        let out = run(&mut lro, std::slice::from_ref(&segs));
        assert!(out.iter().all(|p| p.len() <= MAX_FRAME));
        assert_eq!(out.len(), 2);
        assert_eq!(lro.stats.merged, 58);
        check_merged(&out);
        assert_eq!(seen(&out), seen(&segs));

        let mut senders: Vec<Sender> = (0..=FLOWS as u16)
            .map(|i| sender(false, 41000 + i, false, 100))
            .collect();
        let mut batch = Vec::new();
        for _ in 0..2 {
            for s in senders.iter_mut() {
                batch.push(s.frame(0x10, &[1; 100], Csum::Valid, false));
            }
        }
        let mut lro = Lro::new();
        let out = run(&mut lro, &[batch.clone()]);
        // FLOWS + 1 flows: one is always pushed out before its second segment.
        assert!(lro.stats.merged < FLOWS as u64 + 1);
        assert_eq!(seen(&out), seen(&batch));
    }

    #[test]
    fn resegmenting_gives_back_what_the_receiver_would_have_seen() {
        let mut total = 0;
        for seed in 1..=200u64 {
            let mut rng = Rng::new(seed);
            let mut senders = [
                sender(false, 40010, true, 1 + rng.below(1448)),
                sender(true, 40011, false, 1 + rng.below(1400)),
                sender(false, 40012, false, 1 + rng.below(900)),
            ];
            let mut frames = Vec::new();
            for _ in 0..rng.below(120) {
                let s = &mut senders[rng.below(3)];
                let roll = rng.below(100);
                let csum = match rng.below(10) {
                    0 => Csum::Unknown,
                    1..=4 => Csum::Valid,
                    _ => PARTIAL,
                };
                let full = rng.bytes(s.mss);
                let p = match roll {
                    0..=64 => s.frame(0x10, &full, csum, false),
                    65..=69 => s.frame(0x18, &full[..1 + rng.below(s.mss)], csum, false),
                    70..=74 => s.frame(0x10, &full[..1 + rng.below(s.mss)], csum, false),
                    75..=79 => {
                        let n = 1 + rng.below(5 * s.mss);
                        s.frame(0x10, &rng.bytes(n), PARTIAL, true)
                    }
                    80..=82 => s.frame(
                        [0x11, 0x02, 0x04, 0x30][rng.below(4)],
                        &rng.bytes(3),
                        csum,
                        false,
                    ),
                    83..=85 => s.frame(0x10, &[], csum, false),
                    86..=87 => {
                        if let Some(ts) = s.opts.get_mut(7) {
                            *ts = ts.wrapping_add(1);
                        }
                        continue;
                    }
                    88..=89 => {
                        // A sender that skips an id, or a gap in the stream.
                        s.id = s.id.wrapping_add(1);
                        s.seq = s.seq.wrapping_add(rng.below(2) as u32);
                        continue;
                    }
                    90..=91 => {
                        let mut p = s.frame(0x10, &full, Csum::Valid, false);
                        if !s.v6 {
                            p.data[24] ^= 0x55; // a bad IPv4 header checksum
                        }
                        p
                    }
                    _ => Packet::new(frame(&Spec::default(), 17, udp_seg(&rng.bytes(9)), true)),
                };
                frames.push(p);
            }
            for _ in 0..rng.below(6) {
                if frames.len() > 1 {
                    let i = rng.below(frames.len() - 1);
                    frames.swap(i, i + 1);
                }
            }
            let mut batches = Vec::new();
            let mut rest = &frames[..];
            while !rest.is_empty() {
                let n = 1 + rng.below(rest.len());
                batches.push(rest[..n].to_vec());
                rest = &rest[n..];
            }
            let mut lro = Lro::new();
            let out = run(&mut lro, &batches);
            check_merged(&out);
            assert_eq!(seen(&out), seen(&frames), "seed {seed}");
            let merged = lro.stats.merged as usize;
            assert_eq!(out.len(), frames.len() - merged, "seed {seed}");
            total += merged;
        }
        assert!(
            total > 1000,
            "the streams merge often enough to mean something: {total}"
        );
    }
}
