//! netfront's receive side: posting buffers, reading responses, putting
//! frames together (with LRO, Ram thesis 5.1) and writing them to the TAP.

use crate::connect::frame_off;
use crate::tap::tap_write;
use crate::{
    Frag, Mem, Netfront, Result, RxFrame, HEAD, MAX_DATA_SLOTS, MAX_FRAME, RING, RX_BUF_BASE,
    RX_HALF, RX_MAX_DATA_SLOTS,
};
use abi::netif::{ExtraInfo, RxFlags, RxRequest, RxResponse, RxStatus};
use abi::ring::FrontRing;
use abi::SharedMemory;
use frame::packet::{self, Csum, FrameRef, Gso, GsoKind, Packet};
use hypercall::HvClient;
use sys::{IoPart, Mapping, Tap, PAGE_SIZE};

impl Netfront {
    /// The page of RX buffer `id` (two buffers a page with half pages).
    pub(crate) fn rx_frame(&self, id: u16) -> u32 {
        let page = if self.info.rx_half { id / 2 } else { id };
        self.base + RX_BUF_BASE + u32::from(page)
    }

    /// Where RX buffer `id` starts in its page.
    pub(crate) fn rx_buf_off(&self, id: u16) -> u16 {
        if self.info.rx_half {
            (id % 2) * RX_HALF
        } else {
            0
        }
    }

    /// The size of an RX buffer.
    pub(crate) fn rx_buf_len(&self) -> usize {
        if self.info.rx_half {
            usize::from(RX_HALF)
        } else {
            PAGE_SIZE
        }
    }

    /// Data slots of the largest frame received.
    pub(crate) fn rx_max_slots(&self) -> usize {
        if self.info.rx_half {
            RX_MAX_DATA_SLOTS
        } else {
            MAX_DATA_SLOTS
        }
    }

    /// Where a received fragment's bytes are in the pool.
    pub(crate) fn frag_off(&self, fr: &Frag) -> usize {
        frame_off(self.rx_frame(fr.id)) + fr.off as usize
    }

