//! The memory contract between wire formats and the pages they live in.
//!
//! Shared pages may be written by another, untrusted domain at any moment
//! (docs/ARCHITECTURE.md, "Rules the code keeps"). So nothing here hands out `&T` or `&[u8]`
//! into shared memory: values are copied out with volatile or atomic loads and
//! validated afterwards. Offsets are the caller's (trusted) arithmetic; an
//! out-of-range offset is a bug in splitnet, not guest input, and panics.

use std::sync::atomic::{AtomicU32, Ordering};

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
        }
    )*};
}

forward_shared_memory!(&M, std::sync::Arc<M>);

/// Process-local memory with the same semantics, for tests and in-process peers.
/// Built from atomic words, so it needs no `unsafe`.
pub struct HeapMemory {
    words: Box<[AtomicU32]>,
    len: usize,
}

impl HeapMemory {
    /// Zeroed memory of `len` bytes.
    pub fn new(len: usize) -> Self {
        let words = (0..len.div_ceil(4)).map(|_| AtomicU32::new(0)).collect();
        HeapMemory { words, len }
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "HeapMemory access {off}+{n} outside {} bytes",
            self.len
        );
    }

    fn byte(&self, i: usize) -> u8 {
        self.words[i / 4].load(Ordering::Relaxed).to_ne_bytes()[i % 4]
    }

    fn set_byte(&self, i: usize, b: u8) {
        let w = &self.words[i / 4];
        let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            let mut bytes = v.to_ne_bytes();
            bytes[i % 4] = b;
            Some(u32::from_ne_bytes(bytes))
        });
    }

    fn half_shift(off: usize) -> u32 {
        let lane = (off % 4) / 2;
        // The lane's bit position within the native-endian word.
        let probe = u32::from_ne_bytes(if lane == 0 {
            [1, 0, 0, 0]
        } else {
            [0, 0, 1, 0]
        });
        probe.trailing_zeros()
    }
}

impl SharedMemory for HeapMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len());
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.byte(off + i);
        }
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        for (i, s) in src.iter().enumerate() {
            self.set_byte(off + i, *s);
        }
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.check(off, 4);
        assert_eq!(off % 4, 0, "unaligned atomic u32 at {off}");
        self.words[off / 4].load(Ordering::Acquire)
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.check(off, 4);
        assert_eq!(off % 4, 0, "unaligned atomic u32 at {off}");
        self.words[off / 4].store(v, Ordering::Release)
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        self.check(off, 2);
        assert_eq!(off % 2, 0, "unaligned atomic u16 at {off}");
        let shift = Self::half_shift(off);
        let mask = 0xffffu32 << shift;
        let w = &self.words[off / 4];
        let mut cur = w.load(Ordering::SeqCst);
        loop {
            let actual = ((cur & mask) >> shift) as u16;
            if actual != old {
                return Err(actual);
            }
            let next = (cur & !mask) | ((new as u32) << shift);
            match w.compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(old),
                Err(v) => cur = v,
            }
        }
    }
    fn load_u16(&self, off: usize) -> u16 {
        self.check(off, 2);
        assert_eq!(off % 2, 0, "unaligned atomic u16 at {off}");
        let shift = Self::half_shift(off);
        (self.words[off / 4].load(Ordering::SeqCst) >> shift) as u16
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
