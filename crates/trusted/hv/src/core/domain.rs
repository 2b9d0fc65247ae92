//! A domain as hv keeps it: what the toolstack asks for ([`DomainSpec`],
//! [`Quotas`], [`Teardown`]) and what hv holds for it while it lives.

use crate::evtchn::MAX_PORTS;
use crate::grant::Memories;
use crate::hold::Holds;
use crate::memory::{DomainMemory, MemorySpec};
use crate::proto::{DomId, Port};
use crate::status::Counters;
use crate::trace::HvTrace;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use sys::{Doorbell, SeqPacket};

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
/// the topology ([`Hypervisor::set_quotas`]); a domain it does not size
/// gets [`Quotas::default`].
///
/// [`Hypervisor::set_quotas`]: crate::Hypervisor::set_quotas
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// A grant mapping a domain holds: whose grant, and with what access.
pub(super) struct MapRecord {
    pub(super) granter: DomId,
    pub(super) gref: u32,
    pub(super) writable: bool,
}

/// One domain: its memory, its ends of the doorbells and control socket,
/// and what it holds (mappings, grants held, ports, quotas).
pub(super) struct Domain {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) mem: Arc<DomainMemory>,
    /// The domain's ends of its batch doorbells: it rings `kick`, waits on `done`.
    pub(super) kick: Doorbell,
    pub(super) done: Doorbell,
    /// Rung to stop the domain's batch thread.
    pub(super) stop: Doorbell,
    pub(super) control: SeqPacket,
    /// hv's ends of the batch doorbells (its batch thread's).
    pub(super) batch: Arc<BatchEnds>,
    pub(super) said_hello: bool,
    pub(super) watch_tx: Option<SeqPacket>,
    /// A watch event could not be queued on `watch_tx`: the domain is told
    /// so ([`crate::proto::WATCHES_LOST`]) ahead of the next one.
    pub(super) watches_lost: std::sync::atomic::AtomicBool,
    pub(super) maps: HashMap<u32, MapRecord>,
    pub(super) mapped: HashSet<(DomId, u32)>,
    /// Grants it holds for TX by reference under hv-copy ([`crate::hold`]).
    pub(super) holds: Holds,
    pub(super) next_handle: u32,
    pub(super) fds_given: HashSet<(DomId, bool)>,
    pub(super) ports: BTreeMap<Port, u64>,
    pub(super) quotas: Quotas,
    /// The nice value hv's threads serving it run at, its process's
    /// ([`crate::Hypervisor::weigh`]).
    pub(super) nice: i32,
    pub(super) counters: Counters,
    /// What hv recorded serving this domain.
    pub(super) trace: Arc<HvTrace>,
    pub(super) pid: Option<i32>,
    pub(super) netns: Option<String>,
    pub(super) cgroup: Option<String>,
    pub(super) teardown: Option<Teardown>,
    /// Kept, orphaned, when its control connection closes (a driver
    /// domain whose successor takes its vifs over: `revive`).
    pub(super) keep_on_hangup: bool,
    /// Its process hung up, and it waits for a successor.
    pub(super) orphaned: bool,
    /// Its processes so far, less one: the one a serving thread serves.
    pub(super) incarnation: u32,
    /// Revived: the ports its dead process held that its successor has
    /// not taken back yet (`EvtchnRebind`).
    pub(super) unclaimed: Option<std::collections::BTreeSet<Port>>,
}

/// hv's ends of a domain's batch doorbells, which its batch thread
/// serves: it waits on `kick`, rings `done`, and stops when `stop` rings.
/// The record keeps them too, for an upgrade of hv to carry.
pub(super) struct BatchEnds {
    pub(super) kick: Doorbell,
    pub(super) done: Doorbell,
    pub(super) stop: Doorbell,
}

/// What a new domain's record keeps of its doorbells and control socket.
pub(super) struct DomainEnds {
    /// The domain's ends of its batch doorbells, handed over at `Hello`:
    /// it rings `kick` and waits on `done`.
    pub(super) kick: Doorbell,
    pub(super) done: Doorbell,
    /// Rings the domain's batch thread to stop.
    pub(super) stop: Doorbell,
    /// hv's end of the control socket, shut down when the domain is destroyed.
    pub(super) control: SeqPacket,
    pub(super) batch: Arc<BatchEnds>,
}

impl Domain {
    /// A domain that has not said `Hello` yet and holds nothing.
    pub(super) fn new(
        spec: &DomainSpec,
        mem: Arc<DomainMemory>,
        ends: DomainEnds,
        trace: Arc<HvTrace>,
    ) -> Domain {
        Domain {
            name: spec.name.clone(),
            kind: spec.kind.clone(),
            mem,
            kick: ends.kick,
            done: ends.done,
            stop: ends.stop,
            control: ends.control,
            batch: ends.batch,
            said_hello: false,
            watch_tx: None,
            watches_lost: Default::default(),
            maps: HashMap::new(),
            mapped: HashSet::new(),
            holds: Holds::default(),
            next_handle: 1,
            fds_given: HashSet::new(),
            ports: BTreeMap::new(),
            quotas: Quotas::default(),
            nice: 0,
            counters: Counters::default(),
            trace,
            pid: None,
            netns: None,
            cgroup: None,
            teardown: None,
            keep_on_hangup: false,
            orphaned: false,
            incarnation: 0,
            unclaimed: None,
        }
    }
}

/// Every domain, by id; grant operations read their memories through it.
pub(super) struct Doms(pub(super) BTreeMap<DomId, Domain>);

impl Memories for Doms {
    fn memory(&self, domid: DomId) -> Option<&DomainMemory> {
        self.0.get(&domid).map(|d| &*d.mem)
    }
}
