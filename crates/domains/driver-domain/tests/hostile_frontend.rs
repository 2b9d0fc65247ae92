//! A hostile frontend against the real netback, in process: a real hv, the
//! real driver-domain loop in a thread, two well-behaved frontends that keep
//! exchanging frames, and hostile frontends that write garbage into their
//! rings. netback must refuse and count each bad request, disconnect the
//! offender past a threshold (or at once for a ring overflow), and never stop
//! the good guests' traffic.

mod common;
use common::{
    backend_state, good_traffic_flows, gso, more, push, stats, store_read, udp_frame, wait_until,
    world_configured, world_connecting, Guest, World, WAIT,
};

use abi::grant::layout::grant_entry_v1 as entry;
use abi::netif::{GsoType, TxFlags, TxRequest, XEN_NETIF_NR_SLOTS_MIN};
use abi::offloads::Caps;
use abi::SharedMemory;
use hv::{DomId, Hypervisor};
use splitnet_driver_domain as driver_domain;
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
    } = world_configured(
        &[
            "good1", "good2", "evil1", "evil2", "plain", "long", "v4only",
        ],
        Grants::HvCopy,
        TxMode::Copy,
        |_| true,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        // "plain" is offered no offloads (and so no scatter-gather);
        // "v4only" checksum offload and TSO for IPv4 only (no USO, which
        // needs both checksums); the rest everything.
        |i, v| {
            v.offload = match i {
                4 => Caps::NONE,
                6 => Caps {
                    csum6: false,
                    tso6: false,
                    ..Caps::TSO
                },
                _ => Caps::ALL,
            }
        },
    );
    let mut v4only = guests.pop().unwrap();
    let mut long = guests.pop().unwrap();
    let mut plain = guests.pop().unwrap();
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

    assert_eq!(
        stats(&hv, drv_id, e1)["tx_packets"],
        0,
        "nothing evil1 sent was forwarded"
    );

    // plain: offloads it was not offered, and a chain without scatter-gather.
    let attacks = unnegotiated_requests(&mut plain, drv_id);
    refuse_each(
        &hv, drv_id, ids[4], &mut plain, &mut good1, &mut good2, attacks,
    );
    assert_eq!(stats(&hv, drv_id, ids[4])["tx_packets"], 0);

    // v4only: each capability on its own, the IPv6 ones not negotiated.
    let attacks = v6_requests(&mut v4only, drv_id);
    refuse_each(
        &hv,
        drv_id,
        ids[6],
        &mut v4only,
        &mut good1,
        &mut good2,
        attacks,
    );
    assert_eq!(stats(&hv, drv_id, ids[6])["tx_packets"], 0);

    // long: a chain past what the ring protocol allows is fatal, as in Xen.
    long_chain_is_fatal(&hv, drv_id, ids[5], &mut long);
    good_traffic_flows(&mut good1, &mut good2, 20, 2500);

    // A flood of bad requests crosses the threshold: evil1 is disconnected.
    flood_disconnects(&hv, drv_id, e1, &mut evil1, &mut good1, &mut good2);

    // evil2: a producer index far ahead of the consumer is fatal at once.
    good_traffic_flows(&mut good2, &mut good1, 50, 5000);
    let ring = evil2.nf.tx_ring();
    let prod = ring.memory().load_u32(0);
    ring.memory().store_u32(0, prod.wrapping_add(100_000));
    evil2.nf.tx_channel().notify().unwrap();
    wait_until("evil2's vif to be disconnected", WAIT, || {
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
    let gref_udp = evil1.hv.grants().grant_access(drv_id, 591, true).unwrap();
    let udp = udp_frame(good2_mac, evil1.mac);
    evil1.hv.pool().write_bytes(591 * 4096, &udp);
    // evil1's own frame, neither TCP nor UDP (a local EtherType).
    let gref_raw = evil1.hv.grants().grant_access(drv_id, 592, true).unwrap();
    let mut raw = [0x02, 0, 0, 0, 0, 0x99].to_vec();
    raw.extend_from_slice(&evil1.mac);
    raw.extend_from_slice(&[0x88, 0xb5]);
    raw.resize(2000, 7);
    evil1.hv.pool().write_bytes(592 * 4096, &raw);
    vec![
        ("bad_grant_ref", vec![req(99_999, 0, 100, 1)]),
        ("bad_grant_ref", vec![req(gref_raw + 1, 0, 100, 2)]),
        ("size_mismatch", vec![req(gref_ok, 0, 0, 3)]),
        // The first size must cover the rest of the chain.
        (
            "size_mismatch",
            vec![more(req(gref_ok, 0, 100, 9)), req(gref_ok, 0, 200, 10)],
        ),
        ("crosses_page", vec![req(gref_ok, 4000, 200, 4)]),
        ("crosses_page", vec![req(gref_ok, 0, 5000, 5)]),
        (
            "duplicate_id",
            vec![req(gref_ok, 0, 100, 6), req(gref_ok, 0, 100, 6)],
        ),
        ("spoofed_mac", vec![req(gref_ok, 0, 60, 7)]),
        (
            "bad_gso_size",
            gso(req(gref_ok, 0, 200, 8), 1, GsoType::TcpV4),
        ),
        (
            "bad_gso_size",
            gso(req(gref_ok, 0, 200, 11), 0, GsoType::TcpV4),
        ),
        // Above the vif's MTU (1500), on a frame long enough for it.
        (
            "bad_gso_size",
            gso(req(gref_ok, 0, 3000, 12), 1501, GsoType::TcpV4),
        ),
        // A frame from evil1 itself, well sized, but UDP: refused on its
        // headers, before anything is forwarded.
        (
            "gso_not_tcp",
            gso(req(gref_udp, 0, 2000, 13), 1000, GsoType::TcpV4),
        ),
        // TCPv6 metadata on an IPv4 frame, and metadata naming no type.
        (
            "gso_not_tcp",
            gso(req(gref_udp, 0, 2000, 14), 1000, GsoType::TcpV6),
        ),
        (
            "gso_not_tcp",
            gso(req(gref_udp, 0, 2000, 15), 1000, GsoType::None),
        ),
        // UDP segmentation of size 0, and above the vif's MTU.
        (
            "bad_gso_size",
            gso(req(gref_ok, 0, 200, 17), 0, GsoType::UdpL4),
        ),
        (
            "bad_gso_size",
            gso(req(gref_ok, 0, 3000, 18), 1501, GsoType::UdpL4),
        ),
        // UDP segmentation metadata on a frame that is not UDP.
        (
            "gso_not_udp",
            gso(req(gref_raw, 0, 2000, 16), 1000, GsoType::UdpL4),
        ),
    ]
}

/// Requests of a frontend offered no offloads: a blank checksum, GSO
/// metadata, and a chain of two slots (it was offered no `feature-sg`).
fn unnegotiated_requests(plain: &mut Guest, drv_id: DomId) -> Vec<(&'static str, Vec<TxRequest>)> {
    let gref = plain.hv.grants().grant_access(drv_id, 590, true).unwrap();
    let f = common::frame(plain.mac, plain.mac, 1).data;
    plain.hv.pool().write_bytes(590 * 4096, &f);
    let len = f.len() as u16;
    vec![
        (
            "offload_not_negotiated_csum",
            vec![TxRequest {
                flags: TxFlags::CSUM_BLANK,
                ..req(gref, 0, len, 1)
            }],
        ),
        (
            "offload_not_negotiated_tso4",
            gso(req(gref, 0, 2000, 2), 1000, GsoType::TcpV4),
        ),
        (
            "chain_too_long",
            vec![more(req(gref, 0, len + 10, 3)), req(gref, 100, 10, 4)],
        ),
    ]
}

/// Requests of a frontend that negotiated checksum offload and TSO for
/// IPv4 only: TCPv6 GSO metadata, and a blank checksum on an IPv6 frame.
fn v6_requests(g: &mut Guest, drv_id: DomId) -> Vec<(&'static str, Vec<TxRequest>)> {
    let gref = g.hv.grants().grant_access(drv_id, 590, true).unwrap();
    let mut f = [0x02, 0, 0, 0, 0, 0x99].to_vec();
    f.extend_from_slice(&g.mac);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 16, 17, 64]);
    f.extend_from_slice(&[0xfd; 16]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 16, 0, 0]);
    f.extend_from_slice(&[7; 8]);
    g.hv.pool().write_bytes(590 * 4096, &f);
    let len = f.len() as u16;
    vec![
        (
            "offload_not_negotiated_tso6",
            gso(req(gref, 0, 2000, 1), 1000, GsoType::TcpV6),
        ),
        (
            "offload_not_negotiated_uso",
            gso(req(gref, 0, 2000, 3), 1000, GsoType::UdpL4),
        ),
        (
            "offload_not_negotiated_csum6",
            vec![TxRequest {
                flags: TxFlags::CSUM_BLANK,
                ..req(gref, 0, len, 2)
            }],
        ),
    ]
}

