//! `status`'s tunnels: each vxlan port's settings (hv's `vxlan.<driver>/
//! <ifname>` fact) joined with what the kernel and FRR in its driver
//! domain's namespace say now: the VTEPs its VXLAN device sends to and the
//! MACs behind each (`bridge -j fdb show dev vx<vni>`), and the BGP
//! sessions (`vtysh -N <namespace> -c 'show bgp l2vpn evpn summary json'`).

use crate::host::run;
use serde_json::{json, Value};

/// The `vxlan` object of port `ifname` of driver domain `drv`, if it is a
/// vxlan port.
pub(crate) fn collect(s: &hv::status::SystemStatus, drv: &str, ifname: &str) -> Option<Value> {
    let fact = s.info.get(&format!("vxlan.{drv}/{ifname}"))?;
    let mut v: Value = serde_json::from_str(fact).ok()?;
    let ns = s
        .domains
        .iter()
        .find(|d| d.name == drv)
        .and_then(|d| d.netns.clone());
    let configured: Vec<String> = v["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    let dev = v["device"].as_str().unwrap_or_default().to_string();
    let fdb = ns
        .as_deref()
        .and_then(|ns| run("bridge", &["-n", ns, "-j", "fdb", "show", "dev", &dev]).ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    v["peers"] = json!(peers_from_fdb(&fdb, &configured));
    let evpn = v["mode"] == "evpn";
    v["bgp"] = match ns.as_deref().filter(|_| evpn) {
        Some(ns) => {
            let cmd = "show bgp l2vpn evpn summary json";
            let out = run("vtysh", &["-N", ns, "-c", cmd]).unwrap_or_default();
            json!(bgp_sessions(
                &serde_json::from_str(&out).unwrap_or(Value::Null)
            ))
        }
        None => json!([]),
    };
    Some(v)
}

/// The VTEPs of a VXLAN device's FDB (`bridge -j fdb show dev vx<vni>`),
/// with the MACs it sends to each: the all-zero entries (where flooded
/// frames go) and learned or BGP-installed ones; `configured` peers are
/// listed even with no entry.
fn peers_from_fdb(fdb: &Value, configured: &[String]) -> Vec<Value> {
    let mut peers: Vec<(String, Vec<String>)> =
        configured.iter().map(|p| (p.clone(), Vec::new())).collect();
    for e in fdb.as_array().into_iter().flatten() {
        let (Some(dst), Some(mac)) = (e["dst"].as_str(), e["mac"].as_str()) else {
            continue;
        };
        let i = match peers.iter().position(|(p, _)| p == dst) {
            Some(i) => i,
            None => {
                peers.push((dst.to_string(), Vec::new()));
                peers.len() - 1
            }
        };
        if mac != "00:00:00:00:00:00" && !peers[i].1.iter().any(|m| m == mac) {
            peers[i].1.push(mac.to_string());
        }
    }
    peers
        .into_iter()
        .map(|(vtep, macs)| json!({"vtep": vtep, "macs": macs}))
        .collect()
}

/// The sessions of `show bgp l2vpn evpn summary json`: its `peers` object,
/// at the top or one level down.
fn bgp_sessions(summary: &Value) -> Vec<Value> {
    let peers = summary.get("peers").or_else(|| {
        summary
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
            .find_map(|x| x.get("peers"))
    });
    let Some(peers) = peers.and_then(Value::as_object) else {
        return Vec::new();
    };
    peers
        .iter()
        .map(|(peer, p)| {
            json!({
                "peer": peer,
                "state": p["state"],
                "up_for": p["peerUptime"],
                "prefixes_received": p["pfxRcd"],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_come_from_the_flood_list_and_the_macs_behind_each() {
        let fdb: Value = serde_json::from_str(
            r#"[{"mac":"00:00:00:00:00:00","dst":"10.200.2.3","flags":[],"state":"permanent"},
                {"mac":"aa:bb:cc:00:00:01","dst":"10.200.2.3","flags":["extern_learn"],"state":""},
                {"mac":"aa:bb:cc:00:00:02","dst":"10.200.4.3","flags":[],"state":""},
                {"mac":"aa:bb:cc:00:00:03","master":"kbr100","flags":[],"state":"permanent"}]"#,
        )
        .unwrap();
        let got = peers_from_fdb(&fdb, &["10.200.3.3".into(), "10.200.2.3".into()]);
        assert_eq!(
            json!(got),
            json!([
                {"vtep": "10.200.3.3", "macs": []},
                {"vtep": "10.200.2.3", "macs": ["aa:bb:cc:00:00:01"]},
                {"vtep": "10.200.4.3", "macs": ["aa:bb:cc:00:00:02"]},
            ])
        );
    }

    #[test]
    fn bgp_sessions_are_read_from_the_summary() {
        let s: Value = serde_json::from_str(
            r#"{"routerId":"10.200.1.3","as":65000,"peers":{"10.200.2.3":{"remoteAs":65000,"peerUptime":"00:00:12","pfxRcd":3,"state":"Established"}},"totalPeers":1}"#,
        )
        .unwrap();
        assert_eq!(
            json!(bgp_sessions(&s)),
            json!([{"peer": "10.200.2.3", "state": "Established", "up_for": "00:00:12", "prefixes_received": 3}])
        );
        assert!(bgp_sessions(&Value::Null).is_empty());
    }
}
