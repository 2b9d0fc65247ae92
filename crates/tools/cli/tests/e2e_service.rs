//! hv as a service: the shipped unit passes `systemd-analyze verify`, and
//! hv, run as the unit runs it (its capability bounding set, no new
//! privileges) with a notify socket the test listens on, says
//! where it is, tells `READY=1` only once the topology is up, keeps the
//! socket from its domains, logs with levels and domain names, on SIGHUP
//! tells `RELOADING=1` and applies its file again, and on SIGTERM tells
//! `STOPPING=1` and leaves nothing behind.

mod common;

use common::{netns, signal, Env};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn unit_text() -> String {
    std::fs::read_to_string(repo().join("dist/splitnet.service")).expect("dist/splitnet.service")
}

/// The binary beside the `splitnet` the tests run (`splitnet-hv`, …).
fn sibling(name: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_splitnet")).with_file_name(name)
}

/// The value of `Key=` in the unit.
fn unit_value(key: &str) -> String {
    unit_text()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .to_string()
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = std::env::temp_dir().join(format!("splitnet-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The unit as installed, with this build's binaries in place of
    // /usr/local/bin's (verify checks that each command exists).
    let text = unit_text()
        .replace(
            "/usr/local/bin/splitnet-hv",
            sibling("splitnet-hv").to_str().unwrap(),
        )
        .replace(
            "/usr/local/bin/splitnet ",
            &format!("{} ", sibling("splitnet").display()),
        );
    let unit = dir.join("splitnet.service");
    std::fs::write(&unit, text).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze (package systemd; scripts/setup.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown directive is only a warning: any output fails the test.
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
    for key in ["Type", "ExecStart", "KillMode", "NoNewPrivileges"] {
        assert!(!unit_value(key).is_empty());
    }
    assert_eq!(unit_value("Type"), "notify");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The unit's capability bounding set, as setpriv writes it.
fn bounding_set() -> String {
    let caps: Vec<String> = unit_value("CapabilityBoundingSet")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

/// Datagrams from hv, gathered until one contains `want`; a failure shows
/// the logs in `run_dir`.
fn until(sock: &UnixDatagram, got: &mut Vec<String>, want: &str, limit: Duration, run_dir: &Path) {
    let deadline = Instant::now() + limit;
    let logs = || {
        ["hv.log", "drv.log", "guest1.log"]
            .map(|f| {
                let text = std::fs::read_to_string(run_dir.join(f)).unwrap_or_default();
                format!("{f}:\n{text}")
            })
            .join("\n")
    };
    while !got.iter().any(|m| m.contains(want)) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no {want} within {limit:?}; got {got:?}\n{}",
            logs()
        );
        sock.set_read_timeout(Some(left)).unwrap();
        let mut buf = [0u8; 4096];
        match sock.recv(&mut buf) {
            Ok(n) => got.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) => panic!("no {want} within {limit:?} ({e}); got {got:?}\n{}", logs()),
        }
    }
}

#[test]
fn hv_run_as_the_unit_runs_it_tells_ready_and_stopping() {
    let Some(env) = Env::new("service") else {
        return;
    };
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let topo = env.run_dir.join("topology.toml");
    std::fs::write(&topo, toolstack::topology::DEFAULT_TOML).unwrap();
    let notify = env.run_dir.join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    let log = std::fs::File::create(env.run_dir.join("hv.log")).unwrap();
    let mut hv = Command::new("setpriv")
        .arg("--no-new-privs")
        .arg(format!("--bounding-set={}", bounding_set()))
        .arg(sibling("splitnet-hv"))
        .arg("--config")
        .arg(&topo)
        .arg("--run-dir")
        .arg(&env.run_dir)
        .env("NOTIFY_SOCKET", &notify)
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("setpriv (util-linux) runs splitnet-hv");
    let mut got = Vec::new();
    until(
        &sock,
        &mut got,
        "READY=1",
        Duration::from_secs(90),
        &env.run_dir,
    );
    let ready = got.iter().position(|m| m.contains("READY=1")).unwrap();
    assert!(
        got[..ready]
            .iter()
            .any(|m| m.starts_with("STATUS=starting topology \"default\"")),
        "hv says what it is doing before it is ready: {got:?}"
    );
    assert!(
        got[ready].contains("STATUS=topology \"default\" is up: 3 domains, 2 vifs"),
        "{got:?}"
    );

    ready_means_up(&env);

    // SIGHUP applies the file again (unchanged here): RELOADING=1, then
    // READY=1 saying what was applied.
    let seen = got.len();
    signal(i64::from(hv.id()), "HUP");
    until(
        &sock,
        &mut got,
        "STATUS=applied",
        Duration::from_secs(30),
        &env.run_dir,
    );
    let reload = &got[seen..];
    assert!(
        reload[0].starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reload:?}"
    );
    assert!(
        reload
            .iter()
            .any(|m| m == "READY=1\nSTATUS=applied: nothing to change"),
        "{reload:?}"
    );
    signal(i64::from(hv.id()), "TERM");
    until(
        &sock,
        &mut got,
        "STOPPING=1",
        Duration::from_secs(30),
        &env.run_dir,
    );
    let status = hv.wait().unwrap();
    assert!(status.success(), "hv after SIGTERM: {status}");
    assert!(netns().is_empty(), "left behind: {:?}", netns());
    assert!(!env.run_dir.join("hv.sock").exists());
    log_has_levels_and_domains(&env.run_dir);
}

/// Ready means up: every vif connected, and traffic flows. The domains
/// inherit neither the notify socket nor the signals hv blocks for itself.
fn ready_means_up(env: &Env) {
    let st = env.status();
    for v in st["vifs"].as_array().unwrap() {
        assert_eq!(v["frontend_state"], "Connected", "{v}");
        assert_eq!(v["backend_state"], "Connected", "{v}");
    }
    env.ping("guest1", "10.77.0.254", 1);
    for d in st["domains"].as_array().unwrap() {
        let pid = d["pid"].as_i64().unwrap();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&environ).contains("NOTIFY_SOCKET"),
            "domain {} inherited NOTIFY_SOCKET",
            d["name"]
        );
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.contains("SigBlk:\t0000000000000000"),
            "domain {} starts with signals blocked:\n{status}",
            d["name"]
        );
    }
}

/// hv's log has levels and domain names.
fn log_has_levels_and_domains(run_dir: &Path) {
    let log = std::fs::read_to_string(run_dir.join("hv.log")).unwrap();
    for line in [
        "] hv info: drv: domain ",
        "] hv info: guest1: domain ",
        "] hv notice: topology \"default\" is up: 3 domains, 2 vifs",
        "] hv notice: SIGTERM: taking the topology down",
        "] hv notice: stopped",
    ] {
        assert!(log.contains(line), "hv.log has no {line:?}:\n{log}");
    }
}
