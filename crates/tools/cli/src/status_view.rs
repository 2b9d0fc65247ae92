//! `splitnet status`'s plain text (and `--json`'s pretty printing) of the
//! status document the toolstack collects (`toolstack::status::collect`):
//! tables of domains, emulated NICs, ports, tunnels, vifs, vhost-user vifs
//! and hypercall counters. Printing is the CLI's business; the trusted
//! toolstack only gathers the facts.

use abi::offloads::Caps;
use anyhow::Result;
use serde_json::{json, Value};
use std::path::Path;
use toolstack::status::collect;

/// `splitnet status [--json]`.
pub fn show(rd: &Path, as_json: bool) -> Result<()> {
    let v = match collect(rd) {
        Ok(v) => v,
        Err(e) => {
            // Not up: what a past run could never undo still needs saying.
            let left = json!(toolstack::uplink::journal::needs_attention(rd));
            if as_json {
                println!("{}", json!({ "needs_attention": left }));
            } else {
                print_attention(&left);
            }
            return Err(e);
        }
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if let Some(h) = v["host"].as_str() {
        println!(
            "host {h} (hv in namespace {}, domains in {}*)",
            toolstack::underlay::host_ns(h),
            toolstack::host::prefix()
        );
    }
    println!(
        "hv pid {}, topology {}, {} store nodes, {} restarts after a crash",
        v["hv_pid"],
        v["topology"].as_str().unwrap_or("?"),
        v["store_nodes"],
        v["restarts_after_crash"]
    );
    if let Some(u) = v["hv_upgrade"].as_str() {
        println!("hv upgraded in place: upgrade {u}");
    }
    if let Some(r) = v["hv_recovery"].as_str() {
        println!("hv started again by its guardian: {r}");
    }
    if let Some(a) = v["apply_interrupted"].as_str() {
        println!("{a}");
    }
    if v["rootless"] == true {
        println!(
            "rootless: hv and its domains in your own user namespace{}",
            v["cgroups"]
                .as_str()
                .map(|c| format!("; cgroups {c}"))
                .unwrap_or_default()
        );
    }
    let empty = Vec::new();
    let domains = v["domains"].as_array().unwrap_or(&empty);
    let hosts = v["hosts"].as_array().unwrap_or(&empty);
    print_domains(domains, hosts);
    print_containers(domains);
    print_emulated_nics(domains);
    print_ports(&v);
    let host = toolstack::host::instance().unwrap_or("local");
    print_tunnels(host, v["ports"].as_array().unwrap_or(&empty));
    print_vifs(v["vifs"].as_array().unwrap_or(&empty));
    print_vhost_vifs(v["vhost_vifs"].as_array().unwrap_or(&empty));
    print_hypercalls(&v["counters"]);
    print_attention(&v["needs_attention"]);
    Ok(())
}

/// The changes to the host that could never be undone, if any.
fn print_attention(list: &Value) {
    let empty = Vec::new();
    let list = list.as_array().unwrap_or(&empty);
    if list.is_empty() {
        return;
    }
    println!(
        "\nNEEDS ATTENTION: changes to the host that could never be undone \
         (`splitnet down --forget` clears this list)"
    );
    for a in list {
        let owner = match a["owner"].as_str() {
            Some("") | None => "topology",
            Some(o) => o,
        };
        println!(
            "  {owner}: {}: {}",
            a["what"].as_str().unwrap_or("?"),
            a["reason"].as_str().unwrap_or("?")
        );
    }
}

/// Plain `status`'s table of domains and hosts: id, kind, pid, pinned
/// core, namespace, connection, memory and addresses.
fn print_domains(domains: &[Value], hosts: &[Value]) {
    println!(
        "\n{:<10} {:>3} {:<7} {:>7} {:>3} {:<17} {:<5} {:>8} {:<7}  ADDRESSES",
        "DOMAIN", "ID", "KIND", "PID", "CPU", "NAMESPACE", "CONN", "MEMORY", "HUGE"
    );
    let empty = Vec::new();
    for d in domains.iter().chain(hosts) {
        let text = |k: &str| match &d[k] {
            Value::Null => "-".to_string(),
            Value::String(s) => s.clone(),
            Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
            other => other.to_string(),
        };
        let memory = match d["memory_frames"].as_u64() {
            Some(f) => format!("{} MiB", f * 4096 / (1 << 20)),
            None => "-".into(),
        };
        let addrs: Vec<&str> = d["addresses"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .filter_map(Value::as_str)
            .collect();
        // What backs the pool (Menon 2006 §5.3): hugetlb, thp, or none.
        let huge = match d["huge_backing"].as_str() {
            Some("none") | None => "-".to_string(),
            Some(b) => b.to_string(),
        };
        println!(
            "{:<10} {:>3} {:<7} {:>7} {:>3} {:<17} {:<5} {:>8} {:<7}  {}",
            text("name"),
            text("id"),
            text("kind"),
            text("pid"),
            text("cpu"),
            text("netns"),
            text("connected"),
            memory,
            huge,
            if addrs.is_empty() {
                "-".to_string()
            } else {
                addrs.join(" ")
            }
        );
    }
}

/// The guests that are containers' interfaces (`splitnet-cni`): each by
/// domain, container ID, interface, namespace and CNI network.
fn print_containers(domains: &[Value]) {
    let mut any = false;
    for d in domains.iter().filter(|d| d["container"].is_object()) {
        if !any {
            println!("\nCONTAINERS");
            any = true;
        }
        let c = &d["container"];
        let s = |k: &str| c[k].as_str().unwrap_or("-").to_string();
        let id = s("id");
        println!(
            "  {:<10} container {} {} in {} (network {})",
            d["name"].as_str().unwrap_or("?"),
            id.get(..12).unwrap_or(&id),
            s("ifname"),
            s("netns"),
            s("network")
        );
    }
}

/// A `nic = "virtio"` guest's frontend in one line: connection, traffic,
/// notifications, and the drops and broken rings that are not zero.
fn print_virtio(d: &Value) {
    let v = &d["virtio_nic"];
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let nonzero = |o: &Value| -> String {
        let parts: Vec<String> = o
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, c)| c.as_u64().unwrap_or(0) > 0)
            .map(|(k, c)| format!("{k}={c}"))
            .collect();
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(" ")
        }
    };
    let names: Vec<&str> = v["feature_names"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let line = format!(
        "virtio NIC {} (frontend): {}, features {}; {} connects, {} disconnects; \
         tx {} pkts {} B, rx {} pkts {} B; kicks {}, calls {}; drops: {}; broken: {}",
        d["name"].as_str().unwrap_or("?"),
        if v["connected"] == true {
            "connected"
        } else {
            "not connected"
        },
        if names.is_empty() {
            "-".into()
        } else {
            names.join(" ")
        },
        n("connects"),
        n("disconnects"),
        n("tx_packets"),
        n("tx_bytes"),
        n("rx_packets"),
        n("rx_bytes"),
        n("kicks"),
        n("calls"),
        nonzero(&v["drops"]),
        nonzero(&v["broken"]),
    );
    // Names come from the guest: no control character reaches the terminal.
    println!("\n{}", printable(&line));
}

