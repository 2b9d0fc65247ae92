//! vhost-user end to end with real frontends that no one here wrote: DPDK's
//! testpmd (a `virtio_user` port) and QEMU booting Debian's kernel (the
//! image `scripts/vm-image.sh` builds). First against DPDK's own vhost
//! backend (testpmd's `net_vhost` port forwarding to a TAP), which checks the
//! harness itself; then against the driver domain. Needs root, dpdk-dev
//! (dpdk-testpmd) and qemu-system-x86; run one test at a time.

mod common;
mod vhost;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use vhost::{Testpmd, Vm};

/// The MAC of the VM (or testpmd) on the vhost-user vif.
const VM_MAC: &str = "52:54:00:12:34:56";

/// The far side of a frontend's traffic: a namespace (of a domain, by its
/// name) and its interface and MAC.
struct Wire {
    domain: String,
    ifname: String,
    mac: String,
}

impl Wire {
    fn new(domain: &str, ifname: &str) -> Wire {
        let mac = ns_output(
            domain,
            &["cat", &format!("/sys/class/net/{ifname}/address")],
        );
        Wire {
            domain: domain.into(),
            ifname: ifname.into(),
            mac: mac.trim().to_string(),
        }
    }

    fn packets(&self) -> (u64, u64) {
        (
            if_stat(&self.domain, &self.ifname, "rx_packets"),
            if_stat(&self.domain, &self.ifname, "tx_packets"),
        )
    }

    /// UDP datagrams the kernel took in, to a socket or to none.
    fn udp_received(&self) -> u64 {
        let [got, noport] = udp_counters(&self.domain, ["InDatagrams", "NoPorts"]);
        got + noport
    }
}

/// Runs `cmd` in `domain`'s namespace; panics unless it exits 0.
fn ns_output(domain: &str, cmd: &[&str]) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", &toolstack::host::netns_name(domain)])
        .args(cmd)
        .output()
        .expect("ip netns exec");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{cmd:?} in {domain}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// testpmd (its port 0 on the vif, answering ARP and ping as `tp_ip` in
/// icmpecho mode) and the wire host exchange traffic both ways, and both
/// count it: the wire host's flood ping is answered in full, then testpmd's
/// txonly stream of UDP reaches the wire host's kernel.
fn testpmd_both_ways(tp: &mut Testpmd, wire: &Wire, tp_ip: &str) {
    tp.wait_link_up(0, Duration::from_secs(30));
    tp.cmd("set fwd icmpecho");
    tp.cmd("start");
    let (s0, w0) = (tp.stats(0), wire.packets());
    let out = ns_output(
        &wire.domain,
        &["ping", "-f", "-c", "2000", "-w", "60", tp_ip],
    );
    assert!(out.contains(" 0% packet loss"), "wire -> testpmd:\n{out}");
    tp.cmd("stop");
    let (s1, w1) = (tp.stats(0), wire.packets());
    assert!(s1.rx_packets - s0.rx_packets >= 2000, "{s0:?} {s1:?}");
    assert!(s1.tx_packets - s0.tx_packets >= 2000, "{s0:?} {s1:?}");
    assert!(w1.0 - w0.0 >= 2000 && w1.1 - w0.1 >= 2000, "{w0:?} {w1:?}");

    // testpmd -> wire: 64-byte UDP frames to the wire host's address.
    tp.cmd("set fwd txonly");
    tp.cmd(&format!("set eth-peer 0 {}", wire.mac));
    let (s0, u0, w0) = (tp.stats(0), wire.udp_received(), wire.packets());
    tp.cmd("start");
    wait_until(
        "testpmd's UDP to reach the wire host",
        Duration::from_secs(60),
        || wire.udp_received() >= u0 + 20_000,
    );
    tp.cmd("stop");
    let (s1, u1, w1) = (tp.stats(0), wire.udp_received(), wire.packets());
    let (sent, got) = (s1.tx_packets - s0.tx_packets, u1 - u0);
    assert!(
        got >= 20_000 && got <= sent,
        "testpmd sent {sent}, the wire host's kernel took {got}"
    );
    assert!(
        w1.0 - w0.0 >= got,
        "{w0:?} {w1:?}: fewer frames than datagrams"
    );
}