/// `long` chains one slot more than the ring protocol allows: refused,
/// counted, and its vif disconnected at once.
fn long_chain_is_fatal(hv: &Arc<Hypervisor>, drv_id: DomId, g: DomId, long: &mut Guest) {
    let gref = long.hv.grants().grant_access(drv_id, 590, true).unwrap();
    let n = XEN_NETIF_NR_SLOTS_MIN as u16 + 1;
    let reqs: Vec<TxRequest> = (0..n)
        .map(|i| {
            let r = req(gref, 0, if i == 0 { 64 * n } else { 64 }, i);
            if i + 1 < n {
                more(r)
            } else {
                r
            }
        })
        .collect();
    push(long, &reqs);
    wait_until("long's vif to be disconnected", WAIT, || {
        backend_state(hv, drv_id, g) == "6"
    });
    let s = stats(hv, drv_id, g);
    assert_eq!(s["rejected"]["chain_too_long"], 1, "{s}");
    assert_eq!(s["tx_packets"], 0, "{s}");
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
        wait_until(
            &format!("netback to count {reason}: {}", stats(hv, drv_id, e1)),
            WAIT,
            || {
                stats(hv, drv_id, e1)["rejected"][reason]
                    .as_u64()
                    .unwrap_or(0)
                    > before
            },
        );
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
    wait_until("evil1's vif to be disconnected", WAIT, || {
        backend_state(hv, drv_id, e1) == "6"
    });
    let s = stats(hv, drv_id, e1);
    let refused: u64 = s["rejected"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    assert!(
        refused >= driver_domain::netback::FATAL_LIMIT
            && s["rejected"]["bad_grant_ref"].as_u64().unwrap_or(0) >= 16,
        "the flood was counted (a round of 16 at least): {s}"
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

/// TX gather under hv-copy (the I/O-channel optimization without the new
/// grant mechanism): hv holds each grant while the port reads the payload
/// through netback's read-only window. A grant the guest forged, revoked
/// or gave another domain is refused by hv and counted by netback, and
/// nothing of it is forwarded; the good guests' frames arrive intact, and
/// their grants are released (netfront ends each one after its response).
#[test]
fn gather_under_hv_copy_refuses_forged_and_revoked_grants() {
    let (w, mut good1, mut good2, mut evil) = hv_copy_world(TxMode::Gather);
    let World {
        hv,
        drv_id,
        ids,
        driver,
        ..
    } = w;
    let (g1, e) = (ids[0], ids[2]);
    let s = good1_sends_300(&hv, drv_id, g1, (&mut good1, &mut good2), "hold");
    good_traffic_flows(&mut good2, &mut good1, 200, 1000);
    assert_eq!(s["grant_ops"]["hold"], s["grant_ops"]["release"], "{s}");

    // The malformed requests of the hv-copy tests, now through holds, then
    // forged and revoked grants.
    let (foreign, head) = every_attack(&hv, drv_id, (g1, e), &mut evil, &mut good1, &mut good2);
    good_traffic_flows(&mut good1, &mut good2, 50, 3000);
    // Every hold that succeeded was released, so the guest may end its grants.
    let g = stats(&hv, drv_id, g1);
    assert_eq!(g["grant_ops"]["hold"], g["grant_ops"]["release"], "{g}");
    let freed = evil.hv.grants().end_access(foreign).is_ok();
    assert!(freed, "a refused grant is left unpinned");
    let ev = stats(&hv, drv_id, e);
    assert!(
        ev["grant_ops"]["release_failed"].is_null() && g["grant_ops"]["release_failed"].is_null(),
        "hv refused no release: {ev} {g}"
    );
    assert!(
        evil.hv.grants().end_access(head).is_ok(),
        "the forged packet's good head was held and released"
    );
    assert_eq!(g["rejected"], serde_json::json!({}), "good1: {g}");
    hv.shutdown();
    driver.join().unwrap();
}

/// Xen's I/O channel under Xen's grants (`tx_mode = "header"`, Menon 2006
/// §4.1): netback reads each grant in the guest's table itself and makes
/// no hypercall for TX: good1's frames arrive intact with only table reads
/// counted, none copied out whole, and no hold, map or copy asked of hv.
/// A grant the guest forged, revoked, gave another domain or pointed past
/// its pool is refused under the reason hv gives it (the window's check
/// for the last), and nothing of it is forwarded (the entries read for it
/// still counted); nothing is pinned, so the guest may end every grant at
/// once.
#[test]
fn header_mode_reads_grants_without_hypercalls_and_refuses_forged_ones() {
    let (w, mut good1, mut good2, mut evil) = hv_copy_world(TxMode::Header);
    let World {
        hv,
        drv_id,
        ids,
        driver,
        ..
    } = w;
    let (g1, e) = (ids[0], ids[2]);
    let s = good1_sends_300(&hv, drv_id, g1, (&mut good1, &mut good2), "table_read");
    for op in ["hold", "release", "map", "unmap", "copy"] {
        assert!(s["grant_ops"][op].is_null(), "no {op} asked of hv: {s}");
    }
    assert_eq!(s["tx_copied_bytes"], 0, "no frame copied out whole: {s}");

    let (foreign, head) = every_attack(&hv, drv_id, (g1, e), &mut evil, &mut good1, &mut good2);
    good_traffic_flows(&mut good1, &mut good2, 50, 3000);
    // A grant whose entry names a frame past evil's pool (evil rewrote
    // it after granting): refused by the window's bounds check.
    let outside = evil.hv.grants().grant_access(drv_id, 594, true).unwrap();
    let at = outside as usize * entry::SIZEOF + entry::FRAME;
    evil.hv.grants().raw().write_u32(at, 0xffff_0000);
    let reads = || stats(&hv, drv_id, e)["grant_ops"]["table_read"].as_u64();
    let before = reads().unwrap_or(0);
    let attacks = vec![("grant_bad_frame", vec![req(outside, 0, 60, 44)])];
    refuse_each(&hv, drv_id, e, &mut evil, &mut good1, &mut good2, attacks);
    // The entry read for the refused packet is counted too.
    wait_until("the refused packet's table read counted", WAIT, || {
        reads().unwrap_or(0) > before
    });
    assert!(evil.hv.grants().end_access(foreign).is_ok());
    assert!(evil.hv.grants().end_access(head).is_ok(), "nothing pinned");
    assert_eq!(stats(&hv, drv_id, g1)["rejected"], serde_json::json!({}));
    hv.shutdown();
    driver.join().unwrap();
}

/// Xen 2.0 transmit (`tx_mode = "map"`): every page of a ring batch is
/// mapped in one map batch and unmapped in one unmap batch, and only the
/// headers are copied out of them. A grant the
/// guest forged, revoked or gave another domain is refused for its packet
/// alone, under the reason a single map's refusal gave; nothing of it is
/// forwarded, every map is unmapped, and a slot naming the same grant as
/// another of its packet reaches the same mapped page.
#[test]
fn map_mode_batches_maps_and_refuses_forged_and_revoked_grants() {
    let (w, mut good1, mut good2, mut evil) = hv_copy_world(TxMode::Map);
    let World {
        hv,
        drv_id,
        ids,
        driver,
        ..
    } = w;
    let (g1, e) = (ids[0], ids[2]);
    let s = good1_sends_300(&hv, drv_id, g1, (&mut good1, &mut good2), "map");
    let ops = &s["grant_ops"];
    let n = |k: &str| ops[k].as_u64().unwrap_or(0);
    assert!(n("map") >= 300, "each frame's page mapped: {s}");
    assert_eq!(n("map"), n("unmap"), "every map is unmapped: {s}");
    assert_eq!(n("map_batch"), n("unmap_batch"), "{s}");
    assert!(
        (1..=n("map")).contains(&n("map_batch")),
        "at most one map batch per page: {s}"
    );
    // The frames arrived intact, sent from the guest's pages: netback
    // copied only their headers (Xen 2.0 netback's fragments).
    assert_eq!(s["tx_copied_bytes"], 0, "no frame copied out whole: {s}");

    let (foreign, head) = every_attack(&hv, drv_id, (g1, e), &mut evil, &mut good1, &mut good2);
    let len = common::frame(good1.mac, evil.mac, 1).data.len() as u16;
    assert!(evil.hv.grants().end_access(foreign).is_ok());
    // Two slots of one packet on one grant: mapped once, both reached.
    push(
        &mut evil,
        &[more(req(head, 0, len + 100, 44)), req(head, 0, 100, 45)],
    );
    wait_until("evil's two-slot frame to be forwarded", WAIT, || {
        stats(&hv, drv_id, e)["tx_packets"].as_u64().unwrap_or(0) == 1
    });
    let s = stats(&hv, drv_id, e);
    assert_eq!(s["grant_ops"]["map"], s["grant_ops"]["unmap"], "{s}");
    assert!(
        evil.hv.grants().end_access(head).is_ok(),
        "every page of evil's was unmapped"
    );
    assert_eq!(stats(&hv, drv_id, g1)["rejected"], serde_json::json!({}));
    hv.shutdown();
    driver.join().unwrap();
}

/// good1 sends good2 300 frames, 100 of them past the header copy (their
/// payload read where good1 wrote it), each intact; returns good1's vif
/// counters once netback has counted 300 grant operations `op`.
fn good1_sends_300(
    hv: &Arc<Hypervisor>,
    drv_id: DomId,
    g1: DomId,
    (good1, good2): (&mut Guest, &mut Guest),
    op: &str,
) -> serde_json::Value {
    good_traffic_flows(good1, good2, 200, 0);
    common::traffic_flows_sized(good1, good2, 100, 10_000, 1400);
    wait_until(&format!("good1's 300 frames counted as {op}"), WAIT, || {
        stats(hv, drv_id, g1)["grant_ops"][op].as_u64().unwrap_or(0) >= 300
    });
    let s = stats(hv, drv_id, g1);
    assert!(s["tx_packets"].as_u64().unwrap_or(0) >= 300, "{s}");
    s
}

/// good1, good2 and evil under hv-copy with `tx_mode`, the driver
/// domain's loop in a thread.
fn hv_copy_world(tx_mode: TxMode) -> (World, Guest, Guest, Guest) {
    let mut w = world_configured(
        &["good1", "good2", "evil"],
        Grants::HvCopy,
        tx_mode,
        |_| true,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        |_, _| {},
    );
    let evil = w.guests.pop().unwrap();
    let good2 = w.guests.pop().unwrap();
    let good1 = w.guests.pop().unwrap();
    (w, good1, good2, evil)
}

/// Every attack of the hv-copy tests from evil: the malformed requests,
/// then [`forged_and_revoked`]'s grants; returns the latter's two grants.
fn every_attack(
    hv: &Arc<Hypervisor>,
    drv_id: DomId,
    (g1, e): (DomId, DomId),
    evil: &mut Guest,
    good1: &mut Guest,
    good2: &mut Guest,
) -> (u32, u32) {
    let attacks = malformed_requests(evil, good2.mac, drv_id);
    refuse_each(hv, drv_id, e, evil, good1, good2, attacks);
    forged_and_revoked(hv, drv_id, (g1, e), evil, good1, good2)
}

/// evil sends a frame on a grant it revoked, one on a grant it gave
/// good1 (`g1`), and a good head with a forged payload slot: each refused
/// under its reason, nothing forwarded. Returns the grant given to good1
/// and the head's, for the caller to check they were left unpinned.
fn forged_and_revoked(
    hv: &Arc<Hypervisor>,
    drv_id: DomId,
    (g1, e): (DomId, DomId),
    evil: &mut Guest,
    good1: &mut Guest,
    good2: &mut Guest,
) -> (u32, u32) {
    // A frame evil granted and then revoked, and one granted to good1.
    let f = common::frame(good1.mac, evil.mac, 1).data;
    evil.hv.pool().write_bytes(592 * 4096, &f);
    let revoked = evil.hv.grants().grant_access(drv_id, 592, true).unwrap();
    evil.hv.grants().end_access(revoked).unwrap();
    let len = f.len() as u16;
    let attacks = vec![("bad_grant_ref", vec![req(revoked, 0, len, 40)])];
    refuse_each(hv, drv_id, e, evil, good1, good2, attacks);
    let foreign = evil.hv.grants().grant_access(g1, 592, true).unwrap();
    let head = evil.hv.grants().grant_access(drv_id, 593, true).unwrap();
    evil.hv.pool().write_bytes(593 * 4096, &f);
    let attacks = vec![
        ("grant_permission_denied", vec![req(foreign, 0, len, 41)]),
        // A forged payload slot behind a good head: the whole packet is
        // refused, and the head's hold or map ended.
        (
            "bad_grant_ref",
            vec![more(req(head, 0, len + 100, 42)), req(7777, 0, 100, 43)],
        ),
    ];
    refuse_each(hv, drv_id, e, evil, good1, good2, attacks);
    let s = stats(hv, drv_id, e);
    assert_eq!(
        s["tx_packets"].as_u64().unwrap_or(0),
        0,
        "nothing evil sent was forwarded: {s}"
    );
    (foreign, head)
}
