//! Xen's per-vif options against the real netback, in process: a real hv,
//! the real driver-domain loop in a thread, real frontends. `ip=` drops
//! spoofed frames, `rate=` holds a vif to its credit, `mtu` lets jumbo
//! frames through and drops longer ones, multicast control floods a group
//! only to the vifs that joined it; a bad option node refuses the vif.

mod common;
use common::{
    backend_state, good_traffic_flows, push, stats, store_read, store_write, wait_until,
    world_configured, Guest, World, WAIT,
};

use abi::netif::{Extra, ExtraFlags, ExtraInfo, TxFlags, TxRequest};
use frame::packet::Packet;
use hv::{DomId, Hypervisor};
use splitnet_driver_domain as driver_domain;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolstack::topology::{CreditRate, Grants, TxMode, VifConfig};

fn world_set(names: &[&'static str], configure: impl Fn(usize, &mut VifConfig)) -> World {
    world_configured(
        names,
        Grants::Ngm,
        TxMode::Gather,
        |_| true,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        configure,
    )
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// A UDP/IPv4 frame from `src` (ports 68 → 67 when `dhcp`), tagged by `tag`.
fn udp4(g: &Guest, dst: [u8; 6], src: [u8; 4], dhcp: bool, tag: u8) -> Packet {
    let (sp, dp) = if dhcp { (68u16, 67u16) } else { (4000, 5000) };
    let payload = [tag; 32];
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&[10, 0, 0, 2]);
    ip.extend_from_slice(&sp.to_be_bytes());
    ip.extend_from_slice(&dp.to_be_bytes());
    ip.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(&payload);
    Packet::new(eth(dst, g.mac, 0x0800, &ip))
}

/// A gratuitous ARP reply claiming `ip`, tagged in its target hardware address.
fn arp(g: &Guest, ip: [u8; 4], tag: u8) -> Packet {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 2];
    a.extend_from_slice(&g.mac);
    a.extend_from_slice(&ip);
    a.extend_from_slice(&[tag; 6]);
    a.extend_from_slice(&ip);
    a.resize(46, 0);
    Packet::new(eth([0xff; 6], g.mac, 0x0806, &a))
}

/// A (solicited, so unicast) neighbour advertisement to `dst` from `g`'s
/// own (EUI-64) link-local address claiming `target`.
fn na(g: &Guest, dst: [u8; 6], target: std::net::Ipv6Addr, tag: u8) -> Packet {
    let mut icmp = vec![136, tag, 0, 0, 0x20, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[58, 255]);
    ip.extend_from_slice(&driver_domain::antispoof::eui64_link_local(g.mac));
    ip.extend_from_slice(&"ff02::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    ip.extend_from_slice(&icmp);
    Packet::new(eth(dst, g.mac, 0x86dd, &ip))
}

/// Everything `g` has received so far (and its TX completions taken).
fn receive(g: &mut Guest) -> Vec<Packet> {
    let mut rx = Vec::new();
    g.nf.poll(&mut g.hv, &mut rx).unwrap();
    rx
}

fn send(g: &mut Guest, p: Packet) {
    g.nf.send(&mut g.hv, p).unwrap();
    g.nf.flush().unwrap();
}

fn counter(hv: &Arc<Hypervisor>, drv: DomId, g: DomId, key: &str) -> u64 {
    stats(hv, drv, g)[key].as_u64().unwrap_or(0)
}

#[test]
fn ip_drops_spoofed_sources_arp_and_nd_and_lets_dhcp_through() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["a", "b"], |i, v| {
        if i == 0 {
            v.opts.ip = vec!["10.0.0.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        }
    });
    let mut b = guests.pop().unwrap();
    let mut a = guests.pop().unwrap();
    let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
    let a_link_local = driver_domain::antispoof::eui64_link_local(a.mac);
    let b_link_local = driver_domain::antispoof::eui64_link_local(b.mac);
    // Tags: good frames even, spoofed ones odd.
    let frames = [
        (udp4(&a, b.mac, [10, 0, 0, 1], false, 0), true),
        (udp4(&a, b.mac, [10, 0, 0, 9], false, 1), false),
        (udp4(&a, b.mac, [0, 0, 0, 0], true, 2), true),
        (udp4(&a, b.mac, [0, 0, 0, 0], false, 3), false),
        (arp(&a, [10, 0, 0, 1], 4), true),
        (arp(&a, [10, 0, 0, 2], 5), false),
        (na(&a, b.mac, v6("2001:db8::1"), 6), true),
        (na(&a, b.mac, v6("2001:db8::2"), 7), false),
        // b's link-local address is b's to claim.
        (na(&a, b.mac, b_link_local.into(), 9), false),
        (na(&a, b.mac, a_link_local.into(), 10), true),
    ];
    for (p, _) in frames.iter().cloned() {
        send(&mut a, p);
    }
    let (good, bad) = (5usize, 5u64);
    let mut got = Vec::new();
    wait_until(
        "the good frames, and the spoofed ones counted",
        WAIT,
        || {
            got.extend(
                receive(&mut b)
                    .into_iter()
                    .filter(|p| p.data[6..12] == a.mac),
            );
            let _ = receive(&mut a);
            got.len() >= good && counter(&hv, drv_id, ids[0], "spoofed") >= bad
        },
    );
    got.extend(receive(&mut b));
    for p in &got {
        let want = frames.iter().find(|(f, _)| f.data == p.data);
        assert!(
            want.is_some_and(|(_, ok)| *ok),
            "a spoofed frame got through: {:02x?}",
            &p.data[..p.data.len().min(64)]
        );
    }
    assert_eq!(got.len(), good);
    assert_eq!(counter(&hv, drv_id, ids[0], "spoofed"), bad);
    // Drops are not the frontend's fault: nothing refused, still connected.
    assert_eq!(
        stats(&hv, drv_id, ids[0])["rejected"],
        serde_json::json!({})
    );
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "4");
    // b has no ip= and may send from anything.
    let p = udp4(&b, a.mac, [192, 0, 2, 7], false, 8);
    send(&mut b, p);
    wait_until("b's frame", WAIT, || !receive(&mut a).is_empty());
    hv.shutdown();
    driver.join().unwrap();
}

