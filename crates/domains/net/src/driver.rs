//! The driver domain: a physical port, a bridge, and one netback per guest
//! vif, driven by one poll loop (Menon 2006 Fig. 1; Ram thesis Fig. 2.1).

use crate::bridge::{Bridge, PortId, Route};
use crate::capture::{Taps, Target};
use crate::idle::Idle;
use crate::netback::{self, Netback, Pending};
use crate::packet::{Csum, FrameRef};
use crate::port::{PacketPort, Port};
use hypercall::{DomId, HvClient};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Bridge port of the physical NIC.
const PHYS: PortId = 0;
/// Bridge port of the first extra port (`<home>/ports`); vif i is port i + 1.
const EXTRA_BASE: PortId = 1 << 20;
/// How often an extra port that is missing or failed is opened again.
const EXTRA_RETRY: Duration = Duration::from_millis(250);
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
}

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
    ports_dir: String,
    captures: String,
    ports: Ports,
    pending: Vec<Pending>,
    vifs: Vec<Vif>,
    taps: Taps,
    idle: Idle,
    bridge: Bridge,
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
        let port_offload = hv
            .store_read_str(&format!("{home}/port-offload"))
            .map(|v| v == "1")
            .unwrap_or(true);
        let phys: Option<Box<dyn Port>> = match hv.store_read_str(&format!("{home}/port")) {
            Ok(ifname) => {
                let p = PacketPort::open(&ifname, port_offload)?;
                eprintln!(
                    "driver: physical port {ifname} (offloads {})",
                    if port_offload { "on" } else { "off" }
                );
                Some(Box::new(p))
            }
            Err(_) => None,
        };
        let events = Events::new()?;
        events.epoll.add(hv.watch_fd(), Source::Watch.token())?;
        if let Some(p) = &phys {
            events.epoll.add(p.fd(), Source::Phys.token())?;
        }
        let mut d = Driver {
            ports_dir: format!("{home}/ports"),
            captures: format!("{home}/capture"),
            base: format!("/local/domain/{me}/backend/vif"),
            home,
            ports: Ports {
                phys,
                extra: Vec::new(),
                offload: port_offload,
            },
            pending: Vec::new(),
            vifs: Vec::new(),
            taps: Taps::default(),
            idle: Idle::for_domain(hv, "driver", Duration::from_millis(200)),
            bridge: Bridge::default(),
            events,
            last_stats: Instant::now(),
            stats: LoopCounters::default(),
        };
        // Extra ports the toolstack names (a hosted guest's VMNet interface):
        // bridged like the physical port, opened again whenever they vanish.
        hv.watch(&d.ports_dir, PORTS)?;
        d.ports.sync(hv, &d.ports_dir, &d.events);
        // Probe every vif (InitWait), then connect each as its frontend
        // comes, in any order: one guest that never comes delays no other.
        // vifs the toolstack adds or removes later (hotplug, a guest's
        // restart) show up under the same directory.
        hv.watch(&d.base, BACKENDS)?;
        rescan(hv, &d.base, &mut d.pending, &mut d.vifs)?;
        connect_ready(hv, &mut d.pending, &mut d.vifs, &mut d.events)?;
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
        if self
            .ports
            .extra
            .iter()
            .any(|e| e.port.is_none() && !e.name.is_empty())
        {
            timeout = timeout.min(EXTRA_RETRY);
        }
        if let Some(at) = self.events.phys_paused {
            timeout = timeout.min(at.saturating_duration_since(Instant::now()));
        }
        self.idle.pause();
        let n = self.events.epoll.wait(Some(timeout))?;
        self.stats.wakeups += 1;
        let mut turn = Turn {
            ready: n,
            housekeeping: false,
        };
        let (mut watch, mut phys) = (hv.watch_backlog(), false);
        self.events.extra_ready = 0;
        for i in 0..n {
            let Some(ev) = self.events.epoll.event(i) else {
                break;
            };
            match Source::of(ev.token) {
                Some(Source::Watch) => watch = true,
                Some(Source::Phys) => phys = true,
                Some(Source::Extra(j)) => self.events.extra_ready |= 1u64 << (j % 64),
                Some(Source::Vif(v)) => self.events.ready.insert(v),
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
        if self.resume_phys() {
            phys = true;
        }
        if phys {
            self.phys_to_bridge();
        }
        if self.events.extra_ready != 0 {
            self.extras_to_bridge();
        }
        self.service_vifs(hv);
        if self.ports.reopen(&self.events) {
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
            connect_ready(hv, &mut self.pending, &mut self.vifs, &mut self.events)?;
        }
        if w.captures {
            self.taps.sync(hv, &self.captures);
        }
        if w.ports {
            self.ports.sync(hv, &self.ports_dir, &self.events);
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

    /// Physical port → bridge (it said it has frames).
    fn phys_to_bridge(&mut self) {
        let Some(mut p) = self.ports.phys.take() else {
            return;
        };
        let r = p.recv_batch(&mut |f| {
            forward(
                &mut self.bridge,
                PHYS,
                std::slice::from_ref(f),
                &mut self.ports,
                Others::all(&mut self.vifs, &mut self.events.dirty),
                &mut self.taps,
            );
        });
        if let Err(e) = r {
            // Count it and carry on: one bad read must not stop every guest.
            // The port leaves the event manager for a while, so a port that
            // keeps failing (its interface went down) cannot keep the loop
            // spinning; it is looked at again after EXTRA_RETRY.
            self.stats.port_errors += 1;
            eprintln!(
                "driver: port {}: {e}; reading it again in {EXTRA_RETRY:?}",
                p.name()
            );
            if self.events.epoll.remove(p.fd()).is_ok() {
                self.events.phys_paused = Some(Instant::now() + EXTRA_RETRY);
            }
        }
        self.ports.phys = Some(p);
    }

    /// Puts a failed physical port back in the event manager once its pause
    /// is over; true when it did (the port is then read at once).
    fn resume_phys(&mut self) -> bool {
        let Some(at) = self.events.phys_paused else {
            return false;
        };
        let Some(p) = self.ports.phys.as_ref().filter(|_| Instant::now() >= at) else {
            return false;
        };
        self.events.phys_paused = None;
        self.events.epoll.add(p.fd(), Source::Phys.token()).is_ok()
    }

    /// Extra ports that said they have frames → bridge. One that fails
    /// (its interface went away with its VMApp) is closed and opened again
    /// later.
    fn extras_to_bridge(&mut self) {
        for j in 0..self.ports.extra.len() {
            if self.events.extra_ready & (1u64 << (j % 64)) == 0 {
                continue;
            }
            let Some(mut p) = self.ports.extra[j].port.take() else {
                continue;
            };
            let r = p.recv_batch(&mut |f| {
                forward(
                    &mut self.bridge,
                    EXTRA_BASE + j,
                    std::slice::from_ref(f),
                    &mut self.ports,
                    Others::all(&mut self.vifs, &mut self.events.dirty),
                    &mut self.taps,
                );
            });
            match r {
                Ok(()) => self.ports.extra[j].port = Some(p),
                Err(e) => {
                    self.stats.port_errors += 1;
                    eprintln!("driver: port {}: {e}; closing it", p.name());
                    let _ = self.events.epoll.remove(p.fd());
                    self.bridge.forget_port(EXTRA_BASE + j);
                    self.ports.extra[j].retry_at = Instant::now() + EXTRA_RETRY;
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
        let (bridge, ports, taps) = (&mut self.bridge, &mut self.ports, &mut self.taps);
        let mut others = Others {
            before,
            after,
            dirty: &mut self.events.dirty,
        };
        let r = me.nb.process_tx(hv, &mut |frames| {
            forward(bridge, i + 1, frames, ports, others.reborrow(), taps);
        });
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
}

/// What a registered descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The store watch (the hv connection).
    Watch,
    /// The physical port.
    Phys,
    /// Extra port `j`.
    Extra(usize),
    /// Either doorbell of vif `i`.
    Vif(usize),
}

impl Source {
    fn token(self) -> u64 {
        match self {
            Source::Watch => 0,
            Source::Phys => 1,
            Source::Extra(j) => 2 << 32 | j as u64,
            Source::Vif(i) => 3 << 32 | i as u64,
        }
    }
    fn of(token: u64) -> Option<Source> {
        let i = (token & 0xffff_ffff) as usize;
        match token >> 32 {
            0 if token == 0 => Some(Source::Watch),
            0 if token == 1 => Some(Source::Phys),
            2 => Some(Source::Extra(i)),
            3 => Some(Source::Vif(i)),
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
    /// Extra ports that are ready (bit j % 64).
    extra_ready: u64,
    /// The physical port failed and is out of the set until then.
    phys_paused: Option<Instant>,
}

impl Events {
    fn new() -> std::io::Result<Events> {
        Ok(Events {
            epoll: sys::Epoll::new(EVENTS_PER_WAIT)?,
            ready: SlotSet::default(),
            dirty: SlotSet::default(),
            touched: SlotSet::default(),
            credit: SlotSet::default(),
            extra_ready: 0,
            phys_paused: None,
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
            if ports.phys.as_ref().is_some_and(|p| p.name() == name) {
                return Some(PHYS);
            }
            let j = ports
                .extra
                .iter()
                .position(|e| e.port.is_some() && e.name == *name)?;
            Some(EXTRA_BASE + j)
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

/// One extra bridge port: an interface named under `<home>/ports`.
struct Extra {
    name: String,
    port: Option<Box<dyn Port>>,
    /// When to try opening it again, while it is closed.
    retry_at: Instant,
}

/// The driver domain's ports: the physical one and the extras.
struct Ports {
    phys: Option<Box<dyn Port>>,
    extra: Vec<Extra>,
    offload: bool,
}

impl Ports {
    /// Follows `<home>/ports`: new names are added (opened at once if
    /// their interface exists), removed ones closed. A slot (and its bridge
    /// port) stays in place so the others keep their numbers.
    fn sync(&mut self, hv: &mut HvClient, dir: &str, events: &Events) {
        let names = hv.store_directory(dir).unwrap_or_default();
        for e in self.extra.iter_mut() {
            if !names.contains(&e.name) && !e.name.is_empty() {
                eprintln!("driver: port {} removed", e.name);
                if let Some(p) = e.port.take() {
                    let _ = events.epoll.remove(p.fd());
                }
                e.name.clear();
            }
        }
        for n in names {
            if self.extra.iter().any(|e| e.name == n) {
                continue;
            }
            let e = Extra {
                name: n,
                port: None,
                retry_at: Instant::now(),
            };
            match self.extra.iter().position(|e| e.name.is_empty()) {
                Some(i) => self.extra[i] = e,
                None => self.extra.push(e),
            }
        }
        self.reopen(events);
    }

    /// Opens the extra ports that are due a try and registers them; whether
    /// one opened.
    fn reopen(&mut self, events: &Events) -> bool {
        let now = Instant::now();
        let mut opened = false;
        for (j, e) in self.extra.iter_mut().enumerate() {
            if e.port.is_some() || e.name.is_empty() || now < e.retry_at {
                continue;
            }
            let opened_one = PacketPort::open(&e.name, self.offload).and_then(|p| {
                events.epoll.add(p.fd(), Source::Extra(j).token())?;
                Ok(p)
            });
            match opened_one {
                Ok(p) => {
                    eprintln!("driver: extra port {} bridged", e.name);
                    e.port = Some(Box::new(p));
                    opened = true;
                }
                Err(_) => e.retry_at = now + EXTRA_RETRY,
            }
        }
        opened
    }

    /// The port behind bridge port `id` (not a vif), if open.
    fn get(&mut self, id: PortId) -> Option<&mut Box<dyn Port>> {
        if id == PHYS {
            return self.phys.as_mut();
        }
        self.extra
            .get_mut(id.checked_sub(EXTRA_BASE)?)?
            .port
            .as_mut()
    }

    /// Bridge ports of the open extras.
    fn extra_ids(&self) -> impl Iterator<Item = PortId> + '_ {
        self.extra
            .iter()
            .enumerate()
            .filter(|(_, e)| e.port.is_some())
            .map(|(j, _)| EXTRA_BASE + j)
    }
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

/// Connects every pending vif whose frontend has published its rings; the
/// others stay pending, watched.
fn connect_ready(
    hv: &mut HvClient,
    pending: &mut Vec<Pending>,
    vifs: &mut Vec<Vif>,
    events: &mut Events,
) -> Result<(), DriverError> {
    let mut retry = Vec::new();
    let mut i = 0;
    while i < pending.len() {
        let ready = matches!(
            hv.read_state(&pending[i].fe),
            Ok(abi::xenbus::XenbusState::Connected)
        );
        if !ready {
            i += 1;
            continue;
        }
        let p = pending.swap_remove(i);
        let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
        let name = crate::vif_name(&p.be);
        let (guest, be) = (p.guest, p.be.clone());
        match Netback::connect(hv, p, CONNECT_TIMEOUT) {
            Ok(nb) => {
                // A freed slot (and its bridge port) is reused.
                let slot = vifs.iter().position(|v| v.gone).unwrap_or(vifs.len());
                hv.watch(&format!("{}/state", nb.fe), &format!("fe:{slot}"))?;
                hv.watch(&multicast_node(&nb.fe), &format!("fe:{slot}"))?;
                eprintln!(
                    "driver: {name} connected (grants {}, rx {}, tx {}, offload {})",
                    if nb.modes.ngm { "ngm" } else { "hv-copy" },
                    if nb.modes.rx_flip { "flip" } else { "copy" },
                    nb.modes.tx_name(),
                    nb.modes.offload
                );
                let bells = events.watch_vif(slot, &nb);
                let v = Vif {
                    nb,
                    stats_written: String::new(),
                    forgotten: false,
                    gone: false,
                    bells,
                };
                if slot == vifs.len() {
                    vifs.push(v);
                } else {
                    vifs[slot] = v;
                }
            }
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
        pend(hv, guest, &be, pending)?;
    }
    Ok(())
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

    /// Whether the vif of bridge port `port` takes a frame flooded to
    /// `dst` (its multicast filter; broadcast and unicast always).
    fn wants(&self, port: PortId, dst: &[u8; 6]) -> bool {
        let Some(i) = port.checked_sub(1) else {
            return true;
        };
        let b = self.before.len();
        let v = if i < b {
            self.before.get(i)
        } else {
            i.checked_sub(b + 1).and_then(|j| self.after.get(j))
        };
        v.is_none_or(|v| v.nb.wants_multicast(dst))
    }

    /// Bridge ports of the connected vifs here.
    fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        let b = self.before.len();
        let before = self.before.iter().enumerate().map(|(i, v)| (i + 1, v));
        let after = self
            .after
            .iter()
            .enumerate()
            .map(move |(i, v)| (b + i + 2, v));
        before
            .chain(after)
            .filter(|(_, v)| v.nb.is_connected())
            .map(|(p, _)| p)
    }
}

/// Frames to the physical port sent in one batch, at most.
const PORT_BATCH: usize = 64;

/// Sends each frame where the bridge says, never back out of its ingress
/// port: to other guests at once, to the physical port together at the end
/// (one `sendmmsg` for a TX batch). The bridge decides on each frame's first
/// bytes (netback's header copy). Capture taps see each frame enter and
/// leave; with none, this costs one branch.
fn forward(
    bridge: &mut Bridge,
    ingress: PortId,
    frames: &[FrameRef<'_>],
    ports: &mut Ports,
    mut vifs: Others<'_>,
    taps: &mut Taps,
) {
    let now = Instant::now();
    let none = FrameRef::private(&[], Csum::Unknown, None);
    let mut to_phys: [&FrameRef<'_>; PORT_BATCH] = [&none; PORT_BATCH];
    let mut n = 0;
    let tapping = !taps.is_empty();
    for f in frames {
        let (targets, t) = route(bridge, ingress, f, now, &vifs, ports);
        if tapping {
            taps.frame(ingress, false, f);
            for &p in &targets[..t] {
                taps.frame(p, true, f);
            }
        }
        for &p in &targets[..t] {
            if p >= EXTRA_BASE {
                if let Some(x) = ports.get(p) {
                    x.send_batch(std::slice::from_ref(&f));
                }
                continue;
            }
            if p != PHYS {
                if let Some(v) = vifs.get(p) {
                    v.nb.deliver(f);
                    vifs.dirty.insert(p - 1);
                }
                continue;
            }
            if n == PORT_BATCH {
                if let Some(ph) = ports.phys.as_mut() {
                    ph.send_batch(&to_phys);
                }
                n = 0;
            }
            to_phys[n] = f;
            n += 1;
        }
    }
    if n > 0 {
        if let Some(ph) = ports.phys.as_mut() {
            ph.send_batch(&to_phys[..n]);
        }
    }
}

/// The bridge ports `f` goes to (never its ingress): a fixed array,
/// nothing allocated.
fn route(
    bridge: &mut Bridge,
    ingress: PortId,
    f: &FrameRef<'_>,
    now: Instant,
    vifs: &Others<'_>,
    ports: &Ports,
) -> ([PortId; 64], usize) {
    let mut targets = [0 as PortId; 64];
    let mut n = 0;
    match bridge.route(ingress, f.head, now) {
        Route::Drop => {}
        Route::Port(p) if p != ingress => {
            targets[0] = p;
            n = 1;
        }
        Route::Port(_) => {}
        Route::Flood => {
            let dst = f.head.first_chunk::<6>().copied().unwrap_or([0; 6]);
            for p in std::iter::once(PHYS)
                .chain(ports.extra_ids())
                .chain(vifs.ports().filter(|&p| vifs.wants(p, &dst)))
            {
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
    let phys = ports.phys.as_deref();
    // A disconnected vif wrote its final counters as it closed; writing
    // again could recreate a directory the toolstack has since removed.
    for &i in touched {
        let Some(v) = vifs.get_mut(i).filter(|v| v.nb.is_connected()) else {
            continue;
        };
        let json = serde_json::to_string(&v.nb.stats()).unwrap_or_default();
        if json != v.stats_written && hv.store_write(&format!("{}/stats", v.nb.be), &json).is_ok() {
            v.stats_written = json;
        }
    }
    let me = hv.domid();
    let doc = serde_json::json!({
        "port": phys.map(|p| serde_json::json!({"name": p.name(), "counters": p.counters()})),
        "bridge": {"macs": bridge.len(), "counters": &bridge.counters},
        "loop": lc,
        "extra_ports": ports.extra.iter().filter(|e| !e.name.is_empty()).map(|e| serde_json::json!({
            "name": e.name,
            "open": e.port.is_some(),
            "counters": e.port.as_ref().map(|p| p.counters()),
        })).collect::<Vec<_>>(),
    });
    let _ = hv.store_write(
        &format!("/local/domain/{me}/splitnet/stats"),
        &doc.to_string(),
    );
}
