//! The backend against the vhost crate's frontend, over a real socket,
//! with rings in a memfd: frames cross both ways intact, rings stop and
//! resume, and every hostile input is refused and counted while the
//! backend (and another VM's) keeps going.

extern crate splitnet_virtio as virtio;

mod common;

use common::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use vhost::vhost_user::message::VhostUserConfigFlags;
use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use virtio::backend::device::{self, RX, TX};
use virtio::backend::Backend;
use vm_memory::{Bytes, GuestAddress};

/// A frame with a virtio_net_hdr (NEEDS_CSUM at 34+16) in front.
fn tx_frame(len: usize, marker: u8) -> Vec<u8> {
    let mut v = vec![1, 0, 0, 0, 0, 0, 34, 0, 16, 0, 0, 0];
    v.extend((0..len).map(|i| marker ^ i as u8));
    v
}

/// Takes what the VM sent: (header, frame) pairs.
fn drain(b: &mut Backend, want: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    testutil::wait_until("the VM's frames", WAIT, || {
        b.poll(&mut |h, f| {
            got.push((h.to_vec(), f.to_vec()));
            true
        })
        .unwrap();
        if got.len() < want {
            Err(format!("{} of {want}", got.len()))
        } else {
            Ok(())
        }
    });
    got
}

#[test]
fn frames_cross_both_ways_intact_and_the_vm_is_told() {
    let (mut b, path) = backend("both");
    let mut vm = Vm::up(&mut b, &path, ALL);
    assert!(b.connected());
    // TX: one frame over three descriptors, one in one.
    let f1 = tx_frame(3000, 7);
    let f2 = tx_frame(60, 9);
    vm.send(BUFS, &f1, 1100);
    vm.send(BUFS + 0x10000, &f2, 4096);
    let got = drain(&mut b, 2);
    assert_eq!(got[0].0, f1[..10]);
    assert_eq!(got[0].1, f1[12..]);
    assert_eq!(got[1].1, f2[12..]);
    let used = vm.rings[TX].take_used(&vm.mem);
    assert_eq!(used.len(), 2);
    assert!(wait_call(&vm.call[TX]) >= 1, "the VM hears about its TX");

    // RX: a 3000-byte frame into 1536-byte mergeable buffers.
    for k in 0..4u64 {
        vm.rings[RX].post(&vm.mem, &[(BUFS + 0x40000 + k * 0x1000, 1536)], true);
    }
    let frame: Vec<u8> = (0..3000).map(|i| (i * 7) as u8).collect();
    let vnet = [2, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    {
        let mut rx = b.receive();
        assert!(rx.offloads().csum && rx.offloads().tso4 && rx.offloads().tso6);
        rx.push(&vnet, &[&frame[..100], &frame[100..]], frame.len());
    }
    let used = vm.rings[RX].take_used(&vm.mem);
    assert_eq!(used, vec![(0, 1536), (1, 3012 - 1536)]);
    let mut back = vec![0u8; 3012];
    vm.mem
        .read_slice(&mut back[..1536], GuestAddress(BUFS + 0x40000))
        .unwrap();
    vm.mem
        .read_slice(&mut back[1536..], GuestAddress(BUFS + 0x41000))
        .unwrap();
    assert_eq!(back[..10], vnet);
    assert_eq!(u16::from_le_bytes([back[10], back[11]]), 2, "num_buffers");
    assert_eq!(back[12..], frame[..]);
    assert!(wait_call(&vm.call[RX]) >= 1);

    let s = b.status();
    assert_eq!(s["tx_packets"], 2);
    assert_eq!(s["rx_packets"], 1);
    assert_eq!(s["rx_bytes"], 3000);
    assert_eq!(s["connected"], true);
    assert_eq!(s["mac"], "52:54:00:12:34:56");
    assert_eq!(s["features"], format!("{:#x}", ALL));
    assert!(s["feature_names"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "MRG_RXBUF"));
    assert_eq!(s["rings"][1]["next_avail"], 2);
    assert_eq!(s["rings"][0]["size"], QSIZE);
    assert_eq!(s["memory_sealed"], true, "a splitnet memfd is sealed");

    // No buffer left for a frame: dropped and counted.
    let big = vec![0u8; 3000];
    b.receive().push(&vnet, &[&big], big.len());
    b.receive().push(&vnet, &[&big], big.len());
    assert_eq!(drops(&b, "no_rx_buffer"), 1);
}

#[test]
fn config_space_carries_the_mac_and_link_up() {
    let (mut b, path) = backend("config");
    let mut vm = Vm::connect(&mut b, &path);
    vm.negotiate(ALL);
    let (_, cfg) = vm
        .fe
        .get_config(0, 8, VhostUserConfigFlags::WRITABLE, &[0; 8])
        .unwrap();
    assert_eq!(cfg[..6], MAC);
    assert_eq!(u16::from_le_bytes([cfg[6], cfg[7]]), 1);
}

#[test]
fn without_mrg_rxbuf_a_frame_takes_one_chain_and_a_short_one_is_dropped() {
    let (mut b, path) = backend("nomrg");
    let features = ALL & !(1 << 15) & !(1 << 32);
    let mut vm = Vm::up(&mut b, &path, features);
    vm.rings[RX].post(&vm.mem, &[(BUFS, 10), (BUFS + 0x1000, 2000)], true);
    vm.rings[RX].post(&vm.mem, &[(BUFS + 0x2000, 500)], true);
    let frame = vec![5u8; 1500];
    let vnet = [0; 10];
    b.receive().push(&vnet, &[&frame], 1500);
    assert_eq!(vm.rings[RX].take_used(&vm.mem), vec![(0, 1510)]);
    b.receive().push(&vnet, &[&frame], 1500);
    assert_eq!(drops(&b, "oversize"), 1);
    assert!(vm.rings[RX].take_used(&vm.mem).is_empty());
}

#[test]
fn get_vring_base_stops_a_ring_and_a_new_connection_resumes_it() {
    let (mut b, path) = backend("restart");
    let mut vm = Vm::up(&mut b, &path, ALL);
    for k in 0..3 {
        vm.send(BUFS + k * 0x1000, &tx_frame(100, k as u8), 4096);
    }
    drain(&mut b, 3);
    assert_eq!(vm.fe.get_vring_base(TX).unwrap(), 3);
    // Stopped: a frame queued now stays in the ring.
    vm.send(BUFS + 0x8000, &tx_frame(100, 42), 4096);
    b.poll(&mut |_, _| panic!("a stopped ring moved")).unwrap();
    // The VMM reconnects (as QEMU's reconnect=1 does), with the same
    // guest memory, and restores the ring where it stopped.
    let mut vm = vm.reconnect(&mut b, &path);
    vm.negotiate(ALL);
    vm.fe.set_mem_table(&[vm.region()]).unwrap();
    vm.start_rings(3).unwrap();
    vm.kick[TX].write(1).unwrap();
    let got = drain(&mut b, 1);
    assert_eq!(got[0].1, tx_frame(100, 42)[12..]);
    assert_eq!(b.status()["rings"][1]["next_avail"], 4);
    assert_eq!(b.status()["disconnects"], 1);
}

/// Each bad memory table closes its connection with the reason counted;
/// the backend then serves the next connection.
#[test]
fn bad_memory_tables_are_refused_and_counted() {
    let (mut b, path) = backend("memtable");
    type Table = Box<dyn Fn(&Vm) -> Vec<VhostUserMemoryRegionInfo>>;
    let cases: Vec<(&str, Table)> = vec![
        (
            "overlapping_memory_table",
            Box::new(|vm: &Vm| {
                let mut r2 = vm.region();
                r2.guest_phys_addr = 0x1000;
                r2.userspace_addr = USER + (8 << 20);
                vec![vm.region(), r2]
            }),
        ),
        (
            "overlapping_memory_table",
            Box::new(|vm: &Vm| {
                let mut r2 = vm.region();
                r2.guest_phys_addr = 1 << 32;
                r2.userspace_addr = USER + 0x1000;
                vec![vm.region(), r2]
            }),
        ),
        (
            "bad_memory_table",
            Box::new(|vm: &Vm| {
                let mut r = vm.region();
                r.memory_size = 1 << 50;
                vec![r]
            }),
        ),
        (
            // Address arithmetic that overflows: the vhost crate refuses it.
            "invalid_message",
            Box::new(|vm: &Vm| {
                let mut r = vm.region();
                r.guest_phys_addr = u64::MAX - 0x1000;
                vec![r]
            }),
        ),
        (
            "bad_memory_fd",
            Box::new(|vm: &Vm| {
                // Past the end of the memfd: a mapping there would fault.
                let mut r = vm.region();
                r.mmap_offset = 1 << 20;
                vec![r]
            }),
        ),
        (
            "bad_memory_table",
            Box::new(|vm: &Vm| {
                (0..9)
                    .map(|k| {
                        let mut r = vm.region();
                        r.memory_size = 0x1000;
                        r.guest_phys_addr = k * 0x1000;
                        r.userspace_addr = USER + k * 0x1000;
                        r.mmap_offset = k * 0x1000;
                        r
                    })
                    .collect()
            }),
        ),
    ];
    for (reason, table) in &cases {
        let before = refused(&b, reason);
        let mut vm = Vm::connect(&mut b, &path);
        vm.negotiate(ALL);
        assert!(vm.fe.set_mem_table(&table(&vm)).is_err(), "{reason}");
        poll_until(&mut b, reason, |b| refused(b, reason) == before + 1);
        assert!(!b.connected());
        // The socket is shut down, not left open for the VMM to wait on.
        vm.raw
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        assert!(
            std::io::Read::read_to_end(&mut vm.raw, &mut rest).is_ok(),
            "{reason}: the refused connection stays open"
        );
    }
    // A good one still works.
    let mut vm = Vm::up(&mut b, &path, ALL);
    vm.send(BUFS, &tx_frame(64, 1), 4096);
    drain(&mut b, 1);
}

/// A descriptor outside the table, a looping chain, a chain naming a
/// slot outside the ring, an `avail` index a ring ahead: the connection
/// closes, the reason counted; another VM's backend keeps moving frames.
#[test]
fn hostile_rings_close_their_connection_and_spare_other_vms() {
    let (mut other, opath) = backend("bystander");
    let mut bystander = Vm::up(&mut other, &opath, ALL);
    let (mut b, path) = backend("hostile");
    type Poison = fn(&mut Vm);
    let cases: [(&str, &str, Poison); 5] = [
        ("bad_descriptor", "bad_descriptor", |vm| {
            vm.rings[TX].write_desc(&vm.mem, 0, MEM as u64 - 10, 100, 0, 0);
            vm.rings[TX].publish(&vm.mem, 0);
        }),
        ("bad_chain", "bad_chain", |vm| {
            vm.rings[TX].write_desc(&vm.mem, 0, BUFS, 100, 1, 1);
            vm.rings[TX].write_desc(&vm.mem, 1, BUFS, 100, 1, 0);
            vm.rings[TX].publish(&vm.mem, 0);
        }),
        ("bad_chain", "bad_chain", |vm| {
            vm.rings[TX].write_desc(&vm.mem, 0, BUFS, 100, 1, QSIZE + 5);
            vm.rings[TX].publish(&vm.mem, 0);
        }),
        ("bad_descriptor", "bad_descriptor", |vm| {
            // A device-writable buffer in a TX chain.
            vm.rings[TX].write_desc(&vm.mem, 0, BUFS, 100, 2, 0);
            vm.rings[TX].publish(&vm.mem, 0);
        }),
        ("bad_avail_index", "bad_avail_index", |vm| {
            let r = &vm.rings[TX];
            vm.mem
                .store(
                    QSIZE + 7,
                    GuestAddress(r.avail + 2),
                    std::sync::atomic::Ordering::Release,
                )
                .unwrap();
        }),
    ];
    for (reason, drop, poison) in cases {
        let (r0, d0) = (refused(&b, reason), drops(&b, drop));
        let mut vm = Vm::up(&mut b, &path, ALL);
        poison(&mut vm);
        vm.kick[TX].write(1).unwrap();
        poll_until(&mut b, reason, |b| refused(b, reason) == r0 + 1);
        assert_eq!(drops(&b, drop), d0 + 1, "{reason}");
        assert!(!b.connected());
        // The frontend finds its connection gone.
        assert!(vm.fe.get_features().is_err());
        // The other VM is untouched.
        bystander.send(BUFS, &tx_frame(80, 3), 4096);
        drain(&mut other, 1);
    }
}

#[test]
fn a_kick_storm_costs_one_wake_and_moves_nothing_extra() {
    let (mut b, path) = backend("storm");
    let mut vm = Vm::up(&mut b, &path, ALL);
    for _ in 0..100_000 {
        vm.kick[TX].write(1).unwrap();
    }
    // The kick descriptor is edge-triggered and never read: the storm
    // is one wake-up (the first poll registers it, the next sees it).
    for _ in 0..3 {
        b.poll(&mut |_, _| panic!("no frame was queued")).unwrap();
    }
    assert_eq!(b.status()["kicks"], 1);
    // A frame queued with no kick at all still goes when the loop looks.
    vm.mem
        .write_slice(&tx_frame(64, 5), GuestAddress(BUFS))
        .unwrap();
    vm.rings[TX].post(&vm.mem, &[(BUFS, 76)], false);
    let mut n = 0;
    b.poll(&mut |_, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 1);
}

/// A VM that kicks with nothing posted while the loop keeps looking (the
/// storm the driver loop sees: each kick a new edge) is throttled after a
/// run of spurious kicks (Xen XSA-332's late EOI): its kick leaves the
/// backend's event manager, so further kicks wake nothing, until the delay
/// is over; a frame posted meanwhile goes at that look, and one kick with
/// work ends the storm.
#[test]
fn a_kick_storm_the_loop_keeps_seeing_is_throttled_and_posted_frames_still_go() {
    use domain_common::storm::THRESHOLD;
    use std::time::Instant;
    let (mut b, path) = backend("throttle");
    let mut vm = Vm::up(&mut b, &path, ALL);
    let readable =
        |b: &Backend| sys::poll_readable(&[b.fd()], Some(std::time::Duration::ZERO)).unwrap()[0];
    let mut kicks = 0;
    while b.storm_due().is_none() && kicks < 10 * THRESHOLD {
        vm.kick[TX].write(1).unwrap();
        kicks += 1;
        b.poll(&mut |_, _| panic!("no frame was queued")).unwrap();
    }
    let st = b.status();
    assert_eq!(st["kick_throttles"], 1, "{st}");
    assert_eq!(st["spurious_kicks"], u64::from(THRESHOLD) + 1, "{st}");
    // Shut out: kicks make the backend readable no more.
    for _ in 0..1000 {
        vm.kick[TX].write(1).unwrap();
    }
    assert!(!readable(&b), "a throttled kick still wakes the loop");
    // A frame posted during the delay goes when the delay is over.
    vm.mem
        .write_slice(&tx_frame(64, 7), GuestAddress(BUFS))
        .unwrap();
    vm.rings[TX].post(&vm.mem, &[(BUFS, 76)], false);
    let due = b.storm_due().expect("throttled");
    assert!(!b.resume_due(due - std::time::Duration::from_micros(1)));
    assert!(b.resume_due(due.max(Instant::now())));
    assert!(
        readable(&b),
        "the backend looks again when the delay is over"
    );
    let mut n = 0;
    b.poll(&mut |_, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 1, "the frame posted during the delay");
}

#[test]
fn a_ring_full_of_frames_is_taken_a_budget_at_a_time() {
    let (mut b, path) = backend("budget");
    let mut vm = Vm::up(&mut b, &path, ALL);
    let f = tx_frame(60, 1);
    vm.mem.write_slice(&f, GuestAddress(BUFS)).unwrap();
    for _ in 0..QSIZE {
        vm.rings[TX].post(&vm.mem, &[(BUFS, f.len() as u32)], false);
    }
    vm.kick[TX].write(1).unwrap();
    let mut n = 0;
    b.poll(&mut |_, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, virtio::backend::TX_BUDGET.min(QSIZE as usize));
}

/// Raw bytes on the socket: an unknown request, and a message cut short
/// by a disconnect. Neither disturbs the backend.
#[test]
fn unknown_and_truncated_messages() {
    let (mut b, path) = backend("raw");
    // Request 999, no payload.
    let mut s = UnixStream::connect(&path).unwrap();
    b.poll(&mut |_, _| true).unwrap();
    let mut msg = Vec::new();
    for v in [999u32, 1, 0] {
        msg.extend_from_slice(&v.to_le_bytes());
    }
    s.write_all(&msg).unwrap();
    poll_until(&mut b, "invalid_message", |b| {
        refused(b, "invalid_message") == 1
    });

    // SET_FEATURES (2) announcing 8 bytes, sending 3, hanging up.
    let mut s = UnixStream::connect(&path).unwrap();
    poll_until(&mut b, "a connection", |b| b.connected());
    let mut msg = Vec::new();
    for v in [2u32, 1, 8] {
        msg.extend_from_slice(&v.to_le_bytes());
    }
    msg.extend_from_slice(&[1, 2, 3]);
    s.write_all(&msg).unwrap();
    drop(s);
    poll_until(&mut b, "the disconnect", |b| !b.connected());

    // Half a header, then a stall: only that connection's thread waits;
    // the next connection replaces it and works.
    let mut stall = UnixStream::connect(&path).unwrap();
    stall.write_all(&[1, 0, 0]).unwrap();
    let mut vm = Vm::up(&mut b, &path, ALL);
    vm.send(BUFS, &tx_frame(64, 2), 4096);
    drain(&mut b, 1);
    drop(stall);
}

#[test]
fn unsupported_features_and_rings_are_refused() {
    let (mut b, path) = backend("feat");
    let vm = Vm::connect(&mut b, &path);
    vm.fe.set_owner().unwrap();
    vm.fe.get_features().unwrap();
    // MQ (bit 22) was never offered.
    let _ = vm.fe.set_features(device::OFFERED | 1 << 22);
    poll_until(&mut b, "bad_features", |b| refused(b, "bad_features") == 1);
    let mut vm = Vm::connect(&mut b, &path);
    vm.negotiate(ALL);
    vm.fe.set_mem_table(&[vm.region()]).unwrap();
    assert!(vm.fe.set_vring_num(0, 100).is_err(), "not a power of two");
    poll_until(&mut b, "bad_ring_size", |b| {
        refused(b, "bad_ring_size") == 1
    });
}

#[test]
fn a_disconnect_mid_frame_leaves_the_backend_serving() {
    let (mut b, path) = backend("midframe");
    let vm = Vm::up(&mut b, &path, ALL);
    // Half a chain published (its first descriptor says more follow),
    // then the VM goes away.
    vm.rings[TX].write_desc(&vm.mem, 0, BUFS, 100, 1, 1);
    drop(vm);
    poll_until(&mut b, "the disconnect", |b| !b.connected());
    assert_eq!(b.status()["disconnects"], 1);
    let mut vm = Vm::up(&mut b, &path, ALL);
    vm.send(BUFS, &tx_frame(64, 2), 4096);
    drain(&mut b, 1);
}

/// A memfd that allows sealing is sealed against shrinking before it is
/// mapped; a file that cannot be (a plain file here, DPDK's memory in
/// practice) is mapped and shown unsealed.
#[test]
fn memory_is_sealed_against_shrinking_where_it_can_be() {
    use std::os::fd::AsFd;
    use virtio::backend::control::map_table;
    use virtio::backend::device::Region;
    let r = Region {
        guest: 0,
        size: 1 << 20,
        user: USER,
    };
    let memfd = sys::Memfd::create("sealed", 1 << 20, false).unwrap();
    let f = std::fs::File::from(memfd.as_fd().try_clone_to_owned().unwrap());
    assert!(map_table(&[(r, 0)], vec![f]).unwrap().sealed);
    let path = std::env::temp_dir().join(format!("splitnet-vu-plain-{}", std::process::id()));
    let plain = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    plain.set_len(1 << 20).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(!map_table(&[(r, 0)], vec![plain]).unwrap().sealed);
}

/// QEMU's order: SET_VRING_ENABLE for its rings before SET_FEATURES (the
/// vhost crate refuses those, PROTOCOL_FEATURES not being acked yet), and
/// none after. The connection stays up, and the rings run.
#[test]
fn rings_enabled_before_the_features_are_set_run_as_qemu_expects() {
    let (mut b, path) = backend("qemu-order");
    let mut vm = Vm::connect(&mut b, &path);
    vm.fe.set_owner().unwrap();
    vm.fe.get_features().unwrap();
    for q in 0..2u32 {
        let mut m = Vec::new();
        for v in [18u32, 1, 8, q, 1] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        vm.raw.write_all(&m).unwrap();
    }
    vm.fe.set_features(ALL).unwrap();
    vm.fe.set_mem_table(&[vm.region()]).unwrap();
    vm.start_rings_with(0, false).unwrap();
    vm.send(BUFS, &tx_frame(64, 4), 4096);
    drain(&mut b, 1);
    let s = b.status();
    assert_eq!(s["ignored_messages"], 2);
    assert_eq!(s["refused"], serde_json::json!({}));
    assert_eq!(s["rings"][1]["enabled"], true);
}

/// A splitnet guest's vif (`guest=1`) refuses memory that cannot be
/// sealed against shrinking: the guest could truncate it under the driver
/// domain's copies. Its own sealed memfd is taken.
#[test]
fn a_guest_vif_refuses_memory_it_cannot_seal() {
    use std::os::fd::AsRawFd;
    let (l, path) = listener("guest-seal");
    let mut b = Backend::new("guest-seal", MAC, true, l.into()).unwrap();
    let file = std::env::temp_dir().join(format!("splitnet-vu-unsealed-{}", std::process::id()));
    let plain = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&file)
        .unwrap();
    plain.set_len(MEM as u64).unwrap();
    let _ = std::fs::remove_file(&file);
    let mut vm = Vm::connect(&mut b, &path);
    vm.negotiate(ALL);
    let mut r = vm.region();
    r.mmap_handle = plain.as_raw_fd();
    assert!(vm.fe.set_mem_table(&[r]).is_err());
    poll_until(&mut b, "the refusal", |b| {
        refused(b, "unsealed_memory") == 1
    });
    // The guest's own memory, a sealed memfd, is taken.
    let mut vm = Vm::up(&mut b, &path, ALL);
    assert_eq!(b.status()["memory_sealed"], true);
    vm.send(BUFS, &tx_frame(64, 1), 4096);
    drain(&mut b, 1);
}
