//! Grant hypercalls: copy, map, unmap and transfer (the grant tables of
//! Xen), a driver domain's read-only window on a guest's pool, and the new
//! grant mechanism's tables (Ram thesis ch. 4). Each grant operation is
//! traced for the caller.

use super::domain::MapRecord;
use super::reply::{ok, Outcome};
use super::state::{domain, State};
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::grant;
use crate::ngm::{NgmTable, NGM_ENTRIES};
use crate::proto::{DomId, NgmGrantOp, Reply};
use crate::released::Released;
use crate::trace::{self, HvEvent};
use abi::grant::{
    GrantMap, GrantMapView, GrantTransfer, GrantTransferView, GrantUnmap, GrantUnmapView, MapFlags,
};
use abi::Pfn;

/// Most grant copies one control-socket call may carry (the batch page holds
/// fewer), so no single call holds hv's lock for long.
pub const MAX_COPY_OPS: usize = 512;

/// `GrantCopy`: checks the batch's shape, runs the copies and counts them
/// and their errors, globally and for the caller.
pub(super) fn grant_copy(st: &mut State, caller: DomId, mut ops: Vec<u8>) -> HvResult<Outcome> {
    if !ops.len().is_multiple_of(abi::grant::GrantCopy::SIZE) {
        return err(
            ErrorKind::Invalid,
            "grant copy ops must be whole 40-byte records",
        );
    }
    if ops.len() / abi::grant::GrantCopy::SIZE > MAX_COPY_OPS {
        return err(
            ErrorKind::Invalid,
            format!("at most {MAX_COPY_OPS} grant copies per call"),
        );
    }
    let n = (ops.len() / abi::grant::GrantCopy::SIZE) as u64;
    let t0 = trace::now();
    let (statuses, errors) = grant::copy_batch(&mut st.pins, &st.doms, caller, &mut ops);
    record(st, caller, HvEvent::GrantCopy, t0, n);
    st.counters.ops_n("grant_copy", n);
    for e in &errors {
        st.counters.error(e.kind);
    }
    let d = domain(st, caller)?;
    d.counters.ops_n("grant_copy", n);
    for e in &errors {
        d.counters.error(e.kind);
    }
    Ok(ok(Reply::Statuses(statuses)))
}

/// `GrantMap`: pins `granter`'s granted frame for the caller, records the
/// mapping under a fresh handle, and sends the pool descriptor the first
/// time the caller maps from that granter with that access.
pub(super) fn grant_map(
    st: &mut State,
    caller: DomId,
    granter: DomId,
    gref: u32,
    writable: bool,
) -> HvResult<Outcome> {
    let need_fd = !domain(st, caller)?.fds_given.contains(&(granter, writable));
    let (handle, frame) = map_one(st, caller, granter, gref, writable)?;
    let fds = if need_fd {
        let gm = domain(st, granter)?.mem.clone();
        match gm.pool_fd_for_peer(writable) {
            Ok(fd) => vec![fd],
            Err(e) => {
                unmap_one(st, caller, handle)?;
                return Err(e);
            }
        }
    } else {
        Vec::new()
    };
    if need_fd {
        domain(st, caller)?.fds_given.insert((granter, writable));
    }
    Ok((
        Ok(Reply::Mapped {
            handle,
            frame: frame.raw(),
            writable,
            fd_attached: need_fd,
        }),
        fds,
    ))
}

/// One map, as `GrantMap` and each op of a map batch do it: validates and
/// pins `granter`'s grant `gref` for the caller and records the mapping
/// under a fresh handle; returns the handle and the frame.
fn map_one(
    st: &mut State,
    caller: DomId,
    granter: DomId,
    gref: u32,
    writable: bool,
) -> HvResult<(u32, Pfn)> {
    if granter == caller {
        return err(ErrorKind::BadDomain, "a domain cannot map its own grant");
    }
    if domain(st, caller)?.mapped.contains(&(granter, gref)) {
        return err(
            ErrorKind::DoubleMap,
            format!("grant {gref} of domain {granter} is already mapped"),
        );
    }
    let gm = domain(st, granter)?.mem.clone();
    let t0 = trace::now();
    let frame = grant::acquire(&mut st.pins, &gm, granter, caller, gref, writable);
    record(st, caller, HvEvent::GrantMap, t0, 1);
    let frame = frame?;
    let d = domain(st, caller)?;
    let mut handle = d.next_handle;
    while handle == 0 || d.maps.contains_key(&handle) {
        handle = handle.wrapping_add(1);
    }
    d.next_handle = handle.wrapping_add(1);
    d.maps.insert(
        handle,
        MapRecord {
            granter,
            gref,
            writable,
        },
    );
    d.mapped.insert((granter, gref));
    Ok((handle, frame))
}

