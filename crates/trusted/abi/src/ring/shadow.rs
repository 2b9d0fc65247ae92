//! The back end's copy of what its responses overwrite, so that a
//! successor can take a ring over from a back end that died.
//!
//! A Xen ring has one slot per entry, shared by the request and its
//! response (`io/ring.h`): the back end writes each response over the
//! request it answers, and publishes `rsp_prod` later, once per batch.
//! When the back end's process dies between the two (a SIGKILL of the
//! driver domain, taken over in place, Menon 2006 §3), the slots after
//! the published `rsp_prod` hold responses nobody published. A successor
//! starts at `rsp_prod` and would read them as requests: grant references
//! made of a length and flags, which are refused, or worse, name another
//! of the guest's buffers, so that the guest reads a buffer that was never
//! filled as if it were (under checksum offload, silently).
//!
//! So the back end keeps, in memory of its own domain that outlives its
//! process, the bytes of each consumed request that a response covers, and
//! how far it consumed. A successor copies them back into the slots between
//! the published `rsp_prod` and that point before it reads any request.
//! The guest never writes those slots meanwhile: they are consumed and not
//! yet answered.

use super::{Geometry, RingIdx, MAX_ENTRY_SIZE};
use crate::mem::SharedMemory;
use crate::Error;

/// Marks a shadow that a back end of this layout set up.
const MAGIC: u32 = 0x5348_4457;
/// Bytes before the first entry: the magic and the consumed index.
const HEADER: usize = 8;
const CONS: usize = 4;

/// A back end's record of the requests it consumed (see the module).
pub struct RequestShadow {
    mem: Box<dyn SharedMemory + Send + Sync>,
    /// Bytes kept per slot: the response's size, which is what it overwrites.
    entry: usize,
    size: u32,
}

impl RequestShadow {
    /// Bytes a shadow of a ring of `size` slots needs, keeping `entry`
    /// bytes of each.
    pub const fn bytes_needed(size: u32, entry: usize) -> usize {
        HEADER + size as usize * entry
    }

    pub(super) fn new(
        mem: Box<dyn SharedMemory + Send + Sync>,
        size: u32,
        entry: usize,
    ) -> Result<RequestShadow, Error> {
        let need = Self::bytes_needed(size, entry);
        if mem.len() < need || entry > MAX_ENTRY_SIZE {
            return Err(Error::RingGeometry {
                reason: "the request shadow is smaller than the ring it keeps",
                len: mem.len(),
                entry,
            });
        }
        Ok(RequestShadow { mem, entry, size })
    }

    /// Starts the record afresh: nothing consumed past `start`.
    pub(super) fn reset(&self, start: RingIdx) {
        self.mem.store_u32(CONS, start);
        self.mem.store_u32(0, MAGIC);
    }

    fn at(&self, idx: RingIdx) -> usize {
        HEADER + (idx & (self.size - 1)) as usize * self.entry
    }

    /// Records the requests in `[from, to)` as consumed: their bytes first,
    /// then the index, so that the index never covers a slot not copied.
    /// Called before any response to them is written.
    pub(super) fn record<M: SharedMemory>(
        &self,
        ring: &M,
        geo: &Geometry,
        from: RingIdx,
        to: RingIdx,
    ) {
        let mut buf = [0u8; MAX_ENTRY_SIZE];
        let mut idx = from;
        while idx != to {
            ring.read_bytes(geo.offset(idx), &mut buf[..self.entry]);
            self.mem.write_bytes(self.at(idx), &buf[..self.entry]);
            idx = idx.wrapping_add(1);
        }
        self.mem.store_u32(CONS, to);
    }

