//! A domain's batch doorbell thread: grant copies, holds, releases, maps,
//! unmaps and transfers submitted on the shared batch page (see [`crate::batch`]), one batch at
//! a time under hv's lock.

use super::caller_core::CallerCore;
use super::domain::BatchEnds;
use super::grant_ops::{map_batch, transfer_batch, unmap_batch};
use super::state::State;
use super::Hypervisor;
use crate::batch;
use crate::error::{ErrorKind, HvError};
use crate::grant;
use crate::hold::BatchKind;
use crate::memory::{DomainMemory, BATCH_PAGES};
use crate::proto::DomId;
use crate::trace::{self, HvEvent, HvTrace};
use abi::SharedMemory;
use std::os::fd::AsFd;
use std::sync::Arc;
use sys::poll_readable;

impl Hypervisor {
    /// Serves domain `domid`'s batch page until `stop` rings or the
    /// domain is gone: each `kick` runs the submitted batch and rings `done`.
    pub(super) fn run_batches(
        self: Arc<Self>,
        domid: DomId,
        mem: Arc<DomainMemory>,
        tr: Arc<HvTrace>,
        ends: Arc<BatchEnds>,
    ) {
        let (kick, done, stop) = (&ends.kick, &ends.done, &ends.stop);
        // hv's copy of each batch, kept from one to the next.
        let mut buf = Vec::new();
        let follow = self
            .follow_caller
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut core = CallerCore::new(follow);
        loop {
            match poll_readable(&[kick.as_fd(), stop.as_fd()], None) {
                Ok(r) if r[1] => return,
                Ok(_) => {}
                Err(_) => return,
            }
            let pass = self.gate.enter(super::gate::Kind::Short);
            let t0 = trace::now();
            let _ = kick.drain();
            let page = &mem.batch_map;
            if page.load_u32(batch::SEQ_OFF) == page.load_u32(batch::DONE_OFF) {
                continue; // spurious doorbell
            }
            let mut ops = 0;
            match batch::read_batch(page, BATCH_PAGES, &mut buf) {
                Err((seq, _msg)) => {
                    // Counted, not logged: a guest could otherwise flood the log.
                    self.count_error(domid, ErrorKind::Invalid);
                    batch::complete(page, seq, BatchKind::Copy, -libc::EINVAL, &[]);
                }
                Ok(mut sub) => match self.run_locked(domid, &tr, page, &mut sub) {
                    Outcome::Gone => return, // destroyed meanwhile: run nothing on its behalf
                    Outcome::GivenUp => {}
                    Outcome::Ran(statuses, errors) => {
                        for e in &errors {
                            self.count_error(domid, e.kind);
                        }
                        match sub.kind {
                            BatchKind::Hold => batch::publish_held_frames(page, sub.ops),
                            BatchKind::Map => batch::publish_ops(page, sub.ops),
                            _ => {}
                        }
                        batch::complete(page, sub.seq, sub.kind, 0, &statuses);
                        ops = (sub.ops.len() / sub.kind.op_size()) as u64;
                    }
                },
            }
            let _ = done.ring();
            tr.record(HvEvent::Batch, t0, ops);
            // Out of the gate first: moving takes a system call.
            drop(pass);
            core.follow(page.load_u32(batch::CPU_OFF), || self.domain_cores(domid));
        }
    }

    /// The cores domain `domid`'s process may run on, which bound where its
    /// batches are served; None for a domain with no process of its own
    /// (hv's tests and `bench hv` run domains as threads of hv's).
    fn domain_cores(&self, domid: DomId) -> Option<Vec<usize>> {
        let pid = self.lock().doms.0.get(&domid).and_then(|d| d.pid)?;
        // A process gone or unreadable allows no core.
        Some(sys::cpus_of(pid).unwrap_or_default())
    }

    /// Runs batch `sub`, read from `domid`'s `page`, under hv's lock.
    fn run_locked(
        &self,
        domid: DomId,
        tr: &HvTrace,
        page: &dyn SharedMemory,
        sub: &mut batch::Submitted<'_>,
    ) -> Outcome {
        let mut st = self.lock();
        let st = &mut *st;
        if !st.doms.0.contains_key(&domid) {
            return Outcome::Gone;
        }
        if page.load_u32(batch::DONE_OFF) == sub.seq {
            // Completed unrun as its process died (`release_process`): what
            // it would map or hold would belong to no process.
            return Outcome::GivenUp;
        }
        let n = (sub.ops.len() / sub.kind.op_size()) as u64;
        let t1 = trace::now();
        let ((statuses, errors), what) = run_batch(st, domid, sub.kind, sub.ops);
        let traced = [BatchKind::Map, BatchKind::Unmap, BatchKind::Transfer];
        if !traced.contains(&sub.kind) {
            // A map, unmap or transfer traces each of its ops itself.
            tr.record(HvEvent::GrantCopy, t1, n);
        }
        st.counters.op("batch");
        st.counters.ops_n(what, n);
        if let Some(d) = st.doms.0.get_mut(&domid) {
            d.counters.op("batch");
            d.counters.ops_n(what, n);
        }
        Outcome::Ran(statuses, errors)
    }
}

/// What became of a batch read from a domain's page.
enum Outcome {
    /// Run: each op's status, and the failed ops' errors.
    Ran(Vec<i16>, Vec<HvError>),
    /// Completed unrun when its process died, before hv ran it.
    GivenUp,
    /// Its domain is gone.
    Gone,
}

/// Gives up the batch a dead process submitted on `mem`'s batch page and
/// hv has not run: it is marked done, so that the batch thread, which may
/// have read it already, runs nothing on behalf of a process that is gone.
pub(super) fn give_up_pending(mem: &DomainMemory) {
    let page = &mem.batch_map;
    let seq = page.load_u32(batch::SEQ_OFF);
    if seq != page.load_u32(batch::DONE_OFF) {
        batch::complete(page, seq, BatchKind::Copy, -libc::ECANCELED, &[]);
    }
}

/// Runs one batch of `domid`'s ops by its kind; returns the statuses, the
/// failed ops' errors and the counter the ops count under.
fn run_batch(
    st: &mut State,
    domid: DomId,
    kind: BatchKind,
    ops: &mut [u8],
) -> ((Vec<i16>, Vec<HvError>), &'static str) {
    match kind {
        BatchKind::Copy => {
            return (
                grant::copy_batch(&mut st.pins, &st.doms, domid, ops),
                "grant_copy",
            )
        }
        BatchKind::Map => return (map_batch(st, domid, ops), "grant_map"),
        BatchKind::Unmap => return (unmap_batch(st, domid, ops), "grant_unmap"),
        BatchKind::Transfer => return (transfer_batch(st, domid, ops), "grant_transfer"),
        BatchKind::Hold | BatchKind::Release => {}
    }
    let Some(d) = st.doms.0.get_mut(&domid) else {
        return ((Vec::new(), Vec::new()), "grant_hold");
    };
    let mut holds = std::mem::take(&mut d.holds);
    let r = holds.run_batch(kind, &mut st.pins, &st.doms, domid, ops);
    if let Some(d) = st.doms.0.get_mut(&domid) {
        d.holds = holds;
    }
    let what = if kind == BatchKind::Hold {
        "grant_hold"
    } else {
        "grant_release"
    };
    (r, what)
}