/// `GrantUnmap`: forgets the caller's mapping `handle` and unpins its frame.
pub(super) fn grant_unmap(st: &mut State, caller: DomId, handle: u32) -> HvResult<Outcome> {
    unmap_one(st, caller, handle)?;
    Ok(ok(Reply::Done))
}

/// One unmap, as `GrantUnmap` and each op of an unmap batch do it: only a
/// handle the caller itself holds is released.
fn unmap_one(st: &mut State, caller: DomId, handle: u32) -> HvResult<()> {
    let d = domain(st, caller)?;
    let Some(m) = d.maps.remove(&handle) else {
        return err(
            ErrorKind::BadHandle,
            format!("handle {handle} is not mapped by domain {caller}"),
        );
    };
    d.mapped.remove(&(m.granter, m.gref));
    let t0 = trace::now();
    st.unpin(&m);
    record(st, caller, HvEvent::GrantUnmap, t0, 1);
    Ok(())
}

/// A batch of `gnttab_map_grant_ref` records (GNTTABOP_map_grant_ref over
/// a ring batch, as Linux netback issues it; Menon 2006 §2 for the Xen 2.0
/// map path): each op validated and mapped as `GrantMap` does, its status,
/// handle and `dev_bus_addr` (the frame's byte offset in the granter's
/// pool, where the pool descriptor maps it) written back. A refused op's
/// `handle` carries hv's error kind ([`ErrorKind::code`]). No descriptor
/// travels on the batch page: the caller maps with the one `GrantMap`
/// passed it for that granter and access.
pub(super) fn map_batch(st: &mut State, caller: DomId, raw: &mut [u8]) -> (Vec<i16>, Vec<HvError>) {
    run_ops(raw, GrantMap::SIZE, |chunk| {
        let r = map_op(st, caller, chunk);
        let (handle, addr) = match &r {
            Ok((handle, frame)) => (*handle, frame.file_offset()),
            Err(e) => (e.kind.code(), 0),
        };
        if let Ok(mut v) = GrantMapView::new_checked(&mut *chunk) {
            v.set_handle(handle);
            v.set_dev_bus_addr(addr);
        }
        r.map(|_| ())
    })
}

/// One op of a map batch: its record checked, then mapped as `GrantMap` does.
fn map_op(st: &mut State, caller: DomId, chunk: &[u8]) -> HvResult<(u32, Pfn)> {
    let op = GrantMapView::new_checked(chunk)
        .and_then(|v| GrantMap::parse(&v))
        .map_err(|e| HvError::new(ErrorKind::Invalid, format!("malformed map op: {e}")))?;
    let unsupported = MapFlags::DEVICE_MAP | MapFlags::CONTAINS_PTE;
    if !op.flags.contains(MapFlags::HOST_MAP) || op.flags.bits() & unsupported.bits() != 0 {
        return err(
            ErrorKind::Invalid,
            "a map op asks GNTMAP_host_map, without device or PTE maps",
        );
    }
    let writable = !op.flags.contains(MapFlags::READONLY);
    map_one(st, caller, op.dom, op.gref, writable)
}

/// A batch of `gnttab_unmap_grant_ref` records: each releases one handle
/// as `GrantUnmap` does.
pub(super) fn unmap_batch(
    st: &mut State,
    caller: DomId,
    raw: &mut [u8],
) -> (Vec<i16>, Vec<HvError>) {
    run_ops(raw, GrantUnmap::SIZE, |chunk| {
        let v = GrantUnmapView::new_checked(&*chunk)
            .map_err(|e| HvError::new(ErrorKind::Invalid, format!("malformed unmap op: {e}")))?;
        unmap_one(st, caller, v.handle())
    })
}

/// A batch of `gnttab_transfer` records (GNTTABOP_transfer over the batch
/// page, as Xen 2.0's netback flips a receive batch's pages in one
/// multicall, Menon 2006 §2): each gives one of the caller's frames to the
/// domain the record names, as `GrantTransfer` does.
pub(super) fn transfer_batch(
    st: &mut State,
    caller: DomId,
    raw: &mut [u8],
) -> (Vec<i16>, Vec<HvError>) {
    let mut released = Released::default();
    let (statuses, mut errors) = run_ops(raw, GrantTransfer::SIZE, |chunk| {
        let op = GrantTransferView::new_checked(&*chunk)
            .and_then(|v| GrantTransfer::parse(&v))
            .map_err(|e| HvError::new(ErrorKind::Invalid, format!("malformed transfer op: {e}")))?;
        let Ok(frame) = u32::try_from(op.mfn) else {
            return err(
                ErrorKind::BadPage,
                format!("frame {} is outside any domain's memory", op.mfn),
            );
        };
        let t0 = trace::now();
        let r = grant::transfer(&st.doms, caller, (frame, op.domid, op.gref), &mut released);
        record(st, caller, HvEvent::GrantTransfer, t0, 1);
        r.map(|_| ())
    });
    if let Err(e) = give_up(st, caller, &mut released) {
        errors.push(e);
    }
    (statuses, errors)
}

