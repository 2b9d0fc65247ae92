//! Hostile guests against netback under the new grant mechanism (Ram thesis
//! ch. 4) and TX gather (Menon 2006 §4.1), in process: a real hv, the real
//! driver-domain loop, good guests that keep exchanging frames, and evil
//! ones that name absent, revoked and read-only grants, post read-only RX
//! buffers, rewrite their TX buffers while netback reads them, and flood
//! the translation table with misses. netback must refuse and count each
//! case without touching a byte it was not granted, and the good guests
//! must never notice.

mod common;
use common::{
    backend_state, good_traffic_flows, gso, probe, probes, push, stats, udp_frame, wait_for, world,
    Guest, World,
};

use abi::netif::{GsoType, TxFlags, TxRequest};
use abi::SharedMemory;
use frame::packet::Packet;
use hv::{DomId, ErrorKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolstack::topology::{Grants, TxMode};

const PAGE: usize = 4096;

fn req(gref: u32, offset: u16, size: u16, id: u16) -> TxRequest {
    TxRequest {
        gref,
        offset,
        flags: TxFlags::EMPTY,
        id,
        size,
    }
}

fn rejected(w: &World, g: DomId, reason: &str) -> u64 {
    stats(&w.hv, w.drv_id, g)["rejected"][reason]
        .as_u64()
        .unwrap_or(0)
}

/// A grant reference below `below` in the read-only half of `g`'s table
/// that grants nothing, found from the top (revoking any of netfront's
/// grants on the way, which only hurts `g` itself).
fn absent_gref(g: &mut Guest, drv: DomId, below: u32) -> u32 {
    for gref in (0..below.min(1024)).rev() {
        match g.hv.ngm_revoke(drv, gref) {
            Err(e) if e.kind == ErrorKind::BadGntref => return gref,
            _ => continue,
        }
    }
    panic!("every entry of the read-only half is in use");
}

#[test]
fn bad_grants_are_refused_and_counted_while_good_guests_flow() {
    let mut w = world(&["good1", "good2", "evil"], Grants::Ngm, TxMode::Gather);
    let mut evil = w.guests.pop().unwrap();
    let mut good2 = w.guests.pop().unwrap();
    let mut good1 = w.guests.pop().unwrap();
    let (drv, e) = (w.drv_id, w.ids[2]);
    good_traffic_flows(&mut good1, &mut good2, 100, 0);
    good_traffic_flows(&mut good2, &mut good1, 100, 1000);

    // Three grants of frame 590 (outside netfront's buffers): one absent,
    // one read-only, one revoked.
    let g_abs = absent_gref(&mut evil, drv, 1024);
    let g_ro = absent_gref(&mut evil, drv, g_abs);
    evil.hv.ngm_grant(drv, g_ro, 590, false).unwrap();
    let g_rev = absent_gref(&mut evil, drv, g_ro);
    evil.hv.ngm_grant(drv, g_rev, 590, false).unwrap();
    evil.hv.ngm_revoke(drv, g_rev).unwrap();
    // A frame granted read-only may be sent: netback reads it.
    let f = probe(good2.mac, evil.mac, 77, 300);
    evil.hv.pool().write_bytes(590 * PAGE, &f);
    // A UDP frame from evil itself, for GSO metadata that does not fit it.
    let g_udp = absent_gref(&mut evil, drv, g_rev);
    evil.hv.ngm_grant(drv, g_udp, 591, false).unwrap();
    evil.hv
        .pool()
        .write_bytes(591 * PAGE, &udp_frame(good2.mac, evil.mac));

    let attacks: Vec<(&str, Vec<TxRequest>)> = vec![
        ("grant_absent", vec![req(99_999, 0, 100, 1)]),
        ("grant_absent", vec![req(g_abs, 0, 100, 2)]),
        ("grant_revoked", vec![req(g_rev, 0, 100, 3)]),
        ("size_mismatch", vec![req(g_ro, 0, 0, 4)]),
        ("crosses_page", vec![req(g_ro, 4000, 200, 5)]),
        ("crosses_page", vec![req(g_ro, 0, 5000, 6)]),
        // Refused on the header copy, before anything is forwarded.
        (
            "gso_not_tcp",
            gso(req(g_udp, 0, 2000, 7), 1000, GsoType::TcpV4),
        ),
        (
            "bad_gso_size",
            gso(req(g_udp, 0, 2000, 8), 1501, GsoType::TcpV4),
        ),
    ];
    for (reason, reqs) in attacks {
        let before = rejected(&w, e, reason);
        push(&mut evil, &reqs);
        wait_for(&format!("netback to count {reason}"), || {
            rejected(&w, e, reason) > before
        });
        good_traffic_flows(&mut good1, &mut good2, 20, 2000);
    }
    assert_eq!(
        stats(&w.hv, drv, e)["tx_packets"],
        0,
        "nothing was forwarded"
    );
    // The read-only grant itself carries a frame to good2, intact.
    read_only_tx_arrives(&w, e, &mut evil, &mut good2, g_ro, &f);

    // RX: every posted buffer is swapped for the read-only grant. A
    // broadcast must be refused for evil (netback may not write there)
    // and still reach good2.
    read_only_rx_is_refused(&w, e, &mut evil, &mut good1, &mut good2, g_ro);

    // A flood of translation-table misses crosses the limit: evil is
    // disconnected, and the good guests keep flowing throughout.
    flood_disconnects(&w, e, &mut evil, &mut good1, &mut good2);
    good_traffic_flows(&mut good1, &mut good2, 100, 4000);
    good_traffic_flows(&mut good2, &mut good1, 100, 5000);
    for g in &w.ids[..2] {
        let s = stats(&w.hv, drv, *g);
        assert_eq!(
            s["rejected"],
            serde_json::json!({}),
            "a good guest was refused: {s}"
        );
    }
    w.hv.shutdown();
    w.driver.join().unwrap();
}

/// evil sends a frame through the read-only grant `g_ro`; good2 receives it
/// intact (`f`), and once netback has responded evil can revoke the grant.
fn read_only_tx_arrives(
    w: &World,
    e: DomId,
    evil: &mut Guest,
    good2: &mut Guest,
    g_ro: u32,
    f: &[u8],
) {
    let drv = w.drv_id;
    push(evil, &[req(g_ro, 0, 300, 40)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if probes(good2).iter().any(|p| p.as_slice() == f) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the read-only grant's frame never arrived: evil {}, good2 {}, good2's frontend {:?}",
            stats(&w.hv, drv, e),
            stats(&w.hv, drv, w.ids[1]),
            good2.nf.counters
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // netback holds no use once it has responded: the revocation goes through.
    evil.hv.ngm_revoke(drv, g_ro).unwrap();
}

/// evil's posted RX buffer is swapped for the read-only grant `g_ro`: a
/// broadcast from good1 is refused for evil (netback writes nothing there)
/// and still reaches good2; evil then recovers its buffers.
fn read_only_rx_is_refused(
    w: &World,
    e: DomId,
    evil: &mut Guest,
    good1: &mut Guest,
    good2: &mut Guest,
    g_ro: u32,
) {
    let drv = w.drv_id;
    evil.hv.ngm_grant(drv, g_ro, 590, false).unwrap();
    // The next buffer netback takes is the one after the last response.
    let _ = probes(evil);
    {
        let ring = evil.nf.rx_ring();
        let slot = (ring.rsp_cons() & 255) as usize;
        ring.memory().store_u32(64 + slot * 8 + 4, g_ro);
    }
    let before = evil.hv.pool().load_u64(590 * PAGE);
    let bcast = probe([0xff; 6], good1.mac, 5, 200);
    good1
        .nf
        .send(&mut good1.hv, Packet::new(bcast.clone()))
        .unwrap();
    good1.nf.flush().unwrap();
    wait_for("netback to refuse the read-only RX buffer", || {
        rejected(w, e, "grant_read_only") > 0
    });
    assert_eq!(
        evil.hv.pool().load_u64(590 * PAGE),
        before,
        "netback wrote into a read-only grant"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probes(good2).contains(&bcast) {
        assert!(Instant::now() < deadline, "good2 missed the broadcast");
        std::thread::sleep(Duration::from_millis(2));
    }
    // evil's frontend took the refusal, dropped the frame and re-posted
    // its own buffers: the next broadcast reaches it.
    let _ = probes(evil);
    assert!(evil.nf.counters.drops.get("rx_bad_response") > 0);
    let bcast2 = probe([0xff; 6], good1.mac, 6, 200);
    good1
        .nf
        .send(&mut good1.hv, Packet::new(bcast2.clone()))
        .unwrap();
    good1.nf.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probes(evil).contains(&bcast2) {
        assert!(
            Instant::now() < deadline,
            "evil never recovered its RX buffers"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(backend_state(&w.hv, drv, e), "4", "still below the limit");
}

/// A flood of translation-table misses from evil crosses the limit: evil is
/// disconnected while good1 and good2 keep flowing.
fn flood_disconnects(w: &World, e: DomId, evil: &mut Guest, good1: &mut Guest, good2: &mut Guest) {
    let drv = w.drv_id;
    for round in 0..8u16 {
        if evil.nf.tx_ring().free_requests() < 16 {
            break;
        }
        let reqs: Vec<TxRequest> = (0..16u16)
            .map(|i| req(1_000_000 + u32::from(i), 0, 64, 100 + round * 16 + i))
            .collect();
        push(evil, &reqs);
        good_traffic_flows(good1, good2, 10, 3000 + u32::from(round) * 10);
    }
    wait_for("evil to be disconnected", || {
        backend_state(&w.hv, drv, e) == "6"
    });
}

#[test]
fn a_guest_rewriting_its_buffer_after_the_check_cannot_change_the_headers_sent() {
    // evil sends frames longer than netback's header copy while a second
    // thread keeps flipping their source MAC, in the guest's TX buffers,
    // between its own and good2's. netback decides on its private copy
    // and sends that copy: good1 must only ever see evil's own MAC, and
    // the bridge must never learn good2's MAC on evil's port.
    let mut w = world(&["good1", "good2", "evil"], Grants::Ngm, TxMode::Gather);
    let mut evil = w.guests.pop().unwrap();
    let mut good2 = w.guests.pop().unwrap();
    let mut good1 = w.guests.pop().unwrap();
    let (drv, e) = (w.drv_id, w.ids[2]);
    good_traffic_flows(&mut good1, &mut good2, 50, 0);

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (pool, stop) = (evil.hv.pool_shared(), stop.clone());
        let (mine, theirs) = (evil.mac, good2.mac);
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mac = if flips.is_multiple_of(2) {
                    theirs
                } else {
                    mine
                };
                // netfront's TX buffers are frames 2..258; only every
                // other one races, so that frames in the others pass the
                // check whatever the timing, before netback's refusal
                // limit can take the vif down.
                for frame in (2..258).step_by(2) {
                    pool.write_bytes(frame * PAGE + 6, &mac);
                }
                flips += 1;
            }
            flips
        })
    };
    let len = 1400;
    let (to, from) = (good1.mac, evil.mac);
    let check = |d: &[u8]| {
        assert_eq!(d[6..12], from, "a header changed after netback checked it");
        let seq = u32::from_be_bytes([d[14], d[15], d[16], d[17]]);
        assert_eq!(d, probe(to, from, seq, len), "frame {seq} arrived changed");
    };
    let (mut sent, mut seen) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sent < 3000 && backend_state(&w.hv, drv, e) == "4" && Instant::now() < deadline {
        while evil.nf.can_send() && sent < 3000 {
            let f = probe(good1.mac, evil.mac, sent, len);
            if evil.nf.send(&mut evil.hv, Packet::new(f)).is_err() {
                break;
            }
            sent += 1;
        }
        let _ = evil.nf.flush();
        let _ = probes(&mut evil);
        for d in probes(&mut good1) {
            check(&d);
            seen += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    // Frames still on their way to good1.
    let passed = stats(&w.hv, drv, e)["tx_packets"].as_u64().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while u64::from(seen) < passed && Instant::now() < deadline {
        for d in probes(&mut good1) {
            check(&d);
            seen += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let spoofs = rejected(&w, e, "spoofed_mac");
    assert!(
        seen > 0 && spoofs > 0,
        "the race never happened: {seen} frames arrived, {spoofs} refused, {flips} flips; evil {}, good1 {}",
        stats(&w.hv, drv, e),
        stats(&w.hv, drv, w.ids[0]),
    );
    // The bridge still sends good2's frames to good2.
    good_traffic_flows(&mut good1, &mut good2, 100, 1000);
    good_traffic_flows(&mut good2, &mut good1, 100, 2000);
    w.hv.shutdown();
    w.driver.join().unwrap();
}

#[test]
fn rx_buffers_a_guest_misposts_hurt_only_itself() {
    // evil rewrites the RX requests it has posted, as a guest whose grant
    // bookkeeping is corrupt would: a reference out of range, one it granted
    // to another domain, one it revoked, and one buffer posted many times
    // over. netback refuses and counts the first three, writes the rest
    // only into evil's own frame, and good2 gets every frame intact.
    let mut w = world(&["good1", "good2", "evil"], Grants::Ngm, TxMode::Gather);
    let mut evil = w.guests.pop().unwrap();
    let mut good2 = w.guests.pop().unwrap();
    let mut good1 = w.guests.pop().unwrap();
    let (drv, e, other) = (w.drv_id, w.ids[2], w.ids[0]);
    good_traffic_flows(&mut good1, &mut good2, 100, 0);

    evil.hv.ngm_setup(other).unwrap();
    let g_other = absent_gref(&mut evil, drv, 1024);
    evil.hv.ngm_grant(other, g_other, 590, true).unwrap();
    let g_rev = absent_gref(&mut evil, drv, g_other);
    evil.hv.ngm_grant(drv, g_rev, 590, true).unwrap();
    evil.hv.ngm_revoke(drv, g_rev).unwrap();
    let g_dup = absent_gref(&mut evil, drv, g_rev);
    evil.hv.ngm_grant(drv, g_dup, 591, true).unwrap();
    let canary = vec![0xa5u8; PAGE];
    evil.hv.pool().write_bytes(590 * PAGE, &canary);

    let _ = probes(&mut evil);
    let dups = 20u32;
    {
        let ring = evil.nf.rx_ring();
        let mask = ring.size() - 1;
        let first = ring.rsp_cons();
        assert!(ring.req_prod_pvt().wrapping_sub(first) >= 3 + dups);
        let bad = [99_999, g_other, g_rev];
        for i in 0..3 + dups {
            let gref = bad.get(i as usize).copied().unwrap_or(g_dup);
            let slot = (first.wrapping_add(i) & mask) as usize;
            ring.memory().store_u32(64 + slot * 8 + 4, gref);
        }
    }
    let before = |r| rejected(&w, e, r);
    let (absent, revoked) = (before("grant_absent"), before("grant_revoked"));
    let rx_before = stats(&w.hv, drv, e)["rx_packets"].as_u64().unwrap_or(0);
    let mut last = Vec::new();
    for seq in 0..3 + dups {
        last = probe([0xff; 6], good1.mac, 100 + seq, 300 + seq as usize);
        good1
            .nf
            .send(&mut good1.hv, Packet::new(last.clone()))
            .unwrap();
        good1.nf.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !probes(&mut good2).contains(&last) {
            assert!(Instant::now() < deadline, "good2 missed broadcast {seq}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    wait_for("netback to fill evil's reposted buffer", || {
        stats(&w.hv, drv, e)["rx_packets"].as_u64().unwrap_or(0) >= rx_before + u64::from(dups)
    });
    assert_eq!(rejected(&w, e, "grant_absent"), absent + 2);
    assert_eq!(rejected(&w, e, "grant_revoked"), revoked + 1);
    let mut now = vec![0u8; PAGE];
    evil.hv.pool().read_bytes(590 * PAGE, &mut now);
    assert!(now == canary, "netback wrote through a refused grant");
    let mut got = vec![0u8; last.len()];
    evil.hv.pool().read_bytes(591 * PAGE, &mut got);
    assert_eq!(
        got, last,
        "the buffer posted {dups} times holds the last frame"
    );
    // evil's frontend takes back its own buffers; below the limit it stays.
    let _ = probes(&mut evil);
    assert_eq!(backend_state(&w.hv, drv, e), "4");
    good_traffic_flows(&mut good1, &mut good2, 100, 1000);
    good_traffic_flows(&mut good2, &mut good1, 100, 2000);
    for g in &w.ids[..2] {
        assert_eq!(stats(&w.hv, drv, *g)["rejected"], serde_json::json!({}));
    }
    w.hv.shutdown();
    w.driver.join().unwrap();
}
