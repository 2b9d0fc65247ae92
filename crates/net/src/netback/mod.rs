//! netback: the driver domain's end of one virtual NIC (Menon 2006 §2,
//! Ram thesis 2.1). It never trusts the frontend: every ring index, grant
//! reference, offset, size and flag is read once and validated, each consumed
//! request gets exactly one response, and a frontend that keeps sending
//! garbage is disconnected. TX moves frames guest → bridge by grant copy (or,
//! in the Xen 2.0 baseline, by mapping each page); RX moves frames bridge →
//! guest by grant copy into guest-posted buffers (or by page flip).
//!
//! Driver-domain pool layout per vif `i`: staging frames from
//! `16 + 512 i`: 256 for TX slots, then 256 for RX slots.

use crate::counters::VifCounters;
use crate::offload::{self, Offloads};
use crate::packet::{Csum, Gso, Packet};
use abi::grant::{CopyPtr, GrantCopy, GrantStatus, DOMID_SELF};
use abi::netif::{
    ExtraInfo, NetifStatus, RxFlags, RxRequest, RxResponse, TxFlags, TxRequest, TxResponse,
    XEN_NETIF_NR_SLOTS_MIN,
};
use abi::ring::BackRing;
use abi::xenbus::{keys, XenbusState};
use abi::SharedMemory;
use hv::trace::{self, DomainEvent, Tracer};
use hv::{DomId, EventChannel, HvClient, HvError, MappedGrant};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use sys::{Mapping, PAGE_SIZE};

const RING: u32 = 256;
/// Staging frames per vif (TX + RX).
pub const FRAMES_PER_VIF: u32 = 2 * RING;
/// First staging frame of vif 0.
pub const STAGING_BASE: u32 = 16;
/// Packets per TX round, so one guest cannot starve the others.
const TX_BUDGET: usize = 64;
/// Slots per batch (bounded by the staging frames and the batch page).
const SLOT_BUDGET: usize = 240;
/// Packets queued for a guest that has posted no buffers.
const RX_QUEUE: usize = 1024;
/// Smallest GSO segment size accepted (Linux's TCP_MIN_MSS).
const MIN_GSO_SIZE: u16 = 88;
/// Refused requests after which the vif is disconnected.
pub const FATAL_LIMIT: u64 = 32;

/// How this vif moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub rx_flip: bool,
    pub tx_map: bool,
    pub offload: bool,
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
}

type Result<T> = std::result::Result<T, NetbackError>;

fn proto(msg: impl Into<String>) -> NetbackError {
    NetbackError::Protocol(msg.into())
}

/// A vif whose handshake has started (features written, InitWait).
pub struct Pending {
    pub guest: DomId,
    pub be: String,
    pub fe: String,
    pub index: u32,
    pub modes: Modes,
    /// The vif's MAC: frames from the guest must carry it as their source.
    pub mac: [u8; 6],
}

/// One slot of a TX packet being gathered.
struct TxSlot {
    id: u16,
    gref: u32,
    offset: u16,
    len: u16,
}

/// A TX packet: its slots, extras, and whether it was refused.
struct TxPacket {
    slots: Vec<TxSlot>,
    extras: usize,
    flags: TxFlags,
    gso: Option<Gso>,
    refused: Option<&'static str>,
    first_op: usize,
}

