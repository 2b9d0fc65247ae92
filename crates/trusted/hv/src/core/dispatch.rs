//! A domain's requests under hv's lock: each family goes to its own
//! function; `Hello` and the store are served here.

use super::capture::capture_attach;
use super::evtchn_ops::{
    evtchn_alloc_unbound, evtchn_bind_interdomain, evtchn_close, evtchn_close_unclaimed,
    evtchn_rebind, evtchn_send,
};
use super::grant_ops::{
    grant_copy, grant_map, grant_table_view, grant_transfer, grant_unmap, ngm_attach, ngm_grant,
    ngm_grant_many, ngm_revoke, ngm_setup, pool_window,
};
use super::reply::{dup, handled_elsewhere, ok, os, store_err, Outcome};
use super::state::{deliver, domain, State};
use super::store_journal::StoreJournal;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::memory::BATCH_PAGES;
use crate::proto::{DomId, Reply, Request, Welcome, GATHER_MAX};
use crate::trace;
use sys::SeqPacket;

/// Serves one domain request: matches the request and hands each family
/// (hello, store, event channels, grants, NGM, capture) to its own function.
pub(super) fn dispatch(st: &mut State, caller: DomId, req: Request) -> HvResult<Outcome> {
    match req {
        Request::Hello => hello(st, caller),
        Request::Resume => resume(st, caller),
        Request::EvtchnRebind {
            remote,
            remote_port,
        } => evtchn_rebind(st, caller, remote, remote_port),
        Request::Nop => Ok(ok(Reply::Done)),
        req @ (Request::StoreRead { .. }
        | Request::StoreGather { .. }
        | Request::StoreWrite { .. }
        | Request::StoreMkdir { .. }
        | Request::StoreRm { .. }
        | Request::StoreDirectory { .. }
        | Request::StoreSetPerms { .. }
        | Request::StoreGetPerms { .. }
        | Request::Watch { .. }
        | Request::Unwatch { .. }) => store_request(st, caller, req),
        Request::EvtchnAllocUnbound { remote } => evtchn_alloc_unbound(st, caller, remote),
        Request::EvtchnBindInterdomain {
            remote,
            remote_port,
        } => evtchn_bind_interdomain(st, caller, remote, remote_port),
        Request::EvtchnSend { port } => evtchn_send(st, caller, port),
        Request::EvtchnClose { port } => evtchn_close(st, caller, port),
        Request::EvtchnCloseUnclaimed => evtchn_close_unclaimed(st, caller),
        Request::GrantCopy { ops } => grant_copy(st, caller, ops),
        Request::GrantMap {
            granter,
            gref,
            writable,
        } => grant_map(st, caller, granter, gref, writable),
        Request::GrantUnmap { handle } => grant_unmap(st, caller, handle),
        Request::GrantTransfer { frame, dest, gref } => {
            grant_transfer(st, caller, frame, dest, gref)
        }
        Request::NgmSetup { backend } => ngm_setup(st, caller, backend),
        Request::NgmGrant {
            backend,
            gref,
            frame,
            writable,
        } => ngm_grant(st, caller, backend, gref, frame, writable),
        Request::NgmGrantMany { backend, grants } => ngm_grant_many(st, caller, backend, &grants),
        Request::NgmRevoke { backend, gref } => ngm_revoke(st, caller, backend, gref),
        Request::NgmAttach { guest } => ngm_attach(st, caller, guest),
        Request::PoolWindow { granter } => pool_window(st, caller, granter),
        Request::GrantTableView { granter } => grant_table_view(st, caller, granter),
        Request::CaptureAttach { id } => capture_attach(st, caller, id),
        // The toolstack's requests (`Request::privileged`) are served by
        // `Hypervisor::handle` before the lock is taken.
        _ => handled_elsewhere(),
    }
}

/// `Hello`: the first message of a domain, answered once with its
/// [`Welcome`] and the descriptors of its memory, watch socket and doorbells.
fn hello(st: &mut State, caller: DomId) -> HvResult<Outcome> {
    if domain(st, caller)?.said_hello {
        return err(ErrorKind::Invalid, "Hello may be sent only once");
    }
    welcome(st, caller)
}

