//! TX gather under hv-copy: the I/O-channel optimization (Menon 2006 §4)
//! without the new grant mechanism.
//!
//! Per ring batch, one hypercall batch asks hv to validate and pin every
//! TX grant and to copy each packet's first [`HEAD`] bytes into this vif's
//! staging frames; hv names the frame it pinned for each slot. netback
//! checks the header copy (only it is ever sent as headers), and the port
//! gathers the payload through a read-only window on the guest's I/O pool
//! mapped once at connect: the payload is never copied by netback and
//! never remapped per packet. Once the frames are sent, a second batch
//! releases the pins, and then every request is answered, so the guest can
//! end its grants. A grant hv refuses (revoked, forged, another domain's,
//! a frame outside the pool) refuses the packet, counted, never read.

use super::tx::{skip, HEAD};
use super::{grant_reason, Netback, Result, TxPacket, TxSlot, SLOT_BUDGET, TX_BUDGET};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::netif::XEN_NETIF_NR_SLOTS_MIN;
use abi::{FrameRange, Pfn, SharedMemory};
use frame::packet::FrameRef;
use hypercall::HvClient;
use sys::PAGE_SIZE;

/// The hold and release batches' ops and results, reused batch after batch.
#[derive(Default)]
pub(super) struct HoldBufs {
    ops: Vec<GrantCopy>,
    statuses: Vec<i16>,
    frames: Vec<u32>,
    release: Vec<GrantCopy>,
}

