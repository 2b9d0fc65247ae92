//! How TX reaches a guest's buffers: one trait, [`TxGrants`], for the
//! grant mechanisms, behind the one batch loop in [`super::tx`]. The loop
//! parses, validates, checks, forwards and answers; a mechanism only takes
//! and ends access to the buffers and says where the bytes are:
//!
//! - [`NgmTx`], the new grant mechanism (Ram thesis ch. 4): a use of each
//!   grant taken against hv's translation table, the headers copied, the
//!   payload left in the guest's pool (Menon 2006 §4.1);
//! - `HoldTx` ([`super::hold`]): hv-copy TX gather, the same without the new
//!   grant mechanism, hv holding the grants for the batch;
//! - `HeaderTx` ([`super::header`]): Xen's I/O channel under Xen's grants,
//!   netback reading each grant in the guest's table itself, no hypercall;
//! - [`CopyTx`]: hv copies every slot into staging frames (hv-copy);
//! - [`MapTx`]: each page mapped, its headers copied out, its payload sent
//!   from where the guest wrote it, and unmapped (Xen 2.0), the maps and
//!   unmaps batched per ring batch.
//!
//! The loop is generic over the mechanism: one dispatch per batch, none per
//! packet.

use super::{grant_reason, hv_reason, Netback, Result, TxPacket, TxSlot};
use super::{SLOT_BUDGET, TX_BUDGET};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::netif::XEN_NETIF_NR_SLOTS_MIN;
use abi::{FrameRange, Pfn, SharedMemory};
use frame::packet::{Csum, FrameRef};
use hypercall::client::BatchMapped;
use hypercall::ngm_client::NgmView;
use hypercall::HvClient;
use std::collections::HashMap;
use sys::Mapping;

/// Bytes of each TX packet netback copies to decide on: enough for Ethernet,
/// IPv4 or IPv6 with options, and TCP with options.
pub const HEAD: usize = 256;

/// The ranges of `segs` after their first `n` bytes, written to `out`;
/// returns how many.
fn skip(segs: &[(usize, usize)], mut n: usize, out: &mut [(usize, usize)]) -> usize {
    let mut k = 0;
    for &(off, len) in segs {
        if n >= len {
            n -= len;
            continue;
        }
        out[k] = (off + n, len - n);
        n = 0;
        k += 1;
    }
    k
}

/// Whether a packet's bytes were reached, or why it is refused.
pub(super) type Reach = std::result::Result<(), &'static str>;

/// A grant mechanism as the TX batch loop ([`Netback::tx_batch`]) uses it.
/// `k` is a packet's position in the batch.
pub(super) trait TxGrants {
    /// Whether the batch takes another packet after `slots` ring slots:
    /// a batch with a hypercall is bounded by its staging frames.
    fn room(&self, slots: usize) -> bool {
        slots + XEN_NETIF_NR_SLOTS_MIN < SLOT_BUDGET
    }

    /// A new batch: the last one's work is forgotten.
    fn begin(&mut self) {}

    /// Queues what the batch's hypercall does for validated packet `p`.
    fn queue(&mut self, _nb: &Netback, _p: &mut TxPacket) {}

    /// The batch's hypercall, once every packet is read. An error ends the
    /// batch there.
    fn prepare(&mut self, _nb: &mut Netback, _hv: &mut HvClient) -> Result<()> {
        Ok(())
    }

    /// Reaches packet `k`'s bytes: its grants checked and taken, its
    /// headers copied where [`TxGrants::head`] finds them. A refusal
    /// leaves nothing taken.
    fn reach(&mut self, nb: &mut Netback, hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach;

    /// The guest's pool, where a held packet's payload stays (Menon 2006
    /// §4.1) after its header copy in [`Netback::tx_held`].
    fn pool<'a>(&self, _nb: &'a Netback) -> Option<&'a Mapping> {
        None
    }

    /// The frames copied out whole, for a mechanism that copies them.
    fn copied(&self) -> Option<&CopiedOut> {
        None
    }

    /// The private header bytes of reached packet `k`: what the checks,
    /// the bridge and the filters see, and what is sent as its headers.
    fn head<'a>(&'a self, nb: &'a Netback, k: usize) -> &'a [u8] {
        match self.copied() {
            Some(out) => out.get(k),
            None => nb.tx_held[k].head(),
        }
    }

    /// Reached packet `k` as it is forwarded.
    fn frame<'a>(&'a self, nb: &'a Netback, p: &TxPacket, k: usize) -> FrameRef<'a> {
        match (self.copied(), self.pool(nb)) {
            (Some(out), _) => FrameRef::private(out.get(k), nb.tx_held[k].csum, p.gso),
            (None, Some(pool)) => nb.tx_held[k].frame(pool, p),
            (None, None) => FrameRef::private(&[], Csum::Unknown, None),
        }
    }

    /// Ends what [`TxGrants::reach`] took for `p`: once it is forwarded,
    /// or when it is refused or dropped after it was reached.
    fn release(&mut self, _nb: &Netback, _p: &TxPacket) {}

    /// After forwarding, before any response: ends the batch's access.
    /// An error (the batch's hypercall failed) is returned once every
    /// request is answered.
    fn finish(&mut self, _nb: &mut Netback, _hv: &mut HvClient) -> Result<()> {
        Ok(())
    }
}

