//! The driver domain: its uplinks, its bridges, and one netback per guest
//! vif, driven by one poll loop (Menon 2006 Fig. 1; Ram thesis Fig. 2.1).

use crate::capture::{Taps, Target};
use crate::netback::{self, Netback, NetbackError, Pending};
use crate::port::vhost::{self, VhostPort};
use crate::port::vmq::{self, Queue, QueueId};
use crate::port::{PacketPort, Port};
use crate::switch::bridge::{Bridge, PortId, Route, DEFAULT_BRIDGE};
use crate::switch::vlan::{self, Attach, Mode, Retagged, Segment, RETAG_HEAD};
use domain_common::idle::Idle;
use frame::offload::Offloads;
use frame::packet::FrameRef;
use hypercall::{DomId, HvClient};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Bridge port of the first uplink or extra port ([`Ports`]); vif i is
/// port i + 1.
const PORT_BASE: PortId = 1 << 20;
/// How often a port that is missing or failed is opened again.
const PORT_RETRY: Duration = Duration::from_millis(250);
/// How long netback waits for a frontend it already saw Connected.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Errors that stop the driver domain.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("hypercall: {0}")]
    Hv(#[from] hypercall::HvError),
    #[error("port: {0}")]
    Io(#[from] std::io::Error),
}

struct Vif {
    nb: Netback,
    stats_written: String,
    /// The bridge has dropped this vif's MACs (after it disconnected).
    forgotten: bool,
    /// Its backend directory is gone (the guest died or the vif was
    /// detached): the slot, and its bridge port, may be reused.
    gone: bool,
    /// The loop's own handles on the vif's doorbells, registered with the
    /// event manager while it is connected (see [`Events::watch_vif`]).
    bells: Vec<OwnedFd>,
    /// Its bridge and access VLAN (backend nodes `bridge`, `splitnet-vlan`).
    attach: Attach,
    /// Its index (`splitnet-index`): names its queue.
    index: u32,
    /// Its dedicated queue, when it asked for one (`splitnet-pdev`).
    queue: VifQueue,
}

/// A vif's dedicated queue (Ram thesis ch. 3): asked for with
/// `splitnet-pdev`, dedicated when its uplink gave it one, shared (through
/// the bridge, with the reason) otherwise.
#[derive(Default)]
struct VifQueue {
    /// The uplink it asked for a queue on.
    pdev: Option<String>,
    /// The uplink's port slot, the queue there, and the queue itself.
    at: Option<(usize, QueueId, Queue)>,
    /// Whether the loop listens to the queue (off while the guest has
    /// posted too few buffers).
    interest: bool,
    /// Why it shares the default queue, when it asked and does.
    why: Option<String>,
    kernel_drops: u64,
}

/// Frames one queue takes per turn, so a flooded queue cannot starve
/// another's (the rest wait for the next turn).
const QUEUE_BUDGET: usize = 64;

/// Runs the driver domain until hv goes away.
pub fn run(hv: &mut HvClient) -> Result<(), DriverError> {
    let mut d = Driver::new(hv)?;
    loop {
        d.turn(hv)?;
    }
}

/// What one turn of the loop did, for tests and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Turn {
    /// Sources the wait found ready.
    pub ready: usize,
    /// Control-plane work ran (store watches, periodic counters, reopened
    /// ports): it may allocate, unlike the data path.
    pub housekeeping: bool,
}

/// The driver domain's state between turns of its loop: ports, bridge,
/// vifs and the event manager they are registered with.
pub struct Driver {
    home: String,
    base: String,
    captures: String,
    ports: Ports,
    pending: Vec<Pending>,
    vifs: Vec<Vif>,
    taps: Taps,
    idle: Idle,
    bridge: Bridge,
    scratch: Scratch,
    events: Events,
    last_stats: Instant,
    stats: LoopCounters,
}

impl Driver {
    /// Opens the ports, probes the vifs the toolstack set up, and registers
    /// every source with the event manager.
    pub fn new(hv: &mut HvClient) -> Result<Driver, DriverError> {
        let me = hv.domid();
        let home = format!("/local/domain/{me}/splitnet");
        if hv
            .store_read_str(&format!("{home}/{}", crate::hugepages::KEY))
            .is_ok_and(|v| v == "1")
        {
            crate::hugepages::enable();
        }
        let port_offload = port_caps(hv, &home);
        let events = Events::new()?;
        events.epoll.add(hv.watch_fd(), Source::Watch.token())?;
        // hv's word (`jail::Role::QueueDriver`): it may make queues.
        let queue_admin = hv
            .store_read_str(&format!("{home}/queue-admin"))
            .is_ok_and(|v| v == "1");
        // Queues an earlier run left are gone: hv deletes a dead driver
        // domain's before it starts another (`supervisor::drop_queues`).
        let mut d = Driver {
            captures: format!("{home}/capture"),
            base: format!("/local/domain/{me}/backend/vif"),
            ports: Ports::new(&home, port_offload, queue_admin),
            home,
            pending: Vec::new(),
            vifs: Vec::new(),
            taps: Taps::default(),
            idle: Idle::for_domain(hv, "driver", Duration::from_millis(200)),
            bridge: Bridge::default(),
            scratch: Scratch::new(),
            events,
            last_stats: Instant::now(),
            stats: LoopCounters::default(),
        };
        d.ports.rx_slot = rx_slot(hv, &d.home, &mut d.stats.config_errors);
        // The uplinks (`uplinks/`) and the extra ports the toolstack names
        // (a hosted guest's VMNet interface): opened again whenever they
        // vanish.
        // And the VMs' vhost-user vifs (`vhost/`), served while listed.
        for path in [
            &d.ports.uplinks_dir,
            &d.ports.extras_dir,
            &d.ports.vhost_dir,
        ] {
            hv.watch(path, PORTS)?;
        }
        d.ports
            .sync(hv, &mut d.bridge, &d.events, &mut d.stats.config_errors);
        // Probe every vif (InitWait), then connect each as its frontend
        // comes, in any order: one guest that never comes delays no other.
        // vifs the toolstack adds or removes later (hotplug, a guest's
        // restart) show up under the same directory.
        hv.watch(&d.base, BACKENDS)?;
        rescan(hv, &d.base, &mut d.pending, &mut d.vifs)?;
        d.connect_ready(hv)?;
        hv.watch(&d.captures, CAPTURES)?;
        d.taps.sync(hv, &d.captures);
        Ok(d)
    }

    /// One wake-up: waits for a ready source (or carried-over work) and
    /// services only what is ready. An idle vif costs nothing here: no
    /// system call, no look at its rings.
    pub fn turn(&mut self, hv: &mut HvClient) -> Result<Turn, DriverError> {
        let credit_due = self.credit_due();
        let carried = !self.events.ready.is_empty();
        let mut timeout = self.idle.timeout(carried || hv.watch_backlog());
        if let Some(d) = credit_due {
            timeout = timeout.min(d);
        }
        if self.ports.any_closed() {
            timeout = timeout.min(PORT_RETRY);
        }
        self.idle.pause();
        let n = self.events.epoll.wait(Some(timeout))?;
        self.stats.wakeups += 1;
        let mut turn = Turn {
            ready: n,
            housekeeping: false,
        };
        let mut watch = hv.watch_backlog();
        self.events.port_ready = 0;
        for i in 0..n {
            let Some(ev) = self.events.epoll.event(i) else {
                break;
            };
            match Source::of(ev.token) {
                Some(Source::Watch) => watch = true,
                Some(Source::Port(j)) => self.events.port_ready |= 1u64 << (j % 64),
                Some(Source::Vif(v)) => self.events.ready.insert(v),
                Some(Source::Queue(v)) => self.events.queues.insert(v),
                None => {}
            }
        }
        if n > 0 || carried {
            self.idle.worked();
        }
        if watch {
            turn.housekeeping = true;
            self.on_watches(hv)?;
        }
        if self.events.port_ready != 0 {
            self.ports_to_bridge();
        }
        if !self.events.queues.is_empty() {
            self.service_queues();
        }
        self.service_vifs(hv);
        if self.ports.reopen(hv, &self.events) {
            turn.housekeeping = true;
            let (vifs, base, ports) = (&self.vifs, &self.base, &self.ports);
            self.taps.resolve(|t| port_of(t, vifs, base, ports));
        }
        if self.last_stats.elapsed() >= STATS_EVERY {
            turn.housekeeping = true;
            self.housekeep(hv);
        }
        Ok(turn)
    }

    /// vifs waiting for transmit credit (`rate=`) whose replenish is due go
    /// back to the ready set; for the others, how long until the first is
    /// due, so the loop sleeps until then instead of polling.
    fn credit_due(&mut self) -> Option<Duration> {
        if self.events.credit.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut soonest: Option<Duration> = None;
        let waiting = self.events.credit.take();
        for &i in &waiting {
            match self.vifs.get(i).and_then(|v| v.nb.credit_wait()) {
                Some(at) if at > now => {
                    let d = at - now;
                    soonest = Some(soonest.map_or(d, |s| s.min(d)));
                    self.events.credit.insert(i);
                }
                Some(_) => self.events.ready.insert(i),
                None => {}
            }
        }
        self.events.credit.give_back(waiting);
        soonest
    }

    /// Store watches: vifs come and go, captures open, ports change.
    fn on_watches(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let w = handle_watches(hv, &mut self.vifs)?;
        if w.rescan {
            rescan(hv, &self.base, &mut self.pending, &mut self.vifs)?;
        }
        if w.pending || w.rescan {
            self.connect_ready(hv)?;
        }
        if w.captures {
            self.taps.sync(hv, &self.captures);
        }
        if w.ports {
            let errors = &mut self.stats.config_errors;
            self.ports.sync(hv, &mut self.bridge, &self.events, errors);
        }
        if w.captures || w.pending || w.rescan || w.ports {
            let (vifs, base, ports) = (&self.vifs, &self.base, &self.ports);
            self.taps.resolve(|t| port_of(t, vifs, base, ports));
        }
        if w.vifs_changed || w.rescan {
            // A vif may have gone down without a word on its doorbell.
            for i in 0..self.vifs.len() {
                self.retire_if_down(i);
            }
        }
        Ok(())
    }

