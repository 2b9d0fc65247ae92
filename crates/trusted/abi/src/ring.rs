//! Xen's shared I/O ring (`io/ring.h`), the I/O channel of the split driver.
//!
//! Menon 2006 §2: the I/O channel is a shared page holding a ring of
//! requests and responses plus four indices. The front end produces requests
//! and consumes responses; the back end does the reverse. Each end keeps
//! private copies of its own indices and publishes them in batches; the event
//! indices (`req_event`, `rsp_event`) let the consumer say when it next wants
//! a notification, so the producer can suppress needless ones.
//!
//! Both ends treat the other as hostile (docs/ARCHITECTURE.md, "Rules the
//! code keeps"): a
//! peer's producer index is read once, checked against the ring size and the
//! entries actually outstanding, and a bad value is an [`Error::Overflow`],
//! never a long loop.

mod shadow;

use std::marker::PhantomData;

use crate::mem::SharedMemory;
pub use crate::mem::PAGE_SIZE;
use crate::wire::wire_view;
use crate::Error;
pub use shadow::RequestShadow;

/// A free-running ring index; slots are `index & (size - 1)`.
pub type RingIdx = u32;

/// Bytes before the first ring slot: four indices, `pvt` (4) and `__pad` (44).
pub const RING_HDR_SIZE: usize = 64;
/// Largest entry the ring helpers copy (netif entries are 12 bytes at most).
pub const MAX_ENTRY_SIZE: usize = 64;

/// Byte offsets of the shared ring header (`struct <name>_sring`).
pub mod layout {
    /// Requests published by the front end.
    pub const REQ_PROD: usize = 0;
    /// Back end wants a notification when `req_prod` passes this index.
    pub const REQ_EVENT: usize = 4;
    /// Responses published by the back end.
    pub const RSP_PROD: usize = 8;
    /// Front end wants a notification when `rsp_prod` passes this index.
    pub const RSP_EVENT: usize = 12;
    /// Per-protocol private byte(s) (`pvt`, e.g. netif smartpoll_active).
    pub const PVT: usize = 16;
    /// Size of `pvt`.
    pub const PVT_LEN: usize = 4;
    /// Reserved padding (`__pad`).
    pub const PAD: usize = 20;
    /// Size of `__pad`.
    pub const PAD_LEN: usize = 44;
    /// First ring slot (`offsetof(struct <name>_sring, ring)`).
    pub const RING: usize = 64;
    /// Size of the header.
    pub const SIZEOF: usize = 64;
}

/// Number of slots of a ring in `bytes` of shared memory whose slots are
/// `slot_size` bytes (the size of the request/response union): the largest
/// power of two that fits after the header (Xen `__RING_SIZE`). Zero if none.
pub const fn ring_size(bytes: usize, slot_size: usize) -> u32 {
    if slot_size == 0 || bytes <= RING_HDR_SIZE {
        return 0;
    }
    let n = (bytes - RING_HDR_SIZE) / slot_size;
    if n == 0 {
        return 0;
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    if p > 1 << 31 {
        1 << 31
    } else {
        p as u32
    }
}

wire_view! {
    /// Checked view of a shared ring header. Indices in memory another domain
    /// writes should be read through [`SharedMemory`] atomics instead; this view
    /// is for copies (dumps, tests, debuggers).
    SringHeaderView, layout, {
        /// Requests published by the front end.
        req_prod / set_req_prod: u32 = REQ_PROD,
        /// Request notification threshold set by the back end.
        req_event / set_req_event: u32 = REQ_EVENT,
        /// Responses published by the back end.
        rsp_prod / set_rsp_prod: u32 = RSP_PROD,
        /// Response notification threshold set by the front end.
        rsp_event / set_rsp_event: u32 = RSP_EVENT,
    }
}

/// The four indices of a shared ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SringHeader {
    pub req_prod: RingIdx,
    pub req_event: RingIdx,
    pub rsp_prod: RingIdx,
    pub rsp_event: RingIdx,
}

impl SringHeader {
    /// Size of the header in bytes.
    pub const SIZE: usize = RING_HDR_SIZE;

    /// The header `SHARED_RING_INIT` writes, starting at index `start`.
    pub const fn initial(start: RingIdx) -> Self {
        SringHeader {
            req_prod: start,
            req_event: start.wrapping_add(1),
            rsp_prod: start,
            rsp_event: start.wrapping_add(1),
        }
    }

    /// Copies the indices out of a view. Any index value is structurally valid;
    /// whether it is sane depends on the reader's private state.
    pub fn parse<T: AsRef<[u8]>>(view: &SringHeaderView<T>) -> Result<Self, Error> {
        Ok(SringHeader {
            req_prod: view.req_prod(),
            req_event: view.req_event(),
            rsp_prod: view.rsp_prod(),
            rsp_event: view.rsp_event(),
        })
    }