/// Takes the pages a batch of flips moved out of `caller` away from it:
/// a driver domain's are freed, since no domain maps a driver domain's
/// pool; anyone else's are zeroed, as a guest's frame may be in a peer's
/// pool mirror, which a freed page would make fault (`sys::PoolMirror`).
fn give_up(st: &State, caller: DomId, released: &mut Released) -> HvResult<()> {
    let Some(d) = st.doms.0.get(&caller) else {
        return Ok(());
    };
    released
        .give_up(&d.mem, d.kind == "driver")
        .map_err(|e| HvError::memory("giving up flipped pages", e))
}

/// Runs `one` on each `size`-byte record of `raw`; returns each record's
/// GNTST_* status and each refusal's error.
fn run_ops(
    raw: &mut [u8],
    size: usize,
    mut one: impl FnMut(&mut [u8]) -> HvResult<()>,
) -> (Vec<i16>, Vec<HvError>) {
    let mut statuses = Vec::with_capacity(raw.len() / size);
    let mut errors = Vec::new();
    for chunk in raw.chunks_exact_mut(size) {
        statuses.push(match one(chunk) {
            Ok(()) => 0,
            Err(e) => {
                let s = e.kind.gntst();
                errors.push(e);
                s
            }
        });
    }
    (statuses, errors)
}

/// `GrantTransfer`: gives the caller's `frame` to `dest` through its
/// accept-transfer grant `gref`; replies with the frame it landed in.
pub(super) fn grant_transfer(
    st: &mut State,
    caller: DomId,
    frame: u32,
    dest: DomId,
    gref: u32,
) -> HvResult<Outcome> {
    let t0 = trace::now();
    let mut released = Released::default();
    let landing = grant::transfer(&st.doms, caller, (frame, dest, gref), &mut released);
    // The flip happened whatever befalls its page (freed, or else zeroed;
    // an error here is logged as a batch counts it), so it is not refused.
    if let Err(e) = give_up(st, caller, &mut released) {
        crate::log!(Warning, "domain {caller}: {e}");
    }
    record(st, caller, HvEvent::GrantTransfer, t0, 1);
    let landing = landing?;
    Ok(ok(Reply::Value(landing.to_le_bytes().to_vec())))
}

/// `PoolWindow`: `granter`'s pool, read-only, for a domain that maps one
/// of its grants (a backend that attached to its rings). Such a domain
/// already holds that pool's descriptor from the map (hv hands a peer the
/// pool alone, never private memory); the window only spares it a mapping
/// per page, and the kernel refuses any store through it.
pub(super) fn pool_window(st: &mut State, caller: DomId, granter: DomId) -> HvResult<Outcome> {
    let mem = peer_memory(st, caller, granter, "window on its pool")?;
    Ok((
        Ok(Reply::PoolWindow {
            pool_frames: mem.spec.pool_frames,
        }),
        vec![mem.pool_fd_for_peer(false)?],
    ))
}

/// `GrantTableView`: `granter`'s grant table, read-only, for a domain that
/// maps one of its grants: Xen's I/O channel on TX (Menon 2006 §4.1),
/// where netback reads each grant itself and sends the payload through
/// the pool window, with no hypercall. The view shows the backend every
/// entry (whom each grant is for), never lets it write one; nothing it
/// reads is trusted, and a grant it finds is checked against the pool.
pub(super) fn grant_table_view(st: &mut State, caller: DomId, granter: DomId) -> HvResult<Outcome> {
    let mem = peer_memory(st, caller, granter, "view of its grant table")?;
    let fd = mem
        .gnttab
        .reopen_readonly()
        .map_err(|e| HvError::internal("sharing grant table", e))?;
    Ok((
        Ok(Reply::GrantTable {
            entries: mem.grant_entries(),
        }),
        vec![fd],
    ))
}

/// `granter`'s memory, for `caller` only if the toolstack made it a
/// backend of one of `granter`'s devices and it maps one of `granter`'s
/// grants (attached to its rings); `what` names the refusal. Mapping a
/// grant alone is not enough: a guest may grant a page to any domain, and
/// the window shows the whole pool.
fn peer_memory(
    st: &mut State,
    caller: DomId,
    granter: DomId,
    what: &str,
) -> HvResult<std::sync::Arc<crate::memory::DomainMemory>> {
    let maps_one = domain(st, caller)?
        .mapped
        .iter()
        .any(|&(g, _)| g == granter);
    if granter == caller || !maps_one {
        return err(
            ErrorKind::PermissionDenied,
            format!("domain {caller} maps no grant of domain {granter}; no {what}"),
        );
    }
    if !backs(st, caller, granter) {
        return err(
            ErrorKind::PermissionDenied,
            format!("domain {caller} is no backend of domain {granter}; no {what}"),
        );
    }
    Ok(domain(st, granter)?.mem.clone())
}

