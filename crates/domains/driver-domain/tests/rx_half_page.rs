//! Half-page receive buffers (Ram thesis 5.3, `feature-rx-half-page`), in
//! process with a real hv and the real driver loop: frames small and large
//! arrive intact in 2 KiB buffers under both grant mechanisms, the same
//! buffers take half the pages, and a guest that puts any other offset in
//! a request's `pad` is refused and counted while the others flow.

mod common;
use common::{good_traffic_flows, stats, wait_until, world_configured, Guest, World, WAIT};

use abi::SharedMemory;
use frame::offload;
use frame::packet::{Csum, Gso, GsoKind, Packet};
use splitnet_driver_domain as driver_domain;
use toolstack::topology::{Grants, RxBuffer, TxMode};

const PAGE: usize = 4096;

/// A world whose guests named in `half` ask for half-page RX buffers.
fn half_world(names: &[&'static str], half: &'static [&str], grants: Grants) -> World {
    let tx = if grants == Grants::Ngm {
        TxMode::Gather
    } else {
        TxMode::Copy
    };
    world_configured(
        names,
        grants,
        tx,
        |_| true,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        move |_, v| {
            if half.contains(&v.guest.as_str()) {
                v.rx_buffer = RxBuffer::Half;
            }
        },
    )
}

/// A TCP/IPv4 GSO frame of `payload` bytes from `a` to `b`, its checksum
/// partial, as a guest's stack hands one to its NIC.
fn gso_frame(a: &Guest, b: &Guest, payload: usize) -> Packet {
    let mut d = b.mac.to_vec();
    d.extend_from_slice(&a.mac);
    d.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + payload) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = offload::ipv4_header_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    d.extend_from_slice(&ip);
    let mut tcp = vec![0u8; 20];
    tcp[0..4].copy_from_slice(&[0x30, 0x39, 0x00, 0x50]);
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // PSH, ACK
    tcp[14] = 0xff;
    d.extend_from_slice(&tcp);
    d.extend((0..payload).map(|i| (i * 7 + i / 251) as u8));
    let mut p = Packet {
        data: d,
        csum: Csum::Unknown,
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        }),
    };
    offload::checksum_setup(&mut p, true).unwrap();
    p
}

/// `a` sends `p`; `b` receives it intact (bytes and offload state).
fn arrives(a: &mut Guest, b: &mut Guest, p: &Packet) {
    a.nf.send(&mut a.hv, p.clone()).unwrap();
    a.nf.flush().unwrap();
    let mut rx = Vec::new();
    let what = format!("a {}-byte frame at b", p.data.len());
    let got = wait_until(&what, WAIT, || {
        let mut ignore = Vec::new();
        a.nf.poll(&mut a.hv, &mut ignore).unwrap();
        b.nf.poll(&mut b.hv, &mut rx).unwrap();
        match rx.iter().position(|q| q.data.len() == p.data.len()) {
            Some(i) => Ok(rx.swap_remove(i)),
            None => Err(format!("{:?}", b.nf.counters)),
        }
    });
    assert_eq!(got.data, p.data, "the frame arrived corrupted");
    assert_eq!(got.gso, p.gso);
}

#[test]
fn frames_small_and_large_arrive_intact_in_half_pages_with_half_the_grants() {
    for grants in [Grants::Ngm, Grants::HvCopy] {
        let mut w = half_world(&["a", "b", "c"], &["a", "b"], grants);
        assert!(w.guests[1].nf.info.rx_half, "b negotiated half pages");
        assert!(!w.guests[2].nf.info.rx_half, "c kept full pages");
        let (a, rest) = w.guests.split_first_mut().unwrap();
        let (b, c) = rest.split_at_mut(1);
        let (b, c) = (&mut b[0], &mut c[0]);
        good_traffic_flows(a, b, 300, 0);
        good_traffic_flows(b, a, 300, 1000);
        good_traffic_flows(b, c, 50, 2000);
        good_traffic_flows(c, b, 50, 3000);
        // Over 2 KiB: a chain of buffers; 60 KB takes 30 of them.
        for len in [1500, 2100, 5000, 60_000] {
            arrives(a, b, &gso_frame(a, b, len));
        }
        if grants == Grants::Ngm {
            // The locality figure `splitnet status` shows: 256 TX pages,
            // and 256 RX buffers in 128 pages.
            let t = b.nf.grant_stats().expect("ngm");
            assert_eq!(t.created, 256 + 128, "{t:?}");
            assert_eq!(c.nf.grant_stats().expect("ngm").created, 512);
        }
        for g in &w.ids {
            let s = stats(&w.hv, w.drv_id, *g);
            let clean = s["rejected"].as_object().is_none_or(|r| r.is_empty());
            assert!(clean, "{grants:?}: a good guest was refused: {s}");
        }
        w.hv.shutdown();
        w.driver.join().unwrap();
    }
}