    /// Writes the indices and zeroes `pvt` and `__pad`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut SringHeaderView<T>) {
        view.set_req_prod(self.req_prod);
        view.set_req_event(self.req_event);
        view.set_rsp_prod(self.rsp_prod);
        view.set_rsp_event(self.rsp_event);
        view.buf.as_mut()[layout::PVT..layout::SIZEOF].fill(0);
    }
}

/// A fixed-size ring entry as raw fields, not yet semantically validated.
///
/// `decode` copies fields out of exactly `SIZE` bytes and cannot fail;
/// validation (unknown flags, offsets, grant references) is the consumer's
/// next step on the copy.
pub trait RingEntry: Sized {
    /// Encoded size in bytes (at most [`MAX_ENTRY_SIZE`]).
    const SIZE: usize;
    /// Copies the fields out of `bytes` (`bytes.len() >= SIZE`).
    fn decode(bytes: &[u8]) -> Self;
    /// Writes the fields into `out` (`out.len() >= SIZE`).
    fn encode(&self, out: &mut [u8]);
}

/// Geometry shared by both ends.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    size: u32,
    slot: usize,
}

impl Geometry {
    fn new<Req: RingEntry, Rsp: RingEntry>(len: usize) -> Result<Self, Error> {
        let slot = Req::SIZE.max(Rsp::SIZE);
        if slot == 0 || slot > MAX_ENTRY_SIZE {
            return Err(Error::RingGeometry {
                reason: "entry size must be 1..=64 bytes",
                len,
                entry: slot,
            });
        }
        if len < PAGE_SIZE {
            return Err(Error::RingGeometry {
                reason: "a ring needs at least one 4096-byte page",
                len,
                entry: slot,
            });
        }
        Ok(Geometry {
            size: ring_size(len, slot),
            slot,
        })
    }

    fn offset(&self, idx: RingIdx) -> usize {
        RING_HDR_SIZE + (idx & (self.size - 1)) as usize * self.slot
    }

    fn read<M: SharedMemory, E: RingEntry>(&self, mem: &M, idx: RingIdx) -> E {
        let mut buf = [0u8; MAX_ENTRY_SIZE];
        mem.read_bytes(self.offset(idx), &mut buf[..E::SIZE]);
        E::decode(&buf[..E::SIZE])
    }

    fn write<M: SharedMemory, E: RingEntry>(&self, mem: &M, idx: RingIdx, e: &E) {
        let mut buf = [0u8; MAX_ENTRY_SIZE];
        e.encode(&mut buf[..E::SIZE]);
        mem.write_bytes(self.offset(idx), &buf[..E::SIZE]);
    }
}

/// Publishes `new` at `prod_off` and decides whether the consumer asked to be
/// notified (`RING_PUSH_*_AND_CHECK_NOTIFY`): notify iff the consumer's event
/// index lies in `(old, new]`, computed with wrapping arithmetic.
fn publish_and_check<M: SharedMemory>(
    mem: &M,
    prod_off: usize,
    event_off: usize,
    old: RingIdx,
    new: RingIdx,
) -> bool {
    // Release store: the peer sees the entries before the index.
    mem.store_u32(prod_off, new);
    // Full fence: the index is visible before we read the consumer's event
    // index; pairs with the fence in `ask_for_event` (Xen's `mb()`).
    mem.fence_seqcst();
    let event = mem.load_u32(event_off);
    new.wrapping_sub(event) < new.wrapping_sub(old)
}

/// The consumer's half of `RING_FINAL_CHECK_FOR_*`: asks for a notification
/// when the producer's index passes `cons`, then fences so that the caller's
/// re-read of the producer's index cannot come before this store is visible;
/// pairs with the fence in `publish_and_check`. Without both fences each side
/// may read the other's old index and neither notifies (a lost wake-up).
fn ask_for_event<M: SharedMemory>(mem: &M, event_off: usize, cons: RingIdx) {
    mem.store_u32(event_off, cons.wrapping_add(1));
    mem.fence_seqcst();
}

fn write_initial_header<M: SharedMemory>(mem: &M, start: RingIdx) {
    let h = SringHeader::initial(start);
    mem.fill(layout::PVT, layout::SIZEOF - layout::PVT, 0);
    mem.store_u32(layout::REQ_EVENT, h.req_event);
    mem.store_u32(layout::RSP_EVENT, h.rsp_event);
    mem.store_u32(layout::RSP_PROD, h.rsp_prod);
    mem.store_u32(layout::REQ_PROD, h.req_prod);
}

/// The front end of a ring: produces requests, consumes responses.
pub struct FrontRing<M: SharedMemory, Req: RingEntry, Rsp: RingEntry> {
    mem: M,
    geo: Geometry,
    /// Next request slot to fill (private until pushed).
    req_prod_pvt: RingIdx,
    /// Last `req_prod` we published.
    req_prod: RingIdx,
    /// Next response to consume.
    rsp_cons: RingIdx,
    /// Validated `rsp_prod` snapshot: responses up to here may be read.
    rsp_limit: RingIdx,
    _entries: PhantomData<fn() -> (Req, Rsp)>,
}

