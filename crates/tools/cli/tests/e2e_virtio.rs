//! A guest with `nic = "virtio"` end to end: guest1 runs its own vhost-user
//! frontend and virtio-net driver over a memfd, served by the driver
//! domain's vhost-user backend on the same bridge as guest2's netfront vif
//! and the wire host. Real applications (ping both ways and over IPv6,
//! iperf3 both ways, a 64 MiB HTTP download with its SHA-256 checked), and
//! a SIGKILL of the driver domain in the middle of a TCP stream, which the
//! stream survives on the same TAP. Needs root and iperf3, curl, python3
//! and ping.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

/// guest1's frontend status (`virtio_nic` in `status --json`) once `ready`.
fn virtio_nic(env: &Env, ready: impl Fn(&Value) -> bool) -> Value {
    let mut v = Value::Null;
    wait_until("guest1's virtio status", Duration::from_secs(10), || {
        v = domain(&env.status(), "guest1")["virtio_nic"].clone();
        ready(&v)
    });
    v
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

fn eth0_ifindex() -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &toolstack::host::netns_name("guest1")])
        .args(["cat", "/sys/class/net/eth0/ifindex"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_virtio_guest_carries_real_traffic_and_survives_a_driver_kill() {
    let Some(env) = Env::new("virtio") else {
        return;
    };
    env.up_emulated("virtio", "nic = \"virtio\"");
    let v = virtio_nic(&env, |v| v["connected"] == true);
    let names = v["feature_names"].to_string();
    for f in [
        "VERSION_1",
        "MRG_RXBUF",
        "HOST_TSO4",
        "GUEST_TSO4",
        "EVENT_IDX",
    ] {
        assert!(names.contains(f), "{f} not negotiated: {v}");
    }
    env.ping_guest1_all_ways();
    let tx = iperf(&env, "wire", "10.77.0.254", "guest1", false, 3) * 1000.0;
    let rx = iperf(&env, "wire", "10.77.0.254", "guest1", true, 3) * 1000.0;
    let http = http_fetch_64mib(&env);
    let g2 = env.guest2_unaffected();
    eprintln!(
        "virtio guest: iperf3 guest1->wire {tx:.1} Mbit/s, wire->guest1 {rx:.1}; 64 MiB HTTP {http:.1} Mbit/s; guest2->wire {g2:.1}"
    );
    let v = virtio_nic(&env, |v| v["rx_packets"].as_u64().unwrap_or(0) > 1000);
    eprintln!("guest1's frontend: {v}");
    assert!(
        n(&v, "tx_packets") > 1000 && n(&v, "rx_bytes") > 64 << 20,
        "{v}"
    );
    let drops = v["drops"].as_object().unwrap();
    assert!(drops.values().all(|d| d == 0), "{v}");
    assert_eq!(n(&v, "connects"), 1, "{v}");
    let plain = env.ok(&["status"]);
    assert!(
        plain.contains("virtio NIC guest1 (frontend): connected"),
        "{plain}"
    );

    // The driver domain dies in the middle of a TCP stream from guest1.
    let st = env.status();
    let drv_pid = domain(&st, "drv")["pid"].clone();
    let tap = eth0_ifindex();
    let (_srv, mut client) = env.stream_to_wire("guest1", 8);
    kill9(drv_pid.as_i64().unwrap());
    wait_until("drv to come back", Duration::from_secs(15), || {
        let st = env.status();
        let d = domain(&st, "drv");
        !d["pid"].is_null() && d["pid"] != drv_pid
    });
    let v = virtio_nic(&env, |v| v["connects"] == 2 && v["connected"] == true);
    assert_eq!(n(&v, "disconnects"), 1, "{v}");
    assert!(
        client.wait_exit(Duration::from_secs(40)),
        "the iperf3 client did not finish"
    );
    let code = client.0.wait().unwrap();
    assert!(code.success(), "iperf3 failed after the restart: {code}");
    assert_eq!(eth0_ifindex(), tap, "guest1 kept its TAP");
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("guest2", "10.77.0.1", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// UDP segmentation offload over virtio: guest1's frontend and the driver
/// domain's backend agree HOST_USO and GUEST_USO4/6, so `UDP_SEGMENT`
/// bursts leave guest1's NIC whole (one frame per ten datagrams), and the
/// wire host's reach it whole; every datagram arrives whole, of the segment
/// size and intact, at the wire host, at guest1 and at guest2 (netfront).
#[test]
fn a_virtio_guest_sends_and_receives_udp_gso_whole() {
    let Some(env) = Env::new("virtio-uso") else {
        return;
    };
    env.up_emulated("virtio-uso", "nic = \"virtio\"");
    let v = virtio_nic(&env, |v| v["connected"] == true);
    let names = v["feature_names"].to_string();
    for f in ["HOST_USO", "GUEST_USO4", "GUEST_USO6"] {
        assert!(names.contains(f), "{f} not negotiated: {v}");
    }
    env.ping_guest1_all_ways();
    let whole = u64::from(USO_N) * 2;
    let sent = nic_packets("guest1", "tx_packets", || {
        uso_transfer(&env, "guest1", "wire", "10.77.0.254", 9201)
    });
    assert!(sent < whole, "guest1's NIC took {sent} frames: no USO");
    let got = nic_packets("guest1", "rx_packets", || {
        uso_transfer(&env, "wire", "guest1", "10.77.0.1", 9202)
    });
    assert!(
        got < whole,
        "{got} frames into guest1's NIC: USO did not cross whole"
    );
    uso_transfer(&env, "guest1", "guest2", "10.77.0.2", 9203);
    let v = virtio_nic(&env, |v| v["tx_packets"].as_u64().unwrap_or(0) > 0);
    let drops = v["drops"].as_object().unwrap();
    assert!(drops.values().all(|d| d == 0), "{v}");
    env.ok(&["down"]);
    assert_nothing_left();
}
