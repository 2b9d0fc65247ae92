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
use crate::released::Released;
use abi::grant::{
    check_entry, CopyPtr, EntryRefusal, GrantCopy, GrantCopyView, DOMID_SELF, GTF_ACCEPT_TRANSFER,
    GTF_PERMIT_ACCESS, GTF_READING, GTF_TRANSFER_COMMITTED, GTF_TRANSFER_COMPLETED, GTF_TYPE_MASK,
    GTF_WRITING,
};
use abi::{FrameRange, Pfn, SharedMemory};
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

/// Pins by (granting domain, grant reference). Every grant operation
/// looks one up and most insert and remove one, so the hasher is
/// foldhash's (seeded at random per table, as the keys are the guests' to
/// choose) rather than SipHash.
pub type Pins = HashMap<(DomId, u32), Pin, foldhash::quality::RandomState>;

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

/// The frame a grant entry (or copy op) names, as a [`Pfn`] of `mem`'s pool;
/// `what` names it in the error (built only then: this is every grant
/// operation's path).
fn entry_frame(
    mem: &DomainMemory,
    granter: DomId,
    what: impl FnOnce() -> String,
    raw: u64,
) -> HvResult<Pfn> {
    mem.frame(raw)
        .map_err(|e| crate::HvError::memory(&format!("{} of domain {granter}", what()), e))
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
) -> HvResult<Pfn> {
    let off = entry_off(mem, granter, gref)?;
    let t = &mem.gnttab_map;
    for _ in 0..PIN_RETRIES {
        let flags = t.load_u16(off);
        let domid = t.read_u16(off + 2);
        if let Err(r) = check_entry(flags, domid, caller, writable) {
            return refused(r, gref, granter, caller, flags);
        }
        let what = || format!("grant {gref}");
        let frame = entry_frame(mem, granter, what, u64::from(t.read_u32(off + 4)))?;
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

/// The error for an entry [`check_entry`] refused.
fn refused<T>(
    r: EntryRefusal,
    gref: u32,
    granter: DomId,
    caller: DomId,
    flags: u16,
) -> HvResult<T> {
    let (kind, why) = match r {
        EntryRefusal::NotGranted => (
            ErrorKind::BadGntref,
            format!("is not granted (flags {flags:#06x})"),
        ),
        EntryRefusal::OtherDomain(d) => (
            ErrorKind::PermissionDenied,
            format!("is for domain {d}, not {caller}"),
        ),
        EntryRefusal::ReadOnly => (
            ErrorKind::PermissionDenied,
            "is read-only; a write was requested".into(),
        ),
    };
    err(kind, format!("grant {gref} of domain {granter} {why}"))
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

/// Where one side of a copy resolved to: a range inside one checked frame.
struct Side {
    domid: DomId,
    range: FrameRange,
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
    // The range inside its page first (the page is not known yet).
    let in_page = |pfn| {
        FrameRange::new(pfn, offset as usize, len as usize)
            .map_err(|e| crate::HvError::memory(&format!("{what} within its page"), e))
    };
    in_page(Pfn::new(0))?;
    let domid = if domid == DOMID_SELF { caller } else { domid };
    let Some(mem) = doms.memory(domid) else {
        return err(
            ErrorKind::BadDomain,
            format!("{what} domain {domid} does not exist"),
        );
    };
    let (pfn, pinned) = match *ptr {
        CopyPtr::Gref { gref, .. } if domid == caller => {
            // A domain may copy through its own grant without pinning it.
            let off = entry_off(mem, domid, gref)?;
            let raw = mem.gnttab_map.read_u32(off + 4);
            (
                entry_frame(mem, domid, || format!("own grant {gref}"), u64::from(raw))?,
                None,
            )
        }
        CopyPtr::Gref { gref, .. } => (acquire(pins, mem, domid, caller, gref, dest)?, Some(gref)),
        CopyPtr::Frame { gmfn, .. } => {
            if domid != caller {
                return err(
                    ErrorKind::PermissionDenied,
                    format!("{what}: domain {caller} may name frames only of its own memory, not of domain {domid}"),
                );
            }
            (entry_frame(mem, domid, || what.to_string(), gmfn)?, None)
        }
    };
    Ok(Side {
        domid,
        range: in_page(pfn)?,
        pinned,
    })
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
    let copied = copy_from(pins, doms, caller, &src, op);
    unpin(pins, doms, &src, false);
    copied
}

/// Resolves `op`'s destination and copies `src` (already resolved and
/// pinned) into it; the destination's pin ends with the copy.
fn copy_from(
    pins: &mut Pins,
    doms: &dyn Memories,
    caller: DomId,
    src: &Side,
    op: &GrantCopy,
) -> HvResult<()> {
    let dst = resolve(pins, doms, caller, &op.dest, op.len, true)?;
    // Both ranges were checked against their pools above; the copy checks
    // them once more against the mappings and refuses rather than panics.
    let copied = match (map_of(doms, src.domid), map_of(doms, dst.domid)) {
        (Some(s), Some(d)) => d
            .try_copy_from(
                dst.range.pool_offset(),
                s,
                src.range.pool_offset(),
                src.range.len(),
            )
            .map_err(|e| crate::HvError::memory("grant copy", e)),
        _ => Ok(()),
    };
    unpin(pins, doms, &dst, true);
    copied
}

/// A hold (the I/O-channel optimization under hv-copy, Menon 2006 §4):
/// one GNTTABOP_copy of a packet's header part whose source, another
/// domain's grant, stays pinned after the copy so that the caller may read
/// the rest of the frame through its read-only window on the granter's
/// pool. Returns the granter and the frame pinned; [`release`] ends it.
pub fn hold_one(
    pins: &mut Pins,
    doms: &dyn Memories,
    caller: DomId,
    op: &GrantCopy,
) -> HvResult<(DomId, u32, Pfn)> {
    let CopyPtr::Gref { gref, .. } = op.source else {
        return err(
            ErrorKind::BadCopyArg,
            "a hold names its source by another domain's grant reference",
        );
    };
    let src = resolve(pins, doms, caller, &op.source, op.len, false)?;
    if src.pinned.is_none() {
        return err(
            ErrorKind::BadCopyArg,
            "a hold takes another domain's grant, not the caller's own",
        );
    }
    if let Err(e) = copy_from(pins, doms, caller, &src, op) {
        unpin(pins, doms, &src, false);
        return Err(e);
    }
    Ok((src.domid, gref, src.range.pfn()))
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

/// The offset and flags of `dest`'s grant `gref`, if it accepts a transfer
/// from `caller` that is not committed yet.
fn accepting_entry(
    dm: &DomainMemory,
    dest: DomId,
    gref: u32,
    caller: DomId,
) -> HvResult<(usize, u16)> {
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
    Ok((off, flags))
}

/// GNTTABOP_transfer: moves the contents of `caller`'s frame into the frame
/// `dest` offered with an accept-transfer grant, and notes the source in
/// `released`, whose pages the caller of this function takes away from
/// `caller` when its batch ends ([`Released::give_up`]), so nothing can leak
/// out of the driver domain (Menon 2006 §4.2: page flip). A frame already
/// in `released` is gone and is refused.
///
/// Pages of separate memfds cannot change owner in Linux, so ownership moves
/// by hv copying the frame; the grant-entry protocol is Xen's.
pub fn transfer(
    doms: &dyn Memories,
    caller: DomId,
    (frame, dest, gref): (u32, DomId, u32),
    released: &mut Released,
) -> HvResult<u32> {
    let Some(src) = doms.memory(caller) else {
        return err(
            ErrorKind::BadDomain,
            format!("domain {caller} does not exist"),
        );
    };
    let frame = entry_frame(src, caller, || "transferred frame".into(), u64::from(frame))?;
    if released.holds(FrameRange::whole(frame).pool_offset()) {
        return err(
            ErrorKind::BadPage,
            format!(
                "frame {} of domain {caller} was flipped away already",
                frame.raw()
            ),
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
    let (off, flags) = accepting_entry(dm, dest, gref, caller)?;
    let t = &dm.gnttab_map;
    let landing = entry_frame(
        dm,
        dest,
        || "landing frame".into(),
        u64::from(t.read_u32(off + 4)),
    )?;
    let (from_page, to_page) = (FrameRange::whole(frame), FrameRange::whole(landing));
    // Checked before committing, so a refusal leaves the entry as it was.
    let fits = |m: &Mapping, r: FrameRange| m.check_store(r.pool_offset(), r.len());
    fits(&src.pool_map, from_page)
        .and_then(|()| fits(&dm.pool_map, to_page))
        .map_err(|e| crate::HvError::memory("transfer", e))?;
    if t.cmpxchg_u16(off, flags, flags | GTF_TRANSFER_COMMITTED)
        .is_err()
    {
        return err(
            ErrorKind::Invalid,
            format!("grant {gref} of domain {dest} changed during transfer"),
        );
    }
    let moved = dm.pool_map.try_copy_from(
        to_page.pool_offset(),
        &src.pool_map,
        from_page.pool_offset(),
        PAGE_SIZE,
    );
    moved.map_err(|e| crate::HvError::memory("transfer", e))?;
    released.add(from_page.pool_offset());
    t.write_u32(off + 4, landing.raw());
    let f = t.load_u16(off);
    let _ = t.cmpxchg_u16(off, f, f | GTF_TRANSFER_COMPLETED);
    Ok(landing.raw())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::memory::MemorySpec;
    use abi::grant::GNTST_BAD_COPY_ARG;

    /// Domains 1 and 2, with 4 frames of pool each (shared with the hold
    /// tests).
    pub(crate) struct Two(pub(crate) [DomainMemory; 2]);

    impl Memories for Two {
        fn memory(&self, d: DomId) -> Option<&DomainMemory> {
            self.0.get(usize::from(d).checked_sub(1)?)
        }
    }

    pub(crate) fn two() -> Two {
        let spec = MemorySpec {
            pool_frames: 4,
            grant_frames: 1,
            hugepages: false,
        };
        let mem = |n| DomainMemory::new(n, spec).unwrap();
        Two([mem("t-grant-1"), mem("t-grant-2")])
    }

    /// Blocks the domain's pool file holds in memory.
    pub(crate) fn pool_blocks(m: &DomainMemory) -> u64 {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let fd = m.pool.as_fd().try_clone_to_owned().unwrap();
        std::fs::File::from(fd).metadata().unwrap().blocks()
    }

    #[test]
    fn a_flipped_page_leaves_its_domain_and_cannot_be_flipped_twice() {
        let doms = two();
        let (src, dst) = (&doms.0[0], &doms.0[1]);
        src.pool_map.write_bytes(PAGE_SIZE + 100, b"packet");
        // Domain 2 accepts transfers from domain 1 into frames 2 and 3.
        for (gref, frame) in [(0usize, 2u32), (1, 3)] {
            let t = &dst.gnttab_map;
            t.write_u16(gref * 8 + 2, 1);
            t.write_u32(gref * 8 + 4, frame);
            t.write_u16(gref * 8, GTF_ACCEPT_TRANSFER);
        }
        let before = pool_blocks(src);
        let mut released = Released::default();
        assert_eq!(transfer(&doms, 1, (1, 2, 0), &mut released).unwrap(), 2);
        let e = transfer(&doms, 1, (1, 2, 1), &mut released).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadPage, "{e}");
        released.give_up(src, true).unwrap();
        let mut b = [0u8; 6];
        dst.pool_map.read_bytes(2 * PAGE_SIZE + 100, &mut b);
        assert_eq!(&b, b"packet");
        // The page itself went: the pool holds less, and reads zeros there.
        assert!(
            pool_blocks(src) < before,
            "{} blocks, {before} before",
            pool_blocks(src)
        );
        src.pool_map.read_bytes(PAGE_SIZE + 100, &mut b);
        assert_eq!(b, [0; 6]);
    }

    fn own_copy(src: u64, offset: u16, dst: u64, len: u16) -> GrantCopy {
        let own = |gmfn, offset| CopyPtr::Frame {
            domid: DOMID_SELF,
            gmfn,
            offset,
        };
        GrantCopy {
            source: own(src, offset),
            dest: own(dst, 0),
            len,
            status: 0,
        }
    }

    #[test]
    fn hostile_frames_and_offsets_in_a_copy_are_refused() {
        let doms = two();
        let mut pins = Pins::default();
        let kind = |op| {
            copy_one(&mut Pins::default(), &doms, 1, &op)
                .unwrap_err()
                .kind
        };
        assert_eq!(kind(own_copy(4, 0, 0, 8)), ErrorKind::BadPage);
        assert_eq!(kind(own_copy(u64::MAX, 0, 0, 8)), ErrorKind::BadPage);
        assert_eq!(kind(own_copy(0, 4095, 1, 2)), ErrorKind::BadCopyArg);
        assert_eq!(
            kind(own_copy(0, u16::MAX, 1, u16::MAX)),
            ErrorKind::BadCopyArg
        );
        doms.0[0].pool_map.write_bytes(3 * PAGE_SIZE + 10, b"ok");
        copy_one(&mut pins, &doms, 1, &own_copy(3, 10, 0, 2)).unwrap();
        let mut b = [0u8; 2];
        doms.0[0].pool_map.read_bytes(0, &mut b);
        assert_eq!(&b, b"ok");
    }

    #[test]
    fn a_frame_past_the_mapping_is_an_error_even_when_validation_misses_it() {
        // hv's record of domain 2's size says 8 frames; its pool holds 4.
        // Validation passes frame 6, and the checked copy still refuses:
        // what would have been an assertion in hv is a GNTST status.
        let mut doms = two();
        doms.0[1].spec.pool_frames = 8;
        let mut pins = Pins::default();
        let e = copy_one(&mut pins, &doms, 2, &own_copy(6, 0, 0, 16)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadCopyArg, "{e}");
        let mut raw = [0u8; GrantCopy::SIZE];
        own_copy(0, 0, 6, 16).emit(&mut GrantCopyView::new_checked(&mut raw[..]).unwrap());
        let (st, errs) = copy_batch(&mut pins, &doms, 2, &mut raw);
        assert_eq!((st, errs.len()), (vec![GNTST_BAD_COPY_ARG], 1));
        // Likewise a transfer into a landing frame the pool lacks: refused
        // before it commits, so the entry is left as the receiver wrote it.
        let t = &doms.0[1].gnttab_map;
        t.write_u16(2, 1);
        t.write_u32(4, 7);
        t.write_u16(0, GTF_ACCEPT_TRANSFER);
        let e = transfer(&doms, 1, (0, 2, 0), &mut Released::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadCopyArg, "{e}");
        assert_eq!(t.load_u16(0), GTF_ACCEPT_TRANSFER);
    }
}
