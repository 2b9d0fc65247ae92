//! When a topology is up: every domain has said hello, every vif is
//! Connected at both ends and its guest's interface is up with its
//! addresses (netfront makes the TAP only once connected), every emulated
//! NIC runs and is bridged, every wire host's port is open. `splitnet up` waits for it, and hv, run as a
//! service, tells its service manager `READY=1` then (`crate::notify`).

use crate::topology::Topology;
use serde_json::Value;

/// What of `topo` is not up yet in status `v`: domains that have not said
/// hello, vifs not Connected at both ends or whose guest interface is not
/// up and addressed yet, emulated NICs not running or not bridged. An error names a vif whose driver domain gave it up (a quota
/// ran out): it will not connect however long one waits.
pub fn waiting_for(topo: &Topology, v: &Value) -> Result<Vec<String>, String> {
    let p = progress(topo, v);
    match p.given_up.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(p.waiting),
    }
}

/// What is still to come up, and what never will.
#[derive(Debug, Default, PartialEq)]
pub struct Progress {
    /// Not up yet.
    pub waiting: Vec<String>,
    /// Vifs their driver domain gave up, each with the reason.
    pub given_up: Vec<String>,
}

/// Status `v` against `topo`: what [`waiting_for`] waits for, and every vif
/// given up (a service is up without them, degraded: what a domain writes
/// in the store must not stop hv).
pub fn progress(topo: &Topology, v: &Value) -> Progress {
    let mut given_up = Vec::new();
    let waiting = pending(topo, v, &mut given_up);
    Progress { waiting, given_up }
}