    /// Ports that said they have frames → bridge. One that fails (its
    /// interface went down or away) is counted, closed and opened again
    /// after [`PORT_RETRY`], so it cannot keep the loop spinning nor stop
    /// the guests.
    fn ports_to_bridge(&mut self) {
        for j in 0..self.ports.list.len() {
            if self.events.port_ready & (1u64 << (j % 64)) == 0 {
                continue;
            }
            let Some(mut p) = self.ports.list[j].port.take() else {
                continue;
            };
            let mut fx = Fwd {
                bridge: &mut self.bridge,
                ports: &mut self.ports,
                taps: &mut self.taps,
                scratch: &mut self.scratch,
                via: None,
            };
            let r = read_port(
                &mut fx,
                p.as_mut(),
                j,
                &mut self.vifs,
                &mut self.events.dirty,
            );
            match r {
                Ok(()) => self.ports.list[j].port = Some(p),
                Err(e) => {
                    self.stats.port_errors += 1;
                    eprintln!(
                        "driver: port {}: {e}; opening it again in {PORT_RETRY:?}",
                        p.name()
                    );
                    let _ = self.events.epoll.remove(p.fd());
                    self.bridge.forget_port(PORT_BASE + j);
                    self.ports.list[j].retry_at = Instant::now() + PORT_RETRY;
                }
            }
        }
    }

    /// The ready vifs' TX rings → bridge; then every vif that is ready or
    /// got frames publishes its RX responses and takes queued frames. A vif
    /// left with work (a TX ring past its budget, queued frames and posted
    /// buffers) is carried into the next turn, which then does not block.
    fn service_vifs(&mut self, hv: &mut HvClient) {
        let ready = self.events.ready.take();
        for &i in &ready {
            self.tx_one(hv, i);
        }
        for &i in &ready {
            self.events.dirty.insert(i);
        }
        self.events.ready.give_back(ready);
        let dirty = self.events.dirty.take();
        for &i in &dirty {
            let Some(v) = self.vifs.get_mut(i) else {
                continue;
            };
            if let Err(e) = v.nb.flush_rx(hv) {
                v.nb.disconnect(hv, &format!("RX failed: {e}"));
            }
            self.events.touched.insert(i);
            if !self.retire_if_down(i) {
                self.queue_interest(i);
                let nb = &mut self.vifs[i].nb;
                if v_busy(nb) {
                    self.events.ready.insert(i);
                } else if nb.credit_wait().is_some() {
                    self.events.credit.insert(i);
                }
            }
        }
        self.events.dirty.give_back(dirty);
    }

    /// Takes vif `i`'s notifications and forwards its TX ring.
    fn tx_one(&mut self, hv: &mut HvClient, i: usize) {
        if !self.vifs.get(i).is_some_and(|v| v.nb.is_connected()) {
            return;
        }
        if !self.vifs[i].nb.ack() {
            self.vifs[i]
                .nb
                .disconnect(hv, "the frontend closed its event channel");
            return;
        }
        let (before, rest) = self.vifs.split_at_mut(i);
        let Some((me, after)) = rest.split_first_mut() else {
            return;
        };
        let via = me.queue.at.as_mut().map(|(j, _, q)| (PORT_BASE + *j, q));
        let mut fx = Fwd {
            bridge: &mut self.bridge,
            ports: &mut self.ports,
            taps: &mut self.taps,
            scratch: &mut self.scratch,
            via,
        };
        let mut others = Others {
            before,
            after,
            dirty: &mut self.events.dirty,
        };
        let (from, mut tagged) = (me.attach, 0);
        let r = me.nb.process_tx(hv, &mut |frames| {
            tagged += forward(&mut fx, i + 1, from, frames, others.reborrow());
        });
        if tagged > 0 {
            me.nb.counters.drops.add("vlan_tagged", tagged);
        }
        if let Err(e) = r {
            me.nb.disconnect(hv, &format!("TX failed: {e}"));
        }
    }

    /// However vif `i` went down, its doorbells leave the event manager and
    /// its MACs the bridge. True if it is down.
    fn retire_if_down(&mut self, i: usize) -> bool {
        let Some(v) = self.vifs.get_mut(i) else {
            return true;
        };
        if v.nb.is_connected() {
            return false;
        }
        for b in v.bells.drain(..) {
            let _ = self.events.epoll.remove(b.as_fd());
        }
        if !v.forgotten {
            self.bridge.forget_port(i + 1);
            v.forgotten = true;
        }
        self.drop_queue(i, None);
        true
    }

    /// Twice a second: counters to the store, captures reaped.
    fn housekeep(&mut self, hv: &mut HvClient) {
        self.last_stats = Instant::now();
        self.stats.syscalls = sys::syscalls();
        let touched = self.events.touched.take();
        publish_stats(
            hv,
            &mut self.vifs,
            &touched,
            &self.ports,
            &self.bridge,
            &self.stats,
        );
        self.events.touched.give_back(touched);
        self.taps.reap(hv, &self.captures);
        let (vifs, base, ports) = (&self.vifs, &self.base, &self.ports);
        self.taps.resolve(|t| port_of(t, vifs, base, ports));
    }

    /// The driver domain's store directory (`/local/domain/<id>/splitnet`).
    pub fn home(&self) -> &str {
        &self.home
    }
}

/// Reads port slot `j`'s queued frames (its port `p` is out of the slot)
/// into the bridge. A member of a macvlan group enters as its primary's
/// bridge port, and only with unicast: the kernel's macvlan gave it the
/// frames for its guest's MAC, and a copy of every wire broadcast and
/// multicast, which the primary also got. Those copies, and whatever a
/// member reads while its primary is closed, are dropped and counted.
fn read_port(
    fx: &mut Fwd<'_>,
    p: &mut dyn Port,
    j: usize,
    vifs: &mut [Vif],
    dirty: &mut SlotSet,
) -> std::io::Result<()> {
    let (ingress, from, member) = match fx.ports.ingress_of(j) {
        Some((i, a, m)) => (Some(i), a, m),
        None => (None, fx.ports.list[j].attach, true),
    };
    let mut dropped = 0;
    let r = p.recv_batch(&mut |batch| {
        let Some(ingress) = ingress else {
            dropped += batch.len() as u64;
            return;
        };
        // A group member forwards its unicast frames only (its primary
        // takes the group's broadcast): each run between two group
        // frames goes on at once.
        let group = |f: &FrameRef<'_>| member && f.head.first().is_some_and(|b| b & 1 != 0);
        for run in batch.split(group) {
            if !run.is_empty() {
                forward(fx, ingress, from, run, Others::all(vifs, dirty));
            }
        }
        dropped += batch.iter().filter(|f| group(f)).count() as u64;
    });
    fx.ports.list[j].group_dropped += dropped;
    r
}

/// Whether a vif has work left that no notification will announce.
fn v_busy(nb: &mut Netback) -> bool {
    nb.is_connected() && (nb.tx_pending() || nb.rx_pending())
}

/// How often counters go to the store.
const STATS_EVERY: Duration = Duration::from_millis(500);

/// The loop's own counters, published with the domain's (`loop` in
/// `<home>/stats`), so wake-ups and system calls per frame are measured.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LoopCounters {
    /// Returns from the event manager's wait.
    pub wakeups: u64,
    /// System calls the process made through `sys` (at the last publish).
    pub syscalls: u64,
    /// Failed reads of a port.
    pub port_errors: u64,
    /// Store values the driver refused (an uplink's, a vif's bridge or
    /// VLAN): each is logged and its uplink ignored or its vif given up.
    pub config_errors: u64,
}

/// What a registered descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The store watch (the hv connection).
    Watch,
    /// Port `j` of [`Ports`].
    Port(usize),
    /// Either doorbell of vif `i`.
    Vif(usize),
    /// The dedicated queue of vif `i`.
    Queue(usize),
}

impl Source {
    fn token(self) -> u64 {
        match self {
            Source::Watch => 0,
            Source::Port(j) => 2 << 32 | j as u64,
            Source::Vif(i) => 3 << 32 | i as u64,
            Source::Queue(i) => 4 << 32 | i as u64,
        }
    }
    fn of(token: u64) -> Option<Source> {
        let i = (token & 0xffff_ffff) as usize;
        match token >> 32 {
            0 if token == 0 => Some(Source::Watch),
            2 => Some(Source::Port(i)),
            3 => Some(Source::Vif(i)),
            4 => Some(Source::Queue(i)),
            _ => None,
        }
    }
}

/// A set of vif slots, each in it at most once, in insertion order; after
/// warm-up it never allocates.
#[derive(Default)]
struct SlotSet {
    list: Vec<usize>,
    member: Vec<bool>,
}

impl SlotSet {
    fn insert(&mut self, i: usize) {
        if i >= self.member.len() {
            self.member.resize(i + 1, false);
        }
        if !self.member[i] {
            self.member[i] = true;
            self.list.push(i);
        }
    }
    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// Empties the set, handing out its members (give the list back with
    /// [`SlotSet::give_back`] to keep its capacity).
    fn take(&mut self) -> Vec<usize> {
        for &i in &self.list {
            self.member[i] = false;
        }
        std::mem::take(&mut self.list)
    }
    /// Returns a list [`SlotSet::take`] handed out, keeping what was
    /// inserted meanwhile.
    fn give_back(&mut self, mut list: Vec<usize>) {
        list.clear();
        list.append(&mut self.list);
        self.list = list;
    }
}

/// The event manager of the driver loop: every source registered once,
/// and the sets of vifs a turn services.
struct Events {
    epoll: sys::Epoll,
    /// vifs to service: a doorbell rang, or work was carried over.
    ready: SlotSet,
    /// vifs frames were delivered to this turn (responses to publish).
    dirty: SlotSet,
    /// vifs serviced since the counters were last published.
    touched: SlotSet,
    /// vifs waiting for transmit credit (`rate=`).
    credit: SlotSet,
    /// vifs whose dedicated queue is readable.
    queues: SlotSet,
    /// Ports that are ready (bit j % 64).
    port_ready: u64,
}

