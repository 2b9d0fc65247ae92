//! Grant-table operations: validation, pinning, copy, map/unmap and transfer.
//!
//! A guest writes `grant_entry_v1` records into its own table; hv reads each
//! one once, validates it against the request, and pins it by setting
//! GTF_reading/GTF_writing exactly as Xen does, so the granting domain's
//! revocation (a cmpxchg that refuses while those bits are set) fails cleanly
//! while the grant is in use (Ram thesis 2.2: grant mechanism).

use crate::error::{err, ErrorKind, HvResult};
use crate::memory::DomainMemory;
use crate::proto::DomId;
use abi::grant::{
    CopyPtr, GrantCopy, GrantCopyView, DOMID_SELF, GTF_ACCEPT_TRANSFER, GTF_PERMIT_ACCESS,
    GTF_READING, GTF_READONLY, GTF_TRANSFER_COMMITTED, GTF_TRANSFER_COMPLETED, GTF_TYPE_MASK,
    GTF_WRITING,
};
use abi::SharedMemory;
use std::collections::HashMap;
use sys::{Mapping, PAGE_SIZE};

/// Size of one v1 grant entry.
const ENTRY: usize = 8;
/// How often hv retries a pin that races with the guest rewriting its entry.
const PIN_RETRIES: usize = 8;

/// hv's own count of how often each grant is in use (never trusts the entry).
#[derive(Debug, Default, Clone, Copy)]
pub struct Pin {
    pub readers: u32,
    pub writers: u32,
}

/// Pins by (granting domain, grant reference).
pub type Pins = HashMap<(DomId, u32), Pin>;

fn entry_off(mem: &DomainMemory, granter: DomId, gref: u32) -> HvResult<usize> {
    if gref >= mem.grant_entries() {
        return err(
            ErrorKind::BadGntref,
            format!(
                "grant reference {gref} of domain {granter} is out of range (table holds {})",
                mem.grant_entries()
            ),
        );
    }
    Ok(gref as usize * ENTRY)
}

/// Validates `gref` of `granter` for access by `caller` and pins it.
/// Returns the granted frame.
pub fn acquire(
    pins: &mut Pins,
    mem: &DomainMemory,
    granter: DomId,
    caller: DomId,
    gref: u32,
    writable: bool,
) -> HvResult<u32> {
    let off = entry_off(mem, granter, gref)?;
    let t = &mem.gnttab_map;
    for _ in 0..PIN_RETRIES {
        let flags = t.load_u16(off);
        if flags & GTF_TYPE_MASK != GTF_PERMIT_ACCESS {
            return err(
                ErrorKind::BadGntref,
                format!("grant {gref} of domain {granter} is not granted (flags {flags:#06x})"),
            );
        }
        let domid = t.read_u16(off + 2);
        if domid != caller {
            return err(
                ErrorKind::PermissionDenied,
                format!("grant {gref} of domain {granter} is for domain {domid}, not {caller}"),
            );
        }
        if writable && flags & GTF_READONLY != 0 {
            return err(
                ErrorKind::PermissionDenied,
                format!("grant {gref} of domain {granter} is read-only; a write was requested"),
            );
        }
        let frame = t.read_u32(off + 4);
        if frame >= mem.spec.pool_frames {
            return err(
                ErrorKind::BadPage,
                format!(
                    "grant {gref} of domain {granter} names frame {frame}, outside its {} frames",
                    mem.spec.pool_frames
                ),
            );
        }
        let set = GTF_READING | if writable { GTF_WRITING } else { 0 };
        if t.cmpxchg_u16(off, flags, flags | set).is_ok() {
            let p = pins.entry((granter, gref)).or_default();
            p.readers += 1;
            if writable {
                p.writers += 1;
            }
            return Ok(frame);
        }
    }
    err(
        ErrorKind::Invalid,
        format!("grant {gref} of domain {granter} keeps changing; gave up"),
    )
}

