//! Uplinks end to end: each kind (host, macvlan, nat, route) carries a
//! guest's ping, a 64 MiB download (SHA-256 checked) and an iperf3 run to
//! a "LAN" the test builds: a namespace `sntest-lan` joined to the host by
//! a veth pair (`sntest-h0` on the host), with its own dnsmasq, an HTTP
//! server and iperf3. No traffic leaves the machine. After `down`, and
//! after a SIGKILL of hv, the host's addresses, routes, nftables rules,
//! dnsmasq processes and forwarding sysctls are as before `up`. Needs root;
//! run one test at a time.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LAN_NS: &str = "sntest-lan";
/// The LAN's end on the host: the "host NIC" of the host and macvlan kinds.
const HOST_IF: &str = "sntest-h0";
const HOST_IP: &str = "10.79.0.1/24";
const LAN_IP: &str = "10.79.0.2";
const FILE_MIB: usize = 64;

fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn in_lan(args: &[&str]) -> String {
    let mut a = vec!["netns", "exec", LAN_NS];
    a.extend_from_slice(args);
    sh("ip", &a)
}

/// Whether a TCP socket listens on `port` in the LAN.
fn lan_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    in_lan(&["cat", "/proc/net/tcp"])
        .lines()
        .any(|l| l.contains(&want) && l.split_whitespace().nth(3) == Some("0A"))
}

/// The LAN beyond the host; taken down (even on failure) when dropped.
/// It holds the host lock from before it is built until it is gone: its
/// names are fixed, and the host's state it snapshots is shared.
struct Lan {
    _host: testutil::HostLock,
    dir: PathBuf,
    sha: String,
    servers: Vec<Child>,
}

