//! netback's side of a dedicated queue (Ram thesis 3.3): the VMQ
//! virtualization-layer API ([`VmqLayer`]). The queue's socket receives
//! each frame straight into buffers netback arms from the requests the
//! guest posted:
//!
//! - under the new grant mechanism, the guest's own buffers, through the
//!   mapping of its pool, each grant acquired writable while armed (hv then
//!   refuses to revoke it): one copy per packet, by the kernel, none by
//!   netback, and no bridge;
//! - under `hv-copy`, the vif's own staging frames, which hv's grant copy
//!   then moves into the guest's buffers as for any frame: two copies.
//!
//! Responses follow the order the guest posted its buffers in (netfront,
//! like Linux's, checks it). Requests are read ahead without being
//! consumed; a frame consumes exactly the buffers it filled, and the
//! second request is kept for the GSO extra-info slot, so its buffer is
//! never armed for data. A frame the guest cannot take as it is (its
//! offloads, or data over several buffers without GSO) is copied out and
//! takes the shared path, whose queue consumes the same requests later.

use super::rx::{buffer_offset, parts, stage_to_guest, CopyResp};
use super::{Netback, Result, SLOT_BUDGET};
use crate::port::vmq::{Armed, Landed, VmqLayer, MAX_ARMED, MAX_FRAME};
use abi::grant::GrantCopy;
use abi::netif::{NetifStatus, RxRequest, RxResponse};
use abi::{Pfn, SharedMemory};
use frame::packet::{self, Csum, FrameRef, Gso, VNET_HDR_LEN};
use hypercall::ngm_client::NgmView;
use hypercall::HvClient;

/// What netback keeps for a vif with a dedicated queue.
pub(crate) struct MqState {
    /// The armed requests, (id, gref), read once: ring positions `req_cons`
    /// + 0, 1, ... ; position 1 is kept for a GSO extra-info slot.
    reqs: [(u16, u32); MAX_ARMED],
    /// The buffer of each data part: positions 0, 2, 3, ...
    ranges: [(usize, usize); MAX_ARMED],
    /// The offset in its page of each data part's buffer (0, or 2048 with
    /// half-page buffers), which its response carries.
    offs: [u16; MAX_ARMED],
    /// Requests armed (0: none).
    armed: usize,
    /// Armed as a batch: one buffer per frame, at every position.
    batch: bool,
    /// Grants acquired for the armed requests (new grant mechanism).
    acquired: usize,
    /// hv-copy: staging frames filled and not yet copied, the copies, and
    /// their responses (reused).
    staged: usize,
    ops: Vec<GrantCopy>,
    resps: Vec<CopyResp>,
    /// A frame copied out for the shared path (allocated once).
    private: Vec<u8>,
    /// Frames the queue put straight where they go.
    pub rx_direct_packets: u64,
    /// Frames the queue received that took the shared path.
    pub rx_fallback_packets: u64,
    /// Frames of a batch copied to the shared path behind one that did
    /// not fit its buffer (or needed an extra slot), so as to answer the
    /// buffers in order.
    pub rx_spilled_packets: u64,
}

impl MqState {
    fn new() -> MqState {
        MqState {
            reqs: [(0, 0); MAX_ARMED],
            ranges: [(0, 0); MAX_ARMED],
            offs: [0; MAX_ARMED],
            armed: 0,
            batch: false,
            acquired: 0,
            staged: 0,
            ops: Vec::with_capacity(SLOT_BUDGET),
            resps: Vec::with_capacity(SLOT_BUDGET),
            private: vec![0; MAX_FRAME],
            rx_direct_packets: 0,
            rx_fallback_packets: 0,
            rx_spilled_packets: 0,
        }
    }
}

/// The ring position of data part `i` (position 1 is the extra slot's).
fn position(i: usize) -> usize {
    if i == 0 {
        0
    } else {
        i + 1
    }
}

impl MqState {
    /// The ring position of data part `i` of what is armed.
    fn req_at(&self, i: usize) -> usize {
        if self.batch {
            i
        } else {
            position(i)
        }
    }
}

