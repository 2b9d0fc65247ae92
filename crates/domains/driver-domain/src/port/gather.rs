//! How the software offload driver's frames leave a packet port (Menon
//! 2006 §3.1, §4.1, Figure 7), in `sendmmsg` batches, as a NIC driver
//! queues a burst behind one doorbell.
//!
//! Onto a port that gathers and fills checksums but does not segment (the
//! paper's SG+Csum NIC), a GSO frame is segmented without a payload copy:
//! each segment's headers are written apart with the transport checksum
//! left partial, and its payload goes to the port from where it lies
//! (netback's header copy, the guest's granted buffers). Onto any other
//! port the offload driver's copies, made in the port's slab, go out the
//! same way.

use super::{send_counted, PortCounters, FRAME_PARTS};
use crate::netback::slab::FrameSlab;
use frame::offload;
use frame::packet::{self, FrameRef, Gso, VNET_HDR_LEN};
use sys::{IoPart, PacketSocket, SEND_BATCH, SEND_BATCH_PARTS};

/// Most segments of one GSO frame: its 64 KiB at the smallest segment
/// size netback takes.
pub(crate) const MOST_SEGMENTS: usize = 65536 / frame::offload::MIN_GSO_SIZE as usize + 2;

/// Whether a GSO frame goes to a port of `caps` gathered: the port takes
/// pieces and fills checksums, but not this kind of GSO.
pub(super) fn gathers(caps: offload::Offloads, gso: Option<Gso>) -> Option<Gso> {
    gso.filter(|g| caps.sg && caps.csum && !caps.accepts_gso(g.kind))
}

/// Segments `f` (of GSO `gso`) into `heads` and sends the segments on
/// `sock`, each gathered from its vnet header, its headers and its payload
/// where it lies in `f`.
pub(super) fn send(
    sock: &PacketSocket,
    heads: &mut FrameSlab,
    counters: &mut PortCounters,
    f: &FrameRef<'_>,
    gso: Gso,
) {
    heads.clear();
    let mut ranges = [(0usize, 0usize); MOST_SEGMENTS];
    let mut n = 0;
    let kept = offload::segment_gathered(f, gso, heads, &mut |off, len| {
        if let Some(r) = ranges.get_mut(n) {
            *r = (off, len);
        }
        n += 1;
    });
    if !matches!(kept, Ok(true)) || n != heads.len() || n > MOST_SEGMENTS {
        counters.tx_dropped += 1;
        return;
    }
    counters.tx_gathered += 1;
    for first in (0..n).step_by(SEND_BATCH) {
        let m = (n - first).min(SEND_BATCH);
        let mut vnets = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
        for (k, v) in vnets.iter_mut().enumerate().take(m) {
            if let Some((head, csum, _)) = heads.get(first + k) {
                let len = head.len() + ranges[first + k].1;
                *v = packet::encode_vnet_hdr(csum, None, head, len);
            }
        }
        send_burst::<FRAME_PARTS>(sock, counters, m, |k, parts| {
            let (head, _, _) = heads.get(first + k)?;
            let (off, len) = ranges[first + k];
            parts[0] = IoPart::Private(&vnets[k]);
            parts[1] = IoPart::Private(head);
            let used = range_parts(f, off, len, &mut parts[2..])?;
            Some((used + 2, head.len() + len))
        });
    }
}

/// Sends the frames the software offload driver left in `slab`, in
/// `sendmmsg` batches, and forgets them.
pub(super) fn send_slab(sock: &PacketSocket, slab: &mut FrameSlab, counters: &mut PortCounters) {
    let n = slab.len();
    for first in (0..n).step_by(SEND_BATCH) {
        let m = (n - first).min(SEND_BATCH);
        let mut vnets = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
        for (k, v) in vnets.iter_mut().enumerate().take(m) {
            if let Some((data, csum, gso)) = slab.get(first + k) {
                *v = packet::encode_vnet_hdr(csum, gso, data, data.len());
            }
        }
        send_burst::<2>(sock, counters, m, |k, parts| {
            let (data, _, _) = slab.get(first + k)?;
            parts[0] = IoPart::Private(&vnets[k]);
            parts[1] = IoPart::Private(data);
            Some((2, data.len()))
        });
    }
    slab.clear();
}

