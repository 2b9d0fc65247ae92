//! hv upgraded in place (`splitnet upgrade --hv`): the same process goes on
//! with a new program, every domain keeps its process, its id and its
//! traffic, and nothing is lost; a program that cannot take over leaves
//! the old hv serving (guests with emulated NICs: `e2e_hv_crash`). Needs
//! root; run one test at a time.

mod common;

use common::numbered::{self, DATAGRAMS};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `splitnet-hv` program: the one beside `splitnet`.
fn hv_program() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_splitnet")).with_file_name("splitnet-hv")
}

/// `upgrade --hv [PATH] --json`'s report.
fn upgrade(env: &Env, program: Option<&Path>) -> Value {
    let out = match program {
        Some(p) => env.ok(&["upgrade", "--hv", &p.display().to_string(), "--json"]),
        None => env.ok(&["upgrade", "--hv", "--json"]),
    };
    serde_json::from_str(&out).expect("upgrade --hv --json is JSON")
}

/// What must not change across upgrades of hv: its pid, every domain's
/// process and id, and what the domains hold in hv.
fn identity(env: &Env) -> Value {
    let st = env.status();
    let domains: Vec<Value> = (st["domains"].as_array().unwrap().iter())
        .filter(|d| d["id"].is_u64())
        .map(|d| {
            serde_json::json!({
                "name": d["name"], "pid": d["pid"], "id": d["id"],
                "grant_maps": d["grant_maps"], "event_channels": d["event_channels"],
            })
        })
        .collect();
    serde_json::json!({
        "hv": st["hv_pid"], "domains": domains,
        "vif": vif(&st, "guest1")["backend"], "ifindex": if_stat("guest1", "eth0", "../ifindex"),
    })
}

/// A program in the run directory: a shell script running `body`.
fn script(env: &Env, name: &str, body: &str) -> PathBuf {
    let path = env.run_dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode).unwrap();
    path
}

#[test]
fn an_upgraded_hv_keeps_every_domain_and_every_datagram() {
    let Some(env) = Env::new("hvupg-keep") else {
        return;
    };
    env.ok(&["up"]);
    env.ping("guest1", "10.77.0.254", 1);
    let before = identity(&env);
    // Once every domain has published what it publishes on its own clock:
    // the store, watches and pins must then be exactly what they were.
    let held = env.settled();
    let (_srv, mut client) = env.stream_to_wire("guest1", 6);
    let flows = numbered::Flows::start();
    for k in 1..=4u32 {
        wait_until("the next fifth sent", Duration::from_secs(10), || {
            flows.sent() > k * DATAGRAMS / 5
        });
        let r = upgrade(&env, None);
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["upgrade"], k.to_string(), "{r}");
        assert!(r["outcome"].as_str().unwrap().contains("took over"), "{r}");
    }
    // The domains never waited on hv for their data path: not one
    // datagram either way was lost.
    numbered::assert_intact(flows, &mut client, "four upgrades of hv");
    assert_eq!(identity(&env), before, "an upgrade of hv changed a domain");
    env.settled_as(&held).assert_holds_as(&held);
    let st = env.status();
    assert_eq!(
        st["counters"]["ops"]["hv_upgrades"], 4,
        "{:#}",
        st["counters"]
    );
    // The upgraded hv does all that hv does: hot-plug, restart, down.
    env.ok(&["network-attach", "guest2", "bridge=xenbr0"]);
    env.ok(&["restart", "guest1"]);
    env.ping("guest1", "10.77.0.254", 1);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_program_that_cannot_take_over_leaves_hv_serving() {
    let Some(env) = Env::new("hvupg-refuse") else {
        return;
    };
    env.ok(&["up"]);
    let before = identity(&env);
    // One that does not run: refused before hv stops serving.
    let crashes = script(&env, "crashes", "echo 'no such luck' >&2; exit 3");
    let e = refused(&env, &["upgrade", "--hv", &crashes.display().to_string()]);
    assert!(
        e.contains("cannot take over") && e.contains("no such luck"),
        "{e}"
    );
    let e = refused(&env, &["upgrade", "--hv", "/nonexistent/splitnet-hv"]);
    assert!(e.contains("/nonexistent/splitnet-hv"), "{e}");
    assert_eq!(identity(&env), before);
    env.ping("guest1", "10.77.0.254", 1);
    // A state newer than the program reads (a downgrade, as this program
    // sees a state whose format it rewrote): refused by name.
    let real = hv_program().display().to_string();
    let older = script(
        &env,
        "older",
        &format!(
            "case \"$1\" in --handover-check) sed 's/\"format\":2,/\"format\":3,/' | exec {real} \"$@\";; esac\n\
             exec {real} \"$@\""
        ),
    );
    let e = refused(&env, &["upgrade", "--hv", &older.display().to_string()]);
    assert!(e.contains("format 3, newer than this hv reads (2)"), "{e}");
    assert_eq!(identity(&env), before);
    // One that reads the state and gives it back (as a new program does
    // when it cannot adopt it): the old program takes it back.
    let gives_back = script(
        &env,
        "gives-back",
        &format!(
            "case \"$1\" in --handover-check) exec {real} \"$@\";; esac\n\
             prev=; for a; do [ \"$prev\" = --resume ] && img=$a; prev=$a; done\n\
             sed -i 's/\"rollback\":null/\"rollback\":\"the test program gives it back\"/' \"$img\"\n\
             exec {real} \"$@\""
        ),
    );
    let e = refused(
        &env,
        &["upgrade", "--hv", &gives_back.display().to_string()],
    );
    assert!(
        e.contains("rolled back") && e.contains("gives it back"),
        "{e}"
    );
    assert_eq!(identity(&env), before);
    env.ping("guest1", "10.77.0.254", 1);
    let r = upgrade(&env, Some(&hv_program()));
    assert_eq!(r["ok"], true, "{r}");
    env.ok(&["down"]);
    assert_nothing_left();
}