/// Whether the toolstack made `caller` the backend of a device of
/// `granter`: `/local/domain/<caller>/backend/<class>/<granter>` exists (as
/// Xen's toolstack writes it, and only it may).
fn backs(st: &State, caller: DomId, granter: DomId) -> bool {
    let root = format!("/local/domain/{caller}/backend");
    let Ok(classes) = st.store.directory(store::DOM0, &root) else {
        return false;
    };
    let granter = granter.to_string();
    classes.iter().any(|c| {
        st.store
            .directory(store::DOM0, &format!("{root}/{c}"))
            .is_ok_and(|guests| guests.contains(&granter))
    })
}

/// `NgmSetup`: the caller's NGM grant table for `backend`, created on first
/// use under a fresh handle.
pub(super) fn ngm_setup(st: &mut State, caller: DomId, backend: DomId) -> HvResult<Outcome> {
    if backend == caller || !st.doms.0.contains_key(&backend) {
        return err(
            ErrorKind::BadDomain,
            format!("domain {backend} is not another existing domain"),
        );
    }
    let next = st.next_ngm;
    let t = match st.ngm.entry((caller, backend)) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => {
            e.insert(NgmTable::new(next, caller, backend)?)
        }
    };
    let handle = t.handle;
    if handle == next {
        st.next_ngm = next.wrapping_add(1).max(1);
    }
    Ok(ok(Reply::NgmTable {
        handle,
        entries: NGM_ENTRIES,
    }))
}

/// `NgmGrant`: grants the caller's own `frame` to `backend` under `gref`
/// in their table, validated once against the caller's pool.
pub(super) fn ngm_grant(
    st: &mut State,
    caller: DomId,
    backend: DomId,
    gref: u32,
    frame: u32,
    writable: bool,
) -> HvResult<Outcome> {
    let frames = domain(st, caller)?.mem.spec.pool_frames;
    ngm_table(st, caller, backend)?.grant(gref, frame, writable, frames)?;
    Ok(ok(Reply::Done))
}

/// `NgmGrantMany`: [`ngm_grant`] for each of `grants`; all are checked
/// before any is made, so a refusal changes nothing.
pub(super) fn ngm_grant_many(
    st: &mut State,
    caller: DomId,
    backend: DomId,
    grants: &[NgmGrantOp],
) -> HvResult<Outcome> {
    let frames = domain(st, caller)?.mem.spec.pool_frames;
    ngm_table(st, caller, backend)?.grant_many(grants, frames)?;
    Ok(ok(Reply::Done))
}

/// `NgmRevoke`: revokes `gref` from the caller's table for `backend`.
pub(super) fn ngm_revoke(
    st: &mut State,
    caller: DomId,
    backend: DomId,
    gref: u32,
) -> HvResult<Outcome> {
    ngm_table(st, caller, backend)?.revoke(gref)?;
    Ok(ok(Reply::Done))
}

/// `NgmAttach`: a backend attaches to the table `guest` set up for it and
/// gets the table's descriptors and the guest's pool.
pub(super) fn ngm_attach(st: &mut State, caller: DomId, guest: DomId) -> HvResult<Outcome> {
    let pool = domain(st, guest)?.mem.clone();
    let t = st.ngm.get(&(guest, caller)).ok_or_else(|| {
        HvError::new(
            ErrorKind::PermissionDenied,
            format!("domain {guest} set up no grant table for domain {caller}"),
        )
    })?;
    let [trans, status] = t.backend_fds()?;
    let fds = vec![trans, status, pool.pool_fd_for_peer(true)?];
    Ok((
        Ok(Reply::NgmAttached {
            handle: t.handle,
            entries: NGM_ENTRIES,
            pool_frames: pool.spec.pool_frames,
        }),
        fds,
    ))
}

/// The caller's table for `backend`.
fn ngm_table(st: &mut State, guest: DomId, backend: DomId) -> HvResult<&mut NgmTable> {
    st.ngm.get_mut(&(guest, backend)).ok_or_else(|| {
        HvError::new(
            ErrorKind::BadDomain,
            format!("domain {guest} has no grant table for domain {backend}; set one up first"),
        )
    })
}

/// Records a grant operation `caller` asked for (its trace lives with it).
fn record(st: &State, caller: DomId, ev: HvEvent, t0: u64, items: u64) {
    if let Some(d) = st.doms.0.get(&caller) {
        d.trace.record(ev, t0, items);
    }
}
