//! The vif options of xl-network-configuration(5) end to end, as a user
//! checks them through `splitnet up` with a topology: `ip=` anti-spoofing,
//! `rate=`, `mtu=`, `bridge=` (several bridges) and `vlan=`. Needs root,
//! ping, iperf3, tcpdump, curl and python3 (a packet-socket sender); run
//! one test at a time, under the lock.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(10);

/// A topology: drv, guest`i+1` with address `guests[i].0` and the extra
/// lines `guests[i].1`, the wire host (IPv4 and IPv6), then `extra`.
fn topology(guests: &[(&str, &str)], extra: &str) -> String {
    let mut t = "name = \"vifopts\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n".to_string();
    for (i, (addr, lines)) in guests.iter().enumerate() {
        t += &format!(
            "[[domain]]\nname = \"guest{}\"\nkind = \"guest\"\naddress = \"{addr}\"\n{lines}\n",
            i + 1
        );
    }
    t + "[wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\nipv6 = \"fd77::fe/64\"\n" + extra
}

/// `splitnet up --config` with `text`.
fn up(env: &Env, text: &str) {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("vifopts.toml");
    std::fs::write(&path, text).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
}

/// One of the netback counters of `guest`'s first vif (0 before the first
/// publication).
fn counter(env: &Env, guest: &str, key: &str) -> u64 {
    vif(&env.status(), guest)["counters"][key]
        .as_u64()
        .unwrap_or(0)
}

/// A drop count of `guest`'s first vif, by reason.
fn drops(env: &Env, guest: &str, reason: &str) -> u64 {
    vif(&env.status(), guest)["counters"]["drops"][reason]
        .as_u64()
        .unwrap_or(0)
}

/// Waits until `read` exceeds `before`.
fn wait_rises(what: &str, before: u64, read: impl Fn() -> u64) {
    wait_until(what, LIMIT, || read() > before);
}

/// `ping` from `from` with `args` before the destination `to` gets no reply.
fn no_ping(env: &Env, from: &str, args: &[&str], to: &str) {
    let mut a = vec![
        "exec", from, "--", "ping", "-c", "3", "-i", "0.2", "-W", "1",
    ];
    a.extend_from_slice(args);
    a.push(to);
    let o = env.splitnet(&a);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && out.contains("100% packet loss"),
        "{from} {args:?} -> {to} should get no reply:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn sh(domain: &str, cmd: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", &toolstack::host::netns_name(domain)])
        .args(cmd)
        .output()
        .expect("ip netns exec")
}

fn mac_of(env: &Env, guest: &str, dev: &str) -> [u8; 6] {
    let s = env.ok(&[
        "exec",
        guest,
        "--",
        "cat",
        &format!("/sys/class/net/{dev}/address"),
    ]);
    let b: Vec<u8> = s
        .trim()
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    b.try_into().unwrap()
}

/// An ARP frame from `mac`, broadcast, with 802.1Q tag `vid` if given:
/// `op` 1 (request) or 2 (reply), sender `spa`, target `tpa`.
fn arp_frame(mac: [u8; 6], vid: Option<u16>, op: u8, spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac);
    if let Some(v) = vid {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, op]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa);
    f.resize(f.len().max(60), 0);
    f
}

/// Sends `frame` 3 times from `guest`'s eth0 through a packet socket.
fn send_raw(env: &Env, guest: &str, frame: &[u8]) {
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    env.ok(&[
        "exec",
        guest,
        "--",
        "python3",
        "-c",
        "import socket,sys\n\
         s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n\
         s.bind((sys.argv[1],0))\n\
         for _ in range(3): s.send(bytes.fromhex(sys.argv[2]))",
        "eth0",
        &hex,
    ]);
}

/// The MAC the wire host's neighbour table holds for `ip`.
fn wire_neigh(ip: &str) -> String {
    let o = sh("wire", &["ip", "neigh", "show", ip]);
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .unwrap_or("")
        .to_string()
}

fn hex_mac(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

#[test]
fn ip_lets_a_guest_send_only_from_its_own_addresses() {
    let Some(env) = Env::new("vo-ip") else {
        return;
    };
    up(
        &env,
        &topology(
            &[
                (
                    "10.77.0.1/24",
                    "ipv6 = \"fd77::1/64\"\nvif = [\"ip=10.77.0.1 fd77::1\"]",
                ),
                ("10.77.0.2/24", ""),
            ],
            "",
        ),
    );
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("wire", "10.77.0.1", 2);
    env.ping("guest1", "fd77::fe", 2);
    // An address the toolstack did not give guest1 is dead both ways.
    let spoofed = counter(&env, "guest1", "spoofed");
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "addr",
        "add",
        "10.77.0.50/24",
        "dev",
        "eth0",
    ]);
    no_ping(&env, "wire", &[], "10.77.0.50");
    no_ping(&env, "guest1", &["-I", "10.77.0.50"], "10.77.0.254");
    wait_rises("guest1's spoofed counter", spoofed, || {
        counter(&env, "guest1", "spoofed")
    });
    gratuitous_arp_for_guest2_changes_nothing(&env);
    // IPv6: an address outside ip= gets nothing through either.
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "-6",
        "addr",
        "add",
        "fd77::50/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    let spoofed = counter(&env, "guest1", "spoofed");
    no_ping(&env, "guest1", &["-6", "-I", "fd77::50"], "fd77::fe");
    no_ping(&env, "wire", &["-6"], "fd77::50");
    wait_rises("guest1's spoofed counter (IPv6)", spoofed, || {
        counter(&env, "guest1", "spoofed")
    });
    // Its own address still works (removing the other keeps the kernel
    // from choosing it as the source).
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "-6",
        "addr",
        "del",
        "fd77::50/64",
        "dev",
        "eth0",
    ]);
    env.ping("guest1", "fd77::fe", 2);
    assert_eq!(counter(&env, "guest2", "spoofed"), 0);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// guest1 (with `ip=`) claims guest2's address with gratuitous ARP requests