/// Sends `n` frames (at most [`SEND_BATCH`]) on `sock` in as few
/// `sendmmsg` calls as their parts allow, each frame in at most `P`
/// parts. `frame(k, parts)` puts frame `k`'s pieces, its vnet header
/// first, in `parts` and returns how many and the frame's length; None
/// drops it (more pieces than a frame may have).
fn send_burst<'p, const P: usize>(
    sock: &PacketSocket,
    counters: &mut PortCounters,
    n: usize,
    mut frame: impl FnMut(usize, &mut [IoPart<'p>]) -> Option<(usize, usize)>,
) {
    let n = n.min(SEND_BATCH);
    let mut parts: [[IoPart<'p>; P]; SEND_BATCH] =
        std::array::from_fn(|_| std::array::from_fn(|_| IoPart::Private(&[])));
    let mut j = 0;
    while j < n {
        let mut counts = [0usize; SEND_BATCH];
        let mut lens = [0usize; SEND_BATCH];
        let (mut k, mut total) = (0, 0);
        while j < n {
            let Some((used, len)) = frame(j, &mut parts[k]) else {
                counters.tx_dropped += 1;
                j += 1;
                continue;
            };
            if k > 0 && total + used > SEND_BATCH_PARTS {
                break;
            }
            (counts[k], lens[k]) = (used, len);
            total += used;
            (k, j) = (k + 1, j + 1);
        }
        let frames: [&[IoPart<'p>]; SEND_BATCH] = std::array::from_fn(|i| &parts[i][..counts[i]]);
        send_counted(sock, counters, &frames[..k], &lens[..k]);
    }
}

/// The pieces of `f` that hold its bytes `off..off + len`, in order, into
/// `out`: from its private head and body, then its shared ranges. Returns
/// how many, or None if they do not fit `out` or the frame is shorter.
fn range_parts<'a>(
    f: &FrameRef<'a>,
    off: usize,
    len: usize,
    out: &mut [IoPart<'a>],
) -> Option<usize> {
    let (head, body, map): (&'a [u8], &'a [u8], _) = (f.head, f.body, f.map);
    let (end, mut at, mut n) = (off.checked_add(len)?, 0usize, 0usize);
    let mut take = |piece_len: usize, part: &dyn Fn(usize, usize) -> IoPart<'a>| -> Option<()> {
        let (lo, hi) = (off.max(at), end.min(at + piece_len));
        if lo < hi {
            *out.get_mut(n)? = part(lo - at, hi - lo);
            n += 1;
        }
        at += piece_len;
        Some(())
    };
    take(head.len(), &|o, l| IoPart::Private(&head[o..o + l]))?;
    take(body.len(), &|o, l| IoPart::Private(&body[o..o + l]))?;
    if let Some(map) = map {
        for &(seg_off, seg_len) in f.segs {
            take(seg_len, &|o, l| IoPart::Shared {
                map,
                off: seg_off + o,
                len: l,
            })?;
        }
    }
    (at >= end).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use frame::offload::Offloads;
    use frame::packet::{Csum, GsoKind};

    fn bytes(p: &IoPart<'_>) -> Vec<u8> {
        match p {
            IoPart::Private(b) => b.to_vec(),
            IoPart::Shared { .. } => panic!("no shared part here"),
        }
    }

    #[test]
    fn a_range_is_cut_from_the_pieces_it_spans() {
        let all: Vec<u8> = (0..30).collect();
        let mut f = FrameRef::private(&all[..10], Csum::Valid, None);
        f.body = &all[10..];
        f.len = 30;
        let mut out: [IoPart<'_>; 4] = std::array::from_fn(|_| IoPart::Private(&[]));
        assert_eq!(range_parts(&f, 5, 10, &mut out), Some(2));
        let joined: Vec<u8> = out[..2].iter().flat_map(bytes).collect();
        assert_eq!(joined, all[5..15]);
        assert_eq!(range_parts(&f, 12, 3, &mut out), Some(1));
        assert_eq!(bytes(&out[0]), all[12..15]);
        assert_eq!(range_parts(&f, 0, 0, &mut out), Some(0));
        assert_eq!(
            range_parts(&f, 25, 10, &mut out),
            None,
            "past the frame's end"
        );
        assert_eq!(
            range_parts(&f, 0, 30, &mut out[..1]),
            None,
            "more pieces than room"
        );
    }

    #[test]
    fn only_a_port_with_sg_and_csum_but_not_the_gso_kind_gathers() {
        let tso = Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        });
        let sgc = Offloads {
            sg: true,
            csum: true,
            ..Offloads::NONE
        };
        assert_eq!(gathers(sgc, tso), tso);
        assert_eq!(gathers(sgc, None), None);
        assert_eq!(
            gathers(Offloads::ALL, tso),
            None,
            "the port segments itself"
        );
        let sg = Offloads {
            sg: true,
            ..Offloads::NONE
        };
        assert_eq!(gathers(sg, tso), None, "checksums need the payload");
        assert_eq!(gathers(Offloads::NONE, tso), None);
    }
}
