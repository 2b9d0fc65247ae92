//! Helpers shared by the end-to-end tests: a serialized test environment
//! around the real `splitnet` binary, and checks that nothing is left behind.
#![allow(dead_code)]

pub mod lab;

/// The host's shared-memory THP setting as the kernel prints it (empty on
/// a kernel without one).
pub fn shmem_enabled() -> String {
    std::fs::read_to_string(sys::huge::SHMEM_ENABLED).unwrap_or_default()
}
pub mod numbered;

pub use testutil::files::{curl, random_blob, sha256};

use bench::netenv::{FlowResult, Workload};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

pub struct Env {
    pub run_dir: PathBuf,
    /// The host lock (`testutil::host_lock`): `splitnet up` and `down` own
    /// the host's `splitnet-*` namespaces, so one test at a time on this
    /// machine. Released after `Drop` has brought the topology down.
    _host: testutil::HostLock,
}

impl Env {
    /// The environment for end-to-end test `name`, or None (SKIPPED) when
    /// not root.
    pub fn new(name: &str) -> Option<Env> {
        let host = testutil::root_or_skip("network namespaces, veth pairs, TAP devices, cgroups")?;
        let run_dir =
            std::env::temp_dir().join(format!("splitnet-test-{name}-{}", std::process::id()));
        let env = Env {
            run_dir,
            _host: host,
        };
        // A previous failed test may have left a topology up.
        env.splitnet(&["down"]);
        Some(env)
    }

    pub fn splitnet(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(args)
            .output()
            .expect("run splitnet")
    }

    /// `splitnet ARGS`, which must succeed; its output. A failure shows
    /// its output, hv's log and `splitnet status` at that moment (every
    /// domain's, vif's and emulated NIC's counters), so that a rare failure
    /// can be read from its report alone.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.splitnet(args);
        if !o.status.success() {
            let status = self.splitnet(&["status"]);
            panic!(
                "splitnet {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}\nhv.log:\n{}\nstatus then:\n{}\n{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                std::fs::read_to_string(self.run_dir.join("hv.log")).unwrap_or_default(),
                String::from_utf8_lossy(&status.stdout),
                self.domain_log_tails()
            );
        }
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The last lines of every domain's log in the run directory (the
    /// guests', the driver domains', the device models' and VMApps').
    pub fn domain_log_tails(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.run_dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.retain(|p| p.extension().is_some_and(|x| x == "log") && !p.ends_with("hv.log"));
        logs.sort();
        let mut out = String::new();
        for p in logs {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            out += &format!(
                "{} (last {} lines):\n{}\n",
                p.display(),
                tail.len(),
                tail.join("\n")
            );
        }
        out
    }

