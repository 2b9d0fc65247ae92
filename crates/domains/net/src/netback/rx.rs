//! netback RX, bridge → guest. Under the new grant mechanism a frame is
//! copied once, straight into the buffer the guest posted, through the
//! mapping of the guest's pool (and, between two guests, straight from the
//! sender's TX buffer: one copy in all). A frame that finds no posted buffer
//! waits in a bounded queue. Under `hv-copy` hv copies each batch from
//! staging frames; in the Xen 2.0 baseline each page is flipped.

use super::{
    grant_reason, hv_reason, proto, Netback, NetbackError, Result, RING, RX_QUEUE, SLOT_BUDGET,
};
use crate::offload;
use crate::packet::{FrameRef, Packet};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::netif::{ExtraInfo, NetifStatus, RxFlags, RxResponse};
use abi::{Pfn, SharedMemory};
use hypercall::trace::{self, DomainEvent};
use hypercall::HvClient;
use sys::PAGE_SIZE;

/// One RX response of a copy batch: (request id, copy op, length, flags)
/// per data slot, with extras as GSO info.
pub(super) enum CopyResp {
    Data {
        id: u16,
        op: usize,
        len: u16,
        flags: RxFlags,
    },
    Extra(ExtraInfo),
}

impl Netback {
    /// Delivers a frame to the guest: at once into its posted buffers under
    /// the new grant mechanism when its NIC takes the frame as it is, through
    /// the queue otherwise. Responses are published by [`Netback::flush_rx`].
    pub fn deliver(&mut self, f: &FrameRef<'_>) {
        if !self.connected {
            return;
        }
        if self.ngm.is_some()
            && self.rx_queue.is_empty()
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
        // A guest that takes nothing costs a counter, not a copy.
        if self.rx_queue.len() >= RX_QUEUE {
            self.counters.drop("rx_queue_full");
            return;
        }
        self.enqueue_rx(f.to_packet());
    }

