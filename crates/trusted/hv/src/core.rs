//! The hypervisor proper: domain table, hypercall dispatch and cleanup.
//!
//! One mutex guards hv's state; every hypercall runs under it for a bounded
//! time (the batch path holds it for one batch). Each domain is served by two
//! threads: its control socket and its batch doorbell.

use crate::batch;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::evtchn::{Channel, MAX_PORTS, STATE_BOUND};
use crate::grant::{self, Memories, Pins};
use crate::hold::{BatchKind, Holds};
use crate::memory::{DomainMemory, MemorySpec, BATCH_PAGES};
use crate::ngm::{NgmTable, NGM_ENTRIES};
use crate::proto::{
    self, DomId, Port, Reply, Request, Response, WatchFired, Welcome, DOMID_TOOLSTACK,
};
use crate::status::{Counters, DomainStatus, NgmTableStatus, SystemStatus};
use crate::trace::{self, DomainTrace, HvEvent, HvTrace, TraceSnapshot};
use abi::SharedMemory;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use store::Store;
use sys::{poll_readable, Doorbell, SeqPacket};

/// Most grant copies one control-socket call may carry (the batch page holds
/// fewer), so no single call holds hv's lock for long.
pub const MAX_COPY_OPS: usize = 512;

/// Highest domain id hv hands out (Xen reserves ids from DOMID_FIRST_RESERVED 0x7FF0).
const MAX_DOMID: DomId = 0x7fef;
/// Capture channels a domain may leave uncollected.
const MAX_PENDING_CAPTURES: usize = 8;
/// Bytes of captured packets that may queue towards a reader.
const CAPTURE_BUFFER: usize = 8 << 20;

/// What to create.
#[derive(Debug, Clone)]
pub struct DomainSpec {
    pub name: String,
    /// "driver" or "guest" (free text, shown in status).
    pub kind: String,
    pub memory: MemorySpec,
}

impl DomainSpec {
    /// A domain of `pool_frames` frames of memory and `grant_frames` of
    /// grant table, without huge pages (hv's in-process uses: tests,
    /// benchmarks, fuzzing).
    pub fn new(name: &str, kind: &str, pool_frames: u32, grant_frames: u32) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind: kind.into(),
            memory: MemorySpec {
                pool_frames,
                grant_frames,
                hugepages: false,
            },
        }
    }
}

/// What one domain may hold, enforced by hv. The toolstack sizes them from
/// the topology ([`Hypervisor::set_quotas`]); a domain it does not size gets
/// [`Quotas::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Event channels (Xen's `max_event_channels`).
    pub event_channels: usize,
    /// Store nodes it may own (xenstored's `quota-nodes`).
    pub store_nodes: usize,
    /// Store watches over all its connections.
    pub store_watches: usize,
}

impl Default for Quotas {
    fn default() -> Quotas {
        let store = store::StoreLimits::default();
        Quotas {
            event_channels: MAX_PORTS,
            store_nodes: store.max_nodes_per_domain,
            store_watches: store.max_watches_per_domain,
        }
    }
}

/// Called once when a domain is destroyed, outside hv's lock (kills the
/// process, removes the namespace and cgroup).
pub type Teardown = Box<dyn FnOnce() + Send>;

struct MapRecord {
    granter: DomId,
    gref: u32,
    writable: bool,
}

struct Domain {
    name: String,
    kind: String,
    mem: Arc<DomainMemory>,
    /// The domain's ends of its batch doorbells: it rings `kick`, waits on `done`.
    kick: Doorbell,
    done: Doorbell,
    /// Rung to stop the domain's batch thread.
    stop: Doorbell,
    control: SeqPacket,
    said_hello: bool,
    watch_tx: Option<SeqPacket>,
    maps: HashMap<u32, MapRecord>,
    mapped: HashSet<(DomId, u32)>,
    /// Grants it holds for TX by reference under hv-copy ([`crate::hold`]).
    holds: Holds,
    next_handle: u32,
    fds_given: HashSet<(DomId, bool)>,
    ports: BTreeMap<Port, u64>,
    quotas: Quotas,
    counters: Counters,
    /// What hv recorded serving this domain.
    trace: Arc<HvTrace>,
    pid: Option<i32>,
    netns: Option<String>,
    cgroup: Option<String>,
    teardown: Option<Teardown>,
}

struct Doms(BTreeMap<DomId, Domain>);

impl Memories for Doms {
    fn memory(&self, domid: DomId) -> Option<&DomainMemory> {
        self.0.get(&domid).map(|d| &*d.mem)
    }
}

struct State {
    doms: Doms,
    pins: Pins,
    store: Store,
    channels: HashMap<u64, Channel>,
    next_chan: u64,
    next_domid: DomId,
    /// New-grant-mechanism tables by (guest, driver domain).
    ngm: BTreeMap<(DomId, DomId), NgmTable>,
    next_ngm: u32,
    /// Capture channels opened by the toolstack whose domain has not
    /// collected its end yet: id → (domain, its end).
    captures: BTreeMap<u32, (DomId, OwnedFd)>,
    next_capture: u32,
    counters: Counters,
    info: BTreeMap<String, String>,
    /// Shutdown was requested: no new domains.
    shutting_down: bool,
    /// Every domain is gone.
    stopped: bool,
    /// Domains whose teardown is running (outside the lock).
    tearing_down: HashSet<DomId>,
}

