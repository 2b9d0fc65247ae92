//! netfront: the guest's paravirtual NIC driver (Menon 2006 §2, Ram thesis 2.1).
//!
//! It owns a TAP device in the guest's namespace, so the guest's own kernel
//! stack and unmodified applications use it, and moves frames between that
//! TAP and the I/O channel: a TX and an RX ring in granted pages of the
//! guest's pool, and one or two event channels.
//!
//! Guest pool layout: frame 0 TX ring, frame 1 RX ring, frames 2..258 TX
//! buffers (one per request id), frames 258..514 RX buffers (one per ring slot).

use crate::counters::VifCounters;
use crate::offload::{self, partial_csum_for};
use crate::packet::{Csum, Gso, Packet, VNET_HDR_LEN};
use abi::netif::{
    ExtraInfo, RxFlags, RxRequest, RxResponse, RxStatus, TxFlags, TxRequest, TxResponse,
    NETIF_RSP_NULL, NETIF_RSP_OKAY,
};
use abi::ring::FrontRing;
use abi::xenbus::{keys, XenbusState};
use abi::{SharedMemory, Window};
use hv::trace::{self, DomainEvent, Tracer};
use hv::{DomId, EventChannel, HvClient, HvError};
use std::sync::Arc;
use std::time::Duration;
use sys::{Mapping, Tap, TapOffloads, PAGE_SIZE};

/// Frame of the TX ring.
pub const TX_RING_FRAME: u32 = 0;
/// Frame of the RX ring.
pub const RX_RING_FRAME: u32 = 1;
/// First TX buffer frame (request id i uses frame TX_BUF_BASE + i).
pub const TX_BUF_BASE: u32 = 2;
/// First RX buffer frame (ring slot i uses frame RX_BUF_BASE + i).
pub const RX_BUF_BASE: u32 = TX_BUF_BASE + RING;
const RING: u32 = 256;
/// Most slots one packet may take (XEN_NETIF_NR_SLOTS_MIN) plus one extra.
const MAX_SLOTS: u32 = 19;
/// Largest frame netfront accepts from the guest.
const MAX_FRAME: usize = 65535 + 14;

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

/// What the frontend learned from the store.
#[derive(Debug, Clone)]
pub struct FrontendInfo {
    pub dev: String,
    pub backend: String,
    pub backend_id: DomId,
    pub mac: String,
    pub copy_rx: bool,
    pub offload: bool,
    pub split_evtchn: bool,
}

struct TxSlot {
    gref: u32,
}

struct RxSlot {
    gref: u32,
}

/// A connected frontend.
pub struct Netfront {
    pub info: FrontendInfo,
    tx: FrontRing<Mem, TxRequest, TxResponse>,
    rx: FrontRing<Mem, RxRequest, RxResponse>,
    tx_evt: EventChannel,
    rx_evt: Option<EventChannel>,
    pool: Arc<Mapping>,
    tx_free: Vec<u16>,
    tx_slots: Vec<Option<TxSlot>>,
    rx_slots: Vec<Option<RxSlot>>,
    /// An RX packet being assembled from several slots.
    rx_partial: Option<Packet>,
    rx_partial_bad: bool,
    rx_extra_pending: bool,
    /// The packet's last data slot arrived (extras may still follow).
    rx_data_done: bool,
    pub counters: VifCounters,
    connected: bool,
    tracer: Tracer,
    /// The TX batch being queued: when it started, and packets so far.
    tx_batch: Option<(u64, u64)>,
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
        if hv.welcome().pool_frames < RX_BUF_BASE + RING {
            return Err(setup(format!(
                "the pool needs at least {} frames",
                RX_BUF_BASE + RING
            )));
        }
        hv.switch_state(dev, XenbusState::Initialising)?;
        hv.wait_state(&backend, timeout, |s| {
            s == XenbusState::InitWait || s == XenbusState::Connected
        })?;

