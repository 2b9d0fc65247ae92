//! The driver domain: its uplinks, its bridges, and one netback per guest
//! vif, driven by one poll loop (Menon 2006 Fig. 1; Ram thesis Fig. 2.1).

use crate::capture::Taps;
use crate::netback::Netback;
use crate::switch::bridge::Bridge;
use domain_common::idle::Idle;
use hypercall::HvClient;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

mod egress;
mod events;
mod forward;
mod options;
mod ports;
mod queues;
mod state;
mod stats;
mod storm;
#[cfg(test)]
mod tests;
mod upgrade;
mod vif;
mod vifs;

use crate::switch::egress::Scratch;
use egress::Others;
use events::{Events, Source, BACKENDS, CAPTURES, PORTS, UPGRADE};
use forward::{forward, read_port, Fwd};
use ports::{grant_maps, local_mac, port_caps, port_of, rx_slot, Ports, PORT_BASE, PORT_RETRY};
use state::STATS_EVERY;
pub use state::{Driver, DriverError, LoopCounters, Turn};
use stats::publish_stats;
pub use upgrade::{result_node, upgrade_node, Since, ENV_RESUME};
use vifs::{handle_watches, rescan, Touched};

/// How long at most a starting driver domain leaves its uplinks unread
/// while the vifs it finds set up, and the VMs that connect, come back (a
/// restart's reconnect takes tens of milliseconds): frames from outside
/// wait in the sockets hv kept, rather than reach a bridge whose vifs are
/// not back yet and be dropped. A straggler (a guest that answers late)
/// costs the others no more than this.
const UPLINK_HOLD: Duration = Duration::from_millis(150);

/// Runs the driver domain until hv goes away; `resumed` when this process
/// took the domain over from another ([`upgrade`], or one that died).
pub fn run(hv: &mut HvClient, resumed: Option<Since>) -> Result<(), DriverError> {
    let mut d = Driver::start(hv, resumed)?;
    loop {
        d.turn(hv)?;
    }
}

impl Driver {
    /// Opens the ports, probes the vifs the toolstack set up, and registers
    /// every source with the event manager.
    pub fn new(hv: &mut HvClient) -> Result<Driver, DriverError> {
        Self::start(hv, None)
    }

    /// [`Driver::new`], or, `resumed`, taking over the vifs the previous
    /// program of this domain left Connected before probing the others.
    pub fn start(hv: &mut HvClient, resumed: Option<Since>) -> Result<Driver, DriverError> {
        let me = hv.domid();
        let home = format!("/local/domain/{me}/splitnet");
        // Its settings in two round trips, not one each.
        let mut d = hv.with_read_ahead(&home, |hv| Self::configured(hv, &home))?;
        d.ports.hold = Some(Instant::now() + UPLINK_HOLD);
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
        // A process that took the domain over from another takes the vifs
        // it left Connected first (`upgrade`).
        if let Some(since) = resumed {
            d.resume(hv, since)?;
        }
        // Probe every vif (InitWait), then connect each as its frontend
        // comes, in any order: one guest that never comes delays no other.
        // vifs the toolstack adds or removes later (hotplug, a guest's
        // restart) show up under the same directory.
        hv.watch(&d.base, BACKENDS)?;
        hv.watch(&upgrade_node(me), UPGRADE)?;
        rescan(hv, &d.base, &Touched::All, &mut d.pending, &mut d.vifs)?;
        d.connect_ready(hv)?;
        d.release_uplinks(hv);
        hv.watch(&d.captures, CAPTURES)?;
        d.taps.sync(hv, &d.captures);
        Ok(d)
    }

