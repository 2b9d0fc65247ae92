//! Grant maps and unmaps a batch at a time: GNTTABOP_map_grant_ref and
//! unmap_grant_ref over the shared batch page, one hypercall per batch, as
//! Linux netback issues them over a TX ring batch (the Xen 2.0 transmit
//! path maps each granted page, copies out and unmaps, Menon 2006 §2).
//!
//! A frame is mapped the way Xen mapped it, as a page-table entry, where
//! the host allows: the granter's whole pool is mirrored once per access
//! ([`sys::PoolMirror`]), a map installs one entry (a huge page's, for a
//! pool on superpages), a batch's adjacent frames in one call, and a
//! batch's unmap zaps its entries in one call, a TLB flush per run of
//! adjacent frames. Elsewhere (no userfaultfd, swap on, or
//! [`HvClient::set_pool_mirrors`] off) the frames
//! land in a window reserved once per granting domain ([`sys::Window`]):
//! one `mmap` per run of consecutive frames, and the unmap of a batch is
//! one `mmap` over each run of its slots. The granter's pool descriptor
//! still comes once per (granter, access), with the first map over the
//! control socket.

use super::{io, HvClient};
use crate::batch::{self, BatchKind};
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{DomId, Reply, Request};
use abi::grant::{GrantMap, GrantMapView, GrantUnmap, GrantUnmapView, MapFlags};
use abi::{Pfn, SharedMemory};
use std::os::fd::{AsFd, BorrowedFd};
use sys::{Mapping, PoolMirror, Window, PAGE_SIZE};

/// Slots of each granting domain's window: two full map batches.
pub const WINDOW_SLOTS: usize = 1024;

/// A grant mapped by [`HvClient::map_batch`]: its handle, by which it is
/// read ([`HvClient::read_mapped`]) and unmapped, and the granted frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMapped {
    pub handle: u32,
    pub frame: u32,
}

/// Where a batch-mapped frame is.
#[derive(Debug)]
enum At {
    /// A slot of the granter's window.
    Slot(usize),
    /// A mapping of its own (a pool on huge pages maps only in whole ones).
    Own(Mapping),
    /// Its page-table entry in the granter's pool mirror for this access.
    Mirrored { writable: bool, frame: u32 },
}

/// A grant mapped by a batch, as the client keeps it.
#[derive(Debug)]
pub(super) struct BatchMapping {
    granter: DomId,
    gref: u32,
    at: At,
}

/// One op's outcome as hv wrote it back: (handle, frame) or the error.
type OpResult = HvResult<(u32, u32)>;

impl HvClient {
    /// Maps `granter`'s grants `grefs` (read-only unless `writable`), one
    /// hypercall per batch page's worth, each into the granter's window.
    /// Returns each op's outcome in order: a refused op carries hv's error
    /// kind, as [`HvClient::map_grant`] would have returned it.
    pub fn map_batch(
        &mut self,
        granter: DomId,
        grefs: &[u32],
        writable: bool,
    ) -> HvResult<Vec<HvResult<BatchMapped>>> {
        let mut out = Vec::with_capacity(grefs.len());
        let mut rest = grefs;
        // The pool descriptor comes with a map over the control socket.
        while let Some((&gref, tail)) = rest.split_first() {
            if self.peer_pools.contains_key(&(granter, writable)) {
                break;
            }
            let r = self.map_control(granter, gref, writable);
            out.push(self.place(granter, &[gref], &[r], writable)?.remove(0));
            rest = tail;
        }
        let max = BatchKind::Map.max_ops(self.welcome.batch_pages);
        for chunk in rest.chunks(max) {
            let ops = self.map_ops(granter, chunk, writable)?;
            out.extend(self.place(granter, chunk, &ops, writable)?);
        }
        Ok(out)
    }