/// A connected backend.
pub struct Netback {
    pub guest: DomId,
    pub be: String,
    pub fe: String,
    pub modes: Modes,
    mac: [u8; 6],
    tx: Option<BackRing<MappedGrant, TxRequest, TxResponse>>,
    rx: Option<BackRing<MappedGrant, RxRequest, RxResponse>>,
    tx_evt: Option<EventChannel>,
    rx_evt: Option<EventChannel>,
    /// What the guest's NIC accepts on receive.
    guest_caps: Offloads,
    pool: Arc<Mapping>,
    tx_base: u32,
    rx_base: u32,
    rx_queue: VecDeque<Packet>,
    pub counters: VifCounters,
    connected: bool,
    /// Ring batches go to the driver domain's trace area.
    tracer: Tracer,
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

/// Writes the backend's features and moves to InitWait (netback's probe).
pub fn probe(hv: &mut HvClient, guest: DomId, be: &str) -> Result<Pending> {
    let fe = hv.store_read_str(&format!("{be}/{}", keys::FRONTEND))?;
    let index = read_num(hv, &format!("{be}/splitnet-index"))?;
    let rx_flip = hv.store_read_str(&format!("{be}/splitnet-rx-mode"))? == "flip";
    let tx_map = hv.store_read_str(&format!("{be}/splitnet-tx-mode"))? == "map";
    let offload = read_flag(hv, &format!("{be}/splitnet-offload"));
    if (STAGING_BASE + FRAMES_PER_VIF * (index + 1)) > hv.welcome().pool_frames {
        return Err(proto(format!(
            "vif index {index} does not fit in the driver domain's memory"
        )));
    }
    let on = if offload { "1" } else { "0" };
    for (k, v) in [
        (keys::FEATURE_SG, on),
        (keys::FEATURE_GSO_TCPV4, on),
        (keys::FEATURE_GSO_TCPV6, on),
        (keys::FEATURE_IPV6_CSUM_OFFLOAD, on),
        (keys::FEATURE_RX_COPY, if rx_flip { "0" } else { "1" }),
        (keys::FEATURE_RX_FLIP, if rx_flip { "1" } else { "0" }),
        (keys::FEATURE_SPLIT_EVENT_CHANNELS, "1"),
    ] {
        hv.store_write(&format!("{be}/{k}"), v)?;
    }
    hv.switch_state(be, XenbusState::InitWait)?;
    let mac_text = hv.store_read_str(&format!("{be}/{}", keys::MAC))?;
    let mac = hv::topology::parse_mac(&mac_text).map_err(|e| proto(format!("{be}/mac: {e}")))?;
    Ok(Pending {
        guest,
        be: be.to_string(),
        fe,
        index,
        mac,
        modes: Modes {
            rx_flip,
            tx_map,
            offload,
        },
    })
}

impl Netback {
    /// Waits for the frontend to publish its rings and connects to them.
    pub fn connect(hv: &mut HvClient, p: Pending, timeout: Duration) -> Result<Netback> {
        let fe = p.fe.clone();
        hv.wait_state(&fe, timeout, |s| s == XenbusState::Connected)?;
        let g = p.guest;
        let tx_ref = read_num(hv, &format!("{fe}/{}", keys::TX_RING_REF))?;
        let rx_ref = read_num(hv, &format!("{fe}/{}", keys::RX_RING_REF))?;
        let (tx_port, rx_port) =
            match hv.store_read_str(&format!("{fe}/{}", keys::EVENT_CHANNEL_TX)) {
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
        if wants_copy == p.modes.rx_flip {
            return Err(proto(format!(
                "the frontend asked for RX {} but this vif is configured for {}",
                if wants_copy { "copy" } else { "flip" },
                if p.modes.rx_flip { "flip" } else { "copy" }
            )));
        }
        let sg = read_flag(hv, &format!("{fe}/{}", keys::FEATURE_SG));
        let guest_caps = Offloads {
            csum: !read_flag(hv, &format!("{fe}/{}", keys::FEATURE_NO_CSUM_OFFLOAD))
                && !p.modes.rx_flip,
            tso4: sg
                && read_flag(hv, &format!("{fe}/{}", keys::FEATURE_GSO_TCPV4))
                && !p.modes.rx_flip,
            tso6: sg
                && read_flag(hv, &format!("{fe}/{}", keys::FEATURE_GSO_TCPV6))
                && !p.modes.rx_flip,
        };
        // The rings live in pages the guest granted; they stay mapped while
        // connected. Whatever fails half-way is undone, so no grant stays pinned.
        let txm = hv.map_grant(g, tx_ref, true)?;
        let th = txm.handle;
        let mut held: Vec<EventChannel> = Vec::new();
        let mut rh = None;
        let r = (|| -> Result<_> {
            let rxm = hv.map_grant(g, rx_ref, true)?;
            rh = Some(rxm.handle);
            let tx = BackRing::attach(txm)?;
            let rx = BackRing::attach(rxm)?;
            held.push(hv.evtchn_bind(g, tx_port)?);
            if let Some(port) = rx_port {
                held.push(hv.evtchn_bind(g, port)?);
            }
            Ok((tx, rx))
        })();
        let (tx, rx) = match r {
            Ok(rings) => rings,
            Err(e) => {
                for ch in held {
                    let _ = hv.evtchn_close(ch);
                }
                for h in std::iter::once(th).chain(rh) {
                    let _ = hv.unmap_handle(h);
                }
                return Err(e);
            }
        };
        let mut chans = held.into_iter();
        let tx_evt = chans.next();
        let rx_evt = chans.next();
        hv.switch_state(&p.be, XenbusState::Connected)?;
        let tx_base = STAGING_BASE + FRAMES_PER_VIF * p.index;
        Ok(Netback {
            guest: g,
            be: p.be,
            fe,
            modes: p.modes,
            mac: p.mac,
            tx: Some(tx),
            rx: Some(rx),
            tx_evt,
            rx_evt,
            guest_caps,
            pool: hv.pool_shared(),
            tx_base,
            rx_base: tx_base + RING,
            rx_queue: VecDeque::new(),
            counters: VifCounters::default(),
            connected: true,
            tracer: hv.tracer(),
        })
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
        eprintln!("netback vif{}.0: disconnected: {why}", self.guest);
        for ring in [
            self.tx.take().map(|r| r.into_memory().handle),
            self.rx.take().map(|r| r.into_memory().handle),
        ]
        .into_iter()
        .flatten()
        {
            let _ = hv.unmap_handle(ring);
        }
        for ch in [self.tx_evt.take(), self.rx_evt.take()]
            .into_iter()
            .flatten()
        {
            let _ = hv.evtchn_close(ch);
        }
        self.rx_queue.clear();
        // Final counters first, so whoever sees Closed sees why.
        if let Ok(json) = serde_json::to_string(&self.counters) {
            let _ = hv.store_write(&format!("{}/stats", self.be), &json);
        }
        let _ = hv.store_write(&format!("{}/disconnect-reason", self.be), why);
        let _ = hv.switch_state(&self.be, XenbusState::Closed);
    }

    fn refuse(&mut self, reason: &'static str) {
        self.counters.reject(reason);
        // A log line per refusal, but a hostile guest cannot flood the log.
        let n = self.counters.rejected_total();
        if n <= 8 || n.is_power_of_two() {
            eprintln!(
                "netback vif{}.0: refused a request ({reason}); {n} refused so far",
                self.guest
            );
        }
    }

    /// Whether the frontend has crossed the line.
    fn too_hostile(&self) -> bool {
        self.counters.rejected_total() >= FATAL_LIMIT
    }

    /// Consumes up to a budget of TX packets, validating each, and appends
    /// the good ones to `out`. Every consumed request gets one response.
    pub fn process_tx(&mut self, hv: &mut HvClient, out: &mut Vec<Packet>) -> Result<()> {
        if !self.connected {
            return Ok(());
        }
        let t0 = trace::now();
        let mut pkts: Vec<TxPacket> = Vec::new();
        let mut ops: Vec<GrantCopy> = Vec::new();
        let mut ids = HashSet::new();
        let mut fatal: Option<&'static str> = None;
        let mut slots_used = 0usize;
        'gather: while pkts.len() < TX_BUDGET && slots_used + XEN_NETIF_NR_SLOTS_MIN < SLOT_BUDGET {
            let Some(tx) = self.tx.as_mut() else { break };
            let first = match tx.next_request() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => {
                    fatal = Some("ring_overflow");
                    break;
                }
            };
            let mut p = TxPacket {
                slots: Vec::new(),
                extras: 0,
                flags: first.flags,
                gso: None,
                refused: None,
                first_op: ops.len(),
            };
            let mut cur = first;
            if cur.validate().is_err() {
                p.refused = Some("bad_flags");
            }
            p.slots.push(TxSlot {
                id: cur.id,
                gref: cur.gref,
                offset: cur.offset,
                len: cur.size,
            });
            // Extra-info slots follow the first request.
            let mut more_extra = first.flags.contains(TxFlags::EXTRA_INFO);
            while more_extra {
                let Some(tx) = self.tx.as_mut() else {
                    break 'gather;
                };
                let raw = match next_in_chain(tx) {
                    Ok(r) => r,
                    Err(reason) => {
                        fatal = Some(reason);
                        break 'gather;
                    }
                };
                p.extras += 1;
                match ExtraInfo::from_tx_slot(&raw) {
                    Ok(x) => {
                        more_extra = x.more();
                        if let Some(g) = Gso::from_extra(&x) {
                            p.gso = Some(g);
                        }
                    }
                    Err(_) => {
                        p.refused.get_or_insert("bad_extra_info");
                        more_extra = false;
                    }
                }
                if p.extras > 4 {
                    fatal = Some("too_many_extras");
                    break 'gather;
                }
            }
            while cur.flags.contains(TxFlags::MORE_DATA) {
                if p.slots.len() >= XEN_NETIF_NR_SLOTS_MIN {
                    // Xen treats this as fatal: the frontend is broken or hostile.
                    fatal = Some("too_many_slots");
                    break 'gather;
                }
                let Some(tx) = self.tx.as_mut() else {
                    break 'gather;
                };
                cur = match next_in_chain(tx) {
                    Ok(r) => r,
                    Err(reason) => {
                        fatal = Some(reason);
                        break 'gather;
                    }
                };
                if cur.validate().is_err() {
                    p.refused.get_or_insert("bad_flags");
                }
                p.slots.push(TxSlot {
                    id: cur.id,
                    gref: cur.gref,
                    offset: cur.offset,
                    len: cur.size,
                });
            }
            slots_used += p.slots.len() + p.extras;
            if p.refused.is_none() {
                p.refused = check_tx_packet(&mut p, &mut ids, self.modes.offload);
            }
            if p.refused.is_none() && !self.modes.tx_map {
                for s in &p.slots {
                    let frame = self.tx_base + ops.len() as u32;
                    ops.push(GrantCopy {
                        source: CopyPtr::Gref {
                            domid: self.guest,
                            gref: s.gref,
                            offset: s.offset,
                        },
                        dest: CopyPtr::Frame {
                            domid: DOMID_SELF,
                            gmfn: frame as u64,
                            offset: 0,
                        },
                        len: s.len,
                        status: 0,
                    });
                }
            }
            pkts.push(p);
        }
        if !pkts.is_empty() {
            self.counters.batches += 1;
        }
        let statuses = if ops.is_empty() {
            Vec::new()
        } else {
            hv.grant_copy_batch(&ops)?
        };
        self.counters.grant("copy", ops.len() as u64);
        for p in &mut pkts {
            if p.refused.is_some() {
                continue;
            }
            let data = if self.modes.tx_map {
                self.gather_mapped(hv, p)
            } else {
                self.gather_copied(p, &statuses)
            };
            let data = data.and_then(|d| {
                if d.len() >= 12 && d[6..12] == self.mac {
                    Ok(d)
                } else {
                    Err("spoofed_mac")
                }
            });
            match data {
                Ok(data) => {
                    let csum = if p.flags.contains(TxFlags::CSUM_BLANK) {
                        match offload::partial_csum_for(&data) {
                            Ok((start, offset)) => Csum::Partial { start, offset },
                            Err(_) => {
                                p.refused = Some("csum_blank_not_tcp_udp");
                                continue;
                            }
                        }
                    } else if p.flags.contains(TxFlags::DATA_VALIDATED) {
                        Csum::Valid
                    } else {
                        Csum::Unknown
                    };
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += data.len() as u64;
                    out.push(Packet {
                        data,
                        csum,
                        gso: p.gso,
                    });
                }
                Err(reason) => p.refused = Some(reason),
            }
        }
        // Exactly one response per consumed request, in order.
        for p in &pkts {
            let status = if p.refused.is_some() {
                NetifStatus::Error
            } else {
                NetifStatus::Okay
            };
            if let Some(r) = p.refused {
                self.refuse(r);
            }
            for (i, s) in p.slots.iter().enumerate() {
                self.respond_tx(TxResponse::new(s.id, status))?;
                if i == 0 {
                    for _ in 0..p.extras {
                        self.respond_tx(TxResponse::new(0, NetifStatus::Null))?;
                    }
                }
            }
        }
        if self
            .tx
            .as_mut()
            .is_some_and(|tx| tx.push_responses_and_check_notify())
        {
            self.notify(false);
        }
        if !pkts.is_empty() {
            self.tracer
                .record(DomainEvent::NetbackTx, t0, pkts.len() as u64);
        }
        if let Some(reason) = fatal {
            self.refuse(reason);
            self.disconnect(hv, &format!("fatal frontend error: {reason}"));
            return Ok(());
        }
        if self.too_hostile() {
            self.disconnect(
                hv,
                &format!("{} refused requests", self.counters.rejected_total()),
            );
            return Ok(());
        }
        // More work already waiting? The caller polls again; re-arm otherwise.
        if let Some(tx) = self.tx.as_mut() {
            if tx.final_check_for_requests().is_err() {
                self.refuse("ring_overflow");
                self.disconnect(hv, "fatal frontend error: ring_overflow");
            }
        }
        Ok(())
    }