/// A TX packet held for forwarding, its grants in use until it is
/// answered: the header copy netback checked (Menon 2006 §4.1) and where
/// the rest of the frame is in the guest's pool. Only the checksum state
/// is kept for a packet copied out whole.
#[derive(Clone, Copy)]
pub(super) struct Held {
    head: [u8; HEAD],
    head_len: usize,
    /// The checksum state its header checks found.
    pub(super) csum: Csum,
    rest: [(usize, usize); XEN_NETIF_NR_SLOTS_MIN],
    rest_count: usize,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            head: [0; HEAD],
            head_len: 0,
            csum: Csum::Unknown,
            rest: [(0, 0); XEN_NETIF_NR_SLOTS_MIN],
            rest_count: 0,
        }
    }
}

impl Held {
    /// The checked header copy.
    pub(super) fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }

    /// Fills the header copy of a frame of `len` bytes (its first [`HEAD`]
    /// bytes, which `copy` writes) and keeps where the rest is in the
    /// guest's pool: `segs`, the whole frame's ranges, after those bytes.
    pub(super) fn fill(
        &mut self,
        len: usize,
        segs: &[(usize, usize)],
        copy: impl FnOnce(&mut [u8]),
    ) {
        let _ = self.try_fill(len, segs, |dst| {
            copy(dst);
            Ok(())
        });
    }

    /// [`Held::fill`] from the guest's pool `pool`, where packet `p`'s
    /// bytes are `segs` (its whole frame's ranges, checked against `pool`).
    pub(super) fn fill_from(&mut self, pool: &Mapping, p: &TxPacket, segs: &[(usize, usize)]) {
        let whole = FrameRef {
            head: &[],
            body: &[],
            map: Some(pool),
            segs,
            len: p.total,
            csum: Csum::Unknown,
            gso: p.gso,
            vlan: None,
        };
        self.fill(p.total, segs, |dst| whole.copy_out(0, dst));
    }

    /// [`Held::fill`] with a copy that may fail, which leaves the packet
    /// refused for the copy's reason.
    pub(super) fn try_fill(
        &mut self,
        len: usize,
        segs: &[(usize, usize)],
        copy: impl FnOnce(&mut [u8]) -> Reach,
    ) -> Reach {
        let hl = len.min(HEAD);
        copy(&mut self.head[..hl])?;
        self.head_len = hl;
        self.rest_count = skip(segs, hl, &mut self.rest);
        Ok(())
    }

    /// The packet as forwarded: the checked header copy, then the rest of
    /// its bytes in the guest's pool `pool` (TX gather, Menon 2006 §4.1).
    pub(super) fn frame<'a>(&'a self, pool: &'a Mapping, p: &TxPacket) -> FrameRef<'a> {
        FrameRef {
            head: self.head(),
            body: &[],
            map: Some(pool),
            segs: &self.rest[..self.rest_count],
            len: p.total,
            csum: self.csum,
            gso: p.gso,
            vlan: None,
        }
    }
}

/// The new grant mechanism: no hypercall; each packet's grants are taken
/// against the translation table while it is checked and forwarded.
pub(super) struct NgmTx;

impl TxGrants for NgmTx {
    fn room(&self, _slots: usize) -> bool {
        true
    }