/// A namespace of the name a domain `name` would have, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Netns {
        let ns = toolstack::host::netns_name(name);
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        let st = Command::new("ip").args(["netns", "add", &ns]).status();
        assert!(st.unwrap().success(), "ip netns add {ns}");
        Netns(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// DPDK's vhost backend standing in for the driver domain: testpmd in
/// namespace `ns` (domain name) forwarding between a vhost-user port
/// listening on `sock` and a TAP `sntap0` there at 10.99.0.1/24.
fn dpdk_backend(ns: &str, sock: &Path, log: &Path) -> Testpmd {
    // On the last CPU, apart from the frontend's testpmd on CPU 0.
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let mut b = Testpmd::start(
        Some(ns),
        &format!("0@{cpu},1@{cpu}"),
        &[
            format!("net_vhost0,iface={}", sock.display()),
            "net_tap0,iface=sntap0".into(),
        ],
        &["--forward-mode=io"],
        log,
    );
    ns_output(ns, &["ip", "addr", "add", "10.99.0.1/24", "dev", "sntap0"]);
    ns_output(ns, &["ip", "link", "set", "sntap0", "up"]);
    b.cmd("start");
    b
}

/// testpmd with a virtio_user port on vhost-user socket `sock`, MAC
/// [`VM_MAC`], sending UDP from `src` to `dst` in txonly mode.
fn testpmd_frontend(sock: &Path, src: &str, dst: &str, log: &Path) -> Testpmd {
    Testpmd::start(
        None,
        "0@0,1@0",
        &[format!(
            "net_virtio_user0,path={},mac={VM_MAC}",
            sock.display()
        )],
        &[&format!("--tx-ip={src},{dst}")],
        log,
    )
}

fn tools_for_testpmd() -> bool {
    vhost::have_tools(&[("dpdk-testpmd", "dpdk-dev")])
}

fn tools_for_qemu() -> bool {
    vhost::have_tools(&[
        ("dpdk-testpmd", "dpdk-dev"),
        ("qemu-system-x86_64", "qemu-system-x86"),
    ])
}

#[test]
fn harness_testpmd_frontend_against_dpdks_vhost_backend() {
    let Some(env) = Env::new("vhost-standin-tp") else {
        return;
    };
    if !tools_for_testpmd() {
        return;
    }
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let _ns = Netns::new("standin");
    let sock = env.run_dir.join("standin.sock");
    let _backend = dpdk_backend("standin", &sock, &env.run_dir.join("backend.log"));
    let mut tp = testpmd_frontend(
        &sock,
        "10.99.0.50",
        "10.99.0.1",
        &env.run_dir.join("testpmd.log"),
    );
    let wire = Wire::new("standin", "sntap0");
    testpmd_both_ways(&mut tp, &wire, "10.99.0.50");
}

#[test]
fn harness_qemu_vm_against_dpdks_vhost_backend() {
    let Some(env) = Env::new("vhost-standin-vm") else {
        return;
    };
    if !tools_for_qemu() {
        return;
    }
    let Some(image) = vhost::vm_image() else {
        return;
    };
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let _ns = Netns::new("standin");
    let sock = env.run_dir.join("standin.sock");
    let _backend = dpdk_backend("standin", &sock, &env.run_dir.join("backend.log"));
    // The arguments splitnet prints for a VM, on DPDK's socket.
    let vif = toolstack::vm::VhostVif {
        name: "standin".into(),
        backend: "testpmd".into(),
        socket: sock,
        mac: VM_MAC.into(),
        bridge: None,
        vlan: None,
        guest: false,
        vm_listens: false,
    };
    let mut vm = Vm::boot(
        &image,
        &vif.qemu_args(),
        "10.99.0.2/24",
        &env.run_dir.join("vm.log"),
    );
    vm.ping("10.99.0.1", 3);
    // The command loop reports exit codes and output faithfully.
    let r = vm.run("echo out; echo err >&2; exit 7", Duration::from_secs(30));
    assert_eq!((r.rc, r.out.as_str()), (7, "out\nerr\n"));
    // A file from the namespace arrives intact.
    let dir = env.run_dir.join("www");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("blob"), vec![0x5a; 1 << 20]).unwrap();
    let _srv = vhost::Console::spawn(
        http_server("standin", "10.99.0.1", &dir),
        &env.run_dir.join("http.log"),
    );
    wait_until("the HTTP server to listen", Duration::from_secs(10), || {
        listening("standin", 8080)
    });
    let got = fetch_sha256(&mut vm, "http://10.99.0.1:8080/blob");
    assert_eq!(got, sha256(&dir.join("blob")));
}

