//! Event tracing in the spirit of xentrace (Zhang & Dong §2.3.1, §4.1): a
//! probe at the start and end of each event, and per event type a count, the
//! TSC cycles spent, the largest cost, a log2 histogram of costs, and the
//! number of items handled (ops per grant batch, packets per ring batch).
//!
//! Two recorders, as xentrace has trace buffers shared with dom0:
//! - hv counts its own work per calling domain ([`HvTrace`], in-process):
//!   each hypercall kind, batch-page batches and grant operations;
//! - each domain counts its own events ([`Tracer`]) in a trace area hv
//!   allocated and shares with it: notifications, hypercall round trips and
//!   ring batches. hv reads the area on demand ([`read_area`]); its contents
//!   are whatever the domain wrote, so they are only ever loaded as
//!   fixed-offset u64 words, never used as sizes or offsets, and everything
//!   computed from them saturates.
//!
//! Recording costs two `rdtsc` and a few relaxed atomic adds, once per
//! hypercall, notification or batch, never per byte.

use crate::ids::{DomId, REQUEST_NAMES};
use abi::SharedMemory;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use sys::{Mapping, PAGE_SIZE};

/// Histogram buckets: bucket `i` holds costs in [2^i, 2^(i+1)) cycles (bucket
/// 0 also holds 0; the last one everything from 2^31 up).
pub const BUCKETS: usize = 32;
/// Words per event slot: count, cycles, max, items, then the histogram.
const SLOT_WORDS: usize = 4 + BUCKETS;
const COUNT: usize = 0;
const CYCLES: usize = 1;
const MAX: usize = 2;
const ITEMS: usize = 3;
const HIST: usize = 4;

/// Pages in a domain's trace area.
pub const TRACE_PAGES: u32 = 1;
const _: () = assert!(DomainEvent::ALL.len() * SLOT_WORDS * 8 <= TRACE_PAGES as usize * PAGE_SIZE);

/// The current TSC, to start timing an event.
#[inline]
pub fn now() -> u64 {
    sys::rdtsc()
}

/// The histogram bucket of a cost: floor(log2(cycles)), capped.
pub fn bucket_of(cycles: u64) -> usize {
    let log2 = 63 - (cycles | 1).leading_zeros() as usize;
    log2.min(BUCKETS - 1)
}

/// The cost range of bucket `i`, in cycles: `[from, to)` (`to` is None for the last).
pub fn bucket_range(i: usize) -> (u64, Option<u64>) {
    let i = i.min(BUCKETS - 1);
    let from = if i == 0 { 0 } else { 1u64 << i };
    (from, (i + 1 < BUCKETS).then(|| 1u64 << (i + 1)))
}

/// Events a domain records in its own trace area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainEvent {
    /// An event-channel notification sent directly to the peer; items = 1
    /// when the peer's doorbell was rung (0 when it had masked the channel).
    Notify,
    /// A hypercall on the control socket, round trip as the domain sees it.
    Call,
    /// A grant-copy batch through the batch page, round trip; items = ops.
    GrantBatch,
    /// netback: one TX pass over the ring; items = packets consumed.
    NetbackTx,
    /// netback: one RX flush into the guest's buffers; items = packets.
    NetbackRx,
    /// netfront: one TX batch, first queued packet to flush; items = packets.
    NetfrontTx,
    /// netfront: one RX pass over responses and reposting; items = packets.
    NetfrontRx,
    /// A hosted guest's world switch to its VMApp and back (Sugerman §3.2);
    /// items = frames it carried out.
    WorldSwitch,
    /// A hosted guest's halt: the VM idles until the VMApp has something
    /// for it (Sugerman Table 3's idle time).
    Halt,
}

impl DomainEvent {
    /// Every domain event, in trace-area slot order.
    pub const ALL: [DomainEvent; 9] = [
        DomainEvent::Notify,
        DomainEvent::Call,
        DomainEvent::GrantBatch,
        DomainEvent::NetbackTx,
        DomainEvent::NetbackRx,
        DomainEvent::NetfrontTx,
        DomainEvent::NetfrontRx,
        DomainEvent::WorldSwitch,
        DomainEvent::Halt,
    ];

