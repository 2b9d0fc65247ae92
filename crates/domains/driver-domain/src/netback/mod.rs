//! netback: the driver domain's end of one virtual NIC (Menon 2006 §2,
//! Ram thesis 2.1). It never trusts the frontend: every ring index, grant
//! reference, offset, size and flag is read once and validated, each consumed
//! request gets exactly one response, and a frontend that keeps sending
//! garbage is disconnected.
//!
//! Under the new grant mechanism (Ram thesis ch. 4) netback maps the guest's
//! I/O pool once, at connect, and checks every grant against the translation
//! table hv keeps; TX copies only the headers and hands the port the payload
//! where it lies (Menon 2006 §4.1), RX copies a frame once, into the buffer
//! the guest posted. Under `hv-copy` hv copies each packet's buffers, and in
//! the Xen 2.0 baseline netback maps each TX page and flips each RX page.
//!
//! - this file: the xenbus side (probe, connect, disconnect) and the refusal policy;
//! - [`tx`]: guest → bridge: parse, validate, forward, respond, one batch
//!   loop for every grant mechanism; `grants`: the mechanisms behind one
//!   trait (new grant mechanism, hv copy, Xen 2.0 map), and `hold`: hv-copy
//!   TX gather's;
//! - `rx`: bridge → guest, and `slab`: the frames waiting for the guest's buffers;
//! - [`opts`]: the vif's options (`ip`, `rate`, `mtu`), read at probe.
//!
//! Driver-domain pool layout per vif `i`: from frame `16 + 513 i`, 256
//! staging frames for TX slots and 256 for RX slots (hv-copy and baseline),
//! then the rings' request shadows (every mechanism, [`RequestShadow`]).

mod grants;
pub mod handover;
mod header;
mod hold;
mod mq;
pub mod opts;
mod rx;
pub(crate) mod slab;
mod stall;
mod storm;
pub mod tx;

use crate::antispoof::IpFilter;
use crate::credit::Credit;
use crate::switch::mcast::McastFilter;
use abi::grant::GrantStatus;
use abi::mem::{SharedMemory, Window};
use abi::netif::{
    NetifStatus, RxRequest, RxResponse, TxFlags, TxRequest, TxResponse, XEN_NETIF_NR_SLOTS_MIN,
};
use abi::offloads::Caps;
use abi::ring::{BackRing, RequestShadow};
use abi::vif_backend::{GrantPath, RxPath, TxPath, VifBackend};
use abi::xenbus::{keys, XenbusState};
use domain_common::counters::VifCounters;
use frame::offload::Offloads;
use frame::packet::Gso;
use frame::wire::ETH_HLEN;
use hypercall::gnttab_view::GrantTableView;
use hypercall::ngm_client::NgmView;
use hypercall::trace::Tracer;
use hypercall::{DomId, EventChannel, HvClient, HvError, MappedGrant};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::{Mapping, PAGE_SIZE};

const RING: u32 = 256;
/// Frames per vif: staging (TX + RX), then the frame of the request
/// shadows, as the toolstack sized the pool.
pub const FRAMES_PER_VIF: u32 = abi::vif_backend::DRIVER_FRAMES_PER_VIF;
const _: () = assert!(FRAMES_PER_VIF == 2 * RING + 1);
/// Where the RX and TX request shadows lie in their frame (2,056 and
/// 1,032 bytes).
const RX_SHADOW_AT: usize = 0;
const TX_SHADOW_AT: usize = 2560;
const _: () = assert!(
    TX_SHADOW_AT >= RX_SHADOW_AT + RequestShadow::bytes_needed(RING, RxResponse::SIZE)
        && TX_SHADOW_AT + RequestShadow::bytes_needed(RING, TxResponse::SIZE) <= PAGE_SIZE
);
/// First staging frame of vif 0.
pub const STAGING_BASE: u32 = abi::vif_backend::DRIVER_BASE_FRAMES;
/// Packets per TX round, so one guest cannot starve the others.
const TX_BUDGET: usize = 64;
/// Slots per batch (bounded by the staging frames and the batch page).
const SLOT_BUDGET: usize = 240;
/// Packets queued for a guest that has posted no buffers.
const RX_QUEUE: usize = 1024;
/// How long frames may wait for a guest that takes none before they are
/// dropped, even with a slot free (Linux netback's `rx_drain_timeout`,
/// 10 s; Xen XSA-392).
pub const RX_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of them: one TX round of a sending guest ([`TX_BUDGET`] frames)
/// of 64 KiB GSO packets.
const RX_SLAB_BYTES: usize = TX_BUDGET << 16;
/// A half-page RX buffer (`feature-rx-half-page`).
const RX_HALF: usize = PAGE_SIZE / 2;
/// Refused requests after which the vif is disconnected.
pub const FATAL_LIMIT: u64 = 32;

