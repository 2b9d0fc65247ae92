//! hv killed and started again by its guardian: every domain keeps its
//! process, its id and its traffic (TCP connections through a guest
//! survive, no datagram either way is lost), the hv that takes over does
//! all that hv does (a vhost-user vif's listener included), and a
//! topology its guardian cannot record says so and goes whole when hv
//! dies. Needs root; run one test at a time.

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

/// A hot-plugged vif, the store and the event channels as they were when
/// hv died are what the next hv serves: a vif attached just before the
/// kill carries traffic after it, and detaches.
#[test]
fn what_changed_before_hv_died_is_carried() {
    let Some(env) = Env::new("hvcrash-plug") else {
        return;
    };
    env.ok(&["up"]);
    let out = env.ok(&["network-attach", "guest2"]);
    let handle = out.split_whitespace().nth(2).expect("a handle").to_string();
    // The record is taken within a tenth of a second of a change.
    wait_until("hv's record taken", Duration::from_secs(5), || {
        record_names_vif(&env, "guest2", &handle)
    });
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

/// What the guardian cannot record (an emulated NIC) is said in hv's log;
/// when hv dies then, its domains go with it and `down` leaves nothing.
#[test]
fn a_topology_the_guardian_cannot_record_says_so() {
    let Some(env) = Env::new("hvcrash-hosted") else {
        return;
    };
    env.up_emulated("hvcrash-hosted", "nic = \"hosted\"");
    wait_until("hv said why", Duration::from_secs(5), || {
        let log = std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default();
        log.contains("a crash of hv would lose it")
            && log.contains("does not carry emulated NICs yet")
    });
    let pid = env.status()["hv_pid"].as_i64().unwrap();
    kill9(pid);
    wait_until("the domains gone with hv", Duration::from_secs(10), || {
        our_processes().is_empty()
    });
    env.ok(&["down"]);
    assert_nothing_left();
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
