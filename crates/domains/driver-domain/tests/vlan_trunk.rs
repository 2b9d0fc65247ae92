//! A trunk uplink on a real veth (root: it builds a veth pair with a name
//! of its own, `snvl<pid>a`/`b`, in the test's network namespace), with a
//! real hv, the driver loop and real frontends in process: a VLAN's frames
//! leave the trunk tagged, GSO and partial checksums included, and tagged
//! frames from the wire reach their VLAN's guests untagged, nobody else,
//! full-size and GSO ones whole.

mod common;

use common::*;
use frame::offload::checksum_setup;
use frame::packet::{Gso, GsoKind, Packet};
use std::process::Command;
use std::time::{Duration, Instant};
use sys::{PacketSocket, VlanTag};
use toolstack::topology::VifOptions;

const BCAST: [u8; 6] = [0xff; 6];
const V10: VlanTag = VlanTag {
    tpid: 0x8100,
    tci: 10,
};
/// A MAC on the wire's side.
const WIRE: [u8; 6] = [0x02, 0x53, 0x4e, 0, 0, 9];

/// Deletes the veth pair when dropped, even when the test panics.
struct Veth(String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn veth(a: &str, b: &str) -> Veth {
    let _ = Command::new("ip").args(["link", "del", a]).output();
    ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
    let v = Veth(a.into());
    for n in [a, b] {
        // No IPv6 autoconfiguration chatter on the test's wire.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{n}/disable_ipv6"), "1");
        ip(&["link", "set", n, "up"]);
    }
    testutil::wait_links_up(&[a, b]);
    v
}

fn tagged(f: &[u8], vid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00]);
    t.extend_from_slice(&vid.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

/// The next frame on `s` from `src`, waiting up to 5 s, with the VLAN tag
/// the receiving kernel took off it.
fn next_from(s: &PacketSocket, src: [u8; 6]) -> (Vec<u8>, Option<VlanTag>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 70000];
    loop {
        while let Some((n, tag)) = s.recv_tagged(&mut buf).expect("recv") {
            if n >= 14 && buf[6..12] == src {
                return (buf[..n].to_vec(), tag);
            }
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .expect("a frame from the guest on the wire");
        sys::poll_readable(&[std::os::fd::AsFd::as_fd(s)], Some(left)).expect("poll");
    }
}

/// A broadcast TCP/IPv4 frame from `src` with `n` bytes of payload and
/// a valid IPv4 header (the TCP checksum is left to `checksum_setup`).
fn tcp4(src: [u8; 6], n: usize) -> Vec<u8> {
    let mut f = BCAST.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 20 + n) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    let tcp = [
        0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ];
    f.extend_from_slice(&tcp);
    f.extend((0..n).map(|i| i as u8));
    f
}

fn received_from(g: &mut Guest, src: [u8; 6]) -> Vec<Packet> {
    let mut rx = Vec::new();
    for _ in 0..3 {
        g.nf.poll(&mut g.hv, &mut rx).unwrap();
    }
    rx.retain(|p| p.data.len() >= 12 && p.data[6..12] == src);
    rx
}

fn send(g: &mut Guest, p: Packet) {
    g.nf.send(&mut g.hv, p).unwrap();
    g.nf.flush().unwrap();
}