    /// One map over the control socket, which brings the pool descriptor
    /// the first time this domain maps from `granter` with this access.
    pub(super) fn map_control(&mut self, granter: DomId, gref: u32, writable: bool) -> OpResult {
        let req = Request::GrantMap {
            granter,
            gref,
            writable,
        };
        let (reply, mut fds) = self.chan.call(&req)?;
        let Reply::Mapped {
            handle,
            frame,
            fd_attached,
            ..
        } = reply
        else {
            return err(ErrorKind::Internal, "unexpected reply to map");
        };
        if fd_attached {
            let fd = fds
                .pop()
                .ok_or_else(|| HvError::internal("map", "missing pool descriptor"))?;
            self.peer_pools.insert((granter, writable), fd);
        }
        Ok((handle, frame))
    }

    /// One map batch through the batch page: each op's outcome.
    fn map_ops(
        &mut self,
        granter: DomId,
        grefs: &[u32],
        writable: bool,
    ) -> HvResult<Vec<OpResult>> {
        let flags = MapFlags::HOST_MAP.with(MapFlags::READONLY, !writable);
        let mut rec = [0u8; GrantMap::SIZE];
        for (i, &gref) in grefs.iter().enumerate() {
            let op = GrantMap {
                flags,
                gref,
                dom: granter,
                ..GrantMap::default()
            };
            op.emit(&mut GrantMapView::new_checked(&mut rec[..]).map_err(encode)?);
            self.batch
                .write_bytes(batch::OPS_OFF + i * GrantMap::SIZE, &rec);
        }
        self.kind_raw_batch(BatchKind::Map, grefs.len())?;
        let mut out = Vec::with_capacity(grefs.len());
        for (i, &gref) in grefs.iter().enumerate() {
            self.batch
                .read_bytes(batch::OPS_OFF + i * GrantMap::SIZE, &mut rec);
            let v = GrantMapView::new_checked(&rec[..]).map_err(encode)?;
            out.push(match v.status() {
                0 => Ok((v.handle(), (v.dev_bus_addr() / PAGE_SIZE as u64) as u32)),
                st => Err(HvError::new(
                    ErrorKind::from_code(v.handle()),
                    format!("map of grant {gref} of domain {granter} refused (status {st})"),
                )),
            });
        }
        Ok(out)
    }

    /// The shared batch page, for tests that write hostile ops into it
    /// and submit them with [`HvClient::submit_raw_batch`].
    pub fn batch_page(&self) -> &Mapping {
        &self.batch
    }

    /// Unmaps the grants `handles` name: first each frame mapped here, one
    /// `mmap` per run of window slots and one zap of mirrored entries, then
    /// at hv in one batch (GNTTABOP_unmap_grant_ref). Returns each op's
    /// status; a handle this domain does not hold is hv's
    /// GNTST_bad_handle, and changes nothing else.
    pub fn unmap_batch(&mut self, handles: &[u32]) -> HvResult<Vec<i16>> {
        let mut slots: Vec<(DomId, usize)> = Vec::with_capacity(handles.len());
        let mut frames: Vec<(DomId, bool, u32)> = Vec::new();
        for h in handles {
            match self.batch_maps.remove(h).map(|m| (m.granter, m.at)) {
                Some((g, At::Slot(s))) => slots.push((g, s)),
                Some((g, At::Mirrored { writable, frame })) => frames.push((g, writable, frame)),
                _ => {}
            }
        }
        let local = self
            .unmap_slots(&mut slots)
            .and(self.unmap_mirrored(&mut frames));
        let statuses = self.unmap_ops(handles)?;
        local.map(|()| statuses)
    }

    /// Gives window slots back, one `mmap` per run of consecutive ones.
    fn unmap_slots(&mut self, slots: &mut [(DomId, usize)]) -> HvResult<()> {
        slots.sort_unstable();
        let mut local = Ok(());
        let mut i = 0;
        while i < slots.len() {
            let (granter, first) = slots[i];
            let mut n = 1;
            while slots.get(i + n) == Some(&(granter, first + n)) {
                n += 1;
            }
            if let Some(w) = self.windows.get_mut(&granter) {
                if let Err(e) = w.unmap(first, n) {
                    local = Err(HvError::internal("unmapping granted frames", e));
                }
            }
            i += n;
        }
        local
    }

