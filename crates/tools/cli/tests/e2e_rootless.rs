//! splitnet without root, as a user runs it: the test (root) makes two
//! unprivileged users, one with a subordinate id range and one without,
//! and runs every splitnet command as them (`setpriv`, with a clean
//! environment), from a copy of the binaries they may read. Checked: the
//! instance works (ping, a 64 MiB download checked by SHA-256 through a
//! SIGKILL of the driver domain), hv and the domains run as the user's ids,
//! the host's namespaces are untouched, `down` leaves nothing, and another
//! user can neither see nor touch the instance while running one of their
//! own.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use testutil::wait_until;

/// Where the range given to a user without one starts.
const SUB_START: u32 = 1_700_000;

/// `name`'s subordinate uid blocks of at least 65,536 ids (start, count)
/// that /etc/subgid grants too.
fn sub_blocks(name: &str) -> Vec<(u32, u32)> {
    let read = |f: &str| -> Vec<(u32, u32)> {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let v: Vec<&str> = l.split(':').collect();
                (v.len() == 3 && v[0] == name)
                    .then(|| Some((v[1].parse().ok()?, v[2].parse().ok()?)))?
            })
            .collect()
    };
    let gids = read("/etc/subgid");
    read("/etc/subuid")
        .into_iter()
        .filter(|b| b.1 >= 65_536 && gids.contains(b))
        .collect()
}

fn usermod(args: &[&str]) {
    let st = Command::new("usermod").args(args).status().unwrap();
    assert!(st.success(), "usermod {args:?}");
}

struct User {
    name: String,
    uid: u32,
    gid: u32,
    bin: PathBuf,
    /// The first id of its subordinate range.
    sub: Option<u32>,
}