/// Arms the buffer of request `req` as data part `i`: where it is in `map`
/// (the guest's pool under the new grant mechanism, its grant acquired
/// writable; otherwise the vif's staging frame `staged + i`) and its
/// offset in the guest's page, or why it is refused.
fn arm_buffer(
    ngm: Option<&NgmView>,
    rx_base: u32,
    staged: usize,
    half: bool,
    req: &RxRequest,
    i: usize,
) -> std::result::Result<(usize, u16), &'static str> {
    let off = buffer_offset(half, req)?;
    match ngm {
        Some(view) => match view.acquire(req.gref, true) {
            Ok(frame) => Ok((frame.base() + usize::from(off), off)),
            Err(r) => Err(r.reason()),
        },
        // Staging frames are the vif's own: their copies land at the
        // buffer's offset in the guest's page.
        None => Ok((Pfn::new(rx_base + (staged + i) as u32).base(), off)),
    }
}

/// Why driver-domain LRO is off while a vif has a dedicated queue. The
/// thesis's "LRO DD" with multi-queue had the NIC's driver coalesce before
/// it placed frames; here the queue's socket places each frame in the
/// guest's buffers and netback never reads it, so coalescing would mean
/// copying every frame out and back: the whole saving of the queue.
pub(crate) const LRO_QUEUE_BYPASS: &str =
    "a dedicated queue places the vif's frames in the guest's buffers unread";

impl Netback {
    /// Starts serving a dedicated queue for this vif (allocates its state);
    /// driver-domain LRO no longer sees its frames ([`LRO_QUEUE_BYPASS`]).
    pub fn start_queue(&mut self) {
        if self.mq.is_none() {
            self.mq = Some(Box::new(MqState::new()));
        }
        self.lro_bypassed(LRO_QUEUE_BYPASS);
    }

    /// Stops: whatever is armed goes back unconsumed, and LRO sees the
    /// vif's frames again.
    pub fn stop_queue(&mut self) {
        self.free_skb();
        self.mq = None;
        self.lro_resume(LRO_QUEUE_BYPASS);
    }

    /// Frames the queue put straight into the guest's buffers (NGM) or its
    /// staging frames (hv-copy), frames it handed the shared path because
    /// the guest cannot take them as they are, and frames of a batch it
    /// spilled there.
    pub fn queue_counts(&self) -> (u64, u64, u64) {
        self.mq.as_ref().map_or((0, 0, 0), |m| {
            (
                m.rx_direct_packets,
                m.rx_fallback_packets,
                m.rx_spilled_packets,
            )
        })
    }

    /// The vif's MAC (its queue takes the frames to it).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Whether the queue could arm buffers now; if not, the guest is asked
    /// to notify when it posts more (the loop listens to the queue again
    /// then). While frames wait on the shared path, they go first.
    pub fn queue_can_arm(&mut self) -> bool {
        let need = self.armed_need();
        if !self.connected || !self.rx_slab.is_empty() {
            return false;
        }
        let staged = self.mq.as_ref().map_or(0, |m| m.staged);
        if self.ngm.is_none() && staged + need > SLOT_BUDGET {
            return false;
        }
        let Some(rx) = self.rx.as_mut() else {
            return false;
        };
        rx.final_check_for_n_requests(need as u32).unwrap_or(false)
    }

    /// Requests one armed frame takes at most: its data and the extra slot.
    fn armed_need(&self) -> usize {
        MAX_FRAME.div_ceil(self.rx_chunk()) + 1
    }

    /// Reads the requests ahead and arms their buffers; the number armed
    /// (0: not enough posted, or a bad grant at the head, answered).
    fn arm(&mut self) -> usize {
        let need = self.armed_need().min(MAX_ARMED);
        let Some((posted, room)) = self.arm_room(false) else {
            return 0;
        };
        if posted < need || need > room {
            return 0; // too few posted, or the copies pending go first (flush_rx)
        }
        // Position 1 is kept for the GSO extra slot, whose buffer is never
        // written: data part 0 is position 0, part i > 0 position i + 1.
        let bad = self.arm_window(need, |k| match k {
            0 => Some(0),
            1 => None,
            k => Some(k - 1),
        });
        self.armed_or_refused(bad)
    }

    /// Arms up to `max` posted buffers, one per frame of a batch; the
    /// number armed (0: none posted, or a bad buffer at the head, answered).
    fn arm_batch(&mut self, max: usize) -> usize {
        let Some((posted, room)) = self.arm_room(true) else {
            return 0;
        };
        let bad = self.arm_window(max.min(posted).min(MAX_ARMED).min(room), Some);
        self.armed_or_refused(bad)
    }