impl<M: SharedMemory, Req: RingEntry, Rsp: RingEntry> FrontRing<M, Req, Rsp> {
    /// Initialises the shared header (`SHARED_RING_INIT` + `FRONT_RING_INIT`).
    pub fn init(mem: M) -> Result<Self, Error> {
        Self::init_at(mem, 0)
    }

    /// Like [`Self::init`] but with every index starting at `start`
    /// (`FRONT_RING_ATTACH` with an index); lets tests cross the 2^32 wrap.
    pub fn init_at(mem: M, start: RingIdx) -> Result<Self, Error> {
        let geo = Geometry::new::<Req, Rsp>(mem.len())?;
        write_initial_header(&mem, start);
        Ok(FrontRing {
            mem,
            geo,
            req_prod_pvt: start,
            req_prod: start,
            rsp_cons: start,
            rsp_limit: start,
            _entries: PhantomData,
        })
    }

    /// Attaches to an initialised ring, taking over from a previous front end:
    /// new requests go after the published `req_prod`, and responses already
    /// published are treated as consumed. Fails if the shared indices claim
    /// more outstanding requests than the ring holds.
    pub fn attach(mem: M) -> Result<Self, Error> {
        let geo = Geometry::new::<Req, Rsp>(mem.len())?;
        let req_prod = mem.load_u32(layout::REQ_PROD);
        let rsp_prod = mem.load_u32(layout::RSP_PROD);
        if req_prod.wrapping_sub(rsp_prod) > geo.size {
            return Err(Error::Overflow {
                prod: req_prod,
                cons: rsp_prod,
                size: geo.size,
            });
        }
        Ok(FrontRing {
            mem,
            geo,
            req_prod_pvt: req_prod,
            req_prod,
            rsp_cons: rsp_prod,
            rsp_limit: rsp_prod,
            _entries: PhantomData,
        })
    }

    /// Number of slots.
    pub fn size(&self) -> u32 {
        self.geo.size
    }
    /// The shared memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// Next request index to fill.
    pub fn req_prod_pvt(&self) -> RingIdx {
        self.req_prod_pvt
    }
    /// Next response index to consume.
    pub fn rsp_cons(&self) -> RingIdx {
        self.rsp_cons
    }

    /// The back end's `rsp_prod` as it reads now, unvalidated: only for
    /// telling whether it moved (an event storm's test), never to index.
    pub fn peek_rsp_prod(&self) -> RingIdx {
        self.mem.load_u32(layout::RSP_PROD)
    }

    /// Slots free for new requests (`RING_FREE_REQUESTS`).
    pub fn free_requests(&self) -> u32 {
        self.geo.size - self.req_prod_pvt.wrapping_sub(self.rsp_cons)
    }

    /// True when no request slot is free (`RING_FULL`).
    pub fn is_full(&self) -> bool {
        self.free_requests() == 0
    }

    /// Writes `req` into the next slot without publishing it.
    pub fn push_request(&mut self, req: &Req) -> Result<(), Error> {
        if self.is_full() {
            return Err(Error::RingFull {
                size: self.geo.size,
            });
        }
        self.geo.write(&self.mem, self.req_prod_pvt, req);
        self.req_prod_pvt = self.req_prod_pvt.wrapping_add(1);
        Ok(())
    }

    /// Publishes pushed requests; true if the back end asked to be notified
    /// (`RING_PUSH_REQUESTS_AND_CHECK_NOTIFY`).
    pub fn push_requests_and_check_notify(&mut self) -> bool {
        let old = self.req_prod;
        let new = self.req_prod_pvt;
        self.req_prod = new;
        publish_and_check(&self.mem, layout::REQ_PROD, layout::REQ_EVENT, old, new)
    }

    /// Responses published but not consumed. Reads `rsp_prod` once; a back end
    /// claiming more responses than requests we published is an overflow.
    pub fn unconsumed_responses(&mut self) -> Result<u32, Error> {
        let prod = self.mem.load_u32(layout::RSP_PROD);
        let avail = prod.wrapping_sub(self.rsp_cons);
        let outstanding = self.req_prod.wrapping_sub(self.rsp_cons);
        if avail > self.geo.size || avail > outstanding {
            return Err(Error::Overflow {
                prod,
                cons: self.rsp_cons,
                size: self.geo.size,
            });
        }
        self.rsp_limit = prod;
        Ok(avail)
    }

    /// Copies out the next response, if one is published, and consumes it.
    pub fn next_response(&mut self) -> Result<Option<Rsp>, Error> {
        if self.rsp_cons == self.rsp_limit && self.unconsumed_responses()? == 0 {
            return Ok(None);
        }
        let rsp = self.geo.read(&self.mem, self.rsp_cons);
        self.rsp_cons = self.rsp_cons.wrapping_add(1);
        Ok(Some(rsp))
    }

