//! netback RX, bridge → guest. Under the new grant mechanism a frame is
//! copied once, straight into the buffer the guest posted, through the
//! mapping of the guest's pool (and, between two guests, straight from the
//! sender's TX buffer: one copy in all). A frame that finds no posted buffer,
//! or that must be shaped for the guest's NIC, waits in the vif's slab
//! (`slab`: storage allocated at connect, no allocation per frame). Under
//! `hv-copy` hv copies each batch from staging frames; in the Xen 2.0
//! baseline each page is flipped.

use super::slab::FrameSlab;
use super::{grant_reason, proto, Netback, NetbackError, Result, RING, RX_HALF, SLOT_BUDGET};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::netif::{ExtraInfo, NetifStatus, RxFlags, RxRequest, RxResponse};
use abi::{Pfn, SharedMemory};
use frame::lro::Lro;
use frame::offload::{self, Offloads};
use frame::packet::{Csum, FrameRef, Gso, GsoKind};
use hypercall::ngm_client::NgmView;
use hypercall::trace::{self, DomainEvent};
use hypercall::{DomId, Flip, HvClient};
use sys::PAGE_SIZE;

/// Where the buffer of RX request `req` starts in its page: 0, or with
/// half-page buffers negotiated, the offset the guest put in `pad` if it is
/// 0 or 2048. Anything else is refused (`bad_rx_offset`).
pub(super) fn buffer_offset(half: bool, req: &RxRequest) -> std::result::Result<u16, &'static str> {
    match (half, usize::from(req.offset)) {
        (false, _) => Ok(0),
        (true, 0) => Ok(0),
        (true, RX_HALF) => Ok(req.offset),
        _ => Err("bad_rx_offset"),
    }
}

/// Copies `len` bytes of `f` from `at` into the buffer the guest posted
/// with `req`, through the guest's pool under the new grant mechanism:
/// the buffer's offset in its page, or why it was refused.
fn fill_rx_buffer(
    view: &NgmView,
    f: &FrameRef<'_>,
    at: usize,
    len: usize,
    req: &RxRequest,
    half: bool,
) -> std::result::Result<u16, &'static str> {
    let off = buffer_offset(half, req)?;
    let frame = view.acquire(req.gref, true).map_err(|r| r.reason())?;
    let copied = f.copy_into(at, len, view.pool(), frame.base() + usize::from(off));
    view.release(req.gref);
    copied.map(|()| off).map_err(|e| e.reason())
}

/// The copy of `len` bytes from staging frame `frame` into the buffer
/// `guest` posted with grant `gref`, at `off` in its page.
pub(super) fn stage_to_guest(
    frame: u32,
    guest: DomId,
    gref: u32,
    off: u16,
    len: usize,
) -> GrantCopy {
    GrantCopy {
        source: CopyPtr::Frame {
            domid: DOMID_SELF,
            gmfn: frame as u64,
            offset: 0,
        },
        dest: CopyPtr::Gref {
            domid: guest,
            gref,
            offset: off,
        },
        len: len as u16,
        status: 0,
    }
}

/// One data part of a frame cut into RX buffers: its index, where it
/// starts in the frame, its length, and its response's flags. Every path
/// that fills RX buffers walks a frame by these ([`parts`]).
#[derive(Clone, Copy)]
pub(super) struct Part {
    pub i: usize,
    pub at: usize,
    pub len: usize,
    pub flags: RxFlags,
}

/// The parts of a frame of `len` bytes in buffers of `chunk` bytes (one at
/// least): the first carries the checksum state and, under GSO,
/// EXTRA_INFO (its extra-info slot follows it); all but the last
/// MORE_DATA.
pub(super) fn parts(
    len: usize,
    chunk: usize,
    csum: Csum,
    gso: Option<Gso>,
) -> impl Iterator<Item = Part> {
    let n = len.div_ceil(chunk).max(1);
    (0..n).map(move |i| {
        let mut flags = if i == 0 {
            csum.rx_flags()
        } else {
            RxFlags::EMPTY
        };
        if i == 0 && gso.is_some() {
            flags |= RxFlags::EXTRA_INFO;
        }
        if i + 1 < n {
            flags |= RxFlags::MORE_DATA;
        }
        Part {
            i,
            at: i * chunk,
            len: (len - i * chunk).min(chunk),
            flags,
        }
    })
}