impl Events {
    fn new() -> std::io::Result<Events> {
        Ok(Events {
            epoll: sys::Epoll::new(EVENTS_PER_WAIT)?,
            ready: SlotSet::default(),
            dirty: SlotSet::default(),
            touched: SlotSet::default(),
            credit: SlotSet::default(),
            queues: SlotSet::default(),
            port_ready: 0,
        })
    }

    /// Registers a newly connected vif's doorbells (through handles of the
    /// loop's own, so they can be removed whenever it goes down) and looks
    /// at it once, in case its frontend rang before.
    fn watch_vif(&mut self, slot: usize, nb: &Netback) -> Vec<OwnedFd> {
        let mut bells = Vec::new();
        for fd in nb.fds() {
            match self.epoll.add_own(fd, Source::Vif(slot).token()) {
                Ok(own) => bells.push(own),
                Err(e) => eprintln!("driver: registering a doorbell: {e}"),
            }
        }
        self.ready.insert(slot);
        bells
    }
}

/// Most ready sources one wait reports (the rest come with the next).
const EVENTS_PER_WAIT: usize = 256;

/// The bridge port a capture target is on now, if any.
fn port_of(t: &Target, vifs: &[Vif], base: &str, ports: &Ports) -> Option<PortId> {
    match t {
        Target::Vif { guest, handle } => {
            let be = format!("{base}/{guest}/{handle}");
            let i = vifs.iter().position(|v| !v.gone && v.nb.be == be)?;
            Some(i + 1)
        }
        Target::Port(name) => {
            let j = ports
                .list
                .iter()
                .position(|e| e.port.is_some() && e.group.is_none() && e.name == *name)?;
            Some(PORT_BASE + j)
        }
        Target::Bridge => None,
    }
}

/// Watch token of the frontends not connected yet.
const PENDING: &str = "pending";
/// Watch token of the driver domain's `backend/vif` directory.
const BACKENDS: &str = "backends";
/// Watch token of the capture channels the toolstack opens.
const CAPTURES: &str = "captures";
/// Watch token of the extra ports the toolstack names.
const PORTS: &str = "ports";

/// What made a port a bridge port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortKind {
    /// An uplink (`<home>/uplinks/<ifname>`).
    Uplink,
    /// An extra port (`<home>/ports/<ifname>`): a hosted guest's emulated NIC.
    Extra,
    /// A VM's vhost-user vif (`<home>/vhost/<name>`), with its MAC.
    Vhost { mac: [u8; 6], guest: bool },
    /// The driver domain's own interface on its bridge (`<home>/endpoint`):
    /// a TAP the toolstack made ([`crate::port::tap`]).
    Endpoint,
}

/// One bridge port that is an interface.
struct PortSlot {
    /// Interface name; empty for a free slot.
    name: String,
    kind: PortKind,
    attach: Attach,
    port: Option<Box<dyn Port>>,
    /// When to try opening it again, while it is closed.
    retry_at: Instant,
    /// A member of a macvlan group: the name of its primary uplink, whose
    /// bridge port it is (see [`read_port`]); it only receives.
    group: Option<String>,
    /// Frames this member read that the group does not take.
    group_dropped: u64,
    /// Dedicated queues an uplink offers (`queues=`).
    queues: u16,
}

/// A port the store asks for.
struct Wanted {
    name: String,
    kind: PortKind,
    attach: Attach,
    group: Option<String>,
    queues: u16,
}

/// The driver domain's interface ports: its uplinks and its extra ports.
/// Slot j is bridge port `PORT_BASE + j` and event source `Port(j)`; a slot
/// stays in place while its port lives, so the others keep their numbers.
struct Ports {
    list: Vec<PortSlot>,
    /// What the interface ports declare they do themselves (Menon 2006 §3.1).
    offload: Offloads,
    uplinks_dir: String,
    extras_dir: String,
    vhost_dir: String,
    /// The node naming the driver domain's own TAP, if it has one.
    endpoint_key: String,
    /// Uplinks' receive slots (`port-buffer`); None: whole GSO frames.
    rx_slot: Option<usize>,
    /// hv lets this driver domain make queues (`queue-admin`).
    queue_admin: bool,
    /// Refused store values already logged (`ifname=value`), so a watch
    /// that fires again does not count them again.
    refused: Vec<String>,
}

impl Ports {
    fn new(home: &str, offload: Offloads, queue_admin: bool) -> Ports {
        Ports {
            list: Vec::new(),
            offload,
            queue_admin,
            uplinks_dir: format!("{home}/uplinks"),
            extras_dir: format!("{home}/ports"),
            vhost_dir: format!("{home}/vhost"),
            endpoint_key: format!("{home}/endpoint"),
            rx_slot: None,
            refused: Vec::new(),
        }
    }

    /// The ports the store asks for: the valid entries of `uplinks/` and
    /// the extra ports, on the default bridge. A bad value is logged and counted once, and its
    /// uplink left out.
    fn wanted(&mut self, hv: &mut HvClient, bridge: &mut Bridge, errors: &mut u64) -> Vec<Wanted> {
        let mut want = Vec::new();
        let names = hv.store_directory(&self.uplinks_dir).unwrap_or_default();
        for n in &names {
            let value = hv
                .store_read_str(&format!("{}/{n}", self.uplinks_dir))
                .unwrap_or_default();
            let spec = vlan::check_ifname(n).and_then(|_| vlan::parse_uplink(&value));
            let attach = spec.and_then(|s| {
                let q = s.queues.unwrap_or(vmq::DEFAULT_QUEUES);
                Ok((uplink_attach(bridge, &s.bridge, s.vlan)?, s.group, q))
            });
            match attach {
                Ok((attach, group, queues)) => want.push(Wanted {
                    name: n.clone(),
                    kind: PortKind::Uplink,
                    attach,
                    group,
                    queues,
                }),
                Err(e) => self.refuse(n, &value, &e, errors),
            }
        }
        let untagged = Attach {
            bridge: DEFAULT_BRIDGE,
            mode: Mode::Access(0),
        };
        for n in hv.store_directory(&self.extras_dir).unwrap_or_default() {
            if !want.iter().any(|w| w.name == n) {
                want.push(Wanted {
                    name: n,
                    kind: PortKind::Extra,
                    attach: untagged,
                    group: None,
                    queues: 0,
                });
            }
        }
        self.wanted_vms(hv, bridge, errors, &mut want);
        if let Ok(n) = hv.store_read_str(&self.endpoint_key) {
            match vlan::check_ifname(&n) {
                Ok(_) if !want.iter().any(|w| w.name == n) => want.push(Wanted {
                    name: n,
                    kind: PortKind::Endpoint,
                    attach: untagged,
                    group: None,
                    queues: 0,
                }),
                Ok(_) => self.refuse(&n, "endpoint", "the name is another port's too", errors),
                Err(e) => self.refuse(&n, "endpoint", &e, errors),
            }
        }
        want
    }

    /// The VM vifs of `vhost/`, each an access port of its bridge; a bad
    /// value is logged and counted once, and its vif left out.
    fn wanted_vms(
        &mut self,
        hv: &mut HvClient,
        bridge: &mut Bridge,
        errors: &mut u64,
        want: &mut Vec<Wanted>,
    ) {
        for n in hv.store_directory(&self.vhost_dir).unwrap_or_default() {
            let value = hv
                .store_read_str(&format!("{}/{n}", self.vhost_dir))
                .unwrap_or_default();
            let spec = vlan::check_ifname(&n).and_then(|_| vhost::parse_spec(&value));
            let port = spec.and_then(|s| {
                let a = uplink_attach(bridge, &s.bridge, s.vlan)?;
                let attach = Attach {
                    mode: Mode::Access(s.vlan.unwrap_or(0)),
                    ..a
                };
                Ok((attach, s.mac, s.guest))
            });
            match port {
                Ok((attach, mac, guest)) if !want.iter().any(|w| w.name == n) => {
                    want.push(Wanted {
                        name: n,
                        kind: PortKind::Vhost { mac, guest },
                        attach,
                        group: None,
                        queues: 0,
                    })
                }
                Ok(_) => self.refuse(&n, &value, "the name is an uplink's too", errors),
                Err(e) => self.refuse(&n, &value, &e, errors),
            }
        }
    }

    /// Logs and counts a refused store value once.
    fn refuse(&mut self, name: &str, value: &str, why: &str, errors: &mut u64) {
        let key = format!("{name}={value}");
        if !self.refused.contains(&key) {
            eprintln!("driver: port {name} = {value:?} refused: {why}");
            *errors += 1;
            self.refused.push(key);
        }
    }

    /// Follows the store: new ports are added (opened at once if their
    /// interface exists), removed or changed ones closed and their MACs
    /// forgotten.
    fn sync(&mut self, hv: &mut HvClient, bridge: &mut Bridge, events: &Events, errors: &mut u64) {
        let want = self.wanted(hv, bridge, errors);
        for (j, e) in self.list.iter_mut().enumerate() {
            let kept = want.iter().any(|w| {
                w.name == e.name
                    && w.kind == e.kind
                    && w.attach == e.attach
                    && w.group == e.group
                    && w.queues == e.queues
            });
            if !kept && !e.name.is_empty() {
                eprintln!("driver: port {} removed", e.name);
                if let Some(p) = e.port.take() {
                    let _ = events.epoll.remove(p.fd());
                }
                bridge.forget_port(PORT_BASE + j);
                e.name.clear();
            }
        }
        for w in want {
            if self.list.iter().any(|e| e.name == w.name) {
                continue;
            }
            let e = PortSlot {
                name: w.name,
                kind: w.kind,
                attach: w.attach,
                port: None,
                retry_at: Instant::now(),
                group: w.group,
                group_dropped: 0,
                queues: w.queues,
            };
            match self.list.iter().position(|e| e.name.is_empty()) {
                Some(i) => self.list[i] = e,
                None => self.list.push(e),
            }
        }
        self.reopen(hv, events);
    }

