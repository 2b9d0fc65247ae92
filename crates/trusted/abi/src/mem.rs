//! The memory contract between wire formats and the pages they live in.
//!
//! Shared pages may be written by another, untrusted domain at any moment
//! (docs/ARCHITECTURE.md, "Rules the code keeps"). So nothing here hands out `&T` or `&[u8]`
//! into shared memory: values are copied out with volatile or atomic loads and
//! validated afterwards.
//!
//! Two kinds of accessor, in the manner of rust-vmm's vm-memory:
//! - the checked ones (`try_read_bytes`, `try_write_bytes`, `try_fill`, and
//!   `sys::Mapping::try_copy_from`) return a [`MemError`] for an access out
//!   of bounds, into a read-only region or unaligned. Every offset derived
//!   from a peer's value (a grant's frame, a request's offset) goes through
//!   them, or through a [`Pfn`] and [`FrameRange`] checked when made, and an
//!   error becomes a refusal, never a panic;
//! - the infallible ones (`read_bytes`, `load_u32`, ...) are for offsets
//!   fixed by a layout splitnet chose (a ring's indices inside its page, a
//!   counter's slot, a table entry whose index was checked against the
//!   table's size). An out-of-range offset there is a bug in splitnet, and
//!   panics.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Xen's page size (`XEN_PAGE_SIZE`): a frame of a domain's pool, and the
/// page a ring or a grant covers.
pub const PAGE_SIZE: usize = 4096;

/// Why an access to shared memory was refused. `Copy` and allocation-free,
/// so the data path can return it per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// `len` bytes at `off` do not fit in a region of `size` bytes.
    #[error("access {off}+{len} outside a {size}-byte region")]
    OutOfBounds { off: usize, len: usize, size: usize },
    /// A store into a region mapped read-only.
    #[error("store at {off} into a read-only region")]
    ReadOnly { off: usize },
    /// An atomic access not naturally aligned.
    #[error("unaligned {align}-byte atomic at {off}")]
    Unaligned { off: usize, align: usize },
    /// A frame number outside the pool it should name a frame of.
    #[error("frame {frame} outside a pool of {frames} frames")]
    BadFrame { frame: u64, frames: u32 },
}

impl MemError {
    /// The counter name of a refusal for this reason.
    pub fn reason(self) -> &'static str {
        match self {
            MemError::OutOfBounds { .. } => "mem_out_of_bounds",
            MemError::ReadOnly { .. } => "mem_read_only",
            MemError::Unaligned { .. } => "mem_unaligned",
            MemError::BadFrame { .. } => "bad_frame",
        }
    }
}

/// `Ok` when `len` bytes at `off` lie within `size` bytes (no overflow).
#[inline]
pub fn check_range(off: usize, len: usize, size: usize) -> Result<(), MemError> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MemError::OutOfBounds { off, len, size }),
    }
}

/// A frame number within one domain's pool (Xen's pfn or gmfn): an index
/// of 4 KiB pages, never a byte offset. One comes from a peer (a grant
/// entry, an NGM translation, a copy op) as a raw integer and becomes a
/// `Pfn` only through [`Pfn::checked`] against the pool's size; splitnet's
/// own frame arithmetic uses [`Pfn::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(u32);

impl Pfn {
    /// Frame `raw` of a pool splitnet laid out itself (its own buffers).
    pub const fn new(raw: u32) -> Pfn {
        Pfn(raw)
    }

    /// Frame `raw`, as a peer named it, if it lies in a pool of `frames`.
    #[inline]
    pub fn checked(raw: u64, frames: u32) -> Result<Pfn, MemError> {
        if raw < u64::from(frames) {
            Ok(Pfn(raw as u32))
        } else {
            Err(MemError::BadFrame { frame: raw, frames })
        }
    }

    /// The frame number.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The byte offset of the frame's first byte in its pool.
    pub const fn base(self) -> usize {
        self.0 as usize * PAGE_SIZE
    }

    /// The same, as a file offset (to map the frame alone).
    pub const fn file_offset(self) -> u64 {
        self.0 as u64 * PAGE_SIZE as u64
    }
}

impl std::fmt::Display for Pfn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "frame {}", self.0)
    }
}

/// A byte range inside one frame: `offset + len <= PAGE_SIZE`, checked
/// when made, so [`FrameRange::pool_offset`] stays inside the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRange {
    pfn: Pfn,
    offset: u16,
    len: u16,
}

impl FrameRange {
    /// `len` bytes at `offset` in frame `pfn`; refused when they leave the page.
    #[inline]
    pub fn new(pfn: Pfn, offset: usize, len: usize) -> Result<FrameRange, MemError> {
        check_range(offset, len, PAGE_SIZE)?;
        Ok(FrameRange {
            pfn,
            offset: offset as u16,
            len: len as u16,
        })
    }

    /// The whole frame.
    pub const fn whole(pfn: Pfn) -> FrameRange {
        FrameRange {
            pfn,
            offset: 0,
            len: PAGE_SIZE as u16,
        }
    }