/// How this vif moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub rx_flip: bool,
    /// How TX reaches the payload (Menon 2006 §4.1).
    pub tx: TxPath,
    /// The offloads the toolstack chose for the vif (`splitnet-offload`),
    /// which the backend offers (Menon 2006 §3).
    pub offload: Caps,
    /// The new grant mechanism (Ram thesis ch. 4) instead of hv copies.
    pub ngm: bool,
    /// Large receive offload here, in the driver domain (backend key
    /// `splitnet-lro` = `driver`; Ram thesis 5.1).
    pub lro: bool,
}

impl Modes {
    /// How TX moves data, as the topology names it.
    pub fn tx_name(&self) -> &'static str {
        self.tx.as_str()
    }
}

/// Errors that stop the backend of one vif (never the driver domain).
#[derive(Debug, thiserror::Error)]
pub enum NetbackError {
    #[error("hypercall: {0}")]
    Hv(#[from] HvError),
    #[error("ring: {0}")]
    Ring(#[from] abi::Error),
    #[error("{0}")]
    Protocol(String),
    /// A vif option the toolstack wrote is malformed: the vif is refused.
    #[error("bad vif option: {0}")]
    Config(String),
}

type Result<T> = std::result::Result<T, NetbackError>;

impl NetbackError {
    /// hv refused for a quota (event channels, store nodes): trying again
    /// cannot help, so the vif is given up ([`give_up`]).
    pub fn is_quota(&self) -> bool {
        matches!(self, NetbackError::Hv(e) if e.kind == hypercall::ErrorKind::Quota)
    }

    /// Trying again cannot help (a quota, or a bad vif option): the vif
    /// is given up ([`give_up`]).
    pub fn gives_up(&self) -> bool {
        self.is_quota() || matches!(self, NetbackError::Config(_))
    }
}

/// Gives up the vif of backend directory `be` for good, as Xen's
/// `xenbus_dev_fatal`: the reason goes to `disconnect-reason`, where the
/// toolstack reports it, and the backend closes.
pub fn give_up(hv: &mut HvClient, be: &str, e: &NetbackError) {
    if matches!(e, NetbackError::Config(_)) {
        let mut c = VifCounters::default();
        c.reject("bad_vif_option");
        if let Ok(json) = serde_json::to_string(&c) {
            let _ = hv.store_write(&format!("{be}/stats"), &json);
        }
    }
    let _ = hv.store_write(&format!("{be}/{}", keys::DISCONNECT_REASON), &e.to_string());
    let _ = hv.switch_state(be, XenbusState::Closed);
}

fn proto(msg: impl Into<String>) -> NetbackError {
    NetbackError::Protocol(msg.into())
}

/// A vif whose handshake has started (features written, InitWait).
pub struct Pending {
    pub guest: DomId,
    pub be: String,
    pub fe: String,
    /// Which attachment of the handle this is (`splitnet-attach`).
    pub attach: String,
    pub index: u32,
    pub modes: Modes,
    /// The vif's MAC: frames from the guest must carry it as their source.
    pub mac: [u8; 6],
    /// The vif's options (`ip`, `rate`, `mtu`).
    pub opts: opts::VifOpts,
    /// `splitnet-prefetch`: prefetch the next frame's header on RX.
    pub prefetch: bool,
}

/// One slot of a TX packet being gathered.
#[derive(Debug, Clone, Copy, Default)]
struct TxSlot {
    id: u16,
    gref: u32,
    offset: u16,
    len: u16,
}

/// A TX packet: its slots, extras, and whether it was refused. Its slots
/// live inline, so parsing a packet allocates nothing.
#[derive(Clone, Copy)]
struct TxPacket {
    slots: [TxSlot; XEN_NETIF_NR_SLOTS_MIN],
    count: usize,
    /// The whole frame's length (the first request's size).
    total: usize,
    extras: usize,
    flags: TxFlags,
    gso: Option<Gso>,
    refused: Option<&'static str>,
    /// Dropped by a vif option (not the frontend's fault: not refused).
    dropped: Option<Dropped>,
    /// A multicast-control request: (add, group); it carries no frame.
    mcast: Option<(bool, [u8; 6])>,
    /// The answer to a control request.
    answer: Option<NetifStatus>,
    first_op: usize,
}

/// Why a vif option dropped a frame the guest sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// `ip=`: the source is not the vif's (the detail says which check).
    Spoofed(&'static str),
    /// Longer than the MTU allows.
    Oversize,
}

impl TxPacket {
    fn slots(&self) -> &[TxSlot] {
        &self.slots[..self.count]
    }

    /// Whether the packet still goes to the bridge.
    fn forwardable(&self) -> bool {
        self.refused.is_none() && self.dropped.is_none() && self.answer.is_none()
    }
}

/// The storage of the TX grant mechanisms that keep any ([`grants`]),
/// reused batch after batch.
#[derive(Default)]
struct TxStates {
    /// hv-copy TX gather's hold and release batches.
    hold: hold::HoldTx,
    /// hv-copy TX copy's batches and the frames copied out.
    copy: grants::CopyTx,
    /// The Xen 2.0 TX map's map and unmap batches.
    mapped: grants::MapTx,
    /// The new grant mechanism's TX copy: the frames copied out.
    ngm_copy: grants::NgmCopyTx,
}

/// The RX ring netback serves.
type RxRing = BackRing<MappedGrant, RxRequest, RxResponse>;

/// A connected backend.
pub struct Netback {
    pub guest: DomId,
    pub be: String,
    pub fe: String,
    /// Which attachment of the handle this is (`splitnet-attach`).
    pub attach: String,
    pub modes: Modes,
    mac: [u8; 6],
    tx: Option<BackRing<MappedGrant, TxRequest, TxResponse>>,
    rx: Option<RxRing>,
    tx_evt: Option<EventChannel>,
    rx_evt: Option<EventChannel>,
    /// What the guest's NIC accepts on receive.
    guest_caps: Offloads,
    /// The offloads both ends negotiated, each on its own: what the
    /// frontend may ask for on transmit.
    negotiated: Caps,
    pool: Arc<Mapping>,
    tx_base: u32,
    rx_base: u32,
    /// Frames waiting for the guest's buffers, in storage allocated at connect.
    rx_slab: slab::FrameSlab,
    /// A copy batch's ops and responses under `hv-copy` (reused).
    rx_ops: Vec<abi::grant::GrantCopy>,
    rx_resps: Vec<rx::CopyResp>,
    /// A flip batch's pages and statuses under Xen 2.0's page flipping (reused).
    rx_flips: Vec<hypercall::Flip>,
    rx_statuses: Vec<i16>,
    pub counters: VifCounters,
    connected: bool,
    /// Ring batches go to the driver domain's trace area.
    tracer: Tracer,
    /// The guest's I/O pool and translation table, under the new grant mechanism.
    ngm: Option<NgmView>,
    /// The guest's I/O pool, read-only, under hv-copy TX gather ([`hold`]),
    /// the Xen 2.0 map and Xen's I/O channel ([`header`]).
    window: Option<Mapping>,
    /// The guest's grant table, read-only, under Xen's I/O channel
    /// ([`header`]).
    gnttab: Option<GrantTableView>,
    /// The TX grant mechanisms' storage, reused batch after batch.
    tx_grants: TxStates,
    /// The TX packets of the batch held for forwarding under the new grant
    /// mechanism, by position in `tx_pkts` (reused, never shrunk).
    tx_held: Vec<grants::Held>,
    /// TX packets of the batch being processed (reused).
    tx_pkts: Vec<TxPacket>,
    /// Request ids seen in the current TX batch, one bit each.
    tx_ids: [u64; 1 << 10],
    /// RX packets delivered since the responses were last published.
    rx_unpublished: u64,
    /// The guest's RX ring overflowed during a delivery (fatal, acted on in flush_rx).
    rx_overflow: bool,
    /// Whether queued frames are reaching the guest ([`Netback::drain_stalled_rx`]).
    rx_stall: stall::Stall,
    /// The guest's notifications without work ([`storm`]): the driver
    /// loop asks it when a throttled vif is due back.
    pub storm: domain_common::storm::Storm,
    /// `ip=`: the addresses the guest may send from.
    ip: Option<IpFilter>,
    /// `rate=`: the transmit credit.
    credit: Option<Credit>,
    /// When the TX batch being processed started (read only under `rate=`).
    now: Instant,
    /// The longest frame the guest may send: MTU plus Ethernet header.
    max_frame: usize,
    /// The vif's MTU (`mtu`): the largest GSO segment size accepted.
    mtu: u16,
    /// The groups the guest joined (`feature-multicast-control`).
    mcast: McastFilter,
    /// Large receive offload for frames bound for this guest, and why it is
    /// off when asked for (see [`rx`]).
    lro: rx::LroState,
    /// The guest posts half-page RX buffers (`request-rx-half-page`).
    rx_half: bool,
    /// Prefetch the next frame's header on RX (Ram thesis 5.2).
    prefetch: bool,
    /// Its dedicated queue's state, while it has one (see [`mq`]).
    mq: Option<Box<mq::MqState>>,
}

fn read_flag(hv: &mut HvClient, path: &str) -> bool {
    hv.store_read_str(path)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

fn read_num(hv: &mut HvClient, path: &str) -> Result<u32> {
    let v = hv.store_read_str(path)?;
    v.trim()
        .parse()
        .map_err(|_| proto(format!("{path} = {v:?} is not a number")))
}
/// What a connected frontend published for its vif: its rings' grants,
/// its event channels (one, or TX and RX apart) and what its NIC accepts.
struct FrontendRings {
    tx_ref: u32,
    rx_ref: u32,
    tx_port: u32,
    rx_port: Option<u32>,
    guest_caps: Offloads,
    /// The offloads negotiated: offered here and taken by the frontend.
    negotiated: Caps,
    /// The frontend takes frames over several slots.
    sg: bool,
    /// It asked for multicast filtering.
    mcast: bool,
    /// It posts two 2 KiB RX buffers per page, offsets in `pad`.
    rx_half: bool,
}

/// Reads what the frontend `fe` published, refusing an RX mode other than
/// the vif's, and derives the offloads its NIC accepts.
fn read_frontend(hv: &mut HvClient, fe: &str, modes: &Modes) -> Result<FrontendRings> {
    let tx_ref = read_num(hv, &format!("{fe}/{}", keys::TX_RING_REF))?;
    let rx_ref = read_num(hv, &format!("{fe}/{}", keys::RX_RING_REF))?;
    let (tx_port, rx_port) = match hv.store_read_str(&format!("{fe}/{}", keys::EVENT_CHANNEL_TX)) {
        Ok(_) => (
            read_num(hv, &format!("{fe}/{}", keys::EVENT_CHANNEL_TX))?,
            Some(read_num(hv, &format!("{fe}/{}", keys::EVENT_CHANNEL_RX))?),
        ),
        Err(_) => (
            read_num(hv, &format!("{fe}/{}", keys::EVENT_CHANNEL))?,
            None,
        ),
    };
    let wants_copy = read_flag(hv, &format!("{fe}/{}", keys::REQUEST_RX_COPY));
    if wants_copy == modes.rx_flip {
        return Err(proto(format!(
            "the frontend asked for RX {} but this vif is configured for {}",
            if wants_copy { "copy" } else { "flip" },
            if modes.rx_flip { "flip" } else { "copy" }
        )));
    }
    let taken = Caps::from_frontend(|k| hv.store_read_str(&format!("{fe}/{k}")).ok());
    let negotiated = modes.offload.and(taken);
    let sg = negotiated.sg;
    let mcast = read_flag(hv, &format!("{fe}/{}", keys::REQUEST_MULTICAST_CONTROL));
    // Half pages are a copy-mode feature: a flipped page is one buffer.
    let rx_half = !modes.rx_flip && read_flag(hv, &format!("{fe}/{}", keys::REQUEST_RX_HALF_PAGE));
    // A flipped page carries a whole frame with its checksums done.
    let guest_caps = if modes.rx_flip {
        Offloads {
            sg,
            ..Offloads::NONE
        }
    } else {
        Offloads::from(negotiated)
    };
    Ok(FrontendRings {
        tx_ref,
        rx_ref,
        tx_port,
        rx_port,
        guest_caps,
        negotiated,
        sg,
        mcast,
        rx_half,
    })
}

/// The TX and RX rings netback serves, in pages the guest granted, and the
/// event channels bound to the frontend's (TX first).
type MappedRings = (
    BackRing<MappedGrant, TxRequest, TxResponse>,
    BackRing<MappedGrant, RxRequest, RxResponse>,
    Vec<EventChannel>,
);

/// How a backend joins the rings a frontend published.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Join {
    /// A new connection: its event channels bound, its shadows started.
    Connect,
    /// Taking over from this domain's previous program: its event channels
    /// taken back from hv, and what a dead one left unanswered restored
    /// from the shadows ([`RequestShadow`]).
    Resume,
}

/// Memory a ring's request shadow lies in.
type ShadowMemory = Box<dyn SharedMemory + Send + Sync>;

/// The request shadow at `at` in frame `frame` of the driver domain's
/// pool, of a ring whose responses are `rsp` bytes.
fn shadow(pool: &Arc<Mapping>, frame: u32, at: usize, rsp: usize) -> Result<ShadowMemory> {
    let len = RequestShadow::bytes_needed(RING, rsp);
    let base = frame as usize * PAGE_SIZE + at;
    match Window::new(pool.clone(), base, len) {
        Some(w) => Ok(Box::new(w)),
        None => Err(proto(format!(
            "the request shadows in frame {frame} lie outside the driver domain's memory"
        ))),
    }
}

/// Maps the guest's ring pages and binds its event channels; the rings
/// keep their shadows in frame `shadows` of this domain's pool. The rings
/// stay mapped while connected; whatever fails half-way is undone, so no
/// grant stays pinned.
fn map_rings(
    hv: &mut HvClient,
    g: DomId,
    f: &FrontendRings,
    shadows: u32,
    join: Join,
) -> Result<MappedRings> {
    let txm = hv.map_grant(g, f.tx_ref, true)?;
    let th = txm.handle;
    let mut held: Vec<EventChannel> = Vec::new();
    let mut rh = None;
    let pool = hv.pool_shared();
    let resuming = join == Join::Resume;
    let r = (|| -> Result<_> {
        let rxm = hv.map_grant(g, f.rx_ref, true)?;
        rh = Some(rxm.handle);
        let tx = BackRing::attach_shadowed(
            txm,
            shadow(&pool, shadows, TX_SHADOW_AT, TxResponse::SIZE)?,
            resuming,
        )?;
        let rx = BackRing::attach_shadowed(
            rxm,
            shadow(&pool, shadows, RX_SHADOW_AT, RxResponse::SIZE)?,
            resuming,
        )?;
        let bind = |hv: &mut HvClient, port| match join {
            Join::Connect => hv.evtchn_bind(g, port),
            Join::Resume => hv.evtchn_rebind(g, port),
        };
        held.push(bind(hv, f.tx_port)?);
        if let Some(port) = f.rx_port {
            held.push(bind(hv, port)?);
        }
        Ok((tx, rx))
    })();
    match r {
        Ok((tx, rx)) => Ok((tx, rx, held)),
        Err(e) => {
            for ch in held {
                let _ = hv.evtchn_close(ch);
            }
            for h in std::iter::once(th).chain(rh) {
                let _ = hv.unmap_handle(h);
            }
            Err(e)
        }
    }
}

/// Writes the backend's features and moves to InitWait (netback's probe).
pub fn probe(hv: &mut HvClient, guest: DomId, be: &str) -> Result<Pending> {
    let p = read_backend(hv, guest, be)?;
    let Modes {
        rx_flip,
        ngm,
        offload,
        ..
    } = p.modes;
    for (k, v) in offload.backend_keys().into_iter().chain([
        (keys::FEATURE_RX_COPY, if rx_flip { "0" } else { "1" }),
        (keys::FEATURE_RX_FLIP, if rx_flip { "1" } else { "0" }),
        (keys::FEATURE_SPLIT_EVENT_CHANNELS, "1"),
        (keys::FEATURE_MULTICAST_CONTROL, "1"),
        (keys::FEATURE_DYNAMIC_MULTICAST_CONTROL, "1"),
        (abi::xenbus::keys::FEATURE_NGM, if ngm { "1" } else { "0" }),
        (keys::FEATURE_RX_HALF_PAGE, if rx_flip { "0" } else { "1" }),
    ]) {
        hv.store_write(&format!("{be}/{k}"), v)?;
    }
    hv.switch_state(be, XenbusState::InitWait)?;
    Ok(p)
}

/// What the toolstack wrote for the vif in its backend directory `be`,
/// checked: its modes, options, MAC and slot. Reads only.
pub fn read_backend(hv: &mut HvClient, guest: DomId, be: &str) -> Result<Pending> {
    // Its keys in two round trips, not one each.
    hv.with_read_ahead(be, |hv| read_backend_keys(hv, guest, be))
}

fn read_backend_keys(hv: &mut HvClient, guest: DomId, be: &str) -> Result<Pending> {
    let fe = hv.store_read_str(&format!("{be}/{}", keys::FRONTEND))?;
    let cfg = VifBackend::read(|k| hv.store_read_str(&format!("{be}/{k}")).ok())
        .map_err(|e| proto(format!("{be}/{e}")))?;
    let (index, offload, lro) = (cfg.index, cfg.offload, cfg.lro);
    let rx_flip = cfg.rx == RxPath::Flip;
    let ngm = cfg.grants == GrantPath::Ngm;
    if ngm && (rx_flip || matches!(cfg.tx, TxPath::Map | TxPath::Header)) {
        return Err(proto(format!(
            "{be}: the new grant mechanism carries neither page flips nor TX maps nor reads of Xen's grant table"
        )));
    }
    let mut opts = opts::read(hv, be)?;
    if (STAGING_BASE + FRAMES_PER_VIF * (index + 1)) > hv.welcome().pool_frames {
        return Err(proto(format!(
            "vif index {index} does not fit in the driver domain's memory"
        )));
    }
    let mac_text = hv.store_read_str(&format!("{be}/{}", keys::MAC))?;
    let mac = abi::xenbus::parse_mac(&mac_text).map_err(|e| proto(format!("{be}/mac: {e}")))?;
    // The guest's own link-local address is the one its MAC gives.
    opts.ip = opts.ip.map(|f| f.with_mac(mac));
    Ok(Pending {
        guest,
        attach: hv.read_attachment(be),
        be: be.to_string(),
        fe,
        index,
        mac,
        opts,
        prefetch: cfg.prefetch,
        modes: Modes {
            rx_flip,
            tx: cfg.tx,
            offload,
            ngm,
            lro,
        },
    })
}

/// How netback reaches the guest's memory, set up once at connect.
#[derive(Default)]
struct Views {
    ngm: Option<NgmView>,
    window: Option<Mapping>,
    gnttab: Option<GrantTableView>,
}

/// The guest's pool, reached once at connect: under the new grant
/// mechanism with its table; under hv-copy TX gather, the Xen 2.0 map and
/// Xen's I/O channel as a read-only window, the NIC's view of the guest's
/// frames (see [`hold`]), and under the I/O channel with the guest's grant
/// table too ([`header`]); otherwise not at all.
fn pool_views(hv: &mut HvClient, g: DomId, fe: &str, modes: &Modes) -> Result<Views> {
    if modes.ngm {
        return Ok(Views {
            ngm: Some(attach_pool(hv, g, fe)?),
            ..Views::default()
        });
    }
    let mut v = Views::default();
    if modes.tx.gathers() || modes.tx == TxPath::Map {
        v.window = Some(hv.pool_window(g)?);
    }
    if modes.tx == TxPath::Header {
        v.gnttab = Some(hv.grant_table_view(g)?);
    }
    Ok(v)
}

impl Netback {
    /// Waits for the frontend to publish its rings and connects to them.
    pub fn connect(hv: &mut HvClient, p: Pending, timeout: Duration) -> Result<Netback> {
        hv.wait_state(&p.fe, timeout, |s| s == XenbusState::Connected)?;
        let nb = Self::attach(hv, p, Join::Connect)?;
        hv.switch_state(&nb.be, XenbusState::Connected)?;
        Ok(nb)
    }

    /// Maps the rings the frontend published, binds (or, resuming, takes
    /// back) its event channels and reaches its pool; what fails half-way
    /// is undone. The frontend's keys are read in two round trips, not one
    /// each.
    fn attach(hv: &mut HvClient, p: Pending, join: Join) -> Result<Netback> {
        let fe = p.fe.clone();
        hv.with_read_ahead(&fe, |hv| Self::attach_read_ahead(hv, p, join))
    }

    fn attach_read_ahead(hv: &mut HvClient, p: Pending, join: Join) -> Result<Netback> {
        let g = p.guest;
        let f = read_frontend(hv, &p.fe, &p.modes)?;
        let shadows = STAGING_BASE + FRAMES_PER_VIF * p.index + 2 * RING;
        let (tx, rx, held) = map_rings(hv, g, &f, shadows, join)?;
        let views = match pool_views(hv, g, &p.fe, &p.modes) {
            Ok(v) => v,
            Err(e) => {
                for ch in held {
                    let _ = hv.evtchn_close(ch);
                }
                for h in [tx.into_memory().handle, rx.into_memory().handle] {
                    let _ = hv.unmap_handle(h);
                }
                return Err(e);
            }
        };
        Ok(Self::assemble(hv, p, f, (tx, rx, held), views))
    }

    /// A connected backend from its parts.
    fn assemble(
        hv: &mut HvClient,
        p: Pending,
        f: FrontendRings,
        (tx, rx, held): MappedRings,
        views: Views,
    ) -> Netback {
        let mut chans = held.into_iter();
        let tx_evt = chans.next();
        let rx_evt = chans.next();
        let tx_base = STAGING_BASE + FRAMES_PER_VIF * p.index;
        let max_frame = frame_limit(&p.be, p.opts.mtu, f.sg);
        let mut mcast = McastFilter::default();
        mcast.set_enabled(f.mcast);
        let now = Instant::now();
        Netback {
            guest: p.guest,
            be: p.be,
            attach: p.attach,
            fe: p.fe,
            modes: p.modes,
            mac: p.mac,
            tx: Some(tx),
            rx: Some(rx),
            tx_evt,
            rx_evt,
            guest_caps: f.guest_caps,
            negotiated: f.negotiated,
            pool: hv.pool_shared(),
            tx_base,
            rx_base: tx_base + RING,
            rx_slab: slab::FrameSlab::new(RX_QUEUE, RX_SLAB_BYTES),
            rx_ops: Vec::with_capacity(SLOT_BUDGET),
            rx_resps: Vec::with_capacity(2 * SLOT_BUDGET),
            rx_flips: Vec::with_capacity(RING as usize),
            rx_statuses: Vec::with_capacity(RING as usize),
            counters: VifCounters::default(),
            connected: true,
            tracer: hv.tracer(),
            ngm: views.ngm,
            window: views.window,
            gnttab: views.gnttab,
            tx_grants: TxStates::default(),
            tx_held: vec![grants::Held::default(); TX_BUDGET],
            tx_pkts: Vec::with_capacity(TX_BUDGET),
            tx_ids: [0; 1 << 10],
            rx_unpublished: 0,
            rx_overflow: false,
            rx_stall: stall::Stall::default(),
            storm: domain_common::storm::Storm::default(),
            ip: p.opts.ip,
            credit: p
                .opts
                .rate
                .map(|(bytes, usec)| Credit::new(bytes, usec, now)),
            now,
            max_frame,
            mtu: p.opts.mtu,
            mcast,
            lro: rx::LroState::new(p.modes.lro, f.guest_caps),
            rx_half: f.rx_half,
            prefetch: p.prefetch,
            mq: None,
        }
    }

    /// The size of the guest's RX buffers: a page, or half of one when the
    /// frontend posts half-page buffers (Ram thesis 5.3). Every path that
    /// fills RX buffers cuts frames into pieces of this size.
    pub fn rx_chunk(&self) -> usize {
        if self.rx_half {
            RX_HALF
        } else {
            PAGE_SIZE
        }
    }

    /// Whether the vif is still connected.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Event-channel descriptors to poll.
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.tx_evt
            .iter()
            .chain(self.rx_evt.iter())
            .map(|e| e.fd())
            .collect()
    }

    /// Takes pending notifications; false if the channel was closed.
    pub fn ack(&mut self) -> bool {
        let mut closed = false;
        for e in self.tx_evt.iter().chain(self.rx_evt.iter()) {
            if e.ack() {
                self.counters.notifications_received += 1;
            }
            closed |= e.is_closed();
        }
        !closed
    }

    fn notify(&mut self, rx: bool) {
        let ch = if rx {
            self.rx_evt.as_ref().or(self.tx_evt.as_ref())
        } else {
            self.tx_evt.as_ref()
        };
        if let Some(c) = ch {
            if c.notify().is_ok() {
                self.counters.notifications_sent += 1;
            }
        }
    }

    /// Tears down the vif: unmaps the rings, closes the channels, says Closed.
    pub fn disconnect(&mut self, hv: &mut HvClient, why: &str) {
        if !self.connected {
            return;
        }
        self.connected = false;
        eprintln!("netback {}: disconnected: {why}", crate::vif_name(&self.be));
        self.unmap_rings(hv);
        for ch in [self.tx_evt.take(), self.rx_evt.take()]
            .into_iter()
            .flatten()
        {
            let _ = hv.evtchn_close(ch);
        }
        self.rx_slab.clear();
        self.rx_stall = stall::Stall::default();
        // The guest's pool is unmapped: nothing of it stays reachable.
        self.ngm = None;
        self.window = None;
        self.gnttab = None;
        if !self.directory_ours(hv) {
            // The toolstack removed the directory, or it belongs to a new
            // attachment now: nothing to tell.
            return;
        }
        // Final counters first, so whoever sees Closed sees why.
        if let Ok(json) = serde_json::to_string(&self.counters) {
            let _ = hv.store_write(&format!("{}/stats", self.be), &json);
        }
        let _ = hv.store_write(&format!("{}/{}", self.be, keys::DISCONNECT_REASON), why);
        let _ = hv.switch_state(&self.be, XenbusState::Closed);
    }

    /// Whether the backend directory is still this attachment's: the
    /// toolstack has not removed it, nor given it to a new attachment.
    fn directory_ours(&self, hv: &mut HvClient) -> bool {
        hv.read_state(&self.be).is_ok() && hv.read_attachment(&self.be) == self.attach
    }

    /// Unmaps both ring pages.
    fn unmap_rings(&mut self, hv: &mut HvClient) {
        for ring in [
            self.tx.take().map(|r| r.into_memory().handle),
            self.rx.take().map(|r| r.into_memory().handle),
        ]
        .into_iter()
        .flatten()
        {
            let _ = hv.unmap_handle(ring);
        }
    }

    fn refuse(&mut self, reason: &'static str) {
        self.counters.reject(reason);
        // A log line the first time each reason is seen, so a hostile
        // guest cannot flood the log; the counters say how many since.
        if self.counters.rejected.get(reason) == 1 {
            eprintln!(
                "netback {}: refused a request ({reason}{}); further ones only counted",
                crate::vif_name(&self.be),
                explain(reason)
            );
        }
    }

    /// Whether the frontend has crossed the line.
    fn too_hostile(&self) -> bool {
        self.counters.rejected_total() >= FATAL_LIMIT
    }

    /// The one refusal-and-disconnect policy: a fatal error disconnects at
    /// once, and so does a frontend past [`FATAL_LIMIT`] refusals.
    fn enforce(&mut self, hv: &mut HvClient, fatal: Option<&'static str>) {
        if let Some(reason) = fatal {
            self.refuse(reason);
            self.disconnect(hv, &format!("fatal frontend error: {reason}"));
        } else if self.too_hostile() {
            let n = self.counters.rejected_total();
            self.disconnect(hv, &format!("{n} refused requests"));
        }
    }
}

/// What a refusal reason means, for the log line, where its name alone
/// does not say.
fn explain(reason: &str) -> &'static str {
    match reason {
        "chain_too_long" => ": more slots than the backend accepts",
        "size_mismatch" => ": the first size is less than its chain's slots hold",
        "gso_not_tcp" => ": GSO metadata on a frame that is not TCP of its IP version",
        "gso_not_udp" => ": UDP segmentation metadata on a frame that is not UDP",
        "bad_gso_size" => ": a GSO segment size of zero, too small, or above the MTU",
        "offload_not_negotiated_csum" => {
            ": a blank IPv4 checksum without checksum offload negotiated"
        }
        "offload_not_negotiated_csum6" => {
            ": a blank IPv6 checksum without feature-ipv6-csum-offload negotiated"
        }
        "offload_not_negotiated_tso4" => ": TCPv4 GSO without feature-gso-tcpv4 negotiated",
        "offload_not_negotiated_tso6" => ": TCPv6 GSO without feature-gso-tcpv6 negotiated",
        "offload_not_negotiated_uso" => {
            ": UDP segmentation without feature-splitnet-gso-udp-l4 negotiated"
        }
        _ => "",
    }
}