    fn respond_tx(&mut self, r: TxResponse) -> Result<()> {
        if let Some(tx) = self.tx.as_mut() {
            tx.push_response(&r)?;
        }
        Ok(())
    }

    /// Whether TX work is waiting.
    pub fn tx_pending(&mut self) -> bool {
        self.tx
            .as_mut()
            .is_some_and(|t| t.unconsumed_requests().map(|n| n > 0).unwrap_or(true))
    }

    fn gather_copied(
        &mut self,
        p: &TxPacket,
        statuses: &[i16],
    ) -> std::result::Result<Vec<u8>, &'static str> {
        let mut data = Vec::with_capacity(p.slots.iter().map(|s| s.len as usize).sum());
        for (k, s) in p.slots.iter().enumerate() {
            let op = p.first_op + k;
            match statuses.get(op).copied() {
                Some(0) => {}
                Some(st) => return Err(grant_reason(st)),
                None => return Err("copy_missing"),
            }
            let frame = self.tx_base + op as u32;
            let at = data.len();
            data.resize(at + s.len as usize, 0);
            self.pool
                .read_bytes(frame as usize * PAGE_SIZE, &mut data[at..]);
        }
        Ok(data)
    }

    /// Xen 2.0 transmit: map each page, copy the data out, unmap.
    fn gather_mapped(
        &mut self,
        hv: &mut HvClient,
        p: &TxPacket,
    ) -> std::result::Result<Vec<u8>, &'static str> {
        let mut data = Vec::new();
        for s in &p.slots {
            let m = match hv.map_grant(self.guest, s.gref, false) {
                Ok(m) => m,
                Err(e) => return Err(hv_reason(&e)),
            };
            self.counters.grant("map", 1);
            let at = data.len();
            data.resize(at + s.len as usize, 0);
            let r = m.read(s.offset as usize, &mut data[at..]);
            let _ = hv.unmap_grant(m);
            self.counters.grant("unmap", 1);
            if r.is_err() {
                return Err("crosses_page");
            }
        }
        Ok(data)
    }

    /// Queues a frame for the guest, shaped for what its NIC accepts.
    pub fn enqueue_rx(&mut self, pkt: Packet) {
        if !self.connected {
            return;
        }
        let mut shaped = Vec::new();
        if offload::prepare(pkt, self.guest_caps, &mut shaped).is_err() {
            self.counters.drop("malformed_for_guest");
            return;
        }
        for p in shaped {
            if self.rx_queue.len() >= RX_QUEUE {
                self.counters.drop("rx_queue_full");
            } else {
                self.rx_queue.push_back(p);
            }
        }
    }

    /// Moves queued frames into the buffers the guest has posted.
    pub fn flush_rx(&mut self, hv: &mut HvClient) -> Result<()> {
        // Bounded: a guest that keeps posting buffers cannot keep us here.
        for _ in 0..8 {
            if !self.connected || self.rx_queue.is_empty() {
                return Ok(());
            }
            let (t0, queued) = (trace::now(), self.rx_queue.len());
            let r = if self.modes.rx_flip {
                self.flush_rx_flip(hv)
            } else {
                self.flush_rx_copy(hv)
            };
            if let Err(NetbackError::Ring(_)) = r {
                self.refuse("ring_overflow");
                self.disconnect(hv, "fatal frontend error: ring_overflow");
                return Ok(());
            }
            r?;
            let notify = self
                .rx
                .as_mut()
                .is_some_and(|rx| rx.push_responses_and_check_notify());
            if notify {
                self.notify(true);
            }
            let moved = queued.saturating_sub(self.rx_queue.len());
            if moved > 0 {
                self.tracer.record(DomainEvent::NetbackRx, t0, moved as u64);
            }
            if self.rx_queue.is_empty() {
                return Ok(());
            }
            // Ask to be told when the guest posts more buffers; if some
            // arrived meanwhile, go round again rather than miss them.
            let posted = match self.rx.as_mut() {
                Some(rx) => rx.final_check_for_requests()?,
                None => false,
            };
            if !posted || !self.rx_pending() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Ring slots the packet at the head of the RX queue needs.
    fn head_need(&self) -> Option<u32> {
        let p = self.rx_queue.front()?;
        if self.modes.rx_flip {
            return Some(1);
        }
        Some(p.data.len().div_ceil(PAGE_SIZE).max(1) as u32 + u32::from(p.gso.is_some()))
    }

    /// Whether queued frames could go out now: the guest has posted enough
    /// buffers for the next one (otherwise wait for its notification).
    pub fn rx_pending(&mut self) -> bool {
        let Some(need) = self.head_need() else {
            return false;
        };
        self.rx
            .as_mut()
            .is_some_and(|r| r.unconsumed_requests().map(|n| n >= need).unwrap_or(true))
    }

    fn flush_rx_copy(&mut self, hv: &mut HvClient) -> Result<()> {
        // (request id, length or error, flags) per response, with extras as GSO info.
        enum Resp {
            Data {
                id: u16,
                op: usize,
                len: u16,
                flags: RxFlags,
            },
            Extra(ExtraInfo),
        }
        let mut ops: Vec<GrantCopy> = Vec::new();
        let mut resps: Vec<Resp> = Vec::new();
        let Some(rx) = self.rx.as_mut() else {
            return Ok(());
        };
        let mut avail = rx.unconsumed_requests()? as usize;
        while let Some(pkt) = self.rx_queue.front() {
            let chunks = pkt.data.len().div_ceil(PAGE_SIZE).max(1);
            let need = chunks + usize::from(pkt.gso.is_some());
            if need > avail || ops.len() + chunks > SLOT_BUDGET {
                break;
            }
            let Some(pkt) = self.rx_queue.pop_front() else {
                break;
            };
            avail -= need;
            let mut flags = match pkt.csum {
                Csum::Partial { .. } => RxFlags::CSUM_BLANK | RxFlags::DATA_VALIDATED,
                Csum::Valid => RxFlags::DATA_VALIDATED,
                Csum::Unknown => RxFlags::EMPTY,
            };
            if pkt.gso.is_some() {
                flags |= RxFlags::EXTRA_INFO;
            }
            for (i, chunk) in pkt.data.chunks(PAGE_SIZE).enumerate() {
                let Some(req) = rx.next_request()? else {
                    return Err(proto("RX requests vanished"));
                };
                let frame = self.rx_base + ops.len() as u32;
                self.pool.write_bytes(frame as usize * PAGE_SIZE, chunk);
                let more = if (i + 1) < chunks {
                    RxFlags::MORE_DATA
                } else {
                    RxFlags::EMPTY
                };
                let f = if i == 0 { flags | more } else { more };
                resps.push(Resp::Data {
                    id: req.id,
                    op: ops.len(),
                    len: chunk.len() as u16,
                    flags: f,
                });
                ops.push(GrantCopy {
                    source: CopyPtr::Frame {
                        domid: DOMID_SELF,
                        gmfn: frame as u64,
                        offset: 0,
                    },
                    dest: CopyPtr::Gref {
                        domid: self.guest,
                        gref: req.gref,
                        offset: 0,
                    },
                    len: chunk.len() as u16,
                    status: 0,
                });
                if i == 0 {
                    if let Some(g) = pkt.gso {
                        // The extra slot consumes a request too (its buffer goes unused).
                        let _ = rx.next_request()?;
                        resps.push(Resp::Extra(g.to_extra()));
                    }
                }
            }
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += pkt.data.len() as u64;
        }
        if resps.is_empty() {
            return Ok(());
        }
        self.counters.batches += 1;
        let statuses = hv.grant_copy_batch(&ops)?;
        self.counters.grant("copy", ops.len() as u64);
        for r in resps {
            let rsp = match r {
                Resp::Data { id, op, len, flags } => match statuses.get(op).copied() {
                    Some(0) => RxResponse::data(id, 0, flags, len)?,
                    st => {
                        self.refuse(st.map_or("copy_missing", grant_reason));
                        // Keep MORE_DATA / EXTRA_INFO so the guest can still
                        // walk the chain (and drop the packet).
                        RxResponse {
                            flags,
                            ..RxResponse::failed(id, NetifStatus::Error)
                        }
                    }
                },
                Resp::Extra(x) => x.to_rx_slot(),
            };
            if let Some(rx) = self.rx.as_mut() {
                rx.push_response(&rsp)?;
            }
        }
        if self.too_hostile() {
            self.disconnect(
                hv,
                &format!("{} refused requests", self.counters.rejected_total()),
            );
        }
        Ok(())
    }

    /// Xen 2.0 receive: one packet per page, whose ownership moves to the guest.
    fn flush_rx_flip(&mut self, hv: &mut HvClient) -> Result<()> {
        let Some(rx) = self.rx.as_mut() else {
            return Ok(());
        };
        let mut avail = rx.unconsumed_requests()?;
        let mut n = 0u32;
        while avail > 0 && n < RING {
            let Some(pkt) = self.rx_queue.pop_front() else {
                break;
            };
            if pkt.data.len() > PAGE_SIZE {
                self.counters.drop("too_big_for_flip");
                continue;
            }
            let Some(rx) = self.rx.as_mut() else { break };
            let Some(req) = rx.next_request()? else { break };
            avail -= 1;
            let frame = self.rx_base + (n % RING);
            n += 1;
            // The whole page leaves the driver domain: nothing but this packet
            // (zero padding) may be on it (Menon 2006 §4.2).
            let base = frame as usize * PAGE_SIZE;
            self.pool.write_bytes(base, &pkt.data);
            self.pool
                .fill(base + pkt.data.len(), PAGE_SIZE - pkt.data.len(), 0);
            let flags = match pkt.csum {
                Csum::Valid | Csum::Partial { .. } => RxFlags::DATA_VALIDATED,
                Csum::Unknown => RxFlags::EMPTY,
            };
            self.counters.grant("transfer", 1);
            let rsp = match hv.transfer(frame, self.guest, req.gref) {
                Ok(_) => {
                    self.counters.rx_packets += 1;
                    self.counters.rx_bytes += pkt.data.len() as u64;
                    RxResponse::data(req.id, 0, flags, pkt.data.len() as u16)?
                }
                Err(e) => {
                    self.refuse(hv_reason(&e));
                    RxResponse::failed(req.id, NetifStatus::Error)
                }
            };
            if let Some(rx) = self.rx.as_mut() {
                rx.push_response(&rsp)?;
            }
        }
        if n > 0 {
            self.counters.batches += 1;
        }
        if self.too_hostile() {
            self.disconnect(
                hv,
                &format!("{} refused requests", self.counters.rejected_total()),
            );
        }
        Ok(())
    }

    /// Packets waiting for guest buffers.
    pub fn rx_queued(&self) -> usize {
        self.rx_queue.len()
    }
}

/// The next slot of a packet already begun: its absence means a truncated
/// packet, a bad index an overflow; both are fatal.
fn next_in_chain(
    tx: &mut BackRing<MappedGrant, TxRequest, TxResponse>,
) -> std::result::Result<TxRequest, &'static str> {
    match tx.next_request() {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err("truncated_packet"),
        Err(_) => Err("ring_overflow"),
    }
}