    /// True if responses are waiting; otherwise asks for a notification on the
    /// next one and checks again (`RING_FINAL_CHECK_FOR_RESPONSES`).
    pub fn final_check_for_responses(&mut self) -> Result<bool, Error> {
        if self.unconsumed_responses()? > 0 {
            return Ok(true);
        }
        ask_for_event(&self.mem, layout::RSP_EVENT, self.rsp_cons);
        Ok(self.unconsumed_responses()? > 0)
    }
}

/// The back end of a ring: consumes requests, produces responses.
pub struct BackRing<M: SharedMemory, Req: RingEntry, Rsp: RingEntry> {
    mem: M,
    geo: Geometry,
    /// Next response slot to fill (private until pushed).
    rsp_prod_pvt: RingIdx,
    /// Last `rsp_prod` we published.
    rsp_prod: RingIdx,
    /// Next request to consume.
    req_cons: RingIdx,
    /// Validated `req_prod` snapshot: requests up to here may be read.
    req_limit: RingIdx,
    /// How often the front end's `req_prod` was found out of bounds.
    overflows: u64,
    /// What the responses overwrite, for a successor ([`RequestShadow`]).
    shadow: Option<RequestShadow>,
    /// Requests a dead predecessor consumed, restored from the shadow.
    restored: u32,
    _entries: PhantomData<fn() -> (Req, Rsp)>,
}

impl<M: SharedMemory, Req: RingEntry, Rsp: RingEntry> BackRing<M, Req, Rsp> {
    /// Attaches to a ring the front end initialised (`BACK_RING_ATTACH`),
    /// starting after the responses already published.
    pub fn attach(mem: M) -> Result<Self, Error> {
        let geo = Geometry::new::<Req, Rsp>(mem.len())?;
        let start = mem.load_u32(layout::RSP_PROD);
        Ok(BackRing {
            mem,
            geo,
            rsp_prod_pvt: start,
            rsp_prod: start,
            req_cons: start,
            req_limit: start,
            overflows: 0,
            shadow: None,
            restored: 0,
            _entries: PhantomData,
        })
    }

    /// [`BackRing::attach`], recording in `shadow` (memory of the back
    /// end's own domain, which outlives its process) the bytes of each
    /// consumed request that its response will overwrite. A back end
    /// `resuming` the ring of one that died first copies the requests the
    /// dead one consumed but left unanswered back into their slots (see
    /// [`RequestShadow`]); otherwise the record starts afresh.
    pub fn attach_shadowed(
        mem: M,
        shadow: Box<dyn SharedMemory + Send + Sync>,
        resuming: bool,
    ) -> Result<Self, Error> {
        let mut ring = Self::attach(mem)?;
        let shadow = RequestShadow::new(shadow, ring.geo.size, Rsp::SIZE)?;
        if resuming {
            ring.restored = shadow.restore(&ring.mem, &ring.geo, ring.req_cons);
        }
        shadow.reset(ring.req_cons);
        ring.shadow = Some(shadow);
        Ok(ring)
    }

    /// How many requests [`BackRing::attach_shadowed`] restored: those a
    /// dead predecessor consumed and left unanswered.
    pub fn restored(&self) -> u32 {
        self.restored
    }

    /// Advances `req_cons` by `n`, recording the consumed requests first.
    fn advance(&mut self, n: u32) {
        let to = self.req_cons.wrapping_add(n);
        if let Some(s) = &self.shadow {
            s.record(&self.mem, &self.geo, self.req_cons, to);
        }
        self.req_cons = to;
    }

    /// Number of slots.
    pub fn size(&self) -> u32 {
        self.geo.size
    }
    /// The shared memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// Gives the memory back (e.g. to unmap it).
    pub fn into_memory(self) -> M {
        self.mem
    }
    /// Next request index to consume.
    pub fn req_cons(&self) -> RingIdx {
        self.req_cons
    }
    /// Next response index to fill.
    pub fn rsp_prod_pvt(&self) -> RingIdx {
        self.rsp_prod_pvt
    }
    /// Requests consumed but not yet answered.
    pub fn pending_responses(&self) -> u32 {
        self.req_cons.wrapping_sub(self.rsp_prod_pvt)
    }
    /// How many times `req_prod` was found out of bounds (a hostile or broken
    /// front end); the owner decides when to disconnect.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// The front end's `req_prod` as it reads now, unvalidated: only for
    /// telling whether it moved (an event storm's test), never to index.
    pub fn peek_req_prod(&self) -> RingIdx {
        self.mem.load_u32(layout::REQ_PROD)
    }