    pub fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status --json is JSON")
    }

    /// The reference point for "nothing left behind": `status --json` and
    /// the store's tree once every domain has published what it publishes
    /// on its own clock (each vif's counters from both ends, each driver
    /// domain's bridge stats, every half second; each netfront's request
    /// for multicast filtering, from its second look at the guest's groups,
    /// up to two seconds after it connects). A snapshot taken earlier would
    /// count a first publication as a leak.
    pub fn settled(&self) -> Snapshot {
        wait_until(
            "every domain's first counters and multicast requests",
            std::time::Duration::from_secs(10),
            || {
                let now = self.snapshot();
                (counters_published(&now.status) && multicast_requested(&now.status, &now.tree))
                    .then_some(now)
            },
        )
    }

    /// A snapshot that holds what `before` held (store nodes, watches,
    /// grant pins, the same tree), waiting up to 5 s for one: a domain
    /// rewriting a node it publishes (its counters) leaves the count one
    /// off for a moment between `status` and `store-ls`. A leak stays, and
    /// the last snapshot taken shows it to [`Snapshot::assert_holds_as`].
    pub fn settled_as(&self, before: &Snapshot) -> Snapshot {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let now = self.snapshot();
            let same = ["store_nodes", "watches", "grant_pins"]
                .iter()
                .all(|k| now.status[k] == before.status[k])
                && now.nodes_since(before) == (Vec::new(), Vec::new());
            if same || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The same now: what a test compares with [`Env::settled`]. `status`
    /// and `store-ls` are two requests, and a domain may write a node
    /// between them, so a snapshot is taken again until the node count
    /// `status` gives before and after the tree agrees with the tree's
    /// lines (every node but the root), for up to 5 s.
    pub fn snapshot(&self) -> Snapshot {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let status = self.status();
            let tree = self.ok(&["store-ls"]);
            let count = |st: &Value| st["store_nodes"].as_u64();
            let listed = Some(tree.lines().count() as u64 + 1);
            if (count(&status) == listed && count(&self.status()) == listed)
                || std::time::Instant::now() > deadline
            {
                return Snapshot { status, tree };
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Whether every vif's counters (both ends) and every driver domain's
/// bridge stats are in `st`.
fn counters_published(st: &Value) -> bool {
    let vifs = st["vifs"].as_array().cloned().unwrap_or_default();
    let drivers = st["domains"].as_array().cloned().unwrap_or_default();
    let published = |d: &Value| {
        st["bridges"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["domain"] == d["name"]))
    };
    vifs.iter()
        .all(|v| !v["counters"].is_null() && !v["frontend_counters"].is_null())
        && drivers
            .iter()
            .filter(|d| d["kind"] == "driver")
            .all(published)
}

/// Whether every connected vif whose backend offers multicast filtering
/// (`feature-multicast-control` in `tree`, `store-ls`'s lines) has its
/// frontend's `request-multicast-control` there too.
fn multicast_requested(st: &Value, tree: &str) -> bool {
    let has = |path: String| tree.lines().any(|l| l.starts_with(&format!("{path} = ")));
    let vifs = st["vifs"].as_array().cloned().unwrap_or_default();
    vifs.iter()
        .filter(|v| v["frontend_state"] == "Connected")
        .filter_map(|v| Some((v["frontend"].as_str()?, v["backend"].as_str()?)))
        .filter(|(_, be)| has(format!("{be}/feature-multicast-control")))
        .all(|(fe, _)| has(format!("{fe}/request-multicast-control")))
}

/// `status --json` with the store's tree (`store-ls`) beside it.
pub struct Snapshot {
    pub status: Value,
    pub tree: String,
}

impl Snapshot {
    /// The store nodes this tree has and `before`'s lacked, and the
    /// reverse, by path.
    pub fn nodes_since(&self, before: &Snapshot) -> (Vec<String>, Vec<String>) {
        let names = |t: &str| -> std::collections::BTreeSet<String> {
            t.lines()
                .map(|l| l.split(" = ").next().unwrap_or(l).to_string())
                .collect()
        };
        let (b, a) = (names(&before.tree), names(&self.tree));
        (
            a.difference(&b).cloned().collect(),
            b.difference(&a).cloned().collect(),
        )
    }

    /// Asserts hv holds what it held at `before`: store nodes (naming the
    /// nodes that differ), watches and grant pins.
    pub fn assert_holds_as(&self, before: &Snapshot) {
        let (added, removed) = self.nodes_since(before);
        assert_eq!(
            self.status["store_nodes"], before.status["store_nodes"],
            "store nodes; added: {added:?}, removed: {removed:?}"
        );
        for k in ["grant_pins", "watches"] {
            assert_eq!(self.status[k], before.status[k], "{k}");
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.splitnet(&["down"]);
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// File `name` of every thread of process `pid` (`/proc/PID/task/TID/NAME`),
/// one entry per thread.
pub fn thread_files(pid: impl std::fmt::Display, name: &str) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process runs");
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join(name)).ok())
        .collect()
}

/// The default instance's namespaces (`splitnet-*`).
pub fn netns() -> Vec<String> {
    netns_starting("splitnet-")
}

fn netns_starting(prefix: &str) -> Vec<String> {
    let o = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// The namespaces of other instances, hosts and the underlay's router
/// (`splitnet@*`).
pub fn shared_netns() -> Vec<String> {
    netns_starting("splitnet@")
}

/// Processes whose command line mentions our binary, other than the test itself.
pub fn our_processes() -> Vec<String> {
    let exe = env!("CARGO_BIN_EXE_splitnet");
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z');
        if cmd.contains(exe) && pid != std::process::id() && !zombie {
            v.push(format!("{pid}: {cmd}"));
        }
    }
    v
}

/// memfds named splitnet-* still open in any process.
pub fn our_memfds() -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(rd) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in rd.flatten() {
            if let Ok(t) = std::fs::read_link(fd.path()) {
                let t = t.to_string_lossy().into_owned();
                if t.contains("memfd:splitnet-") {
                    v.push(format!("{}: {t}", e.path().display()));
                }
            }
        }
    }
    v
}

