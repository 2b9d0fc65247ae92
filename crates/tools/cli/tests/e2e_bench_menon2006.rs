//! `splitnet bench menon2006 --quick` end to end on the configurations
//! whose switches differ most: the Xen 2.0 guest (Guest-none), the
//! high-level interface (Guest-high), the I/O-channel optimization under
//! Xen's grants, netback reading the guest's grant table (Guest-ioc), a port without offloads
//! (Port-none), the driver domain as the endpoint (Xen-driver) and the
//! guest receiving by copy (Guest-copy). Each is measured against native
//! in the same run, no receiver sees a bad checksum, the paper's tables
//! come out, operation counts follow each mechanism, native is bounded by
//! the paper's four gigabit NICs, and nothing is left behind. Needs root
//! and iperf3.

mod common;

use common::*;
use serde_json::Value;

fn record<'a>(records: &'a [Value], config: &str, case: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["config"] == config && r["case"] == case)
        .unwrap_or_else(|| panic!("no record for {config} {case}"))
}

#[test]
fn bench_menon2006_quick_measures_each_switch_against_native() {
    let Some(env) = Env::new("bench-menon2006") else {
        return;
    };
    let out = env.run_dir.join("out");
    let configs = "Guest-none,Guest-high,Guest-ioc,Port-none,Xen-driver,Guest-copy";
    let table = env.ok(&[
        "bench",
        "menon2006",
        "--quick",
        "--seconds",
        "1",
        "--configs",
        configs,
        "--out",
        out.to_str().unwrap(),
    ]);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(
        v["unavailable"].as_array().unwrap().is_empty(),
        "every configuration runs in this build: {}",
        v["unavailable"]
    );
    let records = v["records"].as_array().unwrap();
    // The paper's machine by default: four NICs, each shaped to a gigabit
    // scaled by this host's native receive over the paper's, bound every
    // flow, as the paper's four gigabit NICs did.
    let machine = v["machine"].as_str().unwrap();
    assert!(machine.starts_with("paper:"), "{machine}");
    assert!(
        machine.contains("scaled by this host's native receive"),
        "{machine}"
    );
    let nic = nic_gbps(machine);
    assert!(nic >= 0.001, "each NIC's rate: {machine}");
    let native = record(records, "Linux", "tx")["gbps"].as_f64().unwrap();
    assert!(
        native > 0.0 && native < 4.0 * nic * 1.05,
        "native over 4 x {nic} Gbit/s: {native}"
    );
    assert!(table.contains("Machine: paper: one CPU"), "{table}");
    // Figures 6 and 8 are profiled over one NIC, as the paper's were.
    let one = record(records, "Guest-high", "tx-one-nic")["gbps"]
        .as_f64()
        .unwrap();
    assert!(one > 0.0 && one < nic * 1.05, "one {nic} Gbit/s NIC: {one}");
    assert!(table.contains("transmit over one NIC"), "{table}");
    let cases = [
        ("Guest-none", "tx"),
        ("Guest-none", "rx"),
        ("Guest-high", "tx"),
        ("Guest-ioc", "tx"),
        ("Port-none", "tx"),
        ("Xen-driver", "tx"),
        ("Xen-driver", "rx"),
        ("Guest-copy", "rx"),
    ];
    for (config, case) in cases {
        let r = record(records, config, case);
        assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        let ratio = r["ratio_to_native"].as_f64().unwrap();
        assert!(ratio > 0.0 && ratio < 3.0, "{r}");
        assert_eq!(r["csum_errors"], 0, "{r}");
        let role = if config == "Xen-driver" {
            "driver"
        } else {
            "guest"
        };
        assert!(r["by_domain"][role].as_f64().unwrap() > 0.0, "{r}");
    }
    // The high-level interface moves fewer, larger frames through the I/O
    // channel: the guest's cycles per wire frame fall.
    let guest = |c| {
        record(records, c, "tx")["by_domain"]["guest"]
            .as_f64()
            .unwrap()
    };
    assert!(
        guest("Guest-high") < guest("Guest-none"),
        "{} vs {}",
        guest("Guest-high"),
        guest("Guest-none")
    );
    // Operation counts follow each mechanism exactly: Xen 2.0's transmit
    // maps every fragment's page, copies its header and unmaps it, the I/O
    // channel maps none;
    // Xen 2.0's receive flips a page per packet to the guest, the copy
    // path flips none and copies instead.
    let ops = |c, k, op: &str| -> f64 {
        record(records, c, k)["ops_per_frame"][op]
            .as_f64()
            .unwrap_or_else(|| panic!("no {op} count for {c} {k}"))
    };
    let one_per_packet = |c, k, op: &str, dir: &str| {
        let (v, p) = (ops(c, k, op), ops(c, k, dir));
        assert!(
            p > 0.0 && (v / p - 1.0).abs() < 0.02,
            "{c} {k}: {v} {op} against {p} {dir}, per segment"
        );
    };
    let (maps, sent) = (
        ops("Guest-none", "tx", "grant maps"),
        ops("Guest-none", "tx", "packets from the guest"),
    );
    assert!(
        sent > 0.0 && maps >= sent,
        "a map per fragment: {maps} maps, {sent} packets"
    );
    assert_eq!(
        ops("Guest-none", "tx", "grant maps"),
        ops("Guest-none", "tx", "grant unmaps")
    );
    assert_eq!(ops("Guest-ioc", "tx", "grant maps"), 0.0);
    // The I/O channel reads each fragment's grant itself (§4.1): at least
    // one read per packet, and no hold or copy asked of hv for it.
    let reads = ops("Guest-ioc", "tx", "grant table reads");
    let ioc_sent = ops("Guest-ioc", "tx", "packets from the guest");
    assert!(
        ioc_sent > 0.0 && reads >= ioc_sent,
        "a grant read per fragment: {reads} reads, {ioc_sent} packets"
    );
    assert_eq!(ops("Guest-none", "tx", "grant table reads"), 0.0);
    // Neither copies a payload in the driver domain: Xen 2.0's netback
    // sent the mapped pages as the frame's fragments.
    for c in ["Guest-none", "Guest-ioc"] {
        assert_eq!(ops(c, "tx", "bytes netback copied"), 0.0, "{c}");
    }
    one_per_packet("Guest-none", "rx", "page flips", "packets to the guest");
    assert_eq!(ops("Guest-copy", "rx", "page flips"), 0.0);
    assert!(
        ops("Guest-copy", "rx", "grant copies") >= ops("Guest-copy", "rx", "packets to the guest")
    );
    // Xen 2.0's driver domain receives each frame on a freshly zeroed
    // page (port_buffer = "page"), as the endpoint and for a guest it
    // flips pages to; a guest's that copies does not.
    for c in ["Xen-driver", "Guest-none"] {
        let zeroed = ops(c, "rx", "pages zeroed");
        assert!(zeroed >= 0.9, "{c}: {zeroed} pages zeroed per segment");
    }
    assert_eq!(ops("Guest-copy", "rx", "pages zeroed"), 0.0);
    // The host's inter-processor interrupts are counted around every flow,
    // native Linux's included: its frames to the clients are steered to
    // their core, which takes at least one.
    for r in records {
        for ipi in [
            "function-call IPIs",
            "TLB-shootdown IPIs",
            "rescheduling IPIs",
        ] {
            let v = r["ops_per_frame"][ipi].as_f64();
            assert!(
                v.is_some_and(|v| v >= 0.0),
                "{ipi} of {} {}: {v:?}",
                r["config"],
                r["case"]
            );
        }
    }
    assert!(ops("Linux", "tx", "function-call IPIs") > 0.0);
    assert!(table.contains("**Operations per 1448-byte segment on the wire"));
    assert!(
        table.contains("| rescheduling IPIs |")
            && table.contains("| Linux | tx | no virtualization |")
    );
    for heading in [
        "**Table 1: Network performance, unoptimized**",
        "**Figure 5: Contribution of individual transmit optimizations**",
        "**Figure 11: Receive in the driver domain's configurations**",
        "| Guest-none | 750 | 0.20 |",
    ] {
        assert!(table.contains(heading), "{heading} missing from\n{table}");
    }
    assert!(out.join("chart.svg").exists());
    assert_nothing_left();
}

/// Each NIC's rate in Gbit/s, from a machine line's "NIC(s) at 4440mbit each".
fn nic_gbps(machine: &str) -> f64 {
    let rate = machine
        .split("NIC(s) at ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no NIC rate in {machine}"));
    let rate: toolstack::topology::LinkRate = rate.parse().unwrap();
    rate.0 as f64 / 1e9
}
