//! netback hands a TX batch to the bridge in one call under every grant
//! mechanism that forwards frames as they lie (Xen 2.0's mapped pages,
//! hv's whole copies, Xen's I/O channel and the new grant mechanism's
//! gather), so a port sends the batch with one `sendmmsg`, as a kernel
//! netback passed each packet on without a system call (Menon 2006 §2).
//! A real hv and netfront in process; the test plays the bridge and
//! counts its calls.

mod common;
use common::{attach_vif, domain, probe};

use frame::packet::Packet;
use hv::Hypervisor;
use toolstack::topology::{Grants, TxMode, VifConfig};

/// A MAC on the far side of the bridge.
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 9];

/// Connects a guest to a netback of the given modes, sends `sizes.len()`
/// frames in one ring batch, runs one TX pass, and returns what the bridge
/// was handed, call by call.
fn one_pass(grants: Grants, tx_mode: TxMode, sizes: &[usize]) -> (Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>) {
    let hv = Hypervisor::new();
    let (drv_id, drv) = domain(&hv, "drv", "driver", 1024);
    let (g, c) = domain(&hv, "guest1", "guest", 600);
    let mut vif = VifConfig::fast_path("guest1", "drv", 0);
    (vif.grants, vif.tx_mode) = (grants, tx_mode);
    let (mut drv, mut nb, mut guest) = attach_vif(&hv, drv, drv_id, c, g, &vif);
    let sent: Vec<Vec<u8>> = (sizes.iter().enumerate())
        .map(|(k, &len)| probe(PEER, guest.mac, k as u32, len))
        .collect();
    for f in &sent {
        guest
            .nf
            .send(&mut guest.hv, Packet::new(f.clone()))
            .unwrap();
    }
    guest.nf.flush().unwrap();
    let mut calls = Vec::new();
    nb.process_tx(&mut drv, &mut |frames| {
        let call = frames
            .iter()
            .map(|fr| {
                let mut b = vec![0; fr.len];
                fr.copy_out(0, &mut b);
                b
            })
            .collect();
        calls.push(call);
    })
    .unwrap();
    (sent, calls)
}

#[test]
fn every_in_place_mechanism_forwards_a_batch_in_one_call() {
    let sizes = [60, 1514, 200, 1514, 999, 1514, 64, 1514];
    for (grants, tx_mode) in [
        (Grants::HvCopy, TxMode::Map),
        (Grants::HvCopy, TxMode::Copy),
        (Grants::HvCopy, TxMode::Gather),
        (Grants::HvCopy, TxMode::Header),
        (Grants::Ngm, TxMode::Gather),
    ] {
        let (sent, calls) = one_pass(grants, tx_mode, &sizes);
        assert_eq!(
            calls.len(),
            1,
            "{grants:?}/{tx_mode:?}: the bridge was called {} times for one batch of {}",
            calls.len(),
            sent.len()
        );
        assert_eq!(
            calls[0], sent,
            "{grants:?}/{tx_mode:?}: the frames, in order, intact"
        );
    }
}