    /// Takes a use of each grant (checked against the translation table)
    /// and copies the headers into held packet `k`.
    fn reach(&mut self, nb: &mut Netback, _hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        let Some(view) = nb.ngm.as_ref() else {
            return Err("grant_absent");
        };
        // Where each slot's bytes are in the guest's pool: a frame checked
        // against the pool, a range checked against its page and the
        // mapping, so the copies cannot leave it.
        let mut segs = [(0usize, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        for (i, s) in p.slots().iter().enumerate() {
            match ngm_seg(view, s) {
                Ok(seg) => segs[i] = seg,
                Err(reason) => {
                    for s in &p.slots()[..i] {
                        view.release(s.gref);
                    }
                    return Err(reason);
                }
            }
        }
        nb.tx_held[k].fill_from(view.pool(), p, &segs[..p.count]);
        Ok(())
    }

    fn pool<'a>(&self, nb: &'a Netback) -> Option<&'a Mapping> {
        nb.ngm.as_ref().map(|v| v.pool())
    }

    /// Ends the uses [`NgmTx::reach`] took.
    fn release(&mut self, nb: &Netback, p: &TxPacket) {
        if let Some(view) = nb.ngm.as_ref() {
            for s in p.slots() {
                view.release(s.gref);
            }
        }
    }
}

/// Takes a use of slot `s`'s grant and returns where its bytes are in the
/// guest's pool: the frame checked against the pool (by the view), the
/// range against its page and the mapping. On a refusal no use is left.
fn ngm_seg(view: &NgmView, s: &TxSlot) -> std::result::Result<(usize, usize), &'static str> {
    let pfn = view.acquire(s.gref, false).map_err(|r| r.reason())?;
    let range = FrameRange::new(pfn, s.offset as usize, s.len as usize).and_then(|r| {
        view.pool()
            .check_range(r.pool_offset(), r.len())
            .map(|()| r)
    });
    match range {
        Ok(r) => Ok((r.pool_offset(), r.len())),
        Err(e) => {
            view.release(s.gref);
            Err(e.reason())
        }
    }
}

/// The new grant mechanism's TX copy (`tx_mode = "copy"`): each packet is
/// reached as [`NgmTx`] reaches it, copied out whole into storage reused
/// batch after batch, and its grants' uses ended at once, so nothing the
/// guest does to its pages afterwards reaches the frame.
#[derive(Default)]
pub(super) struct NgmCopyTx {
    out: CopiedOut,
}

impl TxGrants for NgmCopyTx {
    fn room(&self, _slots: usize) -> bool {
        true
    }

    fn begin(&mut self) {
        self.out.bytes.clear();
    }

    /// Reaches the packet through the translation table, then copies its
    /// checked header copy and its pool segments out.
    fn reach(&mut self, nb: &mut Netback, hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        NgmTx.reach(nb, hv, p, k)?;
        let Some(view) = nb.ngm.as_ref() else {
            return Err("grant_absent");
        };
        self.out.start(k);
        let dst = self.out.grow(k, p.total);
        nb.tx_held[k].frame(view.pool(), p).copy_out(0, dst);
        nb.counters.tx_copied_bytes += p.total as u64;
        NgmTx.release(nb, p);
        Ok(())
    }

    fn copied(&self) -> Option<&CopiedOut> {
        Some(&self.out)
    }
}

/// Whole frames copied out of the guest's buffers into private memory,
/// one batch's worth, in storage reused batch after batch (TX copy, under
/// hv-copy and under the new grant mechanism).
pub(super) struct CopiedOut {
    bytes: Vec<u8>,
    /// Where packet `k`'s bytes are in `bytes`: (start, length).
    at: [(usize, usize); TX_BUDGET],
}

impl Default for CopiedOut {
    fn default() -> CopiedOut {
        CopiedOut {
            bytes: Vec::new(),
            at: [(0, 0); TX_BUDGET],
        }
    }
}

impl CopiedOut {
    /// Packet `k`'s bytes.
    fn get(&self, k: usize) -> &[u8] {
        let (start, len) = self.at[k];
        &self.bytes[start..start + len]
    }

    /// Starts packet `k`'s bytes.
    fn start(&mut self, k: usize) {
        self.at[k] = (self.bytes.len(), 0);
    }

    /// Room for `len` more bytes of packet `k`, to be written.
    fn grow(&mut self, k: usize, len: usize) -> &mut [u8] {
        let at = self.bytes.len();
        self.bytes.resize(at + len, 0);
        self.at[k].1 += len;
        &mut self.bytes[at..]
    }
}

/// hv-copy TX copy: one grant-copy batch per ring batch moves every slot
/// into this vif's staging frames, from which netback copies the frame out.
#[derive(Default)]
pub(super) struct CopyTx {
    ops: Vec<GrantCopy>,
    statuses: Vec<i16>,
    out: CopiedOut,
}

impl TxGrants for CopyTx {
    fn begin(&mut self) {
        self.ops.clear();
        self.statuses.clear();
        self.out.bytes.clear();
    }

