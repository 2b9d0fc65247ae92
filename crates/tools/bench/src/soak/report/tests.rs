//! The soak's rules on made-up records: what fails a run and what a kill
//! excuses.

use super::*;
use crate::soak::progress::Gap;

fn resources() -> Resources {
    Resources {
        grant_pins: 4,
        ngm_grants: 0,
        event_channels: 6,
        grant_maps: 2,
        store_nodes: 100,
        store_paths: ["/local", "/local/domain"].map(String::from).into(),
        watches: 20,
        hv_fds: 30,
        hv_pidfds: 0,
        stale_pidfds: 0,
        hv_rss_kib: 6000,
        hv_heap_kib: 2000,
        hv_heap_free_kib: 500,
    }
}

fn flow(name: &str, client: &str, sent: u64, verified: u64, failures: Vec<Failure>) -> FlowInput {
    FlowInput {
        name: name.into(),
        kind: Kind::Stream { mbps: 10 },
        client: client.into(),
        server: "wire".into(),
        sent,
        summary: Summary {
            verified,
            bins: vec![100; 100],
            gaps: vec![Gap {
                start_s: 4.98,
                ms: 80.0,
            }],
            failures,
        },
    }
}

fn window(event: Event, start_s: f64) -> Window {
    Window {
        event,
        name: event.name(),
        start_s,
        end_s: start_s + 1.0,
        detail: String::new(),
        drv_rss_kib: None,
        hv_rss_kib: 0,
        error: None,
    }
}

fn inputs(flows: Vec<FlowInput>, windows: Vec<Window>) -> Inputs {
    Inputs {
        seed: 1,
        minutes: 0.2,
        seconds: 10.0,
        flows,
        windows,
        quiet: vec![(0.0, 4.0)],
        churn: Churn::default(),
        downloads: Downloads::default(),
        before: resources(),
        after: resources(),
        namespaces_before: vec!["splitnet-a".into()],
        namespaces_after: vec!["splitnet-a".into()],
        status_before: serde_json::json!({"domains": [{"name": "drv", "id": 1, "rx": 5}]}),
        status_after: serde_json::json!({"domains": [{"name": "drv", "id": 9, "rx": 7}]}),
        machine: MachineRecord::default(),
        stall_dumps: Vec::new(),
    }
}

fn failure(at_s: f64, corrupt: bool) -> Failure {
    Failure {
        at_s,
        what: "x".into(),
        corrupt,
    }
}

#[test]
fn a_clean_run_passes_and_names_the_kill_gap_and_the_counters_that_moved() {
    let r = SoakReport::new(inputs(
        vec![flow("a", "guest1", 500, 500, vec![])],
        vec![window(Event::KillDriver, 5.0)],
    ));
    assert_eq!(r.verdict(), Ok(()));
    assert_eq!(r.kill_gaps.len(), 1);
    assert_eq!(r.kill_gaps[0].longest_gap_ms, 80.0);
    assert!(r.kill_gaps[0].met);
    // The domain id is an identity, not a counter.
    assert_eq!(
        r.counters_moved,
        vec![("domains[drv].rx".to_string(), 5.0, 7.0)]
    );
    assert!(r.table().contains("no byte lost or corrupted"));
}

#[test]
fn a_lost_byte_a_corrupt_one_or_a_leak_fails_the_run_by_name() {
    let lost = SoakReport::new(inputs(vec![flow("a", "guest1", 500, 499, vec![])], vec![]));
    assert!(lost.verdict().unwrap_err().contains("a: 1 bytes lost"));
    let corrupt = SoakReport::new(inputs(
        vec![flow("b", "guest1", 5, 5, vec![failure(3.0, true)])],
        vec![],
    ));
    assert!(corrupt.verdict().unwrap_err().contains("b: 1 corrupted"));
    let mut i = inputs(vec![], vec![]);
    i.after.store_nodes += 1;
    i.after.store_paths.insert("/local/domain/7".into());
    i.namespaces_after.push("splitnet-b".into());
    let e = SoakReport::new(i).verdict().unwrap_err();
    assert!(e.contains("store nodes") && e.contains("namespaces"), "{e}");
    assert!(
        e.contains("added [\"/local/domain/7\"]"),
        "names the node: {e}"
    );
}

#[test]
fn an_event_that_failed_fails_the_run_by_name() {
    let mut w = window(Event::KillDriver, 5.0);
    w.error = Some("drv was not running again".into());
    let e = SoakReport::new(inputs(vec![], vec![w]))
        .verdict()
        .unwrap_err();
    assert!(
        e.contains("SIGKILL drv at 5.0 s failed: drv was not running again"),
        "{e}"
    );
}