    /// Prefetches the header of the received frame after the `i`th (Ram
    /// thesis 5.2), so that it is in the cache when its turn comes.
    pub(crate) fn prefetch_after(&self, i: usize) {
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
    pub(crate) fn rx_placed(&mut self, rsp: &RxResponse) -> bool {
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

    /// The raw RX ring, for tests that play a hostile frontend.
    #[doc(hidden)]
    pub fn rx_ring(&mut self) -> &mut FrontRing<Mem, RxRequest, RxResponse> {
        &mut self.rx
    }

    /// Posts every free RX buffer to the backend.
    pub(crate) fn refill_rx(&mut self, hv: &mut HvClient) -> Result<()> {
        let mut posted = false;
        // Pages offered for flips, unmapped a run of adjacent ones at a time.
        let mut given: Option<Run> = None;
        let n = usize::try_from(self.rx.free_requests()).unwrap_or(usize::MAX);
        ascending_from_top(&mut self.rx_free, n);
        while self.rx.free_requests() > 0 {
            let Some(id) = self.rx_free.pop() else { break };
            let frame = self.rx_frame(id);
            let gref = if !self.info.copy_rx {
                self.counters.grant("grant", 1);
                let g = hv
                    .grants()
                    .accept_transfer(self.info.backend_id, frame)
                    .inspect_err(|_| self.rx_free.push(id))?;
                given = Some(self.offer_page(given, frame));
                g
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
        if let Some(r) = given {
            self.give_up_pages(r);
        }
        if posted && self.rx.push_requests_and_check_notify() {
            self.rx_channel().notify()?;
            self.counters.notifications_sent += 1;
        }
        Ok(())
    }

    /// Adds `frame`, just offered for a flip, to the run `given` of pages
    /// to unmap, unmapping that run first when `frame` does not adjoin it.
    fn offer_page(&mut self, given: Option<Run>, frame: u32) -> Run {
        let (run, done) = Run::grow(given, frame);
        if let Some(r) = done {
            self.give_up_pages(r);
        }
        run
    }

    /// Unmaps receive pages offered for flips from this guest's own
    /// address space, as Xen 2.0's netfront gave each posted page up, a
    /// batch in one multicall (Menon 2006 §4.2: a flip's remaps). Counted
    /// as the grant operation `unmap`, a page each. On a pool of huge pages
    /// it drops nothing (hugetlb) or splits the huge mapping (transparent),
    /// as a flip into a superpage broke it up under Xen.
    fn give_up_pages(&mut self, r: Run) {
        self.on_run(r, Mapping::unmap_pages, "unmap");
    }

    /// Applies `op` to the pages of run `r` with one call, counting a
    /// page of grant operation `name` each when it succeeds.
    fn on_run(
        &mut self,
        r: Run,
        op: fn(&Mapping, usize, usize) -> std::io::Result<()>,
        name: &'static str,
    ) {
        let n = r.hi - r.lo + 1;
        if op(&self.pool, frame_off(r.lo), n as usize * PAGE_SIZE).is_ok() {
            self.counters.grant(name, u64::from(n));
        }
    }

    /// Adds `frame`, a page just flipped to this guest, to the run of pages
    /// to map back in, mapping that run first when `frame` does not adjoin
    /// it.
    fn note_landed(&mut self, frame: u32) {
        let (run, done) = Run::grow(self.rx_landed.take(), frame);
        if let Some(r) = done {
            self.map_landed(r);
        }
        self.rx_landed = Some(run);
    }

    /// Maps a run of flipped pages into this guest's address space with
    /// one call before it reads them, as Xen 2.0's netfront remapped a
    /// batch's new pages with one multicall (Menon 2006 §4.2), instead of
    /// a fault per page. Counted as the grant operation `remap`, a page
    /// each; a page it could not map is faulted in when read.
    fn map_landed(&mut self, r: Run) {
        self.on_run(r, Mapping::populate_pages_for_reading, "remap");
    }

    /// Whether this frontend negotiated GSO of `kind` on receive.
    pub(crate) fn takes_gso(&self, kind: GsoKind) -> bool {
        match kind {
            GsoKind::TcpV4 => self.info.offload.tso4,
            GsoKind::TcpV6 => self.info.offload.tso6,
            GsoKind::UdpL4 => self.info.offload.uso,
        }
    }

    /// Ends the grant of RX buffer `id` after its response; whether the
    /// buffer holds what the backend put there.
    pub(crate) fn rx_grant_done(&mut self, hv: &mut HvClient, id: u16) -> bool {
        let Some(gref) = self.rx_slots.get_mut(id as usize).and_then(Option::take) else {
            self.counters.reject("rx_response_unknown_id");
            return false;
        };
        if !self.info.copy_rx {
            self.counters.grant("transfer_done", 1);
            let want = self.rx_frame(id);
            let landed = matches!(hv.grants().end_transfer(gref), Ok(Some(f)) if f == want);
            if landed {
                self.note_landed(want);
            }
            return landed;
        }
        self.end_grant(hv, gref)
    }

    /// Takes RX responses and records the frames they complete in `rx_ready`.
    pub(crate) fn receive(&mut self, hv: &mut HvClient) -> Result<()> {
        loop {
            loop {
                let posted = self.rx_ring_ids[(self.rx.rsp_cons() & (RING - 1)) as usize];
                let Some(rsp) = self.rx.next_response()? else {
                    break;
                };
                self.rx_response(hv, posted, rsp);
            }
            if let Some(r) = self.rx_landed.take() {
                self.map_landed(r);
            }
            if !self.rx.final_check_for_responses()? {
                return Ok(());
            }
        }
    }

    /// Takes one RX response; `posted` is the id of the request in its
    /// ring position.
    pub(crate) fn rx_response(&mut self, hv: &mut HvClient, posted: u16, rsp: RxResponse) {
        if self.rx_extra_pending {
            self.rx_extra(hv, posted, &rsp);
            return;
        }
        self.rx_data(hv, posted, &rsp);
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

    /// An extra-info slot: its request's buffer comes back unused, and a
    /// GSO extra describes the frame being put together.
    fn rx_extra(&mut self, hv: &mut HvClient, posted: u16, rsp: &RxResponse) {
        self.rx_extra_pending = false;
        if self.rx_grant_done(hv, posted) {
            self.rx_free.push(posted);
        }
        match ExtraInfo::from_rx_slot(rsp) {
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
    }

    /// A data slot: one more fragment of the frame being put together, or
    /// the frame marked bad (its buffer still comes back, if it is ours).
    fn rx_data(&mut self, hv: &mut HvClient, posted: u16, rsp: &RxResponse) {
        // Responses come in request order; anything else is a backend bug.
        let in_order = rsp.id == posted;
        if !in_order {
            self.counters.reject("rx_response_out_of_order");
        }
        let landed = self.rx_grant_done(hv, rsp.id);
        let placed = self.rx_placed(rsp);
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
        let frag = match (rsp.rx_status(), landed, rsp.check_fits_page()) {
            (Ok(RxStatus::Data(len)), true, Ok(()))
                if in_order
                    && placed
                    && f.len + len as usize <= MAX_FRAME
                    && f.count < max_slots =>
            {
                f.len += len as usize;
                Frag {
                    id: rsp.id,
                    off: rsp.offset,
                    len,
                }
            }
            _ => {
                f.bad = true;
                if !landed {
                    return;
                }
                Frag {
                    id: rsp.id,
                    off: 0,
                    len: 0,
                }
            }
        };
        f.count += 1;
        self.rx_frags.push(frag);
    }

    pub(crate) fn mark_bad(&mut self) {
        if let Some(f) = self.rx_cur.as_mut() {
            f.bad = true;
        }
    }

    /// The frame being assembled is complete.
    pub(crate) fn rx_finish(&mut self) {
        self.rx_data_done = false;
        self.rx_extra_pending = false;
        if let Some(f) = self.rx_cur.take() {
            self.rx_ready.push(f);
        }
    }

    /// Reads the start of a received frame (for its offload state).
    pub(crate) fn frame_head<'b>(&self, f: &RxFrame, buf: &'b mut [u8; HEAD]) -> &'b [u8] {
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
    pub(crate) fn rx_state(&mut self, f: &RxFrame, head: &[u8]) -> Option<Csum> {
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
    pub(crate) fn frame_to_packet(&mut self, f: &RxFrame) -> Option<Packet> {
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
    pub(crate) fn frame_to_tap(&mut self, f: &RxFrame, tap: &Tap) {
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
    pub(crate) fn lro_push(&mut self, f: &RxFrame, csum: Csum, tap: &Tap) -> bool {
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
    pub(crate) fn flush_lro(&mut self, tap: &Tap) {
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
    pub(crate) fn release_received(&mut self) {
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

/// Orders the top `n` ids of the free stack `free` so that they pop in
/// ascending order: the buffers a refill posts are then adjacent pages
/// wherever their ids are, so a flip's posted pages are given up a long
/// run at a time (one `madvise` a run), as Xen 2.0's netfront gave a
/// batch's pages up in one multicall (Menon 2006 §4.2). Frames come back
/// in ring order, so the ids freed together were posted together.
fn ascending_from_top(free: &mut [u16], n: usize) {
    let k = free.len().saturating_sub(n);
    free[k..].sort_unstable_by(|a, b| b.cmp(a));
}

/// Adjacent pool frames `lo..=hi`, grown a frame at either end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    lo: u32,
    hi: u32,
}

impl Run {
    fn new(frame: u32) -> Run {
        Run {
            lo: frame,
            hi: frame,
        }
    }

    /// `run` with `frame` added, or, where `frame` does not adjoin it, a
    /// new run of `frame` alone and the finished `run` beside it.
    fn grow(run: Option<Run>, frame: u32) -> (Run, Option<Run>) {
        match run {
            Some(r) => r
                .extend(frame)
                .map_or((Run::new(frame), Some(r)), |g| (g, None)),
            None => (Run::new(frame), None),
        }
    }

    /// The run with `frame` added, if it is adjacent to either end.
    fn extend(self, frame: u32) -> Option<Run> {
        if self.hi.checked_add(1) == Some(frame) {
            Some(Run { hi: frame, ..self })
        } else if self.lo.checked_sub(1) == Some(frame) {
            Some(Run { lo: frame, ..self })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ascending_from_top, Run};

    #[test]
    fn a_refill_pops_the_freed_ids_in_ascending_order() {
        // A free stack whose top four (the ids a refill of four takes) are
        // out of order; the bottom stays as it was.
        let mut free = vec![9, 7, 3, 1, 2, 0];
        ascending_from_top(&mut free, 4);
        assert_eq!(free, vec![9, 7, 3, 2, 1, 0]);
        let popped: Vec<u16> = std::iter::from_fn(|| free.pop()).take(4).collect();
        assert_eq!(popped, vec![0, 1, 2, 3]);
        // More asked than held, and none: no panic, all or nothing sorted.
        let mut few = vec![4, 6, 5];
        ascending_from_top(&mut few, 10);
        assert_eq!(few, vec![6, 5, 4]);
        ascending_from_top(&mut few, 0);
        assert_eq!(few, vec![6, 5, 4]);
    }

    #[test]
    fn a_run_grows_at_either_end_and_only_there() {
        let r = Run::new(10);
        let r = r.extend(11).and_then(|r| r.extend(9)).unwrap();
        assert_eq!((r.lo, r.hi), (9, 11));
        assert!(r.extend(13).is_none() && r.extend(10).is_none());
        assert!(Run::new(u32::MAX).extend(0).is_none());
        assert!(Run::new(0).extend(u32::MAX).is_none());
    }

    #[test]
    fn a_run_grows_or_hands_back_the_finished_one() {
        let (r, done) = Run::grow(None, 5);
        assert_eq!(((r.lo, r.hi), done.is_none()), ((5, 5), true));
        let (r, done) = Run::grow(Some(r), 6);
        assert_eq!(((r.lo, r.hi), done.is_none()), ((5, 6), true));
        let (r, done) = Run::grow(Some(r), 9);
        let done = done.unwrap();
        assert_eq!(((r.lo, r.hi), (done.lo, done.hi)), ((9, 9), (5, 6)));
    }
}
