//! Software TSO onto a port that gathers and fills checksums but does not
//! segment: Menon 2006's NIC with scatter/gather and checksum offload
//! (§4.1, Figure 7). The software offload driver writes each segment's
//! headers and leaves its transport checksum partial; the payload goes to
//! the port from where it lies (netback's header copy, the guest's granted
//! buffers), and no byte of it is copied on the way. The segments leave in
//! `sendmmsg` batches, as a NIC driver queues a burst behind one doorbell.

use super::{PortCounters, FRAME_PARTS};
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
    let mut first = 0;
    while first < n {
        first += send_run(sock, heads, counters, f, &ranges[first..n], first);
    }
}

/// Sends segments `first..` (their payload `ranges`) in one `sendmmsg` at
/// most: as many as fit its limits. Returns how many were handled (sent
/// or dropped), at least one.
fn send_run(
    sock: &PacketSocket,
    heads: &FrameSlab,
    counters: &mut PortCounters,
    f: &FrameRef<'_>,
    ranges: &[(usize, usize)],
    first: usize,
) -> usize {
    let mut hdrs = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
    let mut parts: [[IoPart<'_>; FRAME_PARTS]; SEND_BATCH] =
        std::array::from_fn(|_| std::array::from_fn(|_| IoPart::Private(&[])));
    let mut counts = [0usize; SEND_BATCH];
    let mut lens = [0usize; SEND_BATCH];
    let (mut k, mut total) = (0, 0);
    for (j, &(off, len)) in ranges.iter().enumerate().take(SEND_BATCH) {
        let Some((head, csum)) = heads.get(first + j) else {
            break;
        };
        hdrs[k] = packet::encode_vnet_hdr(csum, None, head, head.len() + len);
        let p = &mut parts[k];
        p[1] = IoPart::Private(head);
        let Some(used) = range_parts(f, off, len, &mut p[2..]) else {
            break;
        };
        if total + used + 2 > SEND_BATCH_PARTS {
            break;
        }
        total += used + 2;
        counts[k] = used + 2;
        lens[k] = head.len() + len;
        k += 1;
    }
    if k == 0 {
        // More pieces than a frame may have: not from a well-formed ring.
        counters.tx_dropped += 1;
        return 1;
    }
    for (p, h) in parts.iter_mut().zip(&hdrs).take(k) {
        p[0] = IoPart::Private(h);
    }
    let frames: [&[IoPart<'_>]; SEND_BATCH] = std::array::from_fn(|j| &parts[j][..counts[j]]);
    let mut sent = 0;
    while sent < k {
        match sock.send_batch(&frames[sent..k]) {
            Ok(m) if m > 0 => {
                for len in &lens[sent..sent + m] {
                    counters.tx_packets += 1;
                    counters.tx_bytes += *len as u64;
                }
                sent += m;
            }
            _ => {
                counters.tx_dropped += 1;
                sent += 1;
            }
        }
    }
    k
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
