//! The vxlan port kind end to end on two real instances (`splitnet
//! underlay up a b`, `splitnet --host a|b up`), each a driver domain and a
//! guest with a vxlan port to the other's VTEP: what e2e_multihost leaves
//! to the port itself. The guests' MTU budget and full-size frames across,
//! the underlay budget (refused on a 1500 underlay, working on 1550),
//! status's tunnels block, `capture` on the port, a peer the host cannot
//! route to refused at `up` with nothing half set up, an evpn MAC
//! withdrawn when its vif goes and published again when it comes back,
//! and FRR restarted by hv when it dies. Needs root and FRR; run one test
//! at a time.

mod common;

use common::lab::Lab;
use common::*;
use std::io::BufRead;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const HOSTS: [&str; 2] = ["a", "b"];
const LIMIT: Duration = Duration::from_secs(20);

/// Host `i`'s (1-based) guest1: its address and MAC.
fn guest_ip(i: usize) -> String {
    format!("10.77.0.{}", 10 * i + 1)
}

fn guest_mac(i: usize) -> String {
    format!("00:16:3e:1a:{i:02x}:01")
}

impl Lab {
    /// Host `i`'s topology: a driver domain, guest1, and a vxlan port to
    /// the other host with `keys` added; `up` of it, its output.
    fn up(&self, i: usize, keys: &str) -> Output {
        let other = 3 - i;
        let t = format!(
            "name = \"vx-{i}\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
             [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"{}/24\"\nvif = [\"mac={}\"]\n\
             [[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\nvni = 100\nlocal = \"10.200.{i}.3\"\npeers = [\"10.200.{other}.3\"]\n{keys}",
            guest_ip(i),
            guest_mac(i)
        );
        std::fs::create_dir_all(&self.env.run_dir).unwrap();
        let path = self.env.run_dir.join(format!("{i}.toml"));
        std::fs::write(&path, t).unwrap();
        self.on(HOSTS[i - 1], &["up", "--config", path.to_str().unwrap()])
    }

    fn up_both(&self, keys: &str) {
        for i in 1..=2 {
            let o = self.up(i, keys);
            assert!(
                o.status.success(),
                "up {i}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }

    /// `ping` from `host`'s guest1 with `extra` options; its output.
    fn ping(&self, host: &str, to: &str, extra: &[&str]) -> String {
        let mut a = vec![
            "exec", "guest1", "--", "ping", "-c", "2", "-i", "0.2", "-W", "2", "-w", "10",
        ];
        a.extend_from_slice(extra);
        a.push(to);
        let out = self.ok(host, &a);
        if let Err(e) = testutil::ping::answered_in_full(&out, 2) {
            panic!("{host} -> {to}: {e}:\n{out}");
        }
        out
    }
}

/// `splitnet --host a capture drv/<port> -c 4` while a's guest1 pings b's
/// twice: the capture holds that ICMP. Four frames, not two: when guest1's
/// neighbour entry has expired, the ARP request and reply cross the port
/// first, and two frames would be those alone.
fn capture_on(pair: &Lab, port: &str) {
    let file = pair.env.run_dir.join("vx.pcap");
    let child = pair
        .command("a", &["capture", &format!("drv/{port}"), "-c", "4", "-w"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bg = Background(child);
    let mut line = String::new();
    std::io::BufReader::new(bg.0.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("splitnet capture: on "), "{line}");
    pair.ping("a", &guest_ip(2), &[]);
    assert!(bg.wait_exit(Duration::from_secs(10)), "capture did not end");
    let o = Command::new("tcpdump")
        .args(["-n", "-r", file.to_str().unwrap(), "icmp"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&guest_ip(2)), "no ICMP on {port}:\n{text}");
}

#[test]
fn static_peers_budget_the_guests_mtu_and_show_in_status_and_capture() {
    let Some(pair) = Lab::new("vx-static", &HOSTS, 1500) else {
        return;
    };
    pair.up_both("");
    let mtu = pair.ok(
        "a",
        &["exec", "guest1", "--", "cat", "/sys/class/net/eth0/mtu"],
    );
    assert_eq!(mtu.trim(), "1450");
    // A full-size frame crosses unfragmented: 1450 - 28 bytes of headers.
    pair.ping("a", &guest_ip(2), &["-M", "do", "-s", "1422"]);
    pair.ping("b", &guest_ip(1), &[]);
    let t = pair.tunnel("a");
    assert_eq!(
        (
            t["mode"].as_str(),
            t["local"].as_str(),
            t["underlay_mtu"].as_u64()
        ),
        (Some("static"), Some("10.200.1.3"), Some(1500)),
        "{t}"
    );
    // Head-end replication learned b's guest behind b's VTEP.
    assert!(
        pair.macs_behind("a", "10.200.2.3").contains(&guest_mac(2)),
        "{t}"
    );
    let text = pair.ok("a", &["status"]);
    assert!(
        text.contains("TUNNELS (host a)") && text.contains("peer 10.200.2.3: 1 MAC "),
        "{text}"
    );
    capture_on(&pair, "vx100");
    pair.down_all();
}

#[test]
fn the_underlay_budget_needs_a_jumbo_underlay_and_gives_guests_1500() {
    let Some(pair) = Lab::new("vx-small", &HOSTS, 1500) else {
        return;
    };
    let o = pair.up(1, "mtu_budget = \"underlay\"\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("needs underlay links of 1550 bytes or more"),
        "{err}"
    );
    pair.down_all();
    drop(pair);
    let Some(pair) = Lab::new("vx-jumbo", &HOSTS, 1550) else {
        return;
    };
    pair.up_both("mtu_budget = \"underlay\"\n");
    let t = pair.tunnel("b");
    assert_eq!(
        (t["guest_mtu"].as_u64(), t["underlay_mtu"].as_u64()),
        (Some(1500), Some(1550))
    );
    pair.ping("a", &guest_ip(2), &["-M", "do", "-s", "1472"]);
    pair.down_all();
}

#[test]
fn a_peer_the_host_cannot_reach_is_refused_at_up() {
    let Some(pair) = Lab::new("vx-unreach", &HOSTS, 1500) else {
        return;
    };
    let ip = |args: &[&str]| {
        let o = Command::new("ip")
            .args(["-n", "splitnet@a"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
    };
    ip(&["route", "add", "prohibit", "10.200.2.3/32"]);
    let o = pair.up(1, "");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("peer 10.200.2.3 is unreachable from the host's underlay"),
        "{err}"
    );
    // Nothing of the port was made in the host's namespace.
    let links = Command::new("ip")
        .args(["-n", "splitnet@a", "-br", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains("sn0-drv"), "{links}");
    ip(&["route", "del", "prohibit", "10.200.2.3/32"]);
    pair.down_all();
}

#[test]
fn evpn_withdraws_a_detached_vif_and_hv_restarts_frr() {
    let Some(pair) = Lab::new("vx-evpn", &HOSTS, 1500) else {
        return;
    };
    pair.up_both("evpn = true\n");
    wait_until("b to learn a's guest from BGP", LIMIT, || {
        pair.macs_behind("b", "10.200.1.3").contains(&guest_mac(1))
    });
    pair.ping("a", &guest_ip(2), &[]);
    // The vif goes: its MAC is withdrawn; it comes back: published again.
    pair.ok("a", &["network-detach", "guest1", "0"]);
    wait_until("a's guest withdrawn at b", LIMIT, || {
        !pair.macs_behind("b", "10.200.1.3").contains(&guest_mac(1))
    });
    pair.ok(
        "a",
        &["network-attach", "guest1", &format!("mac={}", guest_mac(1))],
    );
    wait_until("a's guest advertised again", LIMIT, || {
        pair.macs_behind("b", "10.200.1.3").contains(&guest_mac(1))
    });
    // An attached vif gets the budgeted MTU too.
    wait_until("the attached vif's MTU", LIMIT, || {
        let o = pair.on(
            "a",
            &["exec", "guest1", "--", "cat", "/sys/class/net/eth0/mtu"],
        );
        String::from_utf8_lossy(&o.stdout).trim() == "1450"
    });
    // bgpd dies: hv starts it again and the session comes back.
    let pid_file = "/var/run/frr/splitnet@a-drv/bgpd.pid";
    let pid = std::fs::read_to_string(pid_file).expect("a's bgpd pid file");
    kill9(pid.trim().parse().unwrap());
    wait_until(
        "a's bgpd restarted and peering",
        Duration::from_secs(30),
        || {
            let again = std::fs::read_to_string(pid_file).unwrap_or_default();
            let t = pair.tunnel("a");
            !again.is_empty() && again != pid && t["bgp"][0]["state"] == "Established"
        },
    );
    let log = std::fs::read_to_string(pair.env.run_dir.join("a").join("hv.log")).unwrap();
    assert!(log.contains("drv: its bgpd exited"), "{log}");
    pair.down_all();
}