    /// Zaps mirrored frames, one call per granter and access (a range per
    /// run of adjacent frames).
    fn unmap_mirrored(&mut self, frames: &mut [(DomId, bool, u32)]) -> HvResult<()> {
        frames.sort_unstable();
        let mut local = Ok(());
        for group in frames.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (granter, writable, _) = group[0];
            let Some(Some(m)) = self.mirrors.get_mut(&(granter, writable)) else {
                continue;
            };
            let fs: Vec<u32> = group.iter().map(|x| x.2).collect();
            if let Err(e) = m.unmap(&fs) {
                local = Err(HvError::internal("unmapping granted frames", e));
            }
        }
        local
    }

    /// Unmaps here the frame batch-mapped under `handle`, if there is one
    /// (it is being unmapped at hv one at a time).
    pub(super) fn forget_batch_mapped(&mut self, handle: u32) -> HvResult<()> {
        let Some(BatchMapping { granter, at, .. }) = self.batch_maps.remove(&handle) else {
            return Ok(());
        };
        match at {
            At::Slot(s) => match self.windows.get_mut(&granter) {
                Some(w) => io("unmapping a granted frame", w.unmap(s, 1)),
                None => Ok(()),
            },
            At::Mirrored { writable, frame } => {
                self.unmap_mirrored(&mut [(granter, writable, frame)])
            }
            At::Own(_) => Ok(()),
        }
    }

    /// Unmap batches at hv for `handles`, a batch page's worth each.
    fn unmap_ops(&mut self, handles: &[u32]) -> HvResult<Vec<i16>> {
        let mut statuses = Vec::with_capacity(handles.len());
        let max = BatchKind::Unmap.max_ops(self.welcome.batch_pages);
        let mut rec = [0u8; GrantUnmap::SIZE];
        let at = |i: usize| batch::OPS_OFF + i * GrantUnmap::SIZE;
        for chunk in handles.chunks(max) {
            for (i, &handle) in chunk.iter().enumerate() {
                let op = GrantUnmap {
                    handle,
                    ..GrantUnmap::default()
                };
                op.emit(&mut GrantUnmapView::new_checked(&mut rec[..]).map_err(encode)?);
                self.batch.write_bytes(at(i), &rec);
            }
            self.kind_raw_batch(BatchKind::Unmap, chunk.len())?;
            let st = BatchKind::Unmap.status_in_op();
            statuses.extend((0..chunk.len()).map(|i| self.batch.read_u16(at(i) + st) as i16));
        }
        Ok(statuses)
    }

    /// Copies bytes at `off` of the frame batch-mapped under `handle`.
    pub fn read_mapped(&self, handle: u32, off: usize, dst: &mut [u8]) -> HvResult<()> {
        let Some(m) = self.batch_maps.get(&handle) else {
            return err(
                ErrorKind::BadHandle,
                format!("handle {handle} is not batch-mapped here"),
            );
        };
        let r = match &m.at {
            At::Slot(s) => match self.windows.get(&m.granter) {
                Some(w) => w.try_read_bytes(*s, off, dst),
                None => return err(ErrorKind::Internal, "no grant window"),
            },
            At::Own(map) => map.try_read_bytes(off, dst),
            At::Mirrored { writable, frame } => match self.mirrors.get(&(m.granter, *writable)) {
                Some(Some(w)) => w.try_read_bytes(*frame, off, dst),
                _ => return err(ErrorKind::Internal, "no pool mirror"),
            },
        };
        r.map_err(|e| {
            let what = format!("mapped grant {} of domain {}", m.gref, m.granter);
            HvError::memory(&what, e)
        })
    }

    /// Submits `n` ops of `kind` already in the page and checks hv took
    /// the batch as a whole.
    pub(super) fn kind_raw_batch(&mut self, kind: BatchKind, n: usize) -> HvResult<()> {
        self.batch.write_u32(batch::KIND_OFF, kind as u32);
        let r = self.submit_raw_batch(n as u32);
        self.batch
            .write_u32(batch::KIND_OFF, BatchKind::Copy as u32);
        r?;
        match self.batch.read_u32(batch::RESULT_OFF) as i32 {
            0 => Ok(()),
            e => err(
                ErrorKind::Invalid,
                format!("hv refused the {kind:?} batch (errno {})", -e),
            ),
        }
    }

    /// Maps the frames of the ops hv mapped into `granter`'s window, one
    /// `mmap` per run of consecutive frames; an op whose frame cannot be
    /// mapped here is unmapped at hv again and reported as an error.
    fn place(
        &mut self,
        granter: DomId,
        grefs: &[u32],
        ops: &[OpResult],
        writable: bool,
    ) -> HvResult<Vec<HvResult<BatchMapped>>> {
        if self.mirror(granter, writable).is_some() {
            return self.place_mirrored(granter, grefs, ops, writable);
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.windows.entry(granter) {
            e.insert(io(
                "reserving a grant window",
                Window::reserve(WINDOW_SLOTS),
            )?);
        }
        let (Some(win), Some(fd)) = (
            self.windows.get_mut(&granter),
            self.peer_pools.get(&(granter, writable)),
        ) else {
            let e = HvError::new(
                ErrorKind::Internal,
                "no pool descriptor for the granting domain",
            );
            return self.give_back(ops, e);
        };
        let Some(base) = win.find_empty(ops.len()) else {
            let e = HvError::new(
                ErrorKind::Quota,
                format!("the grant window for domain {granter} is full; unmap first"),
            );
            return self.give_back(ops, e);
        };
        let mut out = Vec::with_capacity(ops.len());
        let mut back = Vec::new();
        let mut i = 0;
        while i < ops.len() {
            let (first, n) = match &ops[i] {
                Ok((_, first)) => (*first, run_len(ops, i)),
                Err(e) => {
                    out.push(Err(e.clone()));
                    i += 1;
                    continue;
                }
            };
            let in_window = map_run(win, base + i, n, fd.as_fd(), first, writable);
            for (k, op) in ops.iter().enumerate().skip(i).take(n) {
                let Ok((handle, frame)) = *op else { continue };
                let at = match &in_window {
                    Ok(true) => Ok(At::Slot(base + k)),
                    Ok(false) => own_frame(fd.as_fd(), frame, writable).map(At::Own),
                    Err(e) => Err(e.clone()),
                };
                match at {
                    Ok(at) => {
                        let gref = grefs[k];
                        self.batch_maps
                            .insert(handle, BatchMapping { granter, gref, at });
                        out.push(Ok(BatchMapped { handle, frame }));
                    }
                    Err(e) => {
                        back.push(handle);
                        out.push(Err(e));
                    }
                }
            }
            i += n;
        }
        if !back.is_empty() {
            self.unmap_ops(&back)?;
        }
        Ok(out)
    }
}