/// An error response to request `id` that keeps its part's flags
/// (MORE_DATA / EXTRA_INFO), so the guest can still walk the chain (and
/// drop the packet).
fn failed_part(id: u16, flags: RxFlags) -> RxResponse {
    RxResponse {
        flags,
        ..RxResponse::failed(id, NetifStatus::Error)
    }
}

/// One RX response of a copy batch: (request id, copy op, length, flags)
/// per data slot, with extras as GSO info.
pub(super) enum CopyResp {
    Data {
        id: u16,
        op: usize,
        /// The buffer's offset in its page.
        off: u16,
        len: u16,
        flags: RxFlags,
    },
    Extra(ExtraInfo),
    /// A slot refused before any copy (a bad offset): answered failed.
    Refused {
        id: u16,
        flags: RxFlags,
        why: &'static str,
    },
}

/// Large receive offload in the driver domain (Ram thesis 5.1): frames for
/// the guest are coalesced before they are delivered, and what is held goes
/// out in [`Netback::flush_rx`], at the end of the driver's turn. It needs a
/// guest that takes GSO: merged frames are GSO frames.
pub(super) struct LroState {
    coalescer: Option<Lro>,
    /// The topology asked for it.
    asked: bool,
    /// Why it is off although asked for.
    off: Option<&'static str>,
}

impl LroState {
    /// Starts the coalescer's counts where a previous program of the
    /// driver domain left them (an upgrade in place).
    pub(super) fn carry_counts(&mut self, merged: u64, flushed: u64) {
        if let Some(c) = self.coalescer.as_mut() {
            c.stats.merged = merged;
            c.stats.flushed = flushed;
        }
    }

    pub(super) fn new(asked: bool, guest: Offloads) -> LroState {
        let takes_gso = guest.accepts_gso(GsoKind::TcpV4) && guest.accepts_gso(GsoKind::TcpV6);
        let (coalescer, off) = match (asked, takes_gso) {
            (false, _) => (None, None),
            (true, true) => (Some(Lro::new()), None),
            (true, false) => (None, Some("the guest takes no TCP GSO on receive")),
        };
        LroState {
            coalescer,
            asked,
            off,
        }
    }

    /// For status: where LRO runs and whether it is on, when asked for.
    pub(super) fn status(&self) -> Option<serde_json::Value> {
        self.asked.then(|| {
            serde_json::json!({
                "where": "driver",
                "on": self.coalescer.is_some(),
                "why": self.off,
            })
        })
    }
}

impl Netback {
    /// Turns driver-domain LRO off for this vif, with the reason status
    /// shows (a path that places frames in the guest's buffers without
    /// netback reading them, such as a dedicated queue, bypasses it).
    pub fn lro_bypassed(&mut self, why: &'static str) {
        if self.lro.asked && self.lro.coalescer.is_some() {
            self.flush_lro();
            self.lro.coalescer = None;
            self.lro.off = Some(why);
        }
    }

    /// Turns driver-domain LRO back on after the bypass `why` ended (the
    /// vif's queue went and its frames come through the bridge again).
    pub(super) fn lro_resume(&mut self, why: &'static str) {
        if self.lro.asked && self.lro.coalescer.is_none() && self.lro.off == Some(why) {
            self.lro = LroState::new(true, self.guest_caps);
        }
    }

    /// Delivers a frame to the guest, through the LRO coalescer when it is
    /// on (see [`LroState`]).
    pub fn deliver(&mut self, f: &FrameRef<'_>) {
        if !self.connected {
            return;
        }
        if let Some(mut lro) = self.lro.coalescer.take() {
            let taken = lro.push(f, &mut |g| self.deliver_now(g));
            self.lro.coalescer = Some(lro);
            if taken {
                return;
            }
        }
        self.deliver_now(f);
    }

