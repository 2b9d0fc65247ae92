//! hv killed and started again by its guardian: every domain keeps its
//! process, its id and its traffic (TCP connections through a guest
//! survive, no datagram either way is lost), the hv that takes over does
//! all that hv does (a vhost-user vif's listener included), and guests
//! with emulated NICs (hosted, HVM) keep theirs. Needs root; run one test
//! at a time.

mod common;

use common::numbered::{self, DATAGRAMS};
use common::*;
use serde_json::Value;
use std::time::Duration;

/// What must not change when hv dies: every domain's process and id, and
/// guest1's vif and interface.
fn identity(env: &Env) -> Value {
    let st = env.status();
    let domains: Vec<Value> = (st["domains"].as_array().unwrap().iter())
        .filter(|d| d["id"].is_u64())
        .map(|d| serde_json::json!({"name": d["name"], "pid": d["pid"], "id": d["id"]}))
        .collect();
    serde_json::json!({
        "domains": domains,
        "vif": vif(&st, "guest1")["backend"], "ifindex": if_stat("guest1", "eth0", "../ifindex"),
    })
}

/// Kills hv and waits until another answers, having adopted the domains
/// of the one killed; that one's status.
fn kill_hv(env: &Env) -> Value {
    let old = env.status()["hv_pid"].as_i64().unwrap();
    kill9(old);
    wait_until("hv started again", Duration::from_secs(10), || {
        let o = env.splitnet(&["status", "--json"]);
        let st: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let said = st["hv_recovery"].as_str().unwrap_or("");
        (said.contains(&format!("hv pid {old} died"))).then_some(st)
    })
}

#[test]
fn a_killed_hv_is_started_again_and_every_domain_keeps_its_traffic() {
    let Some(env) = Env::new("hvcrash-keep") else {
        return;
    };
    env.ok(&["up"]);
    env.ping("guest1", "10.77.0.254", 1);
    let before = identity(&env);
    let (_srv, mut client) = env.stream_to_wire("guest1", 6);
    let flows = numbered::Flows::start();
    for k in 1..=3u32 {
        wait_until("the next quarter sent", Duration::from_secs(10), || {
            flows.sent() > k * DATAGRAMS / 4
        });
        if k == 2 {
            // Right after an upgrade in place: the guardian carried across
            // it holds the old program's record, or already the new one's.
            env.ok(&["upgrade", "--hv"]);
        }
        let st = kill_hv(&env);
        assert_eq!(st["counters"]["ops"]["hv_recoveries"], k, "{st:#}");
    }
    // The domains' data path does not pass through hv: nothing was lost.
    numbered::assert_intact(flows, &mut client, "three deaths of hv");
    assert_eq!(identity(&env), before, "a death of hv changed a domain");
    // The hv that took over does all that hv does: hot-plug, restart, and
    // restarting a driver domain that dies (not its child: started by an hv
    // before it).
    env.ok(&["network-attach", "guest2", "bridge=xenbr0"]);
    env.ok(&["restart", "guest1"]);
    let drv = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    kill9(drv);
    wait_until(
        "drv restarted and guest1 reconnected",
        Duration::from_secs(20),
        || {
            let st = env.status();
            let back = domain(&st, "drv")["pid"].as_i64().is_some_and(|p| p != drv);
            back && vif(&st, "guest1")["frontend_state"] == "Connected"
        },
    );
    assert_eq!(env.status()["restarts_after_crash"], 1);
    env.ping("guest1", "10.77.0.254", 3);
    // A stopped hv is not started again.
    env.ok(&["down"]);
    assert_nothing_left();
}

/// `down` right after hv was killed stops the hv its guardian starts, and
/// leaves nothing.
#[test]
fn down_right_after_hv_was_killed_stops_the_next_hv() {
    let Some(env) = Env::new("hvcrash-down") else {
        return;
    };
    env.ok(&["up"]);
    wait_until("hv's record taken", Duration::from_secs(5), || {
        env.run_dir.join("hv-record.json").exists()
    });
    kill9(env.status()["hv_pid"].as_i64().unwrap());
    let out = env.ok(&["down"]);
    assert!(out.contains("splitnet is down"), "{out}");
    assert_nothing_left();
}