impl State {
    /// Drops the pin a grant mapping held.
    fn unpin(&mut self, m: &MapRecord) {
        grant::release(
            &mut self.pins,
            self.doms.memory(m.granter),
            m.granter,
            m.gref,
            m.writable,
        );
    }
}

/// The daemon's part of the toolstack: what needs processes, namespaces and
/// the topology (restart, vif hotplug). Called without hv's lock held.
pub trait Supervisor: Send + Sync {
    /// Serves a `RestartDomain`, `NetworkAttach` or `NetworkDetach`.
    fn toolstack(&self, req: Request) -> HvResult<Reply>;
    /// The toolstack is about to destroy domain `name`: it must not come back.
    fn destroying(&self, name: &str);
}

/// The hypervisor. Shared by its serving threads through an `Arc`.
pub struct Hypervisor {
    /// Set by the daemon once it has built the topology.
    supervisor: Mutex<Option<Arc<dyn Supervisor>>>,
    state: Mutex<State>,
    done: Condvar,
    /// Log domain lifecycle events on stderr (the daemon does; benches don't).
    verbose: std::sync::atomic::AtomicBool,
    /// What hv recorded serving the toolstack.
    toolstack_trace: Arc<HvTrace>,
    /// The clock trace snapshots are stamped with.
    started: std::time::Instant,
    /// HVM guests' I/O paths (`hvm.rs`).
    pub(crate) hvm: crate::hvm::HvmGuests,
    /// vhost-user vifs' listening sockets (`vhost.rs`).
    pub(crate) vhost: crate::vhost::VhostListeners,
}

type Outcome = (Response, Vec<OwnedFd>);

/// Runs the body of thread `thread`, catching a panic: logged on stderr
/// with the thread's name and message. Returns false when it panicked, so
/// the caller can tear down what the thread served. For the threads of the hv
/// process that have no [`Hypervisor`] to hand (the metrics listener);
/// the others use [`Hypervisor::spawn_guarded`].
pub fn catch_panic(thread: &str, body: impl FnOnce()) -> bool {
    let payload = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(()) => return true,
        Err(p) => p,
    };
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    eprintln!("hv: thread {thread} panicked: {msg}");
    false
}

fn ok(r: Reply) -> Outcome {
    (Ok(r), Vec::new())
}

fn os<T>(what: &str, r: std::io::Result<T>) -> HvResult<T> {
    r.map_err(|e| HvError::internal(what, e))
}

/// A store quota is a quota like any other hv enforces: retrying cannot help.
fn store_err(e: store::StoreError) -> HvError {
    let kind = match e {
        store::StoreError::Quota { .. } => ErrorKind::Quota,
        _ => ErrorKind::Store,
    };
    HvError::new(kind, e.to_string())
}

impl Hypervisor {
    /// A hypervisor with no domains.
    pub fn new() -> Arc<Hypervisor> {
        Arc::new(Hypervisor {
            supervisor: Mutex::new(None),
            state: Mutex::new(State {
                doms: Doms(BTreeMap::new()),
                pins: Pins::new(),
                store: Store::new(),
                channels: HashMap::new(),
                next_chan: 1,
                next_domid: 1,
                ngm: BTreeMap::new(),
                next_ngm: 1,
                captures: BTreeMap::new(),
                next_capture: 1,
                counters: Counters::default(),
                info: BTreeMap::new(),
                shutting_down: false,
                stopped: false,
                tearing_down: HashSet::new(),
            }),
            done: Condvar::new(),
            verbose: std::sync::atomic::AtomicBool::new(false),
            toolstack_trace: Arc::new(HvTrace::default()),
            started: std::time::Instant::now(),
            hvm: Default::default(),
            vhost: Default::default(),
        })
    }

    /// Installs the daemon's supervisor (see [`Supervisor`]).
    pub fn set_supervisor(&self, sup: Arc<dyn Supervisor>) {
        *self.supervisor.lock().unwrap_or_else(|p| p.into_inner()) = Some(sup);
    }