impl User {
    /// User `name`, made if missing; with `subordinate`, its first block
    /// of 65,536 subordinate uids and gids (`useradd` gives one on Debian;
    /// one is added from [`SUB_START`] otherwise), without, none.
    fn ensure(name: &str, subordinate: bool) -> User {
        if !Command::new("id")
            .arg(name)
            .output()
            .unwrap()
            .status
            .success()
        {
            let st = Command::new("useradd")
                .args(["-M", "-s", "/usr/sbin/nologin", name])
                .status()
                .expect("useradd");
            assert!(st.success(), "useradd {name}");
        }
        let blocks = sub_blocks(name);
        if subordinate && blocks.is_empty() {
            let range = format!("{SUB_START}-{}", SUB_START + 65_535);
            usermod(&["--add-subuids", &range, "--add-subgids", &range, name]);
        }
        if !subordinate {
            for (s, n) in blocks {
                let range = format!("{s}-{}", s + n - 1);
                usermod(&["--del-subuids", &range, "--del-subgids", &range, name]);
            }
        }
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, name]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        User {
            name: name.to_string(),
            uid,
            gid,
            bin: binaries(),
            sub: sub_blocks(name).first().map(|b| b.0),
        }
    }

    /// `program args` as this user, with a clean environment.
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "--reset-env", "--"])
            .arg(program)
            .args(args)
            .current_dir("/tmp");
        c
    }

    fn splitnet(&self, args: &[&str]) -> Output {
        let exe = self.bin.join("splitnet");
        self.cmd(exe.to_str().unwrap(), args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.splitnet(args);
        assert!(
            o.status.success(),
            "{} ran splitnet {args:?}: {}\nhv.log:\n{}",
            self.name,
            text(&o),
            std::fs::read_to_string(self.run_dir().join("hv.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        let exe = self.bin.join("splitnet");
        self.cmd(exe.to_str().unwrap(), args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The run directory a rootless instance uses without XDG_RUNTIME_DIR.
    fn run_dir(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/splitnet-{}", self.uid))
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).unwrap()
    }

    /// Every process of the host whose real uid is this user's or in its
    /// subordinate range (`sub`), as `uid pid args` lines.
    fn processes(&self, sub: Option<u32>) -> Vec<String> {
        let o = Command::new("ps")
            .args(["-e", "-o", "ruid=,pid=,args="])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| {
                let uid: u32 = l
                    .split_whitespace()
                    .next()
                    .and_then(|u| u.parse().ok())
                    .unwrap_or(0);
                uid == self.uid || sub.is_some_and(|s| (s..s + 65_536).contains(&uid))
            })
            .map(str::to_string)
            .collect()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = self.splitnet(&["down"]);
    }
}

/// The host's lock and user `splitnet-rl1` (with a subordinate range),
/// its own instance down; none unless the test runs as root.
fn rl1() -> Option<(testutil::HostLock, User)> {
    let host = testutil::root_or_skip("making the test's users")?;
    let u = User::ensure("splitnet-rl1", true);
    let _ = u.splitnet(&["down"]);
    Some((host, u))
}

/// A process the test started, killed and reaped however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A copy of splitnet, splitnet-hv and splitnet-domain the test's users
/// may run (the build directory may be root's alone).
fn binaries() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let built = PathBuf::from(env!("CARGO_BIN_EXE_splitnet"));
    let dir = std::env::temp_dir().join(format!("splitnet-rootless-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for b in ["splitnet", "splitnet-hv", "splitnet-domain"] {
        let to = dir.join(b);
        if !to.exists() {
            std::fs::copy(built.with_file_name(b), &to)
                .unwrap_or_else(|e| panic!("copying {b} (cargo build --workspace --bins): {e}"));
        }
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// The host's named network namespaces.
fn host_netns() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether a TCP socket of the host's namespace listens on 127.0.0.1:`port`.
fn host_listens(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&"0A")
        })
}

/// The real uid of process `pid`.
fn uid_of(pid: u64) -> u32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn domain_pid(st: &Value, name: &str) -> u64 {
    let d = st["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name);
    d.and_then(|d| d["pid"].as_u64())
        .unwrap_or_else(|| panic!("no {name} in {st}"))
}

#[test]
fn a_user_runs_splitnet_without_root_and_down_leaves_nothing() {
    let Some((_host, u)) = rl1() else {
        return;
    };
    let netns_before = host_netns();
    let up = u.ok(&["up"]);
    assert!(up.contains("splitnet is up"), "{up}");

    // hv runs as the user; each domain as an id of the user's range, its own.
    let st = u.status();
    assert_eq!(uid_of(st["hv_pid"].as_u64().unwrap()), u.uid);
    assert_eq!(st["rootless"], true, "{st}");
    assert!(
        st["cgroups"].as_str().is_some_and(|c| c.contains("by pid")),
        "{st}"
    );
    assert!(u.ok(&["status"]).contains("rootless: hv and its domains"));
    assert!(
        st["domains"][0]["cpu_seconds"].as_f64().is_some(),
        "CPU from /proc: {st}"
    );
    let mut ids: Vec<u32> = ["drv", "guest1", "guest2"]
        .iter()
        .map(|d| uid_of(domain_pid(&st, d)))
        .collect();
    let sub = u.sub.expect("a subordinate range");
    assert!(
        ids.iter().all(|&i| (sub..sub + 65_536).contains(&i)),
        "{ids:?} in {sub}.."
    );
    ids.dedup();
    assert_eq!(ids.len(), 3, "one id per domain");
    let ping = u.splitnet(&[
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "2",
        "-W",
        "2",
        "10.77.0.254",
    ]);
    assert!(ping.status.success(), "{}", text(&ping));
    observe(&u);
    download_through_a_driver_domain_kill(&u);
    assert_eq!(
        host_netns(),
        netns_before,
        "nothing named in the host's /run/netns"
    );

    let down = u.ok(&["down"]);
    assert!(down.contains("splitnet is down"), "{down}");
    wait_until(
        "the user's processes to be gone",
        Duration::from_secs(10),
        || u.processes(u.sub).is_empty(),
    );
    for f in ["hv.sock", "hv.pid", "rootless"] {
        assert!(
            !u.run_dir().join(f).exists(),
            "{f} left in the run directory"
        );
    }
    assert_eq!(host_netns(), netns_before);
}

/// `top` and `capture` as the user: top's frame lists the domains, and a
/// capture on guest1's vif sees guest1's pings.
fn observe(u: &User) {
    let top = u.ok(&["top", "--batch", "--iterations", "1"]);
    for d in ["drv", "guest1", "guest2"] {
        assert!(top.contains(d), "no {d} in top:\n{top}");
    }
    let mut cap = Killed(
        u.cmd(
            u.bin.join("splitnet").to_str().unwrap(),
            &["capture", "guest1/vif0", "-c", "2"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    );
    let ping = [
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "10.77.0.254",
    ];
    let mut status = None;
    wait_until("capture to see a ping", Duration::from_secs(20), || {
        let _ = u.splitnet(&ping);
        status = cap.0.try_wait().unwrap();
        status.is_some()
    });
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut cap.0.stdout.take().unwrap(), &mut seen).unwrap();
    assert!(status.is_some_and(|s| s.success()), "capture: {status:?}");
    assert!(seen.contains("ICMP"), "capture saw no ping:\n{seen}");
}

/// A directory the user may read and write, holding a fresh 64 MiB blob.
fn data_dir(u: &User, tag: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("splitnet-rl-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let blob = testutil::files::random_blob(&dir, 64);
    let chown = Command::new("chown")
        .args(["-R", &format!("{}:{}", u.uid, u.gid)])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(chown.success());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, blob)
}

/// A 64 MiB file from an HTTP server on the wire host, fetched by guest1
/// while the driver domain is killed (by the user) halfway: intact.
fn download_through_a_driver_domain_kill(u: &User) {
    let (dir, blob) = data_dir(u, "wire");
    let server = Killed(u.spawn(&common::wire_http_server(dir.to_str().unwrap())));
    fetch_through_a_kill(u, "http://10.77.0.254:8080/blob", &blob);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether guest1 gets the first byte of `url` (curl, as the user).
fn guest1_reaches(u: &User, url: &str) -> bool {
    let probe = [
        "exec",
        "guest1",
        "--",
        "curl",
        "-sf",
        "-o",
        "/dev/null",
        "-r",
        "0-0",
        url,
    ];
    u.splitnet(&probe).status.success()
}

/// guest1 fetches `url`, which serves `blob`, while the user SIGKILLs the
/// driver domain halfway; the file arrives intact, and drv was restarted.
fn fetch_through_a_kill(u: &User, url: &str, blob: &Path) {
    wait_until("the HTTP server", Duration::from_secs(20), || {
        guest1_reaches(u, url)
    });
    let got = blob.with_file_name("got");
    let out = got.to_str().unwrap();
    let mut client = u.spawn(&[
        "exec",
        "guest1",
        "--",
        "curl",
        "-sS",
        "--fail",
        "--limit-rate",
        "16M",
        "--max-time",
        "120",
        "-o",
        out,
        url,
    ]);
    wait_until("half the download", Duration::from_secs(30), || {
        std::fs::metadata(&got).is_ok_and(|m| m.len() > 32 << 20)
    });
    let drv = domain_pid(&u.status(), "drv");
    let kill = u.cmd("kill", &["-9", &drv.to_string()]).output().unwrap();
    assert!(
        kill.status.success(),
        "the user kills its driver domain: {}",
        text(&kill)
    );
    let done = client.wait().unwrap();
    assert!(done.success(), "curl: {done}");
    assert_eq!(
        testutil::files::sha256(&got),
        testutil::files::sha256(blob),
        "the download through the kill"
    );
    assert_ne!(domain_pid(&u.status(), "drv"), drv, "drv was restarted");
}

/// A pasta uplink, as a user runs it: guest1 reaches the host's own
/// services on its loopback through pasta (a 64 MiB download through a
/// driver-domain SIGKILL, iperf3), and a host port published to guest1
/// reaches its server; `down` stops pasta.
#[test]
fn guests_reach_the_hosts_services_through_pasta_and_a_published_port_reaches_a_guest() {
    let Some((_host, u)) = rl1() else {
        return;
    };
    let (dir, blob) = data_dir(&u, "pasta");
    let d = dir.to_str().unwrap();
    // The host's services, on its loopback only.
    let _web = Killed(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                "18888",
                "--bind",
                "127.0.0.1",
                "--directory",
                d,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _iperf = Killed(
        Command::new("iperf3")
            .args(["-s", "-B", "127.0.0.1", "-p", "15201"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let topo = dir.join("pasta.toml");
    std::fs::write(
        &topo,
        "name = \"pasta\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.79.0.2/24\"\n\
         [[port]]\ndriver = \"drv\"\nkind = \"pasta\"\nsubnet = \"10.79.0.1/24\"\n\
         publish = [\"tcp:18081:10.79.0.2:80\"]\n",
    )
    .unwrap();
    u.ok(&["up", "--config", topo.to_str().unwrap()]);
    u.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "route",
        "add",
        "default",
        "via",
        "10.79.0.1",
    ]);
    // pasta answers as the host's gateway, which stands for the host.
    let routes = u.ok(&["exec", "pasta-drv", "--", "ip", "-4", "route"]);
    let gw = routes
        .lines()
        .find_map(|l| l.strip_prefix("default via "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no default route in the pasta namespace: {routes}"))
        .to_string();
    fetch_through_a_kill(&u, &format!("http://{gw}:18888/blob"), &blob);
    // iperf3 3.12 exits 0 when it cannot reach its server (its report
    // then says why): the server listens first, and the host answers
    // guest1 again after the driver domain's restart (a connection right
    // after it once met "No route to host").
    wait_until("the host's iperf3 server", Duration::from_secs(10), || {
        host_listens(15201)
    });
    let probe = format!("http://{gw}:18888/blob");
    wait_until(
        "guest1 to reach the host again",
        Duration::from_secs(20),
        || guest1_reaches(&u, &probe),
    );
    let j = u.ok(&[
        "exec", "guest1", "--", "iperf3", "-c", &gw, "-p", "15201", "-t", "2", "-J",
    ]);
    let j: Value = serde_json::from_str(&j).unwrap();
    let received = j["end"]["sum_received"]["bytes"].as_f64();
    assert!(
        received.is_some_and(|b| b > 0.0),
        "iperf3 through pasta: {j}"
    );
    ping_through_pasta(&u, &gw);

    // Published: the host's port 18081 reaches guest1's server on port 80.
    let _server = Killed(u.spawn(&common::http_server("guest1", "10.79.0.2", "80", d)));
    let got = dir.join("published");
    let url = "http://127.0.0.1:18081/blob";
    wait_until("the published port", Duration::from_secs(20), || {
        Command::new("curl")
            .args(["-sf", "-o", got.to_str().unwrap(), url])
            .status()
            .unwrap()
            .success()
    });
    assert!(
        testutil::files::sha256(&got) == testutil::files::sha256(&blob),
        "the guest's file through the published port differs"
    );
    drop(_server);
    u.ok(&["down"]);
    wait_until("pasta to stop", Duration::from_secs(10), || {
        !u.processes(u.sub).iter().any(|p| p.contains("pasta"))
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host's `net.ipv4.ping_group_range`, put back however the test ends.
struct PingRange(String);

const PING_RANGE: &str = "/proc/sys/net/ipv4/ping_group_range";

impl PingRange {
    fn set(range: &str) {
        std::fs::write(PING_RANGE, range).unwrap();
    }
}

impl Drop for PingRange {
    fn drop(&mut self) {
        PingRange::set(&self.0);
    }
}

/// guest1 pings the host through pasta when the host lets the user's group
/// open ping sockets, and `status` says why it cannot while it does not.
fn ping_through_pasta(u: &User, gw: &str) {
    let _back = PingRange(std::fs::read_to_string(PING_RANGE).unwrap());
    let limits = |u: &User| -> Vec<Value> {
        let st = u.status();
        let pasta = st["uplinks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["kind"] == "pasta");
        pasta.unwrap_or_else(|| panic!("no pasta uplink in {st}"))["limits"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let ping = |u: &User| {
        u.splitnet(&["exec", "guest1", "--", "ping", "-c", "2", "-W", "2", gw])
            .status
            .success()
    };
    PingRange::set("1 0");
    let said = limits(u);
    assert!(
        said.iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("ping_group_range"))),
        "status names no ping limit with the range closed: {said:?}"
    );
    assert!(
        u.ok(&["status"]).contains("limited: ping through pasta"),
        "status's text hides the limit"
    );
    assert!(
        !ping(u),
        "a ping through pasta was answered with the range closed"
    );
    PingRange::set(&format!("{0} {0}", u.gid));
    assert_eq!(
        limits(u),
        Vec::<Value>::new(),
        "a limit left with the range open"
    );
    assert!(ping(u), "guest1 got no answer from the host through pasta");
}

#[test]
fn another_user_can_neither_see_nor_touch_an_instance_and_runs_their_own() {
    let Some(_host) = testutil::root_or_skip("making the test's users") else {
        return;
    };
    let a = User::ensure("splitnet-rl1", true);
    let b = User::ensure("splitnet-rl2", false);
    let _ = (a.splitnet(&["down"]), b.splitnet(&["down"]));
    a.ok(&["up"]);
    let drv = domain_pid(&a.status(), "drv");

    // b cannot reach a's hv, read its run directory, or signal its domains.
    let rd = a.run_dir();
    let o = b.splitnet(&["--run-dir", rd.to_str().unwrap(), "status"]);
    assert!(!o.status.success(), "b reached a's hv: {}", text(&o));
    let o = b.cmd("ls", &[rd.to_str().unwrap()]).output().unwrap();
    assert!(!o.status.success(), "b listed a's run directory");
    let o = b.cmd("kill", &["-0", &drv.to_string()]).output().unwrap();
    assert!(!o.status.success(), "b may signal a's driver domain");

    // b's own instance, beside a's, with the same names in its own
    // namespaces; without a subordinate range its domains run as b.
    let up = b.splitnet(&["up"]);
    assert!(up.status.success(), "{}", text(&up));
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("every domain runs as you"),
        "{}",
        text(&up)
    );
    assert_eq!(uid_of(domain_pid(&b.status(), "drv")), b.uid);
    for u in [&a, &b] {
        let ping = u.splitnet(&[
            "exec",
            "guest2",
            "--",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "10.77.0.1",
        ]);
        assert!(ping.status.success(), "{}: {}", u.name, text(&ping));
    }
    assert_eq!(
        domain_pid(&a.status(), "drv"),
        drv,
        "a's instance untouched"
    );
    b.ok(&["down"]);
    a.ok(&["down"]);
}

#[test]
fn what_needs_root_is_refused_by_name() {
    let Some(_host) = testutil::root_or_skip("making the test's users") else {
        return;
    };
    let u = User::ensure("splitnet-rl1", true);
    let topo = std::env::temp_dir().join(format!("splitnet-rl-nat-{}.toml", std::process::id()));
    std::fs::write(
        &topo,
        "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[[domain]]\nname = \"guest1\"\nkind = \"guest\"\n\
         [[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\n",
    )
    .unwrap();
    let o = u.splitnet(&["up", "--config", topo.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("without root") && err.contains("nat uplink of drv"),
        "{}",
        text(&o)
    );
    assert!(!Path::new(&u.run_dir().join("hv.sock")).exists());
    let _ = std::fs::remove_file(&topo);
}

/// `splitnet demo`, the README's main job, as a user: every step runs, the
/// table against native comes out, and the instance is taken down.
#[test]
fn the_demo_runs_without_root() {
    let Some((_host, u)) = rl1() else {
        return;
    };
    let out = u.ok(&["demo", "--seconds", "1"]);
    for step in ["== 5. results", "| guest1 -> wire |", "splitnet is down"] {
        assert!(out.contains(step), "no {step:?} in:\n{out}");
    }
    assert!(!u.run_dir().join("hv.sock").exists());
}

/// A summary row's median Gbit/s of `config` in `direction`.
fn median_gbps(rows: &Value, config: &str, direction: &str) -> Option<f64> {
    rows.as_array()?
        .iter()
        .find(|m| m["config"] == config && m["direction"] == direction)?["median_gbps"]
        .as_f64()
}

/// `bench baseline --rootless`, run by root for a user: the rootful
/// reference as root, then native, pasta, slirp4netns and rootless
/// splitnet (with the wire and with a pasta uplink) as the user; every
/// flow carried data, each target's verdict follows from the numbers
/// beside it, and nothing of the user's is left running.
#[test]
fn the_rootless_bench_measures_the_peers_and_rootful_splitnet_in_one_run() {
    let Some((_host, u)) = rl1() else {
        return;
    };
    let before = host_netns();
    let json = std::env::temp_dir().join(format!("splitnet-rl-bench-{}.json", std::process::id()));
    let rd = std::env::temp_dir().join(format!("splitnet-rl-bench-rd-{}", std::process::id()));
    let o = Command::new(u.bin.join("splitnet"))
        .args(["--rootless", "--run-dir", rd.to_str().unwrap()])
        .args([
            "bench",
            "baseline",
            "--user",
            &u.name,
            "--quick",
            "--seconds",
            "1",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["rootless"], true);
    let mut configs = vec!["native", "pasta", "splitnet-default", "splitnet-pasta"];
    if Command::new("slirp4netns")
        .arg("--version")
        .output()
        .is_ok()
    {
        configs.push("slirp4netns");
    }
    for c in configs {
        let rows: Vec<&Value> = r["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["config"] == c)
            .collect();
        assert!(!rows.is_empty(), "{c} was not measured: {r}");
        for x in rows {
            let g = x["gbps"].as_f64().unwrap_or(0.0);
            assert!(g > 0.0, "{c} {} carried nothing", x["direction"]);
        }
    }
    // The verdicts follow from the numbers beside them.
    let rl = median_gbps(&r["summary"], "splitnet-default", "guest-to-guest").unwrap();
    let rf = median_gbps(&r["rootful"], "splitnet-default", "guest-to-guest").unwrap();
    let targets = r["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2, "{targets:?}");
    assert_eq!(targets[0]["met"], rl / rf >= 0.9, "{:?}", targets[0]);
    assert!(targets[1]["met"].is_boolean(), "{:?}", targets[1]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("### Without root") && out.contains("rootful reference"),
        "{out}"
    );
    // Nothing of the user's runs on, and the host's namespaces are as they were.
    wait_until(
        "the user's processes to end",
        Duration::from_secs(10),
        || u.processes(u.sub).is_empty(),
    );
    assert_eq!(host_netns(), before);
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&rd);
}

/// Host `i` (1 or 2) of a two-host underlay: a driver domain, guest1 at
/// 10.77.0.1`i`, and a VXLAN port to the other host's VTEP.
fn vxlan_host(i: usize, evpn: bool) -> String {
    format!(
        "name = \"rl-{i}\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1{i}/24\"\n\
         vif = [\"mac=00:16:3e:19:0{i}:01\"]\n\
         [[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\nvni = 100\nlocal = \"10.200.{i}.3\"\n\
         peers = [\"10.200.{}.3\"]\nevpn = {evpn}\n",
        3 - i
    )
}

/// The multi-host underlay as a user: `underlay up a b` in namespaces of
/// the user's own, a host on each end with a VXLAN port, a 64 MiB download
/// from host b's guest to host a's intact; EVPN (FRR runs as user frr) and
/// a VXLAN port outside an underlay host are refused by name; every host's
/// `down` and `underlay down` leave nothing, in the host's namespaces least.
#[test]
fn a_users_underlay_carries_vxlan_between_their_hosts() {
    let Some((_host, u)) = rl1() else {
        return;
    };
    for h in ["a", "b"] {
        let _ = u.splitnet(&["--host", h, "down"]);
    }
    let _ = u.splitnet(&["underlay", "down"]);
    let netns_before = host_netns();
    let (dir, blob) = data_dir(&u, "vxlan");
    let topo = |i: usize, evpn: bool| {
        let p = dir.join(format!("h{i}-{evpn}.toml"));
        std::fs::write(&p, vxlan_host(i, evpn)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let o = u.splitnet(&["up", "--config", &topo(1, false)]);
    assert!(!o.status.success(), "a vxlan port outside an underlay host");
    assert!(text(&o).contains("vxlan uplink of drv"), "{}", text(&o));
    let made = u.ok(&["underlay", "up", "a", "b"]);
    assert!(made.contains("2 hosts"), "{made}");
    let o = u.splitnet(&["--host", "a", "up", "--config", &topo(1, true)]);
    assert!(
        !o.status.success() && text(&o).contains("user frr"),
        "{}",
        text(&o)
    );
    u.ok(&["--host", "a", "up", "--config", &topo(1, false)]);
    u.ok(&["--host", "b", "up", "--config", &topo(2, false)]);
    let on_b = common::http_server("guest1", "10.77.0.12", "8080", dir.to_str().unwrap());
    let _server = Killed(u.spawn(&[&["--host", "b"][..], &on_b].concat()));
    let url = "http://10.77.0.12:8080/blob";
    let got = dir.join("across");
    let fetch = [
        "--host",
        "a",
        "exec",
        "guest1",
        "--",
        "curl",
        "-sf",
        "--max-time",
        "120",
        "-o",
        got.to_str().unwrap(),
        url,
    ];
    wait_until(
        "the download across the underlay",
        Duration::from_secs(60),
        || u.splitnet(&fetch).status.success(),
    );
    assert_eq!(
        testutil::files::sha256(&got),
        testutil::files::sha256(&blob),
        "the file from host b's guest"
    );
    drop(_server);
    let busy = u.splitnet(&["underlay", "down"]);
    assert!(!busy.status.success(), "underlay down while hosts are up");
    for h in ["a", "b"] {
        u.ok(&["--host", h, "down"]);
    }
    assert!(u.ok(&["underlay", "down"]).contains("hosts a, b"));
    assert!(u.ok(&["underlay", "status"]).contains("no underlay"));
    wait_until(
        "the user's processes to end",
        Duration::from_secs(10),
        || u.processes(u.sub).is_empty(),
    );
    assert_eq!(host_netns(), netns_before);
    let _ = std::fs::remove_dir_all(&dir);
}