/// Sends `len`-byte frames from `a` to `b` for `secs`, as fast as the ring
/// takes them; the bytes `b` received from `a`.
fn blast(a: &mut Guest, b: &mut Guest, len: usize, secs: f64) -> u64 {
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut seq = 0u32;
    while start.elapsed().as_secs_f64() < secs {
        while a.nf.can_send() {
            let mut f = eth(b.mac, a.mac, 0x88b5, &seq.to_be_bytes());
            f.resize(len, seq as u8);
            a.nf.send(&mut a.hv, Packet::new(f)).unwrap();
            seq += 1;
        }
        a.nf.flush().unwrap();
        let _ = receive(a);
        for p in receive(b) {
            if p.data[6..12] == a.mac {
                bytes += p.data.len() as u64;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    bytes
}

fn driver_wakeups(hv: &Arc<Hypervisor>, drv: DomId) -> u64 {
    store_read(hv, &format!("/local/domain/{drv}/splitnet/stats"))
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["loop"]["wakeups"].as_u64())
        .unwrap_or(0)
}

#[test]
fn rate_holds_a_vif_to_its_credit_without_dropping_or_spinning() {
    // 100 000 bytes per 50 ms: 2 MB/s.
    let (bytes, usec) = (100_000u64, 50_000u64);
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["a", "b", "c"], |i, v| {
        if i == 0 {
            v.opts.rate = Some(CreditRate { bytes, usec });
        }
        if i == 2 {
            v.opts.rate = Some(CreditRate {
                bytes: 1500,
                usec: 100_000,
            });
        }
    });
    let mut c = guests.pop().unwrap();
    let mut b = guests.pop().unwrap();
    let mut a = guests.pop().unwrap();
    let got = blast(&mut a, &mut b, 1400, 1.0);
    let rate = bytes as f64 * 1e6 / usec as f64;
    let ratio = got as f64 / rate;
    eprintln!("rate: {got} bytes in 1 s at {rate} B/s: {ratio:.3} of the rate");
    assert!(
        (0.8..=1.1).contains(&ratio),
        "a limited vif carried {got} bytes in 1 s at a rate of {rate} B/s ({ratio:.2})"
    );
    assert!(counter(&hv, drv_id, ids[0], "credit_waits") > 0);
    // Nothing was dropped on the way: the vif waits, the frames stay queued.
    let s = stats(&hv, drv_id, ids[0]);
    assert_eq!(s["drops"], serde_json::json!({}), "{s}");
    // An unlimited vif is not held back.
    let free = blast(&mut b, &mut a, 1400, 0.3);
    assert!(
        free as f64 > rate,
        "the unlimited vif carried only {free} bytes"
    );

    // c fills its ring at 15 kB/s and then waits for credit for seconds:
    // the driver loop sleeps until each replenish instead of polling.
    while c.nf.can_send() {
        let f = eth(b.mac, c.mac, 0x88b5, &[0; 1386]);
        c.nf.send(&mut c.hv, Packet::new(f)).unwrap();
    }
    c.nf.flush().unwrap();
    wait_until("c to wait for credit", WAIT, || {
        counter(&hv, drv_id, ids[2], "credit_waits") > 0
    });
    let w0 = driver_wakeups(&hv, drv_id);
    std::thread::sleep(Duration::from_millis(1500));
    let w1 = driver_wakeups(&hv, drv_id);
    eprintln!(
        "rate: {} driver wake-ups in 1.5 s of waiting for credit",
        w1 - w0
    );
    assert!(
        w1 - w0 < 500,
        "the driver loop woke {} times in 1.5 s while a vif waited for credit",
        w1 - w0
    );
    hv.shutdown();
    driver.join().unwrap();
}

/// Sends one `len`-byte frame from `from` to `to` and waits for it intact.
fn crosses(from: &mut Guest, to: &mut Guest, len: usize, tag: u8) {
    let mut f = eth(to.mac, from.mac, 0x88b5, &[tag]);
    f.resize(len, tag);
    send(from, Packet::new(f.clone()));
    let mut seen = false;
    wait_until(&format!("a {len}-byte frame"), WAIT, || {
        let _ = receive(from);
        seen |= receive(to).iter().any(|p| p.data == f);
        seen
    });
}

#[test]
fn jumbo_frames_cross_the_ring_both_ways_and_longer_ones_are_dropped() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["a", "b"], |_, v| v.opts.mtu = Some(9000));
    let mut b = guests.pop().unwrap();
    let mut a = guests.pop().unwrap();
    assert_eq!(a.nf.info.mtu, 9000);
    crosses(&mut a, &mut b, 9014, 1);
    crosses(&mut b, &mut a, 9014, 2);
    let mut f = eth(b.mac, a.mac, 0x88b5, &[3]);
    f.resize(9015, 3);
    send(&mut a, Packet::new(f));
    wait_until("the oversize frame counted", WAIT, || {
        let _ = receive(&mut a);
        counter(&hv, drv_id, ids[0], "oversize") == 1
    });
    assert!(receive(&mut b).iter().all(|p| p.data.len() <= 9014));
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "4");
    hv.shutdown();
    driver.join().unwrap();
}

