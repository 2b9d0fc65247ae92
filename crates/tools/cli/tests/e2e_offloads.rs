//! The high-level virtual interface one capability at a time (Menon 2006
//! §3) against the port's capabilities (§3.1, Figure 7), end to end. For a
//! guest `offload` set and a driver domain `port_offload` set, TCP over
//! IPv4 and IPv6 carries random files intact both ways between guest1 and
//! the wire host, UDP crosses both ways, no receiver's kernel counts a bad
//! checksum (`nstat`), guest1's TAP offers its kernel what was negotiated
//! (`ethtool -k`) with the link's MTU, and status shows the negotiated set
//! and what the software offload driver did for the port. Needs root,
//! python3, curl, iperf3, ethtool and nstat; run one test at a time, under
//! the lock.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// drv with `port_offload`, guest1 with `offload`, and the wire host.
fn topology(offload: &str, port: &str) -> String {
    format!(
        "name = \"offloads\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nport_offload = \"{port}\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         ipv6 = \"fd77::1/64\"\noffload = \"{offload}\"\n\
         [wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\nipv6 = \"fd77::fe/64\"\n"
    )
}

/// The negotiated set status shows for a guest `offload` set.
fn negotiated(offload: &str) -> Value {
    let (sg, csum, tso, uso) = match offload {
        "none" => (false, false, false, false),
        "csum" => (false, true, false, false),
        "sg" => (true, false, false, false),
        "sg+csum" => (true, true, false, false),
        "tso" => (true, true, true, false),
        "all" => (true, true, true, true),
        other => panic!("no set {other}"),
    };
    json!({"sg": sg, "csum": csum, "csum6": csum, "tso4": tso, "tso6": tso, "uso": uso})
}

/// `domain`'s TCP and UDP checksum errors, as `nstat -az` reports them.
fn csum_errors(env: &Env, domain: &str) -> [u64; 2] {
    let keys = ["TcpInCsumErrors", "UdpInCsumErrors"];
    let out = env.ok(&["exec", domain, "--", "nstat", "-az", keys[0], keys[1]]);
    keys.map(|k| {
        out.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(k)).then(|| f.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {k} in nstat's output in {domain}:\n{out}"))
    })
}

