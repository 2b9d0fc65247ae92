//! The vxlan port kind end to end, in the default instance: the default
//! topology plus a `[[port]] kind = "vxlan"` whose peer is a namespace the
//! test builds (`sntest-vxpeer`, joined to the host by a veth, its own
//! kernel VXLAN device and, for evpn, its own FRR). A guest pings across
//! the tunnel; status shows the peer, the MACs behind it and the BGP
//! session; `capture` works on the port; bad ports are refused at `up`
//! with nothing half set up; `down` leaves no device, route, FRR process
//! or namespace. Needs root and FRR; run one test at a time.

mod common;

use common::*;
use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PEER_NS: &str = "sntest-vxpeer";
/// The peer's link on the host.
const HOST_IF: &str = "sntest-vxh";
const HOST_IP: &str = "10.201.0.1/24";
/// The peer's VTEP address.
const PEER_VTEP: &str = "10.201.0.2";
/// The driver domain's VTEP address.
const VTEP: &str = "10.200.1.3";
/// The peer's address on the guests' segment (10.77.0.0/24).
const PEER_IP: &str = "10.77.0.100";
const FRR: &str = "/usr/lib/frr";

fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn in_peer(args: &[&str]) -> String {
    let mut a = vec!["netns", "exec", PEER_NS];
    a.extend_from_slice(args);
    sh("ip", &a)
}

/// The other VTEP: a namespace with a veth to the host and a VXLAN
/// device of VNI 100 (static: flooding to the driver domain's VTEP; evpn:
/// in a kernel bridge with FRR); its address on the segment is on `vxg`
/// (evpn: behind the kernel bridge, published as a static FDB entry).
/// Taken down, even on failure, when dropped.
struct Peer {
    frr: Vec<Child>,
    dir: PathBuf,
}

