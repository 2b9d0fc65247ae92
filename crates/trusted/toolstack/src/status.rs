//! `splitnet status`: hv's view plus live interface data from each namespace.

use crate::host;
use crate::host::socket_path;
use abi::offloads::Caps;
use anyhow::{anyhow, Result};
use hv::ioreq::{HvmSnapshot, STAGES};
use hv::Toolstack;
use serde_json::{json, Value};
use std::path::Path;

/// Interfaces of namespace `ns`: `[{name, state, mac, addresses: [...]}]`.
pub(crate) fn interfaces(ns: &str) -> Vec<Value> {
    let Ok(out) = host::ip_in(ns, &["-j", "addr", "show"]) else {
        return Vec::new();
    };
    let Ok(Value::Array(links)) = serde_json::from_str::<Value>(&out) else {
        return Vec::new();
    };
    links
        .iter()
        .map(|l| {
            let addrs: Vec<String> = l["addr_info"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| {
                            Some(format!(
                                "{}/{}",
                                x["local"].as_str()?,
                                x["prefixlen"].as_u64()?
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "name": l["ifname"],
                "state": l["operstate"],
                "mac": l["address"],
                "mtu": l["mtu"],
                "addresses": addrs,
            })
        })
        .collect()
}

fn addresses(ifs: &[Value]) -> Vec<String> {
    ifs.iter()
        .filter(|i| i["name"] != "lo")
        .flat_map(|i| {
            let name = i["name"].as_str().unwrap_or("?").to_string();
            i["addresses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |a| a.as_str().map(|a| format!("{name}:{a}")))
        })
        .collect()
}

/// Xen's name for a XenbusState number.
fn state_name(v: &str) -> String {
    v.trim()
        .parse::<abi::xenbus::XenbusState>()
        .map(|s| s.name().to_string())
        .unwrap_or_else(|_| {
            if v.is_empty() {
                "gone".into()
            } else {
                format!("invalid({v})")
            }
        })
}

/// The offloads the toolstack chose for a vif (`splitnet-offload`).
fn configured_offloads(read: &mut impl FnMut(String) -> String, be: &str) -> Caps {
    Caps::parse(&read(format!("{be}/{}", abi::xenbus::keys::OFFLOAD))).unwrap_or(Caps::NONE)
}

/// The offloads a vif uses, each as both ends negotiated it (Menon 2006
/// §3): chosen by the toolstack, offered by the backend and taken by the
/// frontend. All off until the frontend has published its keys.
fn negotiated_offloads(read: &mut impl FnMut(String) -> String, fe: &str, be: &str) -> Value {
    let mut key = |p: String| Some(read(p)).filter(|v| !v.is_empty());
    let c = if key(format!("{fe}/{}", abi::xenbus::keys::FEATURE_SG)).is_none() {
        Caps::NONE
    } else {
        let offer = Caps::from_backend(|k| key(format!("{be}/{k}")));
        let taken = Caps::from_frontend(|k| key(format!("{fe}/{k}")));
        configured_offloads(read, be).and(offer).and(taken)
    };
    json!({"sg": c.sg, "csum": c.csum, "csum6": c.csum6, "tso4": c.tso4, "tso6": c.tso6, "uso": c.uso})
}

/// Every vif hv knows of, with both ends' state, features and counters.
fn vifs(ts: &mut Toolstack, s: &hv::status::SystemStatus) -> Vec<Value> {
    let mut out = Vec::new();
    for (k, v) in &s.info {
        let Some(name) = k.strip_prefix("vif.") else {
            continue;
        };
        let (guest, handle) = name.split_once('/').unwrap_or((name, "0"));
        let Some((fe, be)) = v.split_once('|') else {
            continue;
        };
        out.push(vif(ts, s, guest, handle, fe, be));
    }
    out
}

/// One vif's document, from its frontend (`fe`) and backend (`be`)
/// directories in the store and the domains hv reports.
fn vif(
    ts: &mut Toolstack,
    s: &hv::status::SystemStatus,
    guest: &str,
    handle: &str,
    fe: &str,
    be: &str,
) -> Value {
    let mut read = |p: String| ts.store_read(&p).unwrap_or_default();
    let features = backend_features(&mut read, be);
    let BackendStats {
        counters: stats,
        ring,
        lro,
        queue,
    } = backend_stats(&mut read, fe, be);
    let fe_stats: Value = serde_json::from_str(&read(format!("{fe}/stats"))).unwrap_or(Value::Null);
    json!({
        "guest": guest,
        "handle": handle.parse::<u32>().unwrap_or(0),
        "vif": Some(read(format!("{be}/{}", abi::xenbus::keys::VIFNAME)))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| abi::xenbus::vif_name(be)),
        "backend_domain": be.split('/').nth(3),
        "backend_name": be
            .split('/')
            .nth(3)
            .and_then(|id| s.domains.iter().find(|d| d.id.to_string() == id))
            .map(|d| d.name.as_str()),
        "frontend": fe,
        "backend": be,
        "frontend_state": state_name(&read(format!("{fe}/state"))),
        "backend_state": state_name(&read(format!("{be}/state"))),
        "mac": read(format!("{be}/mac")),
        "rx_mode": read(format!("{be}/{}", abi::xenbus::keys::RX_MODE)),
        "tx_mode": read(format!("{be}/{}", abi::xenbus::keys::TX_MODE)),
        "grants": read(format!("{be}/{}", abi::xenbus::keys::GRANTS)),
        "offload": configured_offloads(&mut read, be).any(),
        "offloads": negotiated_offloads(&mut read, fe, be),
        "lro": lro,
        "request_rx_copy": read(format!("{fe}/request-rx-copy")) == "1",
        "features": features,
        "options": vif_options(&mut read, be),
        "disconnect_reason": Some(read(format!("{be}/{}", abi::xenbus::keys::DISCONNECT_REASON))).filter(|r| !r.is_empty()),
        "counters": stats,
        "ring": ring,
        "queue": queue,
        "frontend_counters": fe_stats["counters"],
        "grant_track": fe_stats["grant_track"],
        "guest_loop": guest_loop(&fe_stats),
    })
}

/// The features netback advertised, each true or false.
fn backend_features(
    read: &mut impl FnMut(String) -> String,
    be: &str,
) -> serde_json::Map<String, Value> {
    [
        "feature-sg",
        "feature-gso-tcpv4",
        "feature-gso-tcpv6",
        "feature-rx-copy",
        "feature-rx-flip",
        "feature-split-event-channels",
    ]
    .iter()
    .map(|f| (f.to_string(), Value::Bool(read(format!("{be}/{f}")) == "1")))
    .collect()
}

/// netback's `stats` document, taken apart: the counters, and the ring,
/// LRO and queue sections that the status shows beside them.
struct BackendStats {
    counters: Value,
    ring: Value,
    lro: Value,
    queue: Value,
}

/// Reads netback's stats for the vif and takes out its ring and queue
/// sections, and where LRO runs: in the guest, or in the driver with
/// whether netback could turn it on.
fn backend_stats(read: &mut impl FnMut(String) -> String, fe: &str, be: &str) -> BackendStats {
    let mut stats: Value =
        serde_json::from_str(&read(format!("{be}/stats"))).unwrap_or(Value::Null);
    let mut take = |k: &str| stats.as_object_mut().and_then(|m| m.remove(k));
    let ring = take("ring").unwrap_or(Value::Null);
    let lro = match (
        read(format!("{fe}/{}", abi::xenbus::keys::LRO)),
        read(format!("{be}/{}", abi::xenbus::keys::LRO)),
    ) {
        (g, _) if g == "guest" => json!({"where": "guest", "on": true}),
        (_, d) if d == "driver" => take("lro").unwrap_or_else(|| json!({"where": "driver"})),
        _ => Value::Null,
    };
    let queue = take("queue").unwrap_or(Value::Null);
    BackendStats {
        counters: stats,
        ring,
        lro,
        queue,
    }
}

/// The vif's data-path options as the toolstack wrote them (`ip`, `rate`,
/// `mtu`, `vlan`, `bridge`; null when absent).
fn vif_options(read: &mut impl FnMut(String) -> String, be: &str) -> Value {
    let mut get = |k: &str| Some(read(format!("{be}/{k}"))).filter(|v| !v.is_empty());
    use abi::xenbus::keys;
    json!({
        "ip": get(keys::IP),
        "rate": get(keys::RATE),
        "mtu": get(keys::MTU),
        "vlan": get(keys::VLAN),
        "bridge": get(keys::BRIDGE),
    })
}

/// CPU time, kernel time included, of the processes in a domain's cgroup
/// (its directory as hv reports it, in whichever hierarchy it is); with
/// none (domains tracked by pid), of its process and the children it reaped.
fn cpu_seconds(cgroup: Option<&str>, pid: Option<i32>) -> Option<f64> {
    let used = match cgroup {
        Some(dir) => crate::cgroup::Cgroup::at(vec![dir.into()]).cpu_usage()?,
        None => crate::cgroup::proc_cpu(pid?)?,
    };
    Some(used.as_secs_f64())
}

/// Builds the JSON document `status --json` prints.
pub fn collect(rd: &Path) -> Result<Value> {
    collect_with(rd, true)
}

/// The same document; without `interfaces`, the domains' and hosts'
/// interfaces and addresses are left empty (saves an `ip` run per
/// namespace when only counters are wanted).
pub fn collect_with(rd: &Path, interfaces: bool) -> Result<Value> {
    let ifs_of = |ns: &str| {
        if interfaces {
            self::interfaces(ns)
        } else {
            Vec::new()
        }
    };
    let mut ts = Toolstack::connect(&socket_path(rd)).map_err(|e| anyhow!("{e}"))?;
    let s = ts.status().map_err(|e| anyhow!("{e}"))?;
    let vif_list = vifs(&mut ts, &s);
    let vhost_vifs = crate::vhost_status::collect(&mut ts, &s);
    let domains: Vec<Value> = s
        .domains
        .iter()
        .map(|d| domain_entry(&mut ts, &s, d, &ifs_of))
        .collect();
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    wire_host(&s, &ifs_of, &mut hosts, &mut ports);
    let uplinks = uplinks(&s, &mut ports);
    let bridges = driver_bridges(&mut ts, &s, &mut ports);
    Ok(json!({
        "uplinks": uplinks,
        "hv_pid": s.hv_pid,
        // The last upgrade of hv in place: "<n> ok <µs> us: …", "<n> rolled
        // back: …" or "<n> failed: …" (`crate::handover`).
        "hv_upgrade": s.info.get("hv_upgrade"),
        // The last start of hv that adopted the domains of one that died
        // (`crate::guardian`).
        "hv_recovery": s.info.get("hv_recovery"),
        // What became of an apply the hv before that one died in
        // (`Supervisor::finish_interrupted`).
        "apply_interrupted": s.info.get("apply_interrupted"),
        "host": crate::host::instance(),
        "topology": s.info.get("topology"),
        // Without root (docs/ARCHITECTURE.md, "Without root"), and how the
        // domains' CPU is accounted where no cgroup is writable.
        "rootless": s.info.contains_key("rootless"),
        "cgroups": s.info.get("cgroups"),
        "domains": domains,
        "hosts": hosts,
        "vifs": vif_list,
        "vhost_vifs": vhost_vifs,
        "ports": ports,
        "bridges": bridges,
        "store_nodes": s.store_nodes,
        "grant_pins": s.grant_pins,
        "watches": s.watches,
        "ngm_tables": s.ngm_tables,
        "restarts_after_crash": s
            .info
            .get("restarts.on-crash")
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0),
        "counters": s.counters,
        "needs_attention": crate::uplink::journal::needs_attention(rd),
    }))
}

/// One domain's entry: hv's facts about it, its spin budget, NIC and
/// emulated-NIC counters from the store, and its interfaces (`ifs_of`).
fn domain_entry(
    ts: &mut Toolstack,
    s: &hv::status::SystemStatus,
    d: &hv::status::DomainStatus,
    ifs_of: &impl Fn(&str) -> Vec<Value>,
) -> Value {
    let ifs = d.netns.as_deref().map(ifs_of).unwrap_or_default();
    let spin_us: u64 = ts
        .store_read(&abi::xenbus::spin_path(d.id))
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let nic = ts
        .store_read(&format!("/local/domain/{}/splitnet/nic", d.id))
        .ok()
        .filter(|n| !n.is_empty());
    let nic_stats = nic.as_ref().and_then(|_| {
        ts.store_read(&format!("/local/domain/{}/nic/stats", d.id))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    });
    let emulated = s.info.get(&format!("nic.{}", d.name)).cloned();
    // A nic = "virtio" guest's frontend publishes its own view of its vif.
    let virtio_nic = nic
        .as_deref()
        .filter(|n| *n == "virtio")
        .and(nic_stats.clone());
    json!({
        "id": d.id,
        "name": d.name,
        "nic": nic.as_deref().unwrap_or(if d.kind == "guest" { "vif" } else { "-" }),
        "emulated_nic": emulated.map(|e| emulated_info(&e, nic_stats, d.hvm.as_ref())),
        "virtio_nic": virtio_nic,
        // A container's guest (`splitnet-cni`): its ID, interface,
        // namespace and CNI network.
        "container": s
            .info
            .get(&format!("container.{}", d.name))
            .and_then(|c| serde_json::from_str::<Value>(c).ok()),
        "hvm": d.hvm,
        "kind": d.kind,
        "netns": d.netns,
        "pid": d.pid,
        // The core hv pinned the process to (`cpu`, `up --placement`).
        "cpu": s.info.get(&format!("cpu.{}", d.name)).and_then(|c| c.parse::<u64>().ok()),
        "cgroup": d.cgroup,
        "connected": d.connected,
        "memory_frames": d.pool_frames,
        "hugepages": d.hugepages,
        "huge_backing": d.huge_backing,
        "grant_entries": d.grant_entries,
        "event_channels": d.event_channels,
        "grant_maps": d.grant_maps,
        "addresses": addresses(&ifs),
        "interfaces": ifs,
        "counters": d.counters,
        "cpu_seconds": cpu_seconds(d.cgroup.as_deref(), d.pid),
        "spin_us": spin_us,
    })
}

/// The wire hosts, from hv's `wirehost.<name>` facts, and the driver
/// domains' physical ports that join them.
fn wire_host(
    s: &hv::status::SystemStatus,
    ifs_of: &impl Fn(&str) -> Vec<Value>,
    hosts: &mut Vec<Value>,
    ports: &mut Vec<Value>,
) {
    for (k, v) in &s.info {
        let Some(w) = k.strip_prefix("wirehost.") else {
            continue;
        };
        let f: Vec<&str> = v.split('|').collect();
        let (Some(ns), Some(drv), Some(port)) = (f.first(), f.get(1), f.get(2)) else {
            continue;
        };
        let rate = f.get(3).filter(|r| !r.is_empty());
        let ifs = ifs_of(ns);
        hosts.push(json!({"name": w, "kind": "wire", "netns": ns, "driver": drv, "port": port, "link_rate": rate, "addresses": addresses(&ifs), "interfaces": ifs}));
        ports.push(json!({
            "domain": drv,
            "name": port,
            "driver": "veth",
            "peer": format!("{w}:{}", crate::host::WIRE_IF),
        }));
    }
}

/// The driver domains' uplinks (`[[port]]`, and `[wire]`'s port), from
/// hv's `uplink.<driver>/<ifname>` facts; each but the wire's is added to
/// `ports` with what it is joined to on the host.
fn uplinks(s: &hv::status::SystemStatus, ports: &mut Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for (k, v) in &s.info {
        let Some((drv, ifname)) = k.strip_prefix("uplink.").and_then(|r| r.split_once('/')) else {
            continue;
        };
        let f: Vec<&str> = v.split('|').collect();
        let field = |i: usize| f.get(i).filter(|x| !x.is_empty()).map(|x| x.to_string());
        let (kind, iface, he) = (
            f[0],
            field(1).unwrap_or_default(),
            field(4).unwrap_or_default(),
        );
        let joined = match kind {
            "host" => Some(("host NIC", format!("host:{iface} (lent)"))),
            "macvlan" => Some(("macvlan", format!("host:{iface}"))),
            "nat" | "route" => Some(("veth", format!("host:{he} ({kind})"))),
            "vxlan" => Some(("vxlan", format!("host:{he} (vxlan underlay)"))),
            "pasta" => Some((
                "veth",
                format!("{}:{he} (pasta)", crate::uplink::pasta::pasta_netns(drv)),
            )),
            _ => None,
        };
        if let Some((driver, peer)) = joined {
            let mut p = json!({"domain": drv, "name": ifname, "driver": driver, "peer": peer});
            if let Some(x) = crate::vxlan_status::collect(s, drv, ifname) {
                p["vxlan"] = x;
            }
            ports.push(p);
        }
        // A macvlan's group: `name=mac` of each member, `;`-separated.
        let members: Vec<Value> = field(6)
            .unwrap_or_default()
            .split(';')
            .filter_map(|m| m.split_once('='))
            .map(|(name, mac)| json!({"name": name, "mac": mac}))
            .collect();
        out.push(json!({
            "domain": drv,
            "name": ifname,
            "kind": field(0),
            "iface": field(1),
            "bridge": field(2),
            "vlan": field(3).and_then(|x| x.parse::<u16>().ok()),
            "host_end": field(4),
            "mac": field(5),
            "members": members,
            "limits": if kind == "pasta" { crate::uplink::pasta::limits() } else { Vec::new() },
        }));
    }
    out
}

/// Each driver domain's bridge and loop counters from its published
/// stats, with its bridges (name, ports, MACs learned); its uplinks and
/// extra ports are added to `ports`, an uplink's counters merged into the
/// entry already there (the wire's).
fn driver_bridges(
    ts: &mut Toolstack,
    s: &hv::status::SystemStatus,
    ports: &mut Vec<Value>,
) -> Vec<Value> {
    let mut bridges = Vec::new();
    for d in s.domains.iter().filter(|d| d.kind == "driver") {
        let path = format!("/local/domain/{}/splitnet/stats", d.id);
        let Some(doc) = ts
            .store_read(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        else {
            continue;
        };
        bridges.push(json!({
            "domain": d.name,
            "macs": doc["bridge"]["macs"],
            "counters": doc["bridge"]["counters"],
            "bridges": doc["bridges"],
            "loop": loop_costs(&doc),
        }));
        for x in doc["extra_ports"].as_array().into_iter().flatten() {
            ports.push(json!({
                "domain": d.name,
                "name": x["name"],
                "driver": "tap",
                "peer": "emulated NIC (VMApp or device model)",
                "bridge": x["bridge"],
                "open": x["open"],
                "counters": x["counters"],
            }));
        }
        for x in doc["uplinks"].as_array().into_iter().flatten() {
            let Some(name) = x["name"].as_str() else {
                continue;
            };
            let p = match ports
                .iter_mut()
                .position(|p| p["domain"] == d.name.as_str() && p["name"] == name)
            {
                Some(i) => &mut ports[i],
                None => {
                    ports.push(json!({"domain": d.name, "name": name, "driver": "packet", "peer": "uplink"}));
                    ports.last_mut().expect("just pushed")
                }
            };
            for k in ["bridge", "vlan", "open", "offloads", "counters", "members"] {
                p[k] = x[k].clone();
            }
        }
    }
    bridges
}

/// The guest loop's counters as its netfront last published them, with
/// wake-ups and system calls per frame netfront moved (both directions).
fn guest_loop(fe_stats: &Value) -> Value {
    let c = &fe_stats["counters"];
    let frames = c["tx_packets"].as_u64().unwrap_or(0) + c["rx_packets"].as_u64().unwrap_or(0);
    per_frame(&fe_stats["loop"], frames)
}

/// Loop counters with each per frame, when frames moved.
fn per_frame(l: &Value, frames: u64) -> Value {
    let per = |k: &str| {
        let n = l[k].as_u64()?;
        (frames > 0).then(|| n as f64 / frames as f64)
    };
    json!({
        "wakeups": l["wakeups"],
        "syscalls": l["syscalls"],
        "frames": frames,
        "wakeups_per_frame": per("wakeups"),
        "syscalls_per_frame": per("syscalls"),
    })
}

/// The driver loop's counters (`loop` in its stats) with wake-ups and
/// system calls per frame the bridge forwarded, measured since it started.
fn loop_costs(doc: &Value) -> Value {
    let c = &doc["bridge"]["counters"];
    let frames = c["forwarded"].as_u64().unwrap_or(0) + c["flooded"].as_u64().unwrap_or(0);
    per_frame(&doc["loop"], frames)
}

/// An emulated NIC's entry: hv's facts (`nic.<guest>`: kind, driver
/// domain, host interface, the pid of its VMApp or device model, options)
/// and the guest's counters; for an HVM guest, hv's I/O-path snapshot too.
fn emulated_info(info: &str, stats: Option<Value>, hvm: Option<&HvmSnapshot>) -> Value {
    let f: Vec<&str> = info.split('|').collect();
    let pid = f.get(3).and_then(|p| p.parse::<u64>().ok());
    let mut v = json!({
        "kind": f.first(),
        "backend": f.get(1),
        "vmnet": f.get(2),
        "options": f.get(4),
    });
    if f.first() == Some(&"hvm") {
        v["dm_pid"] = json!(pid);
        return hvm_info(v, stats, hvm);
    }
    v["vmapp_pid"] = json!(pid);
    if let Some(s) = stats {
        let vm = &s["world"]["vm"];
        let tx = s["driver"]["tx_packets"].as_u64().unwrap_or(0);
        let rx = s["driver"]["rx_packets"].as_u64().unwrap_or(0);
        let switches = vm["world_switches"].as_u64().unwrap_or(0);
        v["world_switches"] = vm["world_switches"].clone();
        v["switch_mean_cycles"] = s["world"]["switch_mean_cycles"].clone();
        v["service_mean_cycles"] = s["world"]["service_mean_cycles"].clone();
        v["switch_overhead_mean_cycles"] = s["world"]["switch_overhead_mean_cycles"].clone();
        v["null_switch_min_cycles"] = vm["null_switch_min_cycles"].clone();
        v["null_switch_mean_cycles"] = vm["null_switch_mean_cycles"].clone();
        v["switches_per_packet"] = json!(if tx + rx > 0 {
            switches as f64 / (tx + rx) as f64
        } else {
            0.0
        });
        v["port_accesses"] = vm["ports"].clone();
        v["nic_accesses_in_vmm"] = vm["nic_in_vmm"].clone();
        v["nic_accesses_switched"] = vm["nic_switched"].clone();
        v["irqs"] = vm["irqs"].clone();
        v["pic_accesses"] = vm["pic_accesses"].clone();
        v["tx_packets"] = json!(tx);
        v["rx_packets"] = json!(rx);
        v["combined_sends"] = vm["combined_sends"].clone();
        v["combined_frames"] = vm["combined_frames"].clone();
        v["halts"] = vm["halts"].clone();
        v["halt_cycles"] = vm["halt_cycles"].clone();
        v["vmapp"] = s["world"]["vmapp"].clone();
        // Every VM counter, and the guest's TSC when it read them.
        v["vm"] = vm.clone();
        v["stats_tsc"] = s["world"]["tsc"].clone();
        v["guest"] = s["guest"].clone();
        v["driver"] = s["driver"].clone();
    }
    v
}

/// An HVM NIC's entry: the guest's counters (exits it made, their mean
/// round trip, interrupts, halts) and hv's accounting: exits per reason
/// with their mean cost and share of handling time, the five stages'
/// means, and the vPIC's placement.
fn hvm_info(mut v: Value, stats: Option<Value>, hvm: Option<&HvmSnapshot>) -> Value {
    if let Some(s) = stats {
        let cpu = &s["world"]["vcpu"];
        v["tx_packets"] = s["driver"]["tx_packets"].clone();
        v["rx_packets"] = s["driver"]["rx_packets"].clone();
        v["exits"] = cpu["exits"].clone();
        v["failed_exits"] = cpu["failed_exits"].clone();
        v["exit_mean_cycles"] = cpu["round_trip_mean_cycles"].clone();
        v["irqs"] = cpu["interrupts"].clone();
        v["halts"] = cpu["halts"].clone();
        v["halt_cycles"] = cpu["halt_cycles"].clone();
        v["timer_interrupts"] = cpu["timer_interrupts"].clone();
        v["guest"] = s["guest"].clone();
        v["driver"] = s["driver"].clone();
    }
    if let Some(h) = hvm {
        let shares = h.shares();
        let reasons: serde_json::Map<String, Value> = h
            .reasons
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    json!({
                        "count": r.count,
                        "cycles": r.cycles,
                        "mean_cycles": r.cycles.checked_div(r.count).unwrap_or(0),
                        "max_cycles": r.max_cycles,
                        "failed": r.items,
                        "share": shares.get(k).copied().unwrap_or(0.0),
                    }),
                )
            })
            .collect();
        let stages: serde_json::Map<String, Value> = STAGES
            .iter()
            .zip(h.stages.mean().unwrap_or([0.0; 5]))
            .map(|(name, m)| (name.to_string(), json!(m.round())))
            .collect();
        v["pic"] = json!(h.placement);
        v["exit_reasons"] = Value::Object(reasons);
        v["forwarded_exits"] = json!(h.stages.count);
        v["stage_mean_cycles"] = Value::Object(stages);
        v["round_trip_mean_cycles"] =
            json!(h.stages.round_trip.checked_div(h.stages.count).unwrap_or(0));
        v["hv_counters"] = json!(h.counters);
    }
    v
}
