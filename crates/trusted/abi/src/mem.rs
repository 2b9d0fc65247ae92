//! The memory contract between wire formats and the pages they live in.
//!
//! Shared pages may be written by another, untrusted domain at any moment
//! (docs/ARCHITECTURE.md, "Rules the code keeps"). So nothing here hands out `&T` or `&[u8]`
//! into shared memory: values are copied out with volatile or atomic loads and
//! validated afterwards. Offsets are the caller's (trusted) arithmetic; an
//! out-of-range offset is a bug in splitnet, not guest input, and panics.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Byte-addressed memory that a peer may read and write concurrently.
///
/// Multi-byte values are native-endian (x86-64 little-endian), as in Xen's
/// shared structures. Atomic accessors require natural alignment.
pub trait SharedMemory {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `off` out of shared memory.
    fn read_bytes(&self, off: usize, dst: &mut [u8]);
    /// Copies `src` into shared memory at `off`.
    fn write_bytes(&self, off: usize, src: &[u8]);
    /// Fills `len` bytes at `off` with `byte`.
    fn fill(&self, off: usize, len: usize, byte: u8) {
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write_bytes(off + done, &chunk[..n]);
            done += n;
        }
    }
    /// Atomic 32-bit load with acquire ordering (`off` 4-aligned).
    fn load_u32(&self, off: usize) -> u32;
    /// Atomic 32-bit store with release ordering (`off` 4-aligned).
    fn store_u32(&self, off: usize, v: u32);
    /// Atomic 16-bit compare-and-swap, sequentially consistent (`off` 2-aligned).
    /// Returns the previous value: `Ok(old)` on success, `Err(actual)` otherwise.
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16>;
    /// Atomic 16-bit load, sequentially consistent (`off` 2-aligned).
    fn load_u16(&self, off: usize) -> u16;
    /// Atomic 32-bit swap, sequentially consistent (`off` 4-aligned): reads
    /// and replaces a word in one step, so no store in between is lost.
    fn swap_u32(&self, off: usize, v: u32) -> u32;
    /// Atomic 32-bit compare-and-swap, sequentially consistent (`off` 4-aligned).
    /// Returns the previous value: `Ok(old)` on success, `Err(actual)` otherwise.
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32>;
    /// Atomic 32-bit add, wrapping, sequentially consistent (`off` 4-aligned).
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32;
    /// Atomic 64-bit load, sequentially consistent (`off` 8-aligned): one
    /// word a peer publishes whole, such as a translation-table entry.
    fn load_u64_seqcst(&self, off: usize) -> u64;
    /// Atomic 64-bit store, sequentially consistent (`off` 8-aligned).
    fn store_u64_seqcst(&self, off: usize, v: u64);
    /// A full fence (`fence(SeqCst)`) between a store to one word and a load
    /// of another, on both sides of a Dekker-style handshake (ring event
    /// indices, event-channel pending/mask, NGM use counts). A method, not a
    /// free function, so a model checker's memory can supply its own.
    fn fence_seqcst(&self);

    /// Reads a native-endian u16 without atomicity guarantees.
    fn read_u16(&self, off: usize) -> u16 {
        let mut b = [0u8; 2];
        self.read_bytes(off, &mut b);
        u16::from_ne_bytes(b)
    }
    /// Reads a native-endian u32 without atomicity guarantees.
    fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read_bytes(off, &mut b);
        u32::from_ne_bytes(b)
    }
    /// Writes a native-endian u16.
    fn write_u16(&self, off: usize, v: u16) {
        self.write_bytes(off, &v.to_ne_bytes());
    }
    /// Writes a native-endian u32.
    fn write_u32(&self, off: usize, v: u32) {
        self.write_bytes(off, &v.to_ne_bytes());
    }
}

