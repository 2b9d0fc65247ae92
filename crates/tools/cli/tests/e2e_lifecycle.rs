//! End to end, as a user runs it: `splitnet up`, `status`, `exec`, `down`,
//! and `demo`, over real namespaces, cgroups and processes. Needs root.
//!
//! Namespace names are global to the host, so these tests take a lock and
//! run one at a time even when the harness runs tests in parallel.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

#[test]
fn up_status_exec_down_leaves_nothing_behind() {
    let Some(env) = Env::new("lifecycle") else {
        return;
    };
    let out = env.ok(&["up"]);
    assert!(out.contains("splitnet is up"), "{out}");
    let st = env.status();
    check_domains_run_apart(&st);
    check_wire_and_port(&st);

    check_exec(&env);

    // What a user starts in a domain is the domain's: charged to its cgroup,
    // and stopped by `down`.
    let mut app = env.spawn(&["exec", "guest1", "--", "sleep", "1000"]);
    let app_pid = app.0.id().to_string();
    let cg = domain(&st, "guest1")["cgroup"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(
        "the application to join guest1's cgroup",
        Duration::from_secs(5),
        || {
            std::fs::read_to_string(format!("{cg}/cgroup.procs"))
                .is_ok_and(|p| p.lines().any(|l| l == app_pid))
        },
    );

    let out = env.ok(&["down"]);
    assert!(
        app.wait_exit(Duration::from_secs(1)),
        "`down` left an application started with exec running"
    );
    assert!(out.contains("splitnet is down"), "{out}");
    assert_nothing_left();
    let o = env.splitnet(&["status"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is splitnet up?"));
}

/// Each domain of the default topology is connected and runs in its own
/// namespace and cgroup.
fn check_domains_run_apart(st: &serde_json::Value) {
    for (name, kind) in [("drv", "driver"), ("guest1", "guest"), ("guest2", "guest")] {
        let d = domain(st, name);
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
}

/// The wire host has its address and the driver domain its physical port.
fn check_wire_and_port(st: &serde_json::Value) {
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
}

/// `exec` runs in a domain's namespace, returns the command's exit code and
/// does not let a domain act as the toolstack; a second `up` is refused.
fn check_exec(env: &Env) {
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
}

#[test]
fn down_after_hv_crashed_cleans_up() {
    let Some(env) = Env::new("hvcrash") else {
        return;
    };
    env.ok(&["up"]);
    let hv_pid: i64 = std::fs::read_to_string(env.run_dir.join("hv.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _app = env.spawn(&["exec", "guest2", "--", "sleep", "1000"]);
    // Its guardian first, which would start it again (`e2e_hv_crash`).
    let guardian: i64 = std::fs::read_to_string(env.run_dir.join("guardian.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill9(guardian);
    kill9(hv_pid);
    wait_until("hv to die", Duration::from_secs(5), || {
        !toolstack::host::pid_alive(hv_pid as i32)
    });
    // The run directory is stale and nobody answers on hv's socket.
    let out = env.ok(&["down"]);
    assert!(out.contains("splitnet is down"), "{out}");
    assert_nothing_left();
    // And a fresh `up` works.
    env.ok(&["up"]);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_killed_domain_is_reclaimed_and_the_others_keep_running() {
    let Some(env) = Env::new("kill") else {
        return;
    };
    env.ok(&["up"]);
    let st = env.status();
    let pid = domain(&st, "guest1")["pid"].as_i64().unwrap() as i32;
    kill9(pid as i64);
    let st = wait_until("hv to reclaim guest1", Duration::from_secs(10), || {
        let st = env.status();
        let gone =
            domain(&st, "guest1").is_null() && !netns().contains(&"splitnet-guest1".to_string());
        if gone {
            Ok(st)
        } else {
            Err(format!("{st:#}"))
        }
    });
    assert_eq!(domain(&st, "guest2")["connected"], true);
    assert_eq!(domain(&st, "drv")["connected"], true);
    assert_eq!(st["counters"]["ops"]["domains_destroyed"], 1);
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
    let Some(env) = Env::new("badconfig") else {
        return;
    };
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
    let Some(env) = Env::new("custom") else {
        return;
    };
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
    let Some(env) = Env::new("demo") else {
        return;
    };
    let out = env.ok(&["demo", "--seconds", "1"]);
    for needle in [
        "splitnet is up",
        "DOMAIN",
        "peth0",
        "| direction | splitnet Gbit/s | native Gbit/s | ratio |",
        "| guest1 -> guest2 |",
        "splitnet is down",
    ] {
        assert!(out.contains(needle), "demo output lacks {needle:?}:\n{out}");
    }
    assert_nothing_left();
}

#[test]
fn the_wire_link_is_shaped_to_the_rate_asked_for_both_ways() {
    let Some(env) = Env::new("shape") else {
        return;
    };
    let o = env.splitnet(&["up", "--link-rate", "fast"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("needs a unit"),
        "{o:?}"
    );
    env.ok(&["up", "--link-rate", "20mbit"]);
    let st = env.status();
    assert_eq!(st["hosts"][0]["link_rate"], "20mbit", "{st}");
    // A token bucket on both ends of the link.
    for (domain, dev) in [("drv", "peth0"), ("wire", "eth0")] {
        let o = std::process::Command::new("tc")
            .args([
                "-n",
                &toolstack::host::netns_name(domain),
                "qdisc",
                "show",
                "dev",
                dev,
            ])
            .output()
            .unwrap();
        let q = String::from_utf8_lossy(&o.stdout);
        assert!(
            q.contains("tbf") && q.contains("rate 20Mbit"),
            "{domain}:{dev}: {q}"
        );
    }
    // And traffic still crosses the shaped link: iperf3 guest1 -> wire
    // completes and the wire receives its bytes (how near 20 Mbit/s it
    // stays is `bench vif-options`' to report).
    let out = env.iperf3_guest1_to_wire(&["-t", "2", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("iperf3 -J");
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!(bytes > 0.0, "nothing crossed a 20mbit link: {out}");
    env.ok(&["down"]);
}
