//! Scale end to end: one driver domain serves 64 guests and every one
//! reaches the wire; a vif beyond a domain's event-channel quota fails
//! `network-attach` at once, naming the quota, the domain and the fix, and
//! a topology that cannot hold its own vifs is refused before anything
//! starts. Needs root and ping; run one test at a time.

mod common;

use common::*;
use std::process::{Command, Stdio};

const WIRE: &str = "10.77.255.254";

/// A topology of one driver domain `drv` (with memory for `room` vifs, and
/// `drv_extra`) and guests g1..=gn on 10.77.0.0/16, with the wire host at
/// [`WIRE`].
fn topology(n: u32, room: u32, drv_extra: &str) -> String {
    let mut t = format!(
        "name = \"scale{n}\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = {}\n{drv_extra}",
        16 + 513 * room
    );
    for i in 1..=n {
        t += &format!(
            "[[domain]]\nname = \"g{i}\"\nkind = \"guest\"\naddress = \"10.77.{}.{}/16\"\n",
            i / 256,
            i % 256
        );
    }
    t + &format!("[wire]\ndriver = \"drv\"\naddress = \"{WIRE}/16\"\n")
}

fn write_topology(env: &Env, text: &str) -> String {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("t.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn sixty_four_guests_come_up_and_every_one_pings_the_wire() {
    let Some(env) = Env::new("scale64") else {
        return;
    };
    let path = write_topology(&env, &topology(64, 64, ""));
    let out = env.ok(&["up", "--config", &path]);
    assert!(
        out.contains("65 domains") && out.contains("64 vifs connected"),
        "{out}"
    );
    // Every guest pings at once; each waits for its own answer.
    let pings: Vec<(String, std::process::Child)> = (1..=64)
        .map(|i| {
            let g = format!("g{i}");
            let child = Command::new("ip")
                .args(["netns", "exec", &toolstack::host::netns_name(&g)])
                .args(["ping", "-c", "1", "-W", "10", WIRE])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("ip netns exec ping");
            (g, child)
        })
        .collect();
    let failed: Vec<String> = pings
        .into_iter()
        .filter_map(|(g, c)| {
            let o = c.wait_with_output().unwrap();
            (!o.status.success()).then(|| format!("{g}: {}", String::from_utf8_lossy(&o.stdout)))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "guests that did not reach the wire:\n{failed:?}"
    );
    let st = env.status();
    let drv = domain(&st, "drv");
    assert_eq!(st["vifs"].as_array().unwrap().len(), 64);
    assert_eq!(drv["connected"], true);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_vif_over_the_event_channel_quota_fails_at_once_with_the_fix() {
    let Some(env) = Env::new("quota") else {
        return;
    };
    // Two vifs take drv's 4 channels; a topology asking for fewer is
    // refused before anything starts.
    let low = write_topology(&env, &topology(2, 3, "max_event_channels = 3\n"));
    let o = env.splitnet(&["up", "--config", &low]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("domain \"drv\" has 2 vifs, which take 4 event channels, but max_event_channels = 3: raise it to at least 4"),
        "{err}"
    );
    assert!(netns().is_empty(), "a refused topology started nothing");

    // Memory for a third vif, but not the 2 channels it needs.
    let path = write_topology(&env, &topology(2, 3, "max_event_channels = 4\n"));
    env.ok(&["up", "--config", &path]);
    let o = env.splitnet(&["network-attach", "g1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "attach over the quota succeeded");
    for needle in [
        "quota",
        "vif 1 of g1",
        "drv",
        "holds its quota of 4 event channels",
        "raise max_event_channels of drv",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from: {err}");
    }
    // Given up once, not retried: one quota refusal in drv's log.
    let log = std::fs::read_to_string(env.run_dir.join("drv.log")).unwrap();
    assert_eq!(log.matches("holds its quota").count(), 1, "{log}");
    // The vif is gone; the others carry on.
    let st = env.status();
    assert_eq!(st["vifs"].as_array().unwrap().len(), 2);
    env.ok(&["exec", "g1", "--", "ping", "-c", "1", "-W", "5", WIRE]);
    env.ok(&["down"]);
    assert_nothing_left();
}