/// How full a vif's rings are at one moment, read from the indexes netback
/// already keeps when it publishes its counters (for `splitnet top`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RingOccupancy {
    /// Slots in each ring.
    pub size: u32,
    /// TX requests the guest has published and netback not yet answered.
    pub tx_outstanding: u32,
    /// RX buffers the guest has posted and netback not yet filled.
    pub rx_posted: u32,
    /// Packets waiting in netback for RX buffers.
    pub rx_queued: u32,
}

/// What netback publishes at `<backend>/stats`: its counters, and its
/// rings' occupancy as `ring`.
#[derive(serde::Serialize)]
pub struct BackendStats<'a> {
    #[serde(flatten)]
    pub counters: &'a VifCounters,
    pub ring: RingOccupancy,
    /// Groups in the multicast filter; None while the frontend has not
    /// asked for filtering (every group goes to it).
    pub mcast_groups: Option<u32>,
    /// Large receive offload, when the topology asked for it here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lro: Option<serde_json::Value>,
}

impl Netback {
    /// The counters and the rings' occupancy, as published. A request
    /// index out of bounds counts as an empty ring here; the data path
    /// deals with it.
    pub fn stats(&mut self) -> BackendStats<'_> {
        let mut ring = RingOccupancy {
            rx_queued: self.rx_slab.len() as u32,
            ..RingOccupancy::default()
        };
        if let Some(tx) = self.tx.as_mut() {
            ring.size = tx.size();
            ring.tx_outstanding = tx.unconsumed_requests().unwrap_or(0) + tx.pending_responses();
        }
        if let Some(rx) = self.rx.as_mut() {
            ring.rx_posted = rx.unconsumed_requests().unwrap_or(0);
        }
        BackendStats {
            counters: &self.counters,
            ring,
            mcast_groups: self.mcast.enabled().then_some(self.mcast.len() as u32),
            lro: self.lro.status(),
        }
    }
}

