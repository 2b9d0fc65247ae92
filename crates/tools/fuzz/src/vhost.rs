//! The driver domain's vhost-user backend against what a hostile VM
//! controls: the rings and buffers in its memory, and the bytes of its
//! control connection.

use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use virtio::backend::control;
use virtio::backend::device::{self, Device, Part, Region, RX, TX};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest memory of the ring target.
const MEM: u64 = 64 * 1024;

/// Both split rings in a small guest memory whose every byte (descriptor
/// tables, avail rings, buffers, indices) comes from the input: the
/// backend takes frames from the TX ring and writes frames into the RX
/// ring. It may drop, count, or break the connection, but never reads or
/// writes outside guest memory, never hands on more than a frame, and
/// never panics.
pub fn vhost_ring(data: &[u8]) {
    let Some((cfg, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM as usize)])
        .expect("anonymous guest memory");
    // The input fills guest memory from address 0, repeated.
    if !rest.is_empty() {
        let mut at = 0;
        while at < MEM {
            let n = rest.len().min((MEM - at) as usize);
            mem.write_slice(&rest[..n], GuestAddress(at))
                .expect("inside");
            at += n as u64;
        }
    }
    let mut d = Device::new([2, 0, 0, 0, 0, 1]);
    // Any subset of the offered features (MRG_RXBUF, EVENT_IDX, ...).
    d.features = device::OFFERED & u64::from_le_bytes(*cfg).rotate_left(15);
    d.mem = Some(mem);
    d.table = vec![Region {
        guest: 0,
        size: MEM,
        user: 0x1000_0000,
    }];
    for (i, r) in d.rings.iter_mut().enumerate() {
        let size = 1u16 << (cfg[1 + i] % 9);
        let _ = r.queue.try_set_size(size);
        let base = 0x1000_0000 + u64::from(cfg[3 + 2 * i] & 0x3f) * 0x400;
        let used = 0x1000_0000 + u64::from(cfg[4 + 2 * i] & 0x3f) * 0x400;
        r.addr = Some([base, used, base + 16 * u64::from(size)]);
        r.started = true;
        r.enabled = true;
    }
    for i in [RX, TX] {
        let _ = d.arm(i);
    }
    // Two slots, taken until the ring is drained, stopped or broken.
    let mut slab = vec![0u8; 2 * device::TX_SLOT];
    for _ in 0..32 {
        let mut lens = [0usize; 2];
        let (n, _, more) = d.tx(&mut slab, &mut lens);
        for &len in &lens[..n] {
            assert!((d.hdr_len()..=device::TX_SLOT).contains(&len));
        }
        if !more {
            break;
        }
    }
    let frame = [0x5au8; 3000];
    for k in 0..8 {
        let len = 60 + k * 400;
        d.rx(
            &[0; 10],
            &[
                Part::Bytes(&frame[..len.min(100)]),
                Part::Bytes(&frame[100.min(len)..len]),
            ],
            len,
        );
    }
    d.rx_done();
    assert!(d.counters.tx_packets + d.counters.drops.bad_header <= 64);
}

/// A wake-up that goes nowhere.
struct NoWake;

impl control::Wake for NoWake {
    fn wake(&self) {}
}

/// The input as the bytes of a vhost-user connection (no descriptors
/// attached): the vhost crate parses each message and splitnet's handler
/// answers, until the input ends or a message is refused. The connection
/// closes with its reason counted; nothing panics.
pub fn vhost_messages(data: &[u8]) {
    let data = &data[..data.len().min(16 * 1024)];
    let (backend, mut frontend) = UnixStream::pair().expect("socketpair");
    std::io::Write::write_all(&mut frontend, data).expect("fits the socket buffer");
    frontend
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let dev = Arc::new(Mutex::new(Device::new([2, 0, 0, 0, 0, 1])));
    control::serve(backend, dev.clone(), 0, NoWake);
    let d = dev.lock().expect("not poisoned");
    assert!(!d.connected);
    assert!(d.mem.is_none(), "no memory without descriptors");
    assert_eq!(d.refused.values().sum::<u64>() + d.disconnects, 1);
}
