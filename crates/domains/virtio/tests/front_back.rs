//! The frontend against the driver domain's own backend (`backend`), in
//! one process: the backend sends every frame back (as the
//! `vhost_loopback` example does), and frames written on the frontend's
//! TAP through a packet socket come back to it byte for byte, among them
//! a TCP super-frame that crosses both rings whole (HOST_TSO4 one way,
//! GUEST_TSO4 the other).

mod front_common;

use front_common::{counter, nic_on_tap, Front};
use splitnet_virtio::backend::Backend;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use sys::{PacketSocket, VNET_HDR_LEN};

/// The backend, sending back what it gets, until `stop`.
fn loopback(sock: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let _ = std::fs::remove_file(sock);
    let listener = UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        let mac = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];
        let mut b = Backend::new("loop", mac, true, listener.into()).unwrap();
        let mut held: Vec<([u8; 10], Vec<u8>)> = (0..256).map(|_| ([0; 10], Vec::new())).collect();
        while !stop.load(Ordering::Relaxed) {
            let _ = sys::poll_readable(&[b.fd()], Some(Duration::from_millis(50)));
            let mut n = 0;
            b.poll(&mut |hdr, frame| {
                if n < held.len() {
                    held[n].0.copy_from_slice(hdr);
                    held[n].1.clear();
                    held[n].1.extend_from_slice(frame);
                    n += 1;
                }
                true
            })
            .unwrap();
            let mut rx = b.receive();
            for (hdr, f) in &held[..n] {
                rx.push(hdr, &[f], f.len());
            }
        }
    })
}

const ETHERTYPE: u16 = 0x88b5;

/// A frame of `len` bytes with the test's EtherType and a pattern
/// numbered `tag`.
fn frame(tag: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x77, 0x02, 0, 0, 0, 0, tag];
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend((0..len - 14).map(|i| (i as u8).wrapping_mul(31) ^ tag));
    f
}

/// A TCP/IPv4 super-frame of `payload` bytes in `mss` segments, with the
/// vnet header that asks for segmentation and a partial checksum.
fn tso_frame(payload: usize, mss: u16) -> ([u8; VNET_HDR_LEN], Vec<u8>) {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x77, 0x02, 0, 0, 0, 0, 0x55, 0x08, 0x00];
    let ip_len = (20 + 20 + payload) as u16;
    f.extend_from_slice(&[0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 1, 0x40, 0]);
    f.extend_from_slice(&[64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
    let sum = !ip_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    // TCP: ports, seq, ack, offset 5, ACK|PSH, window, checksum 0, urgent.
    f.extend_from_slice(&[
        0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend((0..payload).map(|i| (i % 251) as u8));
    let mut h = [0u8; VNET_HDR_LEN];
    h[0] = 1; // NEEDS_CSUM
    h[1] = 1; // GSO_TCPV4
    h[2..4].copy_from_slice(&54u16.to_ne_bytes());
    h[4..6].copy_from_slice(&mss.to_ne_bytes());
    h[6..8].copy_from_slice(&34u16.to_ne_bytes());
    h[8..10].copy_from_slice(&16u16.to_ne_bytes());
    (h, f)
}

fn ip_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The next frame of `ethertype` the socket receives (the vnet header
/// first, if it has one), within a deadline.
fn recv(s: &PacketSocket, ethertype: u16) -> Vec<u8> {
    let skip = if s.vnet_hdr() { VNET_HDR_LEN } else { 0 };
    let mut buf = vec![0u8; 70_000];
    testutil::wait_until("a frame back", Duration::from_secs(10), || loop {
        match s.recv(&mut buf).unwrap() {
            Some(n) if n >= skip + 14 && buf[skip + 12..skip + 14] == ethertype.to_be_bytes() => {
                return Some(buf[..n].to_vec())
            }
            Some(_) => {}
            None => return None,
        }
    })
}

#[test]
fn frames_cross_the_driver_domains_backend_intact() {
    let Some(_host) = testutil::root_or_skip("TAP devices and packet sockets") else {
        return;
    };
    let sock = format!("/tmp/vtback-{}.sock", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let backend = loopback(&sock, stop.clone());
    let (nic, tap_name) = nic_on_tap("vtb", true);
    let mut front = Front::start(nic, &sock);
    let st = front.wait_connected(1);
    let names: Vec<String> = serde_json::from_value(st["feature_names"].clone()).unwrap();
    for f in [
        "VERSION_1",
        "MRG_RXBUF",
        "HOST_TSO4",
        "GUEST_TSO4",
        "EVENT_IDX",
    ] {
        assert!(names.iter().any(|n| n == f), "{f} not negotiated: {st}");
    }
    let plain = PacketSocket::bind(&tap_name, false).unwrap();
    let before = counter(&front.status(), "rx_packets");
    for (tag, len) in [(1u8, 60usize), (2, 1514), (3, 600), (4, 1000)] {
        let f = frame(tag, len);
        plain.send(&[&f]).unwrap();
        assert_eq!(recv(&plain, ETHERTYPE), f, "frame {tag} of {len} bytes");
    }
    // A super-frame of 20000 bytes, over several receive buffers.
    let gso = PacketSocket::bind(&tap_name, true).unwrap();
    let (h, f) = tso_frame(20_000, 1448);
    gso.send(&[&h, &f]).unwrap();
    let got = recv(&gso, 0x0800);
    assert_eq!(got[1], 1, "still one TCPv4 super-frame");
    assert_eq!(&got[VNET_HDR_LEN..], &f[..], "its bytes intact");
    let st = front.status();
    assert!(counter(&st, "rx_packets") >= before + 5, "{st}");
    assert_eq!(
        st["drops"]
            .as_object()
            .unwrap()
            .values()
            .filter(|v| *v != 0)
            .count(),
        0,
        "{st}"
    );
    stop.store(true, Ordering::Relaxed);
    drop(front);
    backend.join().unwrap();
    let _ = std::fs::remove_file(&sock);
}
