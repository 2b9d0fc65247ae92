//! A driver domain upgraded in place (`splitnet upgrade`): the same domain,
//! in the same jail, goes on with a new program in a new process started
//! before the old one stopped; the guests run no handshake and lose
//! nothing; a program that cannot start, or will not confine itself,
//! leaves the old process serving; one upgrade at a time; hot-plugs under
//! way are not lost. Needs root; run one test at a time.

mod common;

use common::numbered::{self, DATAGRAMS};
use common::*;
use serde_json::Value;
use std::time::Duration;

/// `upgrade drv --json`'s report.
fn upgrade(env: &Env, extra: &[&str]) -> Value {
    let mut args = vec!["upgrade", "drv", "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&env.ok(&args)).expect("upgrade --json is JSON")
}

/// `splitnet ARGS`, which must fail; its stderr.
fn refused(env: &Env, args: &[&str]) -> String {
    let o = env.splitnet(args);
    assert!(!o.status.success(), "splitnet {args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What must not change across upgrades: the domain's id and credentials
/// (its jail: uid, capabilities, no_new_privs, seccomp filters), what it
/// holds in hv, and guest1's NIC; and its process, which an upgrade
/// replaces ([`pid`]).
fn identity(env: &Env) -> Value {
    let st = env.status();
    let d = domain(&st, "drv");
    let status = std::fs::read_to_string(format!("/proc/{}/status", d["pid"])).unwrap();
    let creds: Vec<&str> = status
        .lines()
        .filter(|l| {
            ["Uid:", "Gid:", "Cap", "NoNewPrivs:", "Seccomp"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .collect();
    serde_json::json!({
        "id": d["id"], "credentials": creds,
        "grant_maps": d["grant_maps"], "event_channels": d["event_channels"],
        "vif": vif(&st, "guest1")["backend"], "ifindex": if_stat("guest1", "eth0", "../ifindex"),
    })
}

/// The driver domain's process now.
fn pid(env: &Env) -> i64 {
    domain(&env.status(), "drv")["pid"]
        .as_i64()
        .expect("drv has a pid")
}

/// Whether process `pid` still exists.
fn alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits until an upgrade under way asked domain `drv` (its status) to
/// hand over: its standby started and said it was ready by then.
fn wait_asked(env: &Env, drv: &Value) {
    let control = format!("/local/domain/{}/control", drv["id"]);
    let asked = || {
        // Absent (an error) until hv writes it.
        let o = env.splitnet(&["store-ls", &control]);
        String::from_utf8_lossy(&o.stdout).contains("control/upgrade = ")
    };
    wait_until(
        "the upgrade to ask the domain",
        Duration::from_secs(15),
        asked,
    );
}

/// The `splitnet-domain` program hv runs: the one beside `splitnet`.
fn domain_program() -> String {
    std::path::Path::new(env!("CARGO_BIN_EXE_splitnet"))
        .with_file_name("splitnet-domain")
        .display()
        .to_string()
}

/// guest1's vif's TX count as its backend last published it.
fn tx_packets(env: &Env) -> u64 {
    vif(&env.status(), "guest1")["counters"]["tx_packets"]
        .as_u64()
        .unwrap_or(0)
}

/// Right after an upgrade, while guest1 sends: the new program's first
/// count goes on from the one the old program wrote at hand-over.
fn counters_go_on(env: &Env) {
    let handed = tx_packets(env);
    let next = wait_until(
        "the new program's counters",
        Duration::from_secs(10),
        || {
            let n = tx_packets(env);
            (n != handed).then_some(n)
        },
    );
    assert!(
        next > handed,
        "guest1's TX count went from {handed} to {next}"
    );
}

/// A program that says it is ready as a standby (on the socket it
/// inherits) without entering any jail.
fn unjailed_program(env: &Env) -> std::path::PathBuf {
    let path = env.run_dir.join("unjailed-domain");
    std::fs::create_dir_all(&env.run_dir).unwrap();
    std::fs::write(
        &path,
        "#!/bin/bash\nprintf ready >&\"$SPLITNET_HV_FD\"\nexec sleep 30\n",
    )
    .unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode).unwrap();
    path
}

#[test]
fn an_upgraded_driver_domain_keeps_its_id_its_jail_its_vifs_and_every_datagram() {
    let Some(env) = Env::new("upg-keep") else {
        return;
    };
    env.ok(&["up"]);
    env.ping("guest1", "10.77.0.254", 1);
    let held = env.settled();
    let before = identity(&env);
    let (_srv, mut client) = env.stream_to_wire("guest1", 6);
    let flows = numbered::Flows::start();
    let mut dropped = 0;
    for k in 1..=5 {
        wait_until("the next fifth sent", Duration::from_secs(10), || {
            flows.sent() > k * DATAGRAMS / 6
        });
        let old = pid(&env);
        let r = upgrade(&env, &[]);
        assert_eq!(r["domain"], "drv", "{r}");
        // A new process runs the domain; the old one was ended.
        assert_ne!(pid(&env), old, "{r}");
        wait_until("the old process to end", Duration::from_secs(5), || {
            !alive(old)
        });
        dropped += r["dropped_frames"].as_u64().unwrap();
        if k == 1 {
            counters_go_on(&env);
        }
        // The guests ran no handshake: both ends stayed Connected.
        let st = env.status();
        assert_eq!(vif(&st, "guest1")["frontend_state"], "Connected", "{st:#}");
    }
    for (what, missing) in flows.missing() {
        // Frames from outside waited in hv's socket, the guest's in its TX
        // ring; only frames for a guest that had no buffer for them are
        // dropped, and each is reported.
        let may_lose = if what.ends_with("→ guest1") {
            dropped
        } else {
            0
        };
        assert!(
            missing.len() as u64 <= may_lose,
            "{what}: {} of {DATAGRAMS} datagrams lost across five upgrades that reported {dropped} dropped: {missing:?}",
            missing.len()
        );
    }
    assert!(
        client.wait_exit(Duration::from_secs(30)),
        "the iperf3 client did not finish"
    );
    let code = client.0.wait().unwrap();
    assert!(code.success(), "iperf3 failed across the upgrades: {code}");
    assert_eq!(
        identity(&env),
        before,
        "the domain changed under its upgrades"
    );
    let st = env.status();
    assert_eq!(st["restarts_after_crash"], 0, "{st:#}");
    let log = std::fs::read_to_string(env.run_dir.join("drv.log")).unwrap();
    assert_eq!(log.matches("resumed in place").count(), 10, "{log}");
    assert_eq!(log.matches("handed every vif over").count(), 5, "{log}");
    // Five questions and answers left nothing in the store.
    env.settled_as(&held).assert_holds_as(&held);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn an_upgrade_that_cannot_start_leaves_the_old_process_serving() {
    let Some(env) = Env::new("upg-fail") else {
        return;
    };
    env.ok(&["up"]);
    let before = identity(&env);
    let before_pid = pid(&env);
    // Refused before the domain is asked.
    let e = refused(&env, &["upgrade", "guest1"]);
    assert!(e.contains("guest1 is not a driver domain"), "{e}");
    let e = refused(
        &env,
        &["upgrade", "drv", "--exe", "/nonexistent/splitnet-domain"],
    );
    assert!(e.contains("No such file"), "{e}");
    // A program that dies at start never gets the domain: the old
    // process serves on, untouched.
    let e = refused(&env, &["upgrade", "drv", "--exe", "/bin/false"]);
    assert!(
        e.contains("/bin/false exited with status 1 before it was ready")
            && e.contains("the old program serves on"),
        "{e}"
    );
    assert_eq!(
        pid(&env),
        before_pid,
        "a refused upgrade replaced the process"
    );
    // Nor does one that says it is ready without confining itself.
    let unjailed = unjailed_program(&env);
    let e = refused(
        &env,
        &["upgrade", "drv", "--exe", unjailed.to_str().unwrap()],
    );
    assert!(
        e.contains("without entering its jail") && e.contains("the old program serves on"),
        "{e}"
    );
    assert_eq!(
        pid(&env),
        before_pid,
        "a refused upgrade replaced the process"
    );
    assert_eq!(
        identity(&env),
        before,
        "a refused upgrade changed the domain"
    );
    let st = env.status();
    assert_eq!(vif(&st, "guest1")["frontend_state"], "Connected", "{st:#}");
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("guest2", "10.77.0.1", 3);
    // The program it runs is still the one it ran before.
    let r = upgrade(&env, &[]);
    assert_eq!(r["program"], domain_program(), "{r}");
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_second_upgrade_while_one_runs_is_refused() {
    let Some(env) = Env::new("upg-two") else {
        return;
    };
    env.ok(&["up"]);
    let drv = domain(&env.status(), "drv").clone();
    let pid = drv["pid"].as_i64().unwrap();
    // Stopped, the domain cannot answer: the first upgrade waits.
    signal(pid, "STOP");
    let mut first = env.spawn(&["upgrade", "drv"]);
    wait_asked(&env, &drv);
    let second = refused(&env, &["upgrade", "drv"]);
    assert!(second.contains("another upgrade is under way"), "{second}");
    signal(pid, "CONT");
    assert!(
        first.wait_exit(Duration::from_secs(15)),
        "the first upgrade never ended"
    );
    assert!(
        first.0.wait().unwrap().success(),
        "the first upgrade failed"
    );
    // A new process took the domain over once the old one handed over.
    assert_ne!(domain(&env.status(), "drv")["pid"].as_i64(), Some(pid));
    env.ping("guest1", "10.77.0.254", 3);
    env.ok(&["down"]);
}

/// The old process killed while the upgrade waits for it to hand over: the
/// upgrade fails naming that, the standby is ended, and the domain is
/// taken over in place on the program it ran, its guests still Connected.
#[test]
fn an_old_process_that_dies_before_handing_over_is_a_crash() {
    let Some(env) = Env::new("upg-died") else {
        return;
    };
    env.ok(&["up"]);
    let drv = domain(&env.status(), "drv").clone();
    let old = pid(&env);
    signal(old, "STOP");
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .args(["upgrade", "drv"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_asked(&env, &drv);
    signal(old, "KILL");
    let out = first.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the upgrade succeeded: {e}");
    assert!(e.contains("died during its hand-over"), "{e}");
    wait_until("drv taken over", Duration::from_secs(10), || {
        let st = env.status();
        let d = domain(&st, "drv");
        d["id"] == drv["id"]
            && d["pid"].as_i64().is_some_and(|p| p != old)
            && vif(&st, "guest1")["frontend_state"] == "Connected"
    });
    // No standby is left running beside the domain's process.
    let log = std::fs::read_to_string(env.run_dir.join("drv.log")).unwrap();
    assert!(
        !log.contains("after the program before handed over"),
        "{log}"
    );
    env.ping("guest1", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn an_upgrade_during_hot_plugging_loses_no_attach() {
    let Some(env) = Env::new("upg-plug") else {
        return;
    };
    env.ok(&["up"]);
    let plugs = std::thread::scope(|s| {
        let plugging = s.spawn(|| {
            for _ in 0..6 {
                // "guest2: vif H connected as ethH"
                let out = env.ok(&["network-attach", "guest2"]);
                let handle = out.split_whitespace().nth(2).expect("a handle").to_string();
                env.ok(&["network-detach", "guest2", &handle]);
            }
        });
        let mut n = 0;
        while !plugging.is_finished() {
            upgrade(&env, &[]);
            n += 1;
        }
        plugging.join().expect("an attach or detach failed");
        n
    });
    assert!(plugs > 0, "no upgrade ran during the hot-plugs");
    let st = env.status();
    assert_eq!(
        st["vifs"].as_array().unwrap().len(),
        2,
        "a hot-plugged vif was left behind: {st:#}"
    );
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A `nic = "virtio"` guest's vhost-user connection closes with the old
/// program and reconnects to the new one, as after a crash; its TCP
/// stream carries on over the same TAP.
#[test]
fn a_virtio_guest_reconnects_across_an_upgrade() {
    let Some(env) = Env::new("upg-virtio") else {
        return;
    };
    env.up_emulated("virtio", "nic = \"virtio\"");
    let nic = |ready: &dyn Fn(&Value) -> bool| {
        let mut v = Value::Null;
        wait_until("guest1's virtio status", Duration::from_secs(10), || {
            v = domain(&env.status(), "guest1")["virtio_nic"].clone();
            ready(&v)
        });
        v
    };
    nic(&|v| v["connected"] == true);
    let (_srv, mut client) = env.stream_to_wire("guest1", 6);
    upgrade(&env, &[]);
    let v = nic(&|v| v["connects"] == 2 && v["connected"] == true);
    assert_eq!(v["disconnects"], 1, "{v}");
    assert!(
        client.wait_exit(Duration::from_secs(40)),
        "the iperf3 client did not finish"
    );
    let code = client.0.wait().unwrap();
    assert!(code.success(), "iperf3 failed across the upgrade: {code}");
    env.ping("guest2", "10.77.0.1", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A vif with a dedicated receive queue (Ram thesis ch. 3) gets its queue
/// again from the new program, and frames land in it.
#[test]
fn a_dedicated_queue_is_made_again_by_the_new_program() {
    let Some(env) = Env::new("upg-mq") else {
        return;
    };
    let mut t =
        "name = \"mq\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n"
            .to_string();
    for i in 1..=2 {
        t += &format!(
            "[[domain]]\nname = \"guest{i}\"\nkind = \"guest\"\naddress = \"10.77.0.{i}/24\"\nmq = true\n"
        );
    }
    t += "[wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n";
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("mq.toml");
    std::fs::write(&path, t).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    let queue = || vif(&env.status(), "guest1")["queue"].clone();
    let limit = Duration::from_secs(10);
    wait_until("guest1's queue dedicated", limit, || {
        queue()["state"] == "dedicated"
    });
    let name = queue()["name"].as_str().unwrap().to_string();
    let index = || if_stat("drv", &name, "../ifindex");
    let old = index();
    upgrade(&env, &[]);
    // The queue's macvlan is made again (a new device, its counters from
    // zero) and the frames to guest1 land in it.
    wait_until("guest1's queue made again", limit, || {
        queue()["state"] == "dedicated" && index() != old && index() != 0
    });
    env.ping("wire", "10.77.0.1", 3);
    assert!(
        if_stat("drv", &name, "rx_packets") >= 3,
        "no frame landed in {name}"
    );
    // A program that cannot start: the old process never stopped, and
    // its queue is the one it had.
    let old = index();
    let e = refused(&env, &["upgrade", "drv", "--exe", "/bin/false"]);
    assert!(e.contains("the old program serves on"), "{e}");
    assert_eq!(queue()["state"], "dedicated");
    assert_eq!(index(), old, "the queue was made again");
    env.ping("wire", "10.77.0.1", 3);
    assert!(
        if_stat("drv", &name, "rx_packets") >= 3,
        "no frame landed in {name}"
    );
    assert_eq!(macvlans().len(), 2, "{:?}", macvlans());
    env.ok(&["down"]);
}
