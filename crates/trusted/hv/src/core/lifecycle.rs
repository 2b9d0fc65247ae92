//! Domains coming and going: creation (memory, doorbells, store home, the
//! two serving threads), destruction (everything the domain held is
//! revoked, then its teardown runs), shutdown, and hv's guarded threads.

use super::domain::{BatchEnds, Domain, DomainEnds, DomainSpec};
use super::evtchn_ops::drop_end;
use super::reply::{os, store_err};
use super::state::{deliver, domain, State};
use super::{catch_panic, Hypervisor};
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::memory::DomainMemory;
use crate::proto::{DomId, DOMID_TOOLSTACK};
use crate::trace::HvTrace;
use std::sync::Arc;
use sys::{Doorbell, SeqPacket};

/// Highest domain id hv hands out (Xen reserves ids from DOMID_FIRST_RESERVED 0x7FF0).
const MAX_DOMID: DomId = 0x7fef;

impl Hypervisor {
    /// Creates a domain and returns its id and its end of the control socket.
    /// The domain (a process, or a thread in tests and benches) speaks
    /// [`Request`]s on it, starting with `Hello`.
    ///
    /// [`Request`]: crate::proto::Request
    pub fn create_domain(self: &Arc<Self>, spec: DomainSpec) -> HvResult<(DomId, SeqPacket)> {
        let made = self.make_domain(spec);
        self.note_change();
        made
    }

    fn make_domain(self: &Arc<Self>, spec: DomainSpec) -> HvResult<(DomId, SeqPacket)> {
        let mem = Arc::new(DomainMemory::new(&spec.name, spec.memory)?);
        if let Some(note) = &mem.backing_note {
            self.log(format_args!("{note}"));
        }
        let (hv_end, dom_end) = os("control socket", SeqPacket::pair())?;
        let bell = || os("doorbell", Doorbell::pair());
        // (waiter, ringer) pairs: the domain rings `kick`, hv rings `done`.
        let ((kick_wait, kick_ring), (done_wait, done_ring)) = (bell()?, bell()?);
        let (stop_wait, stop_ring) = bell()?;
        let batch = Arc::new(BatchEnds {
            kick: kick_wait,
            done: done_ring,
            stop: stop_wait,
        });
        let trace = Arc::new(HvTrace::default());
        let domid = {
            let mut st = self.lock();
            let domid = admit(&mut st, &spec)?;
            let ends = DomainEnds {
                kick: kick_ring,
                done: done_wait,
                stop: stop_ring,
                control: os("socket", hv_end.try_clone())?,
                batch: batch.clone(),
            };
            let d = Domain::new(&spec, mem.clone(), ends, trace.clone());
            st.doms.0.insert(domid, d);
            st.counters.op("domains_created");
            domid
        };
        self.spawn_serving(domid, hv_end, mem, trace, batch)?;
        Ok((domid, dom_end))
    }

    /// Starts domain `domid`'s two serving threads: its control socket's
    /// (`control`, hv's end) and its batch doorbell's.
    pub(super) fn spawn_serving(
        self: &Arc<Self>,
        domid: DomId,
        control: SeqPacket,
        mem: Arc<DomainMemory>,
        trace: Arc<HvTrace>,
        batch: Arc<BatchEnds>,
    ) -> HvResult<()> {
        let hv = self.clone();
        self.spawn_guarded(serving_threads(domid)[0].clone(), Some(domid), move || {
            hv.take_nice(domid);
            hv.serve(domid, control)
        })?;
        let hv = self.clone();
        self.spawn_guarded(serving_threads(domid)[1].clone(), Some(domid), move || {
            hv.take_nice(domid);
            hv.run_batches(domid, mem, trace, batch)
        })?;
        Ok(())
    }

    /// hv's threads serving domain `domid` run at nice value `nice`, as its
    /// process does: under Xen a hypercall runs on the calling vCPU, so
    /// the credit scheduler charges it to the caller's weight, and the
    /// work hv does for a driver domain (its grant maps, store requests,
    /// a restart's handshakes) must not wait behind the guests it serves.
    /// Raising a priority needs privilege (CAP_SYS_NICE); without it the
    /// threads keep hv's and the error says so.
    pub fn weigh(&self, domid: DomId, nice: i32) -> std::io::Result<()> {
        // Under hv's lock, as the threads take it: a thread not started yet
        // takes it from the record; one that has is named already (a thread
        // is named before its body runs).
        let mut st = self.lock();
        if let Ok(d) = domain(&mut st, domid) {
            d.nice = nice;
        }
        let names = serving_threads(domid);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        sys::set_own_threads_nice(&names, nice).map(drop)
    }

