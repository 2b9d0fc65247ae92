//! Revocation against the real netback under the new grant mechanism (Ram
//! thesis 4.6.3), in process: a real hv, a real netfront, and netback driven
//! step by step by the test, which plays the bridge. While netback forwards
//! a guest's TX frame it holds a use of the frame's grant, so the guest's
//! revocation is refused and counted, and the frame still goes out intact;
//! once netback has answered, the revocation goes through. A posted RX
//! buffer is not in use until netback copies into it: revoking it succeeds,
//! and netback then refuses it and writes nothing into the frame.

mod common;
use common::{domain, Guest};

use abi::{Pfn, SharedMemory};
use hv::{DomId, ErrorKind, HvClient, Hypervisor};
use net::netback::{self, Netback};
use net::netfront::Netfront;
use net::packet::{Csum, FrameRef, Packet};
use splitnet_net as net;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::VifConfig;

const PAGE: usize = 4096;
const PROBE: [u8; 2] = [0x88, 0xb6];
/// A MAC on the far side of the bridge.
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 9];

/// One guest connected to a netback the test drives.
struct Pair {
    hv: Arc<Hypervisor>,
    drv: HvClient,
    drv_id: DomId,
    nb: Netback,
    g: Guest,
}

fn pair() -> Pair {
    let hv = Hypervisor::new();
    let (drv_id, mut drv) = domain(&hv, "drv", "driver", 1024);
    let (g, mut c) = domain(&hv, "guest1", "guest", 600);
    setup_vif(
        &mut Store::new(&hv),
        &VifConfig::fast_path("guest1", "drv", 0),
        g,
        drv_id,
    )
    .unwrap();
    let be = format!("/local/domain/{drv_id}/backend/vif/{g}/0");
    let backend = std::thread::spawn(move || {
        let p = netback::probe(&mut drv, g, &be).expect("probe");
        let nb = Netback::connect(&mut drv, p, Duration::from_secs(20)).expect("netback connects");
        (drv, nb)
    });
    let fe = format!("/local/domain/{g}/device/vif/0");
    let nf = Netfront::connect(&mut c, &fe, Duration::from_secs(20)).expect("frontend connects");
    let (drv, nb) = backend.join().unwrap();
    let mut g = Guest {
        hv: c,
        nf,
        mac: [0, 0x16, 0x3e, 0, 0, 1],
    };
    // The first poll posts the RX buffers.
    g.nf.poll(&mut g.hv, &mut Vec::new()).unwrap();
    Pair {
        hv,
        drv,
        drv_id,
        nb,
        g,
    }
}

/// A probe frame: dst, src, the probe ethertype, a sequence number, then a
/// pattern derived from it.
fn probe(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut d = dst.to_vec();
    d.extend_from_slice(&src);
    d.extend_from_slice(&PROBE);
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend((18..len).map(|i| (i as u32 ^ seq.wrapping_mul(7)) as u8));
    d
}

/// The guest's probe frames received since its last poll.
fn probes(g: &mut Guest) -> Vec<Vec<u8>> {
    let mut rx = Vec::new();
    g.nf.poll(&mut g.hv, &mut rx).unwrap();
    rx.into_iter()
        .map(|p| p.data)
        .filter(|d| d.len() >= 18 && d[12..14] == PROBE)
        .collect()
}

/// The frame grant `gref` names, looked up in the driver domain's view.
fn frame_of(p: &mut Pair, gref: u32, write: bool) -> Pfn {
    let view = p.drv.ngm_attach(p.nb_guest()).unwrap();
    let f = view.acquire(gref, write).expect("a granted buffer");
    view.release(gref);
    f
}

impl Pair {
    fn nb_guest(&self) -> DomId {
        self.g.hv.domid()
    }

    /// hv's count of refused revocations, as status and the metrics show it.
    fn refused(&self) -> (u64, String) {
        let st = self.hv.status();
        let t = st.ngm_tables.iter().find(|t| t.guest == self.nb_guest());
        let shown = toolstack::metrics::render(&serde_json::json!({ "ngm_tables": st.ngm_tables }));
        let line = shown
            .lines()
            .find(|l| l.starts_with("splitnet_ngm_revocations_refused_total{"))
            .unwrap_or_default()
            .to_string();
        (t.map_or(0, |t| t.refused), line)
    }

    /// Sends `f` from the guest; returns the grant of its (one) TX buffer.
    fn send(&mut self, f: &[u8]) -> u32 {
        let g = &mut self.g;
        g.nf.send(&mut g.hv, Packet::new(f.to_vec())).unwrap();
        let ring = g.nf.tx_ring();
        let slot = (ring.req_prod_pvt().wrapping_sub(1) & (ring.size() - 1)) as usize;
        // A TX request is 12 bytes after the 64-byte ring header; its grant first.
        let gref = ring.memory().load_u32(64 + slot * 12);
        g.nf.flush().unwrap();
        gref
    }

