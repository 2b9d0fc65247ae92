//! The frames a vif holds for its guest while the guest has too few RX
//! buffers posted, or while they are shaped for its NIC: storage allocated
//! once, at connect, so the slow path allocates nothing per frame.
//!
//! Layout: one byte arena used as a ring of variable-length records, and a
//! ring of fixed-size descriptors (offset, length, checksum state, GSO). Why
//! this and not fixed-size slots: frames run from 60 bytes to a 64 KiB GSO
//! packet, so a slot per frame sized for the largest would need 64 MiB per
//! vif for the 1024 frames a vif may hold; packed records cost what the
//! frames weigh. Frames leave in the order they came (the guest's RX ring is
//! FIFO too), so freeing is moving the oldest record's start; each record is
//! contiguous (one that does not fit before the arena's end starts again at
//! 0, the end left unused), so a frame is one slice to copy or cut into
//! buffers, and the software offload driver shapes it in place.

use frame::offload::FrameSink;
use frame::packet::{Csum, Gso};

/// One frame's descriptor.
#[derive(Debug, Clone, Copy, Default)]
struct Rec {
    off: usize,
    len: usize,
    csum: Csum,
    gso: Option<Gso>,
}

/// A bounded FIFO of frames in storage allocated once.
#[derive(Default)]
pub struct FrameSlab {
    bytes: Box<[u8]>,
    recs: Box<[Rec]>,
    /// Index of the oldest record in `recs`, and how many are kept.
    first: usize,
    count: usize,
    /// Where the next record's bytes go.
    tail: usize,
    /// The record begun and not yet committed: (offset, length).
    open: Option<(usize, usize)>,
}

/// A frame in the slab.
pub struct SlabFrame<'a> {
    pub data: &'a mut [u8],
    pub csum: Csum,
    pub gso: Option<Gso>,
}

impl FrameSlab {
    /// Room for `frames` frames and `bytes` bytes of them, allocated now.
    pub fn new(frames: usize, bytes: usize) -> FrameSlab {
        let mut slab = FrameSlab {
            bytes: vec![0; bytes].into_boxed_slice(),
            recs: vec![Rec::default(); frames].into_boxed_slice(),
            ..FrameSlab::default()
        };
        crate::hugepages::advise(&mut slab.bytes);
        slab
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn rec(&self, i: usize) -> &Rec {
        &self.recs[(self.first + i) % self.recs.len()]
    }

    /// The oldest frame's length and offload state.
    pub fn front_meta(&self) -> Option<(usize, Csum, Option<Gso>)> {
        (self.count > 0).then(|| {
            let r = self.rec(0);
            (r.len, r.csum, r.gso)
        })
    }

    /// The oldest frame, its bytes writable (to finish a checksum in place).
    pub fn front(&mut self) -> Option<SlabFrame<'_>> {
        if self.count == 0 {
            return None;
        }
        let r = *self.rec(0);
        Some(SlabFrame {
            data: &mut self.bytes[r.off..r.off + r.len],
            csum: r.csum,
            gso: r.gso,
        })
    }

    /// Prefetches the header of the frame after the oldest (Ram thesis
    /// 5.2), while the oldest is being handled.
    pub fn prefetch_next(&self) {
        if self.count > 1 {
            let r = self.rec(1);
            sys::prefetch(&self.bytes[r.off..r.off + r.len]);
        }
    }

    /// The `i`th frame from the oldest, and its offload state.
    pub fn get(&self, i: usize) -> Option<(&[u8], Csum, Option<Gso>)> {
        (i < self.count).then(|| {
            let r = self.rec(i);
            (&self.bytes[r.off..r.off + r.len], r.csum, r.gso)
        })
    }

    /// Forgets the oldest frame.
    pub fn pop_front(&mut self) {
        if self.count > 0 {
            self.first = (self.first + 1) % self.recs.len();
            self.count -= 1;
        }
        if self.count == 0 {
            self.tail = 0;
        }
    }

