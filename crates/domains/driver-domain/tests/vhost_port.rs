//! `VhostPort` between the bridge's frames and a VM driven by the vhost
//! crate's frontend: offload state crosses in the header, a frame whose
//! payload lives in another guest's shared buffers lands intact, and a VM
//! that takes no checksum offload gets finished frames.

extern crate splitnet_driver_domain as driver_domain;

#[path = "../../virtio/tests/common/mod.rs"]
mod common;

use abi::SharedMemory;
use common::*;
use driver_domain::port::vhost::VhostPort;
use driver_domain::port::Port;
use frame::offload::{checksum_setup, verify_l4_checksum};
use frame::packet::{Csum, FrameRef, Packet};
use std::os::fd::AsFd;
use vhost::VhostBackend;
use virtio::backend::device::{RX, TX};
use vm_memory::{Bytes, GuestAddress};

/// An Ethernet/IPv4/TCP frame with `payload` from the VM (its MAC the
/// source), its checksum left partial.
fn tcp4(payload: &[u8]) -> Packet {
    let mut f = vec![2, 0, 0, 0, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 8, 0];
    let tot = (20 + 20 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (tot >> 8) as u8,
        tot as u8,
        0,
        1,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[
        0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(payload);
    let mut p = Packet::new(f);
    // Fix the IPv4 header checksum, then leave TCP's partial (as a sender
    // with checksum offload does).
    let mut sum = 0u32;
    for c in p.data[14..34].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p.data[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    checksum_setup(&mut p, true).unwrap();
    p
}

fn port(tag: &str) -> (VhostPort, std::path::PathBuf) {
    let (l, path) = listener(tag);
    (VhostPort::open(tag, MAC, false, l.into()).unwrap(), path)
}

/// Connects a VM to `p` with `features` and starts its rings.
fn vm(p: &mut VhostPort, path: &std::path::PathBuf, features: u64) -> Vm {
    let fe = std::os::unix::net::UnixStream::connect(path).unwrap();
    testutil::wait_until("the VM connected", WAIT, || {
        p.recv_batch(&mut |_| {}).unwrap();
        p.status().unwrap()["connected"] == true
    });
    let mut vm = Vm::from_stream(fe);
    vm.negotiate(features);
    vm.fe.set_mem_table(&[vm.region()]).unwrap();
    vm.start_rings(0).unwrap();
    vm
}

#[test]
fn offload_state_crosses_both_ways_and_shared_payloads_land_intact() {
    let (mut p, path) = port("vp-both");
    let mut vm = vm(&mut p, &path, ALL);
    assert!(p.offloads().csum && p.offloads().tso4);

    // From the VM: NEEDS_CSUM at 34+16 becomes a partial checksum.
    let f = tcp4(&[7; 500]);
    let mut wire = vec![1, 0, 0, 0, 0, 0, 34, 0, 16, 0, 1, 0];
    wire.extend_from_slice(&f.data);
    vm.send(BUFS, &wire, 4096);
    let mut got = Vec::new();
    testutil::wait_until("the VM's frame at the port", WAIT, || {
        p.recv_batch(&mut |b| got.extend(b.iter().map(|fr| (fr.to_packet(), fr.csum))))
            .unwrap();
        !got.is_empty()
    });
    assert_eq!(got[0].0.data, f.data);
    assert_eq!(
        got[0].1,
        Csum::Partial {
            start: 34,
            offset: 16
        }
    );
    assert_eq!(p.counters().rx_packets, 1);
    // From the VM under another MAC: dropped and counted, never bridged.
    let mut spoofed = wire.clone();
    spoofed[12 + 6..12 + 12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    vm.send(BUFS + 0x1000, &spoofed, 4096);
    testutil::wait_until("the spoofed frame counted", WAIT, || {
        p.recv_batch(&mut |b| assert!(b.is_empty(), "a spoofed frame was bridged"))
            .unwrap();
        p.status().unwrap()["drops"]["spoofed"] == 1
    });
    assert_eq!(p.counters().rx_packets, 1);

    // To the VM: a frame whose payload is in a shared mapping (a
    // netfront guest's TX buffer), its checksum partial.
    let memfd = sys::Memfd::create("netfront", 8192, false).unwrap();
    let map = sys::Mapping::new(memfd.as_fd(), 0, 8192, true).unwrap();
    map.write_bytes(1000, &f.data[60..]);
    let segs = [(1000usize, f.data.len() - 60)];
    let fr = FrameRef {
        head: &f.data[..60],
        body: &[],
        map: Some(&map),
        segs: &segs,
        len: f.data.len(),
        csum: f.csum,
        gso: None,
        vlan: None,
    };
    vm.rings[RX].post(&vm.mem, &[(BUFS + 0x10000, 2048)], true);
    p.send_batch(&[&fr]);
    let used = vm.rings[RX].take_used(&vm.mem);
    assert_eq!(used, vec![(0, 12 + f.data.len() as u32)]);
    let mut back = vec![0u8; 12 + f.data.len()];
    vm.mem
        .read_slice(&mut back, GuestAddress(BUFS + 0x10000))
        .unwrap();
    assert_eq!(back[0], 1, "NEEDS_CSUM");
    assert_eq!(back[6..10], [34, 0, 16, 0]);
    assert_eq!(back[12..], f.data[..]);
    assert_eq!(p.counters().tx_packets, 1);
    let s = p.status().unwrap();
    assert_eq!(s["rx_packets"], 1);
    // The ring's count holds what the VM sent and the port passed; the
    // spoofed frame is a drop, and no work for the kick-storm judge.
    assert_eq!(s["tx_packets"], 1);
    assert_eq!(s["drops"]["spoofed"], 1);
    let _ = TX;
}

/// A VM that floods frames from a MAC not its own, each with a kick,
/// brings the driver domain no work: its kick is throttled as an empty
/// kick storm's is, and none of the frames counts as sent.
#[test]
fn a_flood_of_spoofed_frames_is_a_kick_storm() {
    use domain_common::storm::THRESHOLD;
    let (mut p, path) = port("vp-spoofstorm");
    let mut vm = vm(&mut p, &path, ALL);
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&tcp4(&[1; 64]).data);
    f[12 + 6..12 + 12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    let mut sent = 0u64;
    while p.status().unwrap()["kick_throttles"] == 0 && sent < 10 * u64::from(THRESHOLD) {
        vm.send(BUFS, &f, 4096);
        sent += 1;
        p.recv_batch(&mut |b| assert!(b.is_empty(), "a spoofed frame was bridged"))
            .unwrap();
    }
    let st = p.status().unwrap();
    assert_eq!(st["kick_throttles"], 1, "{st}");
    assert_eq!(st["spurious_kicks"], u64::from(THRESHOLD) + 1, "{st}");
    assert_eq!(st["drops"]["spoofed"], sent, "{st}");
    assert_eq!(st["tx_packets"], 0, "{st}");
}

#[test]
fn a_vm_without_checksum_offload_gets_finished_frames() {
    let (mut p, path) = port("vp-nocsum");
    let guest_csum = 1u64 << 1;
    let tso = (1u64 << 7) | (1 << 8);
    let mut vm = vm(&mut p, &path, ALL & !guest_csum & !tso);
    assert!(!p.offloads().csum);
    let f = tcp4(&[3; 300]);
    vm.rings[RX].post(&vm.mem, &[(BUFS, 2048)], true);
    p.send_batch(&[&FrameRef::private(&f.data, f.csum, None)]);
    assert_eq!(vm.rings[RX].take_used(&vm.mem).len(), 1);
    let mut back = vec![0u8; 12 + f.data.len()];
    vm.mem.read_slice(&mut back, GuestAddress(BUFS)).unwrap();
    assert_eq!(back[..10], [0; 10], "no offload state for this VM");
    assert!(verify_l4_checksum(&back[12..]).unwrap());
    // No buffer posted: dropped and counted on both sides.
    p.send_batch(&[&FrameRef::private(&f.data, Csum::Valid, None)]);
    assert_eq!(p.counters().tx_dropped, 1);
    assert_eq!(p.status().unwrap()["drops"]["no_rx_buffer"], 1);
}

/// Once warm, moving frames either way allocates nothing: the VM's TX
/// frames are copied into the port's one buffer, frames to it straight
/// into its buffers.
#[test]
fn the_data_path_allocates_nothing_per_frame() {
    let (mut p, path) = port("vp-alloc");
    let mut vm = vm(&mut p, &path, ALL);
    let f = tcp4(&[9; 1000]);
    let mut wire = vec![1, 0, 0, 0, 0, 0, 34, 0, 16, 0, 1, 0];
    wire.extend_from_slice(&f.data);
    let fr = FrameRef::private(&f.data, f.csum, None);
    for round in 0..3 {
        for k in 0..32u64 {
            vm.send(BUFS + k * 0x1000, &wire, 4096);
            vm.rings[RX].post(&vm.mem, &[(BUFS + 0x40000 + k * 0x1000, 2048)], true);
        }
        let mut n = 0;
        let got = allocation_counter::measure(|| {
            p.recv_batch(&mut |b| n += b.len()).unwrap();
            p.send_batch(&[&fr; 32]);
        });
        assert_eq!(n, 32);
        vm.rings[TX].take_used(&vm.mem);
        assert_eq!(vm.rings[RX].take_used(&vm.mem).len(), 32);
        if round > 0 {
            assert_eq!(got.count_total, 0, "allocations in round {round}");
        }
    }
}
