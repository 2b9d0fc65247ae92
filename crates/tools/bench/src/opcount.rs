//! Operations per wire frame, exact, from counters: what the papers count
//! when they explain a cost (Menon 2006 §3–§5: hypercalls, grant maps and
//! unmaps, page flips, copies, notifications, pages zeroed). hv counts
//! every operation it does for each domain by name, and each batch once
//! more; netback counts its grant operations, ring batches and
//! notifications per vif; each port counts the pages it gave back to be
//! zeroed. `splitnet status --json` before and after a flow gives the
//! deltas, divided by the flow's frames on the wire.

use crate::harness::RunOptions;
use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The counters that matter, by the name the tables print.
pub type Counts = BTreeMap<String, f64>;

/// Reads the counts of `guest`'s first vif and of hv's operations for the
/// domains from a running splitnet.
pub fn snapshot(opts: &RunOptions, guest: &str) -> Result<Counts> {
    let json = crate::splitnet(&opts.exe, &opts.run_dir, &["status", "--json"])?;
    let doc: Value = serde_json::from_str(&json).context("reading `splitnet status --json`")?;
    Ok(counts(&doc, guest))
}

/// How often the domains publish their counters, at the longest (the
/// driver domain's housekeeping, twice a second), with room to spare.
const PUBLISHED_EVERY: Duration = Duration::from_millis(700);

/// [`snapshot`] once the counters have settled: the domains publish them
/// periodically, so right after a flow the last of it may not be in yet.
/// Settled means unchanged over a whole publishing period; gives up after
/// `limit` with what it last read.
pub fn settled(opts: &RunOptions, guest: &str, limit: Duration) -> Result<Counts> {
    let end = Instant::now() + limit;
    let mut last = snapshot(opts, guest)?;
    let mut since = Instant::now();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        let now = snapshot(opts, guest)?;
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= PUBLISHED_EVERY {
            break;
        }
    }
    Ok(last)
}

/// The counts in a status document (see [`snapshot`]).
pub fn counts(doc: &Value, guest: &str) -> Counts {
    let mut c = Counts::new();
    // hv counts each operation it does for a domain by name, whether the
    // request carried one (a control-socket call) or many (a batch on the
    // shared batch page, also counted once as "batch").
    let ops = |kind: &str, batches: bool| -> f64 {
        let doms = doc["domains"].as_array().into_iter().flatten();
        doms.filter(|d| d["kind"] == kind && (kind != "guest" || d["name"] == guest))
            .flat_map(|d| d["counters"]["ops"].as_object().into_iter().flatten())
            .filter(|(name, _)| (name.as_str() == "batch") == batches)
            .filter_map(|(_, n)| n.as_f64())
            .sum()
    };
    c.insert("hv operations, driver domain".into(), ops("driver", false));
    c.insert("hv batches, driver domain".into(), ops("driver", true));
    c.insert("hv operations, guest".into(), ops("guest", false));
    let zeroed = doc["ports"].as_array().into_iter().flatten();
    let zeroed = zeroed
        .filter_map(|p| p["counters"]["rx_pages_zeroed"].as_f64())
        .sum();
    c.insert("pages zeroed".into(), zeroed);
    let vif = doc["vifs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["guest"] == guest);
    let Some(v) = vif else {
        return c;
    };
    let n = |x: &Value| x.as_f64().unwrap_or(0.0);
    let grants = &v["counters"]["grant_ops"];
    for (kind, name) in [
        ("map", "grant maps"),
        ("unmap", "grant unmaps"),
        ("copy", "grant copies"),
        ("transfer", "page flips"),
        ("table_read", "grant table reads"),
    ] {
        c.insert(name.into(), n(&grants[kind]));
    }
    c.insert(
        "packets to the guest".into(),
        n(&v["counters"]["rx_packets"]),
    );
    c.insert(
        "packets from the guest".into(),
        n(&v["counters"]["tx_packets"]),
    );
    c.insert("netback ring batches".into(), n(&v["counters"]["batches"]));
    c.insert(
        "bytes netback copied".into(),
        n(&v["counters"]["tx_copied_bytes"]),
    );
    let sent = n(&v["counters"]["notifications_sent"]);
    c.insert("notifications to the guest".into(), sent);
    let got = n(&v["counters"]["notifications_received"]);
    c.insert("notifications from the guest".into(), got);
    c
}

/// The host's inter-processor interrupts, by the name the tables print and
/// the label `/proc/interrupts` gives them: a frame handed to another
/// core's receive (receive packet steering) or any other remote function
/// call, a TLB flush of an address space live on another core, and a
/// wake-up of a task on another core. Each is a trap on this host (under
/// KVM, a write of the APIC's interrupt command register), where the
/// papers' uniprocessors sent none.
pub const IPIS: [(&str, &str); 3] = [
    ("function-call IPIs", "CAL"),
    ("TLB-shootdown IPIs", "TLB"),
    ("rescheduling IPIs", "RES"),
];

/// Every core's count of each of [`IPIS`] now.
pub fn host_ipis() -> Result<Counts> {
    let text = std::fs::read_to_string("/proc/interrupts").context("reading /proc/interrupts")?;
    Ok(ipis_in(&text))
}

/// [`IPIS`] summed over the cores, from `/proc/interrupts`' text (a line
/// per source: its label, a count per core, then its description).
fn ipis_in(text: &str) -> Counts {
    let mut c = Counts::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(label) = words.next().and_then(|w| w.strip_suffix(':')) else {
            continue;
        };
        if let Some((name, _)) = IPIS.iter().find(|(_, l)| *l == label) {
            let sum: f64 = words.map_while(|w| w.parse::<u64>().ok()).sum::<u64>() as f64;
            c.insert((*name).to_string(), sum);
        }
    }
    c
}