    /// Requests published but not consumed. Reads `req_prod` once and never
    /// trusts it: more than the ring size ahead of `req_cons`, or more than the
    /// slots not held by unanswered requests, is an [`Error::Overflow`].
    pub fn unconsumed_requests(&mut self) -> Result<u32, Error> {
        let prod = self.mem.load_u32(layout::REQ_PROD);
        let avail = prod.wrapping_sub(self.req_cons);
        // Xen: min(req_prod - req_cons, size - (req_cons - rsp_prod_pvt)); a
        // producer beyond either bound is broken or hostile.
        let room = self.geo.size - self.pending_responses();
        if avail > self.geo.size || avail > room {
            self.overflows += 1;
            return Err(Error::Overflow {
                prod,
                cons: self.req_cons,
                size: self.geo.size,
            });
        }
        self.req_limit = prod;
        Ok(avail)
    }

    /// Copies out the next request and consumes it. Reads only up to the last
    /// validated snapshot of `req_prod`, taking a new one when that runs out.
    pub fn next_request(&mut self) -> Result<Option<Req>, Error> {
        let req = self.peek_request()?;
        if req.is_some() {
            self.advance(1);
        }
        Ok(req)
    }

    /// Copies out the next request without consuming it (the next
    /// [`BackRing::next_request`] reads the same slot again).
    pub fn peek_request(&mut self) -> Result<Option<Req>, Error> {
        if self.req_cons == self.req_limit && self.unconsumed_requests()? == 0 {
            return Ok(None);
        }
        Ok(Some(self.geo.read(&self.mem, self.req_cons)))
    }

    /// Copies out the request `k` places after the next one, without
    /// consuming anything; None when the producer has not published it.
    /// (A multi-queue port arms the buffers of requests before it knows how
    /// many a frame takes.)
    pub fn peek_nth(&mut self, k: u32) -> Result<Option<Req>, Error> {
        if self.req_limit.wrapping_sub(self.req_cons) <= k && self.unconsumed_requests()? <= k {
            return Ok(None);
        }
        Ok(Some(
            self.geo.read(&self.mem, self.req_cons.wrapping_add(k)),
        ))
    }

    /// Consumes `n` requests already read with [`BackRing::peek_nth`],
    /// without reading them again; false (nothing consumed) when fewer
    /// are in the validated snapshot of `req_prod`.
    pub fn consume(&mut self, n: u32) -> bool {
        if self.req_limit.wrapping_sub(self.req_cons) < n {
            return false;
        }
        self.advance(n);
        true
    }

    /// Consumes the request [`BackRing::peek_request`] just returned,
    /// without reading its slot again; with none peeked (the validated
    /// snapshot of `req_prod` is used up), it does nothing and says so.
    pub fn consume_peeked(&mut self) -> bool {
        if self.req_cons == self.req_limit {
            return false;
        }
        self.advance(1);
        true
    }

    /// Writes `rsp` into the next slot without publishing it. Exactly one
    /// response per consumed request: answering more is an error.
    pub fn push_response(&mut self, rsp: &Rsp) -> Result<(), Error> {
        if self.rsp_prod_pvt == self.req_cons {
            return Err(Error::ResponseWithoutRequest {
                rsp_prod_pvt: self.rsp_prod_pvt,
                req_cons: self.req_cons,
            });
        }
        self.geo.write(&self.mem, self.rsp_prod_pvt, rsp);
        self.rsp_prod_pvt = self.rsp_prod_pvt.wrapping_add(1);
        Ok(())
    }

    /// Publishes pushed responses; true if the front end asked to be notified
    /// (`RING_PUSH_RESPONSES_AND_CHECK_NOTIFY`).
    pub fn push_responses_and_check_notify(&mut self) -> bool {
        let old = self.rsp_prod;
        let new = self.rsp_prod_pvt;
        self.rsp_prod = new;
        publish_and_check(&self.mem, layout::RSP_PROD, layout::RSP_EVENT, old, new)
    }

    /// True if at least `n` (1 or more) requests are waiting; otherwise asks
    /// for a notification once the front end has published that many past
    /// `req_cons` and checks again. (Asking for "the next one" would miss
    /// it when some are already waiting: the producer's index has passed
    /// that mark, so the front end would not notify again.)
    pub fn final_check_for_n_requests(&mut self, n: u32) -> Result<bool, Error> {
        let n = n.max(1);
        if self.unconsumed_requests()? >= n {
            return Ok(true);
        }
        ask_for_event(
            &self.mem,
            layout::REQ_EVENT,
            self.req_cons.wrapping_add(n - 1),
        );
        Ok(self.unconsumed_requests()? >= n)
    }