/// and replies: each is counted as spoofed, and the wire keeps guest2's MAC.
fn gratuitous_arp_for_guest2_changes_nothing(env: &Env) {
    // A gratuitous ARP claiming guest2's address changes nothing on the wire.
    env.ping("wire", "10.77.0.2", 2);
    let g2 = hex_mac(mac_of(env, "guest2", "eth0"));
    assert_eq!(wire_neigh("10.77.0.2"), g2);
    // No lock time: an unfiltered gratuitous ARP would take effect at once.
    let o = sh("wire", &["sysctl", "-w", "net.ipv4.neigh.eth0.locktime=0"]);
    assert!(o.status.success(), "{o:?}");
    let spoofed = counter(env, "guest1", "spoofed");
    let g1 = mac_of(env, "guest1", "eth0");
    for op in [1, 2] {
        send_raw(
            env,
            "guest1",
            &arp_frame(g1, None, op, [10, 77, 0, 2], [10, 77, 0, 2]),
        );
    }
    wait_until("the six ARPs to be counted", LIMIT, || {
        counter(env, "guest1", "spoofed") >= spoofed + 6
    });
    assert_eq!(
        wire_neigh("10.77.0.2"),
        g2,
        "guest1 took over guest2's address"
    );
    env.ping("wire", "10.77.0.2", 2);
}

