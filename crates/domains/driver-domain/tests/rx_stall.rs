//! Bad input (Xen XSA-392), with a real hv and real frontends in process:
//! a guest that stops taking frames holds the driver domain to its vif's
//! preallocated slab (frames past it are dropped as `rx_queue_full`),
//! costs the other guests nothing, and once nothing has reached it for the
//! drain timeout its queued frames are dropped and counted (`rx_stalled`).
//! When it takes frames again, new ones reach it.

mod common;

use common::*;
use driver_domain::netback::RX_DRAIN_TIMEOUT;
use serde_json::Value;
use splitnet_driver_domain as driver_domain;
use std::time::Duration;
use toolstack::topology::{Grants, TxMode};

/// More frames than the stalled guest's ring (256) and slab (1024) hold.
const FLOOD: u32 = 2000;

/// `a` sends `n` frames to `to` from `base` on, whether or not they arrive.
fn send(a: &mut Guest, to: [u8; 6], n: u32, base: u32) {
    let mut sent = 0;
    let mut ignore = Vec::new();
    wait_until("the sender to send", WAIT, || {
        while sent < n && a.nf.can_send() {
            a.nf.send(&mut a.hv, frame(to, a.mac, base + sent)).unwrap();
            sent += 1;
        }
        a.nf.flush().unwrap();
        a.nf.poll(&mut a.hv, &mut ignore).unwrap();
        if sent < n {
            Err(format!("{sent} of {n} sent"))
        } else {
            Ok(())
        }
    });
}

/// Takes what the guest's ring already holds, until a poll finds nothing.
fn take_backlog(g: &mut Guest) -> usize {
    let (mut rx, mut n) = (Vec::new(), 0);
    loop {
        g.nf.poll(&mut g.hv, &mut rx).unwrap();
        if rx.is_empty() {
            return n;
        }
        n += rx.len();
        rx.clear();
    }
}

fn drops(s: &Value, reason: &str) -> u64 {
    s["drops"][reason].as_u64().unwrap_or(0)
}

#[test]
fn a_guest_that_takes_nothing_is_bounded_then_drained_and_costs_the_others_nothing() {
    let mut w = world(&["g1", "g2", "g3"], Grants::Ngm, TxMode::Gather);
    let (hv, drv, stalled_id) = (w.hv.clone(), w.drv_id, w.ids[1]);
    let [a, stalled, c] = &mut w.guests[..] else {
        panic!("three guests");
    };
    // The bridge learns every MAC, each guest sending before anything is
    // sent to it (a frame to an unknown MAC floods the other guests, and
    // one flooded from `a` would look to `c` like a frame of its own).
    good_traffic_flows(stalled, a, 1, 0);
    good_traffic_flows(c, a, 1, 1);
    good_traffic_flows(a, c, 1, 2);
    good_traffic_flows(a, stalled, 1, 3);
    // From here `stalled` polls nothing: its posted buffers fill, then its
    // slab, then frames are dropped at its vif.
    send(a, stalled.mac, FLOOD, 1000);
    let mut s = Value::Null;
    wait_until("the stalled vif's queue to fill", WAIT, || {
        s = stats(&hv, drv, stalled_id);
        if drops(&s, "rx_queue_full") > 0 {
            Ok(())
        } else {
            Err(format!("{s}"))
        }
    });
    let queued = s["ring"]["rx_queued"].as_u64().unwrap();
    assert!(
        queued > 0 && queued <= 1024,
        "the slab bounds the queue: {s}"
    );
    // Meanwhile the others' traffic flows, every frame intact.
    good_traffic_flows(a, c, 500, 10_000);
    good_traffic_flows(c, a, 500, 20_000);
    // Nothing reaches `stalled` for the drain timeout: its queue is dropped.
    wait_until(
        "the stalled queue to be drained",
        RX_DRAIN_TIMEOUT + Duration::from_secs(5),
        || {
            s = stats(&hv, drv, stalled_id);
            if drops(&s, "rx_stalled") > 0 && s["ring"]["rx_queued"] == 0 {
                Ok(())
            } else {
                Err(format!("{s}"))
            }
        },
    );
    let stalled_n = drops(&s, "rx_stalled");
    assert!(stalled_n <= 1024, "{s}");
    // Every flood frame was delivered (into the buffers it had posted) or
    // counted, besides the few frames of the learning above.
    let accounted = stalled_n + drops(&s, "rx_queue_full") + s["rx_packets"].as_u64().unwrap();
    assert!(
        (u64::from(FLOOD)..=u64::from(FLOOD) + 3).contains(&accounted),
        "{accounted} frames accounted for, {FLOOD} sent: {s}"
    );
    assert_eq!(backend_state(&hv, drv, stalled_id), "4", "still connected");
    // It takes frames again: what its ring held, then new frames, intact.
    assert!(take_backlog(stalled) > 0);
    good_traffic_flows(a, stalled, 50, 100_000);
}