/// A fresh random file served over HTTP by `server` at `ip`:`port`
/// (python3's http.server) arrives intact in `client` (curl).
fn fetch(env: &Env, server: &str, ip: &str, port: u16, client: &str, mib: u32) {
    let dir = env.run_dir.join(format!("www-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = random_blob(&dir, mib);
    let p = port.to_string();
    let _server = env.spawn(&[
        "exec",
        server,
        "--",
        "python3",
        "-m",
        "http.server",
        &p,
        "--bind",
        ip,
        "--directory",
        dir.to_str().unwrap(),
    ]);
    wait_until(
        &format!("the HTTP server in {server} to listen"),
        Duration::from_secs(10),
        || listening(server, port),
    );
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    let url = format!("http://{host}:{port}/blob");
    let got = env.run_dir.join(format!("got-{port}"));
    let mut args = vec!["exec", client, "--"];
    args.extend(curl(got.to_str().unwrap(), &url));
    env.ok(&args);
    assert_eq!(
        sha256(&got),
        sha256(&file),
        "{server} -> {client} over {ip}: the file arrived corrupted"
    );
    let _ = std::fs::remove_file(&got);
}

/// UDP from `client` to the iperf3 server `server` at `ip` (or back, with
/// `reverse`) reaches `receiver`'s sockets with good checksums.
fn udp(server: &str, ip: &str, client: &str, reverse: bool) {
    let receiver = if reverse { client } else { server };
    let before = udp_in(receiver);
    let r = flow(
        server,
        ip,
        client,
        reverse,
        1,
        bench::netenv::Workload::UdpSmall,
    );
    let what = format!("iperf3 -u {client} -> {server} (reverse {reverse})");
    assert_udp_checksums_good(receiver, before, &what);
    let r = r.unwrap_or_else(|e| panic!("{what}: {e:#}"));
    assert!(r.packets > 0.0, "{what} carried nothing");
}

/// What `ethtool -k` says of feature `name` on guest1's eth0.
fn guest_feature(env: &Env, name: &str) -> bool {
    let out = env.ok(&["exec", "guest1", "--", "ethtool", "-k", "eth0"]);
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in ethtool -k:\n{out}"));
    line.split(':')
        .nth(1)
        .unwrap_or("")
        .trim()
        .starts_with("on")
}

/// The driver domain's wire port in `status --json`: its declared
/// offloads and counters.
fn wire_port(st: &Value) -> Value {
    st["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["domain"] == "drv" && p["offloads"].is_object())
        .cloned()
        .unwrap_or_else(|| panic!("no drv port with offloads in status: {}", st["ports"]))
}

/// Runs one combination and checks everything the module says.
fn offloads_hold(name: &str, offload: &str, port: &str) -> Option<(Env, Value)> {
    let env = Env::new(name)?;
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("offloads.toml");
    std::fs::write(&path, topology(offload, port)).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    let want = negotiated(offload);
    wait_until(
        "status shows guest1's negotiated offloads",
        Duration::from_secs(10),
        || vif(&env.status(), "guest1")["offloads"] == want,
    );
    // guest1's kernel is offered what was negotiated, at the link's MTU.
    assert_eq!(guest_feature(&env, "tx-checksumming"), want["csum"] == true);
    assert_eq!(
        guest_feature(&env, "tcp-segmentation-offload"),
        want["tso4"] == true
    );
    let link = env.ok(&["exec", "guest1", "--", "ip", "link", "show", "dev", "eth0"]);
    assert!(link.contains("mtu 1500"), "{link}");

    let before = [csum_errors(&env, "guest1"), csum_errors(&env, "wire")];
    fetch(&env, "guest1", "10.77.0.1", 8081, "wire", 16);
    fetch(&env, "wire", "10.77.0.254", 8082, "guest1", 16);
    fetch(&env, "guest1", "fd77::1", 8083, "wire", 8);
    fetch(&env, "wire", "fd77::fe", 8084, "guest1", 8);
    udp("wire", "10.77.0.254", "guest1", false);
    udp("wire", "10.77.0.254", "guest1", true);
    let after = [csum_errors(&env, "guest1"), csum_errors(&env, "wire")];
    assert_eq!(
        after, before,
        "[[Tcp, Udp]InCsumErrors] of [guest1, wire] with offload = {offload}, port_offload = {port}"
    );

    let st = env.status();
    let p = wire_port(&st);
    eprintln!(
        "offload = {offload}, port_offload = {port}: port {} counters {}",
        p["offloads"], p["counters"]
    );
    assert_eq!(p["counters"]["tx_dropped"], 0, "{p}");
    Some((env, p))
}

/// For a port without checksum offload: a capture of what the wire host
/// receives while guest1 sends it a file shows every TCP checksum correct
/// (tcpdump checks them; frames the port was left to finish would show
/// "incorrect").
fn capture_shows_good_checksums(env: &Env) {
    let pcap = env.run_dir.join("wire-in.pcap");
    let file = pcap.to_str().unwrap();
    let mut dump = env.spawn(&[
        "exec", "wire", "--", "tcpdump", "-i", "eth0", "-Q", "in", "-U", "-Z", "root", "-c",
        "2000", "-s", "0", "-w", file, "tcp",
    ]);
    wait_until("tcpdump to open its file", Duration::from_secs(10), || {
        pcap.exists()
    });
    fetch(env, "guest1", "10.77.0.1", 8085, "wire", 8);
    assert!(
        dump.wait_exit(Duration::from_secs(20)),
        "tcpdump took fewer than 2000 frames"
    );
    let out = std::process::Command::new("tcpdump")
        .args(["-r", file, "-nn", "-vv"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let correct = text.matches("(correct)").count();
    let bad: Vec<&str> = text.lines().filter(|l| l.contains("incorrect")).collect();
    assert!(
        bad.is_empty(),
        "{} bad checksums, e.g. {:?}",
        bad.len(),
        bad.first()
    );
    assert!(
        correct > 1000,
        "only {correct} checksums checked:\n{text:.2000}"
    );
}

fn shaped(p: &Value) -> u64 {
    p["counters"]["tx_shaped"].as_u64().unwrap_or(0)
}

fn linearized(p: &Value) -> u64 {
    p["counters"]["tx_linearized"].as_u64().unwrap_or(0)
}

/// A plain NIC: the software offload driver segments and checksums.
#[test]
fn tso_guest_over_a_port_with_no_offloads() {
    let Some((env, p)) = offloads_hold("off-tso-none", "tso", "none") else {
        return;
    };
    capture_shows_good_checksums(&env);
    assert_eq!(
        p["offloads"],
        json!({"sg": false, "csum": false, "tso4": false, "tso6": false, "uso": false})
    );
    assert!(shaped(&p) > 0, "{p}");
}

/// Checksum offload without scatter-gather: GSO is segmented here.
#[test]
fn tso_guest_over_a_csum_port() {
    let Some((_env, p)) = offloads_hold("off-tso-csum", "tso", "csum") else {
        return;
    };
    assert!(shaped(&p) > 0, "{p}");
}

/// Gathered MTU frames to a port without scatter-gather are copied into
/// one buffer first, and counted.
#[test]
fn sg_csum_guest_over_a_csum_port_linearizes() {
    let Some((_env, p)) = offloads_hold("off-sgc-csum", "sg+csum", "csum") else {
        return;
    };
    assert!(linearized(&p) > 0, "{p}");
    assert!(p["counters"]["tx_linearized_bytes"].as_u64().unwrap_or(0) > 0);
}

/// Scatter-gather without checksum offload: checksums in software.
#[test]
fn tso_guest_over_an_sg_port() {
    let Some((env, p)) = offloads_hold("off-tso-sg", "tso", "sg") else {
        return;
    };
    capture_shows_good_checksums(&env);
    assert!(shaped(&p) > 0, "{p}");
    assert_eq!(linearized(&p), 0, "{p}");
}

/// Scatter-gather and checksum offload without TSO (Figure 7's SG+Csum
/// NIC): GSO is segmented here with its payload gathered where it lies,
/// none of it copied, checksums left to the port.
#[test]
fn tso_guest_over_an_sg_csum_port_gathers() {
    let Some((_env, p)) = offloads_hold("off-tso-sgc", "tso", "sg+csum") else {
        return;
    };
    assert!(
        p["counters"]["tx_gathered"].as_u64().unwrap_or(0) > 0,
        "{p}"
    );
    assert_eq!(shaped(&p), 0, "{p}");
    assert_eq!(linearized(&p), 0, "{p}");
}

/// A guest without offloads: full checksums, MTU frames from its kernel.
#[test]
fn no_offload_guest_over_an_sg_csum_port() {
    offloads_hold("off-none-sgc", "none", "sg+csum");
}

/// Everything the port takes as it is: nothing linearized.
#[test]
fn sg_csum_guest_over_a_tso_port() {
    let Some((_env, p)) = offloads_hold("off-sgc-tso", "sg+csum", "tso") else {
        return;
    };
    assert_eq!(linearized(&p), 0, "{p}");
}

/// Average bytes per frame the driver domain's wire port received.
fn rx_frame_bytes(env: &Env) -> f64 {
    let p = wire_port(&env.status());
    let c = &p["counters"];
    c["rx_bytes"].as_f64().unwrap_or(0.0) / c["rx_packets"].as_f64().unwrap_or(1.0).max(1.0)
}

/// GRO on the port, on by default as a NIC's driver has it: the wire host
/// sends MTU-sized frames (TSO and GSO off), the port receives them
/// coalesced, a guest with TSO gets them as GSO frames and a guest without
/// offloads segmented again, each file intact; `up --port-gro off` leaves
/// the frames MTU-sized.
#[test]
fn gro_on_the_port_coalesces_and_every_guest_gets_its_file_intact() {
    let Some(env) = Env::new("off-gro") else {
        return;
    };
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("gro.toml");
    let guest2 = "[[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\noffload = \"none\"\n";
    std::fs::write(&path, topology("tso", "tso") + guest2).unwrap();
    for gro in ["on", "off"] {
        env.ok(&["up", "--config", path.to_str().unwrap(), "--port-gro", gro]);
        let k = env.ok(&["exec", "drv", "--", "ethtool", "-k", "peth0"]);
        assert!(
            k.contains(&format!("generic-receive-offload: {gro}")),
            "{k}"
        );
        env.ok(&[
            "exec", "wire", "--", "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
        ]);
        fetch(&env, "wire", "10.77.0.254", 8085, "guest1", 16);
        fetch(&env, "wire", "10.77.0.254", 8086, "guest2", 16);
        let per_frame = rx_frame_bytes(&env);
        if gro == "on" {
            assert!(
                per_frame > 3000.0,
                "coalesced: {per_frame:.0} bytes a frame"
            );
        } else {
            assert!(
                per_frame < 1600.0,
                "MTU-sized: {per_frame:.0} bytes a frame"
            );
        }
        env.ok(&["down"]);
    }
}

/// UDP segmentation offload (splitnet's ring extension): guest1, offered
/// everything, hands its kernel USO, and its `UDP_SEGMENT` bursts leave its
/// NIC whole (one frame per ten datagrams), to the wire host and to guest2,
/// as the wire host's reach it whole; guest2, offered Xen's set only
/// ("tso"), has no USO on its NIC, and what the wire host sends it by USO
/// is cut into whole datagrams by netback. Every datagram arrives
/// whole, of the segment size, intact, with no checksum error counted.
#[test]
fn udp_segmentation_offload_end_to_end() {
    let Some(env) = Env::new("off-uso") else {
        return;
    };
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("uso.toml");
    let topo = topology("all", "all").replace(
        "[wire]",
        "[[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\n\
         offload = \"tso\"\nbackend = \"drv\"\n[wire]",
    );
    std::fs::write(&path, topo).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    wait_until(
        "status shows both vifs' negotiated offloads",
        Duration::from_secs(10),
        || {
            let st = env.status();
            vif(&st, "guest1")["offloads"] == negotiated("all")
                && vif(&st, "guest2")["offloads"] == negotiated("tso")
        },
    );
    assert!(guest_feature(&env, "tx-udp-segmentation"));
    let g2 = env.ok(&["exec", "guest2", "--", "ethtool", "-k", "eth0"]);
    assert!(g2.contains("tx-udp-segmentation: off"), "{g2}");
    let before = [udp_in("wire"), udp_in("guest1"), udp_in("guest2")];

    let sent = nic_packets("guest1", "tx_packets", || {
        uso_transfer(&env, "guest1", "wire", "10.77.0.254", 9101)
    });
    let whole = u64::from(USO_N) * 2;
    assert!(
        sent < whole,
        "guest1's NIC took {sent} frames for {USO_N} super-datagrams: no USO"
    );
    uso_transfer(&env, "guest1", "guest2", "10.77.0.2", 9102);
    let got = nic_packets("guest1", "rx_packets", || {
        uso_transfer(&env, "wire", "guest1", "10.77.0.1", 9103)
    });
    assert!(
        got < whole,
        "{got} frames into guest1's NIC: USO did not cross whole"
    );
    let cut = nic_packets("guest2", "rx_packets", || {
        uso_transfer(&env, "wire", "guest2", "10.77.0.2", 9104)
    });
    assert!(
        cut >= u64::from(USO_N * 10),
        "{cut} frames into guest2's NIC, which takes no USO: netback did not cut them"
    );

    for (d, b) in ["wire", "guest1", "guest2"].into_iter().zip(before) {
        assert_udp_checksums_good(d, b, "USO transfers");
    }
}