/// python3's http.server in `domain`'s namespace, serving `dir` on
/// `ip`:8080.
fn http_server(domain: &str, ip: &str, dir: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &toolstack::host::netns_name(domain)])
        .args(["python3", "-m", "http.server", "8080", "--bind", ip])
        .arg("--directory")
        .arg(dir);
    c
}

/// Fetches `url` in the VM (busybox wget) and returns the SHA-256 of what
/// arrived.
fn fetch_sha256(vm: &mut Vm, url: &str) -> String {
    let id = vm.start(&format!("wget -q -O - {url} | sha256sum"));
    finish_fetch(vm, id)
}

/// Waits for fetch `id` ([`fetch_sha256`]) to finish; returns its SHA-256.
fn finish_fetch(vm: &mut Vm, id: u32) -> String {
    let r = vm.wait(id, Duration::from_secs(600));
    assert_eq!(r.rc, 0, "the fetch failed in the VM:\n{}", r.out);
    let sum = r.out.split_whitespace().next().unwrap_or("");
    assert_eq!(sum.len(), 64, "sha256sum printed no sum:\n{}", r.out);
    sum.to_string()
}

/// A topology with a driver domain, VM `vm1` on vhost-user socket `sock`
/// (MAC [`VM_MAC`]), netfront guest `guest2`, the wire host, and `extra`
/// (more domains).
fn vm_topology(name: &str, sock: &Path, extra: &str) -> String {
    format!(
        r#"name = "{name}"
[[domain]]
name = "drv"
kind = "driver"
[[domain]]
name = "vm1"
kind = "vm"
socket = "{}"
mac = "{VM_MAC}"
[[domain]]
name = "guest2"
kind = "guest"
address = "10.77.0.2/24"
{extra}
[wire]
name = "wire"
driver = "drv"
address = "10.77.0.254/24"
"#,
        sock.display()
    )
}

/// On a failing test, prints `splitnet status` and the driver domain's log
/// (the run directory goes with the test).
struct ShowOnFailure<'a>(&'a Env);

impl Drop for ShowOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let st = self.0.splitnet(&["status"]);
            let log = std::fs::read_to_string(self.0.run_dir.join("drv.log"));
            eprintln!(
                "status:\n{}\ndrv.log:\n{}",
                String::from_utf8_lossy(&st.stdout),
                log.unwrap_or_default()
            );
        }
    }
}

/// `splitnet up` with [`vm_topology`]; returns vm1's socket.
fn up_with_vm(env: &Env, name: &str, extra: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let sock = env.run_dir.join("vm1.sock");
    let path = env.run_dir.join(format!("{name}.toml"));
    std::fs::write(&path, vm_topology(name, &sock, extra)).unwrap();
    let out = env.ok(&["up", "--config", path.to_str().unwrap()]);
    assert!(
        out.contains("reconnect=1"),
        "up prints no QEMU arguments:\n{out}"
    );
    sock
}

/// vhost-user vif `name` in `status --json`.
fn vhost_vif(st: &serde_json::Value, name: &str) -> serde_json::Value {
    st["vhost_vifs"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("status shows no vhost-user vif {name}:\n{st:#}"))
}

/// Whether VM vif `v` (its status entry) is connected and its VM has
/// enabled both rings on that connection.
fn rings_set_up(v: &serde_json::Value) -> bool {
    let rings = v["rings"].as_array();
    v["connected"] == true
        && rings.is_some_and(|r| r.len() == 2 && r.iter().all(|q| q["enabled"] == true))
}

/// Waits until the driver domain reports vif `name` connected and both its
/// rings set up (frames for a VM whose rings are not are dropped), and
/// returns its status entry.
fn connected(env: &Env, name: &str) -> serde_json::Value {
    let mut v = serde_json::Value::Null;
    wait_until(
        &format!("{name}'s vhost-user vif to be connected, its rings set up"),
        Duration::from_secs(30),
        || {
            v = vhost_vif(&env.status(), name);
            rings_set_up(&v)
        },
    );
    v
}