    fn supervisor(&self) -> Option<Arc<dyn Supervisor>> {
        self.supervisor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Removes a fact shown in `status`.
    pub fn remove_info(&self, key: &str) {
        self.lock().info.remove(key);
    }

    /// Turns lifecycle logging on stderr on or off.
    pub fn set_verbose(&self, on: bool) {
        self.verbose.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn log(&self, msg: std::fmt::Arguments<'_>) {
        if self.verbose.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("hv: {msg}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving the other domains.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a domain and returns its id and its end of the control socket.
    /// The domain (a process, or a thread in tests and benches) speaks
    /// [`Request`]s on it, starting with `Hello`.
    pub fn create_domain(self: &Arc<Self>, spec: DomainSpec) -> HvResult<(DomId, SeqPacket)> {
        let mem = Arc::new(DomainMemory::new(&spec.name, spec.memory)?);
        if let Some(note) = &mem.backing_note {
            self.log(format_args!("{note}"));
        }
        let (hv_end, dom_end) = os("control socket", SeqPacket::pair())?;
        let bell = || os("doorbell", Doorbell::pair());
        // (waiter, ringer) pairs: the domain rings `kick`, hv rings `done`.
        let ((kick_wait, kick_ring), (done_wait, done_ring)) = (bell()?, bell()?);
        let (stop_wait, stop_ring) = bell()?;
        let trace = Arc::new(HvTrace::default());
        let domid = {
            let mut st = self.lock();
            if st.shutting_down {
                return err(ErrorKind::Invalid, "hv is shutting down");
            }
            if st.doms.0.values().any(|d| d.name == spec.name) {
                return err(
                    ErrorKind::Invalid,
                    format!("a domain named {:?} already exists", spec.name),
                );
            }
            if st.next_domid > MAX_DOMID {
                return err(ErrorKind::Quota, "domain ids exhausted");
            }
            let domid = st.next_domid;
            st.next_domid += 1;
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
            deliver(&st, events);
            let d = Domain {
                name: spec.name.clone(),
                kind: spec.kind.clone(),
                mem: mem.clone(),
                kick: kick_ring,
                done: done_wait,
                stop: stop_ring,
                control: os("socket", hv_end.try_clone())?,
                said_hello: false,
                watch_tx: None,
                maps: HashMap::new(),
                mapped: HashSet::new(),
                holds: Holds::default(),
                next_handle: 1,
                fds_given: HashSet::new(),
                ports: BTreeMap::new(),
                quotas: Quotas::default(),
                counters: Counters::default(),
                trace: trace.clone(),
                pid: None,
                netns: None,
                cgroup: None,
                teardown: None,
            };
            st.doms.0.insert(domid, d);
            st.counters.op("domains_created");
            domid
        };
        let hv = self.clone();
        self.spawn_guarded(format!("hv-ctl-{domid}"), Some(domid), move || {
            hv.serve(domid, hv_end)
        })?;
        let hv = self.clone();
        self.spawn_guarded(format!("hv-batch-{domid}"), Some(domid), move || {
            hv.run_batches(domid, mem, trace, kick_wait, done_ring, stop_wait)
        })?;
        Ok((domid, dom_end))
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
        eprintln!("hv: destroying domain {d}, whose thread {thread} panicked");
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

    /// Sets what domain `domid` may hold; the toolstack calls it before the
    /// domain runs.
    pub fn set_quotas(&self, domid: DomId, q: Quotas) -> HvResult<()> {
        let mut st = self.lock();
        let st = &mut *st;
        domain(st, domid)?.quotas = q;
        st.store.set_quota(domid, q.store_nodes, q.store_watches);
        Ok(())
    }

    /// Records how a domain runs, and what to do when it is destroyed.
    pub fn set_launch_info(
        &self,
        domid: DomId,
        pid: Option<i32>,
        netns: Option<String>,
        cgroup: Option<String>,
        teardown: Option<Teardown>,
    ) {
        let run_now = {
            let mut st = self.lock();
            match st.doms.0.get_mut(&domid) {
                Some(d) => {
                    d.pid = pid;
                    d.netns = netns;
                    d.cgroup = cgroup;
                    d.teardown = teardown;
                    None
                }
                None => teardown,
            }
        };
        // The domain died before we got here: clean up its process side now.
        if let Some(t) = run_now {
            t();
        }
    }

    /// Adds a fact shown in `status` (topology name, wire host, ...).
    pub fn set_info(&self, key: &str, value: &str) {
        self.lock().info.insert(key.to_string(), value.to_string());
    }

    /// A read-write descriptor of domain `domid`'s pool for its device
    /// model (the hosted VMApp, or an HVM guest's qemu-dm): the emulated
    /// NIC's DMA reaches the guest's memory, and only that.
    pub fn pool_fd_for_device_model(&self, domid: DomId) -> HvResult<OwnedFd> {
        let st = self.lock();
        let d = st.doms.0.get(&domid).ok_or_else(|| {
            HvError::new(
                ErrorKind::BadDomain,
                format!("domain {domid} does not exist"),
            )
        })?;
        d.mem.pool_fd_for_peer(true)
    }

    /// A domain's name, if it exists.
    pub(crate) fn domain_name(&self, domid: DomId) -> Option<String> {
        self.lock().doms.0.get(&domid).map(|d| d.name.clone())
    }

    /// Looks up a domain id by name.
    pub fn domid_of(&self, name: &str) -> Option<DomId> {
        self.lock()
            .doms
            .0
            .iter()
            .find(|(_, d)| d.name == name)
            .map(|(id, _)| *id)
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
            let st = &mut *st;
            for (_, m) in d.maps.drain() {
                st.unpin(&m);
            }
            d.holds.release_all(&mut st.pins, &st.doms);
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

    /// Whether shutdown was requested.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// A snapshot of every domain and counter.
    pub fn status(&self) -> SystemStatus {
        let mut hvm = self.hvm.snapshots();
        let st = self.lock();
        let domains = st
            .doms
            .0
            .iter()
            .map(|(id, d)| DomainStatus {
                id: *id,
                name: d.name.clone(),
                kind: d.kind.clone(),
                pid: d.pid,
                netns: d.netns.clone(),
                cgroup: d.cgroup.clone(),
                connected: d.said_hello,
                pool_frames: d.mem.spec.pool_frames,
                hugepages: d.mem.spec.hugepages,
                huge_backing: d.mem.backing.as_str().into(),
                grant_entries: d.mem.grant_entries(),
                event_channels: d.ports.len(),
                grant_maps: d.maps.len(),
                counters: d.counters.clone(),
                hvm: hvm.remove(id),
            })
            .collect();
        SystemStatus {
            hv_pid: std::process::id(),
            domains,
            counters: st.counters.clone(),
            store_nodes: st.store.counters().nodes.get() as usize,
            grant_pins: st.pins.len(),
            watches: st.store.counters().watches.get(),
            info: st.info.clone(),
            ngm_tables: st
                .ngm
                .values()
                .map(|t| NgmTableStatus {
                    handle: t.handle,
                    guest: t.guest,
                    backend: t.backend,
                    created: t.created,
                    revoked: t.revoked,
                    refused: t.refused,
                })
                .collect(),
        }
    }

    /// Every trace counter: hv's for the toolstack and for each domain, and
    /// what each domain recorded in its trace area.
    pub fn trace(&self) -> TraceSnapshot {
        let mut hvm = self.hvm.snapshots();
        let st = self.lock();
        let domains = st
            .doms
            .0
            .iter()
            .map(|(id, d)| {
                let mut hv = d.trace.snapshot();
                // An HVM guest's exits per reason, and per stage (`hvm.rs`).
                if let Some(s) = hvm.remove(id) {
                    crate::hvm::trace_rows(&s, &mut hv);
                }
                DomainTrace {
                    id: *id,
                    name: d.name.clone(),
                    kind: d.kind.clone(),
                    hv,
                    domain: trace::read_area(&d.mem.trace_map),
                }
            })
            .collect();
        TraceSnapshot {
            tsc: trace::now(),
            uptime_ns: u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            toolstack: self.toolstack_trace.snapshot(),
            domains,
        }
    }

    /// Serves the toolstack (the `splitnet` CLI) on `sock` until it hangs up.
    pub fn serve_toolstack(self: &Arc<Self>, sock: SeqPacket) {
        self.serve(DOMID_TOOLSTACK, sock)
    }

    fn serve(self: &Arc<Self>, caller: DomId, sock: SeqPacket) {
        self.serve_requests(caller, &sock, |_| true);
        if caller != DOMID_TOOLSTACK {
            self.destroy_domain(caller, "its control connection closed");
        }
    }

    /// A second control connection of domain `dm` for a device-model
    /// process it hosts (an HVM guest's qemu-dm): it may only take the
    /// device-model side of the HVM guests `dm` serves
    /// ([`Request::HvmDeviceModel`], checked as for `dm` itself), and its
    /// closing leaves the domain alone.
    pub fn device_model_connection(self: &Arc<Self>, dm: DomId) -> HvResult<SeqPacket> {
        if self.domain_name(dm).is_none() {
            return err(ErrorKind::BadDomain, format!("domain {dm} does not exist"));
        }
        let (hv_end, dm_end) = os("control socket", SeqPacket::pair())?;
        let hv = self.clone();
        self.spawn_guarded(format!("hv-dm-{dm}"), Some(dm), move || {
            hv.serve_requests(dm, &hv_end, |r| {
                matches!(r, Request::HvmDeviceModel { .. } | Request::Nop)
            })
        })?;
        Ok(dm_end)
    }

    /// Answers `caller`'s requests on `sock` until it hangs up; those
    /// `allowed` refuses are answered `NotPrivileged`.
    fn serve_requests(
        self: &Arc<Self>,
        caller: DomId,
        sock: &SeqPacket,
        allowed: impl Fn(&Request) -> bool,
    ) {
        let mut buf = vec![0u8; proto::MAX_MESSAGE];
        let tr = if caller == DOMID_TOOLSTACK {
            self.toolstack_trace.clone()
        } else {
            let t = self.lock().doms.0.get(&caller).map(|d| d.trace.clone());
            t.unwrap_or_default()
        };
        loop {
            let n = match sock.recv(&mut buf) {
                Ok((0, _)) => break,
                Ok((n, _fds)) => n,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        self.count_error(caller, ErrorKind::Invalid);
                        let reply: Response = Err(HvError::new(ErrorKind::Invalid, e.to_string()));
                        if let Ok(b) = proto::encode(&reply) {
                            let _ = sock.send(&b, &[]);
                        }
                        continue;
                    }
                    break;
                }
            };
            let t0 = trace::now();
            let (reply, fds) = match proto::decode::<Request>(&buf[..n]) {
                Ok(req) if !allowed(&req) => (
                    Err(HvError::new(
                        ErrorKind::NotPrivileged,
                        format!("a device model's connection may not use {req:?}"),
                    )),
                    Vec::new(),
                ),
                Ok(req) => {
                    let kind = req.index();
                    let r = self.handle(caller, req);
                    tr.hypercall(kind, t0);
                    r
                }
                Err(e) => (Err(e), Vec::new()),
            };
            if let Err(e) = &reply {
                self.count_error(caller, e.kind);
            }
            let bytes = match proto::encode(&reply) {
                Ok(b) => b,
                Err(_) => break,
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if sock.send(&bytes, &borrowed).is_err() {
                break;
            }
        }
    }

    fn count_error(&self, caller: DomId, kind: ErrorKind) {
        let mut st = self.lock();
        st.counters.error(kind);
        if let Some(d) = st.doms.0.get_mut(&caller) {
            d.counters.error(kind);
        }
    }

    /// Opens a capture channel to domain `name` (see
    /// [`Request::CaptureOpen`]): one end waits here for the domain, the
    /// other goes to the toolstack.
    fn capture_open(&self, name: &str, spec: &str) -> HvResult<(Reply, OwnedFd)> {
        let domid = self.domid_of(name).ok_or_else(|| {
            HvError::new(ErrorKind::BadDomain, format!("no domain named {name:?}"))
        })?;
        let mut st = self.lock();
        let st = &mut *st;
        if st.captures.values().filter(|(d, _)| *d == domid).count() >= MAX_PENDING_CAPTURES {
            return err(
                ErrorKind::Quota,
                format!("domain {name} has {MAX_PENDING_CAPTURES} capture channels it has not collected"),
            );
        }
        let (theirs, ours) = os("capture socket", SeqPacket::pair())?;
        // A capture drops what the reader cannot keep up with; this is how
        // much may queue before it does.
        os("capture buffer", theirs.set_send_buffer(CAPTURE_BUFFER))?;
        let id = st.next_capture;
        st.next_capture = id.wrapping_add(1).max(1);
        let path = format!("/local/domain/{domid}/splitnet/capture/{id}");
        // The domain owns the node, so that it can remove it when the
        // reader goes away.
        let owner = store::Perms::parse_entries(DOMID_TOOLSTACK, [format!("n{domid}").as_str()])
            .map_err(store_err)?;
        let mut events = st
            .store
            .write(DOMID_TOOLSTACK, &path, spec.as_bytes())
            .map_err(store_err)?;
        events.extend(
            st.store
                .set_perms(DOMID_TOOLSTACK, &path, owner)
                .map_err(store_err)?,
        );
        st.captures.insert(id, (domid, theirs.into()));
        deliver(st, events);
        Ok((Reply::Channel { id, domid }, ours.into()))
    }

    /// Runs one hypercall for `caller`.
    pub fn handle(self: &Arc<Self>, caller: DomId, req: Request) -> Outcome {
        if req.privileged() && caller != DOMID_TOOLSTACK {
            return (
                Err(HvError::new(
                    ErrorKind::NotPrivileged,
                    format!("domain {caller} may not use {req:?}"),
                )),
                Vec::new(),
            );
        }
        match req {
            Request::Status => return ok(Reply::Status(Box::new(self.status()))),
            Request::Trace => return ok(Reply::Trace(Box::new(self.trace()))),
            Request::Shutdown => {
                let hv = self.clone();
                // Reply first; tear down from another thread.
                return match self.spawn_guarded("hv-shutdown".into(), None, move || hv.shutdown()) {
                    Ok(_) => ok(Reply::Done),
                    Err(e) => (Err(e), vec![]),
                };
            }
            Request::RestartDomain { .. }
            | Request::NetworkAttach { .. }
            | Request::NetworkDetach { .. } => {
                let Some(sup) = self.supervisor() else {
                    return (
                        Err(HvError::new(
                            ErrorKind::Invalid,
                            "this hv runs no supervisor (not started by `splitnet up`)",
                        )),
                        vec![],
                    );
                };
                return match sup.toolstack(req) {
                    Ok(r) => ok(r),
                    Err(e) => (Err(e), vec![]),
                };
            }
            Request::CaptureOpen { domain, spec } => {
                return match self.capture_open(&domain, &spec) {
                    Ok((reply, fd)) => (Ok(reply), vec![fd]),
                    Err(e) => (Err(e), vec![]),
                };
            }
            Request::HvmVcpu | Request::HvmDeviceModel { .. } => {
                return done_with(self.hvm_fds(caller, &req));
            }
            Request::VhostListener { name } => {
                return done_with(self.vhost_listener(caller, &name).map(|fd| vec![fd]));
            }
            Request::VhostConnect => {
                return done_with(self.vhost_connect(caller).map(|fd| vec![fd]))
            }
            Request::DestroyDomain { name } => {
                return match self.domid_of(&name) {
                    Some(id) => {
                        if let Some(sup) = self.supervisor() {
                            sup.destroying(&name);
                        }
                        self.destroy_domain(id, "destroyed by the toolstack");
                        ok(Reply::Done)
                    }
                    None => (
                        Err(HvError::new(
                            ErrorKind::BadDomain,
                            format!("no domain named {name:?}"),
                        )),
                        vec![],
                    ),
                }
            }
            _ => {}
        }
        let mut st = self.lock();
        let st = &mut *st;
        if caller != DOMID_TOOLSTACK && !st.doms.0.contains_key(&caller) {
            return (
                Err(HvError::new(
                    ErrorKind::BadDomain,
                    "domain is being destroyed",
                )),
                vec![],
            );
        }
        let name = req.name();
        st.counters.op(name);
        if let Some(d) = st.doms.0.get_mut(&caller) {
            d.counters.op(name);
        }
        match dispatch(st, caller, req) {
            Ok(o) => o,
            Err(e) => (Err(e), Vec::new()),
        }
    }

    fn run_batches(
        self: Arc<Self>,
        domid: DomId,
        mem: Arc<DomainMemory>,
        tr: Arc<HvTrace>,
        kick: Doorbell,
        done: Doorbell,
        stop: Doorbell,
    ) {
        loop {
            match poll_readable(&[kick.as_fd(), stop.as_fd()], None) {
                Ok(r) if r[1] => return,
                Ok(_) => {}
                Err(_) => return,
            }
            let t0 = trace::now();
            let _ = kick.drain();
            let page = &mem.batch_map;
            if page.load_u32(batch::SEQ_OFF) == page.load_u32(batch::DONE_OFF) {
                continue; // spurious doorbell
            }
            let mut ops = 0;
            match batch::read_batch(page, BATCH_PAGES) {
                Err((seq, _msg)) => {
                    // Counted, not logged: a guest could otherwise flood the log.
                    self.count_error(domid, ErrorKind::Invalid);
                    batch::complete(page, seq, -libc::EINVAL, &[]);
                }
                Ok(mut sub) => {
                    let (statuses, errors) = {
                        let mut st = self.lock();
                        let st = &mut *st;
                        if !st.doms.0.contains_key(&domid) {
                            return; // destroyed meanwhile: run nothing on its behalf
                        }
                        let n = (sub.ops.len() / abi::grant::GrantCopy::SIZE) as u64;
                        ops = n;
                        let t1 = trace::now();
                        let (r, what) = run_batch(st, domid, sub.kind, &mut sub.ops);
                        tr.record(HvEvent::GrantCopy, t1, n);
                        st.counters.op("batch");
                        st.counters.ops_n(what, n);
                        if let Some(d) = st.doms.0.get_mut(&domid) {
                            d.counters.op("batch");
                            d.counters.ops_n(what, n);
                        }
                        r
                    };
                    for e in &errors {
                        self.count_error(domid, e.kind);
                    }
                    if sub.kind == BatchKind::Hold {
                        batch::publish_held_frames(page, &sub.ops);
                    }
                    batch::complete(page, sub.seq, 0, &statuses);
                }
            }
            let _ = done.ring();
            tr.record(HvEvent::Batch, t0, ops);
        }
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
    if kind == BatchKind::Copy {
        return (
            grant::copy_batch(&mut st.pins, &st.doms, domid, ops),
            "grant_copy",
        );
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

/// Sends watch events to the domains that registered them. A domain that does
/// not drain its watch socket loses events (counted), never blocks hv.
fn deliver(st: &State, events: Vec<store::WatchEvent>) {
    for ev in events {
        let Some(d) = st.doms.0.get(&ev.domid) else {
            continue;
        };
        let Some(tx) = &d.watch_tx else { continue };
        let msg = WatchFired {
            path: ev.path,
            token: ev.token,
        };
        if let Ok(b) = proto::encode(&msg) {
            let _ = tx.try_send(&b, &[]);
        }
    }
}

/// Removes `domid`'s end from channel `chan`, closing it.
fn drop_end(st: &mut State, chan: u64, domid: DomId) {
    let Some(c) = st.channels.get_mut(&chan) else {
        return;
    };
    c.close();
    for e in c.ends.iter_mut() {
        if e.is_some_and(|(d, _)| d == domid) {
            *e = None;
        }
    }
    if c.ends.iter().all(Option::is_none) {
        st.channels.remove(&chan);
    }
}

fn domain(st: &mut State, id: DomId) -> HvResult<&mut Domain> {
    st.doms
        .0
        .get_mut(&id)
        .ok_or_else(|| HvError::new(ErrorKind::BadDomain, format!("domain {id} does not exist")))
}

fn dup(fd: &impl AsFd) -> HvResult<OwnedFd> {
    os("dup", fd.as_fd().try_clone_to_owned())
}

fn alloc_port(st: &mut State, id: DomId) -> HvResult<Port> {
    let d = domain(st, id)?;
    let quota = d.quotas.event_channels;
    if d.ports.len() >= quota {
        return err(
            ErrorKind::Quota,
            format!(
                "domain {id} ({}) holds its quota of {quota} event channels; each vif takes 2: raise max_event_channels of {} in the topology",
                d.name, d.name
            ),
        );
    }
    Ok((1..).find(|p| !d.ports.contains_key(p)).unwrap_or(1))
}

/// Serves one domain request: matches the request and hands each family
/// (hello, store, event channels, grants, NGM, capture) to its own function.
fn dispatch(st: &mut State, caller: DomId, req: Request) -> HvResult<Outcome> {
    match req {
        Request::Hello => hello(st, caller),
        Request::Nop => Ok(ok(Reply::Done)),
        req @ (Request::StoreRead { .. }
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
        Request::EvtchnSend { port } => {
            let id = port_chan(st, caller, port)?;
            let c = &st.channels[&id];
            let end = c
                .end_of(caller, port)
                .ok_or_else(|| HvError::new(ErrorKind::BadPort, "port not bound"))?;
            c.send_from(end)?;
            Ok(ok(Reply::Done))
        }
        Request::EvtchnClose { port } => {
            let id = port_chan(st, caller, port)?;
            domain(st, caller)?.ports.remove(&port);
            drop_end(st, id, caller);
            Ok(ok(Reply::Done))
        }
        Request::GrantCopy { ops } => grant_copy(st, caller, ops),
        Request::GrantMap {
            granter,
            gref,
            writable,
        } => grant_map(st, caller, granter, gref, writable),
        Request::GrantUnmap { handle } => grant_unmap(st, caller, handle),
        Request::GrantTransfer { frame, dest, gref } => {
            let t0 = trace::now();
            let landing = grant::transfer(&st.doms, caller, frame, dest, gref);
            record(st, caller, HvEvent::GrantTransfer, t0, 1);
            let landing = landing?;
            Ok(ok(Reply::Value(landing.to_le_bytes().to_vec())))
        }
        Request::NgmSetup { backend } => ngm_setup(st, caller, backend),
        Request::NgmGrant {
            backend,
            gref,
            frame,
            writable,
        } => {
            let frames = domain(st, caller)?.mem.spec.pool_frames;
            ngm_table(st, caller, backend)?.grant(gref, frame, writable, frames)?;
            Ok(ok(Reply::Done))
        }
        Request::NgmRevoke { backend, gref } => {
            ngm_table(st, caller, backend)?.revoke(gref)?;
            Ok(ok(Reply::Done))
        }
        Request::NgmAttach { guest } => ngm_attach(st, caller, guest),
        Request::PoolWindow { granter } => pool_window(st, caller, granter),
        Request::CaptureAttach { id } => match st.captures.get(&id) {
            Some((d, _)) if *d == caller => {
                let (_, fd) = st.captures.remove(&id).expect("present");
                Ok((Ok(Reply::Done), vec![fd]))
            }
            _ => err(
                ErrorKind::BadDomain,
                format!("no capture channel {id} waits for domain {caller}"),
            ),
        },
        // The toolstack's requests (`Request::privileged`) are served by
        // `Hypervisor::handle` before the lock is taken.
        _ => handled_elsewhere(),
    }
}

/// The answer to a request `dispatch` does not serve: the toolstack's
/// requests are served by `Hypervisor::handle` before the lock is taken.
/// `Done` with descriptors, or the error.
fn done_with(r: HvResult<Vec<OwnedFd>>) -> Outcome {
    match r {
        Ok(fds) => (Ok(Reply::Done), fds),
        Err(e) => (Err(e), vec![]),
    }
}

fn handled_elsewhere() -> HvResult<Outcome> {
    err(ErrorKind::Invalid, "handled elsewhere")
}

/// `Hello`: the first message of a domain, answered once with its
/// [`Welcome`] and the descriptors of its memory, watch socket and doorbells.
fn hello(st: &mut State, caller: DomId) -> HvResult<Outcome> {
    let d = domain(st, caller)?;
    if d.said_hello {
        return err(ErrorKind::Invalid, "Hello may be sent only once");
    }
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
/// watches): each change delivers the watch events it fired.
fn store_request(st: &mut State, caller: DomId, req: Request) -> HvResult<Outcome> {
    let store =
        |r: Result<Vec<store::WatchEvent>, store::StoreError>, st: &State| -> HvResult<Outcome> {
            let events = r.map_err(store_err)?;
            deliver(st, events);
            Ok(ok(Reply::Done))
        };
    match req {
        Request::StoreRead { path } => {
            let v = st.store.read(caller, &path).map_err(store_err)?;
            Ok(ok(Reply::Value(v)))
        }
        Request::StoreWrite { path, value } => {
            let r = st.store.write(caller, &path, &value);
            store(r, st)
        }
        Request::StoreMkdir { path } => {
            let r = st.store.mkdir(caller, &path);
            store(r, st)
        }
        Request::StoreRm { path } => {
            let r = st.store.rm(caller, &path);
            store(r, st)
        }
        Request::StoreDirectory { path } => {
            let v = st.store.directory(caller, &path).map_err(store_err)?;
            Ok(ok(Reply::List(v)))
        }
        Request::StoreSetPerms { path, perms } => {
            let p = store::Perms::parse_entries(caller, perms.iter().map(String::as_str))
                .map_err(store_err)?;
            let r = st.store.set_perms(caller, &path, p);
            store(r, st)
        }
        Request::StoreGetPerms { path } => {
            let p = st.store.get_perms(caller, &path).map_err(store_err)?;
            Ok(ok(Reply::List(p.entries())))
        }
        Request::Watch { path, token } => {
            let r = st.store.watch(caller, caller as u64, &path, &token);
            store(r, st)
        }
        Request::Unwatch { path, token } => {
            st.store
                .unwatch(caller, caller as u64, &path, &token)
                .map_err(store_err)?;
            Ok(ok(Reply::Done))
        }
        // `dispatch` sends only the store family here.
        _ => handled_elsewhere(),
    }
}

/// `EvtchnAllocUnbound`: opens a channel on a fresh port of the caller,
/// offered to `remote`, and hands the caller its end's descriptors.
fn evtchn_alloc_unbound(st: &mut State, caller: DomId, remote: DomId) -> HvResult<Outcome> {
    if remote == caller || !st.doms.0.contains_key(&remote) {
        return err(
            ErrorKind::BadDomain,
            format!("cannot offer a channel to domain {remote}"),
        );
    }
    let port = alloc_port(st, caller)?;
    let chan = Channel::new(caller, port, remote)?;
    // Own waiting end, own ringing end (to re-deliver on unmask), peer's ringing end.
    let fds = vec![
        dup(&chan.page)?,
        dup(&chan.bells[0].0)?,
        dup(&chan.bells[0].1)?,
        dup(&chan.bells[1].1)?,
    ];
    let id = st.next_chan;
    st.next_chan += 1;
    st.channels.insert(id, chan);
    domain(st, caller)?.ports.insert(port, id);
    Ok((Ok(Reply::Evtchn { port, end: 0 }), fds))
}

/// `EvtchnBindInterdomain`: binds the caller to a port `remote` offered it,
/// checking the offer, and hands the caller the second end's descriptors.
fn evtchn_bind_interdomain(
    st: &mut State,
    caller: DomId,
    remote: DomId,
    remote_port: Port,
) -> HvResult<Outcome> {
    let rd = domain(st, remote)?;
    let Some(&id) = rd.ports.get(&remote_port) else {
        return err(
            ErrorKind::BadPort,
            format!("domain {remote} has no port {remote_port}"),
        );
    };
    let port = alloc_port(st, caller)?;
    let c = st
        .channels
        .get_mut(&id)
        .ok_or_else(|| HvError::new(ErrorKind::BadPort, "channel gone"))?;
    let unbound = c.map.load_u32(crate::evtchn::STATE_OFF) == crate::evtchn::STATE_UNBOUND;
    if !unbound
        || c.remote != caller
        || c.ends[1].is_some()
        || c.ends[0] != Some((remote, remote_port))
    {
        return err(
            ErrorKind::BadPort,
            format!("port {remote_port} of domain {remote} is not offered to domain {caller}"),
        );
    }
    c.ends[1] = Some((caller, port));
    c.map.store_u32(crate::evtchn::STATE_OFF, STATE_BOUND);
    let fds = vec![
        dup(&c.page)?,
        dup(&c.bells[1].0)?,
        dup(&c.bells[1].1)?,
        dup(&c.bells[0].1)?,
    ];
    domain(st, caller)?.ports.insert(port, id);
    Ok((Ok(Reply::Evtchn { port, end: 1 }), fds))
}

/// `GrantCopy`: checks the batch's shape, runs the copies and counts them
/// and their errors, globally and for the caller.
fn grant_copy(st: &mut State, caller: DomId, mut ops: Vec<u8>) -> HvResult<Outcome> {
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
fn grant_map(
    st: &mut State,
    caller: DomId,
    granter: DomId,
    gref: u32,
    writable: bool,
) -> HvResult<Outcome> {
    if granter == caller {
        return err(ErrorKind::BadDomain, "a domain cannot map its own grant");
    }
    let (already, need_fd) = {
        let d = domain(st, caller)?;
        (
            d.mapped.contains(&(granter, gref)),
            !d.fds_given.contains(&(granter, writable)),
        )
    };
    if already {
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
    let fds = if need_fd {
        vec![gm.pool_fd_for_peer(writable)?]
    } else {
        Vec::new()
    };
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
    if need_fd {
        d.fds_given.insert((granter, writable));
    }
    let fd_attached = need_fd;
    Ok((
        Ok(Reply::Mapped {
            handle,
            frame: frame.raw(),
            writable,
            fd_attached,
        }),
        fds,
    ))
}

/// `GrantUnmap`: forgets the caller's mapping `handle` and unpins its frame.
fn grant_unmap(st: &mut State, caller: DomId, handle: u32) -> HvResult<Outcome> {
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
    Ok(ok(Reply::Done))
}

/// `NgmSetup`: the caller's NGM grant table for `backend`, created on first
/// use under a fresh handle.
fn ngm_setup(st: &mut State, caller: DomId, backend: DomId) -> HvResult<Outcome> {
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

/// `NgmAttach`: a backend attaches to the table `guest` set up for it and
/// gets the table's descriptors and the guest's pool.
fn ngm_attach(st: &mut State, caller: DomId, guest: DomId) -> HvResult<Outcome> {
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

/// `PoolWindow`: `granter`'s pool, read-only, for a domain that maps one
/// of its grants (a backend that attached to its rings). Such a domain
/// already holds that pool's descriptor from the map (hv hands a peer the
/// pool alone, never private memory); the window only spares it a mapping
/// per page, and the kernel refuses any store through it.
fn pool_window(st: &mut State, caller: DomId, granter: DomId) -> HvResult<Outcome> {
    let maps_one = domain(st, caller)?
        .mapped
        .iter()
        .any(|&(g, _)| g == granter);
    if granter == caller || !maps_one {
        return err(
            ErrorKind::PermissionDenied,
            format!("domain {caller} maps no grant of domain {granter}; no window on its pool"),
        );
    }
    let mem = domain(st, granter)?.mem.clone();
    Ok((
        Ok(Reply::PoolWindow {
            pool_frames: mem.spec.pool_frames,
        }),
        vec![mem.pool_fd_for_peer(false)?],
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

fn port_chan(st: &mut State, caller: DomId, port: Port) -> HvResult<u64> {
    domain(st, caller)?
        .ports
        .get(&port)
        .copied()
        .ok_or_else(|| {
            HvError::new(
                ErrorKind::BadPort,
                format!("domain {caller} has no port {port}"),
            )
        })
}