impl Netback {
    /// hv-copy TX gather, in four passes over a batch: parse and validate
    /// each packet while queueing its holds; hold the batch in one
    /// hypercall; check each packet's header copy and forward the batch;
    /// release the holds in one more and answer every request.
    pub(super) fn tx_hold(
        &mut self,
        hv: &mut HvClient,
        fwd: &mut dyn FnMut(&[FrameRef<'_>]),
    ) -> Result<(usize, Option<&'static str>)> {
        let mut pkts = std::mem::take(&mut self.tx_pkts);
        let mut b = std::mem::take(&mut self.hold);
        pkts.clear();
        b.ops.clear();
        let mut fatal = None;
        let mut slots_used = 0usize;
        while pkts.len() < TX_BUDGET && slots_used + XEN_NETIF_NR_SLOTS_MIN < SLOT_BUDGET {
            let mut p = match self.parse_packet(b.ops.len()) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(reason) => {
                    fatal = Some(reason);
                    break;
                }
            };
            slots_used += p.count + p.extras;
            self.control(&mut p);
            if p.forwardable() {
                p.refused = self.validate(&mut p);
            }
            if p.forwardable() {
                self.queue_holds(&mut p, &mut b.ops);
            }
            pkts.push(p);
        }
        let held = if b.ops.is_empty() {
            Ok(())
        } else {
            hv.hold_batch(&b.ops, &mut b.statuses, &mut b.frames)
        };
        self.counters.grant("hold", b.ops.len() as u64);
        // A failed call (hv's answer lost or late) may still have pinned
        // some: every op is released, and hv refuses those it does not hold.
        let release_all = held.is_err();
        if release_all {
            b.statuses.clear();
        }
        for (k, p) in pkts.iter_mut().enumerate() {
            if p.forwardable() {
                p.refused = self.check_held(p, k, &b).err();
            }
            if p.forwardable() {
                let h = &self.tx_held[k];
                p.dropped = self.filter_frame(&h.head[..h.head_len], p);
            }
        }
        self.forward_held(&pkts, fwd);
        self.release_holds(hv, &mut b, release_all);
        let mut overflow = false;
        for p in &pkts {
            if p.forwardable() {
                self.count_tx(p.total);
            }
            overflow |= self.respond(p).is_err();
        }
        let n = pkts.len();
        self.tx_pkts = pkts;
        self.hold = b;
        held?;
        if overflow {
            fatal = Some("ring_overflow");
        }
        Ok((n, fatal))
    }

    /// Queues one hold per slot of `p`: each copies the slot's part of the
    /// frame's first [`HEAD`] bytes (possibly none) into the staging frame
    /// of the packet's first op, at its place in the frame.
    fn queue_holds(&self, p: &mut TxPacket, ops: &mut Vec<GrantCopy>) {
        p.first_op = ops.len();
        let staging = u64::from(self.tx_base) + p.first_op as u64;
        let mut pos = 0usize;
        for s in p.slots() {
            let len = usize::from(s.len).min(HEAD.saturating_sub(pos));
            ops.push(GrantCopy {
                source: CopyPtr::Gref {
                    domid: self.guest,
                    gref: s.gref,
                    offset: s.offset,
                },
                dest: CopyPtr::Frame {
                    domid: DOMID_SELF,
                    gmfn: staging,
                    offset: if len == 0 { 0 } else { pos as u16 },
                },
                len: len as u16,
                status: 0,
            });
            pos += usize::from(s.len);
        }
    }

    /// After the hold batch: each of `p`'s holds succeeded, its frames lie
    /// in the window, and its header copy passes the checks. Fills held
    /// packet `k` (header copy, checksum state, payload ranges).
    fn check_held(
        &mut self,
        p: &TxPacket,
        k: usize,
        b: &HoldBufs,
    ) -> std::result::Result<(), &'static str> {
        let Some(window) = self.window.as_ref() else {
            return Err("grant_absent");
        };
        let mut segs = [(0usize, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        for (i, s) in p.slots().iter().enumerate() {
            let op = p.first_op + i;
            match b.statuses.get(op).copied() {
                Some(0) => {}
                Some(st) => return Err(grant_reason(st)),
                None => return Err("copy_missing"),
            }
            segs[i] = window_seg(window, b.frames[op], s)?;
        }
        let hl = p.total.min(HEAD);
        let staging = Pfn::new(self.tx_base + p.first_op as u32);
        let held = &mut self.tx_held[k];
        self.pool.read_bytes(staging.base(), &mut held.head[..hl]);
        held.head_len = hl;
        held.rest_count = skip(&segs[..p.count], hl, &mut held.rest);
        let csum = self.check_frame(&self.tx_held[k].head[..hl], p)?;
        self.tx_held[k].csum = csum;
        Ok(())
    }

    /// Releases every hold that succeeded (with `all`, every op: the hold
    /// call failed, so which were pinned is unknown), in one batch. A
    /// failure leaves pins behind (hv drops them with this domain); it is
    /// logged and counted (`release_failed`), and the requests are answered
    /// all the same.
    fn release_holds(&mut self, hv: &mut HvClient, b: &mut HoldBufs, all: bool) {
        b.release.clear();
        if all {
            b.release.extend_from_slice(&b.ops);
        }
        for (op, st) in b.ops.iter().zip(&b.statuses) {
            if *st == 0 && !all {
                b.release.push(*op);
            }
        }
        if b.release.is_empty() {
            return;
        }
        self.counters.grant("release", b.release.len() as u64);
        let mut st = std::mem::take(&mut b.statuses);
        let r = hv.release_batch(&b.release, &mut st);
        let failed = st.iter().filter(|s| **s != 0).count();
        b.statuses = st;
        if !all && (r.is_err() || failed > 0) {
            let n = if r.is_err() { b.release.len() } else { failed };
            self.counters.grant("release_failed", n as u64);
            eprintln!(
                "netback {}: hv did not release {} of {} held TX grants: {r:?}",
                crate::vif_name(&self.be),
                if r.is_err() { b.release.len() } else { failed },
                b.release.len()
            );
        }
    }
}

/// Where slot `s`'s bytes are in the window: the frame hv pinned, checked
/// against the window, and the slot's range against its page.
fn window_seg(
    window: &sys::Mapping,
    frame: u32,
    s: &TxSlot,
) -> std::result::Result<(usize, usize), &'static str> {
    let frames = (window.len() / PAGE_SIZE) as u32;
    let pfn = Pfn::checked(u64::from(frame), frames).map_err(|_| "grant_bad_frame")?;
    let r = FrameRange::new(pfn, usize::from(s.offset), usize::from(s.len))
        .map_err(|_| "crosses_page")?;
    window
        .check_range(r.pool_offset(), r.len())
        .map_err(|_| "grant_bad_frame")?;
    Ok((r.pool_offset(), r.len()))
}