    /// The frame.
    pub const fn pfn(self) -> Pfn {
        self.pfn
    }

    /// The byte offset of the range in its pool.
    pub const fn pool_offset(self) -> usize {
        self.pfn.base() + self.offset as usize
    }

    /// Its length in bytes.
    pub const fn len(self) -> usize {
        self.len as usize
    }

    /// Whether it holds no byte.
    pub const fn is_empty(self) -> bool {
        self.len == 0
    }
}

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
    /// Whether stores are allowed; a read-only mapping says no.
    fn is_writable(&self) -> bool {
        true
    }
    /// `Ok` when `len` bytes at `off` lie inside the region.
    #[inline]
    fn check_range(&self, off: usize, len: usize) -> Result<(), MemError> {
        check_range(off, len, self.len())
    }
    /// `Ok` when `len` bytes at `off` lie inside the region and it is writable.
    #[inline]
    fn check_store(&self, off: usize, len: usize) -> Result<(), MemError> {
        if !self.is_writable() {
            return Err(MemError::ReadOnly { off });
        }
        self.check_range(off, len)
    }
    /// [`SharedMemory::read_bytes`], refused with an error instead of a
    /// panic: for an offset derived from a peer's value.
    fn try_read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        self.check_range(off, dst.len())?;
        self.read_bytes(off, dst);
        Ok(())
    }
    /// [`SharedMemory::write_bytes`], refused with an error instead of a panic.
    fn try_write_bytes(&self, off: usize, src: &[u8]) -> Result<(), MemError> {
        self.check_store(off, src.len())?;
        self.write_bytes(off, src);
        Ok(())
    }
    /// [`SharedMemory::fill`], refused with an error instead of a panic.
    fn try_fill(&self, off: usize, len: usize, byte: u8) -> Result<(), MemError> {
        self.check_store(off, len)?;
        self.fill(off, len, byte);
        Ok(())
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
            fn is_writable(&self) -> bool {
                (**self).is_writable()
            }
            fn check_range(&self, off: usize, len: usize) -> Result<(), MemError> {
                (**self).check_range(off, len)
            }
            fn check_store(&self, off: usize, len: usize) -> Result<(), MemError> {
                (**self).check_store(off, len)
            }
            fn try_read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
                (**self).try_read_bytes(off, dst)
            }
            fn try_write_bytes(&self, off: usize, src: &[u8]) -> Result<(), MemError> {
                (**self).try_write_bytes(off, src)
            }
            fn try_fill(&self, off: usize, len: usize, byte: u8) -> Result<(), MemError> {
                (**self).try_fill(off, len, byte)
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
    fn is_writable(&self) -> bool {
        self.mem.is_writable()
    }
    fn try_read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        self.check_range(off, dst.len())?;
        self.mem.try_read_bytes(self.base + off, dst)
    }
    fn try_write_bytes(&self, off: usize, src: &[u8]) -> Result<(), MemError> {
        self.check_range(off, src.len())?;
        self.mem.try_write_bytes(self.base + off, src)
    }
    fn try_fill(&self, off: usize, len: usize, byte: u8) -> Result<(), MemError> {
        self.check_range(off, len)?;
        self.mem.try_fill(self.base + off, len, byte)
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
    fn window_checked_accessors_refuse_instead_of_panicking() {
        let m = HeapMemory::new(64);
        let w = Window::new(&m, 16, 16).unwrap();
        let mut b = [0u8; 4];
        assert_eq!(
            w.try_read_bytes(14, &mut b),
            Err(MemError::OutOfBounds {
                off: 14,
                len: 4,
                size: 16
            })
        );
        assert!(w.try_write_bytes(usize::MAX, &b).is_err(), "no overflow");
        assert!(w.try_fill(10, 7, 0).is_err());
        w.try_write_bytes(12, &[1, 2, 3, 4]).unwrap();
        m.try_read_bytes(28, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
    }

    #[test]
    fn frame_numbers_from_a_peer_are_checked_against_the_pool() {
        assert_eq!(Pfn::checked(3, 4).map(Pfn::base), Ok(3 * PAGE_SIZE));
        assert_eq!(
            Pfn::checked(4, 4),
            Err(MemError::BadFrame {
                frame: 4,
                frames: 4
            })
        );
        assert!(Pfn::checked(u64::from(u32::MAX) + 5, u32::MAX).is_err());
        let r = FrameRange::new(Pfn::new(2), 100, 3996).unwrap();
        assert_eq!((r.pool_offset(), r.len()), (2 * PAGE_SIZE + 100, 3996));
        assert!(FrameRange::new(Pfn::new(2), 100, 3997).is_err());
        assert!(FrameRange::new(Pfn::new(2), usize::MAX, 2).is_err());
        assert_eq!(FrameRange::whole(Pfn::new(1)).len(), PAGE_SIZE);
        assert_eq!(MemError::ReadOnly { off: 0 }.reason(), "mem_read_only");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn window_refuses_access_past_its_end() {
        let m = HeapMemory::new(64);
        Window::new(&m, 16, 16).unwrap().read_u32(14);
    }
}
