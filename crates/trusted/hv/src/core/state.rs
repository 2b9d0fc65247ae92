//! hv's state under its one lock: the domain table, grant pins, the store,
//! event channels, NGM tables and capture channels; and the lookups and
//! watch delivery every hypercall uses on it.

use super::domain::{Domain, Doms, MapRecord};
use super::store_journal::StoreJournal;
use crate::error::{ErrorKind, HvError, HvResult};
use crate::evtchn::Channel;
use crate::grant::{self, Memories, Pins};
use crate::ngm::NgmTable;
use crate::proto::{self, DomId, WatchFired};
use crate::status::Counters;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::OwnedFd;
use store::Store;
use sys::SeqPacket;

/// Everything hv's lock guards.
pub(super) struct State {
    pub(super) doms: Doms,
    pub(super) pins: Pins,
    pub(super) store: Store,
    pub(super) channels: HashMap<u64, Channel>,
    pub(super) next_chan: u64,
    pub(super) next_domid: DomId,
    /// New-grant-mechanism tables by (guest, driver domain).
    pub(super) ngm: BTreeMap<(DomId, DomId), NgmTable>,
    pub(super) next_ngm: u32,
    /// Capture channels opened by the toolstack whose domain has not
    /// collected its end yet: id → (domain, its end).
    pub(super) captures: BTreeMap<u32, (DomId, OwnedFd)>,
    pub(super) next_capture: u32,
    pub(super) counters: Counters,
    pub(super) info: BTreeMap<String, String>,
    /// Shutdown was requested: no new domains.
    pub(super) shutting_down: bool,
    /// Every domain is gone.
    pub(super) stopped: bool,
    /// Domains whose teardown is running (outside the lock).
    pub(super) tearing_down: HashSet<DomId>,
    /// The store changes answered, for a crash between two records.
    pub(super) journal: Option<StoreJournal>,
}

impl State {
    /// No domains, an empty store.
    pub(super) fn new() -> State {
        State {
            doms: Doms(BTreeMap::new()),
            pins: Pins::default(),
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
            journal: StoreJournal::new(0).ok(),
            tearing_down: HashSet::new(),
        }
    }

    /// Drops the pin a grant mapping held.
    pub(super) fn unpin(&mut self, m: &MapRecord) {
        grant::release(
            &mut self.pins,
            self.doms.memory(m.granter),
            m.granter,
            m.gref,
            m.writable,
        );
    }
}

/// Sends watch events to the domains that registered them. A domain that does
/// not drain its watch socket loses events, never blocks hv; the next event
/// that finds room is preceded by one that says events were lost
/// ([`proto::WATCHES_LOST`]), so the domain looks at everything again.
pub(super) fn deliver(st: &State, events: Vec<store::WatchEvent>) {
    use std::sync::atomic::Ordering::Relaxed;
    // Whether `msg` was queued (or the domain is gone, so no one waits).
    let queued = |tx: &SeqPacket, msg: &WatchFired| {
        proto::encode(msg).is_ok_and(|b| !matches!(tx.try_send(&b, &[]), Ok(false)))
    };
    for ev in events {
        let Some(d) = st.doms.0.get(&ev.domid) else {
            continue;
        };
        let Some(tx) = &d.watch_tx else { continue };
        if d.watches_lost.load(Relaxed) {
            let lost = WatchFired {
                path: String::new(),
                token: proto::WATCHES_LOST.into(),
            };
            if !queued(tx, &lost) {
                continue;
            }
            d.watches_lost.store(false, Relaxed);
        }
        let msg = WatchFired {
            path: ev.path,
            token: ev.token,
        };
        if !queued(tx, &msg) {
            d.watches_lost.store(true, Relaxed);
        }
    }
}

/// Domain `id`, or `BadDomain`.
pub(super) fn domain(st: &mut State, id: DomId) -> HvResult<&mut Domain> {
    st.doms
        .0
        .get_mut(&id)
        .ok_or_else(|| HvError::new(ErrorKind::BadDomain, format!("domain {id} does not exist")))
}
