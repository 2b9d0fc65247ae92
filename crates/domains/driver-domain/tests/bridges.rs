//! Several bridges and VLANs in one driver domain, with a real hv, the real
//! driver loop and real frontends in process: a frame never crosses from
//! one bridge to another nor from one VLAN to another, and a tagged frame
//! from an access vif is dropped and counted.

mod common;

use common::*;
use frame::packet::Packet;
use netfront::Netfront;
use std::time::Duration;
use toolstack::topology::VifOptions;

const BCAST: [u8; 6] = [0xff; 6];

fn on(bridge: &str, vlan: Option<u16>) -> VifOptions {
    VifOptions {
        bridge: Some(bridge.into()),
        vlan,
        ..VifOptions::default()
    }
}

/// Sends `frames` from guest `g` and waits until its backend counted them
/// as sent on (the driver has then delivered each wherever it goes).
fn send_all(w: &mut World, g: usize, frames: Vec<Packet>, counter: &str) {
    let before = stats(&w.hv, w.drv_id, w.ids[g])[counter]
        .as_u64()
        .unwrap_or(0);
    let n = frames.len() as u64;
    let guest = &mut w.guests[g];
    for f in frames {
        assert!(guest.nf.can_send());
        guest.nf.send(&mut guest.hv, f).unwrap();
    }
    guest.nf.flush().unwrap();
    let (hv, drv, id) = (w.hv.clone(), w.drv_id, w.ids[g]);
    wait_until(
        &format!("guest {g}'s frames counted in {counter}"),
        WAIT,
        || {
            let mut ignore = Vec::new();
            let guest = &mut w.guests[g];
            guest.nf.poll(&mut guest.hv, &mut ignore).unwrap();
            let c = &stats(&hv, drv, id);
            let got = match counter {
                "tx_packets" => c["tx_packets"].as_u64(),
                _ => c["drops"][counter].as_u64(),
            };
            got.unwrap_or(0) >= before + n
        },
    );
}

/// The frames guest `g` has received from `src`.
fn received_from(w: &mut World, g: usize, src: [u8; 6]) -> Vec<Packet> {
    let guest = &mut w.guests[g];
    let mut rx = Vec::new();
    for _ in 0..3 {
        guest.nf.poll(&mut guest.hv, &mut rx).unwrap();
    }
    rx.retain(|p| p.data.len() >= 12 && p.data[6..12] == src);
    rx
}

fn tagged(p: Packet, vid: u16) -> Packet {
    let mut d = p.data[..12].to_vec();
    d.extend_from_slice(&[0x81, 0x00]);
    d.extend_from_slice(&vid.to_be_bytes());
    d.extend_from_slice(&p.data[12..]);
    Packet::new(d)
}

#[test]
fn frames_stay_on_their_bridge_and_in_their_vlan() {
    let names = ["plain0", "plain1", "v10a", "v10b", "v20"];
    let opts = [
        on("xenbr0", None),
        on("xenbr1", None),
        on("xenbr0", Some(10)),
        on("xenbr0", Some(10)),
        on("xenbr0", Some(20)),
    ];
    let mut w = world_with(&names, &opts, |_| true);
    let mac: Vec<[u8; 6]> = w.guests.iter().map(|g| g.mac).collect();

    // Two guests of VLAN 10 reach each other, both ways.
    {
        let (a, rest) = w.guests.split_at_mut(3);
        good_traffic_flows(&mut a[2], &mut rest[0], 16, 0);
        good_traffic_flows(&mut rest[0], &mut a[2], 16, 100);
    }
    // Nothing of that reached the others.
    for g in [0, 1, 4] {
        assert!(received_from(&mut w, g, mac[2]).is_empty(), "guest {g}");
        assert!(received_from(&mut w, g, mac[3]).is_empty(), "guest {g}");
    }

    // plain0 (xenbr0, no VLAN) broadcasts and sends to plain1's MAC, which
    // is on xenbr1: nobody receives any of it.
    let frames = (0..4)
        .map(|i| frame(BCAST, mac[0], i))
        .chain((0..4).map(|i| frame(mac[1], mac[0], 10 + i)))
        .collect();
    send_all(&mut w, 0, frames, "tx_packets");
    for g in 1..5 {
        assert!(received_from(&mut w, g, mac[0]).is_empty(), "guest {g}");
    }

    // A broadcast on VLAN 10 reaches VLAN 10 only.
    let frames = (0..4).map(|i| frame(BCAST, mac[2], 200 + i)).collect();
    send_all(&mut w, 2, frames, "tx_packets");
    wait_until("VLAN 10's broadcasts", WAIT, || {
        received_from(&mut w, 3, mac[2]).len() == 4
    });
    for g in [0, 1, 4] {
        assert!(received_from(&mut w, g, mac[2]).is_empty(), "guest {g}");
    }

    // v20 claims VLAN 10 with a tag: dropped, counted on its vif.
    let frames = (0..3)
        .map(|i| tagged(frame(BCAST, mac[4], 300 + i), 10))
        .collect();
    send_all(&mut w, 4, frames, "vlan_tagged");
    for g in 0..4 {
        assert!(received_from(&mut w, g, mac[4]).is_empty(), "guest {g}");
    }

    // The driver's status names both bridges and their ports.
    let doc: serde_json::Value = serde_json::from_str(
        &store_read(&w.hv, &format!("/local/domain/{}/splitnet/stats", w.drv_id)).unwrap(),
    )
    .unwrap();
    let bridges = doc["bridges"].as_array().expect("bridges in status");
    let ports = |name: &str| {
        bridges
            .iter()
            .find(|b| b["name"] == name)
            .map(|b| b["ports"].as_array().map_or(0, Vec::len))
    };
    assert_eq!(ports("xenbr0"), Some(4), "{doc}");
    assert_eq!(ports("xenbr1"), Some(1), "{doc}");
}