    /// True if requests are waiting; otherwise asks for a notification on the
    /// next one and checks again (`RING_FINAL_CHECK_FOR_REQUESTS`).
    pub fn final_check_for_requests(&mut self) -> Result<bool, Error> {
        if self.unconsumed_requests()? > 0 {
            return Ok(true);
        }
        ask_for_event(&self.mem, layout::REQ_EVENT, self.req_cons);
        Ok(self.unconsumed_requests()? > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::HeapMemory;

    /// A 12-byte test entry: a tag and a sequence number.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct E {
        tag: u32,
        seq: u64,
    }
    impl RingEntry for E {
        const SIZE: usize = 12;
        fn decode(b: &[u8]) -> Self {
            E {
                tag: u32::from_le_bytes(b[0..4].try_into().unwrap()),
                seq: u64::from_le_bytes(b[4..12].try_into().unwrap()),
            }
        }
        fn encode(&self, out: &mut [u8]) {
            out[0..4].copy_from_slice(&self.tag.to_le_bytes());
            out[4..12].copy_from_slice(&self.seq.to_le_bytes());
        }
    }

    type Front<'a> = FrontRing<&'a HeapMemory, E, E>;
    type Back<'a> = BackRing<&'a HeapMemory, E, E>;

    fn e(seq: u64) -> E {
        E { tag: 0xabcd, seq }
    }

    #[test]
    fn ring_size_matches_xen() {
        assert_eq!(ring_size(4096, 12), 256);
        assert_eq!(ring_size(4096, 8), 256);
        assert_eq!(ring_size(4096, 16), 128);
        assert_eq!(ring_size(4096, 64), 32);
        assert_eq!(ring_size(8192, 12), 512);
        assert_eq!(ring_size(64, 8), 0);
        assert_eq!(ring_size(4096, 0), 0);
    }

    #[test]
    fn header_view_round_trips_and_rejects_short() {
        assert!(matches!(
            SringHeaderView::new_checked(&[0u8; 63][..]),
            Err(Error::Truncated {
                need: 64,
                got: 63,
                ..
            })
        ));
        let mut buf = [0xffu8; 64];
        let mut v = SringHeaderView::new_checked(&mut buf[..]).unwrap();
        let h = SringHeader::initial(u32::MAX);
        h.emit(&mut v);
        assert_eq!(SringHeader::parse(&v).unwrap(), h);
        assert_eq!(h.req_event, 0);
        assert!(buf[16..].iter().all(|&b| b == 0));
    }

    #[test]
    fn init_needs_a_page() {
        let m = HeapMemory::new(4095);
        assert!(matches!(
            Front::init(&m),
            Err(Error::RingGeometry { len: 4095, .. })
        ));
        let m = HeapMemory::new(4096);
        let f = Front::init(&m).unwrap();
        assert_eq!(f.size(), 256);
        assert_eq!(m.load_u32(layout::REQ_EVENT), 1);
        assert_eq!(m.load_u32(layout::RSP_EVENT), 1);
    }

    #[test]
    fn peeking_a_request_does_not_consume_it() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        assert_eq!(b.peek_request().unwrap(), None);
        f.push_request(&e(1)).unwrap();
        f.push_request(&e(2)).unwrap();
        f.push_requests_and_check_notify();
        assert_eq!(b.peek_request().unwrap(), Some(e(1)));
        assert_eq!(b.peek_request().unwrap(), Some(e(1)));
        assert_eq!(b.pending_responses(), 0);
        assert_eq!(b.next_request().unwrap(), Some(e(1)));
        assert_eq!(b.peek_request().unwrap(), Some(e(2)));
        assert_eq!(b.next_request().unwrap(), Some(e(2)));
        assert_eq!(b.peek_request().unwrap(), None);
        // A peeked request is consumed without a second read; nothing past
        // the validated producer index is.
        f.push_request(&e(3)).unwrap();
        f.push_requests_and_check_notify();
        assert_eq!(b.peek_request().unwrap(), Some(e(3)));
        assert!(b.consume_peeked());
        assert!(!b.consume_peeked());
        assert_eq!(b.pending_responses(), 3);
        assert_eq!(b.peek_request().unwrap(), None);
    }