/// Forwards every method of [`SharedMemory`] through a pointer type, so
/// `&M` and `Arc<M>` (one region used by both ends of a ring on different
/// threads) work wherever `M` does.
macro_rules! forward_shared_memory {
    ($($ptr:ty),*) => {$(
        impl<M: SharedMemory + ?Sized> SharedMemory for $ptr {
            fn len(&self) -> usize {
                (**self).len()
            }
            fn read_bytes(&self, off: usize, dst: &mut [u8]) {
                (**self).read_bytes(off, dst)
            }
            fn write_bytes(&self, off: usize, src: &[u8]) {
                (**self).write_bytes(off, src)
            }
            fn fill(&self, off: usize, len: usize, byte: u8) {
                (**self).fill(off, len, byte)
            }
            fn load_u32(&self, off: usize) -> u32 {
                (**self).load_u32(off)
            }
            fn store_u32(&self, off: usize, v: u32) {
                (**self).store_u32(off, v)
            }
            fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
                (**self).cmpxchg_u16(off, old, new)
            }
            fn load_u16(&self, off: usize) -> u16 {
                (**self).load_u16(off)
            }
            fn swap_u32(&self, off: usize, v: u32) -> u32 {
                (**self).swap_u32(off, v)
            }
            fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
                (**self).cmpxchg_u32(off, old, new)
            }
            fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
                (**self).fetch_add_u32(off, v)
            }
            fn load_u64_seqcst(&self, off: usize) -> u64 {
                (**self).load_u64_seqcst(off)
            }
            fn store_u64_seqcst(&self, off: usize, v: u64) {
                (**self).store_u64_seqcst(off, v)
            }
            fn fence_seqcst(&self) {
                (**self).fence_seqcst()
            }
        }
    )*};
}

forward_shared_memory!(&M, std::sync::Arc<M>);

/// Process-local memory with the same semantics, for tests and in-process peers.
/// Built from atomic 64-bit words, so it needs no `unsafe`; smaller accesses
/// work on their lane of a word.
pub struct HeapMemory {
    words: Box<[AtomicU64]>,
    len: usize,
}

impl HeapMemory {
    /// Zeroed memory of `len` bytes.
    pub fn new(len: usize) -> Self {
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        HeapMemory { words, len }
    }

    /// The word holding the naturally aligned `size` bytes at `off`, and
    /// the shift and mask of their lane in it (native-endian).
    fn lane(&self, off: usize, size: usize) -> (&AtomicU64, u32, u64) {
        assert!(
            off.checked_add(size).is_some_and(|end| end <= self.len),
            "HeapMemory access {off}+{size} outside {} bytes",
            self.len
        );
        assert_eq!(off % size, 0, "unaligned {size}-byte atomic at {off}");
        let byte = if cfg!(target_endian = "little") {
            off % 8
        } else {
            8 - off % 8 - size
        };
        let mask = u64::MAX >> (64 - 8 * size);
        (&self.words[off / 8], 8 * byte as u32, mask << (8 * byte))
    }

    fn get(&self, off: usize, size: usize, order: Ordering) -> u64 {
        let (w, shift, mask) = self.lane(off, size);
        (w.load(order) & mask) >> shift
    }

    /// Replaces the lane by `f(lane)` unless `f` says no; the lane's old
    /// value, `Ok` if replaced.
    fn update(
        &self,
        off: usize,
        size: usize,
        order: Ordering,
        f: impl Fn(u64) -> Option<u64>,
    ) -> Result<u64, u64> {
        let (w, shift, mask) = self.lane(off, size);
        let fail = if order == Ordering::SeqCst {
            Ordering::SeqCst
        } else {
            Ordering::Relaxed
        };
        w.fetch_update(order, fail, |word| {
            f((word & mask) >> shift).map(|v| (word & !mask) | ((v << shift) & mask))
        })
        .map(|word| (word & mask) >> shift)
        .map_err(|word| (word & mask) >> shift)
    }

    fn set(&self, off: usize, size: usize, order: Ordering, v: u64) -> u64 {
        let old = self.update(off, size, order, |_| Some(v));
        old.unwrap_or_else(|o| o)
    }
}