/// Drops one pin taken by [`acquire`], clearing the in-use bits when the last goes.
pub fn release(
    pins: &mut Pins,
    mem: Option<&DomainMemory>,
    granter: DomId,
    gref: u32,
    writable: bool,
) {
    let Some(p) = pins.get_mut(&(granter, gref)) else {
        return;
    };
    p.readers = p.readers.saturating_sub(1);
    if writable {
        p.writers = p.writers.saturating_sub(1);
    }
    let mut clear = 0;
    if p.writers == 0 {
        clear |= GTF_WRITING;
    }
    if p.readers == 0 {
        clear |= GTF_READING | GTF_WRITING;
        pins.remove(&(granter, gref));
    }
    let (Some(mem), true) = (mem, clear != 0) else {
        return;
    };
    let Ok(off) = entry_off(mem, granter, gref) else {
        return;
    };
    for _ in 0..PIN_RETRIES {
        let f = mem.gnttab_map.load_u16(off);
        // The granter may have rewritten the entry (as an accept-transfer one,
        // whose bit 3 means something else); only touch a permit-access entry.
        if f & GTF_TYPE_MASK != GTF_PERMIT_ACCESS || f & clear == 0 {
            return;
        }
        if mem.gnttab_map.cmpxchg_u16(off, f, f & !clear).is_ok() {
            return;
        }
    }
}

/// Where one side of a copy resolved to.
struct Side {
    domid: DomId,
    frame: u32,
    offset: u16,
    pinned: Option<u32>,
}

/// Looks up a domain's memory for grant work.
pub trait Memories {
    fn memory(&self, domid: DomId) -> Option<&DomainMemory>;
}

fn resolve(
    pins: &mut Pins,
    doms: &dyn Memories,
    caller: DomId,
    ptr: &CopyPtr,
    len: u16,
    dest: bool,
) -> HvResult<Side> {
    let what = if dest { "destination" } else { "source" };
    let (domid, offset) = match *ptr {
        CopyPtr::Gref { domid, offset, .. } | CopyPtr::Frame { domid, offset, .. } => {
            (domid, offset)
        }
    };
    if offset as usize + len as usize > PAGE_SIZE {
        return err(
            ErrorKind::BadCopyArg,
            format!("{what} offset {offset} + length {len} crosses the {PAGE_SIZE}-byte page"),
        );
    }
    let domid = if domid == DOMID_SELF { caller } else { domid };
    let Some(mem) = doms.memory(domid) else {
        return err(
            ErrorKind::BadDomain,
            format!("{what} domain {domid} does not exist"),
        );
    };
    match *ptr {
        CopyPtr::Gref { gref, .. } => {
            let frame = if domid == caller {
                // A domain may copy through its own grant without pinning it.
                let off = entry_off(mem, domid, gref)?;
                let f = mem.gnttab_map.read_u32(off + 4);
                if f >= mem.spec.pool_frames {
                    return err(
                        ErrorKind::BadPage,
                        format!("own grant {gref} names frame {f}"),
                    );
                }
                return Ok(Side {
                    domid,
                    frame: f,
                    offset,
                    pinned: None,
                });
            } else {
                acquire(pins, mem, domid, caller, gref, dest)?
            };
            Ok(Side {
                domid,
                frame,
                offset,
                pinned: Some(gref),
            })
        }
        CopyPtr::Frame { gmfn, .. } => {
            if domid != caller {
                return err(
                    ErrorKind::PermissionDenied,
                    format!("{what}: domain {caller} may name frames only of its own memory, not of domain {domid}"),
                );
            }
            if gmfn >= mem.spec.pool_frames as u64 {
                return err(
                    ErrorKind::BadPage,
                    format!(
                        "{what} frame {gmfn} is outside domain {domid}'s {} frames",
                        mem.spec.pool_frames
                    ),
                );
            }
            Ok(Side {
                domid,
                frame: gmfn as u32,
                offset,
                pinned: None,
            })
        }
    }
}

fn map_of(doms: &dyn Memories, d: DomId) -> Option<&Mapping> {
    doms.memory(d).map(|m| &m.pool_map)
}

/// Executes one GNTTABOP_copy for `caller`. Validates both sides, pins grants
/// for the duration of the copy, copies, and unpins.
pub fn copy_one(
    pins: &mut Pins,
    doms: &dyn Memories,
    caller: DomId,
    op: &GrantCopy,
) -> HvResult<()> {
    let src = resolve(pins, doms, caller, &op.source, op.len, false)?;
    let dst = match resolve(pins, doms, caller, &op.dest, op.len, true) {
        Ok(d) => d,
        Err(e) => {
            unpin(pins, doms, &src, false);
            return Err(e);
        }
    };
    if let (Some(s), Some(d)) = (map_of(doms, src.domid), map_of(doms, dst.domid)) {
        let so = src.frame as usize * PAGE_SIZE + src.offset as usize;
        let d_off = dst.frame as usize * PAGE_SIZE + dst.offset as usize;
        d.copy_from(d_off, s, so, op.len as usize);
    }
    unpin(pins, doms, &src, false);
    unpin(pins, doms, &dst, true);
    Ok(())
}

