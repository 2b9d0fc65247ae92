//! `status`'s vhost-user vifs: what the toolstack declared (hv's
//! `vhost.<name>` facts) joined with what the driver domain serving each
//! publishes in its stats array `vhost` (features, rings, counters, drops,
//! refused connections). A field the driver domain does not publish is
//! shown as absent, never guessed.

use crate::vm::VhostVif;
use hv::Toolstack;
use serde_json::{json, Value};

/// The fields of a driver domain's `vhost` entry carried over as they are.
const STATS_FIELDS: [&str; 20] = [
    "connected",
    "kicks",
    "spurious_kicks",
    "kick_throttles",
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
    "spoofed",
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
        "socket_server": if v.vm_listens { "vm" } else { "splitnet" },
        "published": published.is_some(),
    });
    for k in STATS_FIELDS {
        e[k] = published.map(|p| p[k].clone()).unwrap_or(Value::Null);
    }
    e
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
            vm_listens: false,
        }
    }

    #[test]
    fn a_vm_vif_entry_carries_what_its_driver_domain_published() {
        let published = json!({
            "name": "vm1", "connected": true, "drops": {"no_rx_buffer": 2}, "kicks": 9,
        });
        let e = entry(&vm(), Some(1), Some(&published));
        assert_eq!(e["kind"], "vm");
        assert_eq!(e["bridge"], "xenbr0");
        assert_eq!(e["backend_domain"], 1);
        assert_eq!(e["published"], true);
        assert_eq!(e["drops"]["no_rx_buffer"], 2);
        assert_eq!(e["kicks"], 9);
        let e = entry(&vm(), None, None);
        assert_eq!(e["published"], false);
        assert_eq!(e["connected"], Value::Null);
    }
}