/// `Resume`: `Hello` again from a driver domain's new process (on the
/// socket `Hypervisor::revive` made) or a program that replaced itself (on
/// the same socket), either way without the old one's mappings and watch
/// socket. Its watches go with the old watch socket, and the pools it was
/// given are given again; what it bound and mapped stays.
fn resume(st: &mut State, caller: DomId) -> HvResult<Outcome> {
    let d = domain(st, caller)?;
    if !d.said_hello {
        return err(ErrorKind::Invalid, "Resume comes after Hello");
    }
    if d.kind != "driver" {
        return err(
            ErrorKind::Invalid,
            format!(
                "only a driver domain resumes in place; domain {caller} is a {}",
                d.kind
            ),
        );
    }
    d.fds_given.clear();
    st.store.drop_connection(caller as u64);
    welcome(st, caller)
}

/// The [`Welcome`] and descriptors of `Hello` and `Resume`, with a fresh
/// watch socket.
fn welcome(st: &mut State, caller: DomId) -> HvResult<Outcome> {
    let d = domain(st, caller)?;
    let (ours, theirs) = os("watch socket", SeqPacket::pair())?;
    d.watch_tx = Some(ours);
    d.said_hello = true;
    let w = Welcome {
        domid: caller,
        name: d.name.clone(),
        kind: d.kind.clone(),
        pool_frames: d.mem.spec.pool_frames,
        grant_frames: d.mem.spec.grant_frames,
        batch_pages: BATCH_PAGES,
        trace_pages: trace::TRACE_PAGES,
    };
    let fds = vec![
        os("pool", d.mem.pool.dup())?,
        os("gnttab", d.mem.gnttab.dup())?,
        dup(&theirs)?,
        os("batch", d.mem.batch.dup())?,
        dup(&d.kick)?,
        dup(&d.done)?,
        os("trace", d.mem.trace.dup())?,
    ];
    Ok((Ok(Reply::Welcome(w)), fds))
}

/// The store family (read, write, mkdir, rm, directory, permissions,
/// watches): each change delivers the watch events it fired, and one made
/// is in hv's journal before it is answered.
pub(super) fn store_request(st: &mut State, caller: DomId, req: Request) -> HvResult<Outcome> {
    let outcome = store_op(st, caller, &req)?;
    match &mut st.journal {
        Some(journal) if StoreJournal::keeps(&req) => journal.append(caller, &req),
        _ => {}
    }
    Ok(outcome)
}

fn store_op(st: &mut State, caller: DomId, req: &Request) -> HvResult<Outcome> {
    let store =
        |r: Result<Vec<store::WatchEvent>, store::StoreError>, st: &State| -> HvResult<Outcome> {
            let events = r.map_err(store_err)?;
            deliver(st, events);
            Ok(ok(Reply::Done))
        };
    match req {
        Request::StoreRead { path } => {
            let v = st.store.read(caller, path).map_err(store_err)?;
            Ok(ok(Reply::Value(v)))
        }
        Request::StoreGather { paths } => {
            if paths.len() > GATHER_MAX {
                return Err(HvError::new(
                    ErrorKind::Invalid,
                    format!(
                        "a gather reads at most {GATHER_MAX} paths, not {}",
                        paths.len()
                    ),
                ));
            }
            let read = |p: &String| st.store.read(caller, p).map_err(store_err);
            Ok(ok(Reply::Values(paths.iter().map(read).collect())))
        }
        Request::StoreWrite { path, value } => {
            let r = st.store.write(caller, path, value);
            store(r, st)
        }
        Request::StoreMkdir { path } => {
            let r = st.store.mkdir(caller, path);
            store(r, st)
        }
        Request::StoreRm { path } => {
            let r = st.store.rm(caller, path);
            store(r, st)
        }
        Request::StoreDirectory { path } => {
            let v = st.store.directory(caller, path).map_err(store_err)?;
            Ok(ok(Reply::List(v)))
        }
        Request::StoreSetPerms { path, perms } => {
            let p = store::Perms::parse_entries(caller, perms.iter().map(String::as_str))
                .map_err(store_err)?;
            let r = st.store.set_perms(caller, path, p);
            store(r, st)
        }
        Request::StoreGetPerms { path } => {
            let p = st.store.get_perms(caller, path).map_err(store_err)?;
            Ok(ok(Reply::List(p.entries())))
        }
        Request::Watch { path, token } => {
            let r = st.store.watch(caller, caller as u64, path, token);
            store(r, st)
        }
        Request::Unwatch { path, token } => {
            st.store
                .unwatch(caller, caller as u64, path, token)
                .map_err(store_err)?;
            Ok(ok(Reply::Done))
        }
        // `dispatch` sends only the store family here.
        _ => handled_elsewhere(),
    }
}