#[test]
fn without_scatter_gather_the_mtu_is_capped_at_one_slot() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["a", "b"], |_, v| {
        v.opts.mtu = Some(9000);
        v.offload = abi::offloads::Caps::NONE;
    });
    let mut b = guests.pop().unwrap();
    let mut a = guests.pop().unwrap();
    assert_eq!(
        a.nf.info.mtu, 4082,
        "capped at a page less the Ethernet header"
    );
    crosses(&mut a, &mut b, 4096, 1);
    crosses(&mut b, &mut a, 4096, 2);
    let mut f = eth(b.mac, a.mac, 0x88b5, &[3]);
    f.resize(4097, 3);
    send(&mut a, Packet::new(f));
    // It takes two slots, and the backend offered no scatter-gather.
    wait_until("the frame over one slot refused", WAIT, || {
        let _ = receive(&mut a);
        stats(&hv, drv_id, ids[0])["rejected"]["chain_too_long"] == 1
    });
    assert!(receive(&mut b).iter().all(|p| p.data.len() <= 4096));
    hv.shutdown();
    driver.join().unwrap();
}

const GROUP: [u8; 6] = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];

#[test]
fn a_multicast_group_goes_only_to_the_vifs_that_joined_it() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["sender", "member", "other"], |_, _| {});
    let mut other = guests.pop().unwrap();
    let mut member = guests.pop().unwrap();
    let mut sender = guests.pop().unwrap();
    let smac = sender.mac;
    // The backend offers filtering; the two receivers ask for it, the
    // member once it said which group it joined.
    assert!(member.nf.info.multicast);
    member.nf.set_multicast(&mut member.hv, &[GROUP]).unwrap();
    for g in [&mut member, &mut other] {
        g.nf.request_multicast_control(&mut g.hv, true).unwrap();
    }
    for &g in &ids[1..] {
        let fe = format!("/local/domain/{g}/device/vif/0/request-multicast-control");
        assert_eq!(store_read(&hv, &fe).as_deref(), Some("1"));
    }
    // Broadcasts touch every vif, so their filters show in their stats.
    wait_until("both filters on in the backend", WAIT, || {
        send(
            &mut sender,
            Packet::new(eth([0xff; 6], smac, 0x88b5, &[0xaa; 60])),
        );
        for g in [&mut sender, &mut member, &mut other] {
            let _ = receive(g);
        }
        let groups = |g| stats(&hv, drv_id, g)["mcast_groups"].as_u64();
        groups(ids[1]) == Some(1) && groups(ids[2]) == Some(0)
    });
    assert_eq!(
        stats(&hv, drv_id, ids[0])["mcast_groups"],
        serde_json::Value::Null
    );
    assert_eq!(member.nf.multicast_groups(), &[GROUP]);
    // Once the backend has taken the join, the group's frames reach member.
    let mut tag = 0u8;
    wait_until("a group frame at the member", WAIT, || {
        tag = tag.wrapping_add(1);
        send(
            &mut sender,
            Packet::new(eth(GROUP, smac, 0x88b5, &[tag; 60])),
        );
        let _ = receive(&mut sender);
        !receive(&mut member).is_empty()
    });
    // More group frames, and a broadcast: other sees only the broadcast.
    for t in 0..20u8 {
        send(&mut sender, Packet::new(eth(GROUP, smac, 0x88b5, &[t; 60])));
    }
    send(
        &mut sender,
        Packet::new(eth([0xff; 6], smac, 0x88b5, &[0xbb; 60])),
    );
    let (mut at_member, mut at_other) = (Vec::new(), Vec::new());
    wait_until("the broadcast at both", WAIT, || {
        let _ = receive(&mut sender);
        at_member.extend(receive(&mut member));
        at_other.extend(receive(&mut other));
        let bc = |v: &Vec<Packet>| v.iter().any(|p| p.data[..6] == [0xff; 6]);
        bc(&at_member) && bc(&at_other)
    });
    assert!(at_member.iter().filter(|p| p.data[..6] == GROUP).count() >= 20);
    assert!(
        at_other.iter().all(|p| p.data[..6] != GROUP),
        "a vif that did not join got the group's frames"
    );
    // Leaving the group stops it: the leave goes out on member's TX ring,
    // which the backend serves before member's next frame, a broadcast;
    // once that is through, none of 20 group frames sent after it arrives.
    member.nf.set_multicast(&mut member.hv, &[]).unwrap();
    let mmac = member.mac;
    let after_leave = eth([0xff; 6], mmac, 0x88b5, &[0xdd; 60]);
    send(&mut member, Packet::new(after_leave.clone()));
    wait_until("member's broadcast after the leave", WAIT, || {
        let _ = receive(&mut member);
        receive(&mut sender).iter().any(|p| p.data == after_leave)
    });
    assert_eq!(
        group_frames_before_marker(&mut sender, &mut member, GROUP, 20),
        0
    );
    assert_eq!(counter(&hv, drv_id, ids[1], "mcast_refused"), 0);
    hv.shutdown();
    driver.join().unwrap();
}

