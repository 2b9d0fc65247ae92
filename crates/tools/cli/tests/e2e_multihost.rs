//! Several splitnet hosts on one machine: the underlay (a namespace per
//! host, routed through a router namespace) and independent instances
//! (`splitnet --host NAME`), each with its own hv, run directory and
//! namespaces.

mod common;

use common::lab::{host_cgroups, Lab};
use std::process::Command;

impl Lab {
    /// `ping -c 3` from `domain` of `host` to `to`, with no loss.
    fn ping(&self, host: &str, domain: &str, to: &str) {
        let out = self.ok(
            host,
            &[
                "exec", domain, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", "-w", "10", to,
            ],
        );
        if let Err(e) = testutil::ping::answered_in_full(&out, 3) {
            panic!("{host}/{domain} -> {to}: {e}:\n{out}");
        }
    }
}

/// The namespaces of `host`'s instance.
fn namespaces_of(host: &str) -> Vec<String> {
    let p = format!("splitnet@{host}-");
    common::shared_netns()
        .into_iter()
        .filter(|n| n.starts_with(&p))
        .collect()
}

#[test]
fn two_hosts_run_side_by_side_and_each_cleans_only_its_own() {
    let Some(lab) = Lab::new("mh-two", &["a", "b"], 1500) else {
        return;
    };
    // The underlay routes between hosts: one hop, TTL 64 - 1.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            "splitnet@a",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "10.200.2.2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ttl=63"), "{text}");
    let st = lab.env.ok(&["underlay", "status"]);
    assert!(
        st.contains("10.200.1.2/24") && st.contains("10.200.2.2/24"),
        "{st}"
    );
    for h in ["a", "b"] {
        let up = lab.ok(h, &["up"]);
        assert!(up.contains("splitnet is up"), "{up}");
    }
    assert!(namespaces_of("a").contains(&"splitnet@a-guest1".to_string()));
    assert!(namespaces_of("b").contains(&"splitnet@b-guest1".to_string()));
    // The default instance sees none of them.
    assert_eq!(common::netns(), Vec::<String>::new());
    for h in ["a", "b"] {
        lab.ping(h, "guest1", "10.77.0.254");
    }
    // hv of a host runs in the host's namespace.
    let st: serde_json::Value = serde_json::from_str(&lab.ok("a", &["status", "--json"])).unwrap();
    let hv_pid = st["hv_pid"].as_u64().expect("hv's pid");
    let ns = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert_eq!(
        ns(&format!("/proc/{hv_pid}/ns/net")).unwrap(),
        ns("/run/netns/splitnet@a").unwrap()
    );
    // The underlay stays while a host is up.
    let o = lab.env.splitnet(&["underlay", "down"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("a, b"), "{err}");
    // One host's down leaves the other's domains alone.
    lab.ok("a", &["down"]);
    assert_eq!(namespaces_of("a"), Vec::<String>::new());
    lab.ping("b", "guest1", "10.77.0.254");
    lab.ok("b", &["down"]);
    lab.env.ok(&["underlay", "down"]);
    assert_eq!(common::shared_netns(), Vec::<String>::new());
    assert_eq!(host_cgroups(), Vec::<String>::new(), "cgroups left behind");
    common::assert_nothing_left();
}

#[test]
fn bad_hosts_are_refused_clearly() {
    let Some(lab) = Lab::new("mh-bad", &["a"], 1500) else {
        return;
    };
    let o = lab.env.splitnet(&["underlay", "up", "c"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("already up (hosts: a)"),
        "{err}"
    );
    let o = lab.on("zz", &["up"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("splitnet underlay up zz"),
        "{err}"
    );
    let o = lab.on("Bad", &["status"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("lowercase"), "{err}");
    assert_eq!(namespaces_of("zz"), Vec::<String>::new());
}

/// The three hosts of the tunnel tests.
const HOSTS: [&str; 3] = ["a", "b", "c"];

/// Guest `g` (1, 2) of host `i` (1-based): its address and MAC.
fn guest_ip(i: usize, g: usize) -> String {
    format!("10.77.0.{}", 10 * i + g)
}

fn guest_mac(i: usize, g: usize) -> String {
    format!("00:16:3e:19:{i:02x}:{g:02x}")
}

/// Host `i`'s topology: a driver domain, two guests, and a VXLAN port to
/// the other hosts' VTEPs, with EVPN or static peers.
fn host_topology(i: usize, evpn: bool) -> String {
    let peers: Vec<String> = (1..=HOSTS.len())
        .filter(|&j| j != i)
        .map(|j| format!("\"10.200.{j}.3\""))
        .collect();
    let mut t = format!(
        "name = \"mh-{}\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n",
        HOSTS[i - 1]
    );
    for g in 1..=2 {
        t += &format!(
            "[[domain]]\nname = \"guest{g}\"\nkind = \"guest\"\naddress = \"{}/24\"\nvif = [\"mac={}\"]\n",
            guest_ip(i, g),
            guest_mac(i, g)
        );
    }
    t + &format!(
        "[[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\nvni = 100\nlocal = \"10.200.{i}.3\"\npeers = [{}]\nevpn = {evpn}\n",
        peers.join(", ")
    )
}

impl Lab {
    /// Brings every host up with its tunnel topology.
    fn up_tunnels(&self, evpn: bool) {
        for (k, h) in HOSTS.iter().enumerate() {
            let path = self.env.run_dir.join(format!("{h}.toml"));
            std::fs::create_dir_all(&self.env.run_dir).unwrap();
            std::fs::write(&path, host_topology(k + 1, evpn)).unwrap();
            self.ok(h, &["up", "--config", path.to_str().unwrap()]);
        }
    }

    /// Waits until every host's BGP sessions to the others are established.
    fn wait_bgp(&self, hosts: &[&str], peers: usize) {
        for h in hosts {
            common::wait_until(
                &format!("{h}'s BGP sessions"),
                std::time::Duration::from_secs(30),
                || {
                    let t = self.tunnel(h);
                    t["bgp"].as_array().is_some_and(|s| {
                        s.iter().filter(|x| x["state"] == "Established").count() == peers
                    })
                },
            );
        }
    }

    /// Every guest pings every other guest, across hosts and within one.
    fn ping_all(&self) {
        for (i, h) in HOSTS.iter().enumerate() {
            for g in 1..=2 {
                for j in 1..=HOSTS.len() {
                    for k in 1..=2 {
                        if (j, k) != (i + 1, g) {
                            self.ping(h, &format!("guest{g}"), &guest_ip(j, k));
                        }
                    }
                }
            }
        }
    }

    /// 64 MiB served by guest1 of host a reach guest2 of host c intact.
    fn fetch_across(&self) {
        let dir = self.env.run_dir.join("www");
        std::fs::create_dir_all(&dir).unwrap();
        let file = common::random_blob(&dir, 64);
        let ip = guest_ip(1, 1);
        let mut server = common::Background(
            self.command(
                "a",
                &[
                    "exec",
                    "guest1",
                    "--",
                    "python3",
                    "-m",
                    "http.server",
                    "8080",
                ],
            )
            .args(["--bind", &ip, "--directory", dir.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
        );
        let got = self.env.run_dir.join("got");
        let url = format!("http://{ip}:8080/blob");
        let mut args = vec!["exec", "guest2", "--"];
        args.extend(common::curl(got.to_str().unwrap(), &url));
        self.ok("c", &args);
        assert_eq!(std::fs::metadata(&got).unwrap().len(), 64 << 20);
        assert_eq!(common::sha256(&got), common::sha256(&file), "corrupted");
        let _ = server.0.kill();
    }
}

#[test]
fn three_hosts_with_static_peers_reach_every_guest() {
    let Some(lab) = Lab::new("mh-static", &HOSTS, 1500) else {
        return;
    };
    lab.up_tunnels(false);
    let t = lab.tunnel("a");
    assert_eq!(t["mode"], "static", "{t}");
    assert_eq!(t["guest_mtu"], 1450, "{t}");
    lab.ping_all();
    lab.fetch_across();
    // Head-end replication learned each remote guest behind its VTEP.
    let peers = lab.tunnel("a")["peers"].clone();
    let macs_of = |vtep: &str| {
        peers
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["vtep"] == vtep)
            .map(|p| p["macs"].to_string())
            .unwrap_or_default()
    };
    assert!(macs_of("10.200.3.3").contains(&guest_mac(3, 2)), "{peers}");
    lab.down_all();
}

#[test]
fn three_hosts_with_evpn_reach_every_guest() {
    let Some(lab) = Lab::new("mh-evpn", &HOSTS, 1500) else {
        return;
    };
    lab.up_tunnels(true);
    lab.wait_bgp(&HOSTS, 2);
    assert_eq!(lab.tunnel("b")["mode"], "evpn");
    // Type-2 routes put every remote guest's MAC behind its VTEP before
    // any traffic.
    common::wait_until(
        "a to learn c's guests from BGP",
        std::time::Duration::from_secs(10),
        || {
            lab.tunnel("a")["peers"]
                .to_string()
                .contains(&guest_mac(3, 1))
        },
    );
    lab.ping_all();
    lab.fetch_across();
    lab.down_all();
}

/// The VTEP `host`'s tunnel puts `mac` behind, if any.
fn vtep_of(t: &serde_json::Value, mac: &str) -> Option<String> {
    t["peers"].as_array()?.iter().find_map(|p| {
        p["macs"]
            .as_array()?
            .iter()
            .any(|m| m.as_str().is_some_and(|m| m.eq_ignore_ascii_case(mac)))
            .then(|| p["vtep"].as_str().unwrap_or("").to_string())
    })
}

const LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

impl Lab {
    /// Whether one ping from `domain` of `host` to `to` is answered.
    fn answers(&self, host: &str, domain: &str, to: &str) -> bool {
        self.on(
            host,
            &["exec", domain, "--", "ping", "-c", "1", "-W", "1", to],
        )
        .status
        .success()
    }

    /// `host`'s vif of `guest`, from its status.
    fn vif(&self, host: &str, guest: &str) -> serde_json::Value {
        self.status(host)["vifs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["guest"] == guest)
            .cloned()
            .unwrap_or_default()
    }
}

/// guest1 of host a sends three frames with host b's guest1's MAC as
/// source: netback refuses and counts them, and host c still finds that
/// MAC behind b.
fn forged_mac_is_refused(lab: &Lab) {
    let before = lab.vif("a", "guest1")["counters"]["rejected"]["spoofed_mac"]
        .as_u64()
        .unwrap_or(0);
    let forged = guest_mac(2, 1).replace(':', "");
    let frame = format!("ffffffffffff{forged}88b5{}", "00".repeat(46));
    lab.ok(
        "a",
        &[
            "exec",
            "guest1",
            "--",
            "python3",
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n\
             s.bind(('eth0',0))\nfor _ in range(3): s.send(bytes.fromhex(sys.argv[1]))",
            &frame,
        ],
    );
    common::wait_until("the forged frames to be counted", LIMIT, || {
        lab.vif("a", "guest1")["counters"]["rejected"]["spoofed_mac"]
            .as_u64()
            .unwrap_or(0)
            >= before + 3
    });
    // (Waited for, not read once: the routes may still be arriving.)
    common::wait_until("c to find b's guest1 behind b", LIMIT, || {
        vtep_of(&lab.tunnel("c"), &guest_mac(2, 1)).as_deref() == Some("10.200.2.3")
    });
}

/// guest2's MAC and address move from host c to host a (its vif detached
/// there, and attached to a's guest2 in place of its own): every other host
/// reaches it at a after the EVPN update.
fn mac_moves_from_c_to_a(lab: &Lab) {
    let (mac, ip) = (guest_mac(3, 2), guest_ip(3, 2));
    lab.ok("c", &["network-detach", "guest2", "0"]);
    lab.ok("a", &["network-detach", "guest2", "0"]);
    let handle = lab.ok("a", &["network-attach", "guest2", &format!("mac={mac}")]);
    let ifname = lab.vif("a", "guest2")["ifname"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| "eth0".into());
    lab.ok(
        "a",
        &[
            "exec",
            "guest2",
            "--",
            "ip",
            "addr",
            "add",
            &format!("{ip}/24"),
            "dev",
            &ifname,
        ],
    );
    common::wait_until("the moved MAC behind a's VTEP", LIMIT, || {
        vtep_of(&lab.tunnel("b"), &mac).as_deref() == Some("10.200.1.3")
    });
    for (h, g) in [("b", "guest1"), ("c", "guest1"), ("a", "guest1")] {
        common::wait_until(&format!("{h}/{g} to reach the moved guest"), LIMIT, || {
            lab.answers(h, g, &ip)
        });
    }
    eprintln!("moved {mac} ({ip}) from c to a as vif {}", handle.trim());
}

/// Host c's BGP traffic is dropped in its namespace: a and b withdraw c's
/// routes and keep talking to each other; when it flows again, c is back.
fn lost_bgp_session_withdraws_routes(lab: &Lab) {
    let nft = |rules: &str| {
        let o = Command::new("ip")
            .args(["netns", "exec", "splitnet@c", "nft", rules])
            .output()
            .unwrap();
        assert!(o.status.success(), "nft {rules}: {o:?}");
    };
    nft("add table inet mhtest; add chain inet mhtest relay { type filter hook forward priority 0; }; \
         add rule inet mhtest relay tcp dport 179 drop; add rule inet mhtest relay tcp sport 179 drop");
    lab.wait_bgp(&["a", "b"], 1);
    common::wait_until("c's MACs withdrawn at a", LIMIT, || {
        vtep_of(&lab.tunnel("a"), &guest_mac(3, 1)).is_none()
    });
    lab.ping("a", "guest1", &guest_ip(2, 1));
    lab.ping("b", "guest2", &guest_ip(1, 1));
    nft("delete table inet mhtest");
    lab.wait_bgp(&HOSTS, 2);
    common::wait_until("c reached again", LIMIT, || {
        lab.answers("a", "guest1", &guest_ip(3, 1))
    });
}

/// Host b's driver domain is killed while guest1 of a streams TCP to
/// guest1 of c: the stream completes, and b's guests come back and are
/// reached once b's MACs are advertised again.
fn killed_driver_domain_spares_the_others(lab: &Lab) {
    let server = lab.env.run_dir.join("iperf3-server");
    let _srv = common::Background(
        lab.command(
            "c",
            &[
                "exec",
                "guest1",
                "--",
                "iperf3",
                "-s",
                "-1",
                "-B",
                &guest_ip(3, 1),
            ],
        )
        .arg("--logfile")
        .arg(&server)
        .spawn()
        .unwrap(),
    );
    common::wait_until("iperf3 to listen on c", LIMIT, || {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                "splitnet@c-guest1",
                "ss",
                "-ltn",
                "sport",
                "= :5201",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).contains("5201")
    });
    let client = std::thread::scope(|s| {
        let c = s.spawn(|| {
            lab.on(
                "a",
                &[
                    "exec",
                    "guest1",
                    "--",
                    "iperf3",
                    "-c",
                    &guest_ip(3, 1),
                    "-t",
                    "4",
                    "-J",
                ],
            )
        });
        let drv = |st: serde_json::Value| common::domain(&st, "drv")["pid"].as_u64();
        let pid = drv(lab.status("b")).expect("b's driver pid");
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        common::wait_until("b's driver domain to come back", LIMIT, || {
            let st = lab.status("b");
            drv(st.clone()).is_some_and(|p| p != pid)
                && common::domain(&st, "drv")["connected"] == true
        });
        c.join().unwrap()
    });
    let out = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "the stream a -> c broke: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("iperf3 -J");
    assert!(
        v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0) > 0,
        "{out}"
    );
    for g in ["guest1", "guest2"] {
        common::wait_until(&format!("a to reach b's {g} again"), LIMIT, || {
            lab.answers(
                "a",
                "guest1",
                &guest_ip(2, if g == "guest1" { 1 } else { 2 }),
            )
        });
    }
    assert_eq!(
        vtep_of(&lab.tunnel("a"), &guest_mac(2, 1)).as_deref(),
        Some("10.200.2.3")
    );
}

#[test]
fn evpn_moves_a_mac_and_rides_out_faults() {
    let Some(lab) = Lab::new("mh-faults", &HOSTS, 1500) else {
        return;
    };
    lab.up_tunnels(true);
    lab.wait_bgp(&HOSTS, 2);
    forged_mac_is_refused(&lab);
    killed_driver_domain_spares_the_others(&lab);
    lost_bgp_session_withdraws_routes(&lab);
    mac_moves_from_c_to_a(&lab);
    lab.down_all();
}