    /// The name in snapshots and reports.
    pub fn name(self) -> &'static str {
        match self {
            DomainEvent::Notify => "notify",
            DomainEvent::Call => "hypercall_round_trip",
            DomainEvent::GrantBatch => "grant_batch_round_trip",
            DomainEvent::NetbackTx => "ring_batch_tx:netback",
            DomainEvent::NetbackRx => "ring_batch_rx:netback",
            DomainEvent::NetfrontTx => "ring_batch_tx:netfront",
            DomainEvent::NetfrontRx => "ring_batch_rx:netfront",
            DomainEvent::WorldSwitch => "world_switch:hosted",
            DomainEvent::Halt => "halt:hosted",
        }
    }
}

/// Events hv records besides one per hypercall kind (`hypercall:<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HvEvent {
    /// A grant-copy batch served from the batch page, wake-up to completion; items = ops.
    Batch,
    /// GNTTABOP_copy work (either path), validation and copying; items = ops.
    GrantCopy,
    /// GNTTABOP_map_grant_ref: validation and pinning.
    GrantMap,
    /// GNTTABOP_unmap_grant_ref: unpinning.
    GrantUnmap,
    /// GNTTABOP_transfer: validation, copy and zeroing.
    GrantTransfer,
}

impl HvEvent {
    pub const ALL: [HvEvent; 5] = [
        HvEvent::Batch,
        HvEvent::GrantCopy,
        HvEvent::GrantMap,
        HvEvent::GrantUnmap,
        HvEvent::GrantTransfer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HvEvent::Batch => "batch",
            HvEvent::GrantCopy => "grant_copy",
            HvEvent::GrantMap => "grant_map",
            HvEvent::GrantUnmap => "grant_unmap",
            HvEvent::GrantTransfer => "grant_transfer",
        }
    }

    /// Slots below `REQUEST_NAMES.len()` are hypercalls; these follow.
    fn slot(self) -> usize {
        REQUEST_NAMES.len() + self as usize
    }
}

/// Word storage for event slots.
trait Cells {
    fn load(&self, word: usize) -> u64;
    fn add(&self, word: usize, v: u64);
    fn max(&self, word: usize, v: u64);
}

impl Cells for [AtomicU64] {
    fn load(&self, word: usize) -> u64 {
        self[word].load(Ordering::Relaxed)
    }
    fn add(&self, word: usize, v: u64) {
        self[word].fetch_add(v, Ordering::Relaxed);
    }
    fn max(&self, word: usize, v: u64) {
        self[word].fetch_max(v, Ordering::Relaxed);
    }
}

impl Cells for Mapping {
    fn load(&self, word: usize) -> u64 {
        self.load_u64(word * 8)
    }
    fn add(&self, word: usize, v: u64) {
        self.fetch_add_u64(word * 8, v);
    }
    fn max(&self, word: usize, v: u64) {
        self.fetch_max_u64(word * 8, v);
    }
}

fn record_in<C: Cells + ?Sized>(c: &C, slot: usize, t0: u64, items: u64) {
    // A TSC that went backwards (another CPU) costs 0, not 2^64.
    let cycles = now().saturating_sub(t0);
    let base = slot * SLOT_WORDS;
    c.add(base + COUNT, 1);
    c.add(base + CYCLES, cycles);
    c.max(base + MAX, cycles);
    c.add(base + ITEMS, items);
    c.add(base + HIST + bucket_of(cycles), 1);
}

fn read_slot<C: Cells + ?Sized>(c: &C, slot: usize) -> EventStats {
    let base = slot * SLOT_WORDS;
    let buckets = (0..BUCKETS)
        .map(|i| (i as u8, c.load(base + HIST + i)))
        .filter(|&(_, n)| n > 0)
        .collect();
    EventStats {
        count: c.load(base + COUNT),
        cycles: c.load(base + CYCLES),
        max_cycles: c.load(base + MAX),
        items: c.load(base + ITEMS),
        buckets,
    }
}

/// What hv records about one domain's requests (or the toolstack's).
pub struct HvTrace {
    cells: Box<[AtomicU64]>,
}

