//! A hostile frontend against the real netback, in process: a real hv, the
//! real driver-domain loop in a thread, two well-behaved frontends that keep
//! exchanging frames, and hostile frontends that write garbage into their
//! rings. netback must refuse and count each bad request, disconnect the
//! offender past a threshold (or at once for a ring overflow), and never stop
//! the good guests' traffic.

mod common;
use common::{
    backend_state, good_traffic_flows, push, stats, store_read, wait_for, world, world_connecting,
    Guest, World,
};

use abi::netif::{Extra, ExtraFlags, ExtraInfo, GsoType, TxFlags, TxRequest};
use abi::SharedMemory;
use hv::{DomId, Hypervisor};
use splitnet_net as net;
use std::sync::Arc;
use toolstack::topology::{Grants, TxMode};

#[test]
fn a_hostile_frontend_is_refused_counted_and_disconnected_while_others_flow() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world(
        &["good1", "good2", "evil1", "evil2"],
        Grants::HvCopy,
        TxMode::Copy,
    );
    let mut evil2 = guests.pop().unwrap();
    let mut evil1 = guests.pop().unwrap();
    let mut good2 = guests.pop().unwrap();
    let mut good1 = guests.pop().unwrap();
    let (e1, e2) = (ids[2], ids[3]);

    good_traffic_flows(&mut good1, &mut good2, 100, 0);
    good_traffic_flows(&mut good2, &mut good1, 100, 1000);

    // evil1: one of each malformed request, then a flood of them.
    let attacks = malformed_requests(&mut evil1, good2.mac, drv_id);
    refuse_each(&hv, drv_id, e1, &mut evil1, &mut good1, &mut good2, attacks);

    // A flood of bad requests crosses the threshold: evil1 is disconnected.
    flood_disconnects(&hv, drv_id, e1, &mut evil1, &mut good1, &mut good2);

    // evil2: a producer index far ahead of the consumer is fatal at once.
    good_traffic_flows(&mut good2, &mut good1, 50, 5000);
    let ring = evil2.nf.tx_ring();
    let prod = ring.memory().load_u32(0);
    ring.memory().store_u32(0, prod.wrapping_add(100_000));
    evil2.nf.tx_channel().notify().unwrap();
    wait_for("evil2's vif to be disconnected", || {
        backend_state(&hv, drv_id, e2) == "6"
    });
    assert_eq!(stats(&hv, drv_id, e2)["rejected"]["ring_overflow"], 1);

    // The good guests never noticed.
    good_traffic_flows(&mut good1, &mut good2, 100, 6000);
    good_traffic_flows(&mut good2, &mut good1, 100, 7000);
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "4");
    let g1 = stats(&hv, drv_id, ids[0]);
    assert_eq!(
        g1["rejected"],
        serde_json::json!({}),
        "good1 had nothing refused: {g1}"
    );

    hv.shutdown();
    driver.join().unwrap();
}

fn req(gref: u32, offset: u16, size: u16, id: u16) -> TxRequest {
    TxRequest {
        gref,
        offset,
        flags: TxFlags::EMPTY,
        id,
        size,
    }
}

/// One of each malformed request, each with the reason netback counts it
/// under. Some point into evil1's frame 590, which holds a frame claiming
/// to come from good2 (`good2_mac`).
fn malformed_requests(
    evil1: &mut Guest,
    good2_mac: [u8; 6],
    drv_id: DomId,
) -> Vec<(&'static str, Vec<TxRequest>)> {
    // One valid buffer, outside netfront's TX and RX buffers (frames 2..514).
    let gref_ok = evil1.hv.grants().grant_access(drv_id, 590, true).unwrap();
    // A frame that claims to come from good2: netback must not let evil1
    // take over good2's MAC in the bridge.
    let mut spoof = good2_mac.to_vec();
    spoof.extend_from_slice(&good2_mac);
    spoof.extend_from_slice(&[0x88, 0xb5, 0, 0, 0, 0]);
    spoof.resize(60, 0);
    evil1.hv.pool().write_bytes(590 * 4096, &spoof);
    let gso_extra = ExtraInfo {
        flags: ExtraFlags::EMPTY,
        extra: Extra::Gso {
            size: 1,
            gso_type: GsoType::TcpV4,
            features: 0,
        },
    };
    vec![
        ("bad_grant_ref", vec![req(99_999, 0, 100, 1)]),
        ("bad_grant_ref", vec![req(gref_ok + 1, 0, 100, 2)]),
        ("size_too_small", vec![req(gref_ok, 0, 0, 3)]),
        ("crosses_page", vec![req(gref_ok, 4000, 200, 4)]),
        ("crosses_page", vec![req(gref_ok, 0, 5000, 5)]),
        (
            "duplicate_id",
            vec![req(gref_ok, 0, 100, 6), req(gref_ok, 0, 100, 6)],
        ),
        ("spoofed_mac", vec![req(gref_ok, 0, 60, 7)]),
        (
            "bad_gso",
            vec![
                TxRequest {
                    flags: TxFlags::EXTRA_INFO,
                    ..req(gref_ok, 0, 200, 8)
                },
                gso_extra.to_tx_slot(),
            ],
        ),
    ]
}