pub fn cgroups() -> Vec<PathBuf> {
    [
        "/sys/fs/cgroup/splitnet",
        "/sys/fs/cgroup/unified/splitnet",
        "/sys/fs/cgroup/cpuacct/splitnet",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect()
}

pub fn assert_nothing_left() {
    assert_eq!(netns(), Vec::<String>::new(), "namespaces left behind");
    assert_eq!(
        our_processes(),
        Vec::<String>::new(),
        "processes left behind"
    );
    assert_eq!(
        our_memfds(),
        Vec::<String>::new(),
        "shared memory left behind"
    );
    assert_eq!(cgroups(), Vec::<PathBuf>::new(), "cgroups left behind");
    let links = Command::new("ip").args(["-br", "link"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains("peth0"),
        "interfaces left behind"
    );
}

pub fn domain<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or(&Value::Null)
}

/// A `splitnet` command running in the background, output discarded;
/// killed when dropped.
pub struct Background(pub Child);

impl Background {
    /// Waits up to `limit` for the command to exit on its own.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> bool {
        testutil::poll_until(limit, || self.0.try_wait().ok().flatten().is_some()).is_ok()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Env {
    /// Starts `splitnet ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Background {
        Background(
            Command::new(env!("CARGO_BIN_EXE_splitnet"))
                .arg("--run-dir")
                .arg(&self.run_dir)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run splitnet"),
        )
    }
}

pub use testutil::wait_until;

/// Runs `cmd` inside the namespace of `domain` and returns its stdout.
pub fn in_netns(domain: &str, cmd: &[&str]) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", &toolstack::host::netns_name(domain)])
        .args(cmd)
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether a TCP socket listens on `port` in `domain`'s namespace.
pub fn listening(domain: &str, port: u16) -> bool {
    bench::netenv::listening(&toolstack::host::netns_name(domain), port).unwrap_or(false)
}

/// Bytes received so far by `domain`'s interface `ifname`.
pub fn rx_bytes(domain: &str, ifname: &str) -> u64 {
    if_stat(domain, ifname, "rx_bytes")
}

/// Counter `stat` (rx_packets, tx_bytes, ...) of `domain`'s interface
/// `ifname`, from sysfs.
pub fn if_stat(domain: &str, ifname: &str, stat: &str) -> u64 {
    let path = format!("/sys/class/net/{ifname}/statistics/{stat}");
    in_netns(domain, &["cat", &path])
        .trim()
        .parse()
        .unwrap_or(0)
}

/// `domain`'s kernel UDP counters `(InDatagrams, InCsumErrors)` from its
/// `/proc/net/snmp` (what `nstat` reads): a datagram whose checksum arrived
/// neither complete nor marked partial counts as a checksum error.
pub fn udp_in(domain: &str) -> (u64, u64) {
    let [got, bad] = udp_counters(domain, ["InDatagrams", "InCsumErrors"]);
    (got, bad)
}

/// `domain`'s kernel UDP counters named `keys` (InDatagrams, NoPorts, ...)
/// from its `/proc/net/snmp`.
pub fn udp_counters<const N: usize>(domain: &str, keys: [&str; N]) -> [u64; N] {
    let snmp = in_netns(domain, &["cat", "/proc/net/snmp"]);
    let mut rows = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (rows.next(), rows.next()) else {
        panic!("no Udp rows in {domain}'s /proc/net/snmp:\n{snmp}");
    };
    keys.map(|key| {
        let i = names.split_whitespace().position(|n| n == key);
        let v = i.and_then(|i| values.split_whitespace().nth(i));
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no Udp {key} in {domain}'s /proc/net/snmp"))
    })
}

/// UDP reached `domain`'s sockets since `before` (from [`udp_in`]) and
/// none of it had a bad checksum.
pub fn assert_udp_checksums_good(domain: &str, before: (u64, u64), what: &str) {
    let (got, bad) = udp_in(domain);
    assert_eq!(bad, before.1, "{what}: UDP checksum errors in {domain}");
    assert!(got > before.0, "{what}: no UDP datagram reached {domain}");
}

impl Env {
    /// Whether one ping from `from` to `to` is answered within a second.
    pub fn reaches(&self, from: &str, to: &str) -> bool {
        let args = ["exec", from, "--", "ping", "-c", "1", "-W", "1", to];
        self.splitnet(&args).status.success()
    }

    /// `ping -c N` from `from` to `to` (IPv4 or IPv6): each of its N
    /// requests is answered once. With a deadline (`-w`), ping waits for
    /// every answer (up to it) rather than two round trips after its last
    /// request, which a busy host's last answer can miss.
    pub fn ping(&self, from: &str, to: &str, n: u32) {
        let count = n.to_string();
        let mut args = vec![
            "exec", from, "--", "ping", "-c", &count, "-i", "0.2", "-W", "2", "-w", "20", to,
        ];
        if to.contains(':') {
            args.insert(4, "-6");
        }
        let out = self.ok(&args);
        if let Err(e) = testutil::ping::answered_in_full(&out, n) {
            panic!("{from} -> {to}: {e}:\n{out}");
        }
    }

    /// Starts a one-shot iperf3 server on the wire host and returns once
    /// it listens; killed when dropped.
    pub fn iperf3_server_on_wire(&self) -> Background {
        let srv = self.spawn(&[
            "exec",
            "wire",
            "--",
            "iperf3",
            "-s",
            "-1",
            "-B",
            "10.77.0.254",
        ]);
        wait_until(
            "iperf3 to listen in wire",
            std::time::Duration::from_secs(10),
            || listening("wire", 5201),
        );
        srv
    }

    /// Runs the iperf3 client in guest1 against a fresh one-shot server on
    /// the wire host, with `args` after `-c`; returns its output.
    pub fn iperf3_guest1_to_wire(&self, args: &[&str]) -> String {
        let _srv = self.iperf3_server_on_wire();
        let mut a = vec!["exec", "guest1", "--", "iperf3", "-c", "10.77.0.254"];
        a.extend_from_slice(args);
        self.ok(&a)
    }

    /// Starts an iperf3 TCP stream of `secs` seconds from `client` to the wire
    /// host, in the background, and returns once data is flowing: the server
    /// is listening before the client starts, and the wire host has received
    /// another 4 MiB. Both ends are killed when dropped.
    pub fn stream_to_wire(&self, client: &str, secs: u32) -> (Background, Background) {
        let srv = self.iperf3_server_on_wire();
        let limit = std::time::Duration::from_secs(10);
        let before = rx_bytes("wire", "eth0");
        let t = secs.to_string();
        let cl = self.spawn(&[
            "exec",
            client,
            "--",
            "iperf3",
            "-c",
            "10.77.0.254",
            "-t",
            &t,
        ]);
        wait_until("the stream to reach the wire host", limit, || {
            rx_bytes("wire", "eth0") > before + (4 << 20)
        });
        (srv, cl)
    }
}

/// Kills process `pid` outright (a domain dying without warning).
pub fn kill9(pid: i64) {
    signal(pid, "KILL");
}

/// Sends signal `sig` (by name: TERM, STOP, CONT) to process `pid`.
pub fn signal(pid: i64, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid} failed");
}