    /// One grant copy per slot, each into a staging frame of its own.
    fn queue(&mut self, nb: &Netback, p: &mut TxPacket) {
        p.first_op = self.ops.len();
        for s in p.slots() {
            self.ops.push(nb.staging_copy(s, self.ops.len()));
        }
    }

    fn prepare(&mut self, nb: &mut Netback, hv: &mut HvClient) -> Result<()> {
        if !self.ops.is_empty() {
            hv.grant_copy_batch_into(&self.ops, &mut self.statuses)?;
        }
        nb.counters.grant("copy", self.ops.len() as u64);
        Ok(())
    }

    /// Each slot's copy succeeded: the staging frames are copied out.
    fn reach(&mut self, nb: &mut Netback, _hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        self.out.start(k);
        for (i, s) in p.slots().iter().enumerate() {
            let op = p.first_op + i;
            op_done(&self.statuses, op)?;
            // One of this vif's own staging frames, inside its pool by construction.
            let frame = Pfn::new(nb.tx_base + op as u32);
            let dst = self.out.grow(k, usize::from(s.len));
            nb.pool.read_bytes(frame.base(), dst);
            nb.counters.tx_copied_bytes += u64::from(s.len);
        }
        Ok(())
    }

    fn copied(&self) -> Option<&CopiedOut> {
        Some(&self.out)
    }
}

/// Xen 2.0 transmit (`tx_mode = "map"`, Menon 2006 §2): every page of the
/// ring batch is mapped in one map batch before the packets are read, each
/// packet's headers copied out of its mapped pages, and all of them
/// unmapped in one unmap batch at the batch's end, as Linux netback batches
/// its GNTTABOP_map_grant_ref and unmap_grant_ref calls per ring batch.
/// The payload is not copied: Xen's netback made the mapped pages the
/// frame's fragments and the NIC read them by their physical addresses,
/// which the read-only window on the guest's pool stands for here (as for
/// TX gather, [`super::hold`]). Only the frames hv mapped are sent from it.
#[derive(Default)]
pub(super) struct MapTx {
    /// The batch's grant references, each once (a guest may name one in
    /// several slots; hv maps a grant once per domain).
    grefs: Vec<u32>,
    /// Where each grant reference is in `grefs`.
    index: HashMap<u32, usize>,
    /// Each queued slot's place in `grefs`.
    slot_map: Vec<usize>,
    /// Each map op's outcome.
    maps: Vec<hypercall::HvResult<BatchMapped>>,
    /// The handles to unmap at the batch's end.
    handles: Vec<u32>,
}

impl TxGrants for MapTx {
    fn begin(&mut self) {
        self.grefs.clear();
        self.index.clear();
        self.slot_map.clear();
        self.maps.clear();
        self.handles.clear();
    }

    /// Each slot's grant joins the batch's maps, once.
    fn queue(&mut self, _nb: &Netback, p: &mut TxPacket) {
        p.first_op = self.slot_map.len();
        for s in p.slots() {
            let next = self.grefs.len();
            let i = *self.index.entry(s.gref).or_insert(next);
            if i == next {
                self.grefs.push(s.gref);
            }
            self.slot_map.push(i);
        }
    }

    /// One map batch for the whole ring batch; the vif's grant counters
    /// name copies (none) as under hv copy, so both modes publish the same
    /// counters, and count maps per op and map batches per hypercall.
    fn prepare(&mut self, nb: &mut Netback, hv: &mut HvClient) -> Result<()> {
        nb.counters.grant("copy", 0);
        if self.grefs.is_empty() {
            return Ok(());
        }
        self.maps = hv.map_batch(nb.guest, &self.grefs, false)?;
        self.handles.extend(
            self.maps
                .iter()
                .filter_map(|m| Some(m.as_ref().ok()?.handle)),
        );
        nb.counters.grant("map", self.handles.len() as u64);
        nb.counters.grant("map_batch", 1);
        // Whether those maps are page-table entries in the guest's pool
        // mirror, or mmaps into the window where the host cannot mirror.
        let by_mirror = if hv.maps_by_mirror(nb.guest, false) {
            self.handles.len() as u64
        } else {
            0
        };
        nb.counters.grant("map_pte", by_mirror);
        Ok(())
    }