    #[test]
    fn requests_are_peeked_ahead_and_consumed_together() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        assert_eq!(b.peek_nth(0).unwrap(), None);
        for i in 1..=3 {
            f.push_request(&e(i)).unwrap();
        }
        f.push_requests_and_check_notify();
        assert_eq!(b.peek_nth(2).unwrap(), Some(e(3)));
        assert_eq!(b.peek_nth(3).unwrap(), None);
        assert_eq!(b.peek_nth(0).unwrap(), Some(e(1)));
        assert!(!b.consume(4), "past the published requests");
        assert!(b.consume(2));
        assert_eq!(b.pending_responses(), 2);
        assert_eq!(b.peek_nth(0).unwrap(), Some(e(3)));
        assert_eq!(b.next_request().unwrap(), Some(e(3)));
        assert_eq!(b.peek_nth(0).unwrap(), None);
        // Waiting for 3 more: the front end notifies only when its third
        // crosses the mark, though one is already there.
        f.push_request(&e(4)).unwrap();
        assert!(!f.push_requests_and_check_notify());
        assert!(!b.final_check_for_n_requests(3).unwrap());
        f.push_request(&e(5)).unwrap();
        assert!(!f.push_requests_and_check_notify());
        f.push_request(&e(6)).unwrap();
        assert!(f.push_requests_and_check_notify(), "the third notifies");
        assert!(b.final_check_for_n_requests(3).unwrap());
    }

    #[test]
    fn full_and_empty_across_the_wrap() {
        let m = HeapMemory::new(4096);
        let start = u32::MAX - 100;
        let mut f = Front::init_at(&m, start).unwrap();
        let mut b = Back::attach(&m).unwrap();
        assert_eq!(b.req_cons(), start);
        assert_eq!(b.unconsumed_requests().unwrap(), 0);
        for i in 0..256 {
            f.push_request(&e(i)).unwrap();
        }
        assert!(f.is_full());
        assert_eq!(f.push_request(&e(999)), Err(Error::RingFull { size: 256 }));
        f.push_requests_and_check_notify();
        assert_eq!(b.unconsumed_requests().unwrap(), 256);
        for i in 0..256 {
            assert_eq!(b.next_request().unwrap(), Some(e(i)));
            b.push_response(&e(i + 1000)).unwrap();
        }
        assert_eq!(b.next_request().unwrap(), None);
        assert!(b.req_cons() < start, "indices wrapped");
        b.push_responses_and_check_notify();
        assert_eq!(f.unconsumed_responses().unwrap(), 256);
        for i in 0..256 {
            assert_eq!(f.next_response().unwrap(), Some(e(i + 1000)));
        }
        assert_eq!(f.next_response().unwrap(), None);
        assert_eq!(f.free_requests(), 256);
    }

    #[test]
    fn notification_follows_event_index() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init_at(&m, u32::MAX - 1).unwrap();
        // req_event = start + 1: the first request crosses it.
        f.push_request(&e(0)).unwrap();
        assert!(f.push_requests_and_check_notify());
        // Event index still in the past: no notification.
        f.push_request(&e(1)).unwrap();
        assert!(!f.push_requests_and_check_notify());
        // Back end asks for one at req_cons + 1 (= next after the two pushed).
        let mut b = Back::attach(&m).unwrap();
        while b.next_request().unwrap().is_some() {}
        assert!(!b.final_check_for_requests().unwrap());
        assert_eq!(m.load_u32(layout::REQ_EVENT), b.req_cons().wrapping_add(1));
        // Event index far in the future: publishing one does not notify.
        m.store_u32(layout::REQ_EVENT, f.req_prod_pvt().wrapping_add(5));
        f.push_request(&e(2)).unwrap();
        assert!(!f.push_requests_and_check_notify());
        // A batch that crosses it does.
        for i in 0..5 {
            f.push_request(&e(3 + i)).unwrap();
        }
        assert!(f.push_requests_and_check_notify());
        // Nothing new pushed: never notify.
        assert!(!f.push_requests_and_check_notify());
    }

    #[test]
    fn final_check_sees_late_responses() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        assert!(!f.final_check_for_responses().unwrap());
        assert_eq!(m.load_u32(layout::RSP_EVENT), 1);
        f.push_request(&e(1)).unwrap();
        f.push_requests_and_check_notify();
        b.next_request().unwrap().unwrap();
        b.push_response(&e(2)).unwrap();
        assert!(b.push_responses_and_check_notify());
        assert!(f.final_check_for_responses().unwrap());
    }

    #[test]
    fn producer_running_ahead_is_overflow() {
        let m = HeapMemory::new(4096);
        let start = u32::MAX - 3;
        let _f = Front::init_at(&m, start).unwrap();
        let mut b = Back::attach(&m).unwrap();
        m.store_u32(layout::REQ_PROD, start.wrapping_add(257));
        let err = b.unconsumed_requests().unwrap_err();
        assert_eq!(
            err,
            Error::Overflow {
                prod: start.wrapping_add(257),
                cons: start,
                size: 256
            }
        );
        assert!(b.next_request().is_err());
        assert!(b.final_check_for_requests().is_err());
        // Producer index going backwards is just as bad.
        m.store_u32(layout::REQ_PROD, start.wrapping_sub(1));
        assert!(b.unconsumed_requests().is_err());
        assert_eq!(b.overflows(), 4, "each refusal is counted");
        // Exactly a full ring is fine.
        m.store_u32(layout::REQ_PROD, start.wrapping_add(256));
        assert_eq!(b.unconsumed_requests().unwrap(), 256);
        assert_eq!(b.overflows(), 4);
    }

    #[test]
    fn unanswered_requests_limit_the_producer() {
        let m = HeapMemory::new(4096);
        let _f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        m.store_u32(layout::REQ_PROD, 10);
        for _ in 0..10 {
            b.next_request().unwrap().unwrap();
        }
        // 10 slots still await responses, so 256 more cannot exist.
        m.store_u32(layout::REQ_PROD, 10 + 256);
        assert!(matches!(
            b.unconsumed_requests(),
            Err(Error::Overflow { cons: 10, .. })
        ));
        m.store_u32(layout::REQ_PROD, 10 + 246);
        assert_eq!(b.unconsumed_requests().unwrap(), 246);
    }

    #[test]
    fn moving_producer_is_bounded_by_snapshot() {
        let m = HeapMemory::new(4096);
        let _f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        m.store_u32(layout::REQ_PROD, 3);
        assert_eq!(b.unconsumed_requests().unwrap(), 3);
        b.next_request().unwrap().unwrap();
        // The producer races ahead to garbage: the snapshot still bounds us.
        m.store_u32(layout::REQ_PROD, 0x8000_0000);
        b.next_request().unwrap().unwrap();
        b.next_request().unwrap().unwrap();
        assert!(b.next_request().is_err());
        assert_eq!(b.req_cons(), 3);
    }

    #[test]
    fn more_responses_than_requests_is_an_error() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init(&m).unwrap();
        let mut b = Back::attach(&m).unwrap();
        assert!(matches!(
            b.push_response(&e(0)),
            Err(Error::ResponseWithoutRequest { .. })
        ));
        f.push_request(&e(0)).unwrap();
        f.push_requests_and_check_notify();
        b.next_request().unwrap().unwrap();
        b.push_response(&e(0)).unwrap();
        assert!(b.push_response(&e(1)).is_err());
        // A back end that publishes extra responses is caught by the front end.
        m.store_u32(layout::RSP_PROD, 2);
        assert!(matches!(
            f.unconsumed_responses(),
            Err(Error::Overflow {
                prod: 2,
                cons: 0,
                ..
            })
        ));
    }

    #[test]
    fn attach_picks_up_shared_indices() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init_at(&m, 500).unwrap();
        for i in 0..4 {
            f.push_request(&e(i)).unwrap();
        }
        f.push_requests_and_check_notify();
        let mut b = Back::attach(&m).unwrap();
        assert_eq!((b.req_cons(), b.rsp_prod_pvt()), (500, 500));
        assert_eq!(b.unconsumed_requests().unwrap(), 4);
        let f2 = Front::attach(&m).unwrap();
        assert_eq!((f2.req_prod_pvt(), f2.rsp_cons()), (504, 500));
        assert_eq!(f2.free_requests(), 252);
        m.store_u32(layout::REQ_PROD, 500 + 257);
        assert!(Front::attach(&m).is_err());
    }

    #[test]
    fn pair_exchanges_thousands_across_the_wrap() {
        let m = HeapMemory::new(4096);
        let mut f = Front::init_at(&m, u32::MAX - 5000).unwrap();
        let mut b = Back::attach(&m).unwrap();
        let total = 20_000u64;
        let (mut sent, mut answered, mut received) = (0u64, 0u64, 0u64);
        let mut round = 0u64;
        while received < total {
            // Vary batch sizes so the two ends interleave differently.
            let batch = 1 + (round * 37 % 300);
            round += 1;
            for _ in 0..batch {
                if sent == total || f.push_request(&e(sent)).is_err() {
                    break;
                }
                sent += 1;
            }
            f.push_requests_and_check_notify();
            let mut n = 0;
            while n < batch / 2 + 1 {
                match b.next_request().unwrap() {
                    Some(req) => {
                        assert_eq!(req, e(answered));
                        b.push_response(&E {
                            tag: 7,
                            seq: req.seq * 2,
                        })
                        .unwrap();
                        answered += 1;
                        n += 1;
                    }
                    None => break,
                }
            }
            b.push_responses_and_check_notify();
            while let Some(rsp) = f.next_response().unwrap() {
                assert_eq!(rsp.seq, received * 2);
                received += 1;
            }
            b.final_check_for_requests().unwrap();
            f.final_check_for_responses().unwrap();
        }
        assert_eq!(f.rsp_cons(), (u32::MAX - 5000).wrapping_add(total as u32));
        assert!(f.rsp_cons() < 20_000);
    }

    #[test]
    fn threads_exchange_over_one_memory() {
        use std::sync::Arc;
        let m = Arc::new(HeapMemory::new(4096));
        let mut f = FrontRing::<Arc<HeapMemory>, E, E>::init_at(m.clone(), u32::MAX - 300).unwrap();
        let mut b = BackRing::<Arc<HeapMemory>, E, E>::attach(m.clone()).unwrap();
        let total = 5000u64;
        let back = std::thread::spawn(move || {
            let mut done = 0;
            while done < total {
                while let Some(r) = b.next_request().unwrap() {
                    b.push_response(&r).unwrap();
                    done += 1;
                }
                b.push_responses_and_check_notify();
                std::thread::yield_now();
            }
        });
        let (mut sent, mut got) = (0u64, 0u64);
        while got < total {
            while sent < total && f.push_request(&e(sent)).is_ok() {
                sent += 1;
            }
            f.push_requests_and_check_notify();
            while let Some(r) = f.next_response().unwrap() {
                assert_eq!(r, e(got));
                got += 1;
            }
            std::thread::yield_now();
        }
        back.join().unwrap();
    }
}
