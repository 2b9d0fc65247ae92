use crate::cvt;
use abi::{MemError, SharedMemory};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// A shared mapping of (part of) a memory file.
///
/// Another process may write it at any time, so it is only ever accessed
/// through byte copies and atomics; no `&[u8]` into it is ever created.
/// Every access is checked once against the bounds (and, for a store,
/// against `writable`). The checked accessors (`try_*`, and
/// [`Mapping::try_copy_from`]) return a [`MemError`]: they are for offsets
/// derived from a peer's values. The infallible ones panic instead, and
/// are for offsets a layout fixed (see `abi::mem`).
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    /// What `munmap` takes: the whole region mapped, which is larger than
    /// `ptr..ptr + len` when a hugetlb file had to be mapped in whole
    /// 2 MiB pages.
    region: (NonNull<u8>, usize),
}

// SAFETY: the mapping is plain shared memory; all access goes through atomics
// or opaque copies, which are sound to perform from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; there is no interior state besides the memory itself.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` starting at `offset` (page-aligned), shared.
    /// A read-only descriptor can only be mapped with `writable == false`.
    /// A hugetlb file (a pool on 2 MiB pages) maps only in whole huge
    /// pages: a smaller or unaligned range is mapped within the huge pages
    /// that hold it, and only the range asked for is accessible.
    pub fn new(fd: BorrowedFd<'_>, offset: u64, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mmap: zero length",
            ));
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|_| offset.is_multiple_of(crate::PAGE_SIZE as u64))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "mmap: offset not page-aligned, or past the end of the address space",
                )
            })?;
        match Mapping::map(fd, offset, len, writable) {
            // cvt keeps the kind, not the errno: EINVAL is InvalidInput.
            // With the offset page-aligned (checked above), only a hugetlb
            // file refuses a mapping this way. (fstatfs, which would say
            // so, is outside a jailed guest's system calls.)
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                let huge = crate::huge::HUGE_PAGE as u64;
                let start = offset / huge * huge;
                let end = end.next_multiple_of(huge);
                let mut m = Mapping::map(fd, start, (end - start) as usize, writable)?;
                // SAFETY: offset - start < end - start, inside the region just mapped.
                let p = unsafe { m.ptr.as_ptr().add((offset - start) as usize) };
                m.ptr = NonNull::new(p).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
                m.len = len;
                Ok(m)
            }
            r => r,
        }
    }

    fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = prot(writable);
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) aliases no Rust
        // object; the descriptor is borrowed for the duration of the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            cvt(-1, "mmap")?;
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping {
            ptr,
            len,
            writable,
            region: (ptr, len),
        })
    }

    /// Asks for transparent huge pages under this mapping's whole 2 MiB
    /// pages (a shared mapping follows `shmem_enabled`, see
    /// [`crate::huge`]) and faults the whole mapping in through it
    /// (`MADV_POPULATE_WRITE`, which changes no byte), so that the memory
    /// file holds huge pages before a peer maps it. Returns the bytes
    /// advised (0 when no whole huge page fits).
    pub fn advise_huge(&self) -> io::Result<usize> {
        use crate::huge::{aligned_part, madvise_huge};
        let (start, len) = aligned_part(self.ptr.as_ptr() as usize, self.len);
        if len == 0 {
            return Ok(0);
        }
        madvise_huge(start, len)?;
        if self.writable {
            self.populate()?;
        }
        Ok(len)
    }

    /// Takes [`Mapping::advise_huge`]'s advice back (`MADV_NOHUGEPAGE`), so
    /// that khugepaged never collapses the small pages of a range that did
    /// not get huge ones: a collapse unmaps the small pages from every
    /// process, a peer's pool mirror among them.
    pub fn advise_small(&self) -> io::Result<()> {
        // SAFETY: the range is this mapping's own; the advice changes only
        // how the kernel may back it later, never its contents.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_NOHUGEPAGE) };
        cvt(r.into(), "madvise(MADV_NOHUGEPAGE)").map(drop)
    }

    /// Bytes of this mapping the kernel maps with transparent 2 MiB
    /// entries (`/proc/self/smaps`; hugetlb pages are not counted).
    pub fn huge_mapped(&self) -> io::Result<usize> {
        crate::huge::pmd_mapped(self.region.0.as_ptr() as usize)
    }

    /// Faults every page of this writable mapping in (`MADV_POPULATE_WRITE`),
    /// so the memory file holds all its pages before a peer maps it. A
    /// hugetlb pool needs this: a peer's read-only (private) mapping of a
    /// page not yet in the file would fault in a copy of its own.
    pub fn populate(&self) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "populating a read-only mapping",
            ));
        }
        // SAFETY: the range is this mapping's own; populating only faults
        // pages in (a fresh memory file reads as zeros either way).
        let r = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        cvt(r.into(), "madvise(MADV_POPULATE_WRITE)").map(drop)
    }

    /// Drops this mapping's page-table entries for `len` bytes at `off`,
    /// both page-aligned (`MADV_DONTNEED`): the memory file keeps its pages,
    /// and the next touch maps them again with a fault. A guest that gives
    /// a receive page away for a flip unmaps it so (Menon 2006 §4.2). On
    /// hugetlb pages the kernel takes whole huge pages only (a smaller
    /// range drops nothing, or is refused when unaligned); on a transparent
    /// huge page it splits the mapping.
    pub fn unmap_pages(&self, off: usize, len: usize) -> io::Result<()> {
        let p = self.aligned_range(off, len)?;
        crate::count_syscall();
        // SAFETY: the range is inside this mapping and page-aligned; on a
        // shared file mapping MADV_DONTNEED only drops page-table entries,
        // and every access to the mapping is an opaque copy that faults the
        // page back in, so no reference into it is invalidated.
        let r = unsafe { libc::madvise(p as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        cvt(r.into(), "madvise(MADV_DONTNEED)").map(drop)
    }

    /// Maps `len` bytes at `off`, both page-aligned, back in with one call
    /// (`MADV_POPULATE_WRITE` on a writable mapping, else `..._READ`): a
    /// page the memory file lost is allocated, zeroed and mapped, as a
    /// domain takes replacement pages for a batch it flipped away (Menon
    /// 2006 §4.2), instead of a fault per page.
    pub fn populate_pages(&self, off: usize, len: usize) -> io::Result<()> {
        self.populate_range(off, len, self.writable)
    }

    /// Maps `len` bytes at `off`, both page-aligned, in for reading with
    /// one call (`MADV_POPULATE_READ`), as a domain maps in a batch of
    /// pages it is about to read, instead of a fault per page.
    pub fn populate_pages_for_reading(&self, off: usize, len: usize) -> io::Result<()> {
        self.populate_range(off, len, false)
    }

    fn populate_range(&self, off: usize, len: usize, write: bool) -> io::Result<()> {
        let p = self.aligned_range(off, len)?;
        let advice = if write {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        crate::count_syscall();
        // SAFETY: the range is inside this mapping and page-aligned;
        // populating only faults pages in, changing no byte of the mapping.
        let r = unsafe { libc::madvise(p as *mut libc::c_void, len, advice) };
        cvt(r.into(), "madvise(MADV_POPULATE)").map(drop)
    }

    /// The address of `len` bytes at `off`, both page-aligned and inside.
    fn aligned_range(&self, off: usize, len: usize) -> io::Result<*mut u8> {
        if !off.is_multiple_of(crate::PAGE_SIZE) || !len.is_multiple_of(crate::PAGE_SIZE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a range that is not page-aligned",
            ));
        }
        self.range(off, len)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }

    /// Whether stores are permitted.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Hints that the byte at `off` will be read soon ([`crate::prefetch`]);
    /// an offset outside the mapping is ignored.
    #[inline]
    pub fn prefetch(&self, off: usize) {
        if let Ok(p) = self.range(off, 1) {
            crate::prefetch::prefetch_ptr(p);
        }
    }

    /// The address of `n` bytes at `off`, checked once against the bounds.
    #[inline]
    pub(crate) fn range(&self, off: usize, n: usize) -> Result<*mut u8, MemError> {
        abi::mem::check_range(off, n, self.len)?;
        // SAFETY: off + n <= len (checked just above), so the offset stays
        // inside the mapping.
        let p = unsafe { self.ptr.as_ptr().add(off) };
        Ok(p)
    }

    /// As [`Mapping::range`], for a store: refused on a read-only mapping.
    #[inline]
    fn range_mut(&self, off: usize, n: usize) -> Result<*mut u8, MemError> {
        if !self.writable {
            return Err(MemError::ReadOnly { off });
        }
        self.range(off, n)
    }

    /// Copies `len` bytes from `src` at `src_off` into this mapping at
    /// `dst_off` (the grant-copy primitive). Both ranges are checked; an
    /// error (out of bounds, or this mapping read-only) copies nothing.
    pub fn try_copy_from(
        &self,
        dst_off: usize,
        src: &Mapping,
        src_off: usize,
        len: usize,
    ) -> Result<(), MemError> {
        let d = self.range_mut(dst_off, len)?;
        let s = src.range(src_off, len)?;
        // SAFETY: both ranges were bounds-checked against live mappings. memcpy is
        // an opaque call, so concurrent writes by a peer can only yield torn bytes
        // (validated by the consumer), never miscompiled Rust. Ranges of the same
        // mapping may overlap, so use memmove.
        unsafe { libc::memmove(d.cast(), s.cast(), len) };
        Ok(())
    }

    /// An atomic `T` of `size` bytes at `off`: in bounds and naturally aligned.
    #[inline]
    fn atomic_ptr(&self, off: usize, size: usize) -> Result<*mut u8, MemError> {
        if !off.is_multiple_of(size) {
            return Err(MemError::Unaligned { off, align: size });
        }
        self.range(off, size)
    }

    fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        let p = expect(self.atomic_ptr(off, 4));
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned, the
        // offset checked), and the memory lives as long as `self`; AtomicU32
        // tolerates concurrent access.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        let p = expect(self.atomic_ptr(off, 8));
        // SAFETY: in bounds, 8-aligned (mapping page-aligned, offset checked),
        // lives as long as `self`; AtomicU64 tolerates concurrent access.
        unsafe { AtomicU64::from_ptr(p.cast()) }
    }

    /// Panics unless stores are allowed (the infallible accessors' check).
    #[track_caller]
    fn assert_writable(&self, off: usize) {
        if !self.writable {
            expect::<()>(Err(MemError::ReadOnly { off }));
        }
    }

    /// Relaxed atomic 64-bit load (`off` 8-aligned): a counter another
    /// process may be updating, or may have filled with anything.
    pub fn load_u64(&self, off: usize) -> u64 {
        self.atomic_u64(off).load(Ordering::Relaxed)
    }

    /// Relaxed atomic 64-bit add, wrapping (`off` 8-aligned): a statistics
    /// counter, ordered with nothing else.
    pub fn fetch_add_u64(&self, off: usize, v: u64) -> u64 {
        self.assert_writable(off);
        self.atomic_u64(off).fetch_add(v, Ordering::Relaxed)
    }

    /// Relaxed atomic 64-bit maximum (`off` 8-aligned).
    pub fn fetch_max_u64(&self, off: usize, v: u64) -> u64 {
        self.assert_writable(off);
        self.atomic_u64(off).fetch_max(v, Ordering::Relaxed)
    }

    /// The address of `len` bytes at `off`, bounds-checked (and checked
    /// writable when `write`), for building I/O vectors the kernel reads or
    /// fills. The memory stays valid while `self` lives.
    pub(crate) fn io_range(
        &self,
        off: usize,
        len: usize,
        write: bool,
    ) -> Result<*mut u8, MemError> {
        if write {
            self.range_mut(off, len)
        } else {
            self.range(off, len)
        }
    }

    /// Atomic 16-bit store with release ordering (`off` 2-aligned): an
    /// index that publishes the entries written before it (a virtqueue's
    /// `avail.idx`, virtio 1.x §2.7.13).
    pub fn store_u16(&self, off: usize, v: u16) {
        self.assert_writable(off);
        self.atomic_u16(off).store(v, Ordering::Release)
    }

    /// Atomic 16-bit load with acquire ordering (`off` 2-aligned): an index
    /// a peer publishes (a virtqueue's `used.idx`), after which the entries
    /// it covers may be read.
    pub fn load_u16_acquire(&self, off: usize) -> u16 {
        self.atomic_u16(off).load(Ordering::Acquire)
    }

    fn atomic_u16(&self, off: usize) -> &AtomicU16 {
        let p = expect(self.atomic_ptr(off, 2));
        // SAFETY: in bounds, 2-aligned, lives as long as `self`; atomic access only.
        unsafe { AtomicU16::from_ptr(p.cast()) }
    }
}

