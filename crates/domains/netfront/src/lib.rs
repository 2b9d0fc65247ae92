//! netfront: the guest's paravirtual NIC driver (Menon 2006 §2, Ram thesis 2.1).
//!
//! It owns a TAP device in the guest's namespace, so the guest's own kernel
//! stack and unmodified applications use it, and moves frames between that
//! TAP and the I/O channel: a TX and an RX ring in granted pages of the
//! guest's pool, and one or two event channels.
//!
//! Payloads never pass through private memory: a frame the guest sends is
//! read from the TAP straight into TX buffers of the pool, and a frame it
//! receives is written to the TAP straight from the RX buffers it landed in.
//! The buffers are a fixed, recycled set (Ram thesis 4.7, the I/O buffer
//! pool), so under the new grant mechanism each keeps its grant for good.
//!
//! Guest pool layout, per vif: frame 0 TX ring, frame 1 RX ring, frames
//! 2..258 TX buffers (one per request id), frames 258..514 RX buffers (one
//! per id; with half-page buffers, ids 2k and 2k+1 share frame 258 + k and
//! 258..386 serve all 256); vif *h* (the device's handle) starts at frame
//! `h * VIF_FRAMES`.

use abi::netif::{
    Extra, ExtraFlags, ExtraInfo, RxFlags, RxRequest, RxResponse, RxStatus, TxFlags, TxRequest,
    TxResponse, NETIF_RSP_NULL, NETIF_RSP_OKAY,
};
use abi::offloads::Caps;
use abi::ring::FrontRing;
use abi::xenbus::{keys, XenbusState};
use abi::{SharedMemory, Window};
use domain_common::counters::VifCounters;
use frame::lro::{self, Lro};
use frame::offload;
use frame::packet::{self, Csum, FrameRef, Gso, GsoKind, Packet, VNET_HDR_LEN};
use hypercall::ngm_client::{GrantTrack, TrackError};
use hypercall::trace::{self, DomainEvent, Tracer};
use hypercall::{DomId, EventChannel, HvClient, HvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::{IoPart, IoPartMut, Mapping, Tap, TapOffloads, PAGE_SIZE};

/// Frame of the TX ring.
pub const TX_RING_FRAME: u32 = 0;
/// Frame of the RX ring.
pub const RX_RING_FRAME: u32 = 1;
/// First TX buffer frame (request id i uses frame TX_BUF_BASE + i).
pub const TX_BUF_BASE: u32 = 2;
/// First RX buffer frame (request id i uses frame RX_BUF_BASE + i).
pub const RX_BUF_BASE: u32 = TX_BUF_BASE + RING;
const RING: u32 = 256;
/// Pool frames one vif uses (its rings and buffers).
pub const VIF_FRAMES: u32 = RX_BUF_BASE + RING;
/// Most vifs one guest may have: the new grant mechanism's table for a
/// (guest, driver domain) pair is split between them (the toolstack's
/// `MAX_GUEST_VIFS`). Each takes [`VIF_FRAMES`] of the pool (about 2 MiB).
pub const MAX_VIFS: u32 = 8;
/// Data slots of the largest frame (64 KiB and an Ethernet header, in pages).
const MAX_DATA_SLOTS: usize = 17;
/// Data slots of the largest received frame: twice as many with half-page
/// buffers.
const RX_MAX_DATA_SLOTS: usize = 2 * MAX_DATA_SLOTS;
/// Most slots one packet may take: its data and one GSO extra-info slot.
const MAX_SLOTS: u32 = MAX_DATA_SLOTS as u32 + 1;
/// Largest frame netfront accepts from the guest or the backend: a netif
/// request's size field is 16 bits.
const MAX_FRAME: usize = u16::MAX as usize;
/// What the guest's TCP may put in one GSO frame, so that the frame with its
/// Ethernet header still fits a netif request (Linux netfront caps it alike).
const GUEST_GSO_MAX: u32 = 65000;
/// The TAP's queue towards netfront: a TCP window of full-size frames.
const GUEST_TXQUEUELEN: u32 = 4096;
/// How often the guest's multicast groups are looked at unprompted: a
/// safety net, since the owner calls [`TapNetfront::groups_changed`] when
/// the kernel reports a change.
const UPKEEP_EVERY: Duration = Duration::from_secs(2);
/// How soon the groups are looked at again when a look may have missed
/// something: the TX ring had no room for every change, or the kernel
/// reports addresses but not group joins (Linux's addrconf sends a
/// tentative address's notice before the DAD work it schedules joins the
/// address's solicited-node group).
const RECHECK_AFTER: Duration = Duration::from_millis(50);
/// A half-page RX buffer (`feature-rx-half-page`).
const RX_HALF: u16 = (PAGE_SIZE / 2) as u16;
/// Header bytes netfront reads to describe a received frame's offloads.
const HEAD: usize = 256;

type Mem = Window<Arc<Mapping>>;

/// Errors while setting up or running the frontend.
#[derive(Debug, thiserror::Error)]
pub enum NetfrontError {
    #[error("hypercall: {0}")]
    Hv(#[from] HvError),
    #[error("ring: {0}")]
    Ring(#[from] abi::Error),
    #[error("{0}")]
    Setup(String),
    #[error("TAP: {0}")]
    Io(#[from] std::io::Error),
}

type Result<T> = std::result::Result<T, NetfrontError>;

fn setup(msg: impl Into<String>) -> NetfrontError {
    NetfrontError::Setup(msg.into())
}

/// How this vif's buffers are granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantMode {
    /// Ram thesis ch. 4: grants tracked and kept across packets.
    Ngm,
    /// Xen grant table v1: a grant per packet buffer, revoked on completion.
    PerPacket,
}

/// What the frontend learned from the store.
#[derive(Debug, Clone)]
pub struct FrontendInfo {
    pub dev: String,
    pub backend: String,
    pub backend_id: DomId,
    pub mac: String,
    pub copy_rx: bool,
    /// The offloads negotiated, each on its own (Menon 2006 §3): what the
    /// toolstack chose for the vif (`splitnet-offload`) and the backend
    /// offers.
    pub offload: Caps,
    pub split_evtchn: bool,
    pub grants: GrantMode,
    /// The link's MTU: the backend's `mtu` node (default 1500), capped at
    /// one slot's worth without scatter-gather.
    pub mtu: u16,
    /// The backend filters multicast (`feature-multicast-control`): this
    /// frontend asks for it and says which groups the guest joined.
    pub multicast: bool,
    /// Large receive offload here, in the guest (frontend key
    /// `splitnet-lro` = `guest`; Ram thesis 5.1).
    pub lro: bool,
    /// Half-page receive buffers (Ram thesis 5.3): the guest asked for them
    /// (`splitnet-rx-buffer` = `half`) and the backend takes them
    /// (`feature-rx-half-page`). Buffer id `i` is then the half `i % 2` of
    /// RX page `i / 2`: the same 256 buffers in half as many pages, so a
    /// page's grant serves twice the packets.
    pub rx_half: bool,
    /// Prefetch the next received frame's header (`splitnet-prefetch`).
    pub prefetch: bool,
}

/// The buffer grants of one vif, under either mechanism.
enum Grants {
    Ngm(Box<GrantTrack>),
    PerPacket,
}

/// One fragment of a received frame, still in the RX buffer of request `id`.
#[derive(Debug, Clone, Copy)]
struct Frag {
    id: u16,
    off: u16,
    len: u16,
}

/// A received frame: its fragments in `rx_frags[first..first + count]`.
#[derive(Debug, Clone, Copy)]
struct RxFrame {
    first: usize,
    count: usize,
    len: usize,
    csum_blank: bool,
    validated: bool,
    gso: Option<Gso>,
    bad: bool,
}

/// How many buffer ids are in each place (see [`Netfront::buffer_ids`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferIds {
    pub tx_free: usize,
    pub tx_in_flight: usize,
    pub rx_free: usize,
    pub rx_posted: usize,
    /// Held by received frames not yet delivered.
    pub rx_held: usize,
    /// A frame is half received (more data or extra-info slots to come).
    pub rx_assembling: bool,
}

/// A connected frontend.
pub struct Netfront {
    pub info: FrontendInfo,
    tx: FrontRing<Mem, TxRequest, TxResponse>,
    rx: FrontRing<Mem, RxRequest, RxResponse>,
    tx_evt: EventChannel,
    rx_evt: Option<EventChannel>,
    pool: Arc<Mapping>,
    grants: Grants,
    /// Free TX request ids; id i owns TX buffer frame TX_BUF_BASE + i.
    tx_free: Vec<u16>,
    /// The grant of each TX id in flight.
    tx_slots: Vec<Option<u32>>,
    /// Free RX request ids; id i owns RX buffer frame RX_BUF_BASE + i.
    rx_free: Vec<u16>,
    /// The grant of each RX id posted.
    rx_slots: Vec<Option<u32>>,
    /// The id posted at each RX ring position: a response answers the
    /// request in its position (an extra-info slot carries no id of its own).
    rx_ring_ids: Vec<u16>,
    /// Fragments of received frames not yet delivered (reused, never shrunk).
    rx_frags: Vec<Frag>,
    /// Received frames not yet delivered.
    rx_ready: Vec<RxFrame>,
    /// The frame being assembled, if any.
    rx_cur: Option<RxFrame>,
    rx_extra_pending: bool,
    /// The frame's last data slot arrived (extras may still follow).
    rx_data_done: bool,
    pub counters: VifCounters,
    connected: bool,
    tracer: Tracer,
    /// The TX batch being queued: when it started, and packets so far.
    tx_batch: Option<(u64, u64)>,
    /// First pool frame of this vif's rings and buffers.
    base: u32,
    /// The ring pages' grants.
    ring_refs: [u32; 2],
    /// The multicast groups the backend was told the guest joined.
    mcast_joined: Vec<[u8; 6]>,
    /// `request-multicast-control` was written 1 (and not 0 since).
    mcast_requested: bool,
    /// The coalescer of [`FrontendInfo::lro`]: frames of one ring drain
    /// go to the TAP merged.
    lro: Option<Lro>,
}

fn flag(hv: &mut HvClient, path: &str) -> bool {
    hv.store_read_str(path)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

fn window(pool: &Arc<Mapping>, frame: u32) -> Result<Mem> {
    Window::new(pool.clone(), frame as usize * PAGE_SIZE, PAGE_SIZE)
        .ok_or_else(|| setup(format!("frame {frame} is outside the pool")))
}

fn run_ip(args: &[&str]) -> Result<()> {
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
fn frame_off(frame: u32) -> usize {
    abi::Pfn::new(frame).base()
}
/// What the backend offers, and what the toolstack chose for this vif:
/// the frontend's facts, and whether it uses the new grant mechanism.
fn negotiate(
    hv: &mut HvClient,
    dev: &str,
    backend: &str,
    backend_id: DomId,
    mac: &str,
) -> Result<(FrontendInfo, bool)> {
    let mtu = link_mtu(hv, backend)?;
    let offload = negotiate_offloads(hv, dev, backend)?;
    let copy_rx = hv
        .store_read_str(&format!("{backend}/splitnet-rx-mode"))
        .map(|m| m == "copy")
        .unwrap_or(true)
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
    let prefetch = flag(hv, &format!("{dev}/splitnet-prefetch"));
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
        // Without scatter-gather a frame takes one slot.
        mtu: if offload.sg {
            mtu
        } else {
            one_slot_mtu(dev, mtu)
        },
        multicast,
        lro: hv
            .store_read_str(&format!("{dev}/{}", lro::KEY))
            .is_ok_and(|v| v == "guest"),
        rx_half,
        prefetch,
    };
    Ok((info, ngm))
}

/// The offloads this vif uses: those the toolstack chose for it
/// (`splitnet-offload`, a set's name) that the backend offers, each key on
/// its own; TSO only beside scatter-gather and checksum offload.
fn negotiate_offloads(hv: &mut HvClient, dev: &str, backend: &str) -> Result<Caps> {
    let wanted = match hv.store_read_str(&format!("{backend}/splitnet-offload")) {
        Ok(v) => Caps::parse(&v).map_err(|e| setup(format!("{backend}/splitnet-offload: {e}")))?,
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
fn wants_half_pages(hv: &mut HvClient, dev: &str, backend: &str, possible: bool) -> bool {
    let asked = hv
        .store_read_str(&format!("{dev}/splitnet-rx-buffer"))
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

/// The backend's `mtu` node: 1500 when absent; a value outside
/// 68..=9000 refuses the vif.
fn link_mtu(hv: &mut HvClient, backend: &str) -> Result<u16> {
    let Ok(v) = hv.store_read_str(&format!("{backend}/{}", keys::MTU)) else {
        return Ok(abi::xenbus::DEFAULT_MTU);
    };
    abi::xenbus::parse_mtu(&v).map_err(|e| setup(format!("{backend}/{} = {v:?}: {e}", keys::MTU)))
}

/// An MTU capped at what one slot holds, with a word when it is.
fn one_slot_mtu(dev: &str, mtu: u16) -> u16 {
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
struct RingChannels {
    tx_ref: u32,
    rx_ref: u32,
    tx_evt: EventChannel,
    rx_evt: Option<EventChannel>,
}

/// Grants the backend the ring pages of the vif at `base` and allocates
/// its event channels; whatever fails half-way is given back.
fn grant_rings(
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
            rx_free: (0..RING as u16).rev().collect(),
            rx_slots: vec![None; RING as usize],
            rx_ring_ids: vec![0; RING as usize],
            rx_frags: Vec::with_capacity(2 * RING as usize),
            rx_ready: Vec::with_capacity(RING as usize),
            rx_cur: None,
            rx_extra_pending: false,
            rx_data_done: false,
            counters: VifCounters::default(),
            connected: true,
            tracer: hv.tracer(),
            tx_batch: None,
            base,
            ring_refs: [rc.tx_ref, rc.rx_ref],
            mcast_joined: Vec::new(),
            mcast_requested: false,
            lro: None,
        };
        if nf.info.lro {
            nf.lro = Some(Lro::new());
        }
        // Whatever fails from here gives back all the channel holds.
        match nf.publish(hv, handle, ngm, timeout) {
            Ok(()) => Ok(nf),
            Err(e) => {
                nf.release(hv);
                Err(e)
            }
        }
    }

    /// The rest of the handshake: the buffers' grants under the new
    /// mechanism, the channel's keys in the store, Connected on both ends,
    /// and the RX buffers posted.
    fn publish(
        &mut self,
        hv: &mut HvClient,
        handle: u32,
        ngm: bool,
        timeout: Duration,
    ) -> Result<()> {
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
        let backend = self.info.backend.clone();
        let s = hv.wait_state(&backend, timeout, |s| {
            matches!(
                s,
                XenbusState::Connected | XenbusState::Closing | XenbusState::Closed
            )
        })?;
        if s != XenbusState::Connected {
            // It gave the vif up (a quota ran out): waiting longer cannot help.
            let why = hv.store_read_str(&format!("{backend}/disconnect-reason"));
            return Err(NetfrontError::Setup(format!(
                "the backend closed instead of connecting: {}",
                why.unwrap_or_default()
            )));
        }
        self.refill_rx(hv)
    }

    /// Grants every buffer of vif `vif`'s part of the pool once, through
    /// the track table, so the data path never needs hv (Ram thesis 4.7: a
    /// pool of I/O buffers). What it granted is revoked if it fails.
    fn warm_grants(&self, hv: &mut HvClient, vif: u32) -> Result<GrantTrack> {
        let (backend, dev) = (self.info.backend_id, &self.info.dev);
        let (table, entries) = hv.ngm_setup(backend)?;
        if entries != hypercall::ngm::NGM_ENTRIES {
            return Err(setup(format!(
                "hv offers {entries} grant entries; this build expects {}",
                hypercall::ngm::NGM_ENTRIES
            )));
        }
        let mut track = GrantTrack::partition(vif, MAX_VIFS);
        for id in 0..RING as u16 {
            for (frame, writable) in [(self.tx_frame(id), false), (self.rx_frame(id), true)] {
                match track.acquire(hv, backend, frame, writable) {
                    Ok(g) => track.release(g),
                    Err(e) => {
                        track.revoke_all(hv, backend);
                        return Err(setup(format!("granting buffer frame {frame}: {e}")));
                    }
                }
            }
        }
        if let Err(e) = hv.store_write(&format!("{dev}/{}", keys::NGM_TABLE), &table.to_string()) {
            track.revoke_all(hv, backend);
            return Err(e.into());
        }
        Ok(track)
    }

    fn tx_frame(&self, id: u16) -> u32 {
        self.base + TX_BUF_BASE + u32::from(id)
    }

    /// The page of RX buffer `id` (two buffers a page with half pages).
    fn rx_frame(&self, id: u16) -> u32 {
        let page = if self.info.rx_half { id / 2 } else { id };
        self.base + RX_BUF_BASE + u32::from(page)
    }

    /// Where RX buffer `id` starts in its page.
    fn rx_buf_off(&self, id: u16) -> u16 {
        if self.info.rx_half {
            (id % 2) * RX_HALF
        } else {
            0
        }
    }

    /// The size of an RX buffer.
    fn rx_buf_len(&self) -> usize {
        if self.info.rx_half {
            usize::from(RX_HALF)
        } else {
            PAGE_SIZE
        }
    }

    /// Data slots of the largest frame received.
    fn rx_max_slots(&self) -> usize {
        if self.info.rx_half {
            RX_MAX_DATA_SLOTS
        } else {
            MAX_DATA_SLOTS
        }
    }

    /// Where a received fragment's bytes are in the pool.
    fn frag_off(&self, fr: &Frag) -> usize {
        frame_off(self.rx_frame(fr.id)) + fr.off as usize
    }

    /// Prefetches the header of the received frame after the `i`th (Ram
    /// thesis 5.2), so that it is in the cache when its turn comes.
    fn prefetch_after(&self, i: usize) {
        if !self.info.prefetch {
            return;
        }
        if let Some(fr) = self
            .rx_ready
            .get(i + 1)
            .and_then(|f| self.rx_frags.get(f.first))
        {
            self.pool.prefetch(self.frag_off(fr));
        }
    }

    /// Whether a data response lies in the buffer its id names: with half
    /// pages, at that buffer's offset and within its 2 KiB (the page check
    /// alone would let a backend point a response at the neighbouring
    /// buffer). A misplaced one is counted.
    fn rx_placed(&mut self, rsp: &RxResponse) -> bool {
        if !self.info.rx_half || rsp.status <= 0 {
            return true;
        }
        let placed = rsp.offset == self.rx_buf_off(rsp.id)
            && usize::from(rsp.status.unsigned_abs()) <= self.rx_buf_len();
        if !placed {
            self.counters.reject("rx_bad_offset");
        }
        placed
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

    /// Event-channel descriptors to poll.
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let mut v = vec![self.tx_evt.fd()];
        if let Some(r) = &self.rx_evt {
            v.push(r.fd());
        }
        v
    }

    /// Whether the channel is still up.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    fn rx_channel(&self) -> &EventChannel {
        self.rx_evt.as_ref().unwrap_or(&self.tx_evt)
    }

    /// Acknowledges notifications; false when the backend closed the channel.
    fn ack(&mut self) -> bool {
        if self.tx_evt.ack() {
            self.counters.notifications_received += 1;
        }
        if let Some(r) = &self.rx_evt {
            if r.ack() {
                self.counters.notifications_received += 1;
            }
        }
        if self.tx_evt.is_closed() || self.rx_channel().is_closed() {
            self.disconnect("the backend closed the event channel");
            return false;
        }
        true
    }

    /// One round of work: acknowledges notifications, completes TX, appends
    /// received packets to `out` (copied out of the RX buffers), and reposts
    /// buffers.
    pub fn poll(&mut self, hv: &mut HvClient, out: &mut Vec<Packet>) -> Result<()> {
        if !self.connected || !self.ack() {
            return Ok(());
        }
        let r = self.poll_rings(hv, out);
        self.contain(r)
    }

    /// A ring the backend broke (a response producer index running ahead of
    /// the requests, or past the ring) is counted and takes this vif's link
    /// down; the guest carries on. Every other error is returned.
    fn contain(&mut self, r: Result<()>) -> Result<()> {
        match r {
            Err(NetfrontError::Ring(e)) => {
                self.counters.reject("ring_overflow");
                self.disconnect(&format!("the backend broke a ring: {e}"));
                Ok(())
            }
            other => other,
        }
    }

    fn poll_rings(&mut self, hv: &mut HvClient, out: &mut Vec<Packet>) -> Result<()> {
        self.complete_tx(hv)?;
        if !self.can_send() {
            self.arm_tx_completions(hv)?;
        }
        let t0 = trace::now();
        self.receive(hv)?;
        let got = self.rx_ready.len();
        for i in 0..got {
            let f = self.rx_ready[i];
            self.prefetch_after(i);
            if let Some(p) = self.frame_to_packet(&f) {
                out.push(p);
            }
        }
        self.release_received();
        self.refill_rx(hv)?;
        if got > 0 {
            self.tracer.record(DomainEvent::NetfrontRx, t0, got as u64);
        }
        Ok(())
    }

    /// Marks the frontend disconnected; the backend is gone.
    pub fn disconnect(&mut self, why: &str) {
        if self.connected {
            eprintln!("netfront {}: link down: {why}", self.info.dev);
            self.connected = false;
        }
    }

    /// Whether one more packet of any size fits on the TX ring now.
    pub fn can_send(&self) -> bool {
        self.connected
            && self.tx.free_requests() >= MAX_SLOTS
            && self.tx_free.len() >= MAX_DATA_SLOTS
    }

    /// Queues one packet on the TX ring (published by [`Netfront::flush`]),
    /// copying it into TX buffers. Check [`Netfront::can_send`] first.
    pub fn send(&mut self, hv: &mut HvClient, pkt: Packet) -> Result<()> {
        if !self.can_send() {
            return Err(setup("the TX ring is full"));
        }
        self.count_tx_batch();
        self.queue_tx(hv, pkt)
    }

    fn count_tx_batch(&mut self) {
        let b = self.tx_batch.get_or_insert((trace::now(), 0));
        b.1 += 1;
    }

    /// Publishes queued requests and notifies the backend if it asked.
    pub fn flush(&mut self) -> Result<()> {
        let notify = self.tx.push_requests_and_check_notify();
        let r = if notify { self.tx_evt.notify() } else { Ok(()) };
        if notify && r.is_ok() {
            self.counters.notifications_sent += 1;
        }
        if let Some((t0, n)) = self.tx_batch.take() {
            self.tracer.record(DomainEvent::NetfrontTx, t0, n);
        }
        Ok(r?)
    }

    /// The raw TX ring, for tests that play a hostile frontend.
    #[doc(hidden)]
    pub fn tx_ring(&mut self) -> &mut FrontRing<Mem, TxRequest, TxResponse> {
        &mut self.tx
    }

    /// The raw RX ring, for tests that play a hostile frontend.
    #[doc(hidden)]
    pub fn rx_ring(&mut self) -> &mut FrontRing<Mem, RxRequest, RxResponse> {
        &mut self.rx
    }

    /// The TX event channel, for tests that play a hostile frontend.
    #[doc(hidden)]
    pub fn tx_channel(&self) -> &EventChannel {
        &self.tx_evt
    }

    /// Where every buffer id is, for the fuzz targets that play a hostile
    /// backend (`crates/tools/fuzz`): an error names an id found in two places;
    /// otherwise the count in each. Not part of the API.
    #[doc(hidden)]
    pub fn buffer_ids(&self) -> std::result::Result<BufferIds, String> {
        let mut ids = BufferIds {
            rx_assembling: self.rx_cur.is_some() || self.rx_extra_pending,
            ..BufferIds::default()
        };
        let mut seen = [[0u8; RING as usize]; 2];
        let mut see = |ring: usize, id: u16, n: &mut usize| {
            seen[ring][id as usize] = seen[ring][id as usize].saturating_add(1);
            *n += 1;
        };
        for &id in &self.tx_free {
            see(0, id, &mut ids.tx_free);
        }
        for (id, _) in self
            .tx_slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
        {
            see(0, id as u16, &mut ids.tx_in_flight);
        }
        for &id in &self.rx_free {
            see(1, id, &mut ids.rx_free);
        }
        for (id, _) in self
            .rx_slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
        {
            see(1, id as u16, &mut ids.rx_posted);
        }
        for f in &self.rx_frags {
            see(1, f.id, &mut ids.rx_held);
        }
        for (ring, name) in [(0, "TX"), (1, "RX")] {
            if let Some(id) = seen[ring].iter().position(|&n| n > 1) {
                return Err(format!(
                    "{name} buffer id {id} is in {} places",
                    seen[ring][id]
                ));
            }
        }
        Ok(ids)
    }

    /// Grant statistics of the new grant mechanism: distinct pages granted
    /// and the packets they served (Ram thesis 4.8), if it is in use.
    /// Tells the backend the multicast groups the guest has joined now
    /// (`feature-multicast-control`): an MCAST_DEL extra for each group
    /// left, an MCAST_ADD for each joined, each on a request of its own
    /// that carries no frame. A request that finds no room waits for the
    /// next call. Nothing happens if the backend does not filter. Whether
    /// a change was sent.
    pub fn set_multicast(&mut self, hv: &mut HvClient, groups: &[[u8; 6]]) -> Result<bool> {
        if !self.info.multicast || !self.connected {
            return Ok(false);
        }
        let mut sent = false;
        let mut i = 0;
        while i < self.mcast_joined.len() {
            let g = self.mcast_joined[i];
            if groups.contains(&g) {
                i += 1;
            } else if self.queue_control(hv, Extra::McastDel { addr: g })? {
                self.mcast_joined.swap_remove(i);
                sent = true;
            } else {
                break;
            }
        }
        for &g in groups {
            if self.mcast_joined.contains(&g) {
                continue;
            }
            if !self.queue_control(hv, Extra::McastAdd { addr: g })? {
                break;
            }
            self.mcast_joined.push(g);
            sent = true;
        }
        if sent {
            self.flush()?;
        }
        Ok(sent)
    }

    /// Asks the backend to filter multicast, or (`on` false) to stop
    /// (`request-multicast-control`, which a backend with
    /// `feature-dynamic-multicast-control` takes at any time). Asked once
    /// the groups are known, so a group the guest joined is never
    /// filtered out on the way. Written only when it changes.
    pub fn request_multicast_control(&mut self, hv: &mut HvClient, on: bool) -> Result<()> {
        if !self.info.multicast || self.mcast_requested == on {
            return Ok(());
        }
        let node = format!("{}/{}", self.info.dev, keys::REQUEST_MULTICAST_CONTROL);
        hv.store_write(&node, if on { "1" } else { "0" })?;
        self.mcast_requested = on;
        Ok(())
    }

    /// Brings the backend's filter in line with the guest's `groups`
    /// ([`Netfront::set_multicast`]) and, with `may_filter`, asks for
    /// filtering once every group is told in an earlier call (so the
    /// backend has taken them before it filters). More groups than the backend's
    /// filter holds ([`abi::netif::MCAST_MAX`], as Linux netback's)
    /// turn filtering off, so every multicast frame comes, until they are
    /// fewer again. Whether the backend knows every group (or filtering
    /// is off for good reason).
    pub fn sync_multicast(
        &mut self,
        hv: &mut HvClient,
        groups: &[[u8; 6]],
        may_filter: bool,
    ) -> Result<bool> {
        if groups.len() > abi::netif::MCAST_MAX {
            self.request_multicast_control(hv, false)?;
            return Ok(true);
        }
        let sent = self.set_multicast(hv, groups)?;
        let told = &self.mcast_joined;
        let all = told.len() == groups.len() && groups.iter().all(|g| told.contains(g));
        if may_filter && all && !sent {
            self.request_multicast_control(hv, true)?;
        }
        Ok(all)
    }

    /// The groups the backend was told of.
    pub fn multicast_groups(&self) -> &[[u8; 6]] {
        &self.mcast_joined
    }

    /// Queues a control request: an empty request with `extra` after it.
    /// False when there is no room now.
    fn queue_control(&mut self, hv: &mut HvClient, extra: Extra) -> Result<bool> {
        if self.tx.free_requests() < 2 {
            return Ok(false);
        }
        let Some(id) = self.tx_free.pop() else {
            return Ok(false);
        };
        let gref = match self.grant_buffer(hv, self.tx_frame(id), false) {
            Ok(g) => g,
            Err(reason) => {
                self.tx_free.push(id);
                self.counters.drop(reason);
                return Ok(false);
            }
        };
        self.tx_slots[id as usize] = Some(gref);
        self.tx.push_request(&TxRequest {
            gref,
            offset: 0,
            flags: TxFlags::EXTRA_INFO,
            id,
            size: 0,
        })?;
        let x = ExtraInfo {
            flags: ExtraFlags::EMPTY,
            extra,
        };
        self.tx.push_request(&x.to_tx_slot())?;
        Ok(true)
    }

    pub fn grant_stats(&self) -> Option<hypercall::ngm_client::TrackStats> {
        match &self.grants {
            Grants::Ngm(t) => Some(t.stats()),
            Grants::PerPacket => None,
        }
    }

    /// A packet from private memory: shaped for what the backend takes,
    /// then copied into TX buffers.
    fn queue_tx(&mut self, hv: &mut HvClient, pkt: Packet) -> Result<()> {
        let caps = offload::Offloads::from(self.info.offload);
        let mut out = Vec::new();
        if offload::prepare(pkt, caps, &mut out).is_err() {
            self.counters.drop("malformed_from_guest");
            return Ok(());
        }
        for p in out {
            let n = p.data.len().div_ceil(PAGE_SIZE).max(1);
            if p.data.len() > MAX_FRAME || n > MAX_DATA_SLOTS {
                self.counters.drop("oversize");
                continue;
            }
            if self.tx.free_requests() < MAX_SLOTS || self.tx_free.len() < n {
                self.counters.drop("tx_ring_full");
                continue;
            }
            let mut ids = [0u16; MAX_DATA_SLOTS];
            for (i, chunk) in p.data.chunks(PAGE_SIZE).enumerate() {
                let id = self.tx_free.pop().unwrap_or_default();
                ids[i] = id;
                self.pool.write_bytes(frame_off(self.tx_frame(id)), chunk);
            }
            self.queue_frames(hv, &ids[..n], p.data.len(), p.csum, p.gso)?;
        }
        Ok(())
    }

    /// Puts a frame already in the TX buffers of `ids` on the ring: grants
    /// every buffer first, so a refused grant never leaves half a packet.
    fn queue_frames(
        &mut self,
        hv: &mut HvClient,
        ids: &[u16],
        len: usize,
        csum: Csum,
        gso: Option<Gso>,
    ) -> Result<()> {
        let mut grefs = [0u32; MAX_DATA_SLOTS];
        for (k, &id) in ids.iter().enumerate() {
            match self.grant_buffer(hv, self.tx_frame(id), false) {
                Ok(g) => grefs[k] = g,
                Err(reason) => {
                    for (&id, &g) in ids[..k].iter().zip(&grefs) {
                        if self.end_grant(hv, g) {
                            self.tx_free.push(id);
                        }
                    }
                    self.tx_free.extend_from_slice(&ids[k..]);
                    self.counters.drop(reason);
                    return Ok(());
                }
            }
        }
        let mut flags = csum.tx_flags();
        if gso.is_some() {
            flags |= TxFlags::EXTRA_INFO;
        }
        let mut left = len;
        for (k, (&id, &gref)) in ids.iter().zip(&grefs).enumerate() {
            let chunk = left.min(PAGE_SIZE);
            left -= chunk;
            let more = if k + 1 < ids.len() {
                TxFlags::MORE_DATA
            } else {
                TxFlags::EMPTY
            };
            let (f, size) = if k == 0 {
                (flags | more, len as u16)
            } else {
                (more, chunk as u16)
            };
            self.tx_slots[id as usize] = Some(gref);
            self.tx.push_request(&TxRequest {
                gref,
                offset: 0,
                flags: f,
                id,
                size,
            })?;
            if k == 0 {
                if let Some(g) = gso {
                    self.tx.push_request(&g.to_extra().to_tx_slot())?;
                }
            }
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        Ok(())
    }

    /// Grants the backend access to one of our buffers for one use.
    fn grant_buffer(
        &mut self,
        hv: &mut HvClient,
        frame: u32,
        writable: bool,
    ) -> std::result::Result<u32, &'static str> {
        let backend = self.info.backend_id;
        match &mut self.grants {
            Grants::Ngm(t) => t
                .acquire(hv, backend, frame, writable)
                .map_err(|e| match e {
                    TrackError::SetFull => "grant_track_full",
                    _ => "grant_failed",
                }),
            Grants::PerPacket => {
                self.counters.grant("grant", 1);
                hv.grants()
                    .grant_access(backend, frame, !writable)
                    .map_err(|_| "grant_failed")
            }
        }
    }

    /// Ends one use of a buffer's grant: a track-table release under the
    /// new grant mechanism (no hypercall), a revocation per packet otherwise.
    /// False when a per-packet grant is still in use by the backend, so the
    /// buffer must stay out of use.
    fn end_grant(&mut self, hv: &mut HvClient, gref: u32) -> bool {
        match &mut self.grants {
            Grants::Ngm(t) => {
                t.release(gref);
                true
            }
            Grants::PerPacket => {
                self.counters.grant("revoke", 1);
                hv.grants().end_access(gref).is_ok()
            }
        }
    }

    /// Processes TX responses: ends the grants and frees the buffers. Under
    /// the new grant mechanism this needs no hypercall at all.
    fn complete_tx(&mut self, hv: &mut HvClient) -> Result<()> {
        while let Some(rsp) = self.tx.next_response()? {
            if rsp.status == NETIF_RSP_NULL {
                continue;
            }
            let Some(gref) = self
                .tx_slots
                .get_mut(rsp.id as usize)
                .and_then(Option::take)
            else {
                self.counters.reject("tx_response_unknown_id");
                continue;
            };
            if rsp.status != NETIF_RSP_OKAY {
                self.counters.drop("backend_error");
            }
            if self.end_grant(hv, gref) {
                self.tx_free.push(rsp.id);
            } else {
                // Still mapped by the backend: the buffer stays out of use.
                self.counters.drop("tx_buffer_still_in_use");
            }
        }
        Ok(())
    }

    /// Asks to be notified of TX completions, and takes any that raced in.
    /// Only a frontend that has run out of TX buffers asks: otherwise
    /// completions are reaped when it next sends, with no wake-up at all.
    fn arm_tx_completions(&mut self, hv: &mut HvClient) -> Result<()> {
        while self.tx.final_check_for_responses()? {
            self.complete_tx(hv)?;
        }
        Ok(())
    }

    /// Posts every free RX buffer to the backend.
    fn refill_rx(&mut self, hv: &mut HvClient) -> Result<()> {
        let mut posted = false;
        while self.rx.free_requests() > 0 {
            let Some(id) = self.rx_free.pop() else { break };
            let frame = self.rx_frame(id);
            let gref = if !self.info.copy_rx {
                self.counters.grant("grant", 1);
                hv.grants()
                    .accept_transfer(self.info.backend_id, frame)
                    .inspect_err(|_| self.rx_free.push(id))?
            } else {
                match self.grant_buffer(hv, frame, true) {
                    Ok(g) => g,
                    Err(reason) => {
                        self.rx_free.push(id);
                        self.counters.drop(reason);
                        break;
                    }
                }
            };
            self.rx_slots[id as usize] = Some(gref);
            self.rx_ring_ids[(self.rx.req_prod_pvt() & (RING - 1)) as usize] = id;
            let offset = self.rx_buf_off(id);
            self.rx.push_request(&RxRequest { id, gref, offset })?;
            posted = true;
        }
        if posted && self.rx.push_requests_and_check_notify() {
            self.rx_channel().notify()?;
            self.counters.notifications_sent += 1;
        }
        Ok(())
    }

    /// Whether this frontend negotiated GSO of `kind` on receive.
    fn takes_gso(&self, kind: GsoKind) -> bool {
        match kind {
            GsoKind::TcpV4 => self.info.offload.tso4,
            GsoKind::TcpV6 => self.info.offload.tso6,
        }
    }

    /// Ends the grant of RX buffer `id` after its response; whether the
    /// buffer holds what the backend put there.
    fn rx_grant_done(&mut self, hv: &mut HvClient, id: u16) -> bool {
        let Some(gref) = self.rx_slots.get_mut(id as usize).and_then(Option::take) else {
            self.counters.reject("rx_response_unknown_id");
            return false;
        };
        if !self.info.copy_rx {
            self.counters.grant("transfer_done", 1);
            let want = self.rx_frame(id);
            return matches!(hv.grants().end_transfer(gref), Ok(Some(f)) if f == want);
        }
        self.end_grant(hv, gref)
    }

    /// Takes RX responses and records the frames they complete in `rx_ready`.
    fn receive(&mut self, hv: &mut HvClient) -> Result<()> {
        loop {
            loop {
                let posted = self.rx_ring_ids[(self.rx.rsp_cons() & (RING - 1)) as usize];
                let Some(rsp) = self.rx.next_response()? else {
                    break;
                };
                self.rx_response(hv, posted, rsp);
            }
            if !self.rx.final_check_for_responses()? {
                return Ok(());
            }
        }
    }

    /// Takes one RX response; `posted` is the id of the request in its
    /// ring position.
    fn rx_response(&mut self, hv: &mut HvClient, posted: u16, rsp: RxResponse) {
        if self.rx_extra_pending {
            // An extra-info slot: its request's buffer comes back unused.
            self.rx_extra_pending = false;
            if self.rx_grant_done(hv, posted) {
                self.rx_free.push(posted);
            }
            match ExtraInfo::from_rx_slot(&rsp) {
                Ok(x) => {
                    self.rx_extra_pending = x.more();
                    match Gso::from_extra(&x) {
                        // GSO only of a kind this frontend advertised.
                        Some(g) if !self.takes_gso(g.kind) => {
                            self.counters.reject("rx_gso_not_negotiated");
                            self.mark_bad();
                        }
                        Some(g) => {
                            if let Some(f) = self.rx_cur.as_mut() {
                                f.gso = Some(g);
                            }
                        }
                        None => {}
                    }
                }
                Err(_) => self.mark_bad(),
            }
            if !self.rx_extra_pending && self.rx_data_done {
                self.rx_finish();
            }
            return;
        }
        // Responses come in request order; anything else is a backend bug.
        let in_order = rsp.id == posted;
        if !in_order {
            self.counters.reject("rx_response_out_of_order");
        }
        let landed = self.rx_grant_done(hv, rsp.id);
        let placed = self.rx_placed(&rsp);
        let max_slots = self.rx_max_slots();
        let first = self.rx_frags.len();
        let f = self.rx_cur.get_or_insert(RxFrame {
            first,
            count: 0,
            len: 0,
            csum_blank: rsp.flags.contains(RxFlags::CSUM_BLANK),
            validated: rsp.flags.contains(RxFlags::DATA_VALIDATED),
            gso: None,
            bad: false,
        });
        match (rsp.rx_status(), landed, rsp.check_fits_page()) {
            (Ok(RxStatus::Data(len)), true, Ok(()))
                if in_order
                    && placed
                    && f.len + len as usize <= MAX_FRAME
                    && f.count < max_slots =>
            {
                f.len += len as usize;
                f.count += 1;
                self.rx_frags.push(Frag {
                    id: rsp.id,
                    off: rsp.offset,
                    len,
                });
            }
            _ => {
                f.bad = true;
                // The buffer still comes back (if it is ours at all).
                if landed {
                    f.count += 1;
                    self.rx_frags.push(Frag {
                        id: rsp.id,
                        off: 0,
                        len: 0,
                    });
                }
            }
        }
        if rsp.flags.contains(RxFlags::EXTRA_INFO) {
            self.rx_extra_pending = true;
        }
        if rsp.flags.contains(RxFlags::MORE_DATA) {
            // A frame over several buffers needs scatter-gather.
            if !self.info.offload.sg {
                self.counters.reject("rx_sg_not_negotiated");
                self.mark_bad();
            }
            return;
        }
        self.rx_data_done = true;
        if !self.rx_extra_pending {
            self.rx_finish();
        }
    }

    fn mark_bad(&mut self) {
        if let Some(f) = self.rx_cur.as_mut() {
            f.bad = true;
        }
    }

    /// The frame being assembled is complete.
    fn rx_finish(&mut self) {
        self.rx_data_done = false;
        self.rx_extra_pending = false;
        if let Some(f) = self.rx_cur.take() {
            self.rx_ready.push(f);
        }
    }

    /// Reads the start of a received frame (for its offload state).
    fn frame_head<'b>(&self, f: &RxFrame, buf: &'b mut [u8; HEAD]) -> &'b [u8] {
        let mut at = 0;
        for fr in &self.rx_frags[f.first..f.first + f.count] {
            if at == HEAD {
                break;
            }
            let n = (fr.len as usize).min(HEAD - at);
            self.pool
                .read_bytes(self.frag_off(fr), &mut buf[at..at + n]);
            at += n;
        }
        &buf[..at]
    }

    /// The offload state of a received frame, or None (counted) if the
    /// frame cannot be passed on.
    fn rx_state(&mut self, f: &RxFrame, head: &[u8]) -> Option<Csum> {
        if f.bad || f.len == 0 {
            self.counters.drop("rx_bad_response");
            return None;
        }
        let csum = Csum::from_netif(f.csum_blank, f.validated, head, f.len);
        if csum.is_none() {
            self.counters.drop("rx_csum_blank_not_tcp_udp");
        }
        csum
    }

    /// Copies a received frame out of the RX buffers (the library path).
    fn frame_to_packet(&mut self, f: &RxFrame) -> Option<Packet> {
        let mut hb = [0u8; HEAD];
        let head_len = self.frame_head(f, &mut hb).len();
        let csum = self.rx_state(f, &hb[..head_len])?;
        let mut data = vec![0u8; f.len];
        let mut at = 0;
        for fr in &self.rx_frags[f.first..f.first + f.count] {
            let n = fr.len as usize;
            self.pool
                .read_bytes(self.frag_off(fr), &mut data[at..at + n]);
            at += n;
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += f.len as u64;
        Some(Packet {
            data,
            csum,
            gso: f.gso,
        })
    }

    /// Writes a received frame to the TAP straight from its RX buffers.
    fn frame_to_tap(&mut self, f: &RxFrame, tap: &Tap) {
        let mut hb = [0u8; HEAD];
        let head_len = self.frame_head(f, &mut hb).len();
        let Some(csum) = self.rx_state(f, &hb[..head_len]) else {
            return;
        };
        if self.lro.is_some() && self.lro_push(f, csum, tap) {
            return;
        }
        let hdr = packet::encode_vnet_hdr(csum, f.gso, &hb[..head_len], f.len);
        let mut parts: [IoPart<'_>; RX_MAX_DATA_SLOTS + 1] =
            std::array::from_fn(|_| IoPart::Private(&[]));
        parts[0] = IoPart::Private(&hdr);
        for (k, fr) in self.rx_frags[f.first..f.first + f.count].iter().enumerate() {
            parts[k + 1] = IoPart::Shared {
                map: &self.pool,
                off: self.frag_off(fr),
                len: fr.len as usize,
            };
        }
        match tap.writev(&parts[..f.count + 1]) {
            Ok(_) => {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += f.len as u64;
            }
            Err(_) => self.counters.drop("tap_write_failed"),
        }
    }

    /// Offers a received frame to LRO; true when it took it (it reaches the
    /// TAP merged, or alone, by [`Netfront::flush_lro`] at the latest).
    fn lro_push(&mut self, f: &RxFrame, csum: Csum, tap: &Tap) -> bool {
        // A frame over several buffers (2 KiB ones with half pages too) is
        // one frame to LRO: its segments in order.
        let mut segs = [(0usize, 0usize); RX_MAX_DATA_SLOTS];
        for (s, fr) in segs
            .iter_mut()
            .zip(&self.rx_frags[f.first..f.first + f.count])
        {
            *s = (self.frag_off(fr), fr.len as usize);
        }
        let frame = FrameRef {
            head: &[],
            body: &[],
            map: Some(&self.pool),
            segs: &segs[..f.count],
            len: f.len,
            csum,
            gso: f.gso,
            vlan: None,
        };
        let Some(lro) = self.lro.as_mut() else {
            return false;
        };
        let counters = &mut self.counters;
        let taken = lro.push(&frame, &mut |g| tap_write(tap, counters, g));
        if taken {
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += f.len as u64;
        }
        taken
    }

    /// Writes out what LRO holds: the end of a ring drain.
    fn flush_lro(&mut self, tap: &Tap) {
        let Some(lro) = self.lro.as_mut() else {
            return;
        };
        let counters = &mut self.counters;
        if lro.holding() {
            lro.flush(&mut |g| tap_write(tap, counters, g));
        }
        counters.lro_merged = lro.stats.merged;
        counters.lro_flushed = lro.stats.flushed;
    }

    /// Returns the buffers of every delivered frame to the free list.
    fn release_received(&mut self) {
        for fr in self.rx_frags.drain(..) {
            self.rx_free.push(fr.id);
        }
        self.rx_ready.clear();
        // A frame still being assembled keeps its fragments: put them back.
        if let Some(f) = self.rx_cur.as_mut() {
            f.first = 0;
            f.count = 0;
            f.bad = true;
        }
    }
}

/// The link-layer groups interface `ifname` has joined, from the text of
/// `/proc/net/dev_mcast` (index, name, users, global use, address in hex),
/// all of them (past [`abi::netif::MCAST_MAX`], the guest takes every
/// multicast frame: [`Netfront::sync_multicast`]).
pub fn dev_mcast_groups(table: &str, ifname: &str) -> Vec<[u8; 6]> {
    let mut out = Vec::new();
    for line in table.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(hex)) = (f.nth(1), f.nth(2)) else {
            continue;
        };
        if name != ifname || hex.len() != 12 {
            continue;
        }
        let mut a = [0u8; 6];
        let ok = a.iter_mut().enumerate().all(|(i, b)| {
            hex.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .map(|v| *b = v)
                .is_some()
        });
        if ok && !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// Writes a frame in private memory (one LRO put out) to the TAP.
fn tap_write(tap: &Tap, counters: &mut VifCounters, g: &FrameRef<'_>) {
    let hdr = packet::encode_vnet_hdr(g.csum, g.gso, g.head, g.len);
    if tap
        .writev(&[IoPart::Private(&hdr), IoPart::Private(g.head)])
        .is_err()
    {
        counters.drop("tap_write_failed");
    }
}

/// The TAP's offloads: what the channel negotiated, so that without
/// checksum offload or TSO the guest's kernel hands over full checksums
/// and MTU-sized frames (TUN_F_CSUM covers both IP versions).
fn set_offloads(tap: &Tap, nf: &Netfront) -> Result<()> {
    let c = offload::Offloads::from(nf.info.offload);
    tap.set_offloads(TapOffloads {
        csum: c.csum,
        tso4: c.tso4,
        tso6: c.tso6,
    })?;
    Ok(())
}

/// A frontend attached to a TAP in the guest's namespace: the guest kernel's
/// NIC. Frames the guest sends are read from the TAP (with their virtio-net
/// header) straight into TX buffers; received ones are written to it
/// straight from the RX buffers. The TAP outlives its backend: when a
/// driver domain dies the channel is released and the link's carrier goes
/// off; a new backend's channel is attached to the same TAP, so the
/// guest's addresses, routes and TCP connections stay.
pub struct TapNetfront {
    nf: Option<Netfront>,
    tap: Tap,
    /// The TAP's MAC: the vif's, as the toolstack gave it.
    mac: String,
    /// When the groups were last looked at.
    upkeep_at: Option<Instant>,
    /// When they are to be looked at again soon (see [`RECHECK_AFTER`]).
    recheck_at: Option<Instant>,
    /// Upkeep rounds since the channel was attached.
    upkeep_rounds: u32,
}

impl TapNetfront {
    /// Creates TAP `ifname` with the vif's MAC and the negotiated offloads,
    /// gives the guest's first vif the topology's addresses, and brings it up.
    pub fn attach(hv: &mut HvClient, nf: Netfront, ifname: &str) -> Result<TapNetfront> {
        let tap = Tap::create(ifname, true)?;
        set_offloads(&tap, &nf)?;
        let (gso, qlen) = (GUEST_GSO_MAX.to_string(), GUEST_TXQUEUELEN.to_string());
        run_ip(&[
            "link",
            "set",
            ifname,
            "address",
            &nf.info.mac,
            "mtu",
            &nf.info.mtu.to_string(),
            "gso_max_size",
            &gso,
            "txqueuelen",
            &qlen,
        ])?;
        // The link-local address the kernel makes on up is the EUI-64 one
        // of the MAC (not a stable-privacy one, RFC 7217, whatever the
        // namespace's defaults): netback's `ip=` check allows that one.
        // Without IPv6 on the device there is none to make, so a refusal
        // here is no error.
        let _ = run_ip(&["link", "set", ifname, "addrgenmode", "eui64"]);
        run_ip(&["link", "set", ifname, "up"])?;
        let home = format!("/local/domain/{}/splitnet", hv.domid());
        for key in ["ipv4", "ipv6"] {
            let Ok(addr) = hv.store_read_str(&format!("{home}/{key}")) else {
                continue;
            };
            if nf.base != 0 {
                break; // only the first vif has the topology's addresses
            }
            let mut args = vec!["addr", "add", addr.as_str(), "dev", ifname];
            if key == "ipv6" {
                args.push("nodad");
            }
            run_ip(&args)?;
        }
        let mac = nf.info.mac.clone();
        let mut t = TapNetfront {
            nf: Some(nf),
            tap,
            mac,
            upkeep_at: None,
            recheck_at: None,
            upkeep_rounds: 0,
        };
        t.upkeep(hv)?;
        Ok(t)
    }

    /// Control-plane upkeep whatever the caller's pace (never per packet):
    /// the multicast groups are looked at every [`UPKEEP_EVERY`], and when
    /// a recheck asked for by [`TapNetfront::groups_changed`] is due.
    pub fn housekeep(&mut self, hv: &mut HvClient) -> Result<()> {
        let now = Instant::now();
        let periodic = self.upkeep_at.is_none_or(|t| now - t >= UPKEEP_EVERY);
        let recheck = self.recheck_at.is_some_and(|t| t <= now);
        if !periodic && !recheck {
            return Ok(());
        }
        self.recheck_at = None;
        self.upkeep(hv)
    }

    /// The kernel reported a change of links, addresses or groups: the
    /// groups are looked at now, and with `recheck` (the kernel does not
    /// report group joins themselves) once more [`RECHECK_AFTER`] later.
    pub fn groups_changed(&mut self, hv: &mut HvClient, recheck: bool) -> Result<()> {
        if recheck {
            self.recheck_at = Some(Instant::now() + RECHECK_AFTER);
        }
        self.upkeep(hv)
    }

    /// How long until a recheck is due, if one is pending.
    pub fn recheck_due(&self) -> Option<Duration> {
        self.recheck_at
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Tells the backend which link-layer multicast groups the guest's
    /// kernel has joined on the TAP (`/proc/net/dev_mcast`). Filtering is
    /// asked for from the second round on, so that the groups the kernel
    /// joins as the TAP comes up (an address's solicited-node group, a
    /// little after the address) are known before anything is filtered.
    fn upkeep(&mut self, hv: &mut HvClient) -> Result<()> {
        self.upkeep_at = Some(Instant::now());
        let Some(nf) = self
            .nf
            .as_mut()
            .filter(|n| n.is_connected() && n.info.multicast)
        else {
            return Ok(());
        };
        let table = std::fs::read_to_string("/proc/net/dev_mcast")?;
        let groups = dev_mcast_groups(&table, self.tap.name());
        self.upkeep_rounds = self.upkeep_rounds.saturating_add(1);
        if !nf.sync_multicast(hv, &groups, self.upkeep_rounds >= 2)? {
            // The TX ring had no room for every change: soon, not in 2 s.
            self.recheck_at = Some(Instant::now() + RECHECK_AFTER);
        }
        Ok(())
    }

    /// The connected channel, if any.
    pub fn nf(&self) -> Option<&Netfront> {
        self.nf.as_ref()
    }

    /// Whether a channel is attached and up.
    pub fn is_connected(&self) -> bool {
        self.nf.as_ref().is_some_and(Netfront::is_connected)
    }

    /// Gives back the channel's resources (see [`Netfront::release`]); the
    /// TAP, its addresses and its carrier stay (see [`TapNetfront::set_carrier`]).
    pub fn release(&mut self, hv: &mut HvClient, why: &str) {
        if let Some(mut nf) = self.nf.take() {
            nf.disconnect(why);
            nf.release(hv);
        }
    }

    /// Attaches a new backend's channel to the same TAP and brings the
    /// carrier back.
    pub fn reconnect(&mut self, hv: &mut HvClient, nf: Netfront) -> Result<()> {
        self.release(hv, "replaced");
        set_offloads(&self.tap, &nf)?;
        let name = self.tap.name().to_string();
        if nf.info.mac != self.mac {
            // A device the toolstack replaced under the same handle.
            run_ip(&["link", "set", &name, "address", &nf.info.mac])?;
            self.mac = nf.info.mac.clone();
        }
        run_ip(&["link", "set", &name, "mtu", &nf.info.mtu.to_string()])?;
        self.nf = Some(nf);
        self.tap.set_carrier(true)?;
        (self.upkeep_at, self.upkeep_rounds) = (None, 0);
        self.upkeep(hv)
    }

    /// The link's carrier as the guest sees it. The owner decides: a
    /// backend that went away may come back (a driver domain's restart),
    /// and while the carrier stays on the guest's kernel keeps its
    /// neighbour entries (it flushes them when the carrier drops).
    pub fn set_carrier(&self, up: bool) {
        let _ = self.tap.set_carrier(up);
    }

    /// The TAP's descriptor (it outlives every channel attached to it).
    pub fn tap_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.tap.as_fd()
    }

    /// Whether frames the guest writes to the TAP can be taken now: a
    /// channel is up and its TX ring has room (otherwise the backend's
    /// completions wake the loop, not the TAP).
    pub fn wants_tap_input(&self) -> bool {
        self.nf
            .as_ref()
            .is_some_and(|n| n.is_connected() && n.can_send())
    }

    /// One round: ring → guest, guest → ring. A ring the backend broke
    /// disconnects the channel (see [`Netfront::poll`]); the owner sees it
    /// in [`TapNetfront::is_connected`].
    pub fn poll_once(&mut self, hv: &mut HvClient) -> Result<()> {
        let Some(nf) = self.nf.as_mut() else {
            return Ok(());
        };
        if !nf.is_connected() || !nf.ack() {
            return Ok(());
        }
        let r = Self::poll_rings(nf, &self.tap, hv);
        nf.contain(r)
    }

    fn poll_rings(nf: &mut Netfront, tap: &Tap, hv: &mut HvClient) -> Result<()> {
        nf.complete_tx(hv)?;
        let t0 = trace::now();
        nf.receive(hv)?;
        let got = nf.rx_ready.len();
        for i in 0..got {
            let f = nf.rx_ready[i];
            nf.prefetch_after(i);
            nf.frame_to_tap(&f, tap);
        }
        nf.flush_lro(tap);
        nf.release_received();
        nf.refill_rx(hv)?;
        if got > 0 {
            nf.tracer.record(DomainEvent::NetfrontRx, t0, got as u64);
        }
        if !nf.is_connected() {
            return Ok(());
        }
        let mut queued = false;
        while nf.can_send() {
            if !Self::read_one(nf, hv, tap)? {
                break;
            }
            queued = true;
        }
        if queued {
            nf.flush()?;
        }
        if !nf.can_send() {
            nf.arm_tx_completions(hv)?;
        }
        Ok(())
    }

    /// Reads one frame from the TAP straight into TX buffers and queues it.
    /// False when the TAP had nothing.
    fn read_one(nf: &mut Netfront, hv: &mut HvClient, tap: &Tap) -> Result<bool> {
        let mut ids = [0u16; MAX_DATA_SLOTS];
        for id in ids.iter_mut() {
            *id = nf.tx_free.pop().unwrap_or_default();
        }
        let mut hdr = [0u8; VNET_HDR_LEN];
        let n = {
            let pool = &*nf.pool;
            let mut parts: [IoPartMut<'_>; MAX_DATA_SLOTS + 1] =
                std::array::from_fn(|_| IoPartMut::Private(&mut []));
            parts[0] = IoPartMut::Private(&mut hdr);
            for (k, &id) in ids.iter().enumerate() {
                parts[k + 1] = IoPartMut::Shared {
                    map: pool,
                    off: frame_off(nf.tx_frame(id)),
                    len: PAGE_SIZE,
                };
            }
            tap.readv(&mut parts)
        };
        let n = match n {
            Ok(Some(n)) => n,
            Ok(None) => {
                nf.tx_free.extend(ids.iter().rev());
                return Ok(false);
            }
            Err(e) => {
                nf.tx_free.extend(ids.iter().rev());
                return Err(e.into());
            }
        };
        let len = n.saturating_sub(VNET_HDR_LEN);
        let used = len.div_ceil(PAGE_SIZE).clamp(1, MAX_DATA_SLOTS);
        nf.tx_free.extend(ids[used..].iter().rev());
        let ids = &ids[..used];
        let give_back = |nf: &mut Netfront, why: &'static str| {
            nf.tx_free.extend_from_slice(ids);
            nf.counters.drop(why);
        };
        if n < VNET_HDR_LEN + 14 {
            give_back(nf, "tap_short_read");
            return Ok(true);
        }
        if len > MAX_FRAME {
            give_back(nf, "oversize");
            return Ok(true);
        }
        let Ok((csum, gso)) = packet::parse_vnet_hdr(&hdr, len) else {
            give_back(nf, "bad_vnet_header");
            return Ok(true);
        };
        nf.count_tx_batch();
        let caps = offload::Offloads::from(nf.info.offload);
        if caps.passes_as_is(csum, gso) {
            nf.queue_frames(hv, ids, len, csum, gso)?;
        } else {
            // The backend cannot take this frame's offloads: finish the work
            // here, on a private copy (never the case with offloads on).
            let mut data = vec![0u8; len];
            for (k, chunk) in data.chunks_mut(PAGE_SIZE).enumerate() {
                nf.pool.read_bytes(frame_off(nf.tx_frame(ids[k])), chunk);
            }
            nf.tx_free.extend_from_slice(ids);
            nf.queue_tx(hv, Packet { data, csum, gso })?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::dev_mcast_groups;

    #[test]
    fn reads_the_taps_groups_from_dev_mcast() {
        let table = "2    ifb0            1     0     333300000001\n\
                     4    eth0            1     0     333300000001\n\
                     4    eth0            1     0     01005e000001\n\
                     4    eth0            1     0     01005e00zz01\n\
                     4    eth0            1     0     01005e\n\
                     garbage\n";
        assert_eq!(
            dev_mcast_groups(table, "eth0"),
            vec![[0x33, 0x33, 0, 0, 0, 1], [0x01, 0x00, 0x5e, 0, 0, 1]]
        );
        assert!(dev_mcast_groups(table, "eth1").is_empty());
        // Past the backend's filter size every group still counts: the
        // frontend then turns filtering off.
        let many: String = (0..100)
            .map(|i| format!("4 eth0 1 0 01005e0000{i:02x}\n"))
            .collect();
        assert_eq!(dev_mcast_groups(&many, "eth0").len(), 100);
    }
}