    /// Opens the ports that are due a try and registers them; whether one
    /// opened.
    fn reopen(&mut self, hv: &mut HvClient, events: &Events) -> bool {
        let now = Instant::now();
        let mut opened = false;
        for (j, e) in self.list.iter_mut().enumerate() {
            if e.port.is_some() || e.name.is_empty() || now < e.retry_at {
                continue;
            }
            let queues = if e.group.is_some() { 0 } else { e.queues };
            let rx = (self.offload, self.rx_slot);
            let opened_one =
                open_port(hv, &e.name, e.kind, rx, queues, self.queue_admin).and_then(|p| {
                    events.epoll.add(p.fd(), Source::Port(j).token())?;
                    Ok(p)
                });
            match opened_one {
                Ok(p) => {
                    eprintln!(
                        "driver: {:?} port {} bridged ({:?}; offloads {:?})",
                        e.kind, e.name, e.attach, self.offload
                    );
                    e.port = Some(p);
                    opened = true;
                }
                Err(x) => {
                    e.retry_at = now + PORT_RETRY;
                    // An interface that is not there yet is waited for in
                    // silence; the endpoint TAP hv made always is, so say
                    // once why it cannot be attached.
                    let key = format!("{}=endpoint", e.name);
                    if e.kind == PortKind::Endpoint && !self.refused.contains(&key) {
                        eprintln!("driver: endpoint {} not attached: {x}", e.name);
                        self.refused.push(key);
                    }
                }
            }
        }
        opened
    }

    /// Whether a named port is closed (it is then tried again soon).
    fn any_closed(&self) -> bool {
        self.list
            .iter()
            .any(|e| e.port.is_none() && !e.name.is_empty())
    }

    /// The open port behind bridge port `id`.
    fn get(&mut self, id: PortId) -> Option<&mut Box<dyn Port>> {
        self.list.get_mut(id.checked_sub(PORT_BASE)?)?.port.as_mut()
    }

    /// The attachment of the open port behind bridge port `id`.
    fn attach_of(&self, id: PortId) -> Option<Attach> {
        let e = self.list.get(id.checked_sub(PORT_BASE)?)?;
        e.port.as_ref().map(|_| e.attach)
    }

    /// Bridge ports of the open ports in segment `seg` (a macvlan group's
    /// members are not: frames leave a group through its primary).
    fn members(&self, seg: Segment) -> impl Iterator<Item = PortId> + '_ {
        self.list
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.port.is_some() && e.group.is_none() && e.attach.member(seg))
            .map(|(j, _)| PORT_BASE + j)
    }

    /// The bridge port and attachment frames read from slot `j` enter as,
    /// and whether it is a group member: its own, or its group's primary
    /// (an uplink, itself no member, open); None for a member whose
    /// primary is not.
    fn ingress_of(&self, j: usize) -> Option<(PortId, Attach, bool)> {
        let e = self.list.get(j)?;
        let Some(g) = &e.group else {
            return Some((PORT_BASE + j, e.attach, false));
        };
        let k = self.list.iter().position(|p| {
            p.name == *g && p.kind == PortKind::Uplink && p.group.is_none() && p.port.is_some()
        })?;
        Some((PORT_BASE + k, self.list[k].attach, true))
    }
}

/// The capabilities hv declared for this driver domain's interface ports
/// (`port-offload`, from the topology's `port_offload`; all when absent).
/// A value hv would not write is refused in favour of none, with a word.
fn port_caps(hv: &mut HvClient, home: &str) -> Offloads {
    let Ok(v) = hv.store_read_str(&format!("{home}/port-offload")) else {
        return Offloads::ALL;
    };
    match abi::offloads::Caps::parse(&v) {
        Ok(c) => Offloads::from(c),
        Err(e) => {
            eprintln!("driver: port-offload: {e}; the software offload driver does it all");
            Offloads::NONE
        }
    }
}

/// The uplinks' receive slot size hv asks for in `<home>/port-buffer`
/// (`driver_domain::port::PacketPort::with_rx_slots`); a bad value is logged,
/// counted and ignored.
fn rx_slot(hv: &mut HvClient, home: &str, errors: &mut u64) -> Option<usize> {
    let v = hv.store_read_str(&format!("{home}/port-buffer")).ok()?;
    match PacketPort::parse_rx_slots(&v) {
        Ok(slot) => {
            eprintln!("driver: ports receive into {slot}-byte slots ({v})");
            Some(slot)
        }
        Err(e) => {
            eprintln!("driver: {e}; ports keep whole-GSO slots");
            *errors += 1;
            None
        }
    }
}

/// Opens the port of slot kind `kind`: an interface's AF_PACKET socket,
/// or a VM vif's backend on the listener hv keeps for it.
fn open_port(
    hv: &mut HvClient,
    name: &str,
    kind: PortKind,
    (offload, rx_slot): (Offloads, Option<usize>),
    queues: u16,
    queue_admin: bool,
) -> std::io::Result<Box<dyn Port>> {
    let uplink = || {
        let p = PacketPort::open(name, offload)?;
        std::io::Result::Ok(match rx_slot {
            Some(slot) => p.with_rx_slots(slot),
            None => p,
        })
    };
    Ok(match kind {
        PortKind::Uplink if queues > 0 && !queue_admin => Box::new(
            uplink()?.without_queues(
                "hv withholds CAP_NET_ADMIN, which queues need, from a driver domain holding a host NIC (a host or macvlan uplink)",
            ),
        ),
        PortKind::Uplink => Box::new(uplink()?.with_queues(queues)),
        PortKind::Extra => Box::new(PacketPort::open(name, offload)?),
        PortKind::Endpoint => Box::new(crate::port::tap::TapPort::open(name, offload)?),
        PortKind::Vhost { mac, guest } => Box::new(VhostPort::open(
            name,
            mac,
            guest,
            vhost_listener(hv, name)?,
        )?),
    })
}

/// The listening socket of VM vif `name`, a duplicate of the one hv keeps
/// for the vif's lifetime (so a restarted driver domain listens on the
/// same socket, and QEMU's `reconnect=1` finds it).
fn vhost_listener(hv: &mut HvClient, name: &str) -> std::io::Result<OwnedFd> {
    hv.vhost_listener(name)
        .map_err(|e| std::io::Error::other(format!("vhost listener {name}: {e}")))
}

/// An uplink's attachment: bridge `name`, and access VLAN `vlan` or a trunk.
fn uplink_attach(bridge: &mut Bridge, name: &str, vlan: Option<u16>) -> Result<Attach, String> {
    let bridge = bridge
        .bridge_id(name)
        .ok_or_else(|| format!("more than {} bridges", crate::switch::bridge::MAX_BRIDGES))?;
    Ok(Attach {
        bridge,
        mode: vlan.map_or(Mode::Trunk, Mode::Access),
    })
}

/// A vif's attachment, from its backend nodes `bridge` (absent: the
/// default bridge) and `splitnet-vlan` (absent: no VLAN).
fn vif_attach(hv: &mut HvClient, be: &str, bridge: &mut Bridge) -> Result<Attach, String> {
    use abi::xenbus::keys;
    let name = hv
        .store_read_str(&format!("{be}/{}", keys::BRIDGE))
        .unwrap_or_else(|_| abi::xenbus::DEFAULT_BRIDGE.to_string());
    let vlan = match hv.store_read_str(&format!("{be}/{}", keys::VLAN)) {
        Ok(v) => Some(vlan::parse_vid(&v)?),
        Err(_) => None,
    };
    let a = uplink_attach(bridge, vlan::check_ifname(&name)?, vlan)?;
    Ok(Attach {
        mode: Mode::Access(vlan.unwrap_or(0)),
        ..a
    })
}

/// Brings the vifs in line with the backend directories the toolstack
/// wrote: a vif whose directory went away or was set offline
/// (`network-detach`) is disconnected and its slot freed; a new directory,
/// complete once the toolstack wrote its `state` (last), is probed.
fn rescan(
    hv: &mut HvClient,
    base: &str,
    pending: &mut Vec<Pending>,
    vifs: &mut [Vif],
) -> Result<(), DriverError> {
    let online = |hv: &mut HvClient, be: &str| {
        hv.store_read_str(&format!("{be}/online"))
            .map_or(true, |v| v != "0")
    };
    let wanted = |hv: &mut HvClient, be: &str| hv.read_state(be).is_ok() && online(hv, be);
    for (i, v) in vifs.iter_mut().enumerate().filter(|(_, v)| !v.gone) {
        if !wanted(hv, &v.nb.be) {
            v.nb.disconnect(hv, "the toolstack removed the vif");
            let _ = hv.unwatch(&format!("{}/state", v.nb.fe), &format!("fe:{i}"));
            let _ = hv.unwatch(&multicast_node(&v.nb.fe), &format!("fe:{i}"));
            v.gone = true;
        }
    }
    let mut i = 0;
    while i < pending.len() {
        if wanted(hv, &pending[i].be) {
            i += 1;
        } else {
            let p = pending.swap_remove(i);
            let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
        }
    }
    for g in hv.store_directory(base).unwrap_or_default() {
        let Ok(guest) = g.parse::<DomId>() else {
            continue;
        };
        for dev in hv
            .store_directory(&format!("{base}/{g}"))
            .unwrap_or_default()
        {
            let be = format!("{base}/{g}/{dev}");
            let known =
                pending.iter().any(|p| p.be == be) || vifs.iter().any(|v| !v.gone && v.nb.be == be);
            if known {
                continue;
            }
            let fresh = matches!(
                hv.read_state(&be),
                Ok(abi::xenbus::XenbusState::Initialising)
            );
            if fresh && online(hv, &be) {
                pend(hv, guest, &be, pending)?;
            }
        }
    }
    Ok(())
}

