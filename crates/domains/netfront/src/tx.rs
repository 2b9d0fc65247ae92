//! netfront's transmit side: frames from the TAP into TX buffers of the
//! pool, requests on the TX ring, completions back.

use crate::connect::frame_off;
use crate::{
    setup, Grants, Mem, Netfront, Result, Unsent, MAX_DATA_SLOTS, MAX_FRAME, MAX_SLOTS, TX_BUF_BASE,
};
use abi::netif::{TxFlags, TxRequest, TxResponse, NETIF_RSP_NULL, NETIF_RSP_OKAY};
use abi::ring::FrontRing;
use abi::SharedMemory;
use frame::offload;
use frame::packet::{Csum, Gso, Packet};
use hypercall::ngm_client::TrackError;
use hypercall::trace::{self, DomainEvent};
use hypercall::{EventChannel, HvClient};
use sys::PAGE_SIZE;

impl Netfront {
    pub(crate) fn tx_frame(&self, id: u16) -> u32 {
        self.base + TX_BUF_BASE + u32::from(id)
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

    pub(crate) fn count_tx_batch(&mut self) {
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

    /// The TX event channel, for tests that play a hostile frontend.
    #[doc(hidden)]
    pub fn tx_channel(&self) -> &EventChannel {
        &self.tx_evt
    }

    /// A packet from private memory: shaped for what the backend takes,
    /// then copied into TX buffers.
    pub(crate) fn queue_tx(&mut self, hv: &mut HvClient, pkt: Packet) -> Result<()> {
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
    pub(crate) fn queue_frames(
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
        let mut kept = Unsent {
            seq: self.tx_seq,
            ids: [0; MAX_DATA_SLOTS],
            slots: ids.len() as u8,
            len: len as u32,
            csum,
            gso,
        };
        kept.ids[..ids.len()].copy_from_slice(ids);
        self.tx_frames[ids[0] as usize] = Some(kept);
        self.tx_seq += 1;
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        Ok(())
    }

    /// The frames this channel's backend was given and never answered, in
    /// the order they were queued (taken once: the channel forgets them).
    pub(crate) fn take_unsent(&mut self) -> Vec<Unsent> {
        let mut v: Vec<Unsent> = self.tx_frames.iter_mut().filter_map(Option::take).collect();
        v.sort_by_key(|u| u.seq);
        v
    }

    /// Queues `unsent`, frames an earlier channel's backend never took,
    /// from the same TX buffers (same pool, same ids), before anything new:
    /// their ids leave the free list first. A frame this backend cannot
    /// take as it is (other offloads) is dropped and counted.
    pub(crate) fn requeue(
        &mut self,
        hv: &mut HvClient,
        unsent: &[Unsent],
        same_offloads: bool,
    ) -> Result<usize> {
        let mut sent = 0;
        for u in unsent {
            let ids = &u.ids[..usize::from(u.slots)];
            self.tx_free.retain(|id| !ids.contains(id));
            let fits = self.tx.free_requests() >= MAX_SLOTS;
            if !same_offloads || !fits || ids.iter().any(|&id| self.tx_slots[id as usize].is_some())
            {
                self.tx_free.extend_from_slice(ids);
                self.counters.drop("unsent_after_reconnect");
                continue;
            }
            self.queue_frames(hv, ids, u.len as usize, u.csum, u.gso)?;
            sent += 1;
        }
        if sent > 0 {
            self.flush()?;
        }
        Ok(sent)
    }

    /// Grants the backend access to one of our buffers for one use.
    pub(crate) fn grant_buffer(
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
    pub(crate) fn end_grant(&mut self, hv: &mut HvClient, gref: u32) -> bool {
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
    pub(crate) fn complete_tx(&mut self, hv: &mut HvClient) -> Result<()> {
        while let Some(rsp) = self.tx.next_response()? {
            if rsp.status == NETIF_RSP_NULL {
                continue;
            }
            if let Some(f) = self.tx_frames.get_mut(rsp.id as usize) {
                *f = None;
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
    pub(crate) fn arm_tx_completions(&mut self, hv: &mut HvClient) -> Result<()> {
        while self.tx.final_check_for_responses()? {
            self.complete_tx(hv)?;
        }
        Ok(())
    }
}