/// Sends `n` frames to `group`, then a broadcast marker, from `sender`: how
/// many of the group's frames `g` got before the marker (frames from one
/// vif arrive in order, so none of them is still on the way).
fn group_frames_before_marker(sender: &mut Guest, g: &mut Guest, group: [u8; 6], n: u8) -> usize {
    let smac = sender.mac;
    for t in 0..n {
        send(sender, Packet::new(eth(group, smac, 0x88b5, &[t; 60])));
    }
    let marker = eth([0xff; 6], smac, 0x88b5, &[0xcc; 60]);
    send(sender, Packet::new(marker.clone()));
    let mut got = Vec::new();
    wait_until("the broadcast marker", WAIT, || {
        let _ = receive(sender);
        got.extend(receive(g));
        got.iter().any(|p| p.data == marker)
    });
    let end = got.iter().position(|p| p.data == marker).unwrap();
    got[..end].iter().filter(|p| p.data[..6] == group).count()
}

/// Waits until the backend filters `g`'s multicast (`Some` groups) or not.
fn wait_filtering(
    hv: &Arc<Hypervisor>,
    drv: DomId,
    id: DomId,
    sender: &mut Guest,
    g: &mut Guest,
    on: bool,
) {
    let smac = sender.mac;
    wait_until(
        "the backend to take request-multicast-control",
        WAIT,
        || {
            // Broadcasts touch every vif, so its filter shows in its stats.
            send(
                sender,
                Packet::new(eth([0xff; 6], smac, 0x88b5, &[0xaa; 60])),
            );
            let _ = receive(sender);
            let _ = receive(g);
            stats(hv, drv, id)["mcast_groups"].is_u64() == on
        },
    );
}