    /// Copies `f` into the guest's posted RX buffers and queues the
    /// responses. False (nothing consumed) when too few buffers are posted.
    fn rx_direct(&mut self, f: &FrameRef<'_>) -> Result<bool> {
        let (Some(view), Some(rx)) = (self.ngm.as_ref(), self.rx.as_mut()) else {
            return Ok(false);
        };
        let chunks = f.len.div_ceil(PAGE_SIZE).max(1);
        let need = chunks + usize::from(f.gso.is_some());
        if (rx.unconsumed_requests()? as usize) < need {
            return Ok(false);
        }
        let mut flags = f.csum.rx_flags();
        if f.gso.is_some() {
            flags |= RxFlags::EXTRA_INFO;
        }
        let mut refused = None;
        for i in 0..chunks {
            let Some(req) = rx.next_request()? else {
                return Err(NetbackError::Protocol("RX requests vanished".into()));
            };
            let len = (f.len - i * PAGE_SIZE).min(PAGE_SIZE);
            let more = if i + 1 < chunks {
                RxFlags::MORE_DATA
            } else {
                RxFlags::EMPTY
            };
            let fl = if i == 0 { flags | more } else { more };
            let rsp = match view.acquire(req.gref, true) {
                Ok(frame) => {
                    let copied = f.copy_into(i * PAGE_SIZE, len, view.pool(), frame.base());
                    view.release(req.gref);
                    match copied {
                        Ok(()) => RxResponse::data(req.id, 0, fl, len as u16)?,
                        Err(e) => {
                            refused = Some(e.reason());
                            RxResponse {
                                flags: fl,
                                ..RxResponse::failed(req.id, NetifStatus::Error)
                            }
                        }
                    }
                }
                Err(r) => {
                    refused = Some(r.reason());
                    // Keep MORE_DATA / EXTRA_INFO so the guest can still
                    // walk the chain (and drop the packet).
                    RxResponse {
                        flags: fl,
                        ..RxResponse::failed(req.id, NetifStatus::Error)
                    }
                }
            };
            rx.push_response(&rsp)?;
            if i == 0 {
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
            None => {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += f.len as u64;
            }
        }
        Ok(true)
    }

    /// Moves queued frames into posted buffers with the new grant mechanism.
    fn flush_rx_ngm(&mut self) -> Result<()> {
        while let Some(p) = self.rx_queue.pop_front() {
            if !self.rx_direct(&FrameRef::private(&p.data, p.csum, p.gso))? {
                self.rx_queue.push_front(p);
                break;
            }
        }
        Ok(())
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

    /// Publishes what [`Netback::deliver`] wrote and moves queued frames
    /// into the buffers the guest has posted.
    pub fn flush_rx(&mut self, hv: &mut HvClient) -> Result<()> {
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
            if !self.connected || self.rx_queue.is_empty() {
                break;
            }
            let (t0, queued) = (trace::now(), self.rx_queue.len());
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
                break;
            }
        }
        self.enforce(hv, None);
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
        let mut ops: Vec<GrantCopy> = Vec::new();
        let mut resps: Vec<CopyResp> = Vec::new();
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
            let mut flags = pkt.csum.rx_flags();
            if pkt.gso.is_some() {
                flags |= RxFlags::EXTRA_INFO;
            }
            for (i, chunk) in pkt.data.chunks(PAGE_SIZE).enumerate() {
                let Some(req) = rx.next_request()? else {
                    return Err(proto("RX requests vanished"));
                };
                // One of this vif's own staging frames (rx_base + at most
                // SLOT_BUDGET), inside its pool by construction.
                let frame = self.rx_base + ops.len() as u32;
                self.pool.write_bytes(Pfn::new(frame).base(), chunk);
                let more = if (i + 1) < chunks {
                    RxFlags::MORE_DATA
                } else {
                    RxFlags::EMPTY
                };
                let f = if i == 0 { flags | more } else { more };
                resps.push(CopyResp::Data {
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
                        resps.push(CopyResp::Extra(g.to_extra()));
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
        self.answer_rx_copies(resps, &statuses)
    }

    /// Pushes the RX responses of a copy batch: each data slot succeeds or
    /// fails with its copy's status, extras carry their GSO info.
    pub(super) fn answer_rx_copies(
        &mut self,
        resps: impl IntoIterator<Item = CopyResp>,
        statuses: &[i16],
    ) -> Result<()> {
        for r in resps {
            let rsp = match r {
                CopyResp::Data { id, op, len, flags } => match statuses.get(op).copied() {
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
                CopyResp::Extra(x) => x.to_rx_slot(),
            };
            if let Some(rx) = self.rx.as_mut() {
                rx.push_response(&rsp)?;
            }
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
            let Some(mut pkt) = self.rx_queue.pop_front() else {
                break;
            };
            if pkt.data.len() > PAGE_SIZE {
                self.counters.drop("too_big_for_flip");
                continue;
            }
            // A flipped page carries no partial checksum: the guest has no
            // offloads in this mode, so one left partial is completed here.
            if crate::offload::complete_checksum(&mut pkt).is_err() {
                self.counters.drop("bad_partial_checksum");
                continue;
            }
            let Some(rx) = self.rx.as_mut() else { break };
            let Some(req) = rx.next_request()? else { break };
            avail -= 1;
            let frame = self.rx_base + (n % RING);
            n += 1;
            // The whole page leaves the driver domain: nothing but this packet
            // (zero padding) may be on it (Menon 2006 §4.2).
            // Its own staging frame, inside its pool by construction.
            let base = Pfn::new(frame).base();
            self.pool.write_bytes(base, &pkt.data);
            self.pool
                .fill(base + pkt.data.len(), PAGE_SIZE - pkt.data.len(), 0);
            let flags = if pkt.csum.rx_flags().contains(RxFlags::DATA_VALIDATED) {
                RxFlags::DATA_VALIDATED
            } else {
                RxFlags::EMPTY
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
        Ok(())
    }

    /// Packets waiting for guest buffers.
    pub fn rx_queued(&self) -> usize {
        self.rx_queue.len()
    }
}
