//! Tracing end to end with in-process domains: a known number of hypercalls,
//! grant operations, batches and notifications must show up as exactly that
//! many events, recorded by hv and by the domains in their trace areas, and
//! read back by the toolstack over a real socket.

mod common;
use common::{copy_from, domain};
use std::time::Duration;

use abi::grant::GrantCopy;
use abi::SharedMemory;
use hv::proto::Request;
use hv::trace::{DomainDelta, EventDelta, RecordedBy, TraceDelta, BUCKETS};
use hv::{ErrorKind, Hypervisor, Toolstack};
use splitnet_hv as hv;
use std::sync::Arc;

/// A toolstack connection served by `hv` on a thread, as the daemon does.
fn toolstack(hv: &Arc<Hypervisor>) -> Toolstack {
    let (ours, theirs) = sys::SeqPacket::pair().expect("socket pair");
    let hv = hv.clone();
    std::thread::spawn(move || hv.serve_toolstack(theirs));
    Toolstack::from_socket(ours)
}

fn dom<'a>(d: &'a TraceDelta, name: &str) -> &'a DomainDelta {
    d.domains
        .iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no domain {name} in {d:#?}"))
}

/// The event, or an empty one when it did not happen.
fn ev(d: &DomainDelta, by: RecordedBy, name: &str) -> EventDelta {
    d.events
        .iter()
        .find(|r| r.by == by && r.event == name)
        .map(|r| r.delta.clone())
        .unwrap_or_default()
}

/// Nop hypercalls guest1 makes.
const NOPS: u64 = 37;

/// How many times the event happened.
fn count(x: &DomainDelta, by: RecordedBy, name: &str) -> u64 {
    ev(x, by, name).count
}

#[test]
fn trace_counts_match_the_operations_performed() {
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let (drv_id, g1_id) = (drv.domid(), g1.domid());
    let mut ts = toolstack(&hv);
    let before = ts.trace().unwrap();

    // 37 Nop hypercalls from guest1.
    for _ in 0..NOPS {
        g1.nop().unwrap();
    }

    // Grant copies: 5 batches of 3 ops through the batch page, 2 calls of 4
    // ops over the control socket.
    g1.pool().fill(3 * 4096, 64, 0x11);
    let gref = g1.grants().grant_access(drv_id, 3, true).unwrap();
    for _ in 0..5 {
        let ops: Vec<GrantCopy> = (0..3)
            .map(|i| copy_from(g1_id, gref, 0, 10 + i, 64))
            .collect();
        assert_eq!(drv.grant_copy_batch(&ops).unwrap(), vec![0; 3]);
    }
    for _ in 0..2 {
        let ops: Vec<GrantCopy> = (0..4)
            .map(|i| copy_from(g1_id, gref, 0, 20 + i, 64))
            .collect();
        assert_eq!(drv.grant_copy(&ops).unwrap(), vec![0; 4]);
    }

    // Grant maps and unmaps: 3 of each, plus one refused map.
    for _ in 0..3 {
        let m = drv.map_grant(g1_id, gref, false).unwrap();
        drv.unmap_grant(m).unwrap();
    }
    assert_eq!(
        drv.map_grant(g1_id, 1_000, false).err().unwrap().kind,
        ErrorKind::BadGntref
    );
    g1.grants().end_access(gref).unwrap();

    // One page flip.
    let accept = g1.grants().accept_transfer(drv_id, 12).unwrap();
    drv.transfer(8, g1_id, accept).unwrap();

    // Notifications: 11 that ring drv's doorbell (drv takes each), 3 more
    // that coalesce into one ring (drv has not taken the first), 2 while
    // drv has masked the channel, and 4 back from drv.
    let a = g1.evtchn_alloc_unbound(drv_id).unwrap();
    let b = drv.evtchn_bind(g1_id, a.port).unwrap();
    for _ in 0..11 {
        a.notify().unwrap();
        assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    }
    for _ in 0..3 {
        a.notify().unwrap();
    }
    assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    b.mask();
    a.notify().unwrap();
    a.notify().unwrap();
    b.unmask().unwrap();
    for _ in 0..4 {
        b.notify().unwrap();
    }

    let after = ts.trace().unwrap();
    let d = after.since(&before);
    assert!(d.seconds > 0.0, "{d:?}");
    assert!(d.tsc_hz.is_some_and(|hz| hz > 1e6), "{d:?}");
    assert!(d.gone.is_empty());
    let (g, r) = (dom(&d, "guest1"), dom(&d, "drv"));
    assert!(!g.new && !r.new);
    check_guest1(g, r);
    check_drv(r);

    // The toolstack: the first Trace call (the second was still running).
    assert_eq!(d.toolstack.len(), 1, "{:?}", d.toolstack);
    assert_eq!(d.toolstack[0].event, "hypercall:trace");
    assert_eq!(d.toolstack[0].delta.count, 1);

    check_histograms(&d);
}

