//! The hypervisor proper: domain table, hypercall dispatch and cleanup.
//!
//! One mutex guards hv's state; every hypercall runs under it for a bounded
//! time (the batch path holds it for one batch). Each domain is served by two
//! threads: its control socket and its batch doorbell.
//!
//! - [`Hypervisor`] (here): the shared handle, its settings and lookups;
//! - `domain`, `state`: what hv keeps per domain and under its lock;
//! - `lifecycle`: creating and destroying domains, hv's guarded threads;
//! - `serve`: a control connection's loop and [`Hypervisor::handle`], which
//!   serves the toolstack's requests itself and passes the rest to
//!   `dispatch`, which hands each family to `evtchn_ops`, `grant_ops` (grants
//!   and NGM tables), `capture` or itself (hello, store);
//! - `batches`: a domain's batch doorbell thread;
//! - `devices`: the requests of HVM guests and vhost-user vifs;
//! - `report`: `status` and `trace` snapshots;
//! - `reply`: what a hypercall answers;
//! - `revive`: a driver domain kept for a successor when its process dies;
//! - `store_journal`: the store changes answered since hv's last record.

mod batches;
mod caller_core;
mod capture;
mod devices;
mod dispatch;
mod domain;
mod evtchn_ops;
mod gate;
mod grant_ops;
mod handover;
mod lifecycle;
mod reply;
mod report;
mod revive;
mod serve;
mod shape;
mod state;
mod store_journal;

pub use domain::{DomainSpec, Quotas, Teardown};
pub use gate::{Kind as GateKind, Pass};
pub use grant_ops::MAX_COPY_OPS;
pub use handover::{Adopted, ChannelImage, DomainImage, HvImage, NgmImage};
pub use store_journal::JournalImage;

use crate::error::{ErrorKind, HvError, HvResult};
use crate::hvm::HvmGuests;
use crate::ports::KeptPorts;
use crate::proto::{DomId, Reply, Request};
use crate::trace::HvTrace;
use crate::vhost::VhostListeners;
use state::{domain, State};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The daemon's part of the toolstack: what needs processes, namespaces and
/// the topology (restart, vif hotplug). Called without hv's lock held.
pub trait Supervisor: Send + Sync {
    /// Serves a `RestartDomain`, `NetworkAttach` or `NetworkDetach`.
    fn toolstack(&self, req: Request) -> HvResult<Reply>;
    /// The toolstack is about to destroy domain `name`: it must not come back.
    fn destroying(&self, name: &str);
    /// A toolstack request that may have changed hv's state was served and
    /// is about to be answered: what hv records for its guardian is
    /// brought up to date first, so that a crash after the answer loses
    /// nothing the caller was told was done.
    fn served(&self) {}
}

/// The hypervisor. Shared by its serving threads through an `Arc`.
pub struct Hypervisor {
    /// Set by the daemon once it has built the topology.
    supervisor: Mutex<Option<Arc<dyn Supervisor>>>,
    state: Mutex<State>,
    done: Condvar,
    /// Log domain lifecycle events on stderr (the daemon does; benches don't).
    verbose: std::sync::atomic::AtomicBool,
    /// Whether each domain's batch thread moves to its caller's core
    /// ([`Hypervisor::set_batches_follow_caller`]).
    follow_caller: std::sync::atomic::AtomicBool,
    /// What hv recorded serving the toolstack.
    toolstack_trace: Arc<HvTrace>,
    /// The clock trace snapshots are stamped with.
    started: std::time::Instant,
    /// HVM guests' I/O paths (`hvm/`).
    hvm: HvmGuests,
    /// vhost-user vifs' listening sockets (`vhost.rs`).
    vhost: VhostListeners,
    /// Driver domains' uplink sockets, kept across their restarts.
    ports: KeptPorts,
    /// Closed while an upgrade of hv takes its state ([`gate`]).
    gate: gate::Gate,
    /// The toolstack connections being served, by descriptor.
    toolstack: Mutex<std::collections::BTreeSet<std::os::fd::RawFd>>,
    /// Device models' connections being served: (driver domain, descriptor).
    device_models: Mutex<std::collections::BTreeSet<(DomId, std::os::fd::RawFd)>>,
    /// Requests served and domains made or destroyed that may have changed
    /// what hv's guardian records ([`Hypervisor::changes`]).
    changes: std::sync::atomic::AtomicU64,
}

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
    crate::log!(Error, "thread {thread} panicked: {msg}");
    false
}

impl Hypervisor {
    /// A hypervisor with no domains.
    pub fn new() -> Arc<Hypervisor> {
        Arc::new(Hypervisor {
            supervisor: Mutex::new(None),
            state: Mutex::new(State::new()),
            done: Condvar::new(),
            verbose: std::sync::atomic::AtomicBool::new(false),
            follow_caller: std::sync::atomic::AtomicBool::new(true),
            toolstack_trace: Arc::new(HvTrace::default()),
            started: std::time::Instant::now(),
            hvm: Default::default(),
            vhost: Default::default(),
            ports: Default::default(),
            gate: Default::default(),
            toolstack: Default::default(),
            device_models: Default::default(),
            changes: Default::default(),
        })
    }

    /// How many times hv's state may have changed so far: a record taken
    /// after this was read holds every change counted up to it.
    pub fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Counts a change, once it is made (the toolstack's too, to what it
    /// records beside hv's state).
    pub fn note_change(&self) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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

    /// Whether each domain's batch thread serves the domain's hypercall
    /// batches on the core the caller rang from (on by default), as Xen
    /// ran a hypercall on the calling CPU; off, wherever the scheduler
    /// wakes it. Read as each batch thread starts: set it before the
    /// domains are made.
    pub fn set_batches_follow_caller(&self, on: bool) {
        self.follow_caller
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn log(&self, msg: std::fmt::Arguments<'_>) {
        if self.verbose.load(std::sync::atomic::Ordering::Relaxed) {
            crate::log::emit(crate::log::Level::Info, None, msg);
        }
    }

    fn toolstack_conns(&self) -> MutexGuard<'_, std::collections::BTreeSet<std::os::fd::RawFd>> {
        self.toolstack.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving the other domains.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        self.note_change();
        // The domain died before we got here: clean up its process side now.
        if let Some(t) = run_now {
            t();
        }
    }

    /// A fact [`Hypervisor::set_info`] set.
    pub fn info(&self, key: &str) -> Option<String> {
        self.lock().info.get(key).cloned()
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

    /// Every domain as (id, name, pid, network namespace): what the
    /// toolstack watches again after hv's upgrade in place.
    pub fn launched(&self) -> Vec<(DomId, String, Option<i32>, Option<String>)> {
        let st = self.lock();
        (st.doms.0.iter())
            .map(|(&id, d)| (id, d.name.clone(), d.pid, d.netns.clone()))
            .collect()
    }

    /// Whether shutdown was requested.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}