impl HvClient {
    /// Whether batch maps install page-table entries in a mirror of the
    /// granter's pool (the default, where the host allows) or map frames
    /// into a window with an `mmap` per run (`false`); maps already made
    /// keep where they are.
    pub fn set_pool_mirrors(&mut self, on: bool) {
        self.use_mirrors = on;
    }

    /// Whether maps of `granter`'s grants with this access are installed in
    /// a pool mirror (known once the first such map was made).
    pub fn maps_by_mirror(&self, granter: DomId, writable: bool) -> bool {
        self.use_mirrors && matches!(self.mirrors.get(&(granter, writable)), Some(Some(_)))
    }

    /// The mirror of `granter`'s pool for this access, made on first use;
    /// `None` where mirrors are off or the host cannot mirror that pool.
    fn mirror(&mut self, granter: DomId, writable: bool) -> Option<&mut PoolMirror> {
        if !self.use_mirrors {
            return None;
        }
        let key = (granter, writable);
        if !self.mirrors.contains_key(&key) {
            let fd = self.peer_pools.get(&key)?;
            let m = PoolMirror::new(fd.as_fd(), writable)
                .map_err(|e| {
                    eprintln!(
                        "hypercall: grant maps from domain {granter} go through a window, \
                         not a pool mirror: {e}"
                    )
                })
                .ok();
            self.mirrors.insert(key, m);
        }
        self.mirrors.get_mut(&key).and_then(Option::as_mut)
    }