/// The vif of `guest` in `status --json`.
pub fn vif<'a>(st: &'a Value, guest: &str) -> &'a Value {
    st["vifs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["guest"] == guest)
        .unwrap_or(&Value::Null)
}

/// iperf3 TCP for `secs` seconds from `client` to `server_ip` (served in
/// `server`); with `reverse`, data flows server → client. Returns Gbit/s.
/// Runs through the same code as `splitnet bench` (`bench::netenv`).
/// Asserts that data flowed (100 kB at least), not how fast: speed is the
/// benches' to measure, and the emulated NICs carry a few Mbit/s here.
pub fn iperf(
    _env: &Env,
    server: &str,
    server_ip: &str,
    client: &str,
    reverse: bool,
    secs: u32,
) -> f64 {
    let r = flow(server, server_ip, client, reverse, secs, Workload::TcpCopy)
        .unwrap_or_else(|e| panic!("iperf3 {client} -> {server_ip}: {e:#}"));
    assert!(
        r.bytes > 1e5 && r.gbps > 0.0,
        "iperf3 {client} -> {server_ip}: too little arrived: {} bytes",
        r.bytes
    );
    r.gbps
}

/// One iperf3 `workload` run for `secs` seconds from `client` to
/// `server_ip` (served in `server`); with `reverse`, data flows server →
/// client.
pub fn flow(
    server: &str,
    server_ip: &str,
    client: &str,
    reverse: bool,
    secs: u32,
    workload: Workload,
) -> anyhow::Result<FlowResult> {
    let (sns, cns) = (
        toolstack::host::netns_name(server),
        toolstack::host::netns_name(client),
    );
    bench::netenv::run(&bench::netenv::Flow {
        server_ns: &sns,
        server_ip,
        server_bind: None,
        port: bench::netenv::DEFAULT_PORT,
        client_ns: &cns,
        reverse,
        secs,
        workload,
        server_cgroup: None,
        client_cgroup: None,
        server_cpu: None,
        client_cpu: None,
    })
}