#[test]
fn a_bad_vlan_node_gives_the_vif_up_and_spares_the_others() {
    let names = ["good1", "good2", "bad"];
    let mut bad_vlan = on("xenbr0", None);
    // VLAN 4095 is reserved: the driver domain must refuse it.
    bad_vlan.vlan = Some(4095);
    let opts = [on("xenbr0", None), on("xenbr0", None), bad_vlan];
    let mut w = world_with(&names, &opts, |n| n != "bad");
    let (i, mut c) = w.unconnected.pop().expect("the bad guest");
    let g = w.ids[i];
    let r = Netfront::connect(
        &mut c,
        &format!("/local/domain/{g}/device/vif/0"),
        Duration::from_secs(5),
    );
    assert!(r.is_err(), "a vif with VLAN 4095 connected");
    let be = format!("/local/domain/{}/backend/vif/{g}/0", w.drv_id);
    wait_until("the bad vif given up", WAIT, || {
        backend_state(&w.hv, w.drv_id, g) == "6"
    });
    let reason = store_read(&w.hv, &format!("{be}/disconnect-reason")).unwrap_or_default();
    assert!(reason.contains("4095"), "reason: {reason:?}");
    let (a, b) = w.guests.split_at_mut(1);
    good_traffic_flows(&mut a[0], &mut b[0], 8, 0);
    wait_until("the refusal counted", WAIT, || {
        store_read(&w.hv, &format!("/local/domain/{}/splitnet/stats", w.drv_id))
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|d| d["loop"]["config_errors"] == 1)
    });
}

#[test]
fn uplinks_follow_the_store_and_bad_values_are_counted_and_ignored() {
    let names = ["g1", "g2"];
    let opts = [VifOptions::default(), VifOptions::default()];
    let mut w = world_with(&names, &opts, |_| true);
    let (hv, drv) = (w.hv.clone(), w.drv_id);
    let home = format!("/local/domain/{drv}/splitnet");
    let write = |path: String, value: &str| store_write(&hv, &path, value);
    let doc = || {
        store_read(&hv, &format!("{home}/stats"))
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .unwrap_or_default()
    };
    let uplinks = || {
        doc()["uplinks"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|u| format!("{}:{}:{}", u["name"], u["bridge"], u["vlan"]))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // An uplink without a VLAN is a trunk on its bridge; its interface is
    // missing, so it stays closed.
    write(format!("{home}/uplinks/nosuch0"), "bridge=xenbr0");
    wait_until("an uplink from uplinks/", WAIT, || {
        uplinks() == [r#""nosuch0":"xenbr0":"trunk""#]
    });
    write(format!("{home}/ports/nosuch9"), "hosted");
    // More entries; bad ones are counted and ignored.
    write(format!("{home}/uplinks/nosuch1"), "bridge=xenbr1,vlan=7");
    write(format!("{home}/uplinks/nosuch2"), "bridge=xenbr1,vlan=4095");
    write(format!("{home}/uplinks/nosuch3"), "vlan=7");
    write(
        format!("{home}/uplinks/nameoversixteenbytes"),
        "bridge=xenbr0",
    );
    wait_until("the uplinks from uplinks/", WAIT, || {
        uplinks() == [r#""nosuch0":"xenbr0":"trunk""#, r#""nosuch1":"xenbr1":7"#]
    });
    wait_until("the refusals counted", WAIT, || {
        doc()["loop"]["config_errors"] == 3
    });
    assert_eq!(doc()["extra_ports"][0]["name"], "nosuch9");
    assert_eq!(doc()["uplinks"][0]["open"], false);
    // Guests are not disturbed.
    let (a, b) = w.guests.split_at_mut(1);
    good_traffic_flows(&mut a[0], &mut b[0], 8, 0);
}