impl Default for HvTrace {
    fn default() -> Self {
        let n = (REQUEST_NAMES.len() + HvEvent::ALL.len()) * SLOT_WORDS;
        HvTrace {
            cells: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl HvTrace {
    /// A hypercall that started at `t0`.
    pub fn hypercall(&self, req_index: usize, t0: u64) {
        if req_index < REQUEST_NAMES.len() {
            record_in(&*self.cells, req_index, t0, 1);
        }
    }
    /// An event that started at `t0` and handled `items` items.
    pub fn record(&self, ev: HvEvent, t0: u64, items: u64) {
        record_in(&*self.cells, ev.slot(), t0, items);
    }
    /// Every event that happened at least once.
    pub fn snapshot(&self) -> BTreeMap<String, EventStats> {
        let hypercalls = REQUEST_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("hypercall:{n}"), read_slot(&*self.cells, i)));
        let others = HvEvent::ALL
            .iter()
            .map(|e| (e.name().to_string(), read_slot(&*self.cells, e.slot())));
        hypercalls
            .chain(others)
            .filter(|(_, s)| s.count > 0)
            .collect()
    }
}

/// A domain's recorder: relaxed atomic adds into its trace area. Cloned into
/// everything that records (event channels, netback, netfront); a disabled
/// one records nothing.
#[derive(Clone, Default)]
pub struct Tracer {
    area: Option<Arc<Mapping>>,
}

impl Tracer {
    /// Records into `area`; disabled if the area is too small or read-only.
    pub fn new(area: Mapping) -> Tracer {
        let fits = area.len() >= DomainEvent::ALL.len() * SLOT_WORDS * 8 && area.is_writable();
        Tracer {
            area: fits.then(|| Arc::new(area)),
        }
    }
    /// A tracer that records nothing.
    pub fn disabled() -> Tracer {
        Tracer { area: None }
    }
    /// Records an event that started at `t0` (from [`now`]).
    #[inline]
    pub fn record(&self, ev: DomainEvent, t0: u64, items: u64) {
        if let Some(a) = &self.area {
            record_in(&**a, ev as usize, t0, items);
        }
    }
    /// The raw area, for tests that play a hostile domain.
    pub fn raw(&self) -> Option<&Mapping> {
        self.area.as_deref()
    }
}

/// hv's reading of a domain's trace area: fixed-size u64 loads at fixed
/// offsets within the area, whatever it holds. Events with a zero count are
/// left out.
pub fn read_area(area: &Mapping) -> BTreeMap<String, EventStats> {
    if area.len() < DomainEvent::ALL.len() * SLOT_WORDS * 8 {
        return BTreeMap::new();
    }
    DomainEvent::ALL
        .iter()
        .map(|e| (e.name().to_string(), read_slot(area, *e as usize)))
        .filter(|(_, s)| s.count > 0)
        .collect()
}

/// Cumulative counters of one event type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStats {
    pub count: u64,
    /// Sum of every event's cost, in TSC cycles (wraps, like any counter).
    pub cycles: u64,
    /// The largest single cost seen so far.
    pub max_cycles: u64,
    /// Sum of items handled (ops, packets).
    pub items: u64,
    /// Non-empty log2 buckets of cost as (bucket, events), lowest first (see
    /// [`BUCKETS`]): a few entries instead of 32 keeps the reply small.
    pub buckets: Vec<(u8, u64)>,
}

impl EventStats {
    fn bucket(&self, i: usize) -> u64 {
        self.buckets
            .iter()
            .find(|&&(b, _)| usize::from(b) == i)
            .map_or(0, |&(_, n)| n)
    }

    /// What happened between `before` and `self`. A count that went down
    /// means the counters started again (the domain was recreated, or wrote
    /// nonsense): then everything in `self` is new. Every field saturates.
    pub fn since(&self, before: Option<&EventStats>) -> EventDelta {
        let fresh = |s: &EventStats| EventDelta {
            count: s.count,
            cycles: s.cycles,
            items: s.items,
            max_cycles: (s.count > 0).then_some(s.max_cycles),
            buckets: (0..BUCKETS).map(|i| s.bucket(i)).collect(),
        };
        let Some(b) = before.filter(|b| b.count <= self.count) else {
            return fresh(self);
        };
        let count = self.count - b.count;
        EventDelta {
            count,
            cycles: self.cycles.saturating_sub(b.cycles),
            items: self.items.saturating_sub(b.items),
            // The running maximum rose: it was reached in the interval.
            max_cycles: (count > 0 && self.max_cycles > b.max_cycles).then_some(self.max_cycles),
            buckets: (0..BUCKETS)
                .map(|i| self.bucket(i).saturating_sub(b.bucket(i)))
                .collect(),
        }
    }
}

/// One event type over an interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventDelta {
    pub count: u64,
    pub cycles: u64,
    pub items: u64,
    /// The largest cost in the interval, when known exactly (see [`EventDelta::max_bound`]).
    pub max_cycles: Option<u64>,
    /// [`BUCKETS`] entries.
    pub buckets: Vec<u64>,
}

