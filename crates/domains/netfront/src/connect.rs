//! Connecting netfront: the XenbusState handshake, feature negotiation,
//! granting the rings and buffers, and letting go (Menon 2006 §2).

use crate::{
    setup, FrontendInfo, GrantMode, Grants, Mem, Netfront, NetfrontError, Result, MAX_VIFS, RING,
    RX_RING_FRAME, TX_RING_FRAME, VIF_FRAMES,
};
use abi::offloads::Caps;
use abi::ring::FrontRing;
use abi::vif_backend::RxPath;
use abi::xenbus::{keys, XenbusState};
use abi::Window;
use domain_common::counters::VifCounters;
use frame::lro::Lro;
use hypercall::ngm_client::GrantTrack;
use hypercall::{DomId, EventChannel, HvClient};
use std::sync::Arc;
use std::time::Duration;
use sys::{Mapping, PAGE_SIZE};

pub(crate) fn flag(hv: &mut HvClient, path: &str) -> bool {
    hv.store_read_str(path)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

pub(crate) fn window(pool: &Arc<Mapping>, frame: u32) -> Result<Mem> {
    Window::new(pool.clone(), frame as usize * PAGE_SIZE, PAGE_SIZE)
        .ok_or_else(|| setup(format!("frame {frame} is outside the pool")))
}

pub(crate) fn run_ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The byte offset of one of this vif's own buffer frames in its pool. The
/// offsets added to it come from the backend's responses and are checked
/// to stay in their page when they arrive (`check_fits_page`), so reads at
/// them stay inside the pool by construction.
pub(crate) fn frame_off(frame: u32) -> usize {
    abi::Pfn::new(frame).base()
}
/// What the backend offers, and what the toolstack chose for this vif:
/// the frontend's facts, and whether it uses the new grant mechanism.
/// Both directories are read ahead, two round trips each, not one per key
/// (the backend published its features before InitWait).
pub(crate) fn negotiate(
    hv: &mut HvClient,
    dev: &str,
    backend: &str,
    backend_id: DomId,
    mac: &str,
) -> Result<(FrontendInfo, bool)> {
    hv.with_read_ahead(backend, |hv| {
        hv.with_read_ahead(dev, |hv| negotiate_keys(hv, dev, backend, backend_id, mac))
    })
}

fn negotiate_keys(
    hv: &mut HvClient,
    dev: &str,
    backend: &str,
    backend_id: DomId,
    mac: &str,
) -> Result<(FrontendInfo, bool)> {
    let offload = negotiate_offloads(hv, dev, backend)?;
    let mtu = capped_mtu(hv, dev, backend, offload.sg)?;
    let copy_rx = hv
        .store_read_str(&format!("{backend}/{}", keys::RX_MODE))
        .map_or(true, |m| RxPath::parse(&m) == Ok(RxPath::Copy))
        && flag(hv, &format!("{backend}/{}", keys::FEATURE_RX_COPY));
    let split_evtchn = flag(
        hv,
        &format!("{backend}/{}", keys::FEATURE_SPLIT_EVENT_CHANNELS),
    );
    let ngm = flag(hv, &format!("{backend}/{}", keys::FEATURE_NGM));
    let multicast = flag(
        hv,
        &format!("{backend}/{}", keys::FEATURE_MULTICAST_CONTROL),
    );
    let rx_half = wants_half_pages(hv, dev, backend, copy_rx && offload.sg);
    let prefetch = flag(hv, &format!("{dev}/{}", keys::PREFETCH));
    let info = FrontendInfo {
        dev: dev.to_string(),
        backend: backend.to_string(),
        backend_id,
        mac: mac.to_string(),
        copy_rx,
        offload,
        split_evtchn,
        grants: if ngm {
            GrantMode::Ngm
        } else {
            GrantMode::PerPacket
        },
        mtu,
        multicast,
        lro: hv
            .store_read_str(&format!("{dev}/{}", keys::LRO))
            .is_ok_and(|v| v == "guest"),
        rx_half,
        prefetch,
    };
    Ok((info, ngm))
}

/// The offloads this vif uses: those the toolstack chose for it
/// (`splitnet-offload`, a set's name) that the backend offers, each key on
/// its own; TSO only beside scatter-gather and checksum offload.
pub(crate) fn negotiate_offloads(hv: &mut HvClient, dev: &str, backend: &str) -> Result<Caps> {
    let wanted = match hv.store_read_str(&format!("{backend}/{}", keys::OFFLOAD)) {
        Ok(v) => Caps::parse(&v).map_err(|e| setup(format!("{backend}/{}: {e}", keys::OFFLOAD)))?,
        Err(_) => Caps::NONE,
    };
    let offer = Caps::from_backend(|k| hv.store_read_str(&format!("{backend}/{k}")).ok());
    let got = wanted.and(offer);
    if got != wanted {
        eprintln!("netfront {dev}: offloads {wanted} wanted, the backend offers {offer}: {got}");
    }
    Ok(got)
}

/// Whether this vif uses half-page RX buffers: the toolstack asked
/// (`splitnet-rx-buffer` = `half`), the backend takes them, and frames over
/// 2 KiB can span buffers (copy mode with scatter-gather, `possible`).
pub(crate) fn wants_half_pages(
    hv: &mut HvClient,
    dev: &str,
    backend: &str,
    possible: bool,
) -> bool {
    let asked = hv
        .store_read_str(&format!("{dev}/{}", keys::RX_BUFFER))
        .is_ok_and(|v| v.trim() == "half");
    if !asked {
        return false;
    }
    let offered = flag(hv, &format!("{backend}/{}", keys::FEATURE_RX_HALF_PAGE));
    if !(offered && possible) {
        eprintln!(
            "netfront {dev}: half-page RX buffers asked for, but {}: full pages",
            if offered {
                "they need RX copy and scatter-gather"
            } else {
                "the backend does not offer feature-rx-half-page"
            }
        );
    }
    offered && possible
}

impl Netfront {
    /// The link's MTU as the backend's `mtu` node gives it now, capped as
    /// at connection.
    pub fn backend_mtu(&self, hv: &mut HvClient) -> Result<u16> {
        let i = &self.info;
        capped_mtu(hv, &i.dev, &i.backend, i.offload.sg)
    }
}

/// The backend's `mtu` node, capped at one slot's worth when frames
/// cannot take several (no scatter-gather).
fn capped_mtu(hv: &mut HvClient, dev: &str, backend: &str, sg: bool) -> Result<u16> {
    let mtu = link_mtu(hv, backend)?;
    Ok(if sg { mtu } else { one_slot_mtu(dev, mtu) })
}

/// The backend's `mtu` node: 1500 when absent; a value outside
/// 68..=9000 refuses the vif.
pub(crate) fn link_mtu(hv: &mut HvClient, backend: &str) -> Result<u16> {
    let Ok(v) = hv.store_read_str(&format!("{backend}/{}", keys::MTU)) else {
        return Ok(abi::xenbus::DEFAULT_MTU);
    };
    abi::xenbus::parse_mtu(&v).map_err(|e| setup(format!("{backend}/{} = {v:?}: {e}", keys::MTU)))
}

/// An MTU capped at what one slot holds, with a word when it is.
pub(crate) fn one_slot_mtu(dev: &str, mtu: u16) -> u16 {
    let most = (PAGE_SIZE - 14) as u16;
    if mtu <= most {
        return mtu;
    }
    eprintln!(
        "netfront {dev}: MTU {mtu} needs several slots per frame, but scatter-gather is off \
         (feature-sg): capped at {most}"
    );
    most
}

/// The grants of a vif's two ring pages, and its event channels (RX on its
/// own when the channels are split).
pub(crate) struct RingChannels {
    tx_ref: u32,
    rx_ref: u32,
    tx_evt: EventChannel,
    rx_evt: Option<EventChannel>,
}

/// Grants the backend the ring pages of the vif at `base` and allocates
/// its event channels; whatever fails half-way is given back.
pub(crate) fn grant_rings(
    hv: &mut HvClient,
    backend_id: DomId,
    base: u32,
    split_evtchn: bool,
) -> Result<RingChannels> {
    let tx_ref = hv
        .grants()
        .grant_access(backend_id, base + TX_RING_FRAME, false)?;
    let rx_ref = match hv
        .grants()
        .grant_access(backend_id, base + RX_RING_FRAME, false)
    {
        Ok(r) => r,
        Err(e) => {
            let _ = hv.grants().end_access(tx_ref);
            return Err(e.into());
        }
    };
    let evts = hv.evtchn_alloc_unbound(backend_id).and_then(|tx| {
        if !split_evtchn {
            return Ok((tx, None));
        }
        match hv.evtchn_alloc_unbound(backend_id) {
            Ok(rx) => Ok((tx, Some(rx))),
            Err(e) => {
                let _ = hv.evtchn_close(tx);
                Err(e)
            }
        }
    });
    let (tx_evt, rx_evt) = match evts {
        Ok(e) => e,
        Err(e) => {
            for r in [tx_ref, rx_ref] {
                let _ = hv.grants().end_access(r);
            }
            return Err(e.into());
        }
    };
    Ok(RingChannels {
        tx_ref,
        rx_ref,
        tx_evt,
        rx_evt,
    })
}

impl Netfront {
    /// Runs the frontend half of the XenbusState handshake for device `dev`
    /// (e.g. `/local/domain/5/device/vif/0`) and returns when both ends are
    /// Connected. The frontend then moves [`Packet`]s: [`Netfront::send`],
    /// [`Netfront::flush`] and [`Netfront::poll`]. [`TapNetfront`] connects it
    /// to a TAP so the guest's kernel uses it; tests and packet generators use
    /// it directly.
    pub fn connect(hv: &mut HvClient, dev: &str, timeout: Duration) -> Result<Netfront> {
        let mut nf = Netfront::begin(hv, dev, timeout)?;
        let backend = nf.info.backend.clone();
        let done = hv
            .wait_state(&backend, timeout, |s| {
                matches!(
                    s,
                    XenbusState::Connected | XenbusState::Closing | XenbusState::Closed
                )
            })
            .map_err(NetfrontError::from)
            .and_then(|_| nf.finish(hv));
        match done {
            Ok(true) => Ok(nf),
            Ok(false) => {
                nf.release(hv);
                Err(setup(format!(
                    "{backend} changed state again while connecting"
                )))
            }
            Err(e) => {
                nf.release(hv);
                Err(e)
            }
        }
    }

    /// The handshake up to the frontend's Connected, without waiting for
    /// the backend's: an event loop that serves other vifs meanwhile calls
    /// [`Netfront::finish`] once the backend's state changes (Xen's
    /// xenbus drives a frontend by the other end's state changes, never by
    /// blocking on them). The backend must be in InitWait, or is waited for
    /// up to `timeout`. On an error the channel holds nothing.
    pub fn begin(hv: &mut HvClient, dev: &str, timeout: Duration) -> Result<Netfront> {
        let backend = hv.store_read_str(&format!("{dev}/{}", keys::BACKEND))?;
        let backend_id: DomId = hv
            .store_read_str(&format!("{dev}/{}", keys::BACKEND_ID))?
            .trim()
            .parse()
            .map_err(|_| setup(format!("{dev}/backend-id is not a domain id")))?;
        let mac = hv.store_read_str(&format!("{dev}/{}", keys::MAC))?;
        let handle: u32 = dev
            .rsplit('/')
            .next()
            .and_then(|h| h.parse().ok())
            .filter(|&h| h < MAX_VIFS)
            .ok_or_else(|| setup(format!("{dev}: a vif handle below {MAX_VIFS}")))?;
        let base = handle * VIF_FRAMES;
        if hv.welcome().pool_frames < base + VIF_FRAMES {
            return Err(setup(format!(
                "vif {handle} needs a pool of at least {} frames",
                base + VIF_FRAMES
            )));
        }
        hv.switch_state(dev, XenbusState::Initialising)?;
        hv.wait_state(&backend, timeout, |s| {
            s == XenbusState::InitWait || s == XenbusState::Connected
        })?;
        let (info, ngm) = negotiate(hv, dev, &backend, backend_id, &mac)?;

        // Rings in two granted pages, event channels, then publish it all.
        let pool = hv.pool_shared();
        let tx = FrontRing::init(window(&pool, base + TX_RING_FRAME)?)?;
        let rx = FrontRing::init(window(&pool, base + RX_RING_FRAME)?)?;
        let rc = grant_rings(hv, backend_id, base, info.split_evtchn)?;
        let mut nf = Netfront {
            info,
            tx,
            rx,
            tx_evt: rc.tx_evt,
            rx_evt: rc.rx_evt,
            pool,
            // The new grant mechanism's track comes next, in `publish`.
            grants: Grants::PerPacket,
            tx_free: (0..RING as u16).rev().collect(),
            tx_slots: vec![None; RING as usize],
            tx_frames: vec![None; RING as usize],
            tx_seq: 0,
            rx_free: (0..RING as u16).rev().collect(),
            rx_slots: vec![None; RING as usize],
            rx_ring_ids: vec![0; RING as usize],
            rx_frags: Vec::with_capacity(2 * RING as usize),
            rx_ready: Vec::with_capacity(RING as usize),
            rx_cur: None,
            rx_extra_pending: false,
            rx_data_done: false,
            rx_landed: None,
            counters: VifCounters::default(),
            connected: true,
            tracer: hv.tracer(),
            tx_batch: None,
            base,
            ring_refs: [rc.tx_ref, rc.rx_ref],
            mcast_joined: Vec::new(),
            mcast_requested: false,
            lro: None,
            storm: domain_common::storm::Storm::default(),
        };
        if nf.info.lro {
            nf.lro = Some(Lro::new());
        }
        // Whatever fails from here gives back all the channel holds.
        match nf.publish(hv, handle, ngm) {
            Ok(()) => Ok(nf),
            Err(e) => {
                nf.release(hv);
                Err(e)
            }
        }
    }

    /// The frontend's half of the rest: the buffers' grants under the new
    /// mechanism, the channel's keys in the store, and its Connected.
    fn publish(&mut self, hv: &mut HvClient, handle: u32, ngm: bool) -> Result<()> {
        let dev = self.info.dev.clone();
        if ngm {
            self.grants = Grants::Ngm(Box::new(self.warm_grants(hv, handle)?));
        }
        let w = |k: &str| format!("{dev}/{k}");
        let [tx_ref, rx_ref] = self.ring_refs;
        hv.store_write(&w(keys::TX_RING_REF), &tx_ref.to_string())?;
        hv.store_write(&w(keys::RX_RING_REF), &rx_ref.to_string())?;
        match &self.rx_evt {
            Some(r) => {
                hv.store_write(&w(keys::EVENT_CHANNEL_TX), &self.tx_evt.port.to_string())?;
                hv.store_write(&w(keys::EVENT_CHANNEL_RX), &r.port.to_string())?;
            }
            None => hv.store_write(&w(keys::EVENT_CHANNEL), &self.tx_evt.port.to_string())?,
        }
        let (copy_rx, offload) = (self.info.copy_rx, self.info.offload);
        hv.store_write(&w(keys::REQUEST_RX_COPY), if copy_rx { "1" } else { "0" })?;
        hv.store_write(&w(keys::FEATURE_RX_NOTIFY), "1")?;
        if self.info.rx_half {
            hv.store_write(&w(keys::REQUEST_RX_HALF_PAGE), "1")?;
        }
        for (k, v) in offload.frontend_keys() {
            hv.store_write(&w(k), v)?;
        }
        hv.switch_state(&dev, XenbusState::Connected)?;
        Ok(())
    }

    /// Ends a handshake [`Netfront::begin`] started: with the backend
    /// Connected, posts the RX buffers and returns true; with the backend
    /// not there yet, returns false (call again when its state changes);
    /// a backend Closing or Closed refused the vif, an error with its
    /// reason, after which the caller releases the channel.
    pub fn finish(&mut self, hv: &mut HvClient) -> Result<bool> {
        let backend = self.info.backend.clone();
        match hv.read_state(&backend)? {
            XenbusState::Connected => self.refill_rx(hv).map(|()| true),
            XenbusState::Closing | XenbusState::Closed => {
                // It gave the vif up (a quota ran out): waiting longer cannot help.
                let why = hv.store_read_str(&format!("{backend}/{}", keys::DISCONNECT_REASON));
                Err(NetfrontError::Setup(format!(
                    "the backend closed instead of connecting: {}",
                    why.unwrap_or_default()
                )))
            }
            _ => Ok(false),
        }
    }

    /// Grants every buffer of vif `vif`'s part of the pool once, through
    /// the track table and in one hypercall, so the data path never needs
    /// hv (Ram thesis 4.7: a pool of I/O buffers). What it granted is
    /// revoked if it fails.
    pub(crate) fn warm_grants(&self, hv: &mut HvClient, vif: u32) -> Result<GrantTrack> {
        let (backend, dev) = (self.info.backend_id, &self.info.dev);
        let (table, entries) = hv.ngm_setup(backend)?;
        if entries != hypercall::ngm::NGM_ENTRIES {
            return Err(setup(format!(
                "hv offers {entries} grant entries; this build expects {}",
                hypercall::ngm::NGM_ENTRIES
            )));
        }
        let mut track = GrantTrack::partition(vif, MAX_VIFS);
        let frames: Vec<(u32, bool)> = (0..RING as u16)
            .flat_map(|id| [(self.tx_frame(id), false), (self.rx_frame(id), true)])
            .collect();
        if let Err(e) = track.warm(hv, backend, &frames) {
            track.revoke_all(hv, backend);
            return Err(setup(format!("granting the buffer frames: {e}")));
        }
        if let Err(e) = hv.store_write(&format!("{dev}/{}", keys::NGM_TABLE), &table.to_string()) {
            track.revoke_all(hv, backend);
            return Err(e.into());
        }
        Ok(track)
    }

    /// Gives back everything the channel held, after its backend went away:
    /// the event channels, the ring and buffer grants (per-packet ones
    /// revoked, the new grant mechanism's revoked as a whole) so that a new
    /// backend can be given fresh ones. Grants the old backend still has
    /// mapped stay (hv refuses to end them) and are counted.
    pub fn release(mut self, hv: &mut HvClient) {
        self.disconnect("released");
        let mut kept = 0;
        for gref in self.ring_refs {
            kept += usize::from(hv.grants().end_access(gref).is_err());
        }
        // The buffers in flight are ours again (under the new mechanism a
        // track release, else a revocation), a page flip's slot ends its
        // transfer.
        for gref in std::mem::take(&mut self.tx_slots).into_iter().flatten() {
            kept += usize::from(!self.end_grant(hv, gref));
        }
        for gref in std::mem::take(&mut self.rx_slots).into_iter().flatten() {
            if self.info.copy_rx {
                kept += usize::from(!self.end_grant(hv, gref));
            } else {
                let _ = hv.grants().end_transfer(gref);
            }
        }
        if let Grants::Ngm(t) = &mut self.grants {
            // hv discards the pair's table when the backend died; with a
            // live backend (a detach) this vif's part is revoked.
            kept += t.revoke_all(hv, self.info.backend_id);
        }
        for ch in [Some(self.tx_evt), self.rx_evt].into_iter().flatten() {
            let _ = hv.evtchn_close(ch);
        }
        if kept > 0 {
            eprintln!(
                "netfront {}: {kept} grants stay, still in use by the old backend",
                self.info.dev
            );
        }
    }

    /// Marks the frontend disconnected; the backend is gone.
    pub fn disconnect(&mut self, why: &str) {
        if self.connected {
            eprintln!("netfront {}: link down: {why}", self.info.dev);
            self.connected = false;
        }
    }
}