/// Waits until the driver domain has counted at least `tx` frames from
/// vhost-user vif `name` and `rx` to it since `before`. It publishes its
/// counters twice a second, so they are awaited, not sampled once.
fn await_counted(env: &Env, name: &str, before: &serde_json::Value, tx: u64, rx: u64) {
    let what = format!("the driver domain to count {tx} frames from {name} and {rx} to it");
    wait_until(&what, Duration::from_secs(5), || {
        let after = vhost_vif(&env.status(), name);
        let moved = |k: &str| after[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0);
        let (t, r) = (moved("tx_packets"), moved("rx_packets"));
        if t >= tx && r >= rx {
            Ok(())
        } else {
            Err(format!("{t} from it, {r} to it"))
        }
    });
}

#[test]
fn testpmd_exchanges_traffic_with_the_wire_host_through_the_driver_domain() {
    let Some(env) = Env::new("vhost-testpmd") else {
        return;
    };
    if !tools_for_testpmd() {
        return;
    }
    let sock = up_with_vm(&env, "vhost-testpmd", "");
    let _show = ShowOnFailure(&env);
    let mut tp = testpmd_frontend(
        &sock,
        "10.77.0.50",
        "10.77.0.254",
        &env.run_dir.join("testpmd.log"),
    );
    let before = connected(&env, "vm1");
    testpmd_both_ways(&mut tp, &Wire::new("wire", "eth0"), "10.77.0.50");
    // A netfront guest on the same bridge reaches it too.
    tp.cmd("set fwd icmpecho");
    tp.cmd("start");
    env.ping("guest2", "10.77.0.50", 3);
    tp.cmd("stop");
    // The driver domain counted what passed, both ways (named as the VM's
    // rings are: tx is what the VM sent).
    await_counted(&env, "vm1", &before, 22_000, 2_000);
    drop(tp);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A VM that transmits frames with malformed `virtio_net_hdr`s (GSO of size
/// 0, GSO without NEEDS_CSUM, UDP GSO never negotiated, a checksum field
/// past the frame, an unknown GSO type) loses each frame, counted, keeps
/// its connection and is throttled; the driver domain and guest2 carry on.
#[test]
fn a_vm_sending_malformed_gso_headers_loses_its_frames_not_its_connection() {
    let Some(env) = Env::new("vhost-badgso") else {
        return;
    };
    let sock = up_with_vm(&env, "vhost-badgso", "");
    let _show = ShowOnFailure(&env);
    let drv_pid = |st: &serde_json::Value| domain(st, "drv")["pid"].as_u64();
    let st0 = env.status();
    let bad = |v: &serde_json::Value| v["drops"]["bad_header"].as_u64().unwrap_or(0);
    let before = bad(&vhost_vif(&st0, "vm1"));
    let sock = sock.to_str().unwrap();
    let args = [
        "hostile-vm",
        "--socket",
        sock,
        "--attack",
        "bad_gso",
        "--secs",
        "1",
    ];
    let report: serde_json::Value = serde_json::from_str(env.ok(&args).trim()).unwrap();
    let sent = report["attempts"].as_u64().unwrap();
    assert!(
        sent > 1000,
        "the attacker sent only {sent} frames: {report}"
    );
    wait_until("every bad frame counted", Duration::from_secs(5), || {
        bad(&vhost_vif(&env.status(), "vm1")) - before == sent
    });
    // A ring that carries nothing but refused frames is throttled, as a
    // kick storm is: its kicks stop waking the driver domain for a while.
    let throttles = |v: &serde_json::Value| v["kick_throttles"].as_u64().unwrap_or(0);
    let after = vhost_vif(&env.status(), "vm1");
    assert!(
        throttles(&after) > throttles(&vhost_vif(&st0, "vm1")),
        "a malformed-GSO flood was never throttled: {after:#}"
    );
    assert_eq!(drv_pid(&env.status()), drv_pid(&st0), "drv restarted");
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_qemu_vm_pings_fetches_and_survives_a_driver_domain_kill() {
    let Some(env) = Env::new("vhost-qemu") else {
        return;
    };
    if !tools_for_qemu() {
        return;
    }
    let Some(image) = vhost::vm_image() else {
        return;
    };
    up_with_vm(&env, "vhost-qemu", "");
    let _show = ShowOnFailure(&env);
    // The QEMU arguments splitnet prints for vm1.
    let args = env.ok(&["vm-args", "vm1", "--qemu"]);
    let args: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let mut vm = Vm::boot(&image, &args, "10.77.0.10/24", &env.run_dir.join("vm.log"));
    connected(&env, "vm1");
    vm.ping("10.77.0.254", 3);
    vm.ping("10.77.0.2", 3);
    env.ping("wire", "10.77.0.10", 3);
    env.ping("guest2", "10.77.0.10", 3);
    let (_srv, file) = serve_blob_on_wire(&env, 64);
    let want = sha256(&file);
    let url = "http://10.77.0.254:8080/blob";
    assert_eq!(
        fetch_sha256(&mut vm, url),
        want,
        "the file arrived corrupted"
    );
    // Linux's virtio_net counts a mergeable frame whose buffers it could
    // not all find as a length error: the backend publishes them at once.
    let errors = vm.ok(
        "cat /sys/class/net/eth0/statistics/rx_length_errors",
        Duration::from_secs(10),
    );
    assert_eq!(errors.trim(), "0", "the VM dropped frames as length errors");

    // Again, with the driver domain killed a quarter of the way through.
    let sent = if_stat("wire", "eth0", "tx_bytes");
    let id = vm.start(&format!("wget -q -O - {url} | sha256sum"));
    wait_until(
        "16 MiB of the file to leave the wire host",
        Duration::from_secs(300),
        || if_stat("wire", "eth0", "tx_bytes") > sent + (16 << 20),
    );
    let st = env.status();
    let drv_pid = domain(&st, "drv")["pid"].clone();
    kill9(drv_pid.as_i64().unwrap());
    assert!(
        !vm.console.text().contains(&format!("@@END {id} ")),
        "the transfer ended before the kill: make the file larger"
    );
    wait_until("drv to come back", Duration::from_secs(30), || {
        let pid = domain(&env.status(), "drv")["pid"].clone();
        !pid.is_null() && pid != drv_pid
    });
    connected(&env, "vm1");
    assert_eq!(
        finish_fetch(&mut vm, id),
        want,
        "the file arrived corrupted"
    );
    assert_eq!(env.status()["restarts_after_crash"], 1);
    vm.ping("10.77.0.254", 3);
    drop(vm);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A `nic = "virtio"` guest as the driver domain sees it, and with a
/// netfront guest: e2e_virtio checks the guest's side (its frontend's
/// status, ping all ways, iperf3 to the wire host, HTTP, a driver kill);
/// this adds iperf3 both ways between the two transports on one bridge and
/// the driver domain's entry for the vif.
/// 32 MiB served by the netfront guest (guest2) reach the virtio guest
/// (guest1) intact: the driver domain copies them from guest2's TX
/// buffers straight into guest1's, in as many pieces as guest2 sent.
fn netfront_to_virtio_intact(env: &Env) {
    let dir = env.run_dir.join("www2");
    std::fs::create_dir_all(&dir).unwrap();
    let file = random_blob(&dir, 32);
    let d = dir.to_str().unwrap();
    let _server = env.spawn(&common::http_server("guest2", "10.77.0.2", "8081", d));
    wait_until("guest2's HTTP server", Duration::from_secs(10), || {
        listening("guest2", 8081)
    });
    let got = env.run_dir.join("got2");
    let mut args = vec!["exec", "guest1", "--"];
    args.extend(curl(got.to_str().unwrap(), "http://10.77.0.2:8081/blob"));
    env.ok(&args);
    assert_eq!(
        sha256(&got),
        sha256(&file),
        "guest2's file reached guest1 corrupted"
    );
}

#[test]
fn a_virtio_guest_and_a_netfront_guest_exchange_tcp_both_ways() {
    let Some(env) = Env::new("vhost-guest") else {
        return;
    };
    env.up_emulated("vhost-guest", "nic = \"virtio\"");
    let _show = ShowOnFailure(&env);
    let before = connected(&env, "guest1");
    assert_eq!(before["kind"], "guest", "{before:#}");
    env.ping("guest1", "10.77.0.2", 3);
    for reverse in [false, true] {
        iperf(&env, "guest2", "10.77.0.2", "guest1", reverse, 2);
        iperf(&env, "wire", "10.77.0.254", "guest1", reverse, 2);
    }
    netfront_to_virtio_intact(&env);
    await_counted(&env, "guest1", &before, 1_000, 1_000);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A VM whose VMM listens (`socket_server = "vm"`, here testpmd with
/// virtio-user's `server=1`, which as a client never reconnects): the
/// driver domain dials it through hv, and dials it again after a SIGKILL,
/// so the VM keeps its link without restarting; `vm-args` prints the
/// listening side's arguments.
#[test]
fn a_vm_that_listens_is_dialed_again_after_a_driver_domain_kill() {
    let Some(env) = Env::new("vhost-dial") else {
        return;
    };
    if !tools_for_testpmd() {
        return;
    }
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let sock = env.run_dir.join("vm1.sock");
    let path = env.run_dir.join("vhost-dial.toml");
    let topology = vm_topology("vhost-dial", &sock, "")
        .replace("kind = \"vm\"\n", "kind = \"vm\"\nsocket_server = \"vm\"\n");
    std::fs::write(&path, topology).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    assert!(!sock.exists(), "hv bound the socket the VM listens on");
    let args = env.ok(&["vm-args", "vm1"]);
    for want in ["server=on,wait=off", "vhost_mode=server", ",server=1"] {
        assert!(args.contains(want), "vm-args lacks {want}:\n{args}");
    }
    // testpmd listens and waits for its backend: splitnet dials it.
    let mut tp = Testpmd::start(
        None,
        "0@0,1@0",
        &[format!(
            "net_virtio_user0,path={},mac={VM_MAC},server=1",
            sock.display()
        )],
        &["--tx-ip=10.77.0.50,10.77.0.254"],
        &env.run_dir.join("testpmd.log"),
    );
    // Dropped before testpmd quits: a failure's status is the VM's then.
    let _show = ShowOnFailure(&env);
    tp.wait_link_up(0, Duration::from_secs(30));
    tp.cmd("set fwd icmpecho");
    tp.cmd("start");
    env.ping("wire", "10.77.0.50", 3);
    let drv = domain(&env.status(), "drv").clone();
    kill9(drv["pid"].as_i64().unwrap());
    // Dialed is not enough: status says connected as soon as hv's new
    // connection is made, but testpmd accepts it only once it has seen the
    // old one die, and frames for the VM are dropped until it has set up
    // its rings. The facts the ping needs: both rings set up on the new
    // connection, and testpmd's link up.
    wait_until(
        "drv back, vm1 dialed again and its rings set up",
        Duration::from_secs(30),
        || {
            let st = env.status();
            let pid = &domain(&st, "drv")["pid"];
            !pid.is_null() && *pid != drv["pid"] && rings_set_up(&vhost_vif(&st, "vm1"))
        },
    );
    tp.wait_link_up(0, Duration::from_secs(30));
    // The same testpmd, never restarted, answers again.
    env.ping("wire", "10.77.0.50", 3);
    tp.cmd("stop");
    drop(tp);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A VM that sends from a MAC not its own (testpmd's port given another
/// MAC than the topology's) has every frame dropped and counted: none
/// reaches the wire host, and the bridge never learns the false MAC.
#[test]
fn frames_from_a_mac_not_the_vms_own_are_dropped_and_counted() {
    let Some(env) = Env::new("vhost-spoof") else {
        return;
    };
    if !tools_for_testpmd() {
        return;
    }
    let sock = up_with_vm(&env, "vhost-spoof", "");
    let _show = ShowOnFailure(&env);
    let wire = Wire::new("wire", "eth0");
    let mut tp = Testpmd::start(
        None,
        "0@0,1@0",
        &[format!(
            "net_virtio_user0,path={},mac=52:54:00:66:66:66",
            sock.display()
        )],
        &["--tx-ip=10.77.0.50,10.77.0.254"],
        &env.run_dir.join("testpmd.log"),
    );
    tp.wait_link_up(0, Duration::from_secs(30));
    tp.cmd("set fwd txonly");
    tp.cmd(&format!("set eth-peer 0 {}", wire.mac));
    let macs = |st: &serde_json::Value| st["bridges"][0]["macs"].as_u64();
    let (u0, macs0) = (wire.udp_received(), macs(&env.status()));
    tp.cmd("start");
    let spoofed = |st: &serde_json::Value| {
        vhost_vif(st, "vm1")["drops"]["spoofed"]
            .as_u64()
            .unwrap_or(0)
    };
    wait_until(
        "1,000 spoofed frames counted",
        Duration::from_secs(30),
        || spoofed(&env.status()) >= 1000,
    );
    tp.cmd("stop");
    assert_eq!(
        wire.udp_received(),
        u0,
        "a spoofed frame reached the wire host"
    );
    assert_eq!(
        macs(&env.status()),
        macs0,
        "the bridge learned the false MAC"
    );
    // The bridge and the others carry on.
    env.ping("guest2", "10.77.0.254", 3);
    drop(tp);
    env.ok(&["down"]);
    assert_nothing_left();
}