/// The holder files of the host's shared-memory THP setting
/// (toolstack's thp_shmem), by name.
fn thp_holders() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(toolstack::thp_shmem::DIR) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// A guest on superpages keeps them when hv dies: the hv its guardian
/// starts takes over the dead one's hold on the host's setting, so no other
/// hv puts it back under the pools, and `down` puts it back at the end.
#[test]
fn a_killed_hvs_hold_on_huge_pages_passes_to_the_next() {
    let Some(env) = Env::new("hvcrash-huge") else {
        return;
    };
    if sys::huge::advise_thp_shmem_word().is_none() || !thp_holders().is_empty() {
        eprintln!("skipped: the host's shmem_enabled is not the default, or an hv holds it (or left a holder file in /run/splitnet/thp-shmem)");
        return;
    }
    let before = shmem_enabled();
    let topo = toolstack::topology::DEFAULT_TOML.replace(
        "address = \"10.77.0.1/24\"",
        "address = \"10.77.0.1/24\"\nhugepages = true",
    );
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("huge.toml");
    std::fs::write(&path, topo).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    let old = env.status()["hv_pid"].as_i64().unwrap();
    assert!(shmem_enabled().contains("[advise]"));
    let holders = thp_holders();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert!(
        holders[0].starts_with(&format!("{old}-")),
        "{holders:?}, hv {old}"
    );
    wait_until("hv's record taken", Duration::from_secs(5), || {
        env.run_dir.join("hv-record.json").exists()
    });
    let st = kill_hv(&env);
    let new = st["hv_pid"].as_i64().unwrap();
    let holders = thp_holders();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert!(
        holders[0].starts_with(&format!("{new}-")),
        "{holders:?}, hv {new}"
    );
    assert!(shmem_enabled().contains("[advise]"));
    env.ping("guest1", "10.77.0.254", 2);
    env.ok(&["down"]);
    assert_eq!(shmem_enabled(), before);
    assert!(thp_holders().is_empty(), "{:?}", thp_holders());
    assert_nothing_left();
}

