//! Multicast control end to end (`feature-multicast-control`): the driver
//! domain forwards multicast only to the vifs whose guest joined the group,
//! so netfront must tell it of a group as soon as the guest's kernel joins
//! it. Needs root and ping.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// The groups guest1's vif filters on, once filtering is on (None before).
fn filtered_groups(env: &Env) -> Option<u64> {
    vif(&env.status(), "guest1")["counters"]["mcast_groups"].as_u64()
}

/// The link-layer groups guest1's kernel has joined on eth0.
fn kernel_groups(env: &Env) -> Vec<String> {
    env.ok(&["exec", "guest1", "--", "ip", "maddr", "show", "dev", "eth0"])
        .lines()
        .filter_map(|l| l.trim().strip_prefix("link"))
        .map(|a| a.trim().to_string())
        .collect()
}

/// Waits until guest1's filter is on and holds as many groups as its
/// kernel joined; returns those groups.
fn wait_filter_matches(env: &Env, what: &str) -> Vec<String> {
    wait_until(what, Duration::from_secs(10), || {
        let (filtered, joined) = (filtered_groups(env), kernel_groups(env));
        if filtered == Some(joined.len() as u64) {
            Ok(joined)
        } else {
            Err(format!(
                "the filter holds {filtered:?} groups, the kernel joined {joined:?}"
            ))
        }
    })
}

/// An address added while filtering is on answers the first ping to it:
/// its solicited-node group (RFC 4291 2.7.1) reaches the filter before a
/// peer's neighbour solicitation does, so neighbour discovery needs no
/// retry (a retry would come a second later, RFC 4861's RetransTimer).
#[test]
fn a_new_ipv6_address_answers_its_first_ping() {
    let Some(env) = Env::new("mcast-join") else {
        return;
    };
    env.ok(&["up"]);
    // Filtering is on, so a frame for a group guest1 did not join is dropped.
    let before = wait_filter_matches(&env, "filtering never came on");
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "-6",
        "addr",
        "add",
        "fd77::99/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    // The reply must come well before a neighbour-discovery retry would.
    let t = Instant::now();
    env.ok(&[
        "exec", "guest2", "--", "ping", "-6", "-c", "1", "-W", "0.5", "fd77::99",
    ]);
    eprintln!("first ping6 to the new address: {:?}", t.elapsed());
    // The new solicited-node group is the one new group, and the filter
    // (still on) has it too.
    let after = wait_filter_matches(&env, "the new group never reached the filter");
    assert!(after.iter().any(|g| g == "33:33:ff:00:00:99"), "{after:?}");
    assert_eq!(after.len(), before.len() + 1, "{before:?} -> {after:?}");
    env.ok(&["down"]);
    assert_nothing_left();
}
