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
#![forbid(unsafe_code)]

use abi::netif::{RxRequest, RxResponse, TxRequest, TxResponse};
use abi::offloads::Caps;
use abi::ring::FrontRing;
use abi::Window;
use domain_common::counters::VifCounters;
use frame::lro::Lro;
use frame::packet::{Gso, Packet};
use hypercall::ngm_client::GrantTrack;
use hypercall::trace::{self, DomainEvent, Tracer};
use hypercall::{DomId, EventChannel, HvClient, HvError};
use std::sync::Arc;
use std::time::Duration;
use sys::{Mapping, PAGE_SIZE};

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
    /// Each TX frame in flight, by its first id, until the backend answers
    /// that id: what a backend that dies never took ([`Netfront::unsent`]).
    tx_frames: Vec<Option<Unsent>>,
    /// Numbers the frames queued, so the unsent go again in their order.
    tx_seq: u64,
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
    /// Pages flipped to this guest in the current drain and not yet mapped
    /// back in: a run of adjacent frames, mapped in one call.
    rx_landed: Option<rx::Run>,
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
    /// The backend's notifications without work ([`storm`]): the guest's
    /// loop asks it when a throttled channel is due back.
    pub storm: domain_common::storm::Storm,
}

/// A TX frame a backend was given and never answered: its data is still
/// in the TX buffers of `ids`, so a new backend can be given it again
/// ([`TapNetfront::reconnect`]) instead of the guest losing it with the
/// old backend, as Linux's netfront does.
#[derive(Debug, Clone, Copy)]
pub struct Unsent {
    seq: u64,
    ids: [u16; MAX_DATA_SLOTS],
    slots: u8,
    len: u32,
    csum: frame::packet::Csum,
    gso: Option<frame::packet::Gso>,
}

mod connect;
mod control;
mod rx;
mod storm;
mod tap;
#[cfg(test)]
mod tests;
mod tx;

pub use control::dev_mcast_groups;
pub use tap::TapNetfront;

impl Netfront {
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

    pub fn grant_stats(&self) -> Option<hypercall::ngm_client::TrackStats> {
        match &self.grants {
            Grants::Ngm(t) => Some(t.stats()),
            Grants::PerPacket => None,
        }
    }
}