/// Hot-plugs under way finish before hv stops serving (their vifs'
/// handshakes need the domains served), and those asked meanwhile are
/// served by the new program: none fails, none is left behind. Of two
/// upgrades asked at once, each runs, one after the other, or is refused
/// as under way.
#[test]
fn upgrades_during_hot_plugging_lose_no_attach() {
    let Some(env) = Env::new("hvupg-plug") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let upgrades = std::thread::scope(|s| {
        let plugging = s.spawn(|| {
            for _ in 0..8 {
                // "guest2: vif H connected as ethH"
                let out = env.ok(&["network-attach", "guest2"]);
                let handle = out.split_whitespace().nth(2).expect("a handle").to_string();
                env.ok(&["network-detach", "guest2", &handle]);
            }
        });
        let mut n = 0;
        while !plugging.is_finished() {
            let (a, b) = std::thread::scope(|s2| {
                let other = s2.spawn(|| env.splitnet(&["upgrade", "--hv"]));
                let mine = env.splitnet(&["upgrade", "--hv"]);
                (mine, other.join().unwrap())
            });
            for o in [&a, &b] {
                let err = String::from_utf8_lossy(&o.stderr);
                let log =
                    || std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default();
                assert!(
                    o.status.success() || err.contains("another upgrade is under way"),
                    "an upgrade failed otherwise: {err}\nhv's log:\n{}",
                    log()
                );
            }
            n += u32::from(a.status.success()) + u32::from(b.status.success());
        }
        plugging.join().expect("an attach or detach failed");
        n
    });
    assert!(upgrades > 0, "no upgrade ran during the hot-plugs");
    let st = env.status();
    assert_eq!(
        st["vifs"].as_array().unwrap().len(),
        2,
        "a hot-plugged vif was left behind: {st:#}"
    );
    env.settled_as(&held).assert_holds_as(&held);
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A driver domain killed as hv is upgraded is reaped by whichever
/// program is running and restarted as its policy says; a SIGHUP sent
/// meanwhile is taken by one of them; hv serves on.
#[test]
fn a_domain_that_dies_across_an_upgrade_is_restarted() {
    let Some(env) = Env::new("hvupg-crash") else {
        return;
    };
    env.ok(&["up"]);
    let st = env.status();
    let (hv_pid, drv) = (
        st["hv_pid"].as_i64().unwrap(),
        domain(&st, "drv")["pid"].as_i64().unwrap(),
    );
    for _ in 0..3 {
        let drv_now = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
        signal(hv_pid, "HUP");
        kill9(drv_now);
        let r = upgrade(&env, None);
        assert_eq!(r["ok"], true, "{r}");
        let back = testutil::poll_until(Duration::from_secs(20), || {
            let st = env.status();
            let back = domain(&st, "drv")["pid"]
                .as_i64()
                .is_some_and(|p| p != drv_now);
            back && vif(&st, "guest1")["frontend_state"] == "Connected"
        });
        let log = std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default();
        assert!(
            back.is_ok(),
            "drv not restarted, or guest1 not reconnected, within 20 s: {:#}\nhv's log:\n{log}",
            env.status()
        );
    }
    let st = env.status();
    assert_eq!(st["hv_pid"].as_i64(), Some(hv_pid));
    assert_eq!(st["restarts_after_crash"], 3, "{st:#}");
    assert_ne!(domain(&st, "drv")["pid"].as_i64(), Some(drv));
    env.ping("guest1", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A new program that reads the state and then dies before it takes over
/// (a crash at start): hv's guardian, carried across the `execve`, runs
/// the old program again on its last record; every domain is kept and the
/// upgrade is reported failed.
#[test]
fn a_program_that_dies_at_start_is_rolled_back_by_the_guardian() {
    let Some(env) = Env::new("hvupg-dies") else {
        return;
    };
    env.ok(&["up"]);
    wait_until("hv's record taken", Duration::from_secs(5), || {
        env.run_dir.join("hv-record.json").exists()
    });
    let before = identity(&env);
    let real = hv_program().display().to_string();
    let dies = script(
        &env,
        "dies",
        &format!("case \"$1\" in --handover-check) exec {real} \"$@\";; esac\nkill -9 $$"),
    );
    let o = env.splitnet(&["upgrade", "--hv", &dies.display().to_string(), "--json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(r["ok"], false, "{r} {}", String::from_utf8_lossy(&o.stderr));
    let outcome = r["outcome"].as_str().unwrap_or("");
    assert!(
        outcome.contains("died before it took over") && outcome.contains("every domain kept"),
        "{r}"
    );
    let now = identity(&env);
    assert_eq!(now["domains"], before["domains"], "a domain changed");
    assert_eq!(env.status()["counters"]["ops"]["hv_recoveries"], 1);
    env.ping("guest1", "10.77.0.254", 2);
    // The next upgrade, to a program that works, is numbered after it.
    let r = upgrade(&env, None);
    assert_eq!(
        (r["ok"].clone(), r["upgrade"].clone()),
        (true.into(), "2".into()),
        "{r}"
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

/// `splitnet ARGS`, which must fail; its stderr.
fn refused(env: &Env, args: &[&str]) -> String {
    let o = env.splitnet(args);
    assert!(!o.status.success(), "splitnet {args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The cores each of hv's batch threads (`hv-batch-N`, threads of process
/// `hv`) may run on.
fn batch_thread_cores(hv: u64) -> Vec<Vec<usize>> {
    let threads = testutil::thread_cores(hv, "hv-batch-");
    threads.into_iter().map(|(_, cores)| cores).collect()
}

#[test]
fn hypercall_cpu_any_holds_across_an_upgrade_of_hv() {
    let cores = sys::allowed_cpus().unwrap();
    if cores.len() < 2 {
        eprintln!("one core only: hv's batch threads have nowhere to follow a caller to");
        return;
    }
    let Some(env) = Env::new("hvupg-hcpu") else {
        return;
    };
    // hv-copy: every frame is a grant copy through a batch hypercall.
    env.ok(&["up", "--preset", "hv-copy", "--hypercall-cpu", "any"]);
    let hv = env.status()["hv_pid"].as_u64().unwrap();
    let free = |when: &str| {
        let got = batch_thread_cores(hv);
        assert!(!got.is_empty(), "{when}: no batch thread found");
        let pinned: Vec<_> = got.iter().filter(|c| c.len() == 1).collect();
        assert!(pinned.is_empty(), "{when}: batch threads pinned: {got:?}");
    };
    for _ in 0..3 {
        env.ping("guest1", "10.77.0.254", 5);
    }
    free("before the upgrade");
    let r = upgrade(&env, None);
    assert_eq!(r["ok"], true, "{r}");
    for _ in 0..3 {
        env.ping("guest1", "10.77.0.254", 5);
    }
    free("after the upgrade");
    env.ok(&["down"]);

    // The default follows: after the same traffic a batch thread is on one core.
    env.ok(&["up", "--preset", "hv-copy"]);
    let hv = env.status()["hv_pid"].as_u64().unwrap();
    wait_until(
        "a batch thread on its caller's core",
        Duration::from_secs(10),
        || {
            env.ping("guest1", "10.77.0.254", 1);
            batch_thread_cores(hv).iter().any(|c| c.len() == 1)
        },
    );
    env.ok(&["down"]);
    assert_nothing_left();
}
