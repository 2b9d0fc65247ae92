//! netback's slow path, with a real hv and real frontends in process: a
//! guest that posts too few RX buffers has its frames wait in the vif's
//! slab, and the driver's turns that queue and drain them allocate nothing
//! (issue: preallocated frame slabs instead of a queue of owned packets).

mod common;

use common::*;
use driver_domain::driver::Driver;
use serde_json::Value;
use splitnet_driver_domain as driver_domain;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use toolstack::topology::{Grants, LroAt, TxMode};

/// Frames per round: more than the receiver's RX ring can have posted.
const BURST: u32 = 600;

/// Allocating turns seen while measuring: (turn, allocations), the first 10.
type Allocating = Vec<(usize, u64)>;

fn drive(
    mut drv: hv::HvClient,
    measuring: Arc<AtomicBool>,
    out: mpsc::Sender<(usize, Allocating)>,
) {
    let mut d = Driver::new(&mut drv).expect("driver domain starts");
    let (mut turns, mut allocating) = (0, Vec::new());
    loop {
        let on = measuring.load(Ordering::SeqCst);
        let mut turn = None;
        let info = allocation_counter::measure(|| turn = Some(d.turn(&mut drv)));
        let Ok(turn) = turn.expect("measured") else {
            break;
        };
        if on && !turn.housekeeping {
            turns += 1;
            if info.count_total > 0 && allocating.len() < 10 {
                allocating.push((turns, info.count_total));
            }
        }
        if on && !measuring.load(Ordering::SeqCst) {
            break;
        }
    }
    let _ = out.send((turns, allocating));
    // On until told to stop (measuring set again): the vif's stats are
    // published by the driver's housekeeping.
    while !measuring.load(Ordering::SeqCst) {
        if d.turn(&mut drv).is_err() {
            break;
        }
    }
}

/// `a` sends [`BURST`] frames while `b` takes none, then `b` takes them
/// all, intact: more than it had buffers for, so the rest waited in the slab.
fn burst_through_the_slab(a: &mut Guest, b: &mut Guest, base: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0;
    let mut ignore = Vec::new();
    while sent < BURST || tx_busy(a) {
        assert!(Instant::now() < deadline, "the sender stalled at {sent}");
        while sent < BURST && a.nf.can_send() {
            a.nf.send(&mut a.hv, frame(b.mac, a.mac, base + sent))
                .unwrap();
            sent += 1;
        }
        a.nf.flush().unwrap();
        a.nf.poll(&mut a.hv, &mut ignore).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = BTreeSet::new();
    let mut rx = Vec::new();
    while got.len() < BURST as usize {
        assert!(
            Instant::now() < deadline,
            "{} of {BURST} queued frames arrived",
            got.len()
        );
        b.nf.poll(&mut b.hv, &mut rx).unwrap();
        for p in rx.drain(..) {
            if p.data.len() < 18 || p.data[6..12] != a.mac {
                continue;
            }
            let seq = u32::from_be_bytes([p.data[14], p.data[15], p.data[16], p.data[17]]);
            assert_eq!(
                p.data,
                frame(b.mac, a.mac, seq).data,
                "frame {seq} corrupted"
            );
            got.insert(seq);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got.iter().next(), Some(&base));
}

/// Whether the guest has TX requests netback has not answered yet.
fn tx_busy(g: &mut Guest) -> bool {
    let r = g.nf.tx_ring();
    r.free_requests() < r.size()
}

#[test]
fn frames_that_wait_for_buffers_allocate_nothing_per_packet() {
    slab_turns_allocate_nothing(LroAt::Off);
}

/// The same with driver-domain LRO on the receiver's vif: every frame goes
/// through the coalescer on its way to the slab (these are not TCP, so it
/// passes them on as they are).
#[test]
fn frames_through_driver_lro_allocate_nothing_per_packet() {
    slab_turns_allocate_nothing(LroAt::Driver);
}

/// Bursts from guest 0 to guest 1 (its vif with `lro`) through the slab,
/// while the driver's turns count their allocations: none.
fn slab_turns_allocate_nothing(lro: LroAt) {
    let measuring = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = measuring.clone();
    let mut w = world_configured(
        &["g1", "g2"],
        Grants::Ngm,
        TxMode::Gather,
        |_| true,
        move |drv| drive(drv, flag, tx),
        move |i, v| {
            if i == 1 {
                v.lro = lro;
            }
        },
    );
    let (a, rest) = w.guests.split_first_mut().expect("guests");
    let b = &mut rest[0];
    good_traffic_flows(b, a, 1, 0);
    // Warm up: the bridge learns, buffers reach their working size.
    burst_through_the_slab(a, b, 0);
    measuring.store(true, Ordering::SeqCst);
    for round in 1..4 {
        burst_through_the_slab(a, b, round * BURST);
    }
    measuring.store(false, Ordering::SeqCst);
    let (turns, allocating) = rx.recv().expect("the driver reports");
    assert!(turns > 0, "the driver turned while measured");
    assert!(
        allocating.is_empty(),
        "turns that queued and drained frames allocated (turn, allocations): {allocating:?}"
    );
    let mut s = Value::Null;
    wait_for("the driver publishes the vif's stats", || {
        s = stats(&w.hv, w.drv_id, w.ids[1]);
        s["rx_packets"].as_u64() >= Some(u64::from(4 * BURST))
    });
    measuring.store(true, Ordering::SeqCst);
    assert!(
        s["drops"].get("rx_queue_full").is_none(),
        "no frame was dropped: {s}"
    );
    if lro == LroAt::Driver {
        assert_eq!(s["lro"]["on"], true, "LRO ran: {s}");
    }
}