    /// Before arming one frame's buffers or a batch's (`batch`): the
    /// requests posted, and the staging frames left under hv-copy (no
    /// bound under the new grant mechanism). None if there is no queue or
    /// the ring overflowed (flagged).
    fn arm_room(&mut self, batch: bool) -> Option<(usize, usize)> {
        let (Some(rx), Some(st)) = (self.rx.as_mut(), self.mq.as_mut()) else {
            return None;
        };
        let Ok(posted) = rx.unconsumed_requests() else {
            self.rx_overflow = true;
            return None;
        };
        st.batch = batch;
        let room = match self.ngm {
            Some(_) => usize::MAX,
            None => SLOT_BUDGET.saturating_sub(st.staged),
        };
        Some((posted as usize, room))
    }

    /// Peeks the first `n` posted requests and arms their buffers, ring
    /// position `k` as data part `part(k)` (None: a position whose buffer
    /// is never written). The refusal that cut the window short, if any,
    /// with its position.
    fn arm_window(
        &mut self,
        n: usize,
        part: fn(usize) -> Option<usize>,
    ) -> Option<(usize, &'static str)> {
        let (chunk, half) = (self.rx_chunk(), self.rx_half);
        let staging = self.ngm.is_none();
        let (Some(rx), Some(st)) = (self.rx.as_mut(), self.mq.as_mut()) else {
            return None;
        };
        for k in 0..n {
            let Ok(Some(req)) = rx.peek_nth(k as u32) else {
                break;
            };
            st.reqs[k] = (req.id, req.gref);
            let Some(i) = part(k) else {
                continue;
            };
            match arm_buffer(self.ngm.as_ref(), self.rx_base, st.staged, half, &req, i) {
                Ok((base, off)) => {
                    st.ranges[i] = (base, chunk);
                    st.offs[i] = off;
                }
                Err(r) => return Some((k, r)),
            }
            st.armed = k + 1;
            st.acquired = if staging { 0 } else { i + 1 };
        }
        None
    }