/// The SHA-256 of a file, as `sha256sum` prints it.
/// A 64 MiB file served over HTTP from the wire host arrives intact in
/// guest1 (python3's http.server, curl). Returns Mbit/s.
pub fn http_fetch_64mib(env: &Env) -> f64 {
    http_fetch_mib(env, 64)
}

/// A file of `mib` MiB served over HTTP from the wire host arrives intact
/// in guest1 (python3's http.server, curl). Returns Mbit/s.
pub fn http_fetch_mib(env: &Env, mib: u32) -> f64 {
    let (_server, file) = serve_blob_on_wire(env, mib);
    let got = env.run_dir.join("got");
    let t0 = std::time::Instant::now();
    let mut args = vec!["exec", "guest1", "--"];
    args.extend(curl(got.to_str().unwrap(), "http://10.77.0.254:8080/blob"));
    env.ok(&args);
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(std::fs::metadata(&got).unwrap().len(), u64::from(mib) << 20);
    assert_eq!(sha256(&got), sha256(&file), "the file arrived corrupted");
    let _ = std::fs::remove_file(&got);
    f64::from(mib) * 8.0 / secs
}

/// `splitnet` arguments that serve `dir` from the wire host at
/// `http://10.77.0.254:8080/` (python3's http.server).
pub fn wire_http_server(dir: &str) -> [&str; 11] {
    http_server("wire", "10.77.0.254", "8080", dir)
}

/// `splitnet` arguments that serve `dir` from `domain` at
/// `http://IP:PORT/` (python3's http.server).
pub fn http_server<'a>(domain: &'a str, ip: &'a str, port: &'a str, dir: &'a str) -> [&'a str; 11] {
    [
        "exec",
        domain,
        "--",
        "python3",
        "-m",
        "http.server",
        port,
        "--bind",
        ip,
        "--directory",
        dir,
    ]
}

/// Serves a fresh file of `mib` MiB of random bytes from the wire host at
/// `http://10.77.0.254:8080/blob` (python3's http.server) and returns once
/// it listens: the server (killed when dropped) and the file's path.
pub fn serve_blob_on_wire(env: &Env, mib: u32) -> (Background, PathBuf) {
    let dir = env.run_dir.join("www");
    std::fs::create_dir_all(&dir).unwrap();
    let file = random_blob(&dir, mib);
    let server = env.spawn(&wire_http_server(dir.to_str().unwrap()));
    wait_until(
        "the HTTP server to listen",
        std::time::Duration::from_secs(10),
        || listening("wire", 8080),
    );
    (server, file)
}