/// Plain `status`'s lines for each domain's emulated NIC (hosted or HVM),
/// then the domains that spin before sleeping.
fn print_emulated_nics(domains: &[Value]) {
    let spinning: Vec<String> = domains
        .iter()
        .filter_map(|d| {
            let us = d["spin_us"].as_u64().filter(|&us| us > 0)?;
            Some(format!("{} {us} µs", d["name"].as_str().unwrap_or("?")))
        })
        .collect();
    for d in domains {
        if d["virtio_nic"].is_object() {
            print_virtio(d);
        }
        let h = &d["emulated_nic"];
        if h["kind"] == "hvm" {
            print_hvm(d);
            continue;
        }
        if h.is_null() {
            continue;
        }
        let n = |k: &str| h[k].as_u64().unwrap_or(0);
        println!(
            "\nhosted NIC {} (VMApp pid {}, VMNet {}:{}; {}): {} world switches, mean {} cycles ({} in the VMApp; empty: {}), {:.2} per packet; \
             NIC accesses {} in the VMM, {} switched; {} IRQs, {} PIC accesses; {} packets out, {} in; {} combined sends",
            d["name"].as_str().unwrap_or("?"),
            n("vmapp_pid"),
            h["backend"].as_str().unwrap_or("?"),
            h["vmnet"].as_str().unwrap_or("?"),
            h["options"].as_str().unwrap_or("?"),
            n("world_switches"),
            n("switch_mean_cycles"),
            n("service_mean_cycles"),
            n("null_switch_mean_cycles"),
            h["switches_per_packet"].as_f64().unwrap_or(0.0),
            n("nic_accesses_in_vmm"),
            n("nic_accesses_switched"),
            n("irqs"),
            n("pic_accesses"),
            n("tx_packets"),
            n("rx_packets"),
            n("combined_sends"),
        );
        print_guest_side(h);
    }
    if !spinning.is_empty() {
        println!("\nspin before sleeping: {}", spinning.join(", "));
    }
}