    /// Forgets every frame (the storage stays).
    pub fn clear(&mut self) {
        self.first = 0;
        self.count = 0;
        self.tail = 0;
        self.open = None;
    }

    /// Where `n` bytes fit after the newest record without reaching the
    /// oldest, if anywhere.
    fn place(&self, n: usize) -> Option<usize> {
        let cap = self.bytes.len();
        if self.count == 0 {
            return (n <= cap).then_some(0);
        }
        let oldest = self.rec(0).off;
        if self.tail > oldest {
            // Free: [tail, cap) and [0, oldest).
            if self.tail + n <= cap {
                Some(self.tail)
            } else {
                (n <= oldest).then_some(0)
            }
        } else {
            // Wrapped: free is [tail, oldest).
            (self.tail + n <= oldest).then_some(self.tail)
        }
    }
}

impl FrameSink for FrameSlab {
    fn begin(&mut self, len: usize) -> Option<&mut [u8]> {
        self.open = None;
        if self.count == self.recs.len() {
            return None;
        }
        // At least one byte, so that a record always moves the tail.
        let off = self.place(len.max(1))?;
        self.open = Some((off, len));
        Some(&mut self.bytes[off..off + len])
    }

    fn commit(&mut self, csum: Csum, gso: Option<Gso>) {
        let Some((off, len)) = self.open.take() else {
            return;
        };
        let at = (self.first + self.count) % self.recs.len();
        self.recs[at] = Rec {
            off,
            len,
            csum,
            gso,
        };
        self.count += 1;
        self.tail = off + len.max(1);
    }

    fn frames(&self) -> usize {
        self.count
    }