/// Maps the guest's I/O pool and its translation table once (Ram thesis
/// 4.5.2), after checking that the table the frontend names is the one hv has.
fn attach_pool(hv: &mut HvClient, guest: DomId, fe: &str) -> Result<NgmView> {
    let named = read_num(hv, &format!("{fe}/{}", abi::xenbus::keys::NGM_TABLE))?;
    let view = hv.ngm_attach(guest)?;
    if view.handle() != named {
        return Err(proto(format!(
            "{fe}/{} = {named}, but hv knows table {} for this guest",
            abi::xenbus::keys::NGM_TABLE,
            view.handle()
        )));
    }
    Ok(view)
}

fn grant_reason(status: i16) -> &'static str {
    match GrantStatus::from_i16(status) {
        Ok(GrantStatus::BadGntref) => "bad_grant_ref",
        Ok(GrantStatus::PermissionDenied) => "grant_permission_denied",
        Ok(GrantStatus::BadDomain) => "bad_domain",
        Ok(GrantStatus::BadPage) => "bad_page",
        Ok(GrantStatus::BadCopyArg) => "crosses_page",
        _ => "grant_error",
    }
}

fn hv_reason(e: &HvError) -> &'static str {
    match e.kind {
        hypercall::ErrorKind::BadGntref => "bad_grant_ref",
        hypercall::ErrorKind::PermissionDenied => "grant_permission_denied",
        hypercall::ErrorKind::BadDomain => "bad_domain",
        hypercall::ErrorKind::BadPage => "bad_page",
        hypercall::ErrorKind::BadCopyArg => "crosses_page",
        hypercall::ErrorKind::DoubleMap => "double_map",
        _ => "grant_error",
    }
}