#[test]
fn a_failed_download_fails_the_run_with_curls_reason() {
    use crate::soak::churn::OpFailure;
    let mut i = inputs(vec![], vec![]);
    i.downloads.failures.push(OpFailure {
        at_s: 12.5,
        what: "curl: (28) Operation timed out".into(),
    });
    let e = SoakReport::new(i).verdict().unwrap_err();
    assert!(
        e.contains("downloads: 0 corrupted, 1 failed (the first, started at 12.5 s: curl: (28)"),
        "{e}"
    );
}

#[test]
fn hv_memory_is_judged_against_its_size_after_the_first_round() {
    let round = Event::all().len();
    let with = |grown_in_round: u64, end: u64| {
        let mut ws: Vec<Window> = (0..round)
            .map(|k| window(Event::StopDriver, k as f64))
            .collect();
        ws[round - 1].hv_rss_kib = 6000 + grown_in_round;
        let mut i = inputs(vec![], ws);
        i.after.hv_rss_kib = end;
        SoakReport::new(i).verdict()
    };
    // First-use growth in the first round is no leak...
    assert_eq!(with(1500, 7600), Ok(()));
    // ...growth after it is.
    assert!(with(1500, 9000).unwrap_err().contains("resident memory"));
    // A run shorter than a round does not judge memory, only counts.
    let mut i = inputs(vec![], vec![]);
    i.after.hv_rss_kib = 9100;
    assert_eq!(SoakReport::new(i).verdict(), Ok(()));
}

#[test]
fn a_kill_of_a_flows_end_excuses_its_broken_connection_but_a_driver_kill_does_not() {
    let victim = flow("v", "guest2", 500, 400, vec![failure(5.5, false)]);
    let other = flow("o", "guest1", 500, 400, vec![failure(5.5, false)]);
    let r = SoakReport::new(inputs(
        vec![victim, other],
        vec![
            window(Event::KillGuest, 5.0),
            window(Event::KillDriver, 5.2),
        ],
    ));
    let e = r.verdict().unwrap_err();
    assert!(!e.contains("v:"), "{e}");
    assert!(
        e.contains("o: 1 failures no kill or host stall explains"),
        "{e}"
    );
    assert!(e.contains("o: 100 bytes lost"), "{e}");
    // A corrupted byte is never excused.
    let r = SoakReport::new(inputs(
        vec![flow("v", "guest2", 5, 5, vec![failure(5.5, true)])],
        vec![window(Event::KillGuest, 5.0)],
    ));
    assert!(r.verdict().unwrap_err().contains("v: 1 corrupted"));
}

#[test]
fn a_host_stall_explains_what_it_broke_and_nothing_else() {
    use crate::soak::churn::OpFailure;
    use crate::soak::machine::Stall;
    let stall = |start_s: f64, steal_ms: f64| Stall {
        start_s,
        ms: 12_000.0,
        steal_ms: Some(steal_ms),
    };
    let run = |stalls: Vec<Stall>| {
        let mut i = inputs(
            vec![flow("c", "guest1", 500, 400, vec![failure(30.0, false)])],
            vec![],
        );
        i.churn.failures.push(OpFailure {
            at_s: 21.0,
            what: "did not connect".into(),
        });
        i.machine.stalls = stalls;
        SoakReport::new(i)
    };
    // Every core stolen from: the host's, and both failures are excused.
    let r = run(vec![stall(9.0, 11_800.0)]);
    assert_eq!((r.flows[0].hosts, r.churn_unexplained), (1, 0));
    assert!(r.verdict().is_ok(), "{:?}", r.verdict());
    let t = r.table();
    assert!(
        t.contains("the machine ran nothing of ours for 12.00 s at 9.0 s (every core stolen 11.8 s: the host's)"),
        "{t}"
    );
    assert!(t.contains("| c | tcp stream | guest1 → wire |"), "{t}");
    assert!(t.contains("| 1 (0, 1) |"), "{t}");
    // A watchdog's dump is named with where the blocked tasks waited.
    let mut i = inputs(vec![], vec![]);
    i.stall_dumps.push(crate::soak::stalls::StallDump {
        at_s: 1915.0,
        flows: vec!["guest1-tx".into()],
        file: "/run/x/stall-1915.0s.txt".into(),
        blocked: 3,
        waits: vec![("rtnl_lock".into(), 2), ("netlink_recvmsg".into(), 1)],
    });
    let t = SoakReport::new(i).table();
    assert!(
        t.contains("- at 1915.0 s guest1-tx had delivered nothing for 5 s: 3 tasks blocked in the kernel, waiting in rtnl_lock ×2, netlink_recvmsg ×1 (/run/x/stall-1915.0s.txt)"),
        "{t}"
    );
    // The same stall without steal is the kernel's or ours: not excused.
    let e = run(vec![stall(9.0, 100.0)]).verdict().unwrap_err();
    assert!(
        e.contains("c: 1 failures no kill or host stall explains"),
        "{e}"
    );
    assert!(
        e.contains("c: 100 bytes lost") && e.contains("hot-plug: 1"),
        "{e}"
    );
    // A host stall long before the failures explains neither.
    let e = run(vec![stall(-30.0, 11_800.0)]).verdict().unwrap_err();
    assert!(
        e.contains("c: 1 failures") && e.contains("hot-plug: 1"),
        "{e}"
    );
    // A corrupted byte is never the host's.
    let mut i = inputs(
        vec![flow("c", "guest1", 5, 5, vec![failure(10.0, true)])],
        vec![],
    );
    i.machine.stalls = vec![stall(9.0, 11_800.0)];
    assert!(SoakReport::new(i)
        .verdict()
        .unwrap_err()
        .contains("c: 1 corrupted"));
}