    /// Packet `k`'s headers copied out of its mapped pages into held
    /// packet `k`, and where the rest is in the window: each slot's frame
    /// as hv mapped it, checked against the window.
    fn reach(&mut self, nb: &mut Netback, hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        let Some(window) = nb.window.as_ref() else {
            return Err("grant_absent");
        };
        let mut mapped = [(0u32, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        let mut segs = [(0usize, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        for (i, s) in p.slots().iter().enumerate() {
            let m = match self
                .slot_map
                .get(p.first_op + i)
                .and_then(|&j| self.maps.get(j))
            {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(hv_reason(e)),
                None => return Err("copy_missing"),
            };
            segs[i] = window_seg(window, m.frame, s)?;
            mapped[i] = (m.handle, usize::from(s.offset));
        }
        let slots = p.slots();
        nb.tx_held[k].try_fill(p.total, &segs[..p.count], |dst| {
            head_from_mapped(hv, &mapped[..p.count], slots, dst)
        })
    }

    /// The window on the guest's pool, where the NIC reads the payload.
    fn pool<'a>(&self, nb: &'a Netback) -> Option<&'a Mapping> {
        nb.window.as_ref()
    }

    /// One unmap batch for every page the batch mapped.
    fn finish(&mut self, nb: &mut Netback, hv: &mut HvClient) -> Result<()> {
        if self.handles.is_empty() {
            return Ok(());
        }
        let statuses = hv.unmap_batch(&self.handles)?;
        self.handles.clear();
        let done = statuses.iter().filter(|s| **s == 0).count();
        nb.counters.grant("unmap", done as u64);
        nb.counters.grant("unmap_batch", 1);
        Ok(())
    }
}

/// Where slot `s`'s bytes are in the window: the frame hv pinned, checked
/// against the window, and the slot's range against its page.
pub(super) fn window_seg(
    window: &sys::Mapping,
    frame: u32,
    s: &TxSlot,
) -> std::result::Result<(usize, usize), &'static str> {
    let frames = (window.len() / sys::PAGE_SIZE) as u32;
    let pfn = Pfn::checked(u64::from(frame), frames).map_err(|_| "grant_bad_frame")?;
    let r = FrameRange::new(pfn, usize::from(s.offset), usize::from(s.len))
        .map_err(|_| "crosses_page")?;
    window
        .check_range(r.pool_offset(), r.len())
        .map_err(|_| "grant_bad_frame")?;
    Ok((r.pool_offset(), r.len()))
}

/// Copies a frame's first `dst.len()` bytes out of its mapped pages:
/// `mapped` is each slot's (handle, offset in its page).
fn head_from_mapped(
    hv: &HvClient,
    mapped: &[(u32, usize)],
    slots: &[TxSlot],
    dst: &mut [u8],
) -> Reach {
    let mut done = 0;
    for (&(handle, off), s) in mapped.iter().zip(slots) {
        if done == dst.len() {
            break;
        }
        let n = usize::from(s.len).min(dst.len() - done);
        hv.read_mapped(handle, off, &mut dst[done..done + n])
            .map_err(|_| "crosses_page")?;
        done += n;
    }
    Ok(())
}

/// Whether hv did op `op` of a batch whose statuses are `statuses`: its
/// refusal as hv said it, or `copy_missing` when hv gave no status.
pub(super) fn op_done(statuses: &[i16], op: usize) -> Reach {
    match statuses.get(op).copied() {
        Some(0) => Ok(()),
        Some(st) => Err(grant_reason(st)),
        None => Err("copy_missing"),
    }
}

impl Netback {
    /// One grant copy of a slot into this vif's `k`th TX staging frame.
    fn staging_copy(&self, s: &TxSlot, k: usize) -> GrantCopy {
        GrantCopy {
            source: CopyPtr::Gref {
                domid: self.guest,
                gref: s.gref,
                offset: s.offset,
            },
            dest: CopyPtr::Frame {
                domid: DOMID_SELF,
                gmfn: (self.tx_base + k as u32) as u64,
                offset: 0,
            },
            len: s.len,
            status: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::skip;

    #[test]
    fn skip_drops_the_header_bytes_from_the_ranges() {
        let segs = [(100, 50), (4096, 4096), (8192, 10)];
        let mut out = [(0, 0); 3];
        assert_eq!(skip(&segs, 0, &mut out), 3);
        assert_eq!(out, segs);
        assert_eq!(skip(&segs, 60, &mut out), 2);
        assert_eq!(out[..2], [(4106, 4086), (8192, 10)]);
        assert_eq!(skip(&segs, 50, &mut out), 2);
        assert_eq!(out[..2], [(4096, 4096), (8192, 10)]);
        assert_eq!(skip(&segs, 5000, &mut out), 0);
    }
}