/// A hot-plugged vif, the store and the event channels as they were when
/// hv died are what the next hv serves: a vif attached right before the
/// kill (its record taken before `network-attach` returned) carries
/// traffic after it, and detaches.
#[test]
fn what_changed_before_hv_died_is_carried() {
    let Some(env) = Env::new("hvcrash-plug") else {
        return;
    };
    env.ok(&["up"]);
    let out = env.ok(&["network-attach", "guest2"]);
    let handle = out.split_whitespace().nth(2).expect("a handle").to_string();
    // A change the toolstack asked for is recorded before its answer:
    // hv killed the moment it answered loses nothing of it.
    assert!(record_names_vif(&env, "guest2", &handle));
    kill_hv(&env);
    let st = env.status();
    let vifs = st["vifs"].as_array().unwrap();
    assert_eq!(vifs.len(), 3, "{st:#}");
    env.ping("guest2", "10.77.0.254", 2);
    env.ok(&["network-detach", "guest2", &handle]);
    assert_eq!(env.status()["vifs"].as_array().unwrap().len(), 2);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// How many steps of the apply under way hv's last record for its
/// guardian says began (0: none under way).
fn apply_steps_begun(env: &Env) -> u64 {
    let text = std::fs::read_to_string(env.run_dir.join("hv-record.json")).unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    v["image"]["sup"]["apply_progress"]["begun"]
        .as_u64()
        .unwrap_or(0)
}

fn domain_names(env: &Env) -> Vec<Value> {
    let st = env.status();
    let doms = st["domains"].as_array().unwrap().iter();
    doms.map(|d| d["name"].clone()).collect()
}

/// An apply hv dies in is undone by the hv its guardian starts: the
/// guests it added go, guest1's stream and process carry on, the topology
/// is the one before it, `status` says what happened, and the same file
/// applied again adds them all. hv is killed while the step adding guest4
/// waits for its vif's hotplug script, which holds until the test lets
/// it go: the apply is under way when hv dies, however fast the rest is.
#[test]
fn an_apply_hv_died_in_is_undone_by_the_next_hv() {
    let Some(env) = Env::new("hvcrash-apply") else {
        return;
    };
    let (held, release) = (env.run_dir.join("held"), env.run_dir.join("release"));
    let scripts = holding_script(&env, &held, &release);
    let up = std::process::Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .arg("up")
        .env("SPLITNET_SCRIPT_DIR", &scripts)
        .env("SPLITNET_HOTPLUG_TIMEOUT_MS", "60000")
        .output()
        .unwrap();
    assert!(up.status.success(), "{up:?}");
    let (before, topology) = (domain_names(&env), env.status()["topology"].clone());
    let guest1 = domain(&env.status(), "guest1")["pid"].clone();
    let added: String = (3..=5)
        .map(|k| {
            let vif = if k == 4 { "vif = [\"script=vif-hold\"]\n" } else { "" };
            format!("\n[[domain]]\nname = \"guest{k}\"\nkind = \"guest\"\naddress = \"10.77.0.{k}/24\"\n{vif}")
        })
        .collect();
    let grown = toolstack::topology::DEFAULT_TOML.replacen("name = \"", "name = \"grown-", 1);
    let file = env.run_dir.join("grown.toml");
    std::fs::write(&file, format!("{grown}{added}")).unwrap();
    let file = file.display().to_string();
    let (_srv, mut client) = env.stream_to_wire("guest1", 8);
    let mut apply = env.spawn(&["apply", "--config", &file]);
    wait_until(
        "guest4's vif script running",
        Duration::from_secs(30),
        || held.exists(),
    );
    // The record hv's guardian holds was taken as that step began.
    assert!(apply_steps_begun(&env) >= 1);
    let st = kill_hv(&env);
    std::fs::write(&release, "").unwrap();
    assert!(apply.wait_exit(Duration::from_secs(10)));
    assert!(
        !apply.0.wait().unwrap().success(),
        "the apply hv died in succeeded"
    );
    let said = wait_until("the apply undone", Duration::from_secs(60), || {
        env.status()["apply_interrupted"].as_str().map(String::from)
    });
    assert!(
        said.contains("steps begun: each was undone"),
        "{said}\n{st:#}"
    );
    assert_eq!(domain_names(&env), before, "{said}");
    assert_eq!(env.status()["topology"], topology);
    let left: Vec<String> = netns()
        .into_iter()
        .filter(|n| n.contains("guest3") || n.contains("guest4") || n.contains("guest5"))
        .collect();
    assert!(
        left.is_empty(),
        "namespaces of guests the apply added are left: {left:?}"
    );
    assert_eq!(domain(&env.status(), "guest1")["pid"], guest1);
    let code = client.0.wait().unwrap();
    assert!(code.success(), "guest1's stream broke: {code}");
    // Applied again, the same file adds every guest it names.
    env.ok(&["apply", "--config", &file]);
    env.ping("guest5", "10.77.0.254", 2);
    env.ping("guest4", "10.77.0.254", 2);
    assert_eq!(env.status()["topology"], "grown-default");
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A directory with hotplug script `vif-hold`: on `online` it creates
/// `held`, then returns once `release` exists.
fn holding_script(
    env: &Env,
    held: &std::path::Path,
    release: &std::path::Path,
) -> std::path::PathBuf {
    let dir = env.run_dir.join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vif-hold");
    let body = format!(
        "#!/bin/sh\n[ \"$1\" = online ] || exit 0\ntouch {held}\nwhile [ ! -e {release} ]; do sleep 0.05; done\n",
        held = held.display(),
        release = release.display()
    );
    std::fs::write(&path, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Whether hv's last record for its guardian has guest `guest`'s vif
/// `handle`.
fn record_names_vif(env: &Env, guest: &str, handle: &str) -> bool {
    let text = std::fs::read_to_string(env.run_dir.join("hv-record.json")).unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    (v["image"]["sup"]["vifs"].as_array().into_iter().flatten()).any(|x| {
        x["guest"] == guest
            && x["handle"].as_u64().map(|h| h.to_string()).as_deref() == Some(handle)
    })
}

/// A guest with an emulated NIC keeps its TCP connection and its NIC
/// across an upgrade and a kill of hv: its VMApp or device model runs on,
/// watched by the hv that took over, and an HVM guest's vPIC, kept in a
/// page of hv's, is the one the next hv serves (a fresh one would have
/// every line masked, and the guest's NIC would fall silent).
fn emulated_nic_is_carried(nic: &str) {
    let name = format!("hvcrash-{nic}");
    let Some(env) = Env::new(&name) else {
        return;
    };
    env.up_emulated(&name, &format!("nic = \"{nic}\""));
    let pids = || -> Vec<Value> {
        let st = env.status();
        let doms = st["domains"].as_array().unwrap().iter();
        (doms.filter(|d| d["id"].is_u64()))
            .map(|d| serde_json::json!([d["name"], d["pid"], d["id"]]))
            .collect()
    };
    // The NIC's kind, its driver domain and its VMApp's or device model's
    // process.
    let nic_side = || {
        let n = domain(&env.status(), "guest1")["emulated_nic"].clone();
        serde_json::json!([n["kind"], n["backend"], n["vmapp_pid"], n["dm_pid"]])
    };
    let before = (pids(), nic_side());
    // Long enough to outlast an upgrade and a kill on a busy machine, where
    // an emulated NIC in a debug build may move only a few hundred
    // kilobytes a second: progress is a quarter of a megabyte.
    let _srv = env.iperf3_server_on_wire();
    let mut client = env.spawn(&[
        "exec",
        "guest1",
        "--",
        "iperf3",
        "-c",
        "10.77.0.254",
        "-t",
        "30",
    ]);
    let moving = |what: &str| {
        let at = rx_bytes("wire", "eth0");
        wait_until(what, Duration::from_secs(20), || {
            rx_bytes("wire", "eth0") > at + (1 << 18)
        });
    };
    moving("the stream to reach the wire host");
    env.ok(&["upgrade", "--hv"]);
    moving("the stream going on after the upgrade");
    // What changed within hv's last tenth of a second a crash may lose.
    wait_until("hv's record of its upgrade", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(env.run_dir.join("hv-record.json"));
        let v: Value = serde_json::from_str(&text.unwrap_or_default()).unwrap_or_default();
        v["image"]["hv"]["counters"]["ops"]["hv_upgrades"] == 1
    });
    kill_hv(&env);
    moving("the stream going on after hv's death");
    assert!(
        client.wait_exit(Duration::from_secs(60)),
        "iperf3 did not end"
    );
    let code = client.0.wait().unwrap();
    assert!(code.success(), "guest1's TCP stream broke: {code}");
    assert_eq!((pids(), nic_side()), before, "a domain or its NIC changed");
    env.ping_guest1_all_ways();
    let st = env.status();
    let ops = &st["counters"]["ops"];
    assert_eq!(
        (&ops["hv_upgrades"], &ops["hv_recoveries"]),
        (&1.into(), &1.into())
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_hosted_guests_nic_is_carried_by_an_upgrade_and_a_kill_of_hv() {
    emulated_nic_is_carried("hosted");
}

#[test]
fn an_hvm_guests_nic_is_carried_by_an_upgrade_and_a_kill_of_hv() {
    emulated_nic_is_carried("hvm");
}

/// A `nic = "virtio"` guest's vhost-user vif is carried by an upgrade and
/// by a crash of hv: its listener stays the socket the driver domain
/// serves, and a driver domain killed afterwards takes the same listener
/// from the hv that took over, and the guest reconnects to it.
#[test]
fn a_virtio_guests_vhost_user_vif_is_carried() {
    let Some(env) = Env::new("hvcrash-virtio") else {
        return;
    };
    env.up_emulated("hvcrash-virtio", "nic = \"virtio\"");
    let connects = || domain(&env.status(), "guest1")["virtio_nic"]["connects"].as_u64();
    wait_until(
        "guest1's virtio NIC connected",
        Duration::from_secs(10),
        || connects() == Some(1),
    );
    env.ping_guest1_all_ways();
    let r = env.ok(&["upgrade", "--hv", "--json"]);
    assert!(r.contains("\"ok\":true"), "{r}");
    kill_hv(&env);
    env.ping_guest1_all_ways();
    let drv = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    kill9(drv);
    wait_until(
        "guest1 reconnected to the restarted drv",
        Duration::from_secs(20),
        || connects() == Some(2),
    );
    env.ping_guest1_all_ways();
    env.ok(&["down"]);
    assert_nothing_left();
}
