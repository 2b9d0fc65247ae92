//! End to end: `splitnet up --placement` pins the domains' processes (the
//! Ram thesis's shared-L2 experiment, ch. 6), every thread of them, at
//! start and again after a restart; `status` shows each domain's core; a
//! core the system may not use is refused naming the domain. Needs root.

mod common;

use common::*;
use serde_json::Value;

/// Domain `name`'s process and every thread of it run on `core` only, and
/// `status --json` says so.
fn assert_pinned(st: &Value, name: &str, core: usize) {
    let d = domain(st, name);
    assert_eq!(d["cpu"].as_u64(), Some(core as u64), "{name}: {d:#}");
    let threads = testutil::thread_cores(d["pid"].as_u64().expect("a pid"), "");
    assert!(!threads.is_empty());
    assert!(
        threads.iter().all(|(_, cores)| *cores == [core]),
        "{name}'s threads run on {threads:?}, not core {core}"
    );
}

#[test]
fn placements_pin_driver_and_guests() {
    let Some(env) = Env::new("placement") else {
        return;
    };
    let cores = sys::allowed_cpus().unwrap();
    if cores.len() < 2 {
        eprintln!("SKIPPED: --placement split needs two cores");
        return;
    }
    let (first, second) = (cores[0], cores[1]);

    env.ok(&["up", "--placement", "split"]);
    let st = env.status();
    assert_pinned(&st, "drv", first);
    assert_pinned(&st, "guest1", second);
    let text = env.ok(&["status"]);
    let drv_line = text.lines().find(|l| l.starts_with("drv ")).unwrap();
    assert!(
        text.contains(" CPU ") && drv_line.split_whitespace().nth(4) == Some(&first.to_string()),
        "{text}"
    );
    // A restarted domain is a new process: hv pins it again.
    env.ok(&["restart", "drv"]);
    let again = env.status();
    assert_ne!(domain(&again, "drv")["pid"], domain(&st, "drv")["pid"]);
    assert_pinned(&again, "drv", first);
    env.ok(&["down"]);

    env.ok(&["up", "--placement", "same"]);
    let st = env.status();
    assert_pinned(&st, "drv", first);
    assert_pinned(&st, "guest1", first);
    env.ok(&["down"]);

    // A core outside the allowed set: refused before anything starts.
    let topo = env.run_dir.with_extension("toml");
    let text = toolstack::topology::DEFAULT_TOML.replacen(
        "kind = \"driver\"",
        "kind = \"driver\"\ncpu = 1023",
        1,
    );
    std::fs::write(&topo, text).unwrap();
    let o = env.splitnet(&["up", "--config", topo.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("\"drv\"") && err.contains("cpu = 1023"),
        "{err}"
    );
    let _ = std::fs::remove_file(&topo);
    assert_nothing_left();
}