fn unpin(pins: &mut Pins, doms: &dyn Memories, s: &Side, writable: bool) {
    if let Some(gref) = s.pinned {
        release(pins, doms.memory(s.domid), s.domid, gref, writable);
    }
}

/// Parses raw `gnttab_copy` records, runs each, and writes each status back.
/// Returns the statuses and the error of each failed op (for counters).
pub fn copy_batch(
    pins: &mut Pins,
    doms: &dyn Memories,
    caller: DomId,
    raw: &mut [u8],
) -> (Vec<i16>, Vec<crate::HvError>) {
    let mut statuses = Vec::with_capacity(raw.len() / GrantCopy::SIZE);
    let mut errors = Vec::new();
    for chunk in raw.chunks_exact_mut(GrantCopy::SIZE) {
        let result = GrantCopyView::new_checked(&*chunk)
            .and_then(|v| GrantCopy::parse(&v))
            .map_err(|e| {
                crate::HvError::new(ErrorKind::BadCopyArg, format!("malformed gnttab_copy: {e}"))
            })
            .and_then(|op| copy_one(pins, doms, caller, &op));
        let status = match result {
            Ok(()) => 0,
            Err(e) => {
                let s = e.kind.gntst();
                errors.push(e);
                s
            }
        };
        if let Ok(mut v) = GrantCopyView::new_checked(&mut *chunk) {
            v.set_status(status);
        }
        statuses.push(status);
    }
    (statuses, errors)
}

/// GNTTABOP_transfer: moves the contents of `caller`'s frame into the frame
/// `dest` offered with an accept-transfer grant, then zeroes the source so
/// nothing can leak out of the driver domain (Menon 2006 §4.2: page flip).
///
/// Pages of separate memfds cannot change owner in Linux, so ownership moves
/// by hv copying the frame; the grant-entry protocol is Xen's.
pub fn transfer(
    doms: &dyn Memories,
    caller: DomId,
    frame: u32,
    dest: DomId,
    gref: u32,
) -> HvResult<u32> {
    let Some(src) = doms.memory(caller) else {
        return err(
            ErrorKind::BadDomain,
            format!("domain {caller} does not exist"),
        );
    };
    if frame >= src.spec.pool_frames {
        return err(
            ErrorKind::BadPage,
            format!("frame {frame} is outside domain {caller}'s memory"),
        );
    }
    let Some(dm) = doms.memory(dest) else {
        return err(
            ErrorKind::BadDomain,
            format!("transfer destination domain {dest} does not exist"),
        );
    };
    if dest == caller {
        return err(
            ErrorKind::BadDomain,
            "a domain cannot transfer a frame to itself",
        );
    }
    let off = entry_off(dm, dest, gref)?;
    let t = &dm.gnttab_map;
    let flags = t.load_u16(off);
    if flags & GTF_TYPE_MASK != GTF_ACCEPT_TRANSFER || flags & GTF_TRANSFER_COMMITTED != 0 {
        return err(
            ErrorKind::BadGntref,
            format!(
                "grant {gref} of domain {dest} does not accept a transfer (flags {flags:#06x})"
            ),
        );
    }
    let from = t.read_u16(off + 2);
    if from != caller {
        return err(
            ErrorKind::PermissionDenied,
            format!(
                "grant {gref} of domain {dest} accepts transfers from domain {from}, not {caller}"
            ),
        );
    }
    let landing = t.read_u32(off + 4);
    if landing >= dm.spec.pool_frames {
        return err(
            ErrorKind::BadPage,
            format!("landing frame {landing} is outside domain {dest}'s memory"),
        );
    }
    if t.cmpxchg_u16(off, flags, flags | GTF_TRANSFER_COMMITTED)
        .is_err()
    {
        return err(
            ErrorKind::Invalid,
            format!("grant {gref} of domain {dest} changed during transfer"),
        );
    }
    let base = frame as usize * PAGE_SIZE;
    dm.pool_map
        .copy_from(landing as usize * PAGE_SIZE, &src.pool_map, base, PAGE_SIZE);
    src.pool_map.fill(base, PAGE_SIZE, 0);
    t.write_u32(off + 4, landing);
    let f = t.load_u16(off);
    let _ = t.cmpxchg_u16(off, f, f | GTF_TRANSFER_COMPLETED);
    Ok(landing)
}