impl Peer {
    fn new(evpn: bool) -> Peer {
        Peer::remove();
        let dir = std::env::temp_dir().join(format!("sntest-vxpeer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut peer = Peer {
            frr: Vec::new(),
            dir,
        };
        sh("ip", &["netns", "add", PEER_NS]);
        let veth = ["link", "add", HOST_IF, "type", "veth", "peer", "name"];
        sh("ip", &[&veth[..], &["ul0", "netns", PEER_NS]].concat());
        sh("ip", &["addr", "add", HOST_IP, "dev", HOST_IF]);
        sh("ip", &["link", "set", HOST_IF, "up"]);
        for c in [
            "ip link set lo up",
            &format!("ip addr add {PEER_VTEP}/24 dev ul0"),
            "ip link set ul0 up",
            "ip route add default via 10.201.0.1",
        ] {
            in_peer(&c.split(' ').collect::<Vec<_>>());
        }
        if evpn {
            peer.evpn_side();
        } else {
            for c in [
                format!(
                    "ip link add vx100 mtu 1450 type vxlan id 100 local {PEER_VTEP} dstport 4789"
                ),
                format!("bridge fdb append 00:00:00:00:00:00 dev vx100 dst {VTEP}"),
                "ip link add vxg mtu 1450 type veth peer name vxm mtu 1450".into(),
                "ip link add kbr100 type bridge".into(),
                "ip link set vx100 master kbr100".into(),
                "ip link set vxm master kbr100".into(),
            ] {
                in_peer(&c.split(' ').collect::<Vec<_>>());
            }
        }
        in_peer(&["ip", "addr", "add", &format!("{PEER_IP}/24"), "dev", "vxg"]);
        for l in ["vx100", "kbr100", "vxm", "vxg"] {
            in_peer(&["ip", "link", "set", l, "up"]);
        }
        peer
    }

    /// The evpn peer: VXLAN without learning in a kernel bridge, `vxg`'s
    /// MAC published on `vxm`, zebra and bgpd.
    fn evpn_side(&mut self) {
        for c in [
            format!("ip link add vx100 mtu 1450 type vxlan id 100 local {PEER_VTEP} dstport 4789 nolearning"),
            "ip link add kbr100 type bridge".into(),
            "ip link set vx100 master kbr100".into(),
            "ip link set dev vx100 type bridge_slave learning off neigh_suppress off".into(),
            "ip link add vxg mtu 1450 type veth peer name vxm mtu 1450".into(),
            "ip link set vxm master kbr100".into(),
        ] {
            in_peer(&c.split(' ').collect::<Vec<_>>());
        }
        let mac = peer_mac();
        in_peer(&[
            "bridge", "fdb", "add", &mac, "dev", "vxm", "master", "static",
        ]);
        let zebra = "frr defaults datacenter\nip nht resolve-via-default\n";
        let bgpd = format!(
            "frr defaults datacenter\nrouter bgp 65000\n bgp router-id {PEER_VTEP}\n no bgp default ipv4-unicast\n \
             neighbor {VTEP} remote-as internal\n neighbor {VTEP} timers 1 3\n neighbor {VTEP} timers connect 1\n \
             address-family l2vpn evpn\n  neighbor {VTEP} activate\n  advertise-all-vni\n exit-address-family\n"
        );
        for (d, conf) in [("zebra", zebra.to_string()), ("bgpd", bgpd)] {
            let file = self.dir.join(format!("{d}.conf"));
            std::fs::write(&file, conf).unwrap();
            let log = std::fs::File::create(self.dir.join(format!("{d}.log"))).unwrap();
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    PEER_NS,
                    &format!("{FRR}/{d}"),
                    "-N",
                    PEER_NS,
                ])
                .args(["-u", "frr", "-g", "frr", "-P", "0", "--log", "stdout", "-f"])
                .arg(&file)
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.frr.push(child);
            let sock = if d == "zebra" {
                "zserv.api"
            } else {
                "bgpd.vty"
            };
            let p = Path::new("/var/run/frr").join(PEER_NS).join(sock);
            wait_until(&format!("the peer's {d}"), Duration::from_secs(10), || {
                p.exists()
            });
        }
    }

    fn remove() {
        let _ = Command::new("ip")
            .args(["netns", "del", PEER_NS])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", HOST_IF])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(Path::new("/var/run/frr").join(PEER_NS));
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        for c in &mut self.frr {
            let _ = c.kill();
            let _ = c.wait();
        }
        Peer::remove();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The MAC of the peer's address on the segment.
fn peer_mac() -> String {
    in_peer(&["cat", "/sys/class/net/vxg/address"])
        .trim()
        .to_string()
}

/// The default topology with a vxlan port (`keys` after its kind).
fn topology(name: &str, keys: &str) -> PathBuf {
    let text = format!(
        "name = \"vxlan\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         [[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\n\
         [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n\
         [[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\n{keys}"
    );
    let p = std::env::temp_dir().join(format!("sntest-vxlan-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

fn up(env: &Env, name: &str, keys: &str) {
    let p = topology(name, keys);
    env.ok(&["up", "--config", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(p);
}

/// `status --json`'s entry of port `name`.
fn port(st: &Value, name: &str) -> Value {
    st["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no port {name} in {:#}", st["ports"]))
}

/// The MACs status lists behind VTEP `vtep` on port `name`.
fn macs_behind(env: &Env, name: &str, vtep: &str) -> Vec<String> {
    let p = port(&env.status(), name);
    let peers = p["vxlan"]["peers"].as_array().cloned().unwrap_or_default();
    let peer = peers.iter().find(|x| x["vtep"] == vtep);
    peer.and_then(|x| x["macs"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect()
}

/// The host's links and routes, as `down` must leave them.
fn host_links_and_routes() -> (String, String) {
    let links: Vec<String> = sh("ip", &["-br", "link"])
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    (links.join(" "), sh("ip", &["route"]))
}

/// What a vxlan port must not leave behind after `down`: a namespace, the
/// underlay's host end or route, an FRR of a splitnet namespace, or its
/// state directory.
fn assert_no_tunnel_left(before: &(String, String)) {
    assert_nothing_left();
    assert_eq!(
        &host_links_and_routes(),
        before,
        "links or routes left behind"
    );
    let frr: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("/usr/lib/frr/") && c.contains("splitnet-"))
        .collect();
    assert!(frr.is_empty(), "FRR left running: {frr:?}");
    let dir = Path::new("/var/run/frr").join("splitnet-drv");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// `splitnet capture drv/<port> -c 2` while guest1 pings the peer: the
/// capture holds the tunnel's ICMP.
fn capture_on(env: &Env, port: &str) {
    let file = env.run_dir.join("vx.pcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .args(["capture", &format!("drv/{port}"), "-c", "2", "-w"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("splitnet capture: on "), "{line}");
    env.ping("guest1", PEER_IP, 2);
    let mut bg = Background(child);
    assert!(bg.wait_exit(Duration::from_secs(10)), "capture did not end");
    let o = sh("tcpdump", &["-n", "-r", file.to_str().unwrap(), "icmp"]);
    assert!(o.contains(PEER_IP), "no ICMP to the peer on {port}:\n{o}");
}

#[test]
fn static_peers_carry_guests_over_the_tunnel_and_down_leaves_nothing() {
    let Some(env) = Env::new("vxlan-static") else {
        return;
    };
    let before = host_links_and_routes();
    let peer = Peer::new(false);
    up(
        &env,
        "static",
        &format!("vni = 100\nlocal = \"{VTEP}\"\npeers = [\"{PEER_VTEP}\"]\n"),
    );
    // The guests pay for the encapsulation.
    let mtu = env.ok(&["exec", "guest1", "--", "cat", "/sys/class/net/eth0/mtu"]);
    assert_eq!(mtu.trim(), "1450");
    env.ping("guest1", PEER_IP, 3);
    let ping = in_peer(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2"]);
    assert!(ping.contains(" 0% packet loss"), "{ping}");
    // Full-size frames cross without fragments: 1450 - 28 bytes of ICMP.
    env.ok(&[
        "exec", "guest1", "--", "ping", "-c", "2", "-M", "do", "-s", "1422", PEER_IP,
    ]);
    let p = port(&env.status(), "vx100");
    let x = &p["vxlan"];
    assert_eq!(
        (x["mode"].as_str(), x["vni"].as_u64(), x["local"].as_str()),
        (Some("static"), Some(100), Some(VTEP)),
        "{p:#}"
    );
    assert_eq!(
        (x["guest_mtu"].as_u64(), x["underlay_mtu"].as_u64()),
        (Some(1450), Some(1500))
    );
    assert!(
        macs_behind(&env, "vx100", PEER_VTEP).contains(&peer_mac()),
        "the peer's MAC is not learned behind {PEER_VTEP}: {p:#}"
    );
    let text = env.ok(&["status"]);
    assert!(
        text.contains("TUNNELS") && text.contains(&format!("peer {PEER_VTEP}")),
        "{text}"
    );
    capture_on(&env, "vx100");
    env.ok(&["down"]);
    drop(peer);
    assert_no_tunnel_left(&before);
}

#[test]
fn evpn_learns_the_peers_mac_from_bgp_and_publishes_the_guests() {
    let Some(env) = Env::new("vxlan-evpn") else {
        return;
    };
    if !Path::new(FRR).join("bgpd").exists() {
        eprintln!("SKIPPED: FRR is not installed (apt-get install frr)");
        return;
    }
    let before = host_links_and_routes();
    let peer = Peer::new(true);
    up(
        &env,
        "evpn",
        &format!("vni = 100\nlocal = \"{VTEP}\"\npeers = [\"{PEER_VTEP}\"]\nevpn = true\n"),
    );
    wait_until("the BGP session", Duration::from_secs(30), || {
        let p = port(&env.status(), "vxp100");
        p["vxlan"]["bgp"][0]["state"] == "Established"
    });
    // The peer's MAC arrives as a type-2 route, before any traffic.
    let mac = peer_mac();
    wait_until("the peer's MAC from BGP", Duration::from_secs(15), || {
        macs_behind(&env, "vxp100", PEER_VTEP).contains(&mac)
    });
    // guest1's MAC reaches the peer the same way.
    let st = env.status();
    let g1 = vif(&st, "guest1")["mac"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_until("guest1's MAC at the peer", Duration::from_secs(15), || {
        in_peer(&["bridge", "fdb", "show", "dev", "vx100"]).contains(&g1)
    });
    env.ping("guest1", PEER_IP, 3);
    let ping = in_peer(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2"]);
    assert!(ping.contains(" 0% packet loss"), "{ping}");
    let text = env.ok(&["status"]);
    assert!(
        text.contains(&format!("bgp {PEER_VTEP} Established")),
        "{text}"
    );
    capture_on(&env, "vxp100");
    env.ok(&["down"]);
    drop(peer);
    assert_no_tunnel_left(&before);
}

#[test]
fn bad_vxlan_ports_are_refused_at_up_with_nothing_half_set_up() {
    let Some(env) = Env::new("vxlan-bad") else {
        return;
    };
    let before = host_links_and_routes();
    // A peer the host cannot reach (a prohibit route the test owns).
    sh("ip", &["route", "add", "prohibit", "10.202.0.9/32"]);
    let p = topology(
        "unreachable",
        &format!("vni = 100\nlocal = \"{VTEP}\"\npeers = [\"10.202.0.9\"]\n"),
    );
    let o = env.splitnet(&["up", "--config", p.to_str().unwrap()]);
    sh("ip", &["route", "del", "prohibit", "10.202.0.9/32"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("peer 10.202.0.9 is unreachable"),
        "{err}"
    );
    assert_no_tunnel_left(&before);
    // A VNI on two bridges.
    let p = topology(
        "twice",
        &format!(
            "vni = 100\nlocal = \"{VTEP}\"\npeers = [\"{PEER_VTEP}\"]\n\
             [[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\nbridge = \"xenbr1\"\nvni = 100\nlocal = \"{VTEP}\"\npeers = [\"{PEER_VTEP}\"]\n"
        ),
    );
    let o = env.splitnet(&["up", "--config", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("vni = 100 is on two vxlan [[port]]s"),
        "{err}"
    );
    let _ = std::fs::remove_file(p);
    assert_no_tunnel_left(&before);
}
