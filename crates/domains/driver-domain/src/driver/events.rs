//! The driver loop's event manager: every source (hv's socket, each vif's
//! event channels, each port) registered once with epoll, and the sets of
//! vifs a turn services (Firecracker's event manager).

use crate::netback::Netback;
use std::os::fd::OwnedFd;

/// What a registered descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
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
    pub(super) fn token(self) -> u64 {
        match self {
            Source::Watch => 0,
            Source::Port(j) => 2 << 32 | j as u64,
            Source::Vif(i) => 3 << 32 | i as u64,
            Source::Queue(i) => 4 << 32 | i as u64,
        }
    }
    pub(super) fn of(token: u64) -> Option<Source> {
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
pub(super) struct SlotSet {
    pub(super) list: Vec<usize>,
    pub(super) member: Vec<bool>,
}

impl SlotSet {
    pub(super) fn insert(&mut self, i: usize) {
        if i >= self.member.len() {
            self.member.resize(i + 1, false);
        }
        if !self.member[i] {
            self.member[i] = true;
            self.list.push(i);
        }
    }
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// Empties the set, handing out its members (give the list back with
    /// [`SlotSet::give_back`] to keep its capacity).
    pub(super) fn take(&mut self) -> Vec<usize> {
        for &i in &self.list {
            self.member[i] = false;
        }
        std::mem::take(&mut self.list)
    }
    /// Looks at each member once: `wait` says how long until it is due
    /// (it stays) or None (it leaves, `wait` having done what leaving
    /// asks); returns the soonest wait of those that stay.
    pub(super) fn keep_waiting(
        &mut self,
        mut wait: impl FnMut(usize) -> Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        let mut soonest: Option<std::time::Duration> = None;
        let members = self.take();
        for &i in &members {
            if let Some(d) = wait(i) {
                soonest = Some(soonest.map_or(d, |s| s.min(d)));
                self.insert(i);
            }
        }
        self.give_back(members);
        soonest
    }

    /// Returns a list [`SlotSet::take`] handed out, keeping what was
    /// inserted meanwhile.
    pub(super) fn give_back(&mut self, mut list: Vec<usize>) {
        list.clear();
        list.append(&mut self.list);
        self.list = list;
    }
}

/// The event manager of the driver loop: every source registered once,
/// and the sets of vifs a turn services.
pub(super) struct Events {
    pub(super) epoll: sys::Epoll,
    /// vifs to service: a doorbell rang, or work was carried over.
    pub(super) ready: SlotSet,
    /// vifs whose doorbell rang this turn (each notification is judged:
    /// [`super::storm`]).
    pub(super) rang: SlotSet,
    /// vifs whose doorbells are out of the event manager for a storm.
    pub(super) throttled: SlotSet,
    /// vifs frames were delivered to this turn (responses to publish).
    pub(super) dirty: SlotSet,
    /// vifs serviced since the counters were last published.
    pub(super) touched: SlotSet,
    /// vifs waiting for transmit credit (`rate=`).
    pub(super) credit: SlotSet,
    /// vifs whose dedicated queue is readable.
    pub(super) queues: SlotSet,
    /// Ports that are ready (bit j % 64).
    pub(super) port_ready: u64,
}

impl Events {
    pub(super) fn new() -> std::io::Result<Events> {
        Ok(Events {
            epoll: sys::Epoll::new(EVENTS_PER_WAIT)?,
            ready: SlotSet::default(),
            rang: SlotSet::default(),
            throttled: SlotSet::default(),
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
    pub(super) fn watch_vif(&mut self, slot: usize, nb: &Netback) -> Vec<OwnedFd> {
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
pub(super) const EVENTS_PER_WAIT: usize = 256;

/// Watch token of the frontends not connected yet.
pub(super) const PENDING: &str = "pending";
/// Watch token of the driver domain's `backend/vif` directory.
pub(super) const BACKENDS: &str = "backends";
/// Watch token of the capture channels the toolstack opens.
pub(super) const CAPTURES: &str = "captures";
/// Watch token of the extra ports the toolstack names.
pub(super) const PORTS: &str = "ports";
/// Watch token of `control/upgrade`.
pub(super) const UPGRADE: &str = "upgrade";