#[test]
fn more_groups_than_the_filter_holds_turn_filtering_off_until_fewer() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["sender", "member"], |_, _| {});
    let mut member = guests.pop().unwrap();
    let mut sender = guests.pop().unwrap();
    let node = format!(
        "/local/domain/{}/device/vif/0/request-multicast-control",
        ids[1]
    );
    // One group: told first, filtering asked for on the next round.
    assert!(member
        .nf
        .sync_multicast(&mut member.hv, &[GROUP], true)
        .unwrap());
    assert_eq!(store_read(&hv, &node), None);
    assert!(member
        .nf
        .sync_multicast(&mut member.hv, &[GROUP], true)
        .unwrap());
    assert_eq!(store_read(&hv, &node).as_deref(), Some("1"));
    wait_filtering(&hv, drv_id, ids[1], &mut sender, &mut member, true);
    let past: [u8; 6] = [0x01, 0x00, 0x5e, 0x7f, 0, 0x40];
    assert_eq!(
        group_frames_before_marker(&mut sender, &mut member, past, 5),
        0
    );
    // 65 groups, the 65th `past`: no filtering, so its frames come.
    let many: Vec<[u8; 6]> = (0..=driver_domain::switch::mcast::MCAST_MAX as u8)
        .map(|i| [0x01, 0x00, 0x5e, 0x7f, 0, i])
        .collect();
    assert_eq!(many.len(), driver_domain::switch::mcast::MCAST_MAX + 1);
    assert!(member
        .nf
        .sync_multicast(&mut member.hv, &many, true)
        .unwrap());
    assert_eq!(store_read(&hv, &node).as_deref(), Some("0"));
    wait_filtering(&hv, drv_id, ids[1], &mut sender, &mut member, false);
    assert_eq!(
        group_frames_before_marker(&mut sender, &mut member, past, 5),
        5
    );
    // Back under the limit: filtering again, once the groups are told.
    while !member
        .nf
        .sync_multicast(&mut member.hv, &[GROUP], true)
        .unwrap()
    {}
    member
        .nf
        .sync_multicast(&mut member.hv, &[GROUP], true)
        .unwrap();
    assert_eq!(store_read(&hv, &node).as_deref(), Some("1"));
    wait_filtering(&hv, drv_id, ids[1], &mut sender, &mut member, true);
    assert_eq!(
        group_frames_before_marker(&mut sender, &mut member, past, 5),
        0
    );
    assert_eq!(
        group_frames_before_marker(&mut sender, &mut member, GROUP, 5),
        5
    );
    assert_eq!(counter(&hv, drv_id, ids[1], "mcast_refused"), 0);
    hv.shutdown();
    driver.join().unwrap();
}

fn mcast_add(i: u16) -> [TxRequest; 2] {
    let x = ExtraInfo {
        flags: ExtraFlags::EMPTY,
        extra: Extra::McastAdd {
            addr: [0x33, 0x33, 0, 0, (i >> 8) as u8, i as u8],
        },
    };
    let r = TxRequest {
        gref: 0,
        offset: 0,
        flags: TxFlags::EXTRA_INFO,
        id: i,
        size: 0,
    };
    [r, x.to_tx_slot()]
}