#[test]
fn rate_limits_one_vif_and_not_its_neighbour() {
    let Some(env) = Env::new("vo-rate") else {
        return;
    };
    up(
        &env,
        &topology(
            &[
                ("10.77.0.1/24", "vif = [\"rate=20Mb/s\"]"),
                ("10.77.0.2/24", ""),
            ],
            "",
        ),
    );
    env.ping("guest1", "10.77.0.254", 2);
    let waits = counter(&env, "guest1", "credit_waits");
    // The limited vif still carries its stream, and waits for credit to
    // do so; its neighbour carries one without waiting. How close each
    // stays to its rate is `bench vif-options`' to report.
    let limited = iperf(&env, "wire", "10.77.0.254", "guest1", false, 3) * 1000.0;
    assert!(limited > 0.0, "guest1 at rate=20Mb/s sent nothing");
    wait_rises("guest1's credit waits", waits, || {
        counter(&env, "guest1", "credit_waits")
    });
    let free = iperf(&env, "wire", "10.77.0.254", "guest2", false, 3) * 1000.0;
    eprintln!("rate=20Mb/s: guest1 {limited:.1} Mbit/s, guest2 (no rate) {free:.1} Mbit/s");
    assert!(free > 0.0, "guest2 without rate= sent nothing");
    assert_eq!(counter(&env, "guest2", "credit_waits"), 0);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn mtu_9000_carries_jumbo_frames_and_a_1500_vif_refuses_them() {
    let Some(env) = Env::new("vo-mtu") else {
        return;
    };
    up(
        &env,
        &topology(
            &[
                ("10.77.0.1/24", "vif = [\"mtu=9000\"]"),
                ("10.77.0.2/24", ""),
            ],
            "[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 9000\n",
        ),
    );
    let link = env.ok(&["exec", "guest1", "--", "ip", "link", "show", "dev", "eth0"]);
    assert!(link.contains("mtu 9000"), "{link}");
    let ping_df = |from: &str, size: &str| {
        env.splitnet(&[
            "exec",
            from,
            "--",
            "ping",
            "-M",
            "do",
            "-s",
            size,
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "2",
            "10.77.0.254",
        ])
    };
    let o = ping_df("guest1", "8972");
    assert!(
        o.status.success(),
        "a 9000-byte ping from guest1:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // 64 MiB in, intact (SHA-256), and an iperf3 stream out.
    http_fetch_64mib(&env);
    iperf(&env, "wire", "10.77.0.254", "guest1", false, 2);
    assert_eq!(counter(&env, "guest1", "oversize"), 0);
    // A guest at the default MTU shares the jumbo wire.
    env.ping("guest2", "10.77.0.254", 2);
    assert!(ping_df("guest2", "1472").status.success());
    // Past its vif's MTU, a frame is refused and counted.
    let oversize = counter(&env, "guest2", "oversize");
    env.ok(&[
        "exec", "guest2", "--", "ip", "link", "set", "eth0", "mtu", "9000",
    ]);
    let o = ping_df("guest2", "8000");
    assert!(
        !o.status.success(),
        "an 8028-byte frame crossed a 1500-byte vif:\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    wait_rises("guest2's oversize counter", oversize, || {
        counter(&env, "guest2", "oversize")
    });
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The driver domain's bridges in `status --json`: name → ports.
fn bridge_ports(env: &Env) -> BTreeMap<String, Vec<Value>> {
    let st = env.status();
    st["bridges"][0]["bridges"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            let ports = b["ports"].as_array().cloned().unwrap_or_default();
            (b["name"].as_str().unwrap_or("").to_string(), ports)
        })
        .collect()
}

#[test]
fn a_vif_on_another_bridge_is_cut_off_until_it_gets_one_on_xenbr0() {
    let Some(env) = Env::new("vo-bridge") else {
        return;
    };
    up(
        &env,
        &topology(
            &[
                ("10.77.0.1/24", ""),
                ("10.77.0.2/24", "vif = [\"bridge=xenbr1\"]"),
            ],
            "",
        ),
    );
    env.ping("guest1", "10.77.0.254", 3);
    no_ping(&env, "guest2", &[], "10.77.0.1");
    no_ping(&env, "guest2", &[], "10.77.0.254");
    no_ping(&env, "guest1", &[], "10.77.0.2");
    // Status shows both bridges and who is on which.
    let st = env.status();
    let (g1, g2) = (
        vif(&st, "guest1")["vif"].clone(),
        vif(&st, "guest2")["vif"].clone(),
    );
    wait_until("status to show xenbr0 and xenbr1", LIMIT, || {
        let b = bridge_ports(&env);
        b.len() == 2
            && b.get("xenbr0")
                .is_some_and(|p| p.contains(&g1) && !p.contains(&g2))
            && b.get("xenbr1") == Some(&vec![g2.clone()])
    });
    let out = env.ok(&["network-attach", "guest2", "bridge=xenbr0"]);
    assert!(out.contains("connected as eth1"), "{out}");
    env.ok(&[
        "exec",
        "guest2",
        "--",
        "ip",
        "addr",
        "add",
        "10.79.0.2/24",
        "dev",
        "eth1",
    ]);
    env.ok(&[
        "exec",
        "wire",
        "--",
        "ip",
        "addr",
        "add",
        "10.79.0.254/24",
        "dev",
        "eth0",
    ]);
    env.ping("guest2", "10.79.0.254", 3);
    wait_until("guest2's second vif on xenbr0 in status", LIMIT, || {
        bridge_ports(&env)["xenbr0"].len() == 3
    });
    // eth0 stays cut off.
    no_ping(&env, "guest2", &[], "10.77.0.254");
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn vlans_separate_guests_and_leave_the_trunk_tagged() {
    let Some(env) = Env::new("vo-vlan") else {
        return;
    };
    up(
        &env,
        &topology(
            &[
                ("10.77.0.1/24", "vif = [\"vlan=10\"]"),
                ("10.77.0.2/24", "vif = [\"vlan=10\"]"),
                ("10.77.0.3/24", "vif = [\"vlan=20\"]"),
            ],
            "",
        ),
    );
    env.ping("guest1", "10.77.0.2", 3);
    env.ping("guest2", "10.77.0.1", 2);
    no_ping(&env, "guest3", &[], "10.77.0.1");
    no_ping(&env, "guest3", &[], "10.77.0.2");
    no_ping(&env, "guest1", &[], "10.77.0.254");
    // guest1's ARP for the wire host leaves the trunk tagged with VLAN 10.
    let _asking = env.spawn(&[
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "50",
        "-i",
        "0.2",
        "10.77.0.254",
    ]);
    let o = sh(
        "wire",
        &[
            "timeout", "10", "tcpdump", "-e", "-n", "-l", "-i", "eth0", "-c", "1", "vlan", "10",
            "and", "arp",
        ],
    );
    let cap = String::from_utf8_lossy(&o.stdout);
    assert!(
        cap.contains("vlan 10") && cap.contains("who-has 10.77.0.254 tell 10.77.0.1"),
        "no tagged ARP from guest1 on the trunk:\n{cap}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A guest cannot hop VLANs by tagging: its tagged frames are dropped.
    let tagged = drops(&env, "guest1", "vlan_tagged");
    let g1 = mac_of(&env, "guest1", "eth0");
    send_raw(
        &env,
        "guest1",
        &arp_frame(g1, Some(20), 1, [10, 77, 0, 1], [10, 77, 0, 3]),
    );
    wait_until("guest1's vlan_tagged drops", LIMIT, || {
        drops(&env, "guest1", "vlan_tagged") >= tagged + 3
    });
    env.ping("guest1", "10.77.0.2", 2);
    env.ok(&["down"]);
    assert_nothing_left();
}