    /// The calling thread, one of domain `domid`'s serving threads, takes
    /// the nice value on its record (best effort, as [`Self::weigh`]),
    /// whatever it inherited from the thread that made it (a driver
    /// domain's reaper, say). Set under hv's lock, so that a
    /// [`Self::weigh`] meanwhile comes after.
    fn take_nice(&self, domid: DomId) {
        let mut st = self.lock();
        let nice = domain(&mut st, domid).map_or(0, |d| d.nice);
        let _ = sys::set_thread_nice(nice);
    }

    /// Starts one of hv's threads, `name`, running `body`, so that no panic
    /// takes hv down. Hostile input is refused with errors, so a panic is a
    /// bug in hv; it is caught, logged with the thread's name, counted
    /// (`thread_panics` in `status`), and `domain`, the one the thread
    /// serves, is destroyed (its supervisor may restart it). hv and every
    /// other domain carry on. A thread serving no one domain passes None.
    /// hv's lock survives the panic (see `lock`).
    pub fn spawn_guarded(
        self: &Arc<Self>,
        name: String,
        domain: Option<DomId>,
        body: impl FnOnce() + Send + 'static,
    ) -> HvResult<std::thread::JoinHandle<()>> {
        let hv = self.clone();
        let thread = name.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if !catch_panic(&thread, body) {
                    hv.thread_panicked(&thread, domain);
                }
            })
            .map_err(|e| HvError::internal("thread", e))
    }

    fn thread_panicked(self: &Arc<Self>, thread: &str, domain: Option<DomId>) {
        self.lock().counters.op("thread_panics");
        let Some(d) = domain else { return };
        crate::log!(
            Error,
            "destroying domain {d}, whose thread {thread} panicked"
        );
        let reason = format!("hv bug: its thread {thread} panicked");
        // From a thread of its own: a domain's teardown may join the thread
        // that panicked (an HVM guest's relay).
        let hv = self.clone();
        let reap = move || {
            hv.destroy_domain(d, &reason);
        };
        if self
            .spawn_guarded(format!("hv-reap-{d}"), None, reap)
            .is_err()
        {
            self.destroy_domain(d, "hv bug: a thread of it panicked");
        }
    }

    /// Destroys a domain: revokes what it held, closes its channels, removes its
    /// store subtree, frees its memory, then runs its teardown.
    /// Returns false when it did not exist.
    /// When another thread is destroying it, waits until its teardown is
    /// done, so that the caller may reuse its name, cgroup and namespace.
    pub fn destroy_domain(&self, domid: DomId, reason: &str) -> bool {
        let teardown = {
            let mut st = self.lock();
            let Some(mut d) = st.doms.0.remove(&domid) else {
                while st.tearing_down.contains(&domid) {
                    st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                return false;
            };
            st.tearing_down.insert(domid);
            revoke_all(&mut st, domid, &mut d);
            st.counters.op("domains_destroyed");
            let _ = d.stop.ring();
            d.control.shutdown();
            if let Some(w) = &d.watch_tx {
                w.shutdown();
            }
            self.log(format_args!(
                "domain {domid} ({}) destroyed: {reason}",
                d.name
            ));
            d.teardown.take()
        };
        self.hvm.detach(domid);
        if let Some(t) = teardown {
            t();
        }
        self.lock().tearing_down.remove(&domid);
        self.done.notify_all();
        self.note_change();
        true
    }

    /// Destroys every domain (newest first) and marks hv as shutting down.
    pub fn shutdown(&self) {
        let ids: Vec<DomId> = {
            let mut st = self.lock();
            st.shutting_down = true;
            st.doms.0.keys().rev().copied().collect()
        };
        for id in ids {
            self.destroy_domain(id, "shutdown");
        }
        // No VM is served any more: its socket files go.
        self.vhost.clear();
        self.ports.clear();
        self.lock().stopped = true;
        self.done.notify_all();
    }

    /// Blocks until [`Hypervisor::shutdown`] has destroyed every domain.
    pub fn wait_shutdown(&self) {
        let mut st = self.lock();
        while !st.stopped {
            st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Checks that domain `spec` may be created (hv is not shutting down, the
/// name is free, an id is left), takes its id and writes its store home
/// (`name`, `kind`, `domid`).
/// The next domain id no live domain holds, from `next_domid` on and
/// round past [`MAX_DOMID`] to 1, as Xen reuses the ids of dead domains:
/// containers come and go by the thousand.
fn free_domid(st: &State) -> Option<DomId> {
    let start = st.next_domid.clamp(1, MAX_DOMID);
    (0..MAX_DOMID)
        .map(|k| (start - 1 + k) % MAX_DOMID + 1)
        .find(|id| !st.doms.0.contains_key(id))
}

fn admit(st: &mut State, spec: &DomainSpec) -> HvResult<DomId> {
    if st.shutting_down {
        return err(ErrorKind::Invalid, "hv is shutting down");
    }
    if st.doms.0.values().any(|d| d.name == spec.name) {
        return err(
            ErrorKind::Invalid,
            format!("a domain named {:?} already exists", spec.name),
        );
    }
    let Some(domid) = free_domid(st) else {
        return err(ErrorKind::Quota, "domain ids exhausted");
    };
    st.next_domid = if domid >= MAX_DOMID { 1 } else { domid + 1 };
    let events = st.store.introduce_domain(domid).map_err(store_err)?;
    let home = format!("/local/domain/{domid}");
    for (k, v) in [("name", spec.name.as_str()), ("kind", spec.kind.as_str())] {
        st.store
            .write(DOMID_TOOLSTACK, &format!("{home}/{k}"), v.as_bytes())
            .map_err(store_err)?;
    }
    st.store
        .write(
            DOMID_TOOLSTACK,
            &format!("{home}/domid"),
            domid.to_string().as_bytes(),
        )
        .map_err(store_err)?;
    deliver(st, events);
    Ok(domid)
}

/// Revokes everything destroyed domain `domid` held or offered: its
/// mappings and held grants, others' pins and holds of its grants, its
/// capture channels, NGM tables and event channels, and its store subtree
/// and connection.
fn revoke_all(st: &mut State, domid: DomId, d: &mut Domain) {
    release_grants(st, d);
    for other in st.doms.0.values_mut() {
        other.holds.forget_granter(domid);
    }
    st.pins.retain(|(granter, _), _| *granter != domid);
    st.captures.retain(|_, (d, _)| *d != domid);
    // Its grants under the new mechanism vanish from every driver
    // domain's view; a dead driver domain's tables go too (a guest
    // that reconnects to its successor sets up a new one).
    st.ngm.retain(|&(guest, backend), t| {
        if guest == domid {
            t.invalidate_all();
        }
        guest != domid && backend != domid
    });
    for (_, chan) in std::mem::take(&mut d.ports) {
        drop_end(st, chan, domid);
    }
    let events = st.store.release_domain(domid);
    st.store.drop_connection(domid as u64);
    deliver(st, events);
}

/// The other domains' grants domain `d` (out of `st.doms`) mapped or
/// holds are released: when it is destroyed, or when its process died and
/// a successor takes it over (`revive`).
pub(super) fn release_grants(st: &mut State, d: &mut Domain) {
    for (_, m) in d.maps.drain() {
        st.unpin(&m);
    }
    d.mapped.clear();
    d.holds.release_all(&mut st.pins, &st.doms);
}

/// The names of domain `domid`'s two serving threads: its control
/// socket's and its batch doorbell's.
fn serving_threads(domid: DomId) -> [String; 2] {
    [format!("hv-ctl-{domid}"), format!("hv-batch-{domid}")]
}

#[cfg(test)]
mod domid_tests {
    use super::*;
    use crate::memory::MemorySpec;

    fn spec(name: &str) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind: "guest".into(),
            memory: MemorySpec {
                pool_frames: 16,
                grant_frames: 1,
                hugepages: false,
            },
        }
    }

    #[test]
    fn domain_ids_go_round_to_the_next_free_one() {
        let hv = Hypervisor::new();
        let (a, _a) = hv.create_domain(spec("a")).unwrap();
        assert_eq!(a, 1);
        hv.lock().next_domid = MAX_DOMID;
        let (b, _b) = hv.create_domain(spec("b")).unwrap();
        assert_eq!(b, MAX_DOMID);
        let (c, _c) = hv.create_domain(spec("c")).unwrap();
        assert_eq!(c, 2, "1 is a's, and ids go round past {MAX_DOMID}");
    }
}
