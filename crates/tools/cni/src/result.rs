//! The ADD result (CNI spec §5, "ADD Success"), in the version the
//! configuration asked for, and what CHECK reads back from it.

use crate::config::{Env, NetConf};
use crate::ipam::Lease;
use serde_json::{json, Value};

/// The result of an ADD: the host-side vif and the container's interface,
/// the lease's addresses on the latter, its routes and DNS; appended to a
/// previous plugin's result when chained after one.
pub fn of_add(conf: &NetConf, env: &Env, made: &Value, lease: &Lease) -> Value {
    let mut r = conf
        .prev_result
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut interfaces = r["interfaces"].as_array().cloned().unwrap_or_default();
    interfaces.push(json!({"name": made["vif"], "mac": made["mac"]}));
    interfaces.push(json!({
        "name": env.ifname,
        "mac": made["mac"],
        "mtu": made["mtu"],
        "sandbox": env.netns,
    }));
    let ours = interfaces.len() - 1;
    let mut ips = r["ips"].as_array().cloned().unwrap_or_default();
    for ip in &lease.ips {
        let mut ip = ip.clone();
        ip["interface"] = json!(ours);
        if conf.version == "0.4.0" {
            let v6 = ip["address"].as_str().is_some_and(|a| a.contains(':'));
            ip["version"] = json!(if v6 { "6" } else { "4" });
        }
        ips.push(ip);
    }
    let mut routes = r["routes"].as_array().cloned().unwrap_or_default();
    routes.extend(lease.routes.iter().cloned());
    r["cniVersion"] = json!(conf.version);
    r["interfaces"] = Value::Array(interfaces);
    r["ips"] = Value::Array(ips);
    r["routes"] = Value::Array(routes);
    let dns = lease.dns.clone().or_else(|| conf.raw.get("dns").cloned());
    if let Some(d) = dns.filter(|d| d.as_object().is_some_and(|o| !o.is_empty())) {
        r["dns"] = d;
    }
    r
}

/// From a previous result: the MAC of interface `ifname` in `netns`, its
/// addresses and the result's routes (CHECK's expectations); None when the
/// result does not list that interface.
pub fn ours_in(
    prev: &Value,
    ifname: &str,
    netns: &str,
) -> Option<(Option<String>, Vec<Value>, Vec<Value>)> {
    let ifaces = prev["interfaces"].as_array()?;
    let index = ifaces
        .iter()
        .position(|i| i["name"] == ifname && i["sandbox"] == netns)?;
    let mac = ifaces[index]["mac"].as_str().map(str::to_string);
    let ips = prev["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|ip| ip["interface"].as_u64() == Some(index as u64))
        .cloned()
        .collect();
    let routes = prev["routes"].as_array().cloned().unwrap_or_default();
    Some((mac, ips, routes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(version: &str) -> NetConf {
        let text = format!(r#"{{"cniVersion": "{version}", "name": "sn", "type": "splitnet"}}"#);
        NetConf::parse(text.as_bytes()).unwrap()
    }

    fn env() -> Env {
        Env {
            container_id: "c1".into(),
            netns: "/run/netns/c1".into(),
            ifname: "eth0".into(),
            ..Env::default()
        }
    }

    #[test]
    fn a_result_lists_the_vif_and_the_sandbox_interface_with_the_lease() {
        let made = json!({"vif": "vif7.0", "mac": "00:16:3e:5f:00:01", "mtu": 1500});
        let lease = Lease {
            ips: vec![json!({"address": "10.88.0.2/16", "gateway": "10.88.0.1"})],
            routes: vec![json!({"dst": "0.0.0.0/0"})],
            dns: None,
        };
        let r = of_add(&conf("1.1.0"), &env(), &made, &lease);
        assert_eq!(r["cniVersion"], "1.1.0");
        assert_eq!(r["interfaces"][0]["name"], "vif7.0");
        assert_eq!(r["interfaces"][1]["sandbox"], "/run/netns/c1");
        assert_eq!(r["ips"][0]["interface"], 1);
        assert!(r["ips"][0].get("version").is_none());
        let (mac, ips, routes) = ours_in(&r, "eth0", "/run/netns/c1").unwrap();
        assert_eq!(mac.as_deref(), Some("00:16:3e:5f:00:01"));
        assert_eq!((ips.len(), routes.len()), (1, 1));
        assert!(ours_in(&r, "eth1", "/run/netns/c1").is_none());
        let old = of_add(&conf("0.4.0"), &env(), &made, &lease);
        assert_eq!(old["ips"][0]["version"], "4");
    }
}
