//! `status`'s vhost-user vifs: what the toolstack declared (hv's
//! `vhost.<name>` facts) joined with what the driver domain serving each
//! publishes in its stats array `vhost` (features, rings, counters, drops,
//! refused connections). A field the driver domain does not publish is
//! shown as absent, never guessed.

use crate::vm::VhostVif;
use hv::Toolstack;
use serde_json::{json, Value};

/// The fields of a driver domain's `vhost` entry carried over as they are.
const STATS_FIELDS: [&str; 17] = [
    "connected",
    "kicks",
    "calls",
    "disconnects",
    "ignored_messages",
    "memory_sealed",
    "features",
    "feature_names",
    "protocol_features",
    "rings",
    "rx_packets",
    "rx_bytes",
    "tx_packets",
    "tx_bytes",
    "drops",
    "refused",
    "listening",
];

/// Every vhost-user vif hv listens for, with its driver domain's view.
pub(crate) fn collect(ts: &mut Toolstack, s: &hv::status::SystemStatus) -> Vec<Value> {
    let mut out = Vec::new();
    for (k, v) in &s.info {
        let Some(vif) = VhostVif::from_info(k, v) else {
            continue;
        };
        let drv = s.domains.iter().find(|d| d.name == vif.backend);
        let published = drv.and_then(|d| {
            let doc = ts
                .store_read(&format!("/local/domain/{}/splitnet/stats", d.id))
                .ok()?;
            let doc: Value = serde_json::from_str(&doc).ok()?;
            doc["vhost"]
                .as_array()?
                .iter()
                .find(|x| x["name"] == vif.name.as_str())
                .cloned()
        });
        out.push(entry(&vif, drv.map(|d| d.id), published.as_ref()));
    }
    out
}

/// One vif's entry: the declaration, then whatever the driver domain published.
fn entry(v: &VhostVif, backend_id: Option<u16>, published: Option<&Value>) -> Value {
    let mut e = json!({
        "name": v.name,
        "kind": if v.guest { "guest" } else { "vm" },
        "backend_name": v.backend,
        "backend_domain": backend_id,
        "socket": v.socket.display().to_string(),
        "mac": v.mac,
        "bridge": v.bridge(),
        "vlan": v.vlan,
        "published": published.is_some(),
    });
    for k in STATS_FIELDS {
        e[k] = published.map(|p| p[k].clone()).unwrap_or(Value::Null);
    }
    e
}

/// `k=v` pairs of a JSON object, or `-`.
pub(crate) fn pairs(v: &Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "-".into())
}

/// A number, or `-` when absent.
fn num(v: &Value) -> String {
    v.as_u64().map_or("-".into(), |n| n.to_string())
}

/// The lines plain `status` prints for one vhost-user vif.
pub(crate) fn lines(v: &Value) -> Vec<String> {
    let s = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    let vlan = v["vlan"]
        .as_u64()
        .map(|n| format!(" vlan {n}"))
        .unwrap_or_default();
    let connected = match v["connected"].as_bool() {
        Some(true) => "connected",
        Some(false) => "not connected",
        None => "state unknown",
    };
    let mut out = vec![format!(
        "  {} ({}) <-> {} ({}) on {}{vlan}: socket {}, {connected}",
        s("name"),
        s("kind"),
        s("backend_name"),
        s("mac"),
        s("bridge"),
        s("socket"),
    )];
    if v["published"] != true {
        out.push(format!(
            "    {} publishes nothing for it yet",
            s("backend_name")
        ));
        return out;
    }
    let names: Vec<&str> = v["feature_names"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push(format!(
        "    features {} ({}), protocol features {}",
        v["features"].as_str().unwrap_or("-"),
        if names.is_empty() {
            "-".into()
        } else {
            names.join(" ")
        },
        v["protocol_features"].as_str().unwrap_or("-")
    ));
    let rings: Vec<String> = v["rings"]
        .as_array()
        .map(|a| a.iter().map(ring).collect())
        .unwrap_or_default();
    if !rings.is_empty() {
        out.push(format!("    rings: {}", rings.join("; ")));
    }
    out.push(format!(
        "    tx {} pkts {} B, rx {} pkts {} B; drops: {}; refused: {}",
        num(&v["tx_packets"]),
        num(&v["tx_bytes"]),
        num(&v["rx_packets"]),
        num(&v["rx_bytes"]),
        pairs(&v["drops"]),
        pairs(&v["refused"])
    ));
    out.push(format!(
        "    kicks {}, calls {}, disconnects {}, ignored messages {}, memory sealed {}",
        num(&v["kicks"]),
        num(&v["calls"]),
        num(&v["disconnects"]),
        num(&v["ignored_messages"]),
        v["memory_sealed"]
            .as_bool()
            .map_or("-", |b| if b { "yes" } else { "no" })
    ));
    // Names and reasons come from the driver domain: no control character
    // reaches the terminal.
    out.iter().map(|l| printable(l)).collect()
}

/// `s` with each control character (what a domain could send a terminal)
/// shown as `?`.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn ring(r: &Value) -> String {
    format!(
        "{} size {} {} avail {} used {}",
        num(&r["index"]),
        num(&r["size"]),
        if r["enabled"] == true {
            "enabled"
        } else {
            "disabled"
        },
        num(&r["next_avail"]),
        num(&r["next_used"])
    )
}