#[test]
fn a_trunk_uplink_tags_and_untags_each_vlan() {
    let Some(_host) = testutil::root_or_skip("builds a veth pair") else {
        return;
    };
    let (a, b) = {
        let n = std::process::id() % 100_000;
        (format!("snvl{n}a"), format!("snvl{n}b"))
    };
    let _link = veth(&a, &b);
    let wire = PacketSocket::bind(&b, false).expect("bind the wire end");
    let opts = [None, Some(10), Some(20)].map(|vlan| VifOptions {
        vlan,
        ..VifOptions::default()
    });
    let mut w = world_with(&["untagged", "v10", "v20"], &opts, |_| true);
    // The toolstack names the uplink: a trunk on the default bridge.
    let (drv, hv) = (w.drv_id, w.hv.clone());
    store_write(
        &hv,
        &format!("/local/domain/{drv}/splitnet/uplinks/{a}"),
        "bridge=xenbr0",
    );
    let stats = || {
        store_read(&hv, &format!("/local/domain/{drv}/splitnet/stats"))
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .unwrap_or_default()
    };
    wait_until("the uplink open", WAIT, || {
        stats()["uplinks"][0]["open"] == true
    });
    let mac: Vec<[u8; 6]> = w.guests.iter().map(|g| g.mac).collect();

    // Out: VLAN 10 leaves tagged; "no VLAN" untagged.
    let f = frame(BCAST, mac[1], 1);
    send(&mut w.guests[1], f.clone());
    assert_eq!(next_from(&wire, mac[1]), (f.data, Some(V10)));
    let f = frame(BCAST, mac[0], 2);
    send(&mut w.guests[0], f.clone());
    assert_eq!(next_from(&wire, mac[0]), (f.data, None));

    // Out, offloaded: a TCP GSO packet with a partial checksum crosses
    // the trunk tagged and whole (the kernel takes it with csum_start
    // moved by the tag).
    let mut p = Packet::new(tcp4(mac[1], 3000));
    checksum_setup(&mut p, true).unwrap();
    p.gso = Some(Gso {
        kind: GsoKind::TcpV4,
        size: 1448,
        ecn: false,
    });
    send(&mut w.guests[1], p.clone());
    let (got, tag) = next_from(&wire, mac[1]);
    assert_eq!(tag, Some(V10));
    assert_eq!(got[..34], p.data[..34]);
    assert_eq!(got[54..], p.data[54..], "the payload crossed intact");
    assert_eq!(stats()["uplinks"][0]["counters"]["tx_dropped"], 0);

    // In: VLAN 20 from the wire reaches v20 only, untagged.
    let mut f = frame(mac[2], WIRE, 3).data;
    f[..6].copy_from_slice(&BCAST);
    wire.send(&[&tagged(&f, 20)]).unwrap();
    wait_until("VLAN 20's frame at v20", WAIT, || {
        received_from(&mut w.guests[2], WIRE)
            .iter()
            .any(|p| p.data == f)
    });
    for g in [0, 1] {
        assert!(
            received_from(&mut w.guests[g], WIRE).is_empty(),
            "guest {g}"
        );
    }
    // Untagged from the wire: "no VLAN" only.
    let f = frame(BCAST, WIRE, 4).data;
    wire.send(&[&f]).unwrap();
    wait_until("the untagged frame at the untagged guest", WAIT, || {
        received_from(&mut w.guests[0], WIRE)
            .iter()
            .any(|p| p.data == f)
    });
    for g in [1, 2] {
        assert!(
            received_from(&mut w.guests[g], WIRE).is_empty(),
            "guest {g}"
        );
    }
    inbound_full_size(&mut w, &b, &wire);
    assert_eq!(
        stats()["bridge"]["counters"]["vlan_dropped"],
        0,
        "{}",
        stats()
    );
}

/// Full-size frames from the wire (the kernel takes their tag off) reach
/// their VLAN's guest whole: a 1500-byte IP packet to VLAN 20, the same
/// priority-tagged (VID 0) to the untagged guest, and a TCP GSO packet
/// (through a `PACKET_VNET_HDR` socket) to VLAN 20.
fn inbound_full_size(w: &mut World, b: &str, wire: &PacketSocket) {
    let mut p = Packet::new(tcp4(WIRE, 1460));
    checksum_setup(&mut p, false).unwrap();
    for (vid, g) in [(20, 2), (0x6000, 0)] {
        wire.send(&[&tagged(&p.data, vid)]).unwrap();
        assert_eq!(payload_at(&mut w.guests[g], 1460), p.data[54..], "{vid:#x}");
    }
    let mut gso = Packet::new(tcp4(WIRE, 20000));
    checksum_setup(&mut gso, true).unwrap();
    let frame::packet::Csum::Partial { start, offset } = gso.csum else {
        panic!("partial")
    };
    let on_wire = Packet {
        data: tagged(&gso.data, 20),
        csum: frame::packet::Csum::Partial {
            start: start + 4,
            offset,
        },
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        }),
    };
    let vnet = PacketSocket::bind(b, true).expect("bind a vnet socket on the wire end");
    vnet.send(&[&on_wire.vnet_hdr(), &on_wire.data]).unwrap();
    assert_eq!(payload_at(&mut w.guests[2], 20000), gso.data[54..]);
}

/// The TCP payload (after a 54-byte header) of what `g` receives from
/// the wire, packet after packet, until there are `n` bytes.
fn payload_at(g: &mut Guest, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    wait_until("the wire's frames at the guest", WAIT, || {
        for p in received_from(g, WIRE) {
            got.extend_from_slice(&p.data[54.min(p.data.len())..]);
        }
        got.len() >= n
    });
    got
}
