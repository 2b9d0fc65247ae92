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

use super::grants::{op_done, window_seg, Reach, TxGrants, HEAD};
use super::{Netback, Result, TxPacket};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::netif::XEN_NETIF_NR_SLOTS_MIN;
use abi::{Pfn, SharedMemory};
use hypercall::{HvClient, HvError};

/// hv-copy TX gather as a [`TxGrants`] mechanism: the hold and release
/// batches' ops and results, reused batch after batch.
#[derive(Default)]
pub(super) struct HoldTx {
    ops: Vec<GrantCopy>,
    statuses: Vec<i16>,
    frames: Vec<u32>,
    release: Vec<GrantCopy>,
    /// The hold call failed: which grants hv pinned is unknown, so every
    /// op is released, and this error ends the batch once it is answered.
    failed: Option<HvError>,
}

impl TxGrants for HoldTx {
    fn begin(&mut self) {
        self.ops.clear();
        self.failed = None;
    }

    /// Queues one hold per slot of `p`: each copies the slot's part of the
    /// frame's first [`HEAD`] bytes (possibly none) into the staging frame
    /// of the packet's first op, at its place in the frame.
    fn queue(&mut self, nb: &Netback, p: &mut TxPacket) {
        p.first_op = self.ops.len();
        let staging = u64::from(nb.tx_base) + p.first_op as u64;
        let mut pos = 0usize;
        for s in p.slots() {
            let len = usize::from(s.len).min(HEAD.saturating_sub(pos));
            self.ops.push(GrantCopy {
                source: CopyPtr::Gref {
                    domid: nb.guest,
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

    /// Holds the batch in one hypercall. A failed call (hv's answer lost
    /// or late) refuses every packet, and may still have pinned some.
    fn prepare(&mut self, nb: &mut Netback, hv: &mut HvClient) -> Result<()> {
        let held = if self.ops.is_empty() {
            Ok(())
        } else {
            hv.hold_batch(&self.ops, &mut self.statuses, &mut self.frames)
        };
        nb.counters.grant("hold", self.ops.len() as u64);
        if let Err(e) = held {
            self.statuses.clear();
            self.failed = Some(e);
        }
        Ok(())
    }

    /// Each of `p`'s holds succeeded and its frames lie in the window:
    /// fills held packet `k` (header copy, payload ranges).
    fn reach(&mut self, nb: &mut Netback, _hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        let Some(window) = nb.window.as_ref() else {
            return Err("grant_absent");
        };
        let mut segs = [(0usize, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        for (i, s) in p.slots().iter().enumerate() {
            let op = p.first_op + i;
            op_done(&self.statuses, op)?;
            segs[i] = window_seg(window, self.frames[op], s)?;
        }
        let staging = Pfn::new(nb.tx_base + p.first_op as u32);
        let pool = &nb.pool;
        nb.tx_held[k].fill(p.total, &segs[..p.count], |dst| {
            pool.read_bytes(staging.base(), dst)
        });
        Ok(())
    }

    fn pool<'a>(&self, nb: &'a Netback) -> Option<&'a sys::Mapping> {
        nb.window.as_ref()
    }

    /// Releases the holds in one batch, then hands back the hold call's
    /// error, if it failed.
    fn finish(&mut self, nb: &mut Netback, hv: &mut HvClient) -> Result<()> {
        self.release_holds(nb, hv);
        match self.failed.take() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

impl HoldTx {
    /// Releases every hold that succeeded (after a failed hold call, every
    /// op: which were pinned is unknown), in one batch. A failure leaves
    /// pins behind (hv drops them with this domain); it is logged and
    /// counted (`release_failed`), and the requests are answered all the
    /// same.
    fn release_holds(&mut self, nb: &mut Netback, hv: &mut HvClient) {
        let all = self.failed.is_some();
        self.release.clear();
        if all {
            self.release.extend_from_slice(&self.ops);
        }
        for (op, st) in self.ops.iter().zip(&self.statuses) {
            if *st == 0 && !all {
                self.release.push(*op);
            }
        }
        if self.release.is_empty() {
            return;
        }
        nb.counters.grant("release", self.release.len() as u64);
        let r = hv.release_batch(&self.release, &mut self.statuses);
        let failed = self.statuses.iter().filter(|s| **s != 0).count();
        if !all && (r.is_err() || failed > 0) {
            let n = if r.is_err() {
                self.release.len()
            } else {
                failed
            };
            nb.counters.grant("release_failed", n as u64);
            eprintln!(
                "netback {}: hv did not release {n} of {} held TX grants: {r:?}",
                crate::vif_name(&nb.be),
                self.release.len()
            );
        }
    }
}