impl Lan {
    fn new() -> Lan {
        let host = testutil::host_lock();
        Lan::remove();
        let dir = std::env::temp_dir().join(format!("sntest-lan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        sh("ip", &["netns", "add", LAN_NS]);
        sh(
            "ip",
            &[
                "link", "add", HOST_IF, "type", "veth", "peer", "name", "eth0", "netns", LAN_NS,
            ],
        );
        sh("ip", &["addr", "add", HOST_IP, "dev", HOST_IF]);
        sh("ip", &["link", "set", HOST_IF, "up"]);
        in_lan(&["ip", "addr", "add", &format!("{LAN_IP}/24"), "dev", "eth0"]);
        // Jumbo-capable: the host kind's uplink is tested at MTU 9000.
        in_lan(&["ip", "link", "set", "eth0", "mtu", "9000", "up"]);
        in_lan(&["ip", "link", "set", "lo", "up"]);
        let file = dir.join("big.bin");
        let mut data = vec![0u8; FILE_MIB << 20];
        let mut f = std::fs::File::open("/dev/urandom").unwrap();
        std::io::Read::read_exact(&mut f, &mut data).unwrap();
        std::fs::write(&file, data).unwrap();
        let sha = sha256(&file);
        let mut lan = Lan {
            _host: host,
            dir,
            sha,
            servers: Vec::new(),
        };
        let d = lan.dir.to_str().unwrap().to_string();
        let http = ["busybox", "httpd", "-f", "-p", "10.79.0.2:8000", "-h", &d];
        let iperf = ["iperf3", "-s", "-B", LAN_IP];
        let dhcp = [
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--bind-interfaces",
            "--interface=eth0",
            "--dhcp-range=10.79.0.100,10.79.0.199,1h",
            "--dhcp-leasefile=/dev/null",
            "--pid-file=",
            "--user=root",
        ];
        for args in [&http[..], &iperf[..], &dhcp[..]] {
            lan.servers.push(
                Command::new("ip")
                    .args(["netns", "exec", LAN_NS])
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
        }
        wait_until("the LAN's servers", Duration::from_secs(10), || {
            lan_listening(8000) && lan_listening(5201) && lan_listening(53)
        });
        lan
    }

    fn remove() {
        let _ = Command::new("ip")
            .args(["netns", "del", LAN_NS])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", HOST_IF])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        Lan::remove();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What `up` may change on the host, and `down` must put back: interfaces
/// with their MTU, state and addresses; routes; nftables rules; dnsmasq
/// processes (the LAN's aside); forwarding sysctls.
fn host_state() -> Value {
    let addr: Value = serde_json::from_str(&sh("ip", &["-j", "addr"])).unwrap();
    let mut ifs: Vec<String> = addr
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let mut a: Vec<String> = l["addr_info"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                .collect();
            a.sort();
            let up = l["flags"].as_array().unwrap().iter().any(|f| f == "UP");
            format!("{} mtu {} up {up} {a:?}", l["ifname"], l["mtu"])
        })
        .collect();
    ifs.sort();
    let mut routes = Vec::new();
    for v in ["-4", "-6"] {
        let r: Value = serde_json::from_str(&sh("ip", &["-j", v, "route"])).unwrap();
        routes.extend(
            r.as_array()
                .unwrap()
                .iter()
                .map(|r| format!("{} {} {}", r["dst"], r["dev"], r["gateway"])),
        );
    }
    routes.sort();
    let nft: Value = serde_json::from_str(&sh("nft", &["-j", "list", "ruleset"])).unwrap();
    // Rules without their counters: any packet the host forwards moves
    // those (another runtime's rules, podman's portmap say), and they are
    // no change splitnet made.
    let rules: Vec<Value> = nft["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x.get("metainfo").is_none())
        .map(without_counters)
        .collect();
    let sysctls: Vec<String> = ["net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"]
        .iter()
        .map(|p| std::fs::read_to_string(Path::new("/proc/sys").join(p)).unwrap())
        .collect();
    serde_json::json!({
        "interfaces": ifs,
        "routes": routes,
        "nftables": rules,
        "dnsmasq": host_dnsmasq(),
        "sysctls": sysctls,
    })
}

/// `v` with every `packets` and `bytes` count taken out.
fn without_counters(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "packets" && *k != "bytes")
                .map(|(k, x)| (k.clone(), without_counters(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_counters).collect()),
        other => other.clone(),
    }
}

/// Live dnsmasq processes outside the LAN's namespace.
fn host_dnsmasq() -> Vec<String> {
    let mine = std::fs::read_link("/proc/self/ns/net").ok();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z');
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let ns = std::fs::read_link(e.path().join("ns/net")).ok();
        if cmd.starts_with("dnsmasq") && !zombie && ns == mine {
            v.push(cmd);
        }
    }
    v.sort();
    v
}

/// The pid of hv's dnsmasq (the host namespace's), if one runs.
fn dnsmasq_pid_opt() -> Option<u32> {
    let out = Command::new("pgrep")
        .args(["-f", "^dnsmasq .*--interface=sn"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
}

fn dnsmasq_pid() -> u32 {
    dnsmasq_pid_opt().expect("hv's dnsmasq runs")
}

/// A topology file for this test.
fn topology(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("sntest-uplink-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// One driver domain `drv`, guest `guest1` at `addr`, and `port`.
fn one_guest(addr: &str, port: &str) -> String {
    format!(
        "name = \"uplink\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"{addr}\"\n\
         [[port]]\ndriver = \"drv\"\n{port}\n"
    )
}

fn up(env: &Env, name: &str, text: &str) {
    let p = topology(name, text);
    env.ok(&["up", "--config", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(p);
}

/// Ping, the 64 MiB download with its SHA-256, and iperf3 from guest1 to
/// the LAN.
fn traffic(env: &Env, lan: &Lan, kind: &str) {
    env.ping("guest1", LAN_IP, 3);
    download(env, lan, "guest1", kind);
    let j = env.ok(&[
        "exec", "guest1", "--", "iperf3", "-c", LAN_IP, "-t", "2", "-J",
    ]);
    let v: Value = serde_json::from_str(&j).expect("iperf3 -J");
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    eprintln!("uplink {kind}: guest1 -> LAN TCP {:.2} Gbit/s", bps / 1e9);
    assert!(bps > 1e6, "iperf3 through {kind} carried {bps} bit/s");
}

/// `guest` downloads the LAN's 64 MiB file intact.
fn download(env: &Env, lan: &Lan, guest: &str, kind: &str) {
    let out = env.run_dir.join(format!("big-{guest}.bin"));
    env.ok(&[
        "exec",
        guest,
        "--",
        "curl",
        "-sS",
        "--max-time",
        "120",
        "-o",
        out.to_str().unwrap(),
        &format!("http://{LAN_IP}:8000/big.bin"),
    ]);
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        (FILE_MIB << 20) as u64
    );
    assert_eq!(
        sha256(&out),
        lan.sha,
        "{guest}'s download through {kind} is corrupt"
    );
    let _ = std::fs::remove_file(&out);
}

/// `ping -c 3` output: requests 1 to 3 each answered once (with `-w`, a
/// slow answer makes ping send a fourth, which is not a loss).
fn three_replies_once(out: &str, what: &str) {
    if let Err(e) = testutil::ping::answered_in_full(out, 3) {
        panic!("{what}: {e}:\n{out}");
    }
}

/// `ping -c 3` from `guest` to `to`.
fn guest_ping3(env: &Env, guest: &str, to: &str) -> String {
    env.ok(&[
        "exec", guest, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", "-w", "10", to,
    ])
}

/// `ping -c 3` from the LAN to `to`.
fn lan_ping3(to: &str) -> String {
    in_lan(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "-w", "10", to])
}

/// guest1 gets a DHCP lease in `prefix` from the server behind its uplink.
/// The offer is unicast (no `-B`): dnsmasq sends it from a UDP socket, so
/// it crosses the veth with a partial checksum, and udhcpc's raw socket
/// takes it only if it arrives complete or marked "checksum not ready".
fn dhcp_lease(env: &Env, prefix: &str) {
    let o = env.splitnet(&[
        "exec",
        "guest1",
        "--",
        "busybox",
        "udhcpc",
        "-i",
        "eth0",
        "-n",
        "-q",
        "-t",
        "5",
        "-T",
        "1",
        "-s",
        "/bin/true",
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && text.contains(&format!("lease of {prefix}")),
        "no DHCP lease in {prefix}:\n{text}"
    );
}

fn host_if_in_host() -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", HOST_IF])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Waits until hv's keeper (after hv was killed) has exited.
fn wait_keeper(env: &Env) {
    let pid: i32 = std::fs::read_to_string(env.run_dir.join("keeper.pid"))
        .expect("hv started a keeper")
        .trim()
        .parse()
        .unwrap();
    wait_until(
        "the keeper to undo the uplinks",
        Duration::from_secs(20),
        || {
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| {
                        s.rsplit(')')
                            .next()
                            .unwrap_or("")
                            .trim_start()
                            .starts_with('Z')
                    })
                    .unwrap_or(true)
        },
    );
}

/// hv upgraded in place, then killed and started again by its guardian:
/// what it runs for the uplinks must be carried both times.
fn upgrade_and_restart_hv(env: &Env) {
    let r = env.ok(&["upgrade", "--hv", "--json"]);
    assert!(r.contains("\"ok\":true"), "{r}");
    let old = env.status()["hv_pid"].as_i64().unwrap();
    kill9(old);
    wait_until("hv started again", Duration::from_secs(10), || {
        let o = env.splitnet(&["status", "--json"]);
        let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (st["hv_recovery"].as_str()).is_some_and(|r| r.contains(&format!("hv pid {old} died")))
    });
}

/// hv killed for good: its guardian first, which would start it again.
fn kill_hv(env: &Env) {
    let st = env.status();
    if let Ok(g) = std::fs::read_to_string(env.run_dir.join("guardian.pid")) {
        kill9(g.trim().parse().unwrap());
    }
    kill9(st["hv_pid"].as_i64().unwrap());
    wait_keeper(env);
}

/// Where host interface `HOST_IF` is: on the host with its address, or not.
fn assert_host_if_home() {
    assert!(host_if_in_host(), "{HOST_IF} is not back on the host");
    let a = sh("ip", &["-br", "addr", "show", "dev", HOST_IF]);
    assert!(
        a.contains(HOST_IP),
        "{HOST_IF} came back without its address: {a}"
    );
    assert!(
        static_routes_home(),
        "{HOST_IF} came back without its static routes"
    );
}

/// Static routes given to `HOST_IF` before it is lent (IPv4 and IPv6).
const STATIC_ROUTES: [(&str, &str); 2] =
    [("-4", "10.81.0.0/24 via 10.79.0.2"), ("-6", "fd00:81::/64")];

fn add_static_routes() {
    for (family, route) in STATIC_ROUTES {
        let mut args = vec![family, "route", "add"];
        args.extend(route.split(' '));
        args.extend(["dev", HOST_IF]);
        sh("ip", &args);
    }
}

/// Whether `HOST_IF` has its [`STATIC_ROUTES`].
fn static_routes_home() -> bool {
    STATIC_ROUTES.iter().all(|(family, route)| {
        let dst = route.split(' ').next().unwrap();
        !sh("ip", &[family, "route", "show", dst, "dev", HOST_IF])
            .trim()
            .is_empty()
    })
}

#[test]
fn a_host_interface_is_lent_to_the_driver_domain_and_always_comes_back() {
    let lan = Lan::new();
    // Its routes come back with it, not only the kernel's.
    add_static_routes();
    let before = host_state();
    let Some(env) = Env::new("uplink-host") else {
        return;
    };
    let topo = one_guest(
        "10.79.0.50/24",
        &format!("kind = \"host\"\niface = \"{HOST_IF}\"\nmtu = 9000"),
    );
    up(&env, "host", &topo);
    assert!(!host_if_in_host(), "{HOST_IF} is still on the host");
    let inside = sh(
        "ip",
        &["-n", "splitnet-drv", "link", "show", "dev", HOST_IF],
    );
    assert!(inside.contains("mtu 9000"), "{inside}");
    let st = env.status();
    let u = &st["uplinks"][0];
    assert_eq!(
        (
            u["kind"].as_str(),
            u["iface"].as_str(),
            u["bridge"].as_str()
        ),
        (Some("host"), Some(HOST_IF), Some("xenbr0"))
    );
    traffic(&env, &lan, "host");
    dhcp_lease(&env, "10.79.0.");
    // The driver domain crashes: the interface comes back to the host, and
    // is handed over again when hv restarts the domain.
    let pid = domain(&st, "drv")["pid"].as_i64().unwrap();
    kill9(pid);
    wait_until("drv to come back", Duration::from_secs(15), || {
        let st = env.status();
        let d = domain(&st, "drv");
        !d.is_null()
            && d["pid"].as_i64() != Some(pid)
            && vif(&st, "guest1")["backend_state"] == "Connected"
    });
    assert!(!host_if_in_host(), "{HOST_IF} was not handed over again");
    env.ping("guest1", LAN_IP, 3);
    env.ok(&["down"]);
    assert_host_if_home();
    assert_eq!(host_state(), before, "down left the host changed");
    // hv is killed: its keeper gives the interface back.
    up(&env, "host", &topo);
    kill_hv(&env);
    assert_host_if_home();
    assert_eq!(
        host_state(),
        before,
        "a SIGKILL of hv left the host changed"
    );
    env.ok(&["down"]);
    // A driver domain that is not restarted gives it back for good.
    up(
        &env,
        "host-never",
        &topo.replace(
            "kind = \"driver\"",
            "kind = \"driver\"\nrestart = \"never\"",
        ),
    );
    kill9(domain(&env.status(), "drv")["pid"].as_i64().unwrap());
    // (Moved first, then its settings restored: wait for the address.)
    wait_until(
        "drv's interface to come back",
        Duration::from_secs(10),
        || {
            host_if_in_host()
                && sh("ip", &["-br", "addr", "show", "dev", HOST_IF]).contains(HOST_IP)
                && static_routes_home()
        },
    );
    assert_host_if_home();
    env.ok(&["down"]);
    assert_eq!(host_state(), before);
    drop(env);
    assert_eq!(netns(), Vec::<String>::new(), "namespaces left behind");
}

/// A vif's dedicated queue (Ram thesis ch. 3) on a lent host NIC: hv makes
/// the queue's macvlan for the driver domain, which holds no
/// CAP_NET_ADMIN over the NIC, and the download lands through it intact.
#[test]
fn a_vif_gets_a_dedicated_queue_on_a_host_nic_made_by_hv() {
    let lan = Lan::new();
    let Some(env) = Env::new("uplink-host-mq") else {
        return;
    };
    let port = format!("kind = \"host\"\niface = \"{HOST_IF}\"");
    let topo = one_guest("10.79.0.50/24", &port)
        .replace("kind = \"guest\"\n", "kind = \"guest\"\nmq = true\n");
    up(&env, "host-mq", &topo);
    // Frames the queue took: straight into the guest's buffers, or, when
    // one did not fit, on the shared path behind it.
    let taken = |st: &Value| {
        let q = &vif(st, "guest1")["queue"];
        let n = |k: &str| q[k].as_u64().unwrap_or(0);
        (
            n("rx_direct_packets"),
            n("rx_fallback_packets") + n("rx_spilled_packets"),
        )
    };
    wait_until("guest1's queue dedicated", Duration::from_secs(10), || {
        let q = vif(&env.status(), "guest1")["queue"].clone();
        match q["state"] == "dedicated" {
            true => Ok(()),
            false => Err(q),
        }
    });
    let (d0, s0) = taken(&env.status());
    download(&env, &lan, "guest1", "host, mq");
    // 64 MiB is 1,024 frames of 64 KiB at the most (GRO on the port).
    let (landed, shared) = wait_until("the queue's counters", Duration::from_secs(5), || {
        let (d, s) = taken(&env.status());
        let (d, s) = (d - d0, s - s0);
        (d + s >= 1024 && d > s).then_some((d, s))
    });
    eprintln!("host mq: {landed} frames straight into guest1's buffers, {shared} shared");
    let links = macvlans();
    assert!(
        links.iter().any(|l| l.starts_with("snq")),
        "no queue macvlan in drv: {links:?}"
    );
    let pid = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let eff = status
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .unwrap_or("");
    assert!(eff.ends_with("0000000000002000"), "drv holds {eff}");
    env.ok(&["down"]);
    let left = sh("ip", &["-br", "link", "show", "type", "macvlan"]);
    assert!(!left.contains("snq"), "a queue outlived down: {left}");
}

/// A lent interface that vanishes (unplugged, or destroyed inside the
/// driver domain) can never be given back: `down` says so once, `status`
/// lists it under "needs attention" from then on, no later `down` repeats
/// it, and `down --forget` clears the list.
#[test]
fn a_lent_interface_that_vanishes_is_reported_once_and_listed_until_forgotten() {
    let _lan = Lan::new();
    let Some(env) = Env::new("uplink-vanish") else {
        return;
    };
    let topo = one_guest(
        "10.79.0.50/24",
        &format!("kind = \"host\"\niface = \"{HOST_IF}\""),
    )
    .replace(
        "kind = \"driver\"",
        "kind = \"driver\"\nrestart = \"never\"",
    );
    up(&env, "vanish", &topo);
    sh("ip", &["-n", "splitnet-drv", "link", "del", HOST_IF]);
    let o = env.splitnet(&["down"]);
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("can never be undone"))
        .collect();
    assert_eq!(lines.len(), 1, "reported once:\n{said}");
    assert!(
        lines[0].contains(HOST_IF) && lines[0].contains("splitnet down --forget"),
        "{said}"
    );
    // Not up: status says so, after the list.
    let st = env.splitnet(&["status"]);
    let out = String::from_utf8_lossy(&st.stdout);
    assert!(!st.status.success());
    assert!(
        out.contains("NEEDS ATTENTION") && out.contains(&format!("host interface {HOST_IF}")),
        "{out}"
    );
    let again = env.splitnet(&["down"]);
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains(HOST_IF),
        "reported again: {again:?}"
    );
    let forgot = env.ok(&["down", "--forget"]);
    assert!(
        forgot.contains(&format!("forgot: give host interface {HOST_IF}")),
        "{forgot}"
    );
    let st = env.splitnet(&["status"]);
    assert!(!String::from_utf8_lossy(&st.stdout).contains("NEEDS ATTENTION"));
}

/// The links in driver domain drv's namespace, `ip -d` JSON.
fn drv_links() -> Vec<Value> {
    let out = sh("ip", &["-n", "splitnet-drv", "-j", "-d", "link", "show"]);
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// drv's macvlan named `name`: its MAC and mode.
fn macvlan(name: &str) -> Option<(String, String)> {
    drv_links()
        .into_iter()
        .find(|l| l["ifname"] == name)
        .map(|l| {
            (
                l["address"].as_str().unwrap_or("").to_string(),
                l["linkinfo"]["info_data"]["mode"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
}

/// The members status lists under drv's macvlan uplink: (name, MAC).
fn listed_members(env: &Env) -> Vec<(String, String)> {
    let st = env.status();
    let mut v: Vec<(String, String)> = st["uplinks"][0]["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().into(),
                m["mac"].as_str().unwrap().into(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A counter of member `m` of drv's uplink upl0 in the driver domain's
/// stats: `group_dropped`, or (`counters`) the frames it received.
fn member_stat(env: &Env, m: &str, what: &str) -> u64 {
    let st = env.status();
    let upl0 = st["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["domain"] == "drv" && p["name"] == "upl0")
        .cloned()
        .unwrap_or(Value::Null);
    let member = upl0["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["name"] == m)
        .cloned()
        .unwrap_or(Value::Null);
    match what {
        "counters" => member["counters"]["rx_packets"].as_u64().unwrap_or(0),
        k => member[k].as_u64().unwrap_or(0),
    }
}

/// A guest's vif MAC, as status has it.
fn mac_of(env: &Env, guest: &str) -> String {
    vif(&env.status(), guest)["mac"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_macvlan_uplink_serves_every_guest_and_leaves_the_host_its_interface() {
    let lan = Lan::new();
    let before = host_state();
    let Some(env) = Env::new("uplink-macvlan") else {
        return;
    };
    let topo = format!(
        "{}[[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.79.0.52/24\"\n",
        one_guest(
            "10.79.0.51/24",
            &format!("kind = \"macvlan\"\niface = \"{HOST_IF}\""),
        )
    );
    up(&env, "macvlan", &topo);
    assert!(host_if_in_host());
    // A driver domain holding a host NIC keeps CAP_NET_RAW alone: no
    // CAP_NET_ADMIN (which would reach the NIC and its macvlans' modes).
    let st = env.status();
    let drv = st["domains"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["kind"] == "driver"))
        .and_then(|d| d["pid"].as_i64())
        .expect("the driver domain's pid");
    let proc_status = std::fs::read_to_string(format!("/proc/{drv}/status")).expect("status");
    let cap_eff = proc_status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
        .expect("CapEff");
    assert_eq!(cap_eff, format!("{:016x}", 1u64 << 13), "CAP_NET_RAW only");
    // The primary has a MAC of its own; each guest's MAC has its member,
    // all in private mode, and status lists the members.
    let (m1, m2) = (mac_of(&env, "guest1"), mac_of(&env, "guest2"));
    let (pmac, mode) = macvlan("upl0").expect("the primary macvlan");
    assert_eq!(mode, "private");
    assert!(pmac != m1 && pmac != m2, "the primary took a guest's MAC");
    for (m, mac) in [("upl0v0", &m1), ("upl0v1", &m2)] {
        assert_eq!(macvlan(m), Some((mac.clone(), "private".into())), "{m}");
    }
    assert_eq!(
        listed_members(&env),
        [("upl0v0".into(), m1.clone()), ("upl0v1".into(), m2.clone())]
    );
    // Both guests reach the LAN and the LAN both guests, one reply each.
    for (g, ip) in [("guest1", "10.79.0.51"), ("guest2", "10.79.0.52")] {
        three_replies_once(&guest_ping3(&env, g, LAN_IP), &format!("{g} -> LAN"));
        // The LAN asks for the guest's MAC by broadcast again.
        in_lan(&["ip", "neigh", "flush", "dev", "eth0"]);
        let out = lan_ping3(ip);
        three_replies_once(&out, &format!("LAN -> {g}"));
        download(&env, &lan, g, "macvlan");
    }
    // Each member got its copy of the LAN's broadcasts, and dropped it.
    for m in ["upl0v0", "upl0v1"] {
        wait_until(
            &format!("{m} to drop a broadcast"),
            Duration::from_secs(5),
            || member_stat(&env, m, "group_dropped") > 0,
        );
    }
    traffic(&env, &lan, "macvlan");
    dhcp_lease(&env, "10.79.0.");
    // The driver domain crashes and comes back: the group is still one
    // port, and both guests still reach the LAN.
    let pid = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    kill9(pid);
    wait_until("drv to come back", Duration::from_secs(15), || {
        let st = env.status();
        let d = domain(&st, "drv");
        !d.is_null()
            && d["pid"].as_i64() != Some(pid)
            && ["guest1", "guest2"]
                .iter()
                .all(|g| vif(&st, g)["backend_state"] == "Connected")
    });
    for g in ["guest1", "guest2"] {
        three_replies_once(
            &guest_ping3(&env, g, LAN_IP),
            &format!("{g} -> LAN after drv's restart"),
        );
    }
    // hv upgraded, then killed: the group carried, its members kept.
    let members = listed_members(&env);
    upgrade_and_restart_hv(&env);
    assert_eq!(listed_members(&env), members);
    for g in ["guest1", "guest2"] {
        three_replies_once(
            &guest_ping3(&env, g, LAN_IP),
            &format!("{g} -> LAN after hv's upgrade and restart"),
        );
    }
    attach_gets_a_member(&env);
    env.ok(&["down"]);
    assert_eq!(host_state(), before, "down left the host changed");
}

/// A vif attached on the macvlan's bridge gets its member, carries
/// traffic through it, and takes it along when detached.
fn attach_gets_a_member(env: &Env) {
    let mac = "00:16:3e:5f:00:aa";
    let out = env.ok(&[
        "network-attach",
        "guest1",
        &format!("mac={mac},ip=10.79.1.61"),
    ]);
    assert!(out.contains("vif 1 connected as eth1"), "{out}");
    assert_eq!(macvlan("upl0v2"), Some((mac.into(), "private".into())));
    assert!(listed_members(env).contains(&("upl0v2".into(), mac.into())));
    // Its own subnet, so that its frames leave through eth1 and the LAN's
    // replies come to eth1's MAC, on the member.
    in_lan(&["ip", "addr", "add", "10.79.1.2/24", "dev", "eth0"]);
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "addr",
        "add",
        "10.79.1.61/24",
        "dev",
        "eth1",
    ]);
    env.ok(&["exec", "guest1", "--", "ip", "link", "set", "eth1", "up"]);
    let out = guest_ping3(env, "guest1", "10.79.1.2");
    three_replies_once(&out, "guest1 eth1 -> LAN");
    wait_until("the member's counters", Duration::from_secs(5), || {
        member_stat(env, "upl0v2", "counters") >= 3
    });
    env.ok(&["network-detach", "guest1", "1"]);
    wait_until("the member to go", Duration::from_secs(5), || {
        macvlan("upl0v2").is_none()
    });
    assert!(!listed_members(env).iter().any(|(n, _)| n == "upl0v2"));
    // The others are untouched.
    assert!(macvlan("upl0v0").is_some() && macvlan("upl0v1").is_some());
    env.ping("guest1", LAN_IP, 2);
}

#[test]
fn a_nat_uplink_masquerades_and_serves_dhcp_and_dns() {
    let lan = Lan::new();
    let before = host_state();
    let Some(env) = Env::new("uplink-nat") else {
        return;
    };
    let topo = one_guest("10.78.0.5/24", "kind = \"nat\"\nsubnet = \"10.78.0.1/24\"");
    up(&env, "nat", &topo);
    assert!(sh("nft", &["list", "ruleset"]).contains("masquerade"));
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "route",
        "add",
        "default",
        "via",
        "10.78.0.1",
    ]);
    // The LAN has no route to 10.78.0.0/24: its answers reach the guest
    // only because the host masquerades the guest's traffic.
    traffic(&env, &lan, "nat");
    dhcp_lease(&env, "10.78.0.");
    // hv restarts a dnsmasq that dies.
    let old = dnsmasq_pid();
    kill9(old as i64);
    wait_until("a new dnsmasq", Duration::from_secs(10), || {
        dnsmasq_pid_opt().is_some_and(|p| p != old)
    });
    let lookup = [
        "exec",
        "guest1",
        "--",
        "busybox",
        "nslookup",
        "gateway.splitnet",
        "10.78.0.1",
    ];
    wait_until("the new dnsmasq to answer", Duration::from_secs(10), || {
        env.splitnet(&lookup).status.success()
    });
    let udp = udp_in("guest1");
    let dns = env.ok(&lookup);
    assert!(dns.contains("Address: 10.78.0.1"), "{dns}");
    // dnsmasq's answer left the host's UDP stack with a partial checksum.
    assert_udp_checksums_good("guest1", udp, "DNS from the host through nat");
    // An upgraded hv, and one started again after a kill, watch the same
    // dnsmasq, and restart it when it dies.
    let running = dnsmasq_pid();
    upgrade_and_restart_hv(&env);
    assert_eq!(dnsmasq_pid(), running, "dnsmasq was started again");
    kill9(running as i64);
    let back = testutil::poll_until(Duration::from_secs(10), || {
        dnsmasq_pid_opt().is_some_and(|p| p != running)
    });
    let log = std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default();
    assert!(
        back.is_ok(),
        "no dnsmasq started by the new hv; hv's log:\n{log}"
    );
    wait_until("it answers", Duration::from_secs(10), || {
        env.splitnet(&lookup).status.success()
    });
    traffic(&env, &lan, "nat");
    env.ok(&["down"]);
    assert_eq!(host_state(), before, "down left the host changed");
    up(&env, "nat", &topo);
    kill_hv(&env);
    assert_eq!(
        host_state(),
        before,
        "a SIGKILL of hv left the host changed"
    );
    env.ok(&["down"]);
}

#[test]
fn a_route_uplink_routes_each_guest_address() {
    let lan = Lan::new();
    let before = host_state();
    let Some(env) = Env::new("uplink-route") else {
        return;
    };
    in_lan(&["ip", "route", "add", "10.80.0.0/24", "via", "10.79.0.1"]);
    up(
        &env,
        "route",
        &one_guest("10.80.0.5/24", "kind = \"route\""),
    );
    assert!(sh("ip", &["route"]).contains("10.80.0.5 dev sn0-drv"));
    env.ok(&[
        "exec", "guest1", "--", "ip", "route", "add", "default", "dev", "eth0",
    ]);
    traffic(&env, &lan, "route");
    env.ok(&["down"]);
    assert_eq!(host_state(), before, "down left the host changed");
}

/// `up` fails with `needle` in its error, and nothing is half set up.
fn refused(env: &Env, name: &str, text: &str, needle: &str, before: &Value) {
    let p = topology(name, text);
    let o = env.splitnet(&["up", "--config", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{name}: up succeeded");
    assert!(err.contains(needle), "{name}: no {needle:?} in:\n{err}");
    assert_eq!(&host_state(), before, "{name}: the host was left changed");
    assert_eq!(netns(), Vec::<String>::new(), "{name}: namespaces left");
}

#[test]
fn bad_uplinks_are_refused_clearly_and_leave_nothing() {
    let _lan = Lan::new();
    let before = host_state();
    let Some(env) = Env::new("uplink-bad") else {
        return;
    };
    let host = |iface: &str| {
        one_guest(
            "10.79.0.50/24",
            &format!("kind = \"host\"\niface = \"{iface}\""),
        )
    };
    refused(
        &env,
        "absent",
        &host("sntest-none"),
        "host interface sntest-none does not exist",
        &before,
    );
    // Enslaved to a bridge: in use.
    sh("ip", &["link", "add", "sntest-br", "type", "bridge"]);
    sh("ip", &["link", "set", HOST_IF, "master", "sntest-br"]);
    let p = topology("enslaved", &host(HOST_IF));
    let o = env.splitnet(&["up", "--config", p.to_str().unwrap()]);
    sh("ip", &["link", "del", "sntest-br"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("is in use: it is enslaved to sntest-br"),
        "{err}"
    );
    // Two ports on one interface: the topology is refused.
    let two = format!(
        "{}\n[[port]]\ndriver = \"drv\"\nkind = \"macvlan\"\niface = \"{HOST_IF}\"\n",
        host(HOST_IF)
    );
    refused(
        &env,
        "twice",
        &two,
        "is the iface of two [[port]]s",
        &before,
    );
    refused(
        &env,
        "no-iface",
        &one_guest("10.79.0.50/24", "kind = \"host\""),
        "needs iface",
        &before,
    );
    // A kernel without nf_tables NAT: nft refuses the table (here an nft
    // that answers as such a kernel does, first on PATH).
    let fake = env.run_dir.with_extension("bin");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("nft"), "#!/bin/sh\ncat >/dev/null\necho 'Error: Could not process rule: No such file or directory' >&2\nexit 1\n").unwrap();
    sh("chmod", &["+x", fake.join("nft").to_str().unwrap()]);
    let p = topology(
        "nonat",
        &one_guest("10.78.0.5/24", "kind = \"nat\"\nsubnet = \"10.78.0.1/24\""),
    );
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .args(["up", "--config", p.to_str().unwrap()])
        .env("PATH", path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("nftables refused drv's NAT table"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&fake);
    assert_eq!(
        host_state(),
        before,
        "a refused nat uplink left the host changed"
    );
    assert_eq!(netns(), Vec::<String>::new());
    taken_names_and_routes_are_left_alone(&env, &before);
}

/// A route uplink whose host end's name is taken, or whose guest address
/// the host routes already, is refused; what was there stays.
fn taken_names_and_routes_are_left_alone(env: &Env, before: &Value) {
    let route = one_guest("10.80.0.5/24", "kind = \"route\"");
    sh(
        "ip",
        &[
            "link",
            "add",
            "sn0-drv",
            "type",
            "veth",
            "peer",
            "name",
            "sntest-p1",
        ],
    );
    let with_link = host_state();
    refused(
        env,
        "name-taken",
        &route,
        "an interface named sn0-drv already exists on the host",
        &with_link,
    );
    sh("ip", &["link", "del", "sn0-drv"]);
    sh("ip", &["route", "add", "10.80.0.5/32", "via", LAN_IP]);
    let with_route = host_state();
    refused(
        env,
        "route-taken",
        &route,
        "the host has a route to 10.80.0.5/32 already",
        &with_route,
    );
    sh("ip", &["route", "del", "10.80.0.5/32"]);
    assert_eq!(&host_state(), before);
}

#[test]
fn a_wire_port_keeps_the_wire_and_sets_its_mtu() {
    let Some(env) = Env::new("uplink-wire") else {
        return;
    };
    let topo = format!(
        "{}[wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n",
        one_guest("10.77.0.1/24", "kind = \"wire\"\nmtu = 9000\nvlan = 7")
    );
    up(&env, "wire", &topo);
    for (ns, dev) in [("splitnet-drv", "peth0"), ("splitnet-wire", "eth0")] {
        let l = sh("ip", &["-n", ns, "link", "show", "dev", dev]);
        assert!(l.contains("mtu 9000"), "{ns}:{dev}: {l}");
    }
    let st = env.status();
    assert_eq!(st["uplinks"][0]["kind"], "wire");
    assert_eq!(st["uplinks"][0]["vlan"], 7);
    env.ok(&["down"]);
}