/// Structural checks of a gathered TX packet (Xen netback's rules): sizes,
/// page bounds, and request ids not reused within the batch.
fn check_tx_packet(
    p: &mut TxPacket,
    ids: &mut HashSet<u16>,
    offload: bool,
) -> Option<&'static str> {
    let rest: u32 = p.slots[1..].iter().map(|s| s.len as u32).sum();
    let total = p.slots[0].len as u32;
    if total < rest + 1 {
        return Some("size_too_small");
    }
    // The first request's size is the whole packet; its slot holds the remainder.
    p.slots[0].len = (total - rest) as u16;
    if total < 14 {
        return Some("runt");
    }
    for s in &p.slots {
        if s.len == 0 {
            return Some("empty_slot");
        }
        if s.offset as usize + s.len as usize > PAGE_SIZE {
            return Some("crosses_page");
        }
        if !ids.insert(s.id) {
            return Some("duplicate_id");
        }
    }
    if let Some(g) = p.gso {
        // Not offered, or a segment size that would make the software
        // offload driver cut one packet into thousands.
        if !offload || g.size < MIN_GSO_SIZE || g.size as u32 >= total {
            return Some("bad_gso");
        }
    }
    None
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
        hv::ErrorKind::BadGntref => "bad_grant_ref",
        hv::ErrorKind::PermissionDenied => "grant_permission_denied",
        hv::ErrorKind::BadDomain => "bad_domain",
        hv::ErrorKind::BadPage => "bad_page",
        hv::ErrorKind::BadCopyArg => "crosses_page",
        hv::ErrorKind::DoubleMap => "double_map",
        _ => "grant_error",
    }
}
