//! Revocation against the real netback under the new grant mechanism (Ram
//! thesis 4.6.3), in process: a real hv, a real netfront, and netback driven
//! step by step by the test, which plays the bridge. While netback forwards
//! a guest's TX frame it holds a use of the frame's grant, so the guest's
//! revocation is refused and counted, and the frame still goes out intact;
//! once netback has answered, the revocation goes through. A posted RX
//! buffer is not in use until netback copies into it: revoking it succeeds,
//! and netback then refuses it and writes nothing into the frame.

mod common;
use common::{attach_vif, domain, probe, probes, Guest};

use abi::{Pfn, SharedMemory};
use driver_domain::netback::Netback;
use frame::packet::{Csum, FrameRef, Packet};
use hv::{DomId, ErrorKind, HvClient, Hypervisor};
use splitnet_driver_domain as driver_domain;
use std::sync::Arc;
use toolstack::daemon::Store;
use toolstack::topology::VifConfig;

const PAGE: usize = 4096;
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
    let (drv_id, drv) = domain(&hv, "drv", "driver", 1024);
    let (g, c) = domain(&hv, "guest1", "guest", 600);
    let (drv, nb, g) = attach(&hv, drv, drv_id, c, g);
    Pair {
        hv,
        drv,
        drv_id,
        nb,
        g,
    }
}

/// The toolstack sets up guest `g`'s vif 0 on driver domain `drv_id`, on
/// the fast path, and netback and netfront connect it.
fn attach(
    hv: &Arc<Hypervisor>,
    drv: HvClient,
    drv_id: DomId,
    c: HvClient,
    g: DomId,
) -> (HvClient, Netback, Guest) {
    attach_vif(
        hv,
        drv,
        drv_id,
        c,
        g,
        &VifConfig::fast_path("guest1", "drv", 0),
    )
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

    /// The guest sends `n` frames, each forwarded intact, none refused.
    fn tx_flows(&mut self, n: u32, base: u32) {
        let before = self.nb.stats().counters.rejected_total();
        for seq in base..base + n {
            let f = probe(PEER, self.g.mac, seq, 200 + (seq % 1200) as usize);
            self.send(&f);
            let mut out = Vec::new();
            self.nb
                .process_tx(&mut self.drv, &mut |frames| {
                    out.extend(frames.iter().map(|fr| fr.to_packet().data));
                })
                .unwrap();
            assert_eq!(out, vec![f], "frame {seq}");
            let _ = probes(&mut self.g);
        }
        assert_eq!(self.nb.stats().counters.rejected_total(), before);
    }

    /// The guest receives `n` frames through netback, each intact.
    fn rx_flows(&mut self, n: u32, base: u32) {
        for seq in base..base + n {
            let f = probe(self.g.mac, PEER, seq, 60 + (seq % 1400) as usize);
            assert_eq!(self.deliver(&f), vec![f], "frame {seq}");
        }
    }

    /// The grant of the RX buffer netback fills next: the one after the
    /// last response.
    fn next_rx_gref(&mut self) -> u32 {
        let ring = self.g.nf.rx_ring();
        let slot = (ring.rsp_cons() & (ring.size() - 1)) as usize;
        ring.memory().load_u32(64 + slot * 8 + 4)
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
            sent.push(fr.to_packet().data);
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
    p.g.hv.ngm_grant(drv_id, gref, frame.raw(), false).unwrap();
    p.tx_flows(300, 2);
    assert_eq!(p.nb.stats().counters.tx_packets, 301);
}

#[test]
fn a_revoked_rx_buffer_is_refused_and_its_frame_left_as_the_guest_wrote_it() {
    let mut p = pair();
    let drv_id = p.drv_id;
    assert_eq!(p.deliver(&probe(p.g.mac, PEER, 1, 500)).len(), 1);
    let gref = p.next_rx_gref();
    let frame = frame_of(&mut p, gref, true);
    // netback holds no use of a buffer that is only posted: the guest can
    // revoke it, and reuse the frame for other data.
    p.g.hv.ngm_revoke(drv_id, gref).unwrap();
    let other = [0x5au8; PAGE];
    p.g.hv.pool().write_bytes(frame.base(), &other);
    let before = p.nb.stats().counters.rejected.get("grant_revoked");
    let f = probe(p.g.mac, PEER, 2, 1500);
    assert!(
        p.deliver(&f).is_empty(),
        "a frame landed in a revoked buffer"
    );
    let c = &p.nb.stats().counters;
    assert_eq!(c.rejected.get("grant_revoked"), before + 1);
    let mut now = [0u8; PAGE];
    p.g.hv.pool().read_bytes(frame.base(), &mut now);
    assert!(now == other, "netback wrote into a revoked frame");
    assert!(p.g.nf.counters.drops.get("rx_bad_response") > 0);
    // Granted again, the buffer serves the next frames, intact.
    p.g.hv.ngm_grant(drv_id, gref, frame.raw(), true).unwrap();
    p.rx_flows(600, 3);
    assert_eq!(
        p.nb.stats().counters.rejected.get("grant_revoked"),
        before + 1
    );
}

/// The driver-domain bug the status count has to survive, against real
/// netback and netfront: a use of one of the guest's RX buffers taken and
/// never ended. The guest cannot revoke that grant, and its traffic goes on
/// intact through the buffer; when the vif detaches the grant stays (the
/// frame stays granted, never reused for anything else), and the vif
/// attaches again to the same driver domain, its new track working around
/// the stuck entry.
#[test]
fn a_use_count_left_raised_keeps_the_grant_and_the_guest_keeps_working() {
    let mut p = pair();
    let (drv_id, g) = (p.drv_id, p.nb_guest());
    let gref = p.next_rx_gref();
    let view = p.drv.ngm_attach(g).unwrap();
    let frame = view.acquire(gref, true).unwrap();
    let e = p.g.hv.ngm_revoke(drv_id, gref).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InUse);
    assert_eq!(p.refused().0, 1);
    p.rx_flows(600, 0);
    p.tx_flows(600, 0);
    // Detach: netback lets go of the vif, netfront revokes what it can.
    let Pair {
        hv,
        mut drv,
        mut nb,
        g: guest,
        ..
    } = p;
    nb.disconnect(&mut drv, "detached");
    drop(nb);
    let Guest { hv: mut c, nf, .. } = guest;
    nf.release(&mut c);
    assert_eq!(view.acquire(gref, true), Ok(frame), "the stuck grant stays");
    view.release(gref);
    let mut ts = Store::new(&hv);
    for d in [
        format!("/local/domain/{g}/device/vif/0"),
        format!("/local/domain/{drv_id}/backend/vif/{g}/0"),
    ] {
        ts.rm(&d).unwrap();
    }
    let (drv, nb, guest) = attach(&hv, drv, drv_id, c, g);
    let mut p = Pair {
        hv,
        drv,
        drv_id,
        nb,
        g: guest,
    };
    p.rx_flows(600, 1000);
    p.tx_flows(600, 1000);
    assert_eq!(view.acquire(gref, true), Ok(frame), "still granted");
}