/// Before each broadcast from good1, the RX request netback takes next
/// from evil is rewritten to carry a bad offset in its `pad`.
#[test]
fn a_bad_offset_in_pad_is_refused_and_counted_and_nobody_else_notices() {
    for grants in [Grants::Ngm, Grants::HvCopy] {
        let mut w = half_world(&["good1", "good2", "evil"], &["good2", "evil"], grants);
        let mut evil = w.guests.pop().unwrap();
        let mut good2 = w.guests.pop().unwrap();
        let mut good1 = w.guests.pop().unwrap();
        let e = w.ids[2];
        // good2 speaks first, so the bridge sends good1's frames to it
        // alone, not to evil too.
        good_traffic_flows(&mut good2, &mut good1, 1, 0);
        good_traffic_flows(&mut good1, &mut good2, 100, 1);
        let mut seq = 10_000;
        for offset in [1000u16, 4096, 2047, 0xffff] {
            let mut ignore = Vec::new();
            // Every response netback published is taken (one poll takes
            // at most a budget's worth), so its next request is the one
            // after the last response.
            while {
                evil.nf.poll(&mut evil.hv, &mut ignore).unwrap();
                let ring = evil.nf.rx_ring();
                ring.rsp_cons() != ring.peek_rsp_prod()
            } {}
            // The request netback takes next: the one after the last response.
            let (idx, slot, id) = {
                let ring = evil.nf.rx_ring();
                let idx = ring.rsp_cons();
                let slot = (idx & 255) as usize;
                let id = ring.memory().load_u16(64 + slot * 8);
                ring.memory()
                    .write_bytes(64 + slot * 8 + 2, &offset.to_le_bytes());
                (idx, slot, id)
            };
            let page = rx_page(id);
            let before = snapshot(&evil, page);
            let before_count = refused(&w, e);
            // Its own ethertype, so the good traffic's checks skip it.
            let mut bcast = common::frame([0xff; 6], good1.mac, seq);
            bcast.data[12..14].copy_from_slice(&[0x88, 0xb6]);
            seq += 1;
            good1.nf.send(&mut good1.hv, bcast).unwrap();
            good1.nf.flush().unwrap();
            wait_until(
                &format!("netback to refuse offset {offset} (slot {slot})"),
                WAIT,
                || refused(&w, e) > before_count,
            );
            // netback counts a refusal before it pushes the refused
            // request's response: wait for that response, so that the next
            // pass rewrites the request after it, not one already taken.
            wait_until("the refused request's response", WAIT, || {
                evil.nf.poll(&mut evil.hv, &mut ignore).unwrap();
                evil.nf.rx_ring().rsp_cons().wrapping_sub(idx) as i32 > 0
            });
            assert_eq!(
                snapshot(&evil, page),
                before,
                "{grants:?}: netback wrote into the page of a refused buffer"
            );
            good_traffic_flows(&mut good1, &mut good2, 20, seq);
            seq += 20;
        }
        good_traffic_flows(&mut good2, &mut good1, 100, 50_000);
        for g in &w.ids[..2] {
            let s = stats(&w.hv, w.drv_id, *g);
            let clean = s["rejected"].as_object().is_none_or(|r| r.is_empty());
            assert!(clean, "{grants:?}: a good guest was refused: {s}");
        }
        w.hv.shutdown();
        w.driver.join().unwrap();
    }
}

fn refused(w: &World, g: hv::DomId) -> u64 {
    stats(&w.hv, w.drv_id, g)["rejected"]["bad_rx_offset"]
        .as_u64()
        .unwrap_or(0)
}

/// The pool page of RX buffer `id` of a half-page guest's first vif.
fn rx_page(id: u16) -> usize {
    (netfront::RX_BUF_BASE as usize + usize::from(id / 2)) * PAGE
}

fn snapshot(g: &Guest, at: usize) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    g.hv.pool().read_bytes(at, &mut b);
    b
}

/// `prefetch` reaches both ends (netfront reads its node at connect, the
/// toolstack wrote netback's), and frames flow with it on half pages.
#[test]
fn prefetch_is_read_at_connect_and_traffic_flows_with_it() {
    let mut w = world_configured(
        &["a", "b"],
        Grants::Ngm,
        TxMode::Gather,
        |_| true,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        |i, v| {
            v.prefetch = i == 0;
            v.rx_buffer = RxBuffer::Half;
        },
    );
    assert!(w.guests[0].nf.info.prefetch);
    assert!(!w.guests[1].nf.info.prefetch);
    let be = |g| {
        format!(
            "/local/domain/{}/backend/vif/{g}/0/splitnet-prefetch",
            w.drv_id
        )
    };
    assert_eq!(
        common::store_read(&w.hv, &be(w.ids[0])).as_deref(),
        Some("1")
    );
    assert_eq!(common::store_read(&w.hv, &be(w.ids[1])), None);
    let (a, rest) = w.guests.split_first_mut().unwrap();
    good_traffic_flows(a, &mut rest[0], 500, 0);
    good_traffic_flows(&mut rest[0], a, 500, 1000);
    w.hv.shutdown();
    w.driver.join().unwrap();
}