impl EventDelta {
    /// Mean cost in cycles (None without events).
    pub fn avg_cycles(&self) -> Option<f64> {
        (self.count > 0).then(|| self.cycles as f64 / self.count as f64)
    }
    /// Mean items per event (None without events).
    pub fn items_per_event(&self) -> Option<f64> {
        (self.count > 0).then(|| self.items as f64 / self.count as f64)
    }
    /// Events in the histogram (equals `count` unless a domain wrote nonsense).
    pub fn histogram_total(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
    /// The highest non-empty bucket.
    pub fn top_bucket(&self) -> Option<usize> {
        self.buckets.iter().rposition(|&n| n > 0)
    }
    /// The exact maximum when known, otherwise the top of the highest
    /// non-empty bucket (an upper bound). `true` when exact.
    pub fn max_bound(&self) -> Option<(u64, bool)> {
        match (self.max_cycles, self.top_bucket()) {
            (Some(m), _) => Some((m, true)),
            (None, Some(i)) => Some((bucket_range(i).1.unwrap_or(u64::MAX), false)),
            (None, None) => None,
        }
    }
}

/// One domain's counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DomainTrace {
    pub id: DomId,
    pub name: String,
    pub kind: String,
    /// Recorded by hv while serving this domain (trusted).
    pub hv: BTreeMap<String, EventStats>,
    /// Recorded by the domain in its trace area (reported by the domain).
    pub domain: BTreeMap<String, EventStats>,
}

/// Every counter at one moment, as `Request::Trace` returns it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TraceSnapshot {
    /// hv's TSC when the snapshot was taken.
    pub tsc: u64,
    /// Nanoseconds since hv started, at the same moment.
    pub uptime_ns: u64,
    /// hv's work for the toolstack.
    pub toolstack: BTreeMap<String, EventStats>,
    pub domains: Vec<DomainTrace>,
}

/// Who recorded an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordedBy {
    Hv,
    Domain,
}

/// One event type of one domain over an interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventRow {
    pub event: String,
    pub by: RecordedBy,
    pub delta: EventDelta,
}

/// One domain over an interval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DomainDelta {
    pub id: DomId,
    pub name: String,
    pub kind: String,
    /// The domain did not exist (under this id) at the first snapshot.
    pub new: bool,
    /// Events that happened, hv's first, by name.
    pub events: Vec<EventRow>,
}

/// The difference between two snapshots.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceDelta {
    /// Seconds between the snapshots, by hv's clock.
    pub seconds: f64,
    /// TSC ticks per second over the interval (None if it cannot be told).
    pub tsc_hz: Option<f64>,
    pub toolstack: Vec<EventRow>,
    pub domains: Vec<DomainDelta>,
    /// Domains present at the first snapshot and without a successor of
    /// the same name at the second (a recreated one shows as `new`).
    pub gone: Vec<String>,
}

fn rows(
    by: RecordedBy,
    after: &BTreeMap<String, EventStats>,
    before: Option<&BTreeMap<String, EventStats>>,
) -> Vec<EventRow> {
    after
        .iter()
        .map(|(name, s)| EventRow {
            event: name.clone(),
            by,
            delta: s.since(before.and_then(|b| b.get(name))),
        })
        .filter(|r| r.delta.count > 0)
        .collect()
}

impl TraceSnapshot {
    /// What happened from `before` to `self`. Domains are matched by id and
    /// name, so a recreated domain starts from zero.
    pub fn since(&self, before: &TraceSnapshot) -> TraceDelta {
        let ns = self.uptime_ns.saturating_sub(before.uptime_ns);
        let ticks = self.tsc.saturating_sub(before.tsc);
        let seconds = ns as f64 / 1e9;
        let domains = self
            .domains
            .iter()
            .map(|d| {
                let old = before
                    .domains
                    .iter()
                    .find(|b| b.id == d.id && b.name == d.name);
                let mut events = rows(RecordedBy::Hv, &d.hv, old.map(|o| &o.hv));
                events.extend(rows(RecordedBy::Domain, &d.domain, old.map(|o| &o.domain)));
                DomainDelta {
                    id: d.id,
                    name: d.name.clone(),
                    kind: d.kind.clone(),
                    new: old.is_none(),
                    events,
                }
            })
            .collect();
        let gone = before
            .domains
            .iter()
            .filter(|b| !self.domains.iter().any(|d| d.name == b.name))
            .map(|b| b.name.clone())
            .collect();
        TraceDelta {
            seconds,
            tsc_hz: (ns > 0 && ticks > 0).then(|| ticks as f64 / seconds),
            toolstack: rows(RecordedBy::Hv, &self.toolstack, Some(&before.toolstack)),
            domains,
            gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Request;
    use std::os::fd::AsFd;
    use sys::Memfd;

    fn area() -> (Memfd, Mapping) {
        let fd = Memfd::create("t-trace", TRACE_PAGES as usize * PAGE_SIZE, false).unwrap();
        let m = Mapping::new(fd.as_fd(), 0, TRACE_PAGES as usize * PAGE_SIZE, true).unwrap();
        (fd, m)
    }

    #[test]
    fn buckets_are_log2_ranges() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 1);
        assert_eq!(bucket_of(4), 2);
        assert_eq!(bucket_of(1023), 9);
        assert_eq!(bucket_of(1024), 10);
        assert_eq!(bucket_of((1 << 31) - 1), 30);
        assert_eq!(bucket_of(1 << 31), 31);
        assert_eq!(bucket_of(u64::MAX), 31);
        for c in [0u64, 1, 5, 100, 4096, 1 << 20, 123_456_789] {
            let (from, to) = bucket_range(bucket_of(c));
            assert!(
                from <= c && to.is_none_or(|t| c < t),
                "{c}: [{from}, {to:?})"
            );
        }
        assert_eq!(bucket_range(10), (1024, Some(2048)));
        assert_eq!(bucket_range(31), (1 << 31, None));
    }