#[test]
fn a_hostile_window_is_judged_against_the_quiet_spells() {
    let mut f = flow("a", "guest1", 1, 1, vec![]);
    // 100 bytes a bin while quiet (0-4 s), 50 in the attack's window.
    f.summary.bins = (0..100).map(|i| if i >= 50 { 50 } else { 100 }).collect();
    let mut w = window(Event::Attack(crate::hostile_vm::Attack::KickStorm), 6.0);
    w.end_s = 8.0;
    let r = SoakReport::new(inputs(vec![f], vec![w]));
    assert_eq!(r.hostile.len(), 1);
    assert!((r.hostile[0].lowest - 0.5).abs() < 1e-9, "{:?}", r.hostile);
    assert!(!r.hostile[0].met);
    // The target is reported, not a failure of the run.
    assert_eq!(r.verdict(), Ok(()));
}

#[test]
fn an_upgrade_is_judged_on_the_flows_that_keep_their_connection() {
    // Both flows pause 80 ms across the upgrade at 5 s; the one through the
    // virtio guest reconnects, so only the other one counts.
    let r = SoakReport::new(inputs(
        vec![
            flow("a", "guest1", 500, 500, vec![]),
            flow("v", crate::soak::VIRTIO_GUEST, 500, 500, vec![]),
        ],
        vec![window(Event::UpgradeDriver, 5.0)],
    ));
    let u = &r.upgrade_gaps;
    assert_eq!(u.len(), 1);
    assert_eq!((u[0].flow.as_str(), u[0].longest_gap_ms), ("a", 80.0));
    assert!(!u[0].met);
    assert_eq!(u[0].gaps["v"], 80.0);
    assert!(r.table().contains("NOT MET: 80 ms (a)"), "{}", r.table());
    // Through the virtio guest alone: listed, not judged.
    let r = SoakReport::new(inputs(
        vec![flow("v", crate::soak::VIRTIO_GUEST, 500, 500, vec![])],
        vec![window(Event::UpgradeDriver, 5.0)],
    ));
    assert!(r.upgrade_gaps[0].met);
    assert!(r.table().contains("upgrade at s"), "{}", r.table());
}

#[test]
fn pidfds_may_grow_but_not_for_processes_gone() {
    let before = resources();
    let adopted = Resources {
        hv_pidfds: 9,
        ..resources()
    };
    assert!(before.leaked(&adopted).is_empty(), "an hv that took over");
    assert!(before.counts_back(&adopted));
    let leaking = Resources {
        hv_pidfds: 9,
        stale_pidfds: 1,
        ..resources()
    };
    assert_eq!(before.leaked(&leaking), ["pidfds of processes gone"]);
    let other = Resources {
        hv_fds: 31,
        ..resources()
    };
    assert_eq!(before.leaked(&other), ["open descriptors"]);
    let heap = Resources {
        hv_heap_kib: 9000,
        hv_heap_free_kib: 9000,
        ..resources()
    };
    assert!(
        before.leaked(&heap).is_empty(),
        "the heap is shown, not judged"
    );
}