#[test]
fn a_flood_of_mcast_add_extras_is_bounded_and_counted() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["good1", "good2", "evil"], |_, _| {});
    let mut evil = guests.pop().unwrap();
    let mut good2 = guests.pop().unwrap();
    let mut good1 = guests.pop().unwrap();
    let total = 300u16;
    for chunk in (0..total).collect::<Vec<_>>().chunks(100) {
        let reqs: Vec<TxRequest> = chunk.iter().flat_map(|&i| mcast_add(i)).collect();
        push(&mut evil, &reqs);
        wait_until("the backend to answer the flood", WAIT, || {
            evil.nf.tx_ring().unconsumed_responses().unwrap_or(0) >= reqs.len() as u32
        });
        while evil.nf.tx_ring().next_response().unwrap().is_some() {}
        good_traffic_flows(&mut good1, &mut good2, 20, u32::from(chunk[0]));
    }
    let refused = u64::from(total) - driver_domain::switch::mcast::MCAST_MAX as u64;
    wait_until("the refusals counted", WAIT, || {
        counter(&hv, drv_id, ids[2], "mcast_refused") == refused
    });
    // A resource limit, not a protocol error: evil stays connected.
    assert_eq!(backend_state(&hv, drv_id, ids[2]), "4");
    assert_eq!(
        stats(&hv, drv_id, ids[2])["rejected"],
        serde_json::json!({})
    );
    good_traffic_flows(&mut good2, &mut good1, 50, 9000);
    hv.shutdown();
    driver.join().unwrap();
}

#[test]
fn a_bad_option_node_refuses_the_vif_with_a_reason_and_others_flow() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_configured(
        &["good1", "good2", "bad"],
        Grants::Ngm,
        TxMode::Gather,
        |n| n != "bad",
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        |i, v| {
            if i == 2 {
                v.opts.mtu = Some(20_000);
            }
        },
    );
    let mut good2 = guests.pop().unwrap();
    let mut good1 = guests.pop().unwrap();
    let be = format!("/local/domain/{drv_id}/backend/vif/{}/0", ids[2]);
    wait_until("the bad vif refused", WAIT, || {
        backend_state(&hv, drv_id, ids[2]) == "6"
    });
    let why = store_read(&hv, &format!("{be}/disconnect-reason")).unwrap_or_default();
    assert!(why.contains("mtu") && why.contains("20000"), "{why}");
    assert_eq!(stats(&hv, drv_id, ids[2])["rejected"]["bad_vif_option"], 1);
    good_traffic_flows(&mut good1, &mut good2, 50, 0);
    hv.shutdown();
    driver.join().unwrap();
}

#[test]
fn options_changed_in_place_are_taken_together_or_refused_together() {
    let World {
        hv,
        drv_id,
        ids,
        mut guests,
        driver,
        ..
    } = world_set(&["a", "b"], |_, _| {});
    let mut b = guests.pop().unwrap();
    let mut a = guests.pop().unwrap();
    let be = format!("/local/domain/{drv_id}/backend/vif/{}/0", ids[0]);
    let taken = || store_read(&hv, &format!("{be}/splitnet-options-taken")).unwrap_or_default();
    // A good address filter beside a bad MTU: neither is taken, the vif
    // stays connected and keeps its old options (no filter).
    store_write(&hv, &format!("{be}/ip"), "10.0.0.1");
    store_write(&hv, &format!("{be}/mtu"), "20000");
    store_write(&hv, &format!("{be}/splitnet-options"), "1");
    wait_until("the change refused", WAIT, || taken().starts_with("1 "));
    assert!(
        taken().contains("refused") && taken().contains("20000"),
        "{}",
        taken()
    );
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "4");
    let p = udp4(&a, b.mac, [10, 0, 0, 9], false, 1);
    send(&mut a, p);
    wait_until("a's frame from any address", WAIT, || {
        !receive(&mut b).is_empty()
    });
    // Put right, the filter holds: a spoofed frame is dropped, a good one passes.
    store_write(&hv, &format!("{be}/mtu"), "1500");
    store_write(&hv, &format!("{be}/splitnet-options"), "2");
    wait_until("the change taken", WAIT, || taken() == "2");
    for (src, tag) in [([10, 0, 0, 9], 3), ([10, 0, 0, 1], 4)] {
        let p = udp4(&a, b.mac, src, false, tag);
        send(&mut a, p);
    }
    let mut got = Vec::new();
    wait_until("the good frame", WAIT, || {
        got.extend(receive(&mut b));
        !got.is_empty() && counter(&hv, drv_id, ids[0], "spoofed") == 1
    });
    assert!(
        got.iter().all(|p| p.data.last() == Some(&4)),
        "a spoofed frame passed"
    );
    hv.shutdown();
    driver.join().unwrap();
}
