//! A connected vif passed from one program of a driver domain to the next,
//! when the domain replaces its program in place (`splitnet upgrade`).
//!
//! Nothing of the vif's shared state moves: the rings stay in the guest's
//! pages, the event channels stay bound in hv, the store keeps both ends
//! Connected, so the frontend sees no handshake (a crash's restart makes
//! it run one, Menon 2006 §3). What lived only in the old program is
//! settled or written down first: the RX responses are published, the
//! TX ring was served to its last request, the counters, the joined
//! multicast groups and the local ports go to the store; the ring pages
//! are unmapped. The next program maps them again, takes its ports back
//! from hv ([`hypercall::HvClient::evtchn_rebind`]), and goes on from the
//! indexes the shared rings hold; a vif it cannot take back has its ports
//! closed by number, so none stays bound to no one.

use super::{read_backend, Netback, Result};
use domain_common::counters::VifCounters;
use hypercall::{DomId, HvClient};

/// The backend node carrying what only the old program knew, read and
/// removed by the next.
const HANDOVER: &str = "splitnet-handover";

/// What [`Netback::hand_over`] writes at [`HANDOVER`].
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Carried {
    /// The groups the guest joined (`feature-multicast-control`).
    mcast: Vec<[u8; 6]>,
    /// This domain's ports bound to the frontend's.
    ports: Vec<u32>,
}

impl Carried {
    /// Reads and removes the node of `be`.
    fn take(hv: &mut HvClient, be: &str) -> Carried {
        let node = format!("{be}/{HANDOVER}");
        let carried = hv
            .store_read_str(&node)
            .ok()
            .and_then(|t| serde_json::from_str::<Carried>(&t).ok())
            .unwrap_or_default();
        let _ = hv.store_rm(&node);
        carried
    }
}

/// The vif of backend directory `be` will not be taken back: the ports the
/// previous program left bound for it are closed (its frontend reads that
/// as the backend gone).
pub fn abandon(hv: &mut HvClient, be: &str) {
    for port in Carried::take(hv, be).ports {
        let _ = hv.evtchn_close_port(port);
    }
}

impl Netback {
    /// Leaves the vif for the next program: publishes what is due to the
    /// guest, writes the counters, groups and ports down, unmaps the rings
    /// and lets the channels go without closing them. Returns the frames
    /// queued for the guest that found no buffer (dropped, counted
    /// `upgrade`).
    pub fn hand_over(&mut self, hv: &mut HvClient) -> u64 {
        if !self.connected {
            return 0;
        }
        if let Err(e) = self.flush_rx(hv) {
            let vif = crate::vif_name(&self.be);
            eprintln!("netback {vif}: RX at hand-over: {e}");
        }
        let lost = self.rx_slab.len() as u64;
        if lost > 0 {
            self.counters.drops.add("upgrade", lost);
        }
        self.rx_slab.clear();
        // Written only while the directory is this attachment's: one the
        // toolstack removed meanwhile is not made again.
        if self.directory_ours(hv) {
            self.write_down(hv);
        }
        self.unmap_rings(hv);
        self.tx_evt = None;
        self.rx_evt = None;
        self.ngm = None;
        self.window = None;
        self.gnttab = None;
        self.connected = false;
        lost
    }

    /// The counters, groups and ports, to the store.
    fn write_down(&mut self, hv: &mut HvClient) {
        let carried = Carried {
            mcast: self.mcast.groups().to_vec(),
            ports: self
                .tx_evt
                .iter()
                .chain(self.rx_evt.iter())
                .map(|e| e.port)
                .collect(),
        };
        if let Ok(json) = serde_json::to_string(&carried) {
            let _ = hv.store_write(&format!("{}/{HANDOVER}", self.be), &json);
        }
        if let Ok(json) = serde_json::to_string(&self.stats()) {
            let _ = hv.store_write(&format!("{}/stats", self.be), &json);
        }
    }

    /// Takes over vif `be` of `guest`, Connected under the previous program
    /// of this domain: its rings mapped again, its channels taken back,
    /// its counters and groups carried on. Returns it with its slot in the
    /// driver domain's memory. On failure the ports left for it are closed.
    pub fn resume(hv: &mut HvClient, guest: DomId, be: &str) -> Result<(Netback, u32)> {
        let carried = Carried::take(hv, be);
        let taken = read_backend(hv, guest, be).and_then(|p| {
            let index = p.index;
            Ok((Self::attach(hv, p, super::Join::Resume)?, index))
        });
        let (mut nb, index) = match taken {
            Ok(t) => t,
            Err(e) => {
                for port in carried.ports {
                    let _ = hv.evtchn_close_port(port);
                }
                return Err(e);
            }
        };
        let stats = hv.store_read_str(&format!("{be}/stats"));
        if let Some(c) = stats
            .ok()
            .and_then(|t| serde_json::from_str::<VifCounters>(&t).ok())
        {
            nb.lro.carry_counts(c.lro_merged, c.lro_flushed);
            nb.counters = c;
        }
        for g in carried.mcast {
            // As the guest asked them: a group the filter refuses now
            // (not multicast, past its size) is dropped.
            let _ = nb.mcast.add(g);
        }
        nb.resample_multicast(hv);
        let tx = nb.tx.as_ref().map_or(0, |r| r.restored());
        let rx = nb.rx.as_ref().map_or(0, |r| r.restored());
        if tx + rx > 0 {
            let vif = crate::vif_name(be);
            eprintln!(
                "netback {vif}: restored {tx} TX and {rx} RX requests the dead process had consumed without publishing their responses"
            );
        }
        Ok((nb, index))
    }
}
