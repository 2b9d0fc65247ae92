//! Serves one vhost-user net device on a socket and sends every frame the
//! VM transmits straight back to it, printing the backend's status each
//! second: a bench for trying a real frontend (QEMU, DPDK's virtio_user)
//! against the backend by hand.
//!
//! `cargo run -p splitnet-virtio --example vhost_loopback -- SOCK [SECONDS]`

use splitnet_virtio::backend::Backend;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: vhost_loopback SOCK [SECONDS]");
    let secs: u64 = args.next().map_or(30, |s| s.parse().expect("seconds"));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("bind");
    let mac = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];
    let mut b = Backend::new("loop", mac, false, listener.into()).expect("backend");
    let end = Instant::now() + Duration::from_secs(secs);
    let mut last = Instant::now();
    // Frames the VM sent this turn, to go back to it.
    let mut held: Vec<([u8; 10], Vec<u8>)> = (0..256).map(|_| ([0; 10], Vec::new())).collect();
    while Instant::now() < end {
        let _ = sys::poll_readable(&[b.fd()], Some(Duration::from_millis(100)));
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
        .expect("poll");
        let mut rx = b.receive();
        for (hdr, f) in &held[..n] {
            rx.push(hdr, &[f], f.len());
        }
        drop(rx);
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            println!("{}", b.status());
        }
    }
    println!("{}", b.status());
}
