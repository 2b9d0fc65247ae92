//! The driver loop's costs per wake-up, with a real hv and real frontends
//! in process: a turn that only moves packets allocates nothing, and vifs
//! that are idle cost nothing (issue: one event manager for the loops).

mod common;

use common::*;
use driver_domain::driver::Driver;
use splitnet_driver_domain as driver_domain;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use toolstack::topology::{CreditRate, Grants, TxMode, VifConfig};

/// Turns measured after the warm-up.
const TURNS: usize = 10_000;
/// Turns first run unmeasured, so buffers reach their working size.
const WARM_UP: usize = 500;

#[derive(Debug, Default)]
struct Tally {
    data_turns: usize,
    with_work: usize,
    allocating: Vec<(usize, u64)>,
}

fn drive(mut drv: hv::HvClient, done: Arc<AtomicBool>, out: mpsc::Sender<Tally>) {
    let mut d = Driver::new(&mut drv).expect("driver domain starts");
    for _ in 0..WARM_UP {
        d.turn(&mut drv).expect("turn");
    }
    let mut t = Tally::default();
    for i in 0..TURNS {
        let mut turn = None;
        let info = allocation_counter::measure(|| turn = Some(d.turn(&mut drv)));
        let turn = turn.expect("measured").expect("turn");
        if turn.housekeeping {
            continue;
        }
        t.data_turns += 1;
        t.with_work += usize::from(turn.ready > 0);
        if info.count_total > 0 && t.allocating.len() < 10 {
            t.allocating.push((i, info.count_total));
        }
    }
    done.store(true, Ordering::SeqCst);
    let _ = out.send(t);
    // Keep serving until the guests stop, then let hv reap us.
    for _ in 0..200 {
        if d.turn(&mut drv).is_err() {
            break;
        }
    }
}

#[test]
fn ten_thousand_wake_ups_of_pure_forwarding_allocate_nothing() {
    measure(|_, _| {});
}

#[test]
fn the_vif_options_allocate_nothing_per_packet_either() {
    // Anti-spoofing, a credit limit well above what the test sends, jumbo
    // frames and multicast control, on the sending and receiving vifs.
    measure(|i, v| {
        if i < 2 {
            v.opts.ip = vec!["10.0.0.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
            v.opts.rate = Some(CreditRate {
                bytes: 1 << 30,
                usec: 1000,
            });
            v.opts.mtu = Some(9000);
        }
    });
}

fn measure(configure: impl Fn(usize, &mut VifConfig)) {
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = done.clone();
    let mut w = world_configured(
        &["g1", "g2", "idle1", "idle2"],
        Grants::Ngm,
        TxMode::Gather,
        |_| true,
        move |drv| drive(drv, flag, tx),
        configure,
    );
    let (a, rest) = w.guests.split_first_mut().expect("guests");
    let b = &mut rest[0];
    // g2 speaks first, so the bridge learns its MAC and g1's frames are
    // not flooded to the idle guests.
    good_traffic_flows(b, a, 1, 0);
    let mut base = 0;
    while !done.load(Ordering::SeqCst) {
        good_traffic_flows(a, b, 32, base);
        base += 32;
    }
    let t = rx.recv().expect("the driver reports");
    assert!(
        t.allocating.is_empty(),
        "turns that only moved packets allocated (turn, allocations): {:?}",
        t.allocating
    );
    assert!(
        t.data_turns >= TURNS * 9 / 10,
        "only {} of {TURNS} turns were pure data turns",
        t.data_turns
    );
    assert!(
        t.with_work >= t.data_turns / 2,
        "traffic woke only {} of {} turns",
        t.with_work,
        t.data_turns
    );
    assert!(base >= 32, "frames flowed while the driver was measured");
}