    /// After arming: the number armed, the first request refused (`bad`
    /// at ring position 0) answered, or the armed ones cut short before a
    /// later bad one (which is answered once it reaches the head).
    fn armed_or_refused(&mut self, bad: Option<(usize, &'static str)>) -> usize {
        let Some(st) = self.mq.as_mut() else {
            return 0;
        };
        match bad {
            Some((0, reason)) => {
                st.armed = 0;
                self.answer_bad_head(reason);
                0
            }
            Some((k, _)) => {
                st.armed = k; // the frame may be cut short: counted then
                k
            }
            None => st.armed,
        }
    }

    /// The request at the head names a grant netback may not use: it gets
    /// an error response, as on the shared path, and is refused.
    fn answer_bad_head(&mut self, reason: &'static str) {
        let Some(rx) = self.rx.as_mut() else { return };
        let Some(st) = self.mq.as_ref() else { return };
        let id = st.reqs[0].0;
        if rx.consume(1)
            && rx
                .push_response(&RxResponse::failed(id, NetifStatus::Error))
                .is_ok()
        {
            self.rx_unpublished += 1;
        }
        self.refuse(reason);
    }

    /// Ends the uses of the armed grants and forgets the armed requests.
    fn disarm(&mut self) {
        if let Some(mut st) = self.mq.take() {
            self.disarm_state(&mut st);
            self.mq = Some(st);
        }
    }

    /// Data parts armed.
    fn data_parts(st: &MqState) -> usize {
        if st.batch {
            return st.armed;
        }
        st.armed.saturating_sub(1).max(usize::from(st.armed > 0))
    }

    /// Takes a frame of `len` bytes the queue put in the armed buffers.
    fn take_frame(&mut self, hdr: &[u8; VNET_HDR_LEN], len: usize) -> Result<()> {
        let Ok((csum, gso)) = packet::parse_vnet_hdr(hdr, len) else {
            self.counters.drop("queue_bad_vnet_hdr");
            return Ok(());
        };
        let chunk = self.rx_chunk();
        let chunks = len.div_ceil(chunk).max(1);
        let Some(st) = self.mq.as_ref() else {
            return Ok(());
        };
        // Armed buffers may hold more than MAX_FRAME (17 whole pages), but
        // no frame netback takes is longer (a BIG TCP uplink's could be).
        let fits =
            len <= MAX_FRAME && chunks <= Self::data_parts(st) && (gso.is_none() || st.armed >= 2);
        if !fits {
            self.counters.drop("queue_frame_too_long");
            return Ok(());
        }
        let in_place = self.guest_caps.passes_as_is(csum, gso) && (gso.is_some() || chunks == 1);
        if !in_place {
            return self.hand_to_shared_path(len, csum, gso);
        }
        if self.ngm.is_some() {
            self.respond_in_place(len, chunks, csum, gso, 0)
        } else {
            self.stage_copies(len, chunks, csum, gso, 0);
            Ok(())
        }
    }

    /// New grant mechanism: the frame is in the guest's buffers already,
    /// from data part `at` on; consume their requests and answer them in
    /// order.
    fn respond_in_place(
        &mut self,
        len: usize,
        chunks: usize,
        csum: Csum,
        gso: Option<Gso>,
        at: usize,
    ) -> Result<()> {
        let chunk = self.rx_chunk();
        let (Some(rx), Some(st)) = (self.rx.as_mut(), self.mq.as_mut()) else {
            return Ok(());
        };
        let used = chunks + usize::from(gso.is_some());
        if !rx.consume(used as u32) {
            return Err(super::proto("RX requests vanished"));
        }
        for part in parts(len, chunk, csum, gso) {
            let id = st.reqs[st.req_at(at + part.i)].0;
            let off = st.offs[at + part.i];
            rx.push_response(&RxResponse::data(id, off, part.flags, part.len as u16)?)?;
            if part.i == 0 {
                if let Some(g) = gso {
                    rx.push_response(&g.to_extra().to_rx_slot())?;
                }
            }
        }
        st.rx_direct_packets += 1;
        self.rx_unpublished += 1;
        self.count_rx(len);
        Ok(())
    }

    /// hv-copy: the frame is in staging frames, from data part `at` on;
    /// consume the requests now, and let hv copy at the next flush.
    fn stage_copies(&mut self, len: usize, chunks: usize, csum: Csum, gso: Option<Gso>, at: usize) {
        let chunk = self.rx_chunk();
        let guest = self.guest;
        let (Some(rx), Some(st)) = (self.rx.as_mut(), self.mq.as_mut()) else {
            return;
        };
        let used = chunks + usize::from(gso.is_some());
        if !rx.consume(used as u32) {
            self.rx_overflow = true;
            return;
        }
        for part in parts(len, chunk, csum, gso) {
            let (id, gref) = st.reqs[st.req_at(at + part.i)];
            let off = st.offs[at + part.i];
            st.resps.push(CopyResp::Data {
                id,
                op: st.ops.len(),
                off,
                len: part.len as u16,
                flags: part.flags,
            });
            let frame = self.rx_base + (st.staged + part.i) as u32;
            st.ops
                .push(stage_to_guest(frame, guest, gref, off, part.len));
            if part.i == 0 {
                if let Some(g) = gso {
                    st.resps.push(CopyResp::Extra(g.to_extra()));
                }
            }
        }
        st.staged += chunks;
        st.rx_direct_packets += 1;
        self.count_rx(len);
    }

    /// A frame the guest cannot take as it is: copied out of the armed
    /// buffers, it takes the shared path (shaped, queued, delivered in
    /// order into the same requests later).
    fn hand_to_shared_path(&mut self, len: usize, csum: Csum, gso: Option<Gso>) -> Result<()> {
        let Some(mut st) = self.mq.take() else {
            return Ok(());
        };
        let map = self.rx_map();
        let mut at = 0;
        for i in 0..Self::data_parts(&st) {
            let (off, n) = st.ranges[i];
            let n = n.min(len - at);
            map.read_bytes(off, &mut st.private[at..at + n]);
            at += n;
            if at == len {
                break;
            }
        }
        st.rx_fallback_packets += 1;
        self.disarm_state(&mut st);
        self.deliver(&FrameRef::private(&st.private[..len], csum, gso));
        self.mq = Some(st);
        Ok(())
    }

    /// [`Netback::disarm`] for a state taken out of the vif.
    fn disarm_state(&mut self, st: &mut MqState) {
        if let Some(view) = &self.ngm {
            for i in 0..st.acquired {
                view.release(st.reqs[st.req_at(i)].1);
            }
        }
        st.acquired = 0;
        st.armed = 0;
    }

    /// hv-copy: has hv copy the frames staged since the last flush and
    /// answers them (before any other response: they consumed their
    /// requests first). Called at the start of every RX flush.
    pub(super) fn flush_queue_copies(&mut self, hv: &mut HvClient) -> Result<()> {
        let Some(st) = self.mq.as_mut() else {
            return Ok(());
        };
        if st.ops.is_empty() {
            return Ok(());
        }
        st.staged = 0;
        let (mut ops, mut resps) = (std::mem::take(&mut st.ops), std::mem::take(&mut st.resps));
        let r = self.copy_and_answer(hv, &ops, &resps);
        ops.clear();
        resps.clear();
        if let Some(st) = self.mq.as_mut() {
            (st.ops, st.resps) = (ops, resps);
        }
        self.rx_unpublished += 1;
        r
    }
}

impl Netback {
    /// Whether the queue may arm buffers: never past frames waiting on the
    /// slow path, which take the posted buffers first.
    fn may_arm(&self) -> bool {
        self.connected && self.rx_slab.is_empty() && self.mq.is_some()
    }