    /// Installs each mapped op's frame in the granter's pool mirror; an op
    /// whose frame cannot be installed is unmapped at hv again and
    /// reported as an error.
    fn place_mirrored(
        &mut self,
        granter: DomId,
        grefs: &[u32],
        ops: &[OpResult],
        writable: bool,
    ) -> HvResult<Vec<HvResult<BatchMapped>>> {
        let mut out = Vec::with_capacity(ops.len());
        let mut back = Vec::new();
        let Some(Some(mirror)) = self.mirrors.get_mut(&(granter, writable)) else {
            return err(ErrorKind::Internal, "no pool mirror");
        };
        // One page-table update per run of adjacent frames.
        let frames: Vec<u32> = ops
            .iter()
            .filter_map(|op| Some(op.as_ref().ok()?.1))
            .collect();
        let mut placed = mirror.map_many(&frames).into_iter();
        for (op, &gref) in ops.iter().zip(grefs) {
            let (handle, frame) = match op {
                Ok(v) => *v,
                Err(e) => {
                    out.push(Err(e.clone()));
                    continue;
                }
            };
            let outcome = placed
                .next()
                .unwrap_or_else(|| Err(std::io::Error::other("no outcome from the mirror")));
            match outcome {
                Ok(()) => {
                    let at = At::Mirrored { writable, frame };
                    self.batch_maps
                        .insert(handle, BatchMapping { granter, gref, at });
                    out.push(Ok(BatchMapped { handle, frame }));
                }
                Err(e) => {
                    back.push(handle);
                    out.push(Err(HvError::internal("mapping a granted frame", e)));
                }
            }
        }
        if !back.is_empty() {
            self.unmap_ops(&back)?;
        }
        Ok(out)
    }

    /// Unmaps at hv the ops of a batch that cannot be placed, for error
    /// `e`: every op is reported refused.
    fn give_back(&mut self, ops: &[OpResult], e: HvError) -> HvResult<Vec<HvResult<BatchMapped>>> {
        let back: Vec<u32> = ops
            .iter()
            .filter_map(|op| Some(op.as_ref().ok()?.0))
            .collect();
        self.unmap_ops(&back)?;
        Ok(ops
            .iter()
            .map(|op| Err(op.as_ref().err().unwrap_or(&e).clone()))
            .collect())
    }
}

/// How many ops from `i` on were mapped, of consecutive frames.
fn run_len(ops: &[OpResult], i: usize) -> usize {
    let Ok((_, first)) = ops[i] else { return 0 };
    let mut n = 1;
    while let Some(Ok((_, f))) = ops.get(i + n) {
        if *f != first.wrapping_add(n as u32) {
            break;
        }
        n += 1;
    }
    n
}

/// Maps `n` consecutive frames from `first` of the pool `fd` over window
/// slots `slot..slot + n` in one `mmap`: `Ok(false)` when the pool lies on
/// huge pages, which map only whole (each frame then gets its own mapping).
fn map_run(
    win: &mut Window,
    slot: usize,
    n: usize,
    fd: BorrowedFd<'_>,
    first: u32,
    writable: bool,
) -> HvResult<bool> {
    match win.map(slot, n, fd, Pfn::new(first).file_offset(), writable) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput && slot + n <= win.slots() => {
            Ok(false)
        }
        Err(e) => Err(HvError::internal("mapping granted frames", e)),
    }
}

/// One frame of the pool `fd` in a mapping of its own.
fn own_frame(fd: BorrowedFd<'_>, frame: u32, writable: bool) -> HvResult<Mapping> {
    io(
        "mapping a granted frame",
        Mapping::new(fd, Pfn::new(frame).file_offset(), PAGE_SIZE, writable),
    )
}

/// Placeholder error for an encoding failure that cannot happen (fixed-size
/// records in a fixed-size buffer).
fn encode(e: impl std::fmt::Display) -> HvError {
    HvError::internal("encoding a grant map record", e)
}