/// The protection of a shared mapping of a memory file.
pub(crate) fn prot(writable: bool) -> libc::c_int {
    if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    }
}

/// The infallible accessors' verdict: their offsets come from a layout
/// splitnet fixed, so an error is a bug in splitnet and panics, naming it.
#[track_caller]
#[inline]
fn expect<T>(r: Result<T, MemError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("shared memory: {e} (a fixed-layout access; a bug in splitnet)"),
    }
}

impl SharedMemory for Mapping {
    fn len(&self) -> usize {
        self.len
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        expect(self.try_read_bytes(off, dst))
    }

    fn write_bytes(&self, off: usize, src: &[u8]) {
        expect(self.try_write_bytes(off, src))
    }

    fn fill(&self, off: usize, len: usize, byte: u8) {
        expect(self.try_fill(off, len, byte))
    }

    fn try_read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let s = self.range(off, dst.len())?;
        // SAFETY: source range bounds-checked; `dst` is a private buffer that cannot
        // overlap shared memory we never borrow. memcpy is opaque to the optimizer.
        unsafe { libc::memcpy(dst.as_mut_ptr().cast(), s.cast(), dst.len()) };
        Ok(())
    }

    fn try_write_bytes(&self, off: usize, src: &[u8]) -> Result<(), MemError> {
        let d = self.range_mut(off, src.len())?;
        // SAFETY: destination bounds-checked and writable; `src` is private memory.
        unsafe { libc::memcpy(d.cast(), src.as_ptr().cast(), src.len()) };
        Ok(())
    }

    fn try_fill(&self, off: usize, len: usize, byte: u8) -> Result<(), MemError> {
        let d = self.range_mut(off, len)?;
        // SAFETY: destination bounds-checked and writable.
        unsafe { libc::memset(d.cast(), byte as i32, len) };
        Ok(())
    }

    fn load_u32(&self, off: usize) -> u32 {
        self.atomic_u32(off).load(Ordering::Acquire)
    }

    fn store_u32(&self, off: usize, v: u32) {
        self.assert_writable(off);
        self.atomic_u32(off).store(v, Ordering::Release)
    }

    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        self.assert_writable(off);
        self.atomic_u16(off)
            .compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
    }

    fn load_u16(&self, off: usize) -> u16 {
        self.atomic_u16(off).load(Ordering::SeqCst)
    }

    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        self.assert_writable(off);
        self.atomic_u32(off).swap(v, Ordering::SeqCst)
    }

    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        self.assert_writable(off);
        self.atomic_u32(off)
            .compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
    }

    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        self.assert_writable(off);
        self.atomic_u32(off).fetch_add(v, Ordering::SeqCst)
    }

    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.atomic_u64(off).load(Ordering::SeqCst)
    }

    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.assert_writable(off);
        self.atomic_u64(off).store(v, Ordering::SeqCst)
    }

    fn fence_seqcst(&self) {
        fence(Ordering::SeqCst)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `region` is the mapping `map` created, not yet unmapped.
        unsafe { libc::munmap(self.region.0.as_ptr().cast(), self.region.1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memfd;
    use std::os::fd::AsFd;

    #[test]
    fn two_mappings_share_bytes() {
        let m = Memfd::create("t", 8192, false).unwrap();
        let a = Mapping::new(m.as_fd(), 0, 8192, true).unwrap();
        let b = Mapping::new(m.as_fd(), 4096, 4096, true).unwrap();
        a.write_bytes(4096 + 10, b"hello");
        let mut out = [0u8; 5];
        b.read_bytes(10, &mut out);
        assert_eq!(&out, b"hello");
        b.store_u32(100, 42);
        assert_eq!(a.load_u32(4196), 42);
        assert_eq!(a.swap_u32(4196, 0), 42);
        assert_eq!(b.cmpxchg_u32(100, 0, 5), Ok(0));
        assert_eq!(b.fetch_add_u32(100, 1), 5);
        assert_eq!(a.load_u32(4196), 6);
        a.try_copy_from(0, &b, 10, 5).unwrap();
        a.read_bytes(0, &mut out);
        assert_eq!(&out, b"hello");
        b.store_u16(202, 0xbeef);
        assert_eq!(a.load_u16_acquire(4096 + 202), 0xbeef);
    }

    #[test]
    fn u64_counters_are_shared() {
        let m = Memfd::create("t", 4096, false).unwrap();
        let a = Mapping::new(m.as_fd(), 0, 4096, true).unwrap();
        let b = Mapping::new(m.as_fd(), 0, 4096, false).unwrap();
        assert_eq!(a.fetch_add_u64(8, 5), 0);
        assert_eq!(a.fetch_add_u64(8, u64::MAX), 5);
        assert_eq!(b.load_u64(8), 4);
        a.fetch_max_u64(4088, 7);
        a.fetch_max_u64(4088, 3);
        assert_eq!(b.load_u64(4088), 7);
    }

    #[test]
    fn readonly_fd_cannot_be_mapped_writable() {
        let m = Memfd::create("t", 4096, false).unwrap();
        let ro = m.reopen_readonly().unwrap();
        let err = Mapping::new(ro.as_fd(), 0, 4096, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        let r = Mapping::new(ro.as_fd(), 0, 4096, false).unwrap();
        assert_eq!(r.read_u32(0), 0);
    }

    #[test]
    fn memfd_is_sealed_against_shrinking() {
        let m = Memfd::create("t", 4096, false).unwrap();
        // SAFETY: plain syscall on a valid descriptor.
        let rc = unsafe { libc::ftruncate(m.as_fd().as_raw_fd(), 0) };
        assert_eq!(rc, -1);
    }

    #[test]
    fn out_of_bounds_accesses_are_errors() {
        let m = Memfd::create("t", 8192, false).unwrap();
        let a = Mapping::new(m.as_fd(), 0, 8192, true).unwrap();
        let b = Mapping::new(m.as_fd(), 0, 4096, true).unwrap();
        let mut buf = [0u8; 8];
        let oob = |off, len, size| Err(MemError::OutOfBounds { off, len, size });
        assert_eq!(a.try_read_bytes(8188, &mut buf), oob(8188, 8, 8192));
        assert_eq!(a.try_write_bytes(8189, &buf), oob(8189, 8, 8192));
        assert_eq!(a.try_fill(usize::MAX, 2, 0), oob(usize::MAX, 2, 8192));
        assert_eq!(a.try_copy_from(0, &b, 4095, 2), oob(4095, 2, 4096));
        assert_eq!(b.try_copy_from(4000, &a, 0, 97), oob(4000, 97, 4096));
        assert_eq!(
            a.io_range(8192, 1, false).unwrap_err(),
            oob(8192, 1, 8192).unwrap_err()
        );
        assert_eq!(
            a.atomic_ptr(6, 4),
            Err(MemError::Unaligned { off: 6, align: 4 })
        );
        assert_eq!(
            a.atomic_ptr(8192, 8).unwrap_err(),
            oob(8192, 8, 8192).unwrap_err()
        );
        // At the edge, the same accesses succeed.
        a.try_read_bytes(8184, &mut buf).unwrap();
        a.try_copy_from(4096, &b, 0, 4096).unwrap();
    }

    #[test]
    fn stores_to_a_readonly_mapping_are_errors() {
        let m = Memfd::create("t", 4096, false).unwrap();
        let r = Mapping::new(m.as_fd(), 0, 4096, false).unwrap();
        let w = Mapping::new(m.as_fd(), 0, 4096, true).unwrap();
        let ro = Err(MemError::ReadOnly { off: 8 });
        assert!(!r.is_writable());
        assert_eq!(r.try_write_bytes(8, b"x"), ro);
        assert_eq!(r.try_fill(8, 1, 0), ro);
        assert_eq!(r.try_copy_from(8, &w, 0, 1), ro);
        assert_eq!(r.io_range(8, 1, true), Err(MemError::ReadOnly { off: 8 }));
        assert_eq!(r.check_store(8, 1), ro);
        let mut b = [0u8; 1];
        r.try_read_bytes(8, &mut b).unwrap();
        w.try_copy_from(8, &r, 0, 1).unwrap();
    }

    #[test]
    #[should_panic(expected = "read-only")]
    fn store_to_readonly_mapping_panics_instead_of_faulting() {
        let m = Memfd::create("t", 4096, false).unwrap();
        let r = Mapping::new(m.as_fd(), 0, 4096, false).unwrap();
        r.write_u32(0, 1);
    }
}