/// Maps the shared-memory region `name` that process `pid` maps (root
/// reads it through /proc/PID/map_files).
pub fn mapping_of(pid: u64, name: &str) -> sys::Mapping {
    bench::netenv::shared_mapping(pid, name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Process `pid` is jailed: seccomp on, no effective capability, not root.
pub fn assert_jailed(pid: u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    assert_ne!(field("Uid:"), "0", "{status}");
}

/// Reproducible garbage (xorshift).
pub struct Garbage(pub u64);

impl Garbage {
    pub fn next(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// 4096 words of garbage over an emulated NIC guest's driver area (init
    /// block, rings, buffers, from guest-physical 64 KiB) and beyond:
    /// descriptors given to the device with lengths, addresses outside.
    pub fn scribble_driver_area(&mut self, pool: &sys::Mapping) {
        bench::netenv::scribble_driver_area(pool, || self.next());
    }
}

/// guest1 floods the wire host with pings while `scribble` runs about every
/// millisecond for 3 s (a hostile guest at work).
pub fn while_guest1_floods(env: &Env, mut scribble: impl FnMut()) {
    let _flood = env.spawn(&[
        "exec",
        "guest1",
        "--",
        "ping",
        "-f",
        "-w",
        "4",
        "10.77.0.254",
    ]);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(3) {
        scribble();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// After a hostile guest1: its device side `what` (pid `pid`, log `log` in
/// the run directory) is alive, and guest2 and the driver domain carry on.
pub fn assert_others_carry_on(env: &Env, what: &str, pid: u64, log: &str) {
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the {what} died:\n{}",
        std::fs::read_to_string(env.run_dir.join(log)).unwrap_or_default()
    );
    env.ping("guest2", "10.77.0.254", 3);
    env.ping("wire", "10.77.0.2", 3);
    let st = env.status();
    assert_eq!(domain(&st, "guest2")["connected"], true);
    assert_eq!(domain(&st, "drv")["connected"], true);
}

/// A topology for the emulated NICs' tests: `drv`, guest1 with the NIC
/// lines `nic` (its `nic = ...` and options), guest2 with a vif, and the
/// wire host.
pub fn emulated_topology(name: &str, nic: &str) -> String {
    format!(
        r#"name = "{name}"
[[domain]]
name = "drv"
kind = "driver"
memory_frames = 4096
[[domain]]
name = "guest1"
kind = "guest"
address = "10.77.0.1/24"
ipv6 = "fd77::1/64"
{nic}
[[domain]]
name = "guest2"
kind = "guest"
address = "10.77.0.2/24"
ipv6 = "fd77::2/64"
[wire]
name = "wire"
driver = "drv"
address = "10.77.0.254/24"
ipv6 = "fd77::fe/64"
"#
    )
}

impl Env {
    /// `splitnet up` with [`emulated_topology`].
    pub fn up_emulated(&self, name: &str, nic: &str) {
        std::fs::create_dir_all(&self.run_dir).unwrap();
        let path = self.run_dir.join(format!("{name}.toml"));
        std::fs::write(&path, emulated_topology(name, nic)).unwrap();
        self.ok(&["up", "--config", path.to_str().unwrap()]);
    }

    /// guest1's `emulated_nic` entry in `status --json`, once `ready`
    /// says its counters are in.
    pub fn emulated_nic(&self, ready: impl Fn(&Value) -> bool) -> Value {
        let mut h = Value::Null;
        wait_until(
            "the emulated NIC's counters",
            std::time::Duration::from_secs(5),
            || {
                h = domain(&self.status(), "guest1")["emulated_nic"].clone();
                ready(&h)
            },
        );
        h
    }

    /// Adds address `cidr` to `dev` in `domain` (a guest or the wire).
    pub fn addr_add(&self, domain: &str, cidr: &str, dev: &str) {
        self.ok(&["exec", domain, "--", "ip", "addr", "add", cidr, "dev", dev]);
    }

    /// guest1 pings the wire host, guest2 and the wire over IPv6, and is
    /// pinged back.
    pub fn ping_guest1_all_ways(&self) {
        self.ping("guest1", "10.77.0.254", 3);
        self.ping("wire", "10.77.0.1", 3);
        self.ping("guest1", "10.77.0.2", 3);
        self.ping("guest2", "10.77.0.1", 3);
        self.ping("guest1", "fd77::fe", 3);
    }

    /// `splitnet trace` for a second while guest1 pings the wire host.
    pub fn trace_while_guest1_pings(&self) -> String {
        let _pings = self.spawn(&[
            "exec",
            "guest1",
            "--",
            "ping",
            "-c",
            "20",
            "-i",
            "0.05",
            "10.77.0.254",
        ]);
        self.ok(&["trace", "--duration", "1"])
    }

    /// guest2's vif is unaffected: it still pings and carries iperf3
    /// (returns its Mbit/s).
    pub fn guest2_unaffected(&self) -> f64 {
        self.ping("guest2", "10.77.0.254", 3);
        iperf(self, "wire", "10.77.0.254", "guest2", false, 2) * 1000.0
    }

    /// The driver domain restarts, then guest1 (whose device side, named
    /// `what`, has the pid `pid` reads): guest1 reaches the wire after each,
    /// with a new device side after its own restart.
    pub fn guest1_survives_restarts(&self, what: &str, pid: impl Fn(&Env) -> Option<u64>) {
        self.ping("guest1", "10.77.0.254", 3);
        let old = pid(self);
        self.ok(&["restart", "drv"]);
        self.ping("guest1", "10.77.0.254", 3);
        self.ping("guest1", "10.77.0.2", 3);
        self.ok(&["restart", "guest1"]);
        wait_until(what, std::time::Duration::from_secs(10), || {
            let new = pid(self);
            new.is_some() && new != old
        });
        self.ping("guest1", "10.77.0.254", 3);
        self.ping("guest2", "10.77.0.1", 3);
        self.ok(&["down"]);
        assert_nothing_left();
    }
}

/// The driver domain's macvlans, as `ip` lists them from the host.
pub fn macvlans() -> Vec<String> {
    let o = std::process::Command::new("ip")
        .args([
            "-n",
            "splitnet-drv",
            "-br",
            "link",
            "show",
            "type",
            "macvlan",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split('@').next())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// UDP by segmentation offload, both sides in one script: `recv PORT N
/// SEG READY` takes N super-datagrams' worth of SEG-byte datagrams (its
/// buffer forced large, an acknowledgement back after each tenth, so the
/// sender never overruns a queue), then prints bytes, datagrams, the
/// sizes seen and a SHA-256 of the payload; `send DST PORT N SEG` sends N
/// super-datagrams of ten segments each with `UDP_SEGMENT` and prints
/// bytes and the same hash.
const USO_PY: &str = r#"
import hashlib, socket, sys
mode, h = sys.argv[1], hashlib.sha256()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
if mode == "recv":
    port, n, seg, ready = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
    s.bind(("0.0.0.0", port))
    open(ready, "w").close()
    got, count, sizes = 0, 0, set()
    try:
        while count < n * 10:
            d, peer = s.recvfrom(65536)
            got, count = got + len(d), count + 1
            sizes.add(len(d))
            h.update(d)
            if count % 10 == 0:
                s.sendto(b"a", peer)
    except socket.timeout:
        pass
    print(got, count, ",".join(map(str, sorted(sizes))), h.hexdigest())
else:
    dst, port, n, seg = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    s.setsockopt(socket.SOL_UDP, 103, seg)  # UDP_SEGMENT
    total = 0
    for i in range(n):
        body = bytes((i * 7 + j) % 251 for j in range(seg * 10))
        s.sendto(body, (dst, port))
        total += len(body)
        h.update(body)
        s.recv(16)
    print(total, h.hexdigest())
"#;

/// Super-datagrams, and the segment size, of each USO transfer.
pub const USO_N: u32 = 100;
pub const USO_SEG: u32 = 1400;

/// `sender` sends [`USO_N`] super-datagrams with `UDP_SEGMENT` to
/// `receiver` at `ip`; every datagram arrives whole, in [`USO_SEG`]-byte
/// pieces, with the payload's hash.
pub fn uso_transfer(env: &Env, sender: &str, receiver: &str, ip: &str, port: u16) {
    let script = env.run_dir.join("uso.py");
    std::fs::write(&script, USO_PY).unwrap();
    let ready = env.run_dir.join(format!("uso-ready-{port}"));
    let (n, seg, p) = (USO_N.to_string(), USO_SEG.to_string(), port.to_string());
    let ns = toolstack::host::netns_name(receiver);
    let py = script.to_str().unwrap();
    let recv = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "python3", py, "recv", &p, &n, &seg])
        .arg(&ready)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        &format!("the UDP receiver in {receiver} to bind"),
        std::time::Duration::from_secs(10),
        || ready.exists(),
    );
    let sent = env.ok(&[
        "exec", sender, "--", "python3", py, "send", ip, &p, &n, &seg,
    ]);
    let out = recv.wait_with_output().unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    let (sent, got): (Vec<&str>, Vec<&str>) = (
        sent.split_whitespace().collect(),
        got.split_whitespace().collect(),
    );
    let what = format!("UDP_SEGMENT {sender} -> {receiver}: sent {sent:?}, received {got:?}");
    let datagrams = (USO_N * 10).to_string();
    assert_eq!(got.len(), 4, "{what}");
    assert_eq!(
        (got[0], got[1], got[2], got[3]),
        (sent[0], datagrams.as_str(), seg.as_str(), sent[1]),
        "{what}: every datagram whole, of the segment size, the payload intact"
    );
}

/// Packets through guest `g`'s NIC (its TAP) while `f` runs, from the
/// kernel's own count, `key` being `tx_packets` or `rx_packets`: a
/// super-datagram handed over whole counts once.
pub fn nic_packets(g: &str, key: &str, f: impl FnOnce()) -> u64 {
    let before = if_stat(g, "eth0", key);
    f();
    if_stat(g, "eth0", key) - before
}