/// Plain `status`'s PORTS section, then each bridge's loop counters.
fn print_ports(v: &Value) {
    let empty = Vec::new();
    println!("\nPORTS");
    for p in v["ports"].as_array().unwrap_or(&empty) {
        let on = match (p["bridge"].as_str(), &p["vlan"]) {
            (None, _) => String::new(),
            (Some(b), Value::Null) => format!(" on {b}"),
            (Some(b), Value::String(t)) => format!(" on {b} ({t})"),
            (Some(b), v) => format!(" on {b} (vlan {v})"),
        };
        println!(
            "  {}:{} ({}) <-> {}{on}",
            p["domain"].as_str().unwrap_or("?"),
            p["name"].as_str().unwrap_or("?"),
            p["driver"].as_str().unwrap_or("?"),
            p["peer"].as_str().unwrap_or("?")
        );
        if p["offloads"].is_object() {
            let c = &p["counters"];
            let n = |k: &str| c[k].as_u64().unwrap_or(0);
            println!(
                "    offloads {}; in software: {} frames segmented or checksummed, {} segmented with their payload gathered, {} linearized ({} B copied)",
                port_offloads_text(&p["offloads"]),
                n("tx_shaped"),
                n("tx_gathered"),
                n("tx_linearized"),
                n("tx_linearized_bytes"),
            );
        }
    }
    for u in v["uplinks"].as_array().unwrap_or(&empty) {
        let s = |k: &str| u[k].as_str().unwrap_or("-").to_string();
        println!(
            "  uplink {}:{} kind {} iface {} bridge {}{}{}",
            s("domain"),
            s("name"),
            s("kind"),
            s("iface"),
            s("bridge"),
            u["vlan"]
                .as_u64()
                .map(|v| format!(" vlan {v}"))
                .unwrap_or_default(),
            u["host_end"]
                .as_str()
                .map(|h| format!(" host end {h}"))
                .unwrap_or_default(),
        );
        for l in u["limits"].as_array().unwrap_or(&empty) {
            println!("    limited: {}", l.as_str().unwrap_or("?"));
        }
        for m in u["members"].as_array().unwrap_or(&empty) {
            println!(
                "    member {} for {}",
                m["name"].as_str().unwrap_or("?"),
                m["mac"].as_str().unwrap_or("?")
            );
        }
    }
    for b in v["bridges"].as_array().unwrap_or(&empty) {
        let domain = b["domain"].as_str().unwrap_or("?");
        for br in b["bridges"].as_array().unwrap_or(&empty) {
            let members: Vec<&str> = br["ports"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter_map(Value::as_str)
                .collect();
            println!(
                "  {domain}:{}: {} ({} MACs)",
                br["name"].as_str().unwrap_or("?"),
                members.join(" "),
                br["macs"]
            );
        }
        print_loop(domain, &b["loop"]);
    }
}

/// A port's declared offloads (`sg`, `csum`, `tso4`, `tso6`, `uso`;
/// checksum offload covers both IP versions) as a set's name.
fn port_offloads_text(o: &Value) -> String {
    let csum = o["csum"] == true;
    offloads_text(&json!({
        "sg": o["sg"], "csum": csum, "csum6": csum, "tso4": o["tso4"], "tso6": o["tso6"],
        "uso": o["uso"],
    }))
}

/// A vif's negotiated offloads as a set's name (`all`, `tso`) or its
/// parts (`sg+csum+tso4`), or `none`.
fn offloads_text(o: &Value) -> String {
    let on = |k: &str| o[k] == true;
    Caps {
        sg: on("sg"),
        csum: on("csum"),
        csum6: on("csum6"),
        tso4: on("tso4"),
        tso6: on("tso6"),
        uso: on("uso"),
    }
    .to_string()
}

/// Plain `status`'s VIFS section: per vif its ends' states and modes,
/// counters, guest loop, grant ops, drops and grant tracking.
fn print_vifs(vifs: &[Value]) {
    println!("\nVIFS");
    for v in vifs {
        let c = &v["counters"];
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let map = |c: &Value, k: &str| pairs(&c[k]);
        println!(
            "  {} <-> {} ({}): frontend {}, backend {}; grants {}, rx {}, tx {}, offloads {}",
            v["guest"].as_str().unwrap_or("?"),
            v["backend"].as_str().unwrap_or("?"),
            v["mac"].as_str().unwrap_or("?"),
            v["frontend_state"].as_str().unwrap_or("?"),
            v["backend_state"].as_str().unwrap_or("?"),
            v["grants"].as_str().unwrap_or("?"),
            v["rx_mode"].as_str().unwrap_or("?"),
            v["tx_mode"].as_str().unwrap_or("?"),
            offloads_text(&v["offloads"]),
        );
        println!(
            "    tx {} pkts {} B, rx {} pkts {} B; notifications sent {} received {} ({} spurious, {} throttles); batches {}",
            n("tx_packets"),
            n("tx_bytes"),
            n("rx_packets"),
            n("rx_bytes"),
            n("notifications_sent"),
            n("notifications_received"),
            n("spurious_events"),
            n("event_throttles"),
            n("batches")
        );
        if v["guest_loop"]["wakeups"].is_u64() {
            print_loop("    guest", &v["guest_loop"]);
        }
        let o = &v["options"];
        let opt = |k: &str| o[k].as_str().unwrap_or("-").to_string();
        println!(
            "    options: ip {}, rate {}, mtu {}; spoofed {}, oversize {}, credit waits {}, multicast groups {} ({} refused)",
            opt("ip"),
            opt("rate"),
            opt("mtu"),
            n("spoofed"),
            n("oversize"),
            n("credit_waits"),
            c["mcast_groups"]
                .as_u64()
                .map_or("unfiltered".into(), |g| g.to_string()),
            n("mcast_refused"),
        );
        println!(
            "    grant ops: {}; drops: {}; refused: {}",
            map(c, "grant_ops"),
            map(c, "drops"),
            map(c, "rejected")
        );
        let fc = &v["frontend_counters"];
        if fc.is_object() {
            println!(
                "    frontend: drops: {}; refused: {}",
                map(fc, "drops"),
                map(fc, "rejected")
            );
        }
        let g = &v["grant_track"];
        if g.is_object() {
            let k = |f: &str| g[f].as_u64().unwrap_or(0);
            println!(
                "    grant track: {} pages granted served {} buffer uses ({} hits, {} evictions, {} set-full fallbacks)",
                k("created"),
                k("uses"),
                k("hits"),
                k("evictions"),
                k("set_full")
            );
        }
        print_queue(&v["queue"]);
        if let Some(r) = v["disconnect_reason"].as_str() {
            println!("    disconnected: {r}");
        }
    }
}

/// A vif's multi-queue line (Ram thesis ch. 3), when it asked for a queue.
fn print_queue(q: &Value) {
    if !q.is_object() {
        return;
    }
    let n = |k: &str| q[k].as_u64().unwrap_or(0);
    let why = q["why"]
        .as_str()
        .map_or(String::new(), |w| format!(" ({w})"));
    println!(
        "    queue: {} on {}{why}, name {}; rx direct {} pkts, via shared path {} (+{} spilled from batches), kernel drops {}; tx {} pkts, {} dropped",
        q["state"].as_str().unwrap_or("?"),
        q["port"].as_str().unwrap_or("?"),
        q["name"].as_str().unwrap_or("-"),
        n("rx_direct_packets"),
        n("rx_fallback_packets"),
        n("rx_spilled_packets"),
        n("kernel_drops"),
        n("tx_packets"),
        n("tx_dropped"),
    );
}

/// Plain `status`'s HYPERCALLS section: hv's operation and error counts.
fn print_hypercalls(c: &Value) {
    println!("\nHYPERCALLS");
    if let Some(ops) = c["ops"].as_object() {
        let line: Vec<String> = ops.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("  {}", line.join(" "));
    }
    if let Some(errs) = c["errors"].as_object().filter(|e| !e.is_empty()) {
        let line: Vec<String> = errs.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("  errors: {}", line.join(" "));
    }
}

/// Plain `status`'s lines for an HVM NIC.
fn print_hvm(d: &Value) {
    let h = &d["emulated_nic"];
    let n = |k: &str| h[k].as_u64().unwrap_or(0);
    println!(
        "\nhvm NIC {} (device model pid {}, {}:{}; {}): {} exits, mean {} cycles as the guest sees them; \
         {} forwarded to the device model; {} IRQs; {} packets out, {} in",
        d["name"].as_str().unwrap_or("?"),
        n("dm_pid"),
        h["backend"].as_str().unwrap_or("?"),
        h["vmnet"].as_str().unwrap_or("?"),
        h["options"].as_str().unwrap_or("?"),
        n("exits"),
        n("exit_mean_cycles"),
        n("forwarded_exits"),
        n("irqs"),
        n("tx_packets"),
        n("rx_packets"),
    );
    if let Some(r) = h["exit_reasons"].as_object() {
        let parts: Vec<String> = r
            .iter()
            .map(|(k, x)| {
                format!(
                    "{k} {} (mean {} cycles, {:.1}%)",
                    x["count"],
                    x["mean_cycles"],
                    x["share"].as_f64().unwrap_or(0.0) * 100.0
                )
            })
            .collect();
        println!("  exits by reason: {}", parts.join(", "));
    }
    if let Some(st) = h["stage_mean_cycles"].as_object() {
        let parts: Vec<String> = st.iter().map(|(k, m)| format!("{k} {m}")).collect();
        println!(
            "  stages (mean cycles, PIC in {}): {}",
            h["pic"].as_str().unwrap_or("?"),
            parts.join(", ")
        );
    }
    print_guest_side(h);
}

/// An emulated NIC's guest side: what its kernel sent and got through the
/// TAP, and what the driver made of it (where a NIC that carries nothing
/// stops: before the driver, in it, or past it).
fn print_guest_side(h: &Value) {
    let (g, d) = (&h["guest"], &h["driver"]);
    if !g.is_object() {
        return;
    }
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    println!(
        "  guest side: {} frames from its kernel, {} to it ({} refused); driver sent {} ({} errors), received {} ({} errors, {} missed); {} interrupts taken, {} halts",
        n(g, "tap_tx"),
        n(g, "tap_rx"),
        n(g, "tap_rx_dropped"),
        n(d, "tx_packets"),
        n(d, "tx_errors"),
        n(d, "rx_packets"),
        n(d, "rx_errors"),
        n(d, "missed"),
        n(g, "irqs"),
        n(g, "halts")
    );
}

/// One line of a domain loop's counters.
fn print_loop(who: &str, l: &Value) {
    let per = |k: &str| l[k].as_f64().map_or("-".into(), |x| format!("{x:.2}"));
    println!(
        "  {who} loop: {} frames, {} wake-ups ({} per frame), {} system calls ({} per frame)",
        l["frames"],
        l["wakeups"],
        per("wakeups_per_frame"),
        l["syscalls"],
        per("syscalls_per_frame")
    );
}

/// `k=v` pairs of a JSON object, or `-`.
fn pairs(v: &Value) -> String {
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
fn lines(v: &Value) -> Vec<String> {
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
        "    kicks {}, calls {}, disconnects {}, ignored messages {}, spoofed {}, memory sealed {}",
        num(&v["kicks"]),
        num(&v["calls"]),
        num(&v["disconnects"]),
        num(&v["ignored_messages"]),
        num(&v["spoofed"]),
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
fn printable(s: &str) -> String {
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
fn print_vhost_vifs(vifs: &[Value]) {
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

/// Plain `status`'s tunnels block: the vxlan ports of this host.
fn print_tunnels(host: &str, ports: &[Value]) {
    let vx: Vec<&Value> = ports.iter().filter(|p| p["vxlan"].is_object()).collect();
    if vx.is_empty() {
        return;
    }
    println!("\nTUNNELS (host {host})");
    for p in vx {
        let x = &p["vxlan"];
        println!(
            "  {}:{} vni {} {} local {} mtu budget {} (guests {}, underlay {})",
            p["domain"].as_str().unwrap_or("?"),
            p["name"].as_str().unwrap_or("?"),
            x["vni"],
            x["mode"].as_str().unwrap_or("?"),
            x["local"].as_str().unwrap_or("?"),
            x["mtu_budget"].as_str().unwrap_or("?"),
            x["guest_mtu"],
            x["underlay_mtu"],
        );
        for peer in x["peers"].as_array().into_iter().flatten() {
            let macs: Vec<&str> = peer["macs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            println!(
                "    peer {}: {} MAC{} {}",
                peer["vtep"].as_str().unwrap_or("?"),
                macs.len(),
                if macs.len() == 1 { "" } else { "s" },
                macs.join(" ")
            );
        }
        for b in x["bgp"].as_array().into_iter().flatten() {
            println!(
                "    bgp {} {} up {} prefixes received {}",
                b["peer"].as_str().unwrap_or("?"),
                b["state"].as_str().unwrap_or("?"),
                b["up_for"].as_str().unwrap_or("-"),
                b["prefixes_received"]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vhost-user vif's entry as `status` collects it (the toolstack's
    /// declaration, then the fields its driver domain published).
    fn entry(published: Option<&Value>) -> Value {
        let mut e = json!({
            "name": "vm1", "kind": "vm", "backend_name": "drv", "backend_domain": 1,
            "socket": "/run/splitnet/vm1.sock", "mac": "52:54:00:12:34:56",
            "bridge": "xenbr0", "vlan": 20, "published": published.is_some(),
        });
        for (k, v) in published.and_then(Value::as_object).into_iter().flatten() {
            if k != "name" {
                e[k] = v.clone();
            }
        }
        e
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
            "kicks": 9, "calls": 8, "disconnects": 1, "ignored_messages": 2, "spoofed": 5,
            "memory_sealed": true,
        });
        let l = lines(&entry(Some(&published))).join("\n");
        for needle in [
            "vm1 (vm) <-> drv (52:54:00:12:34:56) on xenbr0 vlan 20: socket /run/splitnet/vm1.sock, connected",
            "features 0x130000000 (VERSION_1 MRG_RXBUF), protocol features 0x202",
            "rings: 0 size 256 enabled avail 7 used 7; 1 size 256 disabled avail 0 used 0",
            "tx 4 pkts 400 B, rx 3 pkts 300 B; drops: no_rx_buffer=2; refused: unknown_message=1",
            "kicks 9, calls 8, disconnects 1, ignored messages 2, spoofed 5, memory sealed yes",
        ] {
            assert!(l.contains(needle), "{l}\nlacks {needle}");
        }
        let evil = json!({"name": "vm1", "refused": {"\u{1b}[2J": 1}});
        let l = lines(&entry(Some(&evil))).join("\n");
        assert!(
            l.contains("refused: ?[2J=1") && !l.contains('\u{1b}'),
            "{l}"
        );
    }

    #[test]
    fn missing_stats_or_fields_are_shown_as_absent() {
        let l = lines(&entry(None)).join("\n");
        assert!(l.contains("state unknown"), "{l}");
        assert!(l.contains("drv publishes nothing for it yet"), "{l}");
        let l = lines(&entry(Some(&json!({"name": "vm1"})))).join("\n");
        assert!(l.contains("features - (-), protocol features -"), "{l}");
        assert!(
            l.contains("tx - pkts - B, rx - pkts - B; drops: -; refused: -"),
            "{l}"
        );
        let l = lines(&entry(Some(&json!({"rings": [{"index": "x"}]})))).join("\n");
        assert!(l.contains("rings: - size - disabled avail - used -"), "{l}");
    }
}