impl SharedMemory for HeapMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.get(off + i, 1, Ordering::Relaxed) as u8;
        }
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        for (i, s) in src.iter().enumerate() {
            self.set(off + i, 1, Ordering::Relaxed, u64::from(*s));
        }
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.get(off, 4, Ordering::Acquire) as u32
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.set(off, 4, Ordering::Release, u64::from(v));
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        let r = self.update(off, 2, Ordering::SeqCst, |cur| {
            (cur == u64::from(old)).then_some(u64::from(new))
        });
        r.map(|v| v as u16).map_err(|v| v as u16)
    }
    fn load_u16(&self, off: usize) -> u16 {
        self.get(off, 2, Ordering::SeqCst) as u16
    }
    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        self.set(off, 4, Ordering::SeqCst, u64::from(v)) as u32
    }
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        let r = self.update(off, 4, Ordering::SeqCst, |cur| {
            (cur == u64::from(old)).then_some(u64::from(new))
        });
        r.map(|v| v as u32).map_err(|v| v as u32)
    }
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        let r = self.update(off, 4, Ordering::SeqCst, |cur| {
            Some(u64::from((cur as u32).wrapping_add(v)))
        });
        r.unwrap_or_else(|o| o) as u32
    }
    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.get(off, 8, Ordering::SeqCst)
    }
    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.set(off, 8, Ordering::SeqCst, v);
    }
    fn fence_seqcst(&self) {
        fence(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_round_trips() {
        let m = HeapMemory::new(10);
        m.write_bytes(1, &[1, 2, 3, 4, 5]);
        let mut b = [0u8; 5];
        m.read_bytes(1, &mut b);
        assert_eq!(b, [1, 2, 3, 4, 5]);
        m.store_u32(4, 0xdead_beef);
        assert_eq!(m.load_u32(4), 0xdead_beef);
        assert_eq!(m.read_u32(4), 0xdead_beef);
        m.write_u16(6, 7);
        assert_eq!(m.load_u16(6), 7);
        assert_eq!(m.cmpxchg_u16(6, 7, 9), Ok(7));
        assert_eq!(m.cmpxchg_u16(6, 7, 1), Err(9));
        assert_eq!(m.read_u16(6), 9);
        assert_eq!(m.read_u16(4), 0xbeef);
    }

    #[test]
    fn heap_memory_words_stay_in_their_lane() {
        let m = HeapMemory::new(16);
        m.store_u32(0, 1);
        assert_eq!(m.swap_u32(4, 7), 0);
        assert_eq!(m.swap_u32(4, 0), 7);
        assert_eq!(m.cmpxchg_u32(4, 1, 2), Err(0));
        assert_eq!(m.cmpxchg_u32(4, 0, u32::MAX), Ok(0));
        assert_eq!(m.fetch_add_u32(4, 2), u32::MAX);
        assert_eq!(
            (m.load_u32(0), m.load_u32(4)),
            (1, 1),
            "the add wrapped in its lane"
        );
        m.store_u64_seqcst(8, 0x0102_0304_0506_0708);
        assert_eq!(m.load_u64_seqcst(8), 0x0102_0304_0506_0708);
        assert_eq!(m.load_u64_seqcst(0), 1 | 1 << 32);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn heap_memory_rejects_out_of_range() {
        HeapMemory::new(8).read_u32(6);
    }
}

/// A sub-range of a shared region, e.g. the one frame of a pool that holds a
/// ring. Offsets are relative to the window and checked against its length.
pub struct Window<M> {
    mem: M,
    base: usize,
    len: usize,
}

impl<M: SharedMemory> Window<M> {
    /// `len` bytes of `mem` starting at `base`; None if that runs past the end.
    pub fn new(mem: M, base: usize, len: usize) -> Option<Self> {
        let end = base.checked_add(len)?;
        (end <= mem.len()).then_some(Window { mem, base, len })
    }

    fn at(&self, off: usize, n: usize) -> usize {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len),
            "window access {off}+{n} outside {} bytes",
            self.len
        );
        self.base + off
    }
}

impl<M: SharedMemory> SharedMemory for Window<M> {
    fn len(&self) -> usize {
        self.len
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.mem.read_bytes(self.at(off, dst.len()), dst)
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        self.mem.write_bytes(self.at(off, src.len()), src)
    }
    fn fill(&self, off: usize, len: usize, byte: u8) {
        self.mem.fill(self.at(off, len), len, byte)
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.mem.load_u32(self.at(off, 4))
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.mem.store_u32(self.at(off, 4), v)
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        self.mem.cmpxchg_u16(self.at(off, 2), old, new)
    }
    fn load_u16(&self, off: usize) -> u16 {
        self.mem.load_u16(self.at(off, 2))
    }
    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        self.mem.swap_u32(self.at(off, 4), v)
    }
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        self.mem.cmpxchg_u32(self.at(off, 4), old, new)
    }
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        self.mem.fetch_add_u32(self.at(off, 4), v)
    }
    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.mem.load_u64_seqcst(self.at(off, 8))
    }
    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.mem.store_u64_seqcst(self.at(off, 8), v)
    }
    fn fence_seqcst(&self) {
        self.mem.fence_seqcst()
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn window_offsets_are_relative_and_bounded() {
        let m = HeapMemory::new(64);
        assert!(Window::new(&m, 60, 8).is_none());
        let w = Window::new(&m, 16, 16).unwrap();
        w.store_u32(4, 7);
        assert_eq!(m.load_u32(20), 7);
        assert_eq!(w.len(), 16);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn window_refuses_access_past_its_end() {
        let m = HeapMemory::new(64);
        Window::new(&m, 16, 16).unwrap().read_u32(14);
    }
}