impl Driver {
    /// Connects every pending vif whose frontend has published its rings;
    /// the others stay pending, watched. A vif whose bridge or VLAN node is
    /// bad is given up (logged, counted, its backend Closed with the reason).
    fn connect_ready(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let mut retry = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let ready = matches!(
                hv.read_state(&self.pending[i].fe),
                Ok(abi::xenbus::XenbusState::Connected)
            );
            if !ready {
                i += 1;
                continue;
            }
            let p = self.pending.swap_remove(i);
            let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
            let name = crate::vif_name(&p.be);
            let (guest, be, index) = (p.guest, p.be.clone(), p.index);
            let attach = match vif_attach(hv, &be, &mut self.bridge) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("driver: {name}: {e}; giving it up");
                    self.stats.config_errors += 1;
                    netback::give_up(hv, &be, &NetbackError::Protocol(e));
                    continue;
                }
            };
            match Netback::connect(hv, p, CONNECT_TIMEOUT) {
                Ok(nb) => self.add_vif(hv, nb, attach, index)?,
                Err(e) if e.is_quota() => {
                    eprintln!("driver: {name}: could not connect: {e}; giving it up");
                    netback::give_up(hv, &be, &e);
                }
                Err(e) => {
                    // A frontend state left over from an earlier backend, or a
                    // frontend that broke the handshake: wait for its next
                    // state change.
                    eprintln!("driver: {name}: could not connect: {e}");
                    retry.push((guest, be));
                }
            }
        }
        for (guest, be) in retry {
            pend(hv, guest, &be, &mut self.pending)?;
        }
        Ok(())
    }

    /// Puts a connected vif in a slot (a freed one, and its bridge port, is
    /// reused) and registers its doorbells.
    fn add_vif(
        &mut self,
        hv: &mut HvClient,
        nb: Netback,
        attach: Attach,
        index: u32,
    ) -> Result<(), DriverError> {
        let pdev = hv
            .store_read_str(&format!("{}/{}", nb.be, PDEV))
            .ok()
            .filter(|p| !p.is_empty());
        let vifs = &mut self.vifs;
        let slot = vifs.iter().position(|v| v.gone).unwrap_or(vifs.len());
        hv.watch(&format!("{}/state", nb.fe), &format!("fe:{slot}"))?;
        hv.watch(&multicast_node(&nb.fe), &format!("fe:{slot}"))?;
        eprintln!(
            "driver: {} connected on {} {:?} (grants {}, rx {}, tx {}, offload {})",
            crate::vif_name(&nb.be),
            self.bridge.name(attach.bridge),
            attach.mode,
            if nb.modes.ngm { "ngm" } else { "hv-copy" },
            if nb.modes.rx_flip { "flip" } else { "copy" },
            nb.modes.tx_name(),
            nb.modes.offload
        );
        let bells = self.events.watch_vif(slot, &nb);
        let v = Vif {
            nb,
            stats_written: String::new(),
            forgotten: false,
            gone: false,
            bells,
            attach,
            index,
            queue: VifQueue {
                pdev,
                ..VifQueue::default()
            },
        };
        if slot == vifs.len() {
            vifs.push(v);
        } else {
            vifs[slot] = v;
        }
        self.attach_queue(slot);
        Ok(())
    }
}

/// Backend node naming the uplink a vif takes a dedicated queue on (the
/// thesis's `pdev=` vif option).
const PDEV: &str = abi::xenbus::keys::PDEV;

/// Gives vif index `index` (MAC `mac`) a queue on uplink `pdev`: its port
/// slot, the queue's id there, and the queue; or why not.
fn take_queue(
    ports: &mut Ports,
    pdev: &str,
    index: u32,
    mac: [u8; 6],
) -> Result<(usize, QueueId, Queue), String> {
    let j = ports
        .list
        .iter()
        .position(|e| e.name == pdev && e.kind == PortKind::Uplink && e.group.is_none())
        .ok_or_else(|| format!("{pdev} is not an uplink of this driver domain"))?;
    let port = ports.list[j]
        .port
        .as_mut()
        .ok_or_else(|| format!("uplink {pdev} is not open"))?;
    let vmq = port
        .vmq()
        .ok_or_else(|| format!("uplink {pdev} has no queues"))?;
    let q = vmq.alloc_queue(index).map_err(|e| e.to_string())?;
    match vmq.set_mac(q, mac).and_then(|_| vmq.enable_queue(q)) {
        Ok(queue) => Ok((j, q, queue)),
        Err(e) => {
            vmq.free_queue(q);
            Err(e.to_string())
        }
    }
}

impl Driver {
    /// Gives vif `i` the dedicated queue it asked for, if its uplink has
    /// one for it; otherwise it shares the default queue, and says why.
    fn attach_queue(&mut self, i: usize) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some(pdev) = v.queue.pdev.clone() else {
            return;
        };
        let name = crate::vif_name(&v.nb.be);
        match take_queue(&mut self.ports, &pdev, v.index, v.nb.mac()) {
            Ok((j, q, queue)) => {
                let added = self
                    .events
                    .epoll
                    .add(queue.as_fd(), Source::Queue(i).token());
                v.nb.start_queue();
                v.queue.at = Some((j, q, queue));
                if let Err(e) = added {
                    // Never served, its MAC would be lost to the default
                    // queue too: give it back at once.
                    self.drop_queue(i, Some(format!("registering its queue: {e}")));
                    return;
                }
                eprintln!("driver: {name}: dedicated queue on {pdev}");
                v.queue.interest = true;
                v.queue.why = None;
                self.events.queues.insert(i);
            }
            Err(why) => {
                eprintln!("driver: {name}: shares the default queue of {pdev}: {why}");
                v.queue.why = Some(why);
            }
        }
    }

    /// Takes vif `i`'s dedicated queue away (it went, or its queue failed
    /// with `lost`): the port frees it, its frames come through the bridge.
    fn drop_queue(&mut self, i: usize, lost: Option<String>) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some((j, q, queue)) = v.queue.at.take() else {
            return;
        };
        let _ = self.events.epoll.remove(queue.as_fd());
        v.queue.kernel_drops = 0;
        v.nb.stop_queue();
        if let Some(why) = lost {
            eprintln!("driver: {}: {why}", crate::vif_name(&v.nb.be));
            v.queue.why = Some(why);
        }
        // Freed first, so the default queue takes the MAC back before the
        // queue's socket closes and no frame falls between the two.
        if let Some(vmq) = self
            .ports
            .list
            .get_mut(j)
            .and_then(|e| e.port.as_mut())
            .and_then(|p| p.vmq())
        {
            vmq.free_queue(q);
        }
        drop(queue);
    }

    /// The readable queues, each up to [`QUEUE_BUDGET`] frames straight
    /// into its vif's posted buffers. A queue whose guest has too few
    /// buffers posted stops waking the loop until the guest posts more.
    fn service_queues(&mut self) {
        let ready = self.events.queues.take();
        for &i in &ready {
            let Some(v) = self.vifs.get_mut(i) else {
                continue;
            };
            let Some((_, _, queue)) = v.queue.at.as_mut() else {
                continue;
            };
            match queue.receive(&mut v.nb, QUEUE_BUDGET) {
                Ok(t) => {
                    if t.frames > 0 {
                        self.events.dirty.insert(i);
                    }
                    if t.starved && !v.nb.queue_can_arm() {
                        let tok = Source::Queue(i).token();
                        let _ = self.events.epoll.set_interest(queue.as_fd(), tok, false);
                        v.queue.interest = false;
                        self.events.dirty.insert(i);
                    }
                }
                Err(e) => self.drop_queue(i, Some(format!("queue lost: {e}"))),
            }
        }
        self.events.queues.give_back(ready);
    }

    /// Listens to vif `i`'s queue again once its guest has posted enough.
    fn queue_interest(&mut self, i: usize) {
        let Some(v) = self.vifs.get_mut(i) else {
            return;
        };
        let Some((_, _, queue)) = v.queue.at.as_ref() else {
            return;
        };
        if !v.queue.interest && v.nb.queue_can_arm() {
            let tok = Source::Queue(i).token();
            if self
                .events
                .epoll
                .set_interest(queue.as_fd(), tok, true)
                .is_ok()
            {
                v.queue.interest = true;
            }
        }
    }
}

/// A vif's `queue` object in its stats, when it asked for a queue.
fn queue_json(v: &mut Vif) -> Option<serde_json::Value> {
    let pdev = v.queue.pdev.as_deref()?;
    let (direct, fallback, spilled) = v.nb.queue_counts();
    let (name, drops, (sent, unsent)) = match v.queue.at.as_mut() {
        Some((_, _, q)) => (Some(q.name().to_string()), q.kernel_drops(), q.tx_counts()),
        None => (None, 0, (0, 0)),
    };
    v.queue.kernel_drops = drops;
    Some(serde_json::json!({
        "port": pdev,
        "name": name,
        "state": if name.is_some() { "dedicated" } else { "shared" },
        "why": v.queue.why,
        "rx_direct_packets": direct,
        "rx_fallback_packets": fallback,
        "rx_spilled_packets": spilled,
        "kernel_drops": drops,
        "tx_packets": sent,
        "tx_dropped": unsent,
    }))
}

/// Probes the vif of backend directory `be` (InitWait) and waits for its
/// frontend, watched; a directory that does not probe is logged and left.
fn pend(
    hv: &mut HvClient,
    guest: DomId,
    be: &str,
    pending: &mut Vec<Pending>,
) -> Result<(), DriverError> {
    match netback::probe(hv, guest, be) {
        Ok(p) => {
            hv.watch(&format!("{}/state", p.fe), PENDING)?;
            pending.push(p);
        }
        Err(e) => {
            eprintln!("driver: {}: {e}", crate::vif_name(be));
            if e.gives_up() {
                netback::give_up(hv, be, &e);
            }
        }
    }
    Ok(())
}

/// The frontend node Xen's dynamic multicast control re-reads.
fn multicast_node(fe: &str) -> String {
    format!("{fe}/{}", abi::xenbus::keys::REQUEST_MULTICAST_CONTROL)
}

/// What the watches that fired call for.
#[derive(Default)]
struct Fired {
    /// A pending frontend's state changed.
    pending: bool,
    /// The toolstack changed the backend directories.
    rescan: bool,
    /// A capture channel was opened or ended.
    captures: bool,
    /// The extra ports changed.
    ports: bool,
    /// A connected vif's frontend went away.
    vifs_changed: bool,
}