    /// Puts out what LRO holds: the end of the driver's batch.
    fn flush_lro(&mut self) {
        let Some(mut lro) = self.lro.coalescer.take() else {
            return;
        };
        if lro.holding() {
            lro.flush(&mut |g| self.deliver_now(g));
        }
        self.counters.lro_merged = lro.stats.merged;
        self.counters.lro_flushed = lro.stats.flushed;
        self.lro.coalescer = Some(lro);
    }

    /// Delivers a frame to the guest: at once into its posted buffers under
    /// the new grant mechanism when its NIC takes the frame as it is, through
    /// the queue otherwise. Responses are published by [`Netback::flush_rx`].
    fn deliver_now(&mut self, f: &FrameRef<'_>) {
        if !self.connected {
            return;
        }
        if self.ngm.is_some()
            && self.rx_slab.is_empty()
            && self.guest_caps.passes_as_is(f.csum, f.gso)
        {
            match self.rx_direct(f) {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => {
                    self.rx_overflow = true;
                    return;
                }
            }
        }
        self.enqueue_rx(f);
    }

    /// Copies `f` into the guest's posted RX buffers and queues the
    /// responses. False (nothing consumed) when too few buffers are posted.
    fn rx_direct(&mut self, f: &FrameRef<'_>) -> Result<bool> {
        let (chunk, half) = (self.rx_chunk(), self.rx_half);
        let (Some(view), Some(rx)) = (self.ngm.as_ref(), self.rx.as_mut()) else {
            return Ok(false);
        };
        let need = f.len.div_ceil(chunk).max(1) + usize::from(f.gso.is_some());
        if (rx.unconsumed_requests()? as usize) < need {
            return Ok(false);
        }
        let mut refused = None;
        for part in parts(f.len, chunk, f.csum, f.gso) {
            let Some(req) = rx.next_request()? else {
                return Err(NetbackError::Protocol("RX requests vanished".into()));
            };
            let rsp = match fill_rx_buffer(view, f, part.at, part.len, &req, half) {
                Ok(off) => RxResponse::data(req.id, off, part.flags, part.len as u16)?,
                Err(r) => {
                    refused = Some(r);
                    failed_part(req.id, part.flags)
                }
            };
            rx.push_response(&rsp)?;
            if part.i == 0 {
                if let Some(g) = f.gso {
                    // The extra slot consumes a request too (its buffer goes unused).
                    let _ = rx.next_request()?;
                    rx.push_response(&g.to_extra().to_rx_slot())?;
                }
            }
        }
        self.rx_unpublished += 1;
        match refused {
            Some(r) => self.refuse(r),
            None => self.count_rx(f.len),
        }
        Ok(true)
    }

    /// Moves queued frames into posted buffers with the new grant mechanism.
    fn flush_rx_ngm(&mut self) -> Result<()> {
        self.with_slab(|nb, slab| {
            loop {
                if nb.prefetch {
                    slab.prefetch_next();
                }
                let Some(p) = slab.front() else {
                    break;
                };
                if !nb.rx_direct(&FrameRef::private(p.data, p.csum, p.gso))? {
                    break;
                }
                slab.pop_front();
            }
            Ok(())
        })
    }

    /// Runs `f` with the slab out of the vif, so that it may hand out a
    /// frame while the vif's methods run (the slab's storage moves, it is
    /// not copied).
    fn with_slab<T>(&mut self, f: impl FnOnce(&mut Self, &mut FrameSlab) -> T) -> T {
        let mut slab = std::mem::take(&mut self.rx_slab);
        let r = f(self, &mut slab);
        self.rx_slab = slab;
        r
    }

    /// Publishes the responses written so far and notifies the guest if it asked.
    fn publish_rx(&mut self) {
        let notify = self
            .rx
            .as_mut()
            .is_some_and(|rx| rx.push_responses_and_check_notify());
        if notify {
            self.notify(true);
        }
    }

    /// Queues a frame for the guest in the slab, shaped there for what its
    /// NIC accepts. A guest that takes nothing costs a counter once the
    /// slab is full.
    pub(super) fn enqueue_rx(&mut self, f: &FrameRef<'_>) {
        match offload::prepare_frame(f, self.guest_caps, &mut self.rx_slab) {
            Ok(true) => {}
            Ok(false) => self.counters.drop("rx_queue_full"),
            Err(_) => self.counters.drop("malformed_for_guest"),
        }
    }

