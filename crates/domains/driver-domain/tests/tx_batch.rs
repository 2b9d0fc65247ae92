//! netback hands a TX batch to the bridge in one call under every grant
//! mechanism (Xen 2.0's mapped pages, hv's copies, Xen's I/O channel, the
//! new grant mechanism's gather and copy), so a port sends the batch with
//! one `sendmmsg`, as a kernel netback passed each packet on without a
//! system call (Menon 2006 §2), and answers no request before its frame
//! has gone. A real hv and netfront in process; the test plays the bridge.

mod common;
use common::{attach_vif, domain, probe};

use abi::SharedMemory;
use frame::packet::Packet;
use hv::Hypervisor;
use toolstack::topology::{Grants, TxMode, VifConfig};

/// A MAC on the far side of the bridge.
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 9];

/// What one TX pass handed the bridge.
struct Pass {
    /// The frames the guest sent that netback should forward, in order.
    good: Vec<Vec<u8>>,
    /// The bridge's calls, each the frames it was handed.
    calls: Vec<Vec<Vec<u8>>>,
    /// The guest's TX responses produced when each call was made.
    answered_at_call: Vec<u32>,
}

/// Connects a guest to a netback of the given modes, sends one frame per
/// size in one ring batch (the one at `spoofed` from another MAC, which
/// netback refuses once it has reached it), runs one TX pass, and returns
/// what the bridge was handed.
fn one_pass(grants: Grants, tx_mode: TxMode, sizes: &[usize], spoofed: usize) -> Pass {
    let hv = Hypervisor::new();
    let (drv_id, drv) = domain(&hv, "drv", "driver", 1024);
    let (g, c) = domain(&hv, "guest1", "guest", 600);
    let mut vif = VifConfig::fast_path("guest1", "drv", 0);
    (vif.grants, vif.tx_mode) = (grants, tx_mode);
    let (mut drv, mut nb, mut guest) = attach_vif(&hv, drv, drv_id, c, g, &vif);
    let mut good = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        let src = if k == spoofed { PEER } else { guest.mac };
        let f = probe(PEER, src, k as u32, len);
        guest
            .nf
            .send(&mut guest.hv, Packet::new(f.clone()))
            .unwrap();
        if k != spoofed {
            good.push(f);
        }
    }
    guest.nf.flush().unwrap();
    let (mut calls, mut answered_at_call) = (Vec::new(), Vec::new());
    // The TX ring's response producer, 8 bytes into its shared header.
    let ring = guest.nf.tx_ring().memory();
    nb.process_tx(&mut drv, &mut |frames| {
        answered_at_call.push(ring.load_u32(8));
        calls.push(frames.iter().map(|fr| fr.to_packet().data).collect());
    })
    .unwrap();
    Pass {
        good,
        calls,
        answered_at_call,
    }
}

#[test]
fn every_mechanism_forwards_a_batch_in_one_call_before_answering() {
    let sizes = [60, 1514, 200, 1514, 999, 1514, 64, 1514];
    for (grants, tx_mode) in [
        (Grants::HvCopy, TxMode::Map),
        (Grants::HvCopy, TxMode::Copy),
        (Grants::HvCopy, TxMode::Gather),
        (Grants::HvCopy, TxMode::Header),
        (Grants::Ngm, TxMode::Gather),
        (Grants::Ngm, TxMode::Copy),
    ] {
        let what = format!("{grants:?}/{tx_mode:?}");
        let pass = one_pass(grants, tx_mode, &sizes, 3);
        assert_eq!(
            pass.calls.len(),
            1,
            "{what}: the bridge was called {} times for one batch",
            pass.calls.len()
        );
        assert_eq!(
            pass.calls[0], pass.good,
            "{what}: every frame but the spoofed one, in order, intact"
        );
        assert_eq!(
            pass.answered_at_call,
            [0],
            "{what}: no request answered before its frame went"
        );
    }
}