        // What the backend offers, and what the toolstack chose for this vif.
        let offload = flag(hv, &format!("{backend}/splitnet-offload"))
            && flag(hv, &format!("{backend}/{}", keys::FEATURE_SG))
            && flag(hv, &format!("{backend}/{}", keys::FEATURE_GSO_TCPV4));
        let copy_rx = hv
            .store_read_str(&format!("{backend}/splitnet-rx-mode"))
            .map(|m| m == "copy")
            .unwrap_or(true)
            && flag(hv, &format!("{backend}/{}", keys::FEATURE_RX_COPY));
        let split_evtchn = flag(
            hv,
            &format!("{backend}/{}", keys::FEATURE_SPLIT_EVENT_CHANNELS),
        );
        let info = FrontendInfo {
            dev: dev.to_string(),
            backend: backend.clone(),
            backend_id,
            mac: mac.clone(),
            copy_rx,
            offload,
            split_evtchn,
        };

        // Rings in two granted pages, event channels, then publish it all.
        let pool = hv.pool_shared();
        let tx = FrontRing::init(window(&pool, TX_RING_FRAME)?)?;
        let rx = FrontRing::init(window(&pool, RX_RING_FRAME)?)?;
        let tx_ref = hv.grants().grant_access(backend_id, TX_RING_FRAME, false)?;
        let rx_ref = hv.grants().grant_access(backend_id, RX_RING_FRAME, false)?;
        let tx_evt = hv.evtchn_alloc_unbound(backend_id)?;
        let rx_evt = if split_evtchn {
            Some(hv.evtchn_alloc_unbound(backend_id)?)
        } else {
            None
        };
        let w = |k: &str| format!("{dev}/{k}");
        hv.store_write(&w(keys::TX_RING_REF), &tx_ref.to_string())?;
        hv.store_write(&w(keys::RX_RING_REF), &rx_ref.to_string())?;
        match &rx_evt {
            Some(r) => {
                hv.store_write(&w(keys::EVENT_CHANNEL_TX), &tx_evt.port.to_string())?;
                hv.store_write(&w(keys::EVENT_CHANNEL_RX), &r.port.to_string())?;
            }
            None => hv.store_write(&w(keys::EVENT_CHANNEL), &tx_evt.port.to_string())?,
        }
        hv.store_write(&w(keys::REQUEST_RX_COPY), if copy_rx { "1" } else { "0" })?;
        hv.store_write(&w(keys::FEATURE_RX_NOTIFY), "1")?;
        let off = if offload { "1" } else { "0" };
        hv.store_write(&w(keys::FEATURE_SG), off)?;
        hv.store_write(&w(keys::FEATURE_GSO_TCPV4), off)?;
        hv.store_write(&w(keys::FEATURE_GSO_TCPV6), off)?;
        hv.store_write(
            &w(keys::FEATURE_NO_CSUM_OFFLOAD),
            if offload { "0" } else { "1" },
        )?;
        hv.switch_state(dev, XenbusState::Connected)?;
        hv.wait_state(&backend, timeout, |s| s == XenbusState::Connected)?;

        let mut nf = Netfront {
            info,
            tx,
            rx,
            tx_evt,
            rx_evt,
            pool,
            tx_free: (0..RING as u16).rev().collect(),
            tx_slots: (0..RING).map(|_| None).collect(),
            rx_slots: (0..RING).map(|_| None).collect(),
            rx_partial: None,
            rx_partial_bad: false,
            rx_extra_pending: false,
            rx_data_done: false,
            counters: VifCounters::default(),
            connected: true,
            tracer: hv.tracer(),
            tx_batch: None,
        };
        nf.refill_rx(hv)?;
        Ok(nf)
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

