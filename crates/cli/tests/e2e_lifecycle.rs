//! End to end, as a user runs it: `splitnet up`, `status`, `exec`, `down`,
//! and `demo`, over real namespaces, cgroups and processes. Needs root.
//!
//! Namespace names are global to the host, so these tests take a lock and
//! run one at a time even when the harness runs tests in parallel.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static HOST: Mutex<()> = Mutex::new(());

struct Env {
    run_dir: PathBuf,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl Env {
    fn new(name: &str) -> Env {
        let guard = HOST.lock().unwrap_or_else(|p| p.into_inner());
        let run_dir =
            std::env::temp_dir().join(format!("splitnet-test-{name}-{}", std::process::id()));
        let env = Env {
            run_dir,
            _guard: guard,
        };
        // A previous failed test may have left a topology up.
        env.splitnet(&["down"]);
        env
    }

    fn splitnet(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(args)
            .output()
            .expect("run splitnet")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.splitnet(args);
        assert!(
            o.status.success(),
            "splitnet {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}\nhv.log:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(self.run_dir.join("hv.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status --json is JSON")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.splitnet(&["down"]);
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn netns() -> Vec<String> {
    let o = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("splitnet-"))
        .map(str::to_string)
        .collect()
}

/// Processes whose command line mentions our binary, other than the test itself.
fn our_processes() -> Vec<String> {
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
fn our_memfds() -> Vec<String> {
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

fn cgroups() -> Vec<PathBuf> {
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

fn assert_nothing_left() {
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

fn domain<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or(&Value::Null)
}

#[test]
fn up_status_exec_down_leaves_nothing_behind() {
    let env = Env::new("lifecycle");
    let out = env.ok(&["up"]);
    assert!(out.contains("splitnet is up"), "{out}");
    let st = env.status();
    for (name, kind) in [("drv", "driver"), ("guest1", "guest"), ("guest2", "guest")] {
        let d = domain(&st, name);
        assert_eq!(d["kind"], kind, "{st:#}");
        assert_eq!(d["connected"], true, "{name} not connected: {st:#}");
        assert_eq!(d["netns"], format!("splitnet-{name}"));
        let pid = d["pid"].as_i64().unwrap();
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "{name}'s process is not running"
        );
        // The process really is in its own namespace and cgroup.
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
        assert_ne!(
            ns,
            std::fs::read_link("/proc/self/ns/net").unwrap(),
            "{name} shares the host namespace"
        );
        let cg = d["cgroup"].as_str().unwrap();
        let procs = std::fs::read_to_string(format!("{cg}/cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|l| l == pid.to_string()),
            "{name} is not in {cg}"
        );
    }
    let wire = &st["hosts"][0];
    assert_eq!(wire["name"], "wire");
    assert!(
        wire["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "eth0:10.77.0.254/24"),
        "{wire:#}"
    );
    assert_eq!(st["ports"][0]["name"], "peth0");

    // exec runs in the domain's namespace and returns the command's exit code.
    let links = env.ok(&["exec", "guest1", "--", "ip", "-br", "link"]);
    assert!(links.starts_with("lo "), "{links}");
    assert!(
        !links.contains("peth0"),
        "guest1 sees the driver's port: {links}"
    );
    assert!(env
        .ok(&["exec", "drv", "--", "ip", "-br", "link"])
        .contains("peth0@"));
    assert_eq!(
        env.splitnet(&["exec", "guest1", "--", "false"])
            .status
            .code(),
        Some(1)
    );
    let o = env.splitnet(&["exec", "nosuch", "--", "true"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no domain or host named \"nosuch\""));

    // A domain cannot act as the toolstack.
    let exe = env!("CARGO_BIN_EXE_splitnet");
    let rd = env.run_dir.to_str().unwrap();
    let o = env.splitnet(&["exec", "guest1", "--", exe, "--run-dir", rd, "status"]);
    assert!(
        !o.status.success(),
        "a guest read hv's status: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        env.splitnet(&["up"]).status.code() == Some(1),
        "a second `up` must refuse"
    );

    let out = env.ok(&["down"]);
    assert!(out.contains("splitnet is down"), "{out}");
    assert_nothing_left();
    let o = env.splitnet(&["status"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is splitnet up?"));
}

#[test]
fn a_killed_domain_is_reclaimed_and_the_others_keep_running() {
    let env = Env::new("kill");
    env.ok(&["up"]);
    let st = env.status();
    let pid = domain(&st, "guest1")["pid"].as_i64().unwrap() as i32;
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = env.status();
        let gone =
            domain(&st, "guest1").is_null() && !netns().contains(&"splitnet-guest1".to_string());
        if gone {
            assert_eq!(domain(&st, "guest2")["connected"], true);
            assert_eq!(domain(&st, "drv")["connected"], true);
            assert_eq!(st["counters"]["ops"]["domains_destroyed"], 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "hv did not reclaim guest1: {st:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(netns().contains(&"splitnet-guest2".to_string()));
    assert!(
        !Path::new("/sys/fs/cgroup/unified/splitnet/guest1").exists()
            && !Path::new("/sys/fs/cgroup/splitnet/guest1").exists()
    );
    env.ok(&["exec", "guest2", "--", "true"]);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_malformed_configuration_is_refused_with_a_clear_error() {
    let env = Env::new("badconfig");
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let cases = [
        (
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\nmemroy_frames = 4\n",
            "unknown field `memroy_frames`",
        ),
        (
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\n[wire]\ndriver = \"g\"\n",
            "is not a driver domain",
        ),
        ("[[domain]\n", "bad.toml"),
    ];
    for (text, needle) in cases {
        let path = env.run_dir.join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let o = env.splitnet(&["up", "--config", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(needle),
            "error {err:?} should mention {needle:?}"
        );
        assert!(
            err.contains("bad.toml"),
            "error {err:?} should name the file"
        );
        assert_eq!(
            netns(),
            Vec::<String>::new(),
            "a refused config must not start anything"
        );
    }
    let o = env.splitnet(&["up", "--config", "/nonexistent/x.toml"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read /nonexistent/x.toml"));
}

#[test]
fn a_custom_topology_comes_up() {
    let env = Env::new("custom");
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("t.toml");
    std::fs::write(
        &path,
        "name = \"small\"\n[[domain]]\nname = \"d0\"\nkind = \"driver\"\nmemory_frames = 1024\n\
         [[domain]]\nname = \"vm-a\"\nkind = \"guest\"\n[wire]\nname = \"far\"\ndriver = \"d0\"\naddress = \"192.0.2.1/24\"\n",
    )
    .unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    let st = env.status();
    assert_eq!(st["topology"], "small");
    assert_eq!(domain(&st, "d0")["memory_frames"], 1024);
    assert_eq!(st["hosts"][0]["name"], "far");
    env.ok(&["exec", "far", "--", "ip", "addr", "show", "eth0"]);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn demo_runs_start_to_finish() {
    let env = Env::new("demo");
    let out = env.ok(&["demo"]);
    for needle in [
        "splitnet is up",
        "DOMAIN",
        "peth0",
        "grant map + unmap",
        "event-channel",
        "splitnet is down",
    ] {
        assert!(out.contains(needle), "demo output lacks {needle:?}:\n{out}");
    }
    assert_nothing_left();
}