    fn rollback_to(&mut self, frames: usize) {
        self.open = None;
        if frames >= self.count {
            return;
        }
        self.count = frames;
        self.tail = match frames {
            0 => 0,
            n => {
                let r = self.rec(n - 1);
                r.off + r.len.max(1)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(s: &mut FrameSlab, fill: u8, len: usize) -> bool {
        match s.begin(len) {
            Some(b) => {
                b.fill(fill);
                s.commit(Csum::Valid, None);
                true
            }
            None => false,
        }
    }

    fn pop(s: &mut FrameSlab) -> Vec<u8> {
        let v = s.front().expect("a frame").data.to_vec();
        s.pop_front();
        v
    }

    #[test]
    fn frames_come_out_intact_in_order_across_the_wrap() {
        let mut s = FrameSlab::new(8, 100);
        assert!(push(&mut s, 1, 40));
        assert!(push(&mut s, 2, 40));
        assert!(
            !push(&mut s, 3, 40),
            "only 20 bytes left at the end, none before"
        );
        assert_eq!(pop(&mut s), vec![1; 40]);
        // 20 left at the end: the record starts again at 0.
        assert!(push(&mut s, 3, 30));
        assert!(
            !push(&mut s, 4, 20),
            "between the tail and the oldest: 10 bytes"
        );
        assert!(push(&mut s, 4, 10));
        assert_eq!(pop(&mut s), vec![2; 40]);
        assert_eq!(pop(&mut s), vec![3; 30]);
        assert_eq!(pop(&mut s), vec![4; 10]);
        assert!(s.is_empty());
        assert!(
            push(&mut s, 5, 100),
            "an empty slab takes a frame of its whole size"
        );
    }

    #[test]
    fn the_descriptor_ring_bounds_the_frames_too() {
        let mut s = FrameSlab::new(2, 1000);
        assert!(push(&mut s, 1, 0));
        assert!(push(&mut s, 2, 1));
        assert!(!push(&mut s, 3, 1));
        assert_eq!(pop(&mut s), Vec::<u8>::new());
        assert!(push(&mut s, 3, 1));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_rollback_forgets_the_newest_frames_and_their_bytes() {
        let mut s = FrameSlab::new(8, 100);
        assert!(push(&mut s, 1, 30));
        let mark = s.frames();
        assert!(push(&mut s, 2, 30));
        assert!(push(&mut s, 3, 30));
        s.rollback_to(mark);
        assert_eq!(s.len(), 1);
        assert!(push(&mut s, 4, 70), "the rolled-back bytes are free again");
        assert_eq!(pop(&mut s), vec![1; 30]);
        assert_eq!(pop(&mut s), vec![4; 70]);
    }
}

#[cfg(test)]
mod shaping_tests {
    use super::*;
    use abi::SharedMemory;
    use frame::offload::{checksum_setup, prepare, prepare_frame, Offloads};
    use frame::packet::{FrameRef, Packet};
    use frame::testing::{gso_packet, tcp4, v4, v6, Rng};
    use std::os::fd::AsFd;

    /// The same frame with its first 100 bytes private and the rest in a
    /// shared mapping, as a gathered TX frame from another guest.
    fn split<'a>(
        p: &'a Packet,
        map: &'a sys::Mapping,
        segs: &'a [(usize, usize); 1],
    ) -> FrameRef<'a> {
        FrameRef {
            head: &p.data[..100],
            body: &[],
            map: Some(map),
            segs,
            len: p.data.len(),
            csum: p.csum,
            gso: p.gso,
            vlan: None,
        }
    }

    #[test]
    fn shaping_into_the_slab_gives_what_prepare_gives_and_allocates_nothing() {
        let payload = Rng::new(5).bytes(20_000);
        let mut partial = Packet::new(tcp4(&payload[..999]));
        checksum_setup(&mut partial, true).unwrap();
        let mut unset = gso_packet(&v6(), &payload, 0x18, 1400);
        unset.csum = Csum::Unknown;
        let cases = [
            (gso_packet(&v4(), &payload, 0x18, 1448), Offloads::NONE),
            (
                gso_packet(&v6(), &payload[..5000], 0x19, 1000),
                Offloads::NONE,
            ),
            (unset, Offloads::ALL),
            (partial, Offloads::NONE),
        ];
        let fd = sys::Memfd::create("t-slab", 1 << 16, false).unwrap();
        let map = sys::Mapping::new(fd.as_fd(), 0, 1 << 16, true).unwrap();
        let mut slab = FrameSlab::new(64, 1 << 16);
        for (p, caps) in cases {
            let mut want = Vec::new();
            prepare(p.clone(), caps, &mut want).unwrap();
            map.write_bytes(0, &p.data[100..]);
            let segs = [(0, p.data.len() - 100)];
            let private = FrameRef::private(&p.data, p.csum, p.gso);
            for f in [private, split(&p, &map, &segs)] {
                let mut kept = None;
                let n = allocation_counter::measure(|| {
                    kept = Some(prepare_frame(&f, caps, &mut slab));
                });
                assert_eq!(kept, Some(Ok(true)));
                assert_eq!(n.count_total, 0, "shaping {caps:?} allocated");
                for w in &want {
                    let got = slab.front().expect("a frame");
                    assert_eq!((got.csum, got.gso), (w.csum, w.gso));
                    assert_eq!(got.data, &w.data[..]);
                    slab.pop_front();
                }
                assert!(slab.is_empty());
            }
        }
    }

    #[test]
    fn a_gso_packet_that_does_not_fit_leaves_nothing_behind() {
        let payload = Rng::new(6).bytes(20_000);
        let p = gso_packet(&v4(), &payload, 0x18, 1448);
        let mut slab = FrameSlab::new(8, 1 << 16);
        let f = FrameRef::private(&p.data, p.csum, p.gso);
        assert_eq!(prepare_frame(&f, Offloads::NONE, &mut slab), Ok(false));
        assert!(slab.is_empty(), "14 segments do not fit 8 descriptors");
        let mut bad = p.data.clone();
        bad.truncate(40);
        let f = FrameRef::private(&bad, p.csum, p.gso);
        assert!(prepare_frame(&f, Offloads::NONE, &mut slab).is_err());
        assert!(slab.is_empty());
    }
}