    /// Delivers `f` to the guest through netback and waits for it (or for
    /// netback to answer without it).
    fn deliver(&mut self, f: &[u8]) -> Vec<Vec<u8>> {
        self.nb.deliver(&FrameRef::private(f, Csum::Unknown, None));
        self.nb.flush_rx(&mut self.drv).unwrap();
        probes(&mut self.g)
    }
}

#[test]
fn revoking_a_tx_buffer_netback_is_sending_is_refused_and_the_frame_goes_out_intact() {
    let mut p = pair();
    let f = probe(PEER, p.g.mac, 1, 1000);
    let gref = p.send(&f);
    let frame = frame_of(&mut p, gref, false);
    let (drv_id, before) = (p.drv_id, p.refused().0);
    // netback forwards the frame while it holds the grant: the test, as the
    // bridge, has the guest revoke it then, and reads what is sent after.
    let (mut sent, mut revocation) = (Vec::new(), None);
    let guest = &mut p.g.hv;
    p.nb.process_tx(&mut p.drv, &mut |frames| {
        for fr in frames {
            revocation = Some(guest.ngm_revoke(drv_id, gref));
            // The guest's refused revocation leaves its buffer as it was.
            let mut b = vec![0; fr.len];
            fr.copy_out(0, &mut b);
            sent.push(b);
        }
    })
    .unwrap();
    assert_eq!(sent, vec![f.clone()], "the frame went out changed");
    let e = revocation.expect("the frame was forwarded").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InUse, "{e}");
    let (refused, line) = p.refused();
    assert_eq!(refused, before + 1);
    assert!(line.ends_with(&format!(" {refused}")), "metrics: {line:?}");
    assert_eq!(p.nb.stats().counters.tx_packets, 1);
    // netback answered and holds no use: the revocation goes through, and
    // the buffer is refused from now on.
    let _ = probes(&mut p.g);
    p.g.hv.ngm_revoke(drv_id, gref).unwrap();
    let view = p.drv.ngm_attach(p.nb_guest()).unwrap();
    assert_eq!(
        view.acquire(gref, false),
        Err(hv::ngm_client::NgmRefusal::Revoked)
    );
    // The guest grants it again and carries on, with nothing else refused.
    p.g.hv
        .ngm_grant(drv_id, gref, frame.raw(), false)
        .unwrap();
    for seq in 2..300u32 {
        let f = probe(PEER, p.g.mac, seq, 200 + seq as usize);
        p.send(&f);
        let mut out = Vec::new();
        p.nb.process_tx(&mut p.drv, &mut |frames| {
            for fr in frames {
                let mut b = vec![0; fr.len];
                fr.copy_out(0, &mut b);
                out.push(b);
            }
        })
        .unwrap();
        assert_eq!(out, vec![f], "frame {seq}");
        let _ = probes(&mut p.g);
    }
    let c = &p.nb.stats().counters;
    assert_eq!((c.tx_packets, c.rejected_total()), (299, 0));
}

#[test]
fn a_revoked_rx_buffer_is_refused_and_its_frame_left_as_the_guest_wrote_it() {
    let mut p = pair();
    let drv_id = p.drv_id;
    assert_eq!(p.deliver(&probe(p.g.mac, PEER, 1, 500)).len(), 1);
    // The buffer netback fills next: the one after the last response.
    let ring = p.g.nf.rx_ring();
    let slot = (ring.rsp_cons() & (ring.size() - 1)) as usize;
    let gref = ring.memory().load_u32(64 + slot * 8 + 4);
    let frame = frame_of(&mut p, gref, true);
    // netback holds no use of a buffer that is only posted: the guest can
    // revoke it, and reuse the frame for other data.
    p.g.hv.ngm_revoke(drv_id, gref).unwrap();
    let other = [0x5au8; PAGE];
    p.g.hv.pool().write_bytes(frame.base(), &other);
    let before = p.nb.stats().counters.rejected.get("grant_revoked");
    let f = probe(p.g.mac, PEER, 2, 1500);
    assert!(p.deliver(&f).is_empty(), "a frame landed in a revoked buffer");
    let c = &p.nb.stats().counters;
    assert_eq!(c.rejected.get("grant_revoked"), before + 1);
    let mut now = [0u8; PAGE];
    p.g.hv.pool().read_bytes(frame.base(), &mut now);
    assert!(now == other, "netback wrote into a revoked frame");
    assert!(p.g.nf.counters.drops.get("rx_bad_response") > 0);
    // Granted again, the buffer serves the next frames, intact.
    p.g.hv
        .ngm_grant(drv_id, gref, frame.raw(), true)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    for seq in 3..600u32 {
        let f = probe(p.g.mac, PEER, seq, 60 + seq as usize);
        assert_eq!(p.deliver(&f), vec![f], "frame {seq}");
        assert!(Instant::now() < deadline);
    }
    assert_eq!(p.nb.stats().counters.rejected.get("grant_revoked"), before + 1);
}