/// hv's and guest1's own view of guest1, and drv's notifications back.
fn check_guest1(g: &DomainDelta, r: &DomainDelta) {
    // hv's view of guest1: the Nops and one event-channel allocation.
    let nop = ev(g, RecordedBy::Hv, "hypercall:nop");
    assert_eq!(nop.count, NOPS);
    assert!(nop.cycles > 0 && nop.avg_cycles().unwrap() > 0.0);
    assert_eq!(
        count(g, RecordedBy::Hv, "hypercall:evtchn_alloc_unbound"),
        1
    );
    // guest1's own view: every hypercall's round trip, and its notifications.
    assert_eq!(
        count(g, RecordedBy::Domain, "hypercall_round_trip"),
        NOPS + 1
    );
    let n = ev(g, RecordedBy::Domain, "notify");
    assert_eq!(
        (n.count, n.items),
        (16, 12),
        "coalesced and masked notifications ring no doorbell"
    );
    assert_eq!(count(r, RecordedBy::Domain, "notify"), 4);
}

/// hv's and drv's own view of drv.
fn check_drv(r: &DomainDelta) {
    // hv's view of drv: batches, grant operations, and the hypercalls.
    let batch = ev(r, RecordedBy::Hv, "batch");
    assert_eq!((batch.count, batch.items), (5, 15));
    assert_eq!(batch.items_per_event(), Some(3.0));
    let copy = ev(r, RecordedBy::Hv, "grant_copy");
    assert_eq!((copy.count, copy.items), (7, 23));
    assert_eq!(count(r, RecordedBy::Hv, "hypercall:grant_copy_call"), 2);
    assert_eq!(count(r, RecordedBy::Hv, "grant_map"), 4);
    assert_eq!(count(r, RecordedBy::Hv, "hypercall:grant_map"), 4);
    assert_eq!(count(r, RecordedBy::Hv, "grant_unmap"), 3);
    assert_eq!(count(r, RecordedBy::Hv, "grant_transfer"), 1);
    assert_eq!(
        count(r, RecordedBy::Hv, "hypercall:evtchn_bind_interdomain"),
        1
    );
    // drv's view: the batch round trips and 2 + 4 + 3 + 1 + 1 control calls.
    let rt = ev(r, RecordedBy::Domain, "grant_batch_round_trip");
    assert_eq!((rt.count, rt.items), (5, 15));
    assert_eq!(count(r, RecordedBy::Domain, "hypercall_round_trip"), 11);
}

/// Every histogram accounts for every event, and the maximum fits the top bucket.
fn check_histograms(d: &TraceDelta) {
    for x in d.domains.iter() {
        for row in &x.events {
            let e = &row.delta;
            assert_eq!(e.buckets.len(), BUCKETS);
            assert_eq!(e.histogram_total(), e.count, "{}: {row:?}", x.name);
            if let (Some(max), Some(top)) = (e.max_cycles, e.top_bucket()) {
                assert_eq!(hv::trace::bucket_of(max), top, "{row:?}");
            }
        }
    }
}

#[test]
fn only_the_toolstack_may_trace_and_a_scribbled_area_is_harmless() {
    let hv = Hypervisor::new();
    let drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let e = g1.call(&Request::Trace).err().unwrap();
    assert_eq!(e.kind, ErrorKind::NotPrivileged);

    let mut ts = toolstack(&hv);
    let before = ts.trace().unwrap();
    // guest1 fills its whole trace area with garbage, then with all-ones.
    let area = g1.tracer();
    let raw = area.raw().expect("a trace area");
    for (i, w) in (0..raw.len() / 8).enumerate() {
        raw.write_bytes(
            w * 8,
            &(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes(),
        );
    }
    let mid = ts.trace().unwrap();
    raw.fill(0, raw.len(), 0xff);
    let after = ts.trace().unwrap();
    for (x, y) in [
        (&before, &mid),
        (&mid, &after),
        (&after, &before),
        (&before, &after),
    ] {
        let d = y.since(x);
        for dd in &d.domains {
            for row in &dd.events {
                let e = &row.delta;
                if row.by == RecordedBy::Hv {
                    // hv's own counters are untouched by what guest1 wrote.
                    assert_eq!(e.histogram_total(), e.count, "{row:?}");
                }
                let _ = (e.avg_cycles(), e.items_per_event(), e.max_bound());
            }
        }
    }
    // guest1's nonsense stays in guest1's rows; drv's show nothing it did not do.
    let d = after.since(&before);
    assert!(dom(&d, "drv").events.is_empty(), "{d:#?}");
    // hv keeps serving everyone.
    g1.nop().unwrap();
    drop(drv);
    assert!(ts.trace().is_ok());
}

#[test]
fn a_destroyed_domain_is_reported_gone_and_a_new_one_new() {
    let hv = Hypervisor::new();
    let mut g1 = domain(&hv, "guest1", "guest");
    let mut ts = toolstack(&hv);
    g1.nop().unwrap();
    let before = ts.trace().unwrap();
    let id = g1.domid();
    assert!(hv.destroy_domain(id, "test"));
    let mut g2 = domain(&hv, "guest2", "guest");
    g2.nop().unwrap();
    let d = ts.trace().unwrap().since(&before);
    assert_eq!(d.gone, vec!["guest1".to_string()]);
    let g = dom(&d, "guest2");
    assert!(g.new);
    // Everything guest2 did since it was created: hello and one nop.
    assert_eq!(ev(g, RecordedBy::Hv, "hypercall:hello").count, 1);
    assert_eq!(ev(g, RecordedBy::Hv, "hypercall:nop").count, 1);
}