/// evil1 sends each attack in turn: netback counts each under its reason,
/// answers every request it consumed and keeps evil1 connected, while good1
/// and good2 keep flowing.
fn refuse_each(
    hv: &Arc<Hypervisor>,
    drv_id: DomId,
    e1: DomId,
    evil1: &mut Guest,
    good1: &mut Guest,
    good2: &mut Guest,
    attacks: Vec<(&str, Vec<TxRequest>)>,
) {
    for (reason, reqs) in attacks {
        let before = stats(hv, drv_id, e1)["rejected"][reason]
            .as_u64()
            .unwrap_or(0);
        push(evil1, &reqs);
        wait_for(&format!("netback to count {reason}"), || {
            stats(hv, drv_id, e1)["rejected"][reason]
                .as_u64()
                .unwrap_or(0)
                > before
        });
        good_traffic_flows(good1, good2, 20, 2000);
    }
    // Every consumed request got exactly one response.
    let mut ignore = Vec::new();
    evil1.nf.poll(&mut evil1.hv, &mut ignore).unwrap();
    assert_eq!(
        backend_state(hv, drv_id, e1),
        "4",
        "still connected below the threshold"
    );
}

/// A flood of bad requests from evil1 crosses the threshold: evil1 is
/// disconnected, with the flood counted and the reason published.
fn flood_disconnects(
    hv: &Arc<Hypervisor>,
    drv_id: DomId,
    e1: DomId,
    evil1: &mut Guest,
    good1: &mut Guest,
    good2: &mut Guest,
) {
    for round in 0..8u16 {
        let reqs: Vec<TxRequest> = (0..16u16)
            .map(|i| req(50_000 + i as u32, 0, 64, round * 16 + i))
            .collect();
        if evil1.nf.tx_ring().free_requests() < 16 {
            break;
        }
        push(evil1, &reqs);
        good_traffic_flows(good1, good2, 10, 3000 + round as u32 * 10);
    }
    wait_for("evil1's vif to be disconnected", || {
        backend_state(hv, drv_id, e1) == "6"
    });
    let s = stats(hv, drv_id, e1);
    assert!(
        s["rejected"]["bad_grant_ref"].as_u64().unwrap_or(0) >= net::netback::FATAL_LIMIT - 5,
        "the flood was counted: {s}"
    );
    let reason = store_read(
        hv,
        &format!("/local/domain/{drv_id}/backend/vif/{e1}/0/disconnect-reason"),
    );
    assert!(reason.unwrap_or_default().contains("refused requests"));
}

#[test]
fn a_guest_that_never_connects_delays_no_other() {
    // "silent" is probed first and never runs its frontend; the others
    // connect (within world's 20 s) and exchange frames regardless.
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        ..
    } = world_connecting(
        &["silent", "good1", "good2"],
        Grants::Ngm,
        TxMode::Gather,
        |n| n != "silent",
    );
    let mut good2 = guests.pop().unwrap();
    let mut good1 = guests.pop().unwrap();
    good_traffic_flows(&mut good1, &mut good2, 50, 0);
    good_traffic_flows(&mut good2, &mut good1, 50, 100);
    // The silent vif waits in InitWait (2), without a backend connection.
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "2");
}