    /// Publishes what [`Netback::deliver`] wrote and moves queued frames
    /// into the buffers the guest has posted.
    pub fn flush_rx(&mut self, hv: &mut HvClient) -> Result<()> {
        self.flush_lro();
        if std::mem::take(&mut self.rx_overflow) {
            self.enforce(hv, Some("ring_overflow"));
            return Ok(());
        }
        self.flush_queue_copies(hv)?;
        if self.rx_unpublished > 0 {
            let n = std::mem::take(&mut self.rx_unpublished);
            let t0 = trace::now();
            self.publish_rx();
            self.counters.batches += 1;
            self.tracer.record(DomainEvent::NetbackRx, t0, n);
        }
        // Bounded: a guest that keeps posting buffers cannot keep us here.
        for _ in 0..8 {
            if !self.connected || self.rx_slab.is_empty() {
                break;
            }
            let (t0, queued) = (trace::now(), self.rx_slab.len());
            let r = if self.modes.rx_flip {
                self.flush_rx_flip(hv)
            } else if self.ngm.is_some() {
                self.flush_rx_ngm()
            } else {
                self.flush_rx_copy(hv)
            };
            if let Err(NetbackError::Ring(_)) = r {
                self.enforce(hv, Some("ring_overflow"));
                return Ok(());
            }
            r?;
            self.rx_unpublished = 0;
            self.publish_rx();
            let moved = queued.saturating_sub(self.rx_slab.len());
            if moved > 0 {
                self.tracer.record(DomainEvent::NetbackRx, t0, moved as u64);
            }
            if self.rx_slab.is_empty() {
                return Ok(());
            }
            // Ask to be told when the guest posts more buffers; if some
            // arrived meanwhile, go round again rather than miss them.
            let posted = match self.rx.as_mut() {
                Some(rx) => rx.final_check_for_requests()?,
                None => false,
            };
            if !posted || !self.rx_pending() {
                break;
            }
        }
        self.enforce(hv, None);
        Ok(())
    }