    /// Copies the recorded requests after `start` (the published
    /// `rsp_prod`) back into the ring; returns how many. A record that is
    /// not this layout's, or claims more than a ring of requests past
    /// `start`, restores nothing.
    pub(super) fn restore<M: SharedMemory>(&self, ring: &M, geo: &Geometry, start: RingIdx) -> u32 {
        let cons = self.mem.load_u32(CONS);
        let n = cons.wrapping_sub(start);
        if self.mem.load_u32(0) != MAGIC || n > self.size {
            return 0;
        }
        let mut buf = [0u8; MAX_ENTRY_SIZE];
        for k in 0..n {
            let idx = start.wrapping_add(k);
            self.mem.read_bytes(self.at(idx), &mut buf[..self.entry]);
            ring.write_bytes(geo.offset(idx), &buf[..self.entry]);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BackRing, FrontRing};
    use super::*;
    use crate::mem::HeapMemory;
    use crate::netif::{
        NetifStatus, RxFlags, RxRequest, RxResponse, TxFlags, TxRequest, TxResponse,
    };
    use std::sync::Arc;

    type Rx<'a> = BackRing<&'a HeapMemory, RxRequest, RxResponse>;
    type Tx<'a> = BackRing<&'a HeapMemory, TxRequest, TxResponse>;

    fn rx_req(id: u16) -> RxRequest {
        RxRequest {
            id,
            gref: 100 + u32::from(id),
            offset: 0,
        }
    }

    fn shadow_mem() -> Arc<HeapMemory> {
        Arc::new(HeapMemory::new(4096))
    }

    /// A guest posts four RX buffers; a back end consumes three, answers
    /// one and publishes it, answers two more and dies before publishing.
    fn rx_crash(ring: &HeapMemory, shadow: Option<Arc<HeapMemory>>) {
        let mut f = FrontRing::<&HeapMemory, RxRequest, RxResponse>::init(ring).unwrap();
        for id in 1..=4 {
            f.push_request(&rx_req(id)).unwrap();
        }
        f.push_requests_and_check_notify();
        let mut b: Rx = match shadow {
            Some(s) => BackRing::attach_shadowed(ring, Box::new(s), false).unwrap(),
            None => BackRing::attach(ring).unwrap(),
        };
        for k in 0..3 {
            let req = b.next_request().unwrap().unwrap();
            let rsp = RxResponse::data(req.id, 0, RxFlags::EMPTY, 1448).unwrap();
            b.push_response(&rsp).unwrap();
            if k == 0 {
                b.push_responses_and_check_notify();
            }
        }
    }

    #[test]
    fn a_successor_reads_the_requests_a_dead_back_end_answered_unpublished() {
        let ring = HeapMemory::new(4096);
        let shadow = shadow_mem();
        rx_crash(&ring, Some(shadow.clone()));
        let mut b: Rx = BackRing::attach_shadowed(&ring, Box::new(shadow), true).unwrap();
        assert_eq!(b.restored(), 2);
        for id in 2..=4 {
            assert_eq!(b.next_request().unwrap(), Some(rx_req(id)), "request {id}");
        }
        assert_eq!(b.next_request().unwrap(), None);
    }

    #[test]
    fn without_the_shadow_a_successor_reads_a_response_as_a_request() {
        let ring = HeapMemory::new(4096);
        rx_crash(&ring, None);
        let mut b: Rx = BackRing::attach(&ring).unwrap();
        let read = b.next_request().unwrap().unwrap();
        assert_ne!(read, rx_req(2), "the slot holds the unpublished response");
        assert_eq!(read.gref, 1448 << 16, "a grant reference made of a length");
    }

    #[test]
    fn tx_requests_keep_all_their_fields_through_a_crash() {
        let ring = HeapMemory::new(4096);
        let shadow = shadow_mem();
        let req = |id: u16| TxRequest {
            gref: 7 + u32::from(id),
            offset: 64,
            flags: TxFlags::EMPTY,
            id,
            size: 1000 + id,
        };
        let mut f = FrontRing::<&HeapMemory, TxRequest, TxResponse>::init(&ring).unwrap();
        for id in 1..=2 {
            f.push_request(&req(id)).unwrap();
        }
        f.push_requests_and_check_notify();
        let mut b: Tx = BackRing::attach_shadowed(&ring, Box::new(shadow.clone()), false).unwrap();
        assert!(b.peek_nth(1).unwrap().is_some());
        assert!(b.consume(2));
        for id in 1..=2 {
            let rsp = TxResponse {
                id,
                status: NetifStatus::Okay as i16,
            };
            b.push_response(&rsp).unwrap();
        }
        drop(b);
        let mut b: Tx = BackRing::attach_shadowed(&ring, Box::new(shadow), true).unwrap();
        assert_eq!(b.next_request().unwrap(), Some(req(1)));
        assert_eq!(b.next_request().unwrap(), Some(req(2)));
    }

    #[test]
    fn a_record_from_elsewhere_restores_nothing() {
        let ring = HeapMemory::new(4096);
        rx_crash(&ring, None);
        // A shadow never set up, and one claiming more than a ring.
        let blank = shadow_mem();
        let _ = Rx::attach_shadowed(&ring, Box::new(blank.clone()), true).unwrap();
        let wild = shadow_mem();
        wild.store_u32(0, MAGIC);
        wild.store_u32(CONS, 1 + 300);
        let mut b: Rx = BackRing::attach_shadowed(&ring, Box::new(wild.clone()), true).unwrap();
        assert_eq!(b.next_request().unwrap().unwrap().gref, 1448 << 16);
        assert_eq!(wild.load_u32(CONS), 2, "the record starts afresh");
        assert!(
            Rx::attach_shadowed(&ring, Box::new(Arc::new(HeapMemory::new(64))), false).is_err(),
            "a shadow too small for the ring is refused"
        );
    }
}