/// A frontend whose state went to Closing or Closed loses its backend.
fn handle_watches(hv: &mut HvClient, vifs: &mut [Vif]) -> Result<Fired, DriverError> {
    let mut fired = Fired::default();
    while let Some(ev) = hv.next_watch(Duration::ZERO)? {
        if ev.token == PENDING {
            fired.pending = true;
            continue;
        }
        if ev.token == CAPTURES {
            fired.captures = true;
            continue;
        }
        if ev.token == PORTS {
            fired.ports = true;
            continue;
        }
        if ev.token == BACKENDS {
            // Our own counters are written there twice a second.
            fired.rescan |= !ev.path.ends_with("/stats");
            continue;
        }
        let Some(i) = ev
            .token
            .strip_prefix("fe:")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(v) = vifs.get_mut(i).filter(|v| !v.gone) else {
            continue;
        };
        if ev.path == multicast_node(&v.nb.fe) {
            v.nb.resample_multicast(hv);
            continue;
        }
        let gone = match hv.read_state(&v.nb.fe) {
            Ok(s) => matches!(
                s,
                abi::xenbus::XenbusState::Closing | abi::xenbus::XenbusState::Closed
            ),
            Err(_) => true,
        };
        if gone && v.nb.is_connected() {
            v.nb.disconnect(hv, "the frontend went away");
            fired.vifs_changed = true;
        }
    }
    Ok(fired)
}

/// The vifs other than the one whose frame is being forwarded (bridge port
/// `before.len() + 1` is the ingress, when it is a vif).
struct Others<'a> {
    before: &'a mut [Vif],
    after: &'a mut [Vif],
    /// vifs given frames, whose responses the turn then publishes.
    dirty: &'a mut SlotSet,
}

impl<'a> Others<'a> {
    /// Every vif (the frame came from the physical port).
    fn all(vifs: &'a mut [Vif], dirty: &'a mut SlotSet) -> Others<'a> {
        Others {
            before: vifs,
            after: &mut [],
            dirty,
        }
    }

    fn reborrow(&mut self) -> Others<'_> {
        Others {
            before: self.before,
            after: self.after,
            dirty: self.dirty,
        }
    }

    /// The vif of bridge port `port` (vif i is port i + 1), unless it is the ingress.
    fn get(&mut self, port: PortId) -> Option<&mut Vif> {
        let i = port.checked_sub(1)?;
        let b = self.before.len();
        if i < b {
            self.before.get_mut(i)
        } else {
            self.after.get_mut(i.checked_sub(b + 1)?)
        }
    }

    /// The connected vifs here, with their bridge ports.
    fn connected(&self) -> impl Iterator<Item = (PortId, &Vif)> + '_ {
        let b = self.before.len();
        let before = self.before.iter().enumerate().map(|(i, v)| (i + 1, v));
        let after = self
            .after
            .iter()
            .enumerate()
            .map(move |(i, v)| (b + i + 2, v));
        before.chain(after).filter(|(_, v)| v.nb.is_connected())
    }
}

/// Frames to the ports sent in one batch, at most.
const PORT_BATCH: usize = 64;

/// Fixed scratch for the first bytes of frames whose 802.1Q tag is added
/// or removed on the way ([`vlan::retag`]), one slot per frame of a batch:
/// allocated once, so retagging allocates nothing per frame.
struct Scratch {
    bufs: Box<[[u8; RETAG_HEAD]]>,
    made: [Retagged; PORT_BATCH],
    /// Frames waiting to be sent to ports, in order.
    queued: [Queued; PORT_BATCH],
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            bufs: vec![[0; RETAG_HEAD]; PORT_BATCH].into_boxed_slice(),
            made: [Retagged::default(); PORT_BATCH],
            queued: [Queued::default(); PORT_BATCH],
        }
    }

    /// Frame `f` as scratch slot `alt` rewrote it, or as it is (a tag the
    /// kernel took off stays off: it leaves untagged).
    fn frame<'a>(&'a self, f: &FrameRef<'a>, alt: Option<usize>) -> FrameRef<'a> {
        match alt {
            Some(s) => self.made[s].frame(f, &self.bufs[s]),
            None => FrameRef { vlan: None, ..*f },
        }
    }
}

/// What forwarding a batch of frames touches besides the vifs.
struct Fwd<'a> {
    bridge: &'a mut Bridge,
    ports: &'a mut Ports,
    taps: &'a mut Taps,
    scratch: &'a mut Scratch,
    /// The ingress vif's dedicated queue and the port it is on: its frames
    /// to that port leave through the queue.
    via: Option<(PortId, &'a mut Queue)>,
}

/// A frame waiting to be sent to a port: frame `k` of the batch, as
/// scratch slot `alt` rewrote it.
#[derive(Clone, Copy, Default)]
struct Queued {
    port: PortId,
    k: usize,
    alt: Option<usize>,
}