    /// A driver domain with the settings in its home `home` read, its
    /// ports and vifs not yet taken.
    fn configured(hv: &mut HvClient, home: &str) -> Result<Driver, DriverError> {
        let me = hv.domid();
        if hv
            .store_read_str(&format!("{home}/{}", crate::hugepages::KEY))
            .is_ok_and(|v| v == "1")
        {
            crate::hugepages::enable();
        }
        let port_offload = port_caps(hv, home);
        let grant_maps_bad = !grant_maps(hv, home);
        let events = Events::new()?;
        events.epoll.add(hv.watch_fd(), Source::Watch.token())?;
        // Queues an earlier run left are gone: hv deletes a dead driver
        // domain's before it starts another (`toolstack::queues::drop_all`).
        let mut d = Driver {
            captures: format!("{home}/capture"),
            base: format!("/local/domain/{me}/backend/vif"),
            ports: Ports::new(home, port_offload),
            home: home.to_string(),
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
        d.stats.config_errors += u64::from(grant_maps_bad);
        d.ports.rx_slot = rx_slot(hv, &d.home, &mut d.stats.config_errors);
        d.ports.local_mac = local_mac(hv, &d.home, &mut d.stats.config_errors);
        Ok(d)
    }

    /// One wake-up: waits for a ready source (or carried-over work) and
    /// services only what is ready. An idle vif costs nothing here: no
    /// system call, no look at its rings.
    pub fn turn(&mut self, hv: &mut HvClient) -> Result<Turn, DriverError> {
        let credit_due = self.credit_due();
        let storm_due = self
            .storms_due()
            .into_iter()
            .chain(self.ports.storms_due())
            .min();
        let carried = !self.events.ready.is_empty();
        let mut timeout = self.idle.timeout(carried || hv.watch_backlog());
        for d in credit_due.into_iter().chain(storm_due) {
            timeout = timeout.min(d);
        }
        if self.ports.any_closed() {
            timeout = timeout.min(PORT_RETRY);
        }
        if let Some(left) = self.ports.hold_left() {
            timeout = timeout.min(left);
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
                Some(Source::Vif(v)) => {
                    self.events.ready.insert(v);
                    self.events.rang.insert(v);
                }
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
        self.judge_events();
        if self.ports.hold.is_some() {
            // A VM's port connects on its own descriptor, not a watch.
            self.release_uplinks(hv);
        }
        if !self.ports.closing.is_empty() {
            self.close_queues(hv);
        }
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
        let (vifs, ready) = (&self.vifs, &mut self.events.ready);
        self.events
            .credit
            .keep_waiting(|i| match vifs.get(i).and_then(|v| v.nb.credit_wait()) {
                Some(at) if at > now => Some(at - now),
                Some(_) => {
                    ready.insert(i);
                    None
                }
                None => None,
            })
    }

    /// Store watches: vifs come and go, captures open, ports change.
    fn on_watches(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let w = handle_watches(hv, &self.base, &mut self.vifs)?;
        for be in &w.options {
            self.take_options(hv, be);
        }
        let rescanned = w.rescan.any();
        if rescanned {
            rescan(hv, &self.base, &w.rescan, &mut self.pending, &mut self.vifs)?;
        }
        if w.pending || rescanned {
            self.connect_ready(hv)?;
            self.release_uplinks(hv);
        }
        if w.captures {
            self.taps.sync(hv, &self.captures);
        }
        if w.upgrade {
            self.on_upgrade(hv)?;
        }
        if w.ports {
            let errors = &mut self.stats.config_errors;
            self.ports.sync(hv, &mut self.bridge, &self.events, errors);
        }
        if w.captures || w.pending || rescanned || w.ports {
            let (vifs, base, ports) = (&self.vifs, &self.base, &self.ports);
            self.taps.resolve(|t| port_of(t, vifs, base, ports));
        }
        if w.vifs_changed || rescanned {
            // A vif may have gone down without a word on its doorbell.
            for i in 0..self.vifs.len() {
                self.retire_if_down(i);
            }
        }
        Ok(())
    }

    /// Once every vif the toolstack set up has connected, and every VM
    /// behind a vhost-user port too, or at the end of [`UPLINK_HOLD`] (the
    /// log then names who is late), the uplinks are read: what the kept
    /// sockets queued meanwhile finds its vifs back.
    fn release_uplinks(&mut self, hv: &mut HvClient) {
        let Some(until) = self.ports.hold else {
            return;
        };
        let settling: Vec<String> = self
            .ports
            .settling()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let back = self.pending.is_empty() && settling.is_empty();
        if !back && Instant::now() < until {
            return;
        }
        if back {
            let held = self.ports.held_for().unwrap_or_default();
            eprintln!(
                "driver: uplinks held {} ms, until every vif and VM was back",
                held.as_millis()
            );
        } else {
            let late: Vec<&str> = self.pending.iter().map(|p| p.be.as_str()).collect();
            eprintln!(
                "driver: uplinks read after their hold ran out; still connecting: vifs {late:?}, VM ports {settling:?}"
            );
        }
        self.ports.release();
        self.ports.reopen(hv, &self.events);
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
        for (i, v) in self.vifs.iter_mut().enumerate() {
            if v.nb.drain_stalled_rx(self.last_stats) > 0 {
                self.events.touched.insert(i);
            }
        }
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