    /// What is armed, for the queue.
    fn armed(&self) -> Option<Armed<'_>> {
        let st = self.mq.as_ref()?;
        Some(Armed {
            map: self.rx_map(),
            ranges: &st.ranges[..Self::data_parts(st)],
        })
    }

    /// Batch frame `k` (ring position `k`), if it can be answered in
    /// place: it fits its buffer, needs no extra slot, and the guest takes
    /// it as it is. Responded (or staged for hv's copy) then.
    fn batch_in_place(
        &mut self,
        k: usize,
        hdr: &[u8; VNET_HDR_LEN],
        len: std::result::Result<usize, usize>,
    ) -> bool {
        let Ok(len) = len else { return false };
        if len > self.rx_chunk() {
            return false;
        }
        let Ok((csum, None)) = packet::parse_vnet_hdr(hdr, len) else {
            return false;
        };
        if !self.guest_caps.passes_as_is(csum, None) {
            return false;
        }
        if self.ngm.is_some() {
            if self.respond_in_place(len, 1, csum, None, k).is_err() {
                self.rx_overflow = true;
            }
        } else {
            self.stage_copies(len, 1, csum, None, k);
        }
        true
    }

    /// Batch frame `k`, after one that could not be answered in place:
    /// joined in its slot (its buffer's bytes copied in front of its
    /// overflow) and queued on the slow path, whose flush answers the
    /// buffers it landed in, which stay posted, in order.
    fn batch_to_slab(&mut self, k: usize, landed: &mut Landed<'_>) {
        let Ok(len) = landed.lens[k] else {
            self.counters.drop("queue_frame_too_long");
            return;
        };
        let Ok((csum, gso)) = packet::parse_vnet_hdr(&landed.hdrs[k], len) else {
            self.counters.drop("queue_bad_vnet_hdr");
            return;
        };
        let Some(st) = self.mq.as_mut() else { return };
        let (off, n) = st.ranges[k];
        if self.guest_caps.passes_as_is(csum, gso) {
            st.rx_spilled_packets += 1;
        } else {
            st.rx_fallback_packets += 1;
        }
        let slot = landed.slot(k);
        self.rx_map().read_bytes(off, &mut slot[..len.min(n)]);
        self.enqueue_rx(&FrameRef::private(&slot[..len], csum, gso));
    }
}

impl VmqLayer for Netback {
    fn alloc_skb(&mut self) -> Option<Armed<'_>> {
        if !self.may_arm() || self.arm() == 0 {
            return None;
        }
        self.armed()
    }

    fn alloc_batch(&mut self, max: usize) -> Option<Armed<'_>> {
        if !self.may_arm() || self.arm_batch(max) == 0 {
            return None;
        }
        self.armed()
    }

    /// Frames are answered in place, in order, until one cannot be; from
    /// it on, the rest of the batch waits on the slow path (never in
    /// place behind it, which would answer buffers out of order).
    fn netif_rx_batch(&mut self, landed: &mut Landed<'_>) {
        let mut k = 0;
        while k < landed.len() && self.batch_in_place(k, &landed.hdrs[k], landed.lens[k]) {
            k += 1;
        }
        for j in k..landed.len() {
            self.batch_to_slab(j, landed);
        }
        self.disarm();
    }

    fn free_skb(&mut self) {
        self.disarm();
    }

    fn netif_rx(&mut self, hdr: &[u8; VNET_HDR_LEN], len: std::result::Result<usize, usize>) {
        let r = match len {
            Ok(n) => self.take_frame(hdr, n),
            Err(_) => {
                self.counters.drop("queue_frame_too_long");
                Ok(())
            }
        };
        self.disarm();
        if r.is_err() {
            self.rx_overflow = true;
        }
    }
}