fn pending(topo: &Topology, v: &Value, given_up: &mut Vec<String>) -> Vec<String> {
    let doms = v["domains"].as_array().cloned().unwrap_or_default();
    let vifs = v["vifs"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<String> = topo
        .hv_domains()
        .filter(|d| {
            !doms
                .iter()
                .any(|x| x["name"] == d.name.as_str() && x["connected"] == true)
        })
        .map(|d| format!("domain {}", d.name))
        .collect();
    for want in topo.vifs() {
        let found = vifs.iter().find(|x| {
            x["guest"] == want.guest.as_str()
                && x["handle"] == want.handle
                && x["backend_name"] == want.backend.as_str()
        });
        let name = format!("vif {} of {} on {}", want.handle, want.guest, want.backend);
        let Some(x) = found else {
            out.push(format!("{name} (not set up)"));
            continue;
        };
        let (fe, be) = (&x["frontend_state"], &x["backend_state"]);
        if let (Some(why), "Closed") = (x["disconnect_reason"].as_str(), be.as_str().unwrap_or(""))
        {
            given_up.push(format!("{name}: {} gave it up: {why}", want.backend));
            continue;
        }
        if fe != "Connected" || be != "Connected" {
            out.push(format!(
                "{name} (frontend {}, backend {})",
                fe.as_str().unwrap_or("?"),
                be.as_str().unwrap_or("?")
            ));
            continue;
        }
        let want_addrs = guest_addresses(topo, &want.guest, want.handle);
        let ifs = doms
            .iter()
            .find(|d| d["name"] == want.guest.as_str())
            .and_then(|d| d["interfaces"].as_array().cloned())
            .unwrap_or_default();
        let ifname = format!("eth{}", want.handle);
        if !interface_ready(&ifs, &ifname, &want_addrs) {
            out.push(format!("{name} ({ifname} of {} not up yet)", want.guest));
        }
    }
    // An emulated NIC is up once its guest runs its driver (its counters
    // are in) and its driver domain bridges its VMNet port.
    let ports = v["ports"].as_array().cloned().unwrap_or_default();
    for e in topo.emulated_nics() {
        let running = doms
            .iter()
            .any(|d| d["name"] == e.guest.as_str() && d["emulated_nic"]["guest"].is_object());
        let bridged = ports.iter().any(|p| {
            p["domain"] == e.backend.as_str()
                && p["name"] == e.host_ifname().as_str()
                && p["open"] == true
        });
        if !(running && bridged) {
            out.push(format!("the {} NIC of {}", e.kind.as_str(), e.guest));
        }
    }
    // A wire host is reachable once its driver domain has opened the port
    // that leads to it (until then the first frames to it are lost).
    for w in &topo.wires {
        let peer = format!("{}:{}", w.name, crate::host::WIRE_IF);
        let open = ports.iter().any(|p| {
            p["domain"] == w.driver.as_str() && p["peer"] == peer.as_str() && p["open"] == true
        });
        if !open {
            out.push(format!("the port of {} to wire host {}", w.driver, w.name));
        }
    }
    out
}

/// The addresses the topology gives guest `guest`'s vif `handle`: its
/// `address` and `ipv6` on its first vif (netfront puts them there), none
/// on the others.
pub fn guest_addresses(topo: &Topology, guest: &str, handle: u32) -> Vec<String> {
    match topo.domain(guest) {
        Some(d) if handle == 0 => [&d.address, &d.ipv6]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether interface `name` of `ifs` (one namespace's interfaces, as
/// `status` lists them) is there, not down, and holds every address in
/// `want` (CIDR, compared as addresses, not as text). Netfront makes a
/// vif's TAP, brings it up and addresses it only once both ends are
/// Connected: until then the guest has no route to send on.
pub fn interface_ready(ifs: &[Value], name: &str, want: &[String]) -> bool {
    let holds = |i: &Value, w: &str| {
        i["addresses"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x.as_str().is_some_and(|x| same_cidr(x, w)))
        })
    };
    ifs.iter()
        .any(|i| i["name"] == name && i["state"] != "DOWN" && want.iter().all(|w| holds(i, w)))
}

/// `a` and `b` name one address and prefix length ("fd77::1/64" and
/// "fd77:0::1/64" do).
fn same_cidr(a: &str, b: &str) -> bool {
    let parse = |c: &str| {
        let (ip, len) = c.split_once('/')?;
        Some((
            ip.parse::<std::net::IpAddr>().ok()?,
            len.parse::<u8>().ok()?,
        ))
    };
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn up_names_what_it_waits_for_and_stops_on_a_vif_given_up() {
        let t = Topology::default_topology();
        let vif = |guest: &str, be: &str, reason: Option<&str>| {
            json!({"guest": guest, "handle": 0, "backend_name": "drv",
                   "frontend_state": "Connected", "backend_state": be,
                   "disconnect_reason": reason})
        };
        // A guest's eth0 up with the default topology's addresses for it.
        let eth0 = |name: &str| {
            let n = if name == "guest1" { 1 } else { 2 };
            let addrs = [format!("10.77.0.{n}/24"), format!("fd77:0::{n}/64")];
            json!([{"name": "eth0", "state": "UNKNOWN", "addresses": addrs}])
        };
        let dom =
            |name: &str, up: bool| json!({"name": name, "connected": up, "interfaces": eth0(name)});
        let v = json!({
            "domains": [dom("drv", true), dom("guest1", true), dom("guest2", false)],
            "vifs": [vif("guest1", "InitWait", None)],
        });
        assert_eq!(
            waiting_for(&t, &v).unwrap(),
            [
                "domain guest2",
                "vif 0 of guest1 on drv (frontend Connected, backend InitWait)",
                "vif 0 of guest2 on drv (not set up)",
                "the port of drv to wire host wire",
            ]
        );
        let v = json!({
            "domains": [dom("drv", true), dom("guest1", true), dom("guest2", true)],
            "vifs": [vif("guest1", "Connected", None), vif("guest2", "Closed", Some("quota: x"))],
        });
        assert_eq!(
            waiting_for(&t, &v).unwrap_err(),
            "vif 0 of guest2 on drv: drv gave it up: quota: x"
        );
        // hv, as a service, is up without the vif given up, and says so.
        let port = json!({"domain": "drv", "name": "peth0", "peer": "wire:eth0", "open": true});
        let mut degraded = v.clone();
        degraded["ports"] = json!([port]);
        assert_eq!(
            progress(&t, &degraded),
            Progress {
                waiting: vec![],
                given_up: vec!["vif 0 of guest2 on drv: drv gave it up: quota: x".into()],
            }
        );
        // Every vif connected: up waits on until the wire host's port is open.
        let port = |open: bool| json!({"domain": "drv", "name": "peth0", "peer": "wire:eth0", "open": open});
        let v = json!({
            "domains": [dom("drv", true), dom("guest1", true), dom("guest2", true)],
            "vifs": [vif("guest1", "Connected", None), vif("guest2", "Connected", None)],
            "ports": [port(false)],
        });
        assert_eq!(
            waiting_for(&t, &v).unwrap(),
            ["the port of drv to wire host wire"]
        );
        let v = json!({
            "domains": [dom("drv", true), dom("guest1", true), dom("guest2", true)],
            "vifs": [vif("guest1", "Connected", None), vif("guest2", "Connected", None)],
            "ports": [port(true)],
        });
        assert!(waiting_for(&t, &v).unwrap().is_empty());
        // Both ends Connected, but netfront has not addressed eth0 yet.
        let mut early = v.clone();
        early["domains"][2]["interfaces"][0]["addresses"] = json!(["10.77.0.2/24"]);
        assert_eq!(
            waiting_for(&t, &early).unwrap(),
            ["vif 0 of guest2 on drv (eth0 of guest2 not up yet)"]
        );
        early["domains"][2]["interfaces"] = json!([]);
        assert_eq!(waiting_for(&t, &early).unwrap().len(), 1);
    }

    #[test]
    fn an_interface_is_ready_up_with_every_address() {
        let i =
            |state: &str| json!([{"name": "eth1", "state": state, "addresses": ["fd77::9/64"]}]);
        let want = vec!["fd77:0::9/64".to_string()];
        assert!(interface_ready(
            i("UNKNOWN").as_array().unwrap(),
            "eth1",
            &want
        ));
        assert!(!interface_ready(
            i("DOWN").as_array().unwrap(),
            "eth1",
            &want
        ));
        assert!(!interface_ready(i("UP").as_array().unwrap(), "eth0", &want));
        assert!(!interface_ready(
            i("UP").as_array().unwrap(),
            "eth1",
            &["fd77::9/48".into()]
        ));
        assert!(interface_ready(i("UP").as_array().unwrap(), "eth1", &[]));
    }
}