    /// Ring slots the packet at the head of the RX queue needs.
    fn head_need(&self) -> Option<u32> {
        let (len, _, gso) = self.rx_slab.front_meta()?;
        if self.modes.rx_flip {
            return Some(1);
        }
        Some(len.div_ceil(self.rx_chunk()).max(1) as u32 + u32::from(gso.is_some()))
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

    /// `hv-copy`: stages queued frames in this vif's own frames and has hv
    /// copy them into the guest's buffers in one batch.
    fn flush_rx_copy(&mut self, hv: &mut HvClient) -> Result<()> {
        let mut ops = std::mem::take(&mut self.rx_ops);
        let mut resps = std::mem::take(&mut self.rx_resps);
        ops.clear();
        resps.clear();
        let r = self.stage_rx_copies(&mut ops, &mut resps).and_then(|()| {
            if resps.is_empty() {
                return Ok(());
            }
            self.copy_and_answer(hv, &ops, &resps)
        });
        self.rx_ops = ops;
        self.rx_resps = resps;
        r
    }

    /// Moves as many queued frames as the posted buffers and one batch take
    /// into staging frames, with their copy ops and responses.
    fn stage_rx_copies(
        &mut self,
        ops: &mut Vec<GrantCopy>,
        resps: &mut Vec<CopyResp>,
    ) -> Result<()> {
        let (size, half, prefetch) = (self.rx_chunk(), self.rx_half, self.prefetch);
        let Some(rx) = self.rx.as_mut() else {
            return Ok(());
        };
        let mut avail = rx.unconsumed_requests()? as usize;
        loop {
            if prefetch {
                self.rx_slab.prefetch_next();
            }
            let Some(pkt) = self.rx_slab.front() else {
                break;
            };
            let len = pkt.data.len();
            let chunks = len.div_ceil(size).max(1);
            let need = chunks + usize::from(pkt.gso.is_some());
            if need > avail || ops.len() + chunks > SLOT_BUDGET {
                break;
            }
            avail -= need;
            // An empty frame fills no buffer here.
            for part in parts(len, size, pkt.csum, pkt.gso).filter(|p| p.len > 0) {
                let Some(req) = rx.next_request()? else {
                    return Err(proto("RX requests vanished"));
                };
                let (f, chunk) = (part.flags, &pkt.data[part.at..part.at + part.len]);
                match buffer_offset(half, &req) {
                    Ok(off) => {
                        // One of this vif's own staging frames (rx_base + at
                        // most SLOT_BUDGET), inside its pool by construction.
                        let frame = self.rx_base + ops.len() as u32;
                        self.pool.write_bytes(Pfn::new(frame).base(), chunk);
                        resps.push(CopyResp::Data {
                            id: req.id,
                            op: ops.len(),
                            off,
                            len: chunk.len() as u16,
                            flags: f,
                        });
                        ops.push(stage_to_guest(
                            frame,
                            self.guest,
                            req.gref,
                            off,
                            chunk.len(),
                        ));
                    }
                    Err(why) => resps.push(CopyResp::Refused {
                        id: req.id,
                        flags: f,
                        why,
                    }),
                }
                if part.i == 0 {
                    if let Some(g) = pkt.gso {
                        // The extra slot consumes a request too (its buffer goes unused).
                        let _ = rx.next_request()?;
                        resps.push(CopyResp::Extra(g.to_extra()));
                    }
                }
            }
            self.rx_slab.pop_front();
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += len as u64;
        }
        Ok(())
    }

    /// Copies a staged batch into the guest's buffers with one grant-copy
    /// hypercall per ring batch, then answers each request with its copy's
    /// status.
    pub(super) fn copy_and_answer(
        &mut self,
        hv: &mut HvClient,
        ops: &[GrantCopy],
        resps: &[CopyResp],
    ) -> Result<()> {
        self.counters.batches += 1;
        let statuses = hv.grant_copy_batch(ops)?;
        self.counters.grant("copy", ops.len() as u64);
        self.answer_rx_copies(resps, &statuses)
    }

    /// Pushes the RX responses of a copy batch: each data slot succeeds or
    /// fails with its copy's status, extras carry their GSO info.
    pub(super) fn answer_rx_copies(&mut self, resps: &[CopyResp], statuses: &[i16]) -> Result<()> {
        for r in resps {
            let rsp = match *r {
                CopyResp::Data {
                    id,
                    op,
                    off,
                    len,
                    flags,
                } => match statuses.get(op).copied() {
                    Some(0) => RxResponse::data(id, off, flags, len)?,
                    st => {
                        self.refuse(st.map_or("copy_missing", grant_reason));
                        failed_part(id, flags)
                    }
                },
                CopyResp::Extra(x) => x.to_rx_slot(),
                CopyResp::Refused { id, flags, why } => {
                    self.refuse(why);
                    failed_part(id, flags)
                }
            };
            if let Some(rx) = self.rx.as_mut() {
                rx.push_response(&rsp)?;
            }
        }
        Ok(())
    }

    /// Xen 2.0 receive: one packet per page, whose ownership moves to the guest.
    fn flush_rx_flip(&mut self, hv: &mut HvClient) -> Result<()> {
        self.with_slab(|nb, slab| nb.flip_from(slab, hv))
    }

    fn flip_from(&mut self, slab: &mut FrameSlab, hv: &mut HvClient) -> Result<()> {
        let mut flips = std::mem::take(&mut self.rx_flips);
        let mut resps = std::mem::take(&mut self.rx_resps);
        flips.clear();
        resps.clear();
        let most = (RING as usize).min(hv.max_transfers());
        let r = self
            .stage_flips(slab, &mut flips, &mut resps, most)
            .and_then(|()| self.flip_and_answer(hv, &flips, &resps));
        self.rx_flips = flips;
        self.rx_resps = resps;
        r
    }

    /// Puts each queued packet, while the guest has posted buffers (at
    /// most `most`), alone on a staging page of its own, zero-padded: the
    /// whole page leaves the driver domain, so nothing but this packet may
    /// be on it (Menon 2006 §4.2). Notes the flip and the response it earns.
    fn stage_flips(
        &mut self,
        slab: &mut FrameSlab,
        flips: &mut Vec<Flip>,
        resps: &mut Vec<CopyResp>,
        most: usize,
    ) -> Result<()> {
        let Some(rx) = self.rx.as_mut() else {
            return Ok(());
        };
        let mut avail = rx.unconsumed_requests()?;
        while avail > 0 && flips.len() < most {
            let Some(pkt) = slab.front() else {
                break;
            };
            if pkt.data.len() > PAGE_SIZE {
                slab.pop_front();
                self.counters.drop("too_big_for_flip");
                continue;
            }
            // A flipped page carries no partial checksum: the guest has no
            // offloads in this mode, so one left partial is completed here.
            let Ok(csum) = offload::complete_checksum_in(pkt.data, pkt.csum) else {
                slab.pop_front();
                self.counters.drop("bad_partial_checksum");
                continue;
            };
            let Some(rx) = self.rx.as_mut() else { break };
            let Some(req) = rx.next_request()? else { break };
            avail -= 1;
            // Its own staging frame, inside its pool by construction.
            let frame = self.rx_base + flips.len() as u32;
            let (base, len) = (Pfn::new(frame).base(), pkt.data.len());
            self.pool.write_bytes(base, pkt.data);
            slab.pop_front();
            self.pool.fill(base + len, PAGE_SIZE - len, 0);
            let flags = if csum.rx_flags().contains(RxFlags::DATA_VALIDATED) {
                RxFlags::DATA_VALIDATED
            } else {
                RxFlags::EMPTY
            };
            resps.push(CopyResp::Data {
                id: req.id,
                op: flips.len(),
                off: 0,
                len: len as u16,
                flags,
            });
            flips.push(Flip {
                frame,
                gref: req.gref,
            });
        }
        Ok(())
    }

    /// Flips a staged batch's pages to the guest with one transfer
    /// hypercall, then answers each request with its flip's status.
    fn flip_and_answer(
        &mut self,
        hv: &mut HvClient,
        flips: &[Flip],
        resps: &[CopyResp],
    ) -> Result<()> {
        if flips.is_empty() {
            return Ok(());
        }
        self.counters.batches += 1;
        self.counters.grant("transfer", flips.len() as u64);
        let mut statuses = std::mem::take(&mut self.rx_statuses);
        let r = hv.transfer_batch(self.guest, flips, &mut statuses);
        let given = statuses.iter().filter(|s| **s == 0).count();
        self.take_replacements(flips.len(), given);
        let r = r.map_err(Into::into).and_then(|()| {
            for r in resps {
                if let CopyResp::Data { op, len, .. } = *r {
                    if statuses.get(op) == Some(&0) {
                        self.count_rx(usize::from(len));
                    }
                }
            }
            self.answer_rx_copies(resps, &statuses)
        });
        self.rx_statuses = statuses;
        r
    }

    /// Maps replacement pages in for the `n` staging frames a flip batch
    /// used, with one call, as Xen 2.0's netback took a batch's
    /// replacement pages from the hypervisor (Menon 2006 §4.2). Counted as
    /// the grant operation `replace`, a page per flip that went (`given`);
    /// a failure (the host short of memory) as `replace_failed`, and the
    /// next write to such a frame faults its page in instead. hv frees a
    /// flipped page only on 4 KiB pages; on huge pages it is still there.
    fn take_replacements(&mut self, n: usize, given: usize) {
        let off = Pfn::new(self.rx_base).base();
        match self.pool.populate_pages(off, n * PAGE_SIZE) {
            Ok(()) => self.counters.grant("replace", given as u64),
            Err(_) => self.counters.grant("replace_failed", n as u64),
        }
    }

    /// Counts a frame delivered to the guest.
    pub(super) fn count_rx(&mut self, len: usize) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += len as u64;
    }

    /// Where RX buffers netback fills are mapped: the guest's pool under
    /// the new grant mechanism, the vif's own staging frames otherwise.
    pub(super) fn rx_map(&self) -> &sys::Mapping {
        match &self.ngm {
            Some(v) => v.pool(),
            None => &self.pool,
        }
    }

    /// Packets waiting for guest buffers.
    pub fn rx_queued(&self) -> usize {
        self.rx_slab.len()
    }
}