/// Plain `status`'s VM VIFS section (nothing without a vhost-user vif).
pub(crate) fn print(vifs: &[Value]) {
    if vifs.is_empty() {
        return;
    }
    println!("\nVM VIFS (vhost-user)");
    for v in vifs {
        for l in lines(v) {
            println!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn vm() -> VhostVif {
        VhostVif {
            name: "vm1".into(),
            backend: "drv".into(),
            socket: PathBuf::from("/run/splitnet/vm1.sock"),
            mac: "52:54:00:12:34:56".into(),
            bridge: None,
            vlan: Some(20),
            guest: false,
        }
    }

    #[test]
    fn a_vm_vif_shows_what_its_driver_domain_published() {
        let published = json!({
            "name": "vm1", "connected": true, "features": "0x130000000",
            "feature_names": ["VERSION_1", "MRG_RXBUF"], "protocol_features": "0x202",
            "rings": [{"index": 0, "size": 256, "enabled": true, "next_avail": 7, "next_used": 7},
                      {"index": 1, "size": 256, "enabled": false, "next_avail": 0, "next_used": 0}],
            "rx_packets": 3, "rx_bytes": 300, "tx_packets": 4, "tx_bytes": 400,
            "drops": {"no_rx_buffer": 2}, "refused": {"unknown_message": 1},
            "kicks": 9, "calls": 8, "disconnects": 1, "ignored_messages": 2, "memory_sealed": true,
        });
        let e = entry(&vm(), Some(1), Some(&published));
        assert_eq!(e["kind"], "vm");
        assert_eq!(e["bridge"], "xenbr0");
        assert_eq!(e["drops"]["no_rx_buffer"], 2);
        let l = lines(&e).join("\n");
        for needle in [
            "vm1 (vm) <-> drv (52:54:00:12:34:56) on xenbr0 vlan 20: socket /run/splitnet/vm1.sock, connected",
            "features 0x130000000 (VERSION_1 MRG_RXBUF), protocol features 0x202",
            "rings: 0 size 256 enabled avail 7 used 7; 1 size 256 disabled avail 0 used 0",
            "tx 4 pkts 400 B, rx 3 pkts 300 B; drops: no_rx_buffer=2; refused: unknown_message=1",
            "kicks 9, calls 8, disconnects 1, ignored messages 2, memory sealed yes",
        ] {
            assert!(l.contains(needle), "{l}\nlacks {needle}");
        }
        let evil = json!({"name": "vm1", "refused": {"\u{1b}[2J": 1}});
        let l = lines(&entry(&vm(), Some(1), Some(&evil))).join("\n");
        assert!(
            l.contains("refused: ?[2J=1") && !l.contains('\u{1b}'),
            "{l}"
        );
    }

    #[test]
    fn missing_stats_or_fields_are_shown_as_absent() {
        let l = lines(&entry(&vm(), None, None)).join("\n");
        assert!(l.contains("state unknown"), "{l}");
        assert!(l.contains("drv publishes nothing for it yet"), "{l}");
        let l = lines(&entry(&vm(), Some(1), Some(&json!({"name": "vm1"})))).join("\n");
        assert!(l.contains("features - (-), protocol features -"), "{l}");
        assert!(
            l.contains("tx - pkts - B, rx - pkts - B; drops: -; refused: -"),
            "{l}"
        );
        let l = lines(&entry(
            &vm(),
            Some(1),
            Some(&json!({"rings": [{"index": "x"}]})),
        ))
        .join("\n");
        assert!(l.contains("rings: - size - disabled avail - used -"), "{l}");
    }
}