/// Sends each frame where the bridge says, within its segment and never
/// back out of its ingress port (`from` classifies it): to guests at once,
/// to ports together at the end (one `sendmmsg` per port for a TX batch).
/// A frame that leaves with a tag it came without, or without the one it
/// came with, is rewritten into scratch once, its payload left in place.
/// The bridge decides on each frame's first bytes (netback's header copy).
/// Capture taps see each frame enter and leave; with none, this costs one
/// branch. Returns how many frames a vif sent tagged (dropped).
fn forward(
    fx: &mut Fwd<'_>,
    ingress: PortId,
    from: Attach,
    frames: &[FrameRef<'_>],
    mut vifs: Others<'_>,
) -> u64 {
    let now = Instant::now();
    let (mut n, mut used, mut tagged) = (0, 0, 0);
    let tapping = !fx.taps.is_empty();
    for (k, f) in frames.iter().enumerate() {
        let inr = match from.classify_frame(f) {
            Ok(i) => i,
            Err("runt") => {
                fx.bridge.counters.malformed += 1;
                continue;
            }
            Err(_) if ingress < PORT_BASE => {
                tagged += 1;
                continue;
            }
            Err(_) => {
                fx.bridge.counters.vlan_dropped += 1;
                continue;
            }
        };
        if tapping {
            fx.taps.frame(ingress, false, f);
        }
        let (targets, t) = route(fx.bridge, ingress, inr.seg, f, now, &vifs, fx.ports);
        if n + t > PORT_BATCH || used == PORT_BATCH {
            flush(fx.ports, fx.scratch, &mut fx.via, frames, n);
            (n, used) = (0, 0);
        }
        // Not rewritten yet (None), rewritten into a slot, or refused.
        let mut alt: Option<Option<usize>> = None;
        for &p in &targets[..t] {
            let to = match p >= PORT_BASE {
                true => fx.ports.attach_of(p),
                false => vifs.get(p).map(|v| v.attach),
            };
            let Some(to) = to.filter(|a| a.member(inr.seg)) else {
                continue;
            };
            let slot = match to.rewrite(f, inr) {
                None => None,
                Some(tag) => {
                    let made = *alt.get_or_insert_with(|| {
                        match vlan::retag(f, tag, &mut fx.scratch.bufs[used]) {
                            Ok(r) => {
                                fx.scratch.made[used] = r;
                                used += 1;
                                Some(used - 1)
                            }
                            Err(_) => {
                                fx.bridge.counters.vlan_dropped += 1;
                                None
                            }
                        }
                    });
                    match made {
                        Some(s) => Some(s),
                        None => continue,
                    }
                }
            };
            let g = fx.scratch.frame(f, slot);
            if tapping {
                fx.taps.frame(p, true, &g);
            }
            if p >= PORT_BASE {
                fx.scratch.queued[n] = Queued {
                    port: p,
                    k,
                    alt: slot,
                };
                n += 1;
            } else if let Some(v) = vifs.get(p) {
                v.nb.deliver(&g);
                vifs.dirty.insert(p - 1);
            }
        }
    }
    flush(fx.ports, fx.scratch, &mut fx.via, frames, n);
    tagged
}

/// Sends the first `n` queued frames, one batch per port, each port's in
/// order (through `via`'s queue for its port).
fn flush(
    ports: &mut Ports,
    scratch: &Scratch,
    via: &mut Option<(PortId, &mut Queue)>,
    frames: &[FrameRef<'_>],
    n: usize,
) {
    if n == 0 {
        return;
    }
    let queued = &scratch.queued[..n];
    let mut sent = [false; PORT_BATCH];
    let none = FrameRef::private(&[], frame::packet::Csum::Unknown, None);
    let mut batch = [none; PORT_BATCH];
    for i in 0..queued.len() {
        if sent[i] {
            continue;
        }
        let port = queued[i].port;
        let mut m = 0;
        for (q, s) in queued.iter().zip(sent.iter_mut()).skip(i) {
            if q.port == port {
                batch[m] = scratch.frame(&frames[q.k], q.alt);
                m += 1;
                *s = true;
            }
        }
        let refs: [&FrameRef<'_>; PORT_BATCH] = std::array::from_fn(|x| &batch[x]);
        match via.as_mut().filter(|(p, _)| *p == port) {
            Some((_, q)) => q.send_batch(&refs[..m]),
            None => {
                if let Some(p) = ports.get(port) {
                    p.send_batch(&refs[..m]);
                }
            }
        }
    }
}

/// The bridge ports `f` (of segment `seg`) goes to, never its ingress: a
/// fixed array, nothing allocated. Unknown and broadcast destinations
/// flood the segment only.
fn route(
    bridge: &mut Bridge,
    ingress: PortId,
    seg: Segment,
    f: &FrameRef<'_>,
    now: Instant,
    vifs: &Others<'_>,
    ports: &Ports,
) -> ([PortId; 64], usize) {
    let mut targets = [0 as PortId; 64];
    let mut n = 0;
    match bridge.route(ingress, seg, f.head, now) {
        Route::Drop => {}
        Route::Port(p) if p != ingress => {
            targets[0] = p;
            n = 1;
        }
        Route::Port(_) => {}
        Route::Flood => {
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&f.head[..6]);
            let multicast = dst[0] & 1 != 0;
            let vifs = vifs
                .connected()
                .filter(|(_, v)| v.attach.member(seg))
                // Multicast goes only to the vifs that asked for it.
                .filter(|(_, v)| !multicast || v.nb.wants_multicast(&dst))
                .map(|(p, _)| p);
            for p in ports.members(seg).chain(vifs) {
                if p != ingress && n < targets.len() {
                    targets[n] = p;
                    n += 1;
                }
            }
        }
    }
    (targets, n)
}

/// Writes each vif's counters to `<backend>/stats` when they changed, for `splitnet status`.
/// Only the vifs serviced since the last time (`touched`) can have new
/// counters, so idle ones cost nothing here either.
fn publish_stats(
    hv: &mut HvClient,
    vifs: &mut [Vif],
    touched: &[usize],
    ports: &Ports,
    bridge: &Bridge,
    lc: &LoopCounters,
) {
    // A disconnected vif wrote its final counters as it closed; writing
    // again could recreate a directory the toolstack has since removed.
    for &i in touched {
        let Some(v) = vifs.get_mut(i).filter(|v| v.nb.is_connected()) else {
            continue;
        };
        let queue = queue_json(v);
        let mut doc = serde_json::to_value(v.nb.stats()).unwrap_or_default();
        if let (Some(q), Some(m)) = (queue, doc.as_object_mut()) {
            m.insert("queue".into(), q);
        }
        let json = doc.to_string();
        if json != v.stats_written && hv.store_write(&format!("{}/stats", v.nb.be), &json).is_ok() {
            v.stats_written = json;
        }
    }
    let me = hv.domid();
    let named = || {
        ports
            .list
            .iter()
            .filter(|e| !e.name.is_empty() && e.group.is_none())
    };
    let doc = serde_json::json!({
        "bridge": {"macs": bridge.len(), "counters": &bridge.counters},
        "bridges": bridges_json(vifs, ports, bridge),
        "loop": lc,
        "uplinks": named().filter(|e| e.kind == PortKind::Uplink).map(|e| port_json(e, ports, bridge)).collect::<Vec<_>>(),
        "extra_ports": named().filter(|e| e.kind == PortKind::Extra).map(|e| port_json(e, ports, bridge)).collect::<Vec<_>>(),
        "vhost": named().filter_map(|e| vhost_json(e, bridge)).collect::<Vec<_>>(),
    });
    let _ = hv.store_write(
        &format!("/local/domain/{me}/splitnet/stats"),
        &doc.to_string(),
    );
}

/// An interface port's entry in the stats: where it is, whether it is
/// open, its counters, and a macvlan group's members.
fn port_json(e: &PortSlot, ports: &Ports, bridge: &Bridge) -> serde_json::Value {
    let vlan = match e.attach.mode {
        Mode::Access(0) => serde_json::Value::Null,
        Mode::Access(v) => v.into(),
        Mode::Trunk => "trunk".into(),
    };
    let members: Vec<serde_json::Value> = ports
        .list
        .iter()
        .filter(|m| m.group.as_deref() == Some(e.name.as_str()))
        .map(|m| {
            serde_json::json!({
                "name": m.name,
                "open": m.port.is_some(),
                "counters": m.port.as_ref().map(|p| p.counters()),
                "group_dropped": m.group_dropped,
            })
        })
        .collect();
    serde_json::json!({
        "name": e.name,
        "bridge": bridge.name(e.attach.bridge),
        "vlan": vlan,
        "open": e.port.is_some(),
        "offloads": e.port.as_ref().map(|p| p.offloads()),
        "counters": e.port.as_ref().map(|p| p.counters()),
        "members": members,
    })
}

/// A VM vif's entry in the stats (`"vhost"`): its device's status, where
/// it is bridged, and whether it listens (hv gave it its socket).
fn vhost_json(e: &PortSlot, bridge: &Bridge) -> Option<serde_json::Value> {
    let PortKind::Vhost { mac, .. } = e.kind else {
        return None;
    };
    let mut v = match e.port.as_ref().and_then(|p| p.status()) {
        Some(v) => v,
        None => serde_json::json!({
            "name": e.name,
            "mac": mac.map(|b| format!("{b:02x}")).join(":"),
            "connected": false,
        }),
    };
    v["bridge"] = bridge.name(e.attach.bridge).into();
    v["vlan"] = match e.attach.mode {
        Mode::Access(0) | Mode::Trunk => serde_json::Value::Null,
        Mode::Access(n) => n.into(),
    };
    v["listening"] = e.port.is_some().into();
    Some(v)
}

/// Each bridge in use: its name, its ports (interfaces and vifs) and the
/// MACs it learned.
fn bridges_json(vifs: &[Vif], ports: &Ports, bridge: &Bridge) -> Vec<serde_json::Value> {
    bridge
        .bridges()
        .filter_map(|(id, name, macs)| {
            let mut members: Vec<String> = ports
                .list
                .iter()
                .filter(|e| !e.name.is_empty() && e.group.is_none() && e.attach.bridge == id)
                .map(|e| e.name.clone())
                .collect();
            members.extend(
                vifs.iter()
                    .filter(|v| v.nb.is_connected() && v.attach.bridge == id)
                    .map(|v| crate::vif_name(&v.nb.be)),
            );
            (!members.is_empty() || macs > 0)
                .then(|| serde_json::json!({"name": name, "ports": members, "macs": macs}))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::PortCounters;
    use frame::offload::{checksum_setup, Offloads};
    use frame::packet::{Csum, Packet};
    use frame::testing::tcp4;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Sent = Rc<RefCell<Vec<(Vec<u8>, Csum)>>>;

    /// A port that keeps what it is sent.
    struct Fake {
        name: String,
        fd: std::fs::File,
        sent: Sent,
        counters: PortCounters,
        /// Frames the next `recv_batch` hands out.
        rx: Vec<Vec<u8>>,
    }

    impl Port for Fake {
        fn name(&self) -> &str {
            &self.name
        }
        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.fd.as_fd()
        }
        fn offloads(&self) -> Offloads {
            Offloads::ALL
        }
        fn recv_batch(&mut self, f: &mut dyn FnMut(&[FrameRef<'_>])) -> std::io::Result<()> {
            let bufs: Vec<Vec<u8>> = self.rx.drain(..).collect();
            let frames: Vec<FrameRef<'_>> = bufs
                .iter()
                .map(|b| FrameRef::private(b, Csum::Unknown, None))
                .collect();
            if !frames.is_empty() {
                f(&frames);
            }
            Ok(())
        }
        fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
            for f in frames {
                let mut v = vec![0; f.len];
                f.copy_out(0, &mut v);
                self.sent.borrow_mut().push((v, f.csum));
            }
        }
        fn counters(&self) -> &PortCounters {
            &self.counters
        }
    }

    struct Rig {
        bridge: Bridge,
        ports: Ports,
        taps: Taps,
        scratch: Scratch,
        sent: Vec<Sent>,
    }

    const T0: usize = 0;
    const A10: usize = 1;
    const A20: usize = 2;
    const X0: usize = 3;
    const T1: usize = 4;

    /// Ports: a trunk, access VLAN 10, access VLAN 20 and an untagged port
    /// on xenbr0, and a trunk on xenbr1.
    fn rig() -> Rig {
        let mut bridge = Bridge::default();
        let b1 = bridge.bridge_id("xenbr1").unwrap();
        let modes = [
            (DEFAULT_BRIDGE, Mode::Trunk),
            (DEFAULT_BRIDGE, Mode::Access(10)),
            (DEFAULT_BRIDGE, Mode::Access(20)),
            (DEFAULT_BRIDGE, Mode::Access(0)),
            (b1, Mode::Trunk),
        ];
        let mut r = Rig {
            bridge,
            ports: Ports::new("/t", Offloads::ALL, false),
            taps: Taps::default(),
            scratch: Scratch::new(),
            sent: Vec::new(),
        };
        for (bridge, mode) in modes {
            r.add(Attach { bridge, mode });
        }
        r
    }

    impl Rig {
        /// Adds a port that keeps what it is sent.
        fn add(&mut self, attach: Attach) {
            let j = self.sent.len();
            let s = Sent::default();
            self.sent.push(s.clone());
            self.ports.list.push(PortSlot {
                name: format!("p{j}"),
                kind: PortKind::Uplink,
                attach,
                port: Some(Box::new(Fake {
                    name: format!("p{j}"),
                    fd: std::fs::File::open("/dev/null").unwrap(),
                    sent: s,
                    counters: PortCounters::default(),
                    rx: Vec::new(),
                })),
                retry_at: Instant::now(),
                group: None,
                group_dropped: 0,
                queues: 0,
            });
        }

        /// Forwards `frames` arriving on port `j`; what each port was sent.
        fn send(&mut self, j: usize, frames: &[FrameRef<'_>]) -> Vec<Vec<(Vec<u8>, Csum)>> {
            let from = self.ports.list[j].attach;
            let mut fx = Fwd {
                bridge: &mut self.bridge,
                ports: &mut self.ports,
                taps: &mut self.taps,
                scratch: &mut self.scratch,
                via: None,
            };
            let mut dirty = SlotSet::default();
            let vifs = Others::all(&mut [], &mut dirty);
            assert_eq!(forward(&mut fx, PORT_BASE + j, from, frames, vifs), 0);
            self.sent.iter().map(|s| s.take()).collect()
        }
    }

    impl Rig {
        /// Adds slot 5, a member of the macvlan group of trunk `T1`
        /// (xenbr1), and slot 6, an untagged port on xenbr1.
        fn with_group(mut self) -> Rig {
            assert_eq!(self.ports.list.len(), 5, "the group takes slots 5 and 6");
            let bridge = self.ports.list[T1].attach.bridge;
            self.add(Attach {
                bridge,
                mode: Mode::Trunk,
            });
            self.ports.list[5].group = Some("p4".into());
            self.add(Attach {
                bridge,
                mode: Mode::Access(0),
            });
            self
        }

        /// Port slot `j` reads `frames` (as the loop does); what each port
        /// was sent.
        fn read(&mut self, j: usize, frames: &[&[u8]]) -> Vec<Vec<(Vec<u8>, Csum)>> {
            // Out of its slot while it is read, as in the loop.
            let p = self.ports.list[j].port.take().unwrap();
            let mut fx = Fwd {
                bridge: &mut self.bridge,
                ports: &mut self.ports,
                taps: &mut self.taps,
                scratch: &mut self.scratch,
                via: None,
            };
            let mut dirty = SlotSet::default();
            let mut fake = Fake {
                name: String::new(),
                fd: std::fs::File::open("/dev/null").unwrap(),
                sent: Sent::default(),
                counters: PortCounters::default(),
                rx: frames.iter().map(|f| f.to_vec()).collect(),
            };
            read_port(&mut fx, &mut fake, j, &mut [], &mut dirty).unwrap();
            self.ports.list[j].port = Some(p);
            self.sent.iter().map(|s| s.take()).collect()
        }
    }

    const G: usize = 5;
    const U1: usize = 6;

    #[test]
    fn a_macvlan_group_is_one_bridge_port_that_takes_broadcast_from_its_primary_only() {
        let mut r = rig().with_group();
        let lan: [u8; 6] = [0, 0x16, 0x3e, 9, 9, 9];
        // Wire broadcast reaches the primary and every member: the
        // primary's copy is bridged, the member's dropped and counted.
        let arp = tcp(BCAST, lan).data;
        assert_eq!(only(&r.read(T1, &[&arp]), U1).len(), 1);
        assert!(r.read(G, &[&arp]).iter().all(Vec::is_empty));
        let mcast = tcp([0x33, 0x33, 0, 0, 0, 1], lan).data;
        assert!(r.read(G, &[&mcast]).iter().all(Vec::is_empty));
        assert_eq!(r.ports.list[G].group_dropped, 2);
        // Unicast the kernel gave the member (a guest's MAC) is bridged as
        // the primary's: the LAN's MAC is learned there, so what goes back
        // to it leaves through the primary, never through the member.
        let reply = tcp(M, lan).data;
        assert_eq!(only(&r.read(G, &[&reply]), U1)[0].0, reply);
        let to_lan = tcp(lan, M).data;
        let out = r.send(U1, &[FrameRef::private(&to_lan, Csum::Unknown, None)]);
        assert_eq!(only(&out, T1)[0].0, to_lan);
        // Flooding never sends through a member either.
        let out = r.send(
            U1,
            &[FrameRef::private(&tcp(BCAST, N).data, Csum::Unknown, None)],
        );
        assert_eq!(only(&out, T1).len(), 1);
        // Without its primary open, a member's frames go nowhere.
        let primary = r.ports.list[T1].port.take();
        assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty));
        assert_eq!(r.ports.list[G].group_dropped, 3);
        r.ports.list[T1].port = primary;
        // A group naming itself, another member, or no uplink has no
        // primary: its frames go nowhere either.
        for g in ["p5", "p9", ""] {
            r.ports.list[G].group = Some(g.into());
            assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty), "{g:?}");
        }
        r.ports.list[U1].group = Some("p4".into());
        r.ports.list[G].group = Some("p6".into());
        assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty));
        assert_eq!(r.ports.list[G].group_dropped, 7);
        assert_eq!(r.bridge.counters.vlan_dropped, 0);
    }

    fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&vlan::TPID.to_be_bytes());
        t.extend_from_slice(&tci.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }

    /// A TCP frame from `src` to `dst` with a partial checksum.
    fn tcp(dst: [u8; 6], src: [u8; 6]) -> Packet {
        let mut p = Packet::new(tcp4(&[5; 300]));
        p.data[..6].copy_from_slice(&dst);
        p.data[6..12].copy_from_slice(&src);
        checksum_setup(&mut p, true).unwrap();
        p
    }

    const M: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];
    const N: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 2];
    const BCAST: [u8; 6] = [0xff; 6];

    fn only(out: &[Vec<(Vec<u8>, Csum)>], j: usize) -> &[(Vec<u8>, Csum)] {
        for (i, o) in out.iter().enumerate() {
            assert!(i == j || o.is_empty(), "port {i} got {} frames", o.len());
        }
        &out[j]
    }

    #[test]
    fn access_frames_leave_trunks_tagged_and_trunk_frames_reach_their_vlan_untagged() {
        let mut r = rig();
        let p = tcp(BCAST, M);
        let Csum::Partial { start, offset } = p.csum else {
            panic!("partial")
        };
        // VLAN 10's broadcast: tagged on xenbr0's trunk, nowhere else.
        let out = r.send(A10, &[FrameRef::private(&p.data, p.csum, None)]);
        let got = only(&out, T0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, tagged(&p.data, 10));
        let moved = Csum::Partial {
            start: start + 4,
            offset,
        };
        assert_eq!(got[0].1, moved);
        // VLAN 20 from the trunk: untagged, to the VLAN 20 port only.
        let t = tagged(&tcp(BCAST, N).data, 20);
        let out = r.send(T0, &[FrameRef::private(&t, moved, None)]);
        let got = only(&out, A20);
        assert_eq!(got[0].0, tcp(BCAST, N).data);
        assert_eq!(got[0].1, p.csum);
        // Untagged on the trunk: "no VLAN", the untagged port only; so is a
        // priority-tagged frame (VID 0), whose tag comes off.
        let out = r.send(T0, &[FrameRef::private(&p.data, p.csum, None)]);
        assert_eq!(only(&out, X0)[0].0, p.data);
        let prio = tagged(&p.data, 0x6000);
        let out = r.send(T0, &[FrameRef::private(&prio, moved, None)]);
        assert_eq!(only(&out, X0)[0], (p.data.clone(), p.csum));
        // Known unicast: M was learned on A10 in VLAN 10, so the trunk's
        // VLAN 10 frame to M goes there, untagged; the same MAC is unknown
        // in VLAN 20 (flooded to A20 only).
        let to_m = tagged(&tcp(M, N).data, 10);
        let out = r.send(T0, &[FrameRef::private(&to_m, Csum::Unknown, None)]);
        assert_eq!(only(&out, A10)[0].0, tcp(M, N).data);
        let to_m = tagged(&tcp(M, N).data, 20);
        let out = r.send(T0, &[FrameRef::private(&to_m, Csum::Unknown, None)]);
        assert_eq!(only(&out, A20).len(), 1);
        assert_eq!(r.bridge.counters.vlan_dropped, 0);
    }

    #[test]
    fn full_size_frames_whose_tag_the_kernel_took_off_reach_their_vlan() {
        let mut r = rig();
        let mut p = Packet::new(tcp4(&[5; 1500]));
        p.data[..6].copy_from_slice(&BCAST);
        p.data[6..12].copy_from_slice(&N);
        checksum_setup(&mut p, true).unwrap();
        let mut gso = Packet::new(tcp4(&[6; 30000]));
        gso.data[..6].copy_from_slice(&BCAST);
        gso.data[6..12].copy_from_slice(&N);
        checksum_setup(&mut gso, true).unwrap();
        let tso = Some(frame::packet::Gso {
            kind: frame::packet::GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        });
        fn kernel(f: &Packet, gso: Option<frame::packet::Gso>, tci: u16) -> FrameRef<'_> {
            FrameRef {
                vlan: Some(vlan::VlanTag {
                    tpid: vlan::TPID,
                    tci,
                }),
                ..FrameRef::private(&f.data, f.csum, gso)
            }
        }
        // To an access port: as the kernel gave it, nothing rewritten; a
        // priority-tagged frame (VID 0) to the untagged port likewise.
        for (f, g, tci, to) in [
            (&p, None, 20, A20),
            (&p, None, 0xa000 | 20, A20),
            (&gso, tso, 20, A20),
            (&p, None, 0x6000, X0),
        ] {
            let out = r.send(T0, &[kernel(f, g, tci)]);
            assert_eq!(only(&out, to), [(f.data.clone(), f.csum)], "tci {tci:#x}");
        }
        // Trunk to trunk: the tag goes back in once, priority and all.
        r.add(Attach {
            bridge: DEFAULT_BRIDGE,
            mode: Mode::Trunk,
        });
        let Csum::Partial { start, offset } = p.csum else {
            panic!("partial")
        };
        let moved = Csum::Partial {
            start: start + 4,
            offset,
        };
        let out = r.send(T0, &[kernel(&p, None, 0xa000 | 10)]);
        assert_eq!(out[A10], [(p.data.clone(), p.csum)]);
        assert_eq!(out[5], [(tagged(&p.data, 0xa000 | 10), moved)]);
        assert_eq!(r.bridge.counters.vlan_dropped, 0);
    }

    #[test]
    fn bad_tags_are_dropped_and_counted_and_nothing_crosses_bridges() {
        let mut r = rig();
        let p = tcp(BCAST, M);
        for (j, tci) in [(A10, 10), (X0, 5), (T0, 0x0fff)] {
            let t = tagged(&p.data, tci);
            let out = r.send(j, &[FrameRef::private(&t, Csum::Unknown, None)]);
            assert!(out.iter().all(Vec::is_empty), "from port {j}");
        }
        assert_eq!(r.bridge.counters.vlan_dropped, 3);
        // A partial checksum that would start inside the link header once
        // the tag is gone: refused, counted.
        let bad = Csum::Partial {
            start: 15,
            offset: 0,
        };
        let t = tagged(&p.data, 20);
        let out = r.send(T0, &[FrameRef::private(&t, bad, None)]);
        assert!(out.iter().all(Vec::is_empty));
        assert_eq!(r.bridge.counters.vlan_dropped, 4);
        // xenbr1's trunk reaches nothing on xenbr0, tagged or not.
        for f in [p.data.clone(), tagged(&p.data, 10)] {
            let out = r.send(T1, &[FrameRef::private(&f, Csum::Unknown, None)]);
            assert!(out.iter().all(Vec::is_empty));
        }
        let out = r.send(T1, &[FrameRef::private(&[0; 13], Csum::Unknown, None)]);
        assert!(out.iter().all(Vec::is_empty));
        assert_eq!(r.bridge.counters.malformed, 1);
    }

    #[test]
    fn a_batch_larger_than_the_scratch_arrives_whole_and_in_order() {
        let mut r = rig();
        let frames: Vec<Packet> = (0..150u8)
            .map(|i| {
                let mut p = tcp(BCAST, M);
                p.data[60] = i;
                p
            })
            .collect();
        let refs: Vec<FrameRef<'_>> = frames
            .iter()
            .map(|p| FrameRef::private(&p.data, p.csum, None))
            .collect();
        let out = r.send(A10, &refs);
        let got = only(&out, T0);
        assert_eq!(got.len(), 150);
        for (g, p) in got.iter().zip(&frames) {
            assert_eq!(g.0, tagged(&p.data, 10));
        }
    }
}