/// The longest frame a guest may send: its MTU plus the Ethernet header.
/// A frontend without scatter-gather takes a frame in one slot only, so
/// its MTU is capped at what one page holds (as Linux netback caps it).
fn frame_limit(be: &str, mtu: u16, sg: bool) -> usize {
    let want = usize::from(mtu) + ETH_HLEN;
    if sg || want <= PAGE_SIZE {
        return want;
    }
    eprintln!(
        "netback {}: MTU {mtu} needs several slots per frame, but the frontend has no \
         scatter-gather (feature-sg): capped at {}",
        crate::vif_name(be),
        PAGE_SIZE - ETH_HLEN
    );
    PAGE_SIZE
}

impl Netback {
    /// Which multicast frames go to this vif ([`McastFilter::wants`]): all
    /// when its frontend did not ask for multicast control, else broadcast
    /// and the groups it joined with MCAST_ADD extras.
    pub fn multicast_filter(&self) -> &McastFilter {
        &self.mcast
    }

    /// Re-reads the frontend's `request-multicast-control` (Xen's
    /// `feature-dynamic-multicast-control`: it may change at any time).
    pub fn resample_multicast(&mut self, hv: &mut HvClient) {
        let on = read_flag(
            hv,
            &format!("{}/{}", self.fe, keys::REQUEST_MULTICAST_CONTROL),
        );
        self.mcast.set_enabled(on);
    }

    /// While the vif waits for transmit credit (`rate=`), when it may send
    /// again; the driver loop sleeps until then instead of polling.
    pub fn credit_wait(&self) -> Option<Instant> {
        self.credit.as_ref().and_then(Credit::wait_until)
    }

    /// The vif's MTU-derived frame limit (MTU plus Ethernet header).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }
}