/// Each count's growth from `before` to `after`, per frame of `frames`.
pub fn per_frame(before: &Counts, after: &Counts, frames: f64) -> Counts {
    if frames <= 0.0 {
        return Counts::new();
    }
    after
        .iter()
        .map(|(k, a)| {
            let b = before.get(k).copied().unwrap_or(0.0);
            (k.clone(), (a - b).max(0.0) / frames)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(maps: u64, batches: u64, drv_ops: u64) -> Value {
        json!({
            "domains": [
                {"name": "drv", "kind": "driver", "counters": {"ops": {"grant_map": drv_ops, "batch": 1}}},
                {"name": "guest1", "kind": "guest", "counters": {"ops": {"evtchn_bind": 2}}},
                {"name": "guest2", "kind": "guest", "counters": {"ops": {"evtchn_bind": 40}}},
            ],
            "ports": [{"domain": "drv", "counters": {"rx_pages_zeroed": maps * 2}}],
            "vifs": [
                {"guest": "guest2", "counters": {"grant_ops": {"map": 999}}},
                {"guest": "guest1", "counters": {"grant_ops": {"map": maps, "unmap": maps},
                 "batches": batches, "notifications_sent": 3, "notifications_received": 4,
                 "rx_packets": batches * 10}},
            ]
        })
    }

    #[test]
    fn counts_come_from_the_guests_vif_and_each_domains_requests() {
        let c = counts(&doc(10, 2, 5), "guest1");
        assert_eq!(c["grant maps"], 10.0);
        assert_eq!(c["grant unmaps"], 10.0);
        assert_eq!(c["page flips"], 0.0);
        assert_eq!(c["hv operations, driver domain"], 5.0);
        assert_eq!(c["hv batches, driver domain"], 1.0);
        assert_eq!(c["hv operations, guest"], 2.0, "guest2's are not guest1's");
        assert_eq!(c["notifications from the guest"], 4.0);
    }

    #[test]
    fn ipis_are_summed_over_the_cores_and_other_lines_ignored() {
        let text = "           CPU0       CPU1\n  24:    10    20   PCI-MSI  virtio\n\
                    RES:     490027     259722   Rescheduling interrupts\n\
                    CAL:    3321095    5180209   Function call interrupts\n\
                    TLB:     157693    1028987   TLB shootdowns\n";
        let c = ipis_in(text);
        assert_eq!(c["rescheduling IPIs"], 749749.0);
        assert_eq!(c["function-call IPIs"], 8501304.0);
        assert_eq!(c["TLB-shootdown IPIs"], 1186680.0);
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(ipis_in("garbage\n").is_empty());
    }

    #[test]
    fn per_frame_divides_the_growth_by_the_frames() {
        let (a, b) = (
            counts(&doc(10, 2, 5), "guest1"),
            counts(&doc(110, 52, 105), "guest1"),
        );
        let p = per_frame(&a, &b, 100.0);
        assert_eq!(p["grant maps"], 1.0);
        assert_eq!(p["pages zeroed"], 2.0);
        assert_eq!(p["netback ring batches"], 0.5);
        assert_eq!(p["packets to the guest"], 5.0);
        assert_eq!(p["hv operations, driver domain"], 1.0);
        assert_eq!(p["notifications to the guest"], 0.0);
        assert!(per_frame(&a, &b, 0.0).is_empty());
    }
}