    #[test]
    fn request_names_are_dense_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for n in Request::NAMES {
            assert!(seen.insert(n), "{n} twice");
        }
        assert_eq!(Request::Nop.name(), "nop");
        assert_eq!(Request::Trace.name(), "trace");
        assert_eq!(Request::GrantUnmap { handle: 1 }.name(), "grant_unmap");
        assert_eq!(Request::EvtchnSend { port: 1 }.name(), "evtchn_send");
        assert_eq!(Request::Status.name(), "status");
    }

    #[test]
    fn records_add_up() {
        let t = HvTrace::default();
        let t0 = now();
        for _ in 0..10 {
            t.hypercall(Request::Nop.index(), t0);
        }
        t.record(HvEvent::Batch, now(), 7);
        t.record(HvEvent::Batch, now(), 5);
        t.hypercall(usize::MAX, t0); // ignored, no panic
        let s = t.snapshot();
        assert_eq!(s.len(), 2, "{s:?}");
        let nop = &s["hypercall:nop"];
        assert_eq!(nop.count, 10);
        assert_eq!(nop.buckets.iter().map(|b| b.1).sum::<u64>(), 10);
        assert!(nop.max_cycles <= nop.cycles);
        let b = &s["batch"];
        assert_eq!((b.count, b.items), (2, 12));
        let d = b.since(None);
        assert_eq!(d.items_per_event(), Some(6.0));
        assert_eq!(d.histogram_total(), 2);
        assert_eq!(d.buckets.len(), BUCKETS);
    }

    #[test]
    fn domain_area_round_trips() {
        let (fd, m) = area();
        // hv's own mapping of the same memfd.
        let view = Mapping::new(fd.as_fd(), 0, PAGE_SIZE, true).unwrap();
        let t = Tracer::new(m);
        for i in 0..5 {
            t.record(DomainEvent::Notify, now(), i % 2);
        }
        t.record(DomainEvent::NetbackTx, now(), 64);
        Tracer::disabled().record(DomainEvent::Notify, now(), 1);
        let s = read_area(&view);
        assert_eq!(s.len(), 2);
        assert_eq!((s["notify"].count, s["notify"].items), (5, 2));
        assert_eq!(s["ring_batch_tx:netback"].items, 64);
        assert_eq!(s["notify"].buckets.iter().map(|b| b.1).sum::<u64>(), 5);
    }

    #[test]
    fn a_small_or_readonly_area_disables_tracing() {
        let fd = Memfd::create("t-small", PAGE_SIZE, false).unwrap();
        let ro = Mapping::new(fd.as_fd(), 0, PAGE_SIZE, false).unwrap();
        assert!(Tracer::new(ro).raw().is_none());
    }

    fn stats(count: u64, cycles: u64, max: u64, items: u64, buckets: &[u64]) -> EventStats {
        EventStats {
            count,
            cycles,
            max_cycles: max,
            items,
            buckets: (0..)
                .zip(buckets.iter().copied())
                .filter(|&(_, n)| n > 0)
                .collect(),
        }
    }

    #[test]
    fn difference_of_snapshots() {
        let a = stats(10, 10_000, 3000, 20, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 5]);
        let b = stats(15, 17_000, 3000, 30, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 7]);
        let d = b.since(Some(&a));
        assert_eq!((d.count, d.cycles, d.items), (5, 7000, 10));
        assert_eq!(d.avg_cycles(), Some(1400.0));
        assert_eq!(d.items_per_event(), Some(2.0));
        assert_eq!(d.histogram_total(), 5);
        assert_eq!(d.buckets[9], 3);
        assert_eq!(d.buckets[10], 2);
        // The maximum was not reached in the interval: only a bound is known.
        assert_eq!(d.max_cycles, None);
        assert_eq!(d.max_bound(), Some((2048, false)));
        let c = stats(
            16,
            27_000,
            10_000,
            31,
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 7, 0, 0, 1],
        );
        assert_eq!(c.since(Some(&b)).max_bound(), Some((10_000, true)));
        // Nothing happened.
        let z = b.since(Some(&b));
        assert_eq!((z.count, z.avg_cycles(), z.max_bound()), (0, None, None));
    }

    #[test]
    fn snapshot_difference_matches_domains_by_id() {
        let ev = |n| {
            BTreeMap::from([(
                "notify".to_string(),
                stats(n, n * 100, 100, n, &[0, 0, 0, 0, 0, 0, n]),
            )])
        };
        let dom = |id, name: &str, n| DomainTrace {
            id,
            name: name.into(),
            kind: "guest".into(),
            hv: BTreeMap::new(),
            domain: ev(n),
        };
        let before = TraceSnapshot {
            tsc: 1_000,
            uptime_ns: 1_000_000_000,
            toolstack: BTreeMap::new(),
            domains: vec![dom(1, "a", 4), dom(2, "b", 4), dom(3, "c", 1)],
        };
        let after = TraceSnapshot {
            tsc: 3_000_001_000,
            uptime_ns: 2_000_000_000,
            toolstack: BTreeMap::new(),
            // b was recreated as id 4; c is gone.
            domains: vec![dom(1, "a", 10), dom(4, "b", 3)],
        };
        let d = after.since(&before);
        assert_eq!(d.seconds, 1.0);
        assert_eq!(d.tsc_hz, Some(3e9));
        assert_eq!(d.gone, vec!["c".to_string()]);
        assert_eq!(d.domains[0].events[0].delta.count, 6);
        assert!(!d.domains[0].new);
        assert!(d.domains[1].new);
        assert_eq!(d.domains[1].events[0].delta.count, 3);
        assert_eq!(d.domains[1].events[0].by, RecordedBy::Domain);
        // Clocks that did not move give no rate, not a division by zero.
        assert_eq!(before.since(&before).tsc_hz, None);
        assert_eq!(before.since(&after).seconds, 0.0);
    }

    #[test]
    fn hostile_area_contents_cannot_panic_or_go_negative() {
        let (fd, m) = area();
        let hv_view = Mapping::new(fd.as_fd(), 0, PAGE_SIZE, false).unwrap();
        // Garbage everywhere, as a hostile domain could write.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut garbage = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for w in 0..PAGE_SIZE / 8 {
            m.fetch_add_u64(w * 8, garbage());
        }
        let first = read_area(&hv_view);
        // Extremes: counts at the top, sums that would overflow any addition.
        for w in 0..PAGE_SIZE / 8 {
            let v = if w % 3 == 0 { u64::MAX } else { garbage() };
            let old = m.load_u64(w * 8);
            m.fetch_add_u64(w * 8, v.wrapping_sub(old));
        }
        let second = read_area(&hv_view);
        for (name, s) in &second {
            for before in [None, first.get(name), Some(s)] {
                let d = s.since(before);
                assert!(d.count <= s.count && d.cycles <= s.cycles && d.items <= s.items);
                assert_eq!(d.buckets.len(), BUCKETS);
                let _ = (
                    d.avg_cycles(),
                    d.items_per_event(),
                    d.histogram_total(),
                    d.max_bound(),
                );
                if let Some(a) = d.avg_cycles() {
                    assert!(a.is_finite() && a >= 0.0);
                }
            }
            // And the other way round: counters that went backwards.
            if let Some(f) = first.get(name) {
                let d = f.since(Some(s));
                assert!(d.count <= f.count);
            }
        }
        // Recording on top of garbage wraps quietly instead of panicking.
        let t = Tracer::new(m);
        for e in DomainEvent::ALL {
            t.record(e, now(), u64::MAX);
        }
        let _ = read_area(&hv_view);
    }
}
