//! `splitnet trace` end to end: without a system it says how to start one;
//! with the default topology up and a ping running in guest1, it counts ring
//! batches in the driver domain, notifications on both sides and hv's grant
//! batches, with histograms that add up. Needs root and ping.

mod common;

use common::*;
use serde_json::Value;

fn domain_events<'a>(report: &'a Value, name: &str) -> &'a [Value] {
    report["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no domain {name} in {report:#}"))["events"]
        .as_array()
        .unwrap()
}

/// The event's record (count 0 when it is absent: it did not happen).
fn event(report: &Value, dom: &str, name: &str, by: &str) -> Value {
    domain_events(report, dom)
        .iter()
        .find(|e| e["event"] == name && e["recorded_by"] == by)
        .cloned()
        .unwrap_or_else(|| serde_json::json!({"count": 0}))
}

fn count(e: &Value) -> u64 {
    e["count"].as_u64().unwrap()
}

#[test]
fn trace_needs_a_system_and_counts_the_data_path() {
    let Some(env) = Env::new("trace") else {
        return;
    };

    // Nothing is running: a clear error that says what to do.
    let o = env.splitnet(&["trace", "--duration", "0.2"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no splitnet system is running") && err.contains("splitnet up"),
        "{err}"
    );

    env.ok(&["up"]);
    let json = env.run_dir.join("trace.json");
    let rd = env.run_dir.to_str().unwrap();
    let text = env.ok(&[
        "trace",
        "--duration",
        "2",
        "--json",
        json.to_str().unwrap(),
        "--",
        env!("CARGO_BIN_EXE_splitnet"),
        "--run-dir",
        rd,
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "5",
        "-i",
        "0.2",
        "-W",
        "2",
        "10.77.0.254",
    ]);
    for want in [
        "drv (driver",
        "guest1 (guest",
        "ring_batch_tx:netback",
        "HISTOGRAMS",
        "[2^",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["command_exit_code"], 0, "{r:#}");
    assert!(r["seconds"].as_f64().unwrap() > 0.5, "{r:#}");
    assert!(r["tsc_hz"].as_f64().unwrap() > 1e8, "{r:#}");

    check_data_path(&r);
    check_hv_histograms(&r);

    // Duration mode, and a failing command still gets its report.
    let o = env.splitnet(&["trace", "--duration", "0.5"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("splitnet trace: 0.5"));
    let o = env.splitnet(&["trace", "--", "false"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("drv (driver"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the traced command failed"));

    // The trace areas go with their domains.
    env.ok(&["down"]);
    assert_nothing_left();
}

/// What the ping did on the data path, as the trace counted it.
fn check_data_path(r: &Value) {
    // The driver domain moved the echo requests (TX) and replies (RX) in ring
    // batches, at least one packet each, and notified guest1.
    for name in ["ring_batch_tx:netback", "ring_batch_rx:netback"] {
        let e = event(r, "drv", name, "domain");
        assert!(count(&e) >= 1, "{name}: {e:#}");
        assert!(e["items"].as_u64().unwrap() >= count(&e), "{name}: {e:#}");
        assert!(e["avg_cycles"].as_f64().unwrap() > 0.0, "{e:#}");
        assert!(e["per_second"].as_f64().unwrap() > 0.0, "{e:#}");
    }
    let notify = |dom| count(&event(r, dom, "notify", "domain"));
    assert!(notify("drv") >= 1 && notify("guest1") >= 1, "{r:#}");
    let tx = event(r, "guest1", "ring_batch_tx:netfront", "domain");
    assert!(count(&tx) >= 1, "{tx:#}");
    // Under the new grant mechanism (the default) hv is off the per-packet
    // path: no batch and no grant copy for any packet.
    for name in ["batch", "grant_copy"] {
        let e = event(r, "drv", name, "hv");
        assert_eq!(count(&e), 0, "{name}: {e:#}");
    }
}

/// hv's own histograms account for every event.
fn check_hv_histograms(r: &Value) {
    for d in r["domains"].as_array().unwrap() {
        for e in d["events"].as_array().unwrap() {
            if e["recorded_by"] != "hv" {
                continue;
            }
            let hist: u64 = e["histogram"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["count"].as_u64().unwrap())
                .sum();
            assert_eq!(hist, count(e), "{e:#}");
        }
    }
}
