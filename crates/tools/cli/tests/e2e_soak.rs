//! `splitnet bench soak` as CI runs it: three minutes with a fixed seed,
//! a guest of every NIC kind carrying checked flows while the driver
//! domain and a guest are killed, the driver domain is stopped, a guest
//! stalls its RX ring, the uplink flaps, a guest scribbles on its NIC's
//! memory, a hostile VM attacks, the driver domain is upgraded in place
//! and hv is upgraded and killed, while churn hot-plugs vifs, applies a
//! guest in and out and adds containers; and a stream between two
//! underlay hosts over EVPN through a killed bgpd and a BGP session
//! dropped by nftables, and datagrams a DPDK VM (testpmd, listening on
//! its own socket) reflects back to the wire host. The command's exit
//! status is the soak's verdict; the test also reads the report as a user
//! would. Needs root, curl, python3, FRR, nft and dpdk-testpmd.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn a_three_minute_soak_with_a_fixed_seed_loses_no_byte_and_leaks_nothing() {
    let Some(env) = Env::new("soak") else {
        return;
    };
    let out = env.run_dir.join("out");
    let o = env.splitnet(&[
        "bench",
        "soak",
        "--minutes",
        "3",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let report = std::fs::read_to_string(out.join("results.md")).unwrap_or_default();
    assert!(
        o.status.success(),
        "the soak failed:\n{}\n{report}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    // Every flow carried bytes, each of them checked; none corrupted; a
    // TCP flow lost bytes only where one of its ends was killed (or the
    // host beneath this machine stopped it).
    let flows = v["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 10, "{report}");
    assert!(
        flows.iter().any(|f| f["name"] == "wire-vm2"),
        "no DPDK VM flow: {report}"
    );
    for f in flows {
        let name = f["name"].as_str().unwrap();
        assert!(
            f["verified"].as_u64().unwrap() > 0,
            "{name} carried nothing"
        );
        assert_eq!(f["corrupt"], 0, "{name}: {report}");
        if !f["kind"].as_str().unwrap().starts_with("udp") && f["excused"] == 0 && f["hosts"] == 0 {
            assert_eq!(f["lost"], 0, "{name}: {report}");
        }
    }
    // A round of events holds each once: every fault and hostile peer came up.
    let events: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for want in [
        "SIGKILL drv",
        "SIGSTOP drv",
        "SIGKILL guest2",
        "guest2 stalls its RX ring",
        "hostile VM: kick_storm",
        "hostile VM: bad_chains",
        "hostile VM: bad_gso",
        "SIGKILL the VMM mid kick storm",
        "the uplink's link flaps",
        "guest7 scribbles on its NIC's memory",
        "SIGKILL host a's bgpd",
        "host a's BGP dropped by nftables",
        "drv upgraded in place",
        "hv upgraded in place",
        "SIGKILL hv",
    ] {
        assert!(events.contains(&want), "no {want:?} in {events:?}");
    }
    // Churn applied a guest in and out, and added and deleted containers
    // (unless the CNI plugin or host-local is missing, which it names).
    let churn = &v["churn"];
    assert!(churn["applied_in"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(churn["applied_in"], churn["applied_out"], "{report}");
    if churn["containers_skipped"].is_null() {
        assert!(churn["containers_added"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(churn["containers_added"], churn["containers_deleted"]);
    }
    // Each driver-domain kill's gap was measured; downloads arrived whole.
    assert!(!v["kill_gaps"].as_array().unwrap().is_empty());
    assert!(v["downloads"]["matched"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(v["downloads"]["failures"], serde_json::json!([]));
    // The machine itself was watched, by a real-time thread (root may).
    let m = &v["machine"];
    assert_eq!(m["realtime"], true, "{report}");
    assert!(m["wakeups"].as_u64().unwrap() > 1000, "{report}");
    assert!(
        report.contains("The machine: a real-time probe woke"),
        "{report}"
    );
    // hv's counts and the namespaces are where they started.
    assert_eq!(v["leaked"], serde_json::json!([]), "{report}");
    assert_eq!(v["before"]["store_nodes"], v["after"]["store_nodes"]);
    assert_eq!(v["namespaces_before"], v["namespaces_after"]);
    assert!(report.contains("no byte lost or corrupted, nothing leaked"));
}