    /// One round of work: acknowledges notifications, completes TX, appends
    /// received packets to `out`, and reposts buffers.
    pub fn poll(&mut self, hv: &mut HvClient, out: &mut Vec<Packet>) -> Result<()> {
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
            return Ok(());
        }
        self.complete_tx(hv)?;
        let (t0, had) = (trace::now(), out.len());
        self.receive(hv, out)?;
        self.refill_rx(hv)?;
        let got = out.len().saturating_sub(had);
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
            && self.tx_free.len() >= MAX_SLOTS as usize
    }

    /// Queues one packet on the TX ring (published by [`Netfront::flush`]).
    /// Check [`Netfront::can_send`] first.
    pub fn send(&mut self, hv: &mut HvClient, pkt: Packet) -> Result<()> {
        if !self.can_send() {
            return Err(setup("the TX ring is full"));
        }
        let b = self.tx_batch.get_or_insert((trace::now(), 0));
        b.1 += 1;
        self.queue_tx(hv, pkt)
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
    pub fn tx_ring(&mut self) -> &mut FrontRing<Mem, TxRequest, TxResponse> {
        &mut self.tx
    }

    /// The TX event channel, for tests that play a hostile frontend.
    pub fn tx_channel(&self) -> &EventChannel {
        &self.tx_evt
    }

    fn queue_tx(&mut self, hv: &mut HvClient, mut pkt: Packet) -> Result<()> {
        if !self.info.offload {
            // The backend takes no offloads: finish the work here.
            let mut out = Vec::new();
            if offload::prepare(pkt, offload::Offloads::NONE, &mut out).is_err() {
                self.counters.drop("malformed_from_guest");
                return Ok(());
            }
            for p in out {
                self.queue_one(hv, p)?;
            }
            return Ok(());
        }
        if matches!(pkt.csum, Csum::Partial { .. }) && pkt.gso.is_none() && pkt.data.len() <= 60 {
            // Tiny frames: cheaper to finish here than to describe.
            let _ = offload::complete_checksum(&mut pkt);
        }
        self.queue_one(hv, pkt)
    }

    fn queue_one(&mut self, hv: &mut HvClient, pkt: Packet) -> Result<()> {
        let total = pkt.data.len();
        if total > u16::MAX as usize {
            self.counters.drop("oversize");
            return Ok(());
        }
        let chunks: Vec<&[u8]> = pkt.data.chunks(PAGE_SIZE).collect();
        // All of the packet's slots must fit now: a half-queued packet would
        // reach the backend truncated (a fatal error there).
        let slots = chunks.len() + usize::from(pkt.gso.is_some());
        if self.tx.free_requests() < slots as u32 || self.tx_free.len() < chunks.len() {
            self.counters.drop("tx_ring_full");
            return Ok(());
        }
        let mut flags = match pkt.csum {
            Csum::Partial { .. } => TxFlags::CSUM_BLANK | TxFlags::DATA_VALIDATED,
            Csum::Valid => TxFlags::DATA_VALIDATED,
            Csum::Unknown => TxFlags::EMPTY,
        };
        let gso = pkt.gso.map(|g| g.to_extra());
        if gso.is_some() {
            flags |= TxFlags::EXTRA_INFO;
        }
        for (i, chunk) in chunks.iter().enumerate() {
            let Some(id) = self.tx_free.pop() else {
                return Err(setup("TX ids exhausted"));
            };
            let frame = TX_BUF_BASE + id as u32;
            self.pool.write_bytes(frame as usize * PAGE_SIZE, chunk);
            let gref = match hv.grants().grant_access(self.info.backend_id, frame, true) {
                Ok(g) => g,
                Err(e) => {
                    self.tx_free.push(id);
                    return Err(e.into());
                }
            };
            self.counters.grant("grant", 1);
            self.tx_slots[id as usize] = Some(TxSlot { gref });
            let more = if i + 1 < chunks.len() {
                TxFlags::MORE_DATA
            } else {
                TxFlags::EMPTY
            };
            let (f, size) = if i == 0 {
                (flags | more, total as u16)
            } else {
                (more, chunk.len() as u16)
            };
            self.tx.push_request(&TxRequest {
                gref,
                offset: 0,
                flags: f,
                id,
                size,
            })?;
            if i == 0 {
                if let Some(extra) = &gso {
                    self.tx.push_request(&extra.to_tx_slot())?;
                }
            }
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += total as u64;
        Ok(())
    }

    /// Processes TX responses: revokes the grants and frees the buffers.
    fn complete_tx(&mut self, hv: &mut HvClient) -> Result<()> {
        loop {
            while let Some(rsp) = self.tx.next_response()? {
                if rsp.status == NETIF_RSP_NULL {
                    continue;
                }
                let Some(slot) = self
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
                match hv.grants().end_access(slot.gref) {
                    Ok(()) => {
                        self.counters.grant("revoke", 1);
                        self.tx_free.push(rsp.id);
                    }
                    // Still mapped by the backend: the buffer stays out of use.
                    Err(_) => self.counters.drop("tx_buffer_still_in_use"),
                }
            }
            if !self.tx.final_check_for_responses()? {
                return Ok(());
            }
        }
    }

    /// Posts every free RX slot to the backend.
    fn refill_rx(&mut self, hv: &mut HvClient) -> Result<()> {
        let mut posted = false;
        while self.rx.free_requests() > 0 {
            let idx = self.rx.req_prod_pvt() & (RING - 1);
            let frame = RX_BUF_BASE + idx;
            let gref = if self.info.copy_rx {
                hv.grants()
                    .grant_access(self.info.backend_id, frame, false)?
            } else {
                hv.grants().accept_transfer(self.info.backend_id, frame)?
            };
            self.counters.grant("grant", 1);
            self.rx_slots[idx as usize] = Some(RxSlot { gref });
            self.rx.push_request(&RxRequest {
                id: idx as u16,
                gref,
            })?;
            posted = true;
        }
        if posted && self.rx.push_requests_and_check_notify() {
            self.rx_channel().notify()?;
            self.counters.notifications_sent += 1;
        }
        Ok(())
    }

    /// Takes RX responses and reassembles packets into `out`.
    fn receive(&mut self, hv: &mut HvClient, out: &mut Vec<Packet>) -> Result<()> {
        loop {
            loop {
                let idx = self.rx.rsp_cons() & (RING - 1);
                let Some(rsp) = self.rx.next_response()? else {
                    break;
                };
                let frame = RX_BUF_BASE + idx;
                // The slot's buffer comes back whatever the response says.
                let landed = match self.rx_slots[idx as usize].take() {
                    Some(s) if self.info.copy_rx => {
                        let ok = hv.grants().end_access(s.gref).is_ok();
                        self.counters.grant("revoke", 1);
                        ok.then_some(frame)
                    }
                    Some(s) => {
                        self.counters.grant("transfer_done", 1);
                        hv.grants().end_transfer(s.gref).ok().flatten()
                    }
                    None => None,
                };
                if self.rx_extra_pending {
                    self.rx_extra_pending = false;
                    match ExtraInfo::from_rx_slot(&rsp) {
                        Ok(x) => {
                            self.rx_extra_pending = x.more();
                            if let (Some(g), Some(p)) =
                                (Gso::from_extra(&x), self.rx_partial.as_mut())
                            {
                                p.gso = Some(g);
                            }
                        }
                        Err(_) => self.rx_partial_bad = true,
                    }
                    // The packet is whole once its data and its extras are in.
                    if !self.rx_extra_pending && self.rx_data_done {
                        out.extend(self.rx_finish());
                    }
                    continue;
                }
                if let Some(p) = self.rx_fragment(rsp, landed) {
                    out.push(p);
                }
            }
            if !self.rx.final_check_for_responses()? {
                return Ok(());
            }
        }
    }

    fn rx_fragment(&mut self, rsp: RxResponse, landed: Option<u32>) -> Option<Packet> {
        let first = self.rx_partial.is_none();
        let pkt = self.rx_partial.get_or_insert_with(Packet::default);
        match (rsp.rx_status(), landed, rsp.check_fits_page()) {
            (Ok(RxStatus::Data(len)), Some(frame), Ok(())) => {
                let start = pkt.data.len();
                if start + len as usize > MAX_FRAME {
                    self.rx_partial_bad = true;
                } else {
                    pkt.data.resize(start + len as usize, 0);
                    self.pool.read_bytes(
                        frame as usize * PAGE_SIZE + rsp.offset as usize,
                        &mut pkt.data[start..],
                    );
                }
            }
            _ => self.rx_partial_bad = true,
        }
        if first {
            if rsp.flags.contains(RxFlags::CSUM_BLANK) {
                pkt.csum = Csum::Partial {
                    start: 0,
                    offset: 0,
                };
            } else if rsp.flags.contains(RxFlags::DATA_VALIDATED) {
                pkt.csum = Csum::Valid;
            }
        }
        if rsp.flags.contains(RxFlags::EXTRA_INFO) {
            self.rx_extra_pending = true;
        }
        if rsp.flags.contains(RxFlags::MORE_DATA) {
            return None;
        }
        self.rx_data_done = true;
        if self.rx_extra_pending {
            return None; // its extra-info slots follow
        }
        self.rx_finish()
    }

    /// Completes the packet being assembled.
    fn rx_finish(&mut self) -> Option<Packet> {
        self.rx_data_done = false;
        self.rx_extra_pending = false;
        let mut pkt = self.rx_partial.take()?;
        if std::mem::take(&mut self.rx_partial_bad) {
            self.counters.drop("rx_bad_response");
            return None;
        }
        if matches!(pkt.csum, Csum::Partial { .. }) {
            match partial_csum_for(&pkt.data) {
                Ok((start, offset)) => pkt.csum = Csum::Partial { start, offset },
                Err(_) => pkt.csum = Csum::Unknown,
            }
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += pkt.data.len() as u64;
        Some(pkt)
    }
}

/// A frontend attached to a TAP in the guest's namespace: the guest kernel's
/// NIC. Frames the guest sends are read from the TAP (with their virtio-net
/// header) and queued; received ones are written to it.
pub struct TapNetfront {
    pub nf: Netfront,
    tap: Tap,
    buf: Vec<u8>,
    rx: Vec<Packet>,
}

impl TapNetfront {
    /// Creates TAP `ifname` with the vif's MAC, the negotiated offloads and
    /// the topology's addresses, and brings it up.
    pub fn attach(hv: &mut HvClient, nf: Netfront, ifname: &str) -> Result<TapNetfront> {
        let tap = Tap::create(ifname, true)?;
        let on = nf.info.offload;
        tap.set_offloads(TapOffloads {
            csum: on,
            tso4: on,
            tso6: on,
        })?;
        run_ip(&[
            "link",
            "set",
            ifname,
            "address",
            &nf.info.mac,
            "mtu",
            "1500",
        ])?;
        run_ip(&["link", "set", ifname, "up"])?;
        let home = format!("/local/domain/{}/splitnet", hv.domid());
        for key in ["ipv4", "ipv6"] {
            if let Ok(addr) = hv.store_read_str(&format!("{home}/{key}")) {
                let mut args = vec!["addr", "add", addr.as_str(), "dev", ifname];
                if key == "ipv6" {
                    args.push("nodad");
                }
                run_ip(&args)?;
            }
        }
        Ok(TapNetfront {
            nf,
            tap,
            buf: vec![0; VNET_HDR_LEN + MAX_FRAME],
            rx: Vec::new(),
        })
    }

    /// Descriptors to poll: the event channel(s), and the TAP while the TX
    /// ring has room (otherwise a readable TAP would only make us spin).
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let mut v = self.nf.fds();
        if self.nf.can_send() {
            v.push(self.tap.as_fd());
        }
        v
    }

    /// One round: guest → ring, ring → guest.
    pub fn poll_once(&mut self, hv: &mut HvClient) -> Result<()> {
        self.nf.poll(hv, &mut self.rx)?;
        for p in self.rx.drain(..) {
            let hdr = p.vnet_hdr();
            if self.tap.send(&[&hdr, &p.data]).is_err() {
                self.nf.counters.drop("tap_write_failed");
            }
        }
        if !self.nf.is_connected() {
            let _ = self.tap.set_carrier(false);
            return Ok(());
        }
        let mut queued = false;
        while self.nf.can_send() {
            let Some(n) = self.tap.recv(&mut self.buf)? else {
                break;
            };
            if n < VNET_HDR_LEN {
                self.nf.counters.drop("tap_short_read");
                continue;
            }
            match Packet::from_vnet_hdr(
                &self.buf[..VNET_HDR_LEN],
                self.buf[VNET_HDR_LEN..n].to_vec(),
            ) {
                Ok(p) => {
                    self.nf.send(hv, p)?;
                    queued = true;
                }
                Err(_) => self.nf.counters.drop("bad_vnet_header"),
            }
        }
        if queued {
            self.nf.flush()?;
        }
        Ok(())
    }

    /// The backend is gone: the guest sees its link go down (carrier off).
    pub fn disconnect(&mut self, why: &str) {
        self.nf.disconnect(why);
        let _ = self.tap.set_carrier(false);
    }
}
