//! A pool mirror: a granting domain's whole pool mapped once into the
//! grantee, with no frame present until a grant map installs its page-table
//! entry, and a grant unmap zapping the entries of a batch again in one call.
//!
//! This is Xen's grant map as it was: a page-table update made for the
//! caller (Menon 2006 §2; Linux netback batches GNTTABOP_map_grant_ref and
//! unmap_grant_ref per ring batch). No address-space layout changes per
//! frame. The mirror is registered with userfaultfd in minor-fault mode, so
//! a frame enters the page table only through `UFFDIO_CONTINUE` (one
//! `ioctl` per run of adjacent frames of a batch), and an access to a frame
//! not mapped is a `SIGBUS`, never a silent read. A batch's frames leave the
//! page table in one `process_madvise(MADV_DONTNEED)` over all of them, a
//! range per run of adjacent frames, or one `madvise` per range where the
//! kernel refuses the vector. The kernel flushes the TLB at the end of each
//! page-table walk of a range that zapped a dirty entry of a file page, and
//! the entries `UFFDIO_CONTINUE` installs are dirty: so a ring batch's
//! adjacent 4 KiB frames cost a flush per run (per 2 MiB it spans), not
//! per frame.
//!
//! A pool on transparent huge pages is mirrored 4 KiB at a time, as Xen's
//! grant map mapped one frame of a guest's superpage (Menon 2006 §5.3).
//! A pool on hugetlb pages can only be mapped whole: it is mirrored a
//! huge page at a time, its first mapped frame installing one entry for
//! the whole huge page and the zap coming when its last mapped frame is
//! unmapped. The page table then guards whole huge pages only: the
//! per-frame map count still gates every copy, so a frame not granted
//! stays unreadable through this API even where its huge page is present,
//! but not to a compromised caller reading its own memory.
//!
//! A kernel without minor faults on that memory, a filter that forbids
//! userfaultfd, or a host with swap on (a swapped-out frame would fault
//! into `SIGBUS`) make [`PoolMirror::new`] fail, and the caller uses its
//! [`crate::Window`].

use crate::{cvt, PAGE_SIZE};
use abi::MemError;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// At most this many ranges leave the page table in one `process_madvise`
/// (the kernel's `UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// A whole pool mapped with no frame present until [`PoolMirror::map`]
/// puts it in the page table. Accessed only through byte copies, checked
/// against the frame's page and its map count; no reference into it is
/// ever created.
#[derive(Debug)]
pub struct PoolMirror {
    base: NonNull<u8>,
    writable: bool,
    uffd: OwnedFd,
    /// This process, for `process_madvise`; `None` once the kernel refused
    /// the vectored call (each unit then gets a `madvise` of its own).
    me: Option<OwnedFd>,
    /// Bytes one page-table entry maps: a page, or a hugetlb pool's huge page.
    unit: usize,
    /// Whether the mirror is a shared mapping (a private one cannot fault a
    /// hugetlb page into the pool: it would get a copy of its own).
    shared: bool,
    /// Map count per frame: a frame may be read while its count is above 0.
    refs: Vec<u32>,
    /// Frames mapped per unit: a unit is present while its count is above 0.
    held: Vec<u32>,
    /// The batch being zapped, kept to allocate nothing per unmap.
    iov: Vec<libc::iovec>,
    /// Units a batch installs or zaps, sorted into runs; kept likewise.
    units: Vec<usize>,
}

// SAFETY: the mirror is plain shared memory whose state lives in `refs`
// and `held`, which only `&mut self` changes; all access to the memory is by opaque
// copies, and `iov` is scratch space filled and used within one call.
unsafe impl Send for PoolMirror {}
// SAFETY: as above.
unsafe impl Sync for PoolMirror {}

impl PoolMirror {
    /// Mirrors the whole pool `fd` (`writable` or read-only), no frame present.
    pub fn new(fd: BorrowedFd<'_>, writable: bool) -> io::Result<PoolMirror> {
        let frames = pool_frames(fd)?;
        let unit = entry_size(fd)?;
        // hugetlb pages are never swapped.
        if unit == PAGE_SIZE && swap_is_on() {
            return Err(unsupported(
                "swap is on: a mirrored frame swapped out would fault",
            ));
        }
        if !(frames * PAGE_SIZE).is_multiple_of(unit) {
            return Err(unsupported("a hugetlb pool that is not whole huge pages"));
        }
        let uffd = minor_fault_fd(unit > PAGE_SIZE)?;
        let len = frames * PAGE_SIZE;
        // userfaultfd registers only mappings that may be written: a
        // read-only pool descriptor is mapped private (read-only, so never
        // copied on write: every entry is the pool's own page). Nothing is
        // reserved for copies that are never made (hugetlb would reserve
        // the pool's size again).
        let share = if writable {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE | libc::MAP_NORESERVE
        };
        // SAFETY: a fresh mapping of the pool chosen by the kernel (addr
        // NULL) aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                crate::mapping::prot(writable),
                share,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            cvt(-1, "mmap (pool mirror)")?;
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        let m = PoolMirror {
            base,
            writable,
            uffd,
            me: self_pidfd(),
            unit,
            shared: writable,
            refs: vec![0; frames],
            held: vec![0; len / unit],
            iov: Vec::with_capacity(MAX_IOV),
            units: Vec::new(),
        };
        // A fresh mapping (no MAP_POPULATE) has no page-table entry yet:
        // every frame enters through `map`.
        m.register(len)?;
        // Unmapping a hugetlb page with MADV_DONTNEED needs Linux 5.18:
        // tried once on the empty mirror, so an older kernel refuses here
        // and the caller uses its window.
        if unit > PAGE_SIZE {
            m.zap_unit(0)
                .map_err(|e| unsupported(&format!("a hugetlb mirror cannot be unmapped: {e}")))?;
        }
        Ok(m)
    }

    /// Frames in the pool.
    pub fn frames(&self) -> usize {
        self.refs.len()
    }

    /// Whether `frame` is mapped (present in the page table).
    pub fn is_mapped(&self, frame: u32) -> bool {
        self.refs.get(frame as usize).is_some_and(|r| *r > 0)
    }

    /// Maps `frame`: its page-table entry is installed on its first map;
    /// a frame mapped again only counts one more map.
    pub fn map(&mut self, frame: u32) -> io::Result<()> {
        let f = self.index(frame)?;
        let u = self.unit_of(f);
        if self.refs[f] == 0 && self.held[u] == 0 {
            self.install(u)?;
        }
        self.count_map(f);
        Ok(())
    }

    /// `frame` as an index into the pool, or refused when outside it.
    fn index(&self, frame: u32) -> io::Result<usize> {
        let f = frame as usize;
        if f < self.refs.len() {
            return Ok(f);
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame {frame} outside a pool of {}", self.refs.len()),
        ))
    }

    /// The unit (page-table entry) holding frame `f`.
    fn unit_of(&self, f: usize) -> usize {
        f * PAGE_SIZE / self.unit
    }

    /// Counts one more map of frame `f` (< frames), whose unit is present.
    fn count_map(&mut self, f: usize) {
        if self.refs[f] == 0 {
            let u = self.unit_of(f);
            self.held[u] += 1;
        }
        self.refs[f] = self.refs[f].saturating_add(1);
    }

    /// Maps each of `frames`, as [`PoolMirror::map`] would one at a time,
    /// with one `UFFDIO_CONTINUE` per run of adjacent entries to install
    /// (a ring batch's buffers are mostly adjacent). Returns each frame's
    /// outcome in order: a frame outside the pool, or one whose entry
    /// could not be installed, is refused and counts no map.
    pub fn map_many(&mut self, frames: &[u32]) -> Vec<io::Result<()>> {
        let mut units = std::mem::take(&mut self.units);
        units.clear();
        for &f in frames {
            let f = f as usize;
            if self.refs.get(f) == Some(&0) {
                let u = self.unit_of(f);
                if self.held[u] == 0 {
                    units.push(u);
                }
            }
        }
        units.sort_unstable();
        units.dedup();
        let failed = self.install_runs(&units);
        let out = frames
            .iter()
            .map(|&frame| {
                let f = self.index(frame)?;
                let u = self.unit_of(f);
                if let Ok(i) = failed.binary_search_by_key(&u, |(u, _)| *u) {
                    let e = &failed[i].1;
                    return Err(io::Error::new(e.kind(), format!("frame {frame}: {e}")));
                }
                self.count_map(f);
                Ok(())
            })
            .collect();
        units.clear();
        self.units = units;
        out
    }

    /// Installs the sorted `units`, one `UFFDIO_CONTINUE` per run of
    /// adjacent ones. Where the kernel stops a run partway (at a page its
    /// owner never touched), that unit is installed alone and the run goes
    /// on after it. Returns the units that could not be installed, sorted,
    /// each with its error.
    fn install_runs(&self, units: &[usize]) -> Vec<(usize, io::Error)> {
        let mut failed = Vec::new();
        for run in units.chunk_by(|a, b| *a + 1 == *b) {
            let mut at = 0;
            while at < run.len() {
                match self.continue_units(run[at], run.len() - at) {
                    Ok(()) => break,
                    Err((done, _)) => at += done,
                }
                if let Err(e) = self.install(run[at]) {
                    failed.push((run[at], e));
                }
                at += 1;
            }
        }
        failed
    }

    /// Bytes one page-table entry of this mirror maps (4 KiB, or a huge page).
    pub fn entry_size(&self) -> usize {
        self.unit
    }

    /// Unmaps one map of each of `frames`; the entries no longer needed
    /// (a frame's, or a huge page's whose last mapped frame this was) leave
    /// the page table together, in one call, a range per run of adjacent ones.
    /// A frame not mapped is refused before anything changes; one named
    /// more often than it is mapped is refused when its turn comes, the
    /// others still unmapped.
    pub fn unmap(&mut self, frames: &[u32]) -> io::Result<()> {
        if let Some(f) = frames.iter().find(|f| !self.is_mapped(**f)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame {f} is not mapped in the pool mirror"),
            ));
        }
        let mut units = std::mem::take(&mut self.units);
        units.clear();
        let mut r = Ok(());
        for &f in frames {
            match self.release(f as usize) {
                Ok(Some(u)) => units.push(u),
                Ok(None) => {}
                Err(e) => r = r.and(Err(e)),
            }
        }
        units.sort_unstable();
        let mut iov = std::mem::take(&mut self.iov);
        iov.clear();
        for run in units.chunk_by(|a, b| *a + 1 == *b) {
            iov.push(libc::iovec {
                iov_base: self.unit_addr(run[0]).cast(),
                iov_len: run.len() * self.unit,
            });
            if iov.len() == MAX_IOV {
                r = r.and(self.zap(&iov));
                iov.clear();
            }
        }
        if !iov.is_empty() {
            r = r.and(self.zap(&iov));
        }
        self.iov = iov;
        units.clear();
        self.units = units;
        r
    }

    /// Drops one map of frame `f`: the unit to zap when this was the last
    /// mapped frame in it. A frame named more often than it was mapped is
    /// refused.
    fn release(&mut self, f: usize) -> io::Result<Option<usize>> {
        let c = &mut self.refs[f];
        if *c == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame {f} unmapped more often than it was mapped"),
            ));
        }
        *c -= 1;
        if *c > 0 {
            return Ok(None);
        }
        let u = self.unit_of(f);
        self.held[u] -= 1;
        Ok((self.held[u] == 0).then_some(u))
    }

    /// The address of frame `f` (< frames).
    fn addr(&self, f: usize) -> *mut u8 {
        // SAFETY: callers pass f < frames, so the offset stays inside the mirror.
        unsafe { self.base.as_ptr().add(f * PAGE_SIZE) }
    }

    /// The address of unit `u` (< units), one page-table entry's memory.
    fn unit_addr(&self, u: usize) -> *mut u8 {
        // SAFETY: callers pass u < units, so the offset stays inside the mirror.
        unsafe { self.base.as_ptr().add(u * self.unit) }
    }

    /// Registers the mirror for minor faults with the userfaultfd.
    fn register(&self, len: usize) -> io::Result<()> {
        let mut reg = libc_uffd::Register {
            start: self.base.as_ptr() as u64,
            len: len as u64,
            mode: libc_uffd::REGISTER_MODE_MINOR,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes the struct we pass, which
        // lives for the call; the range is this mirror's own mapping.
        let r = unsafe { libc::ioctl(self.uffd.as_raw_fd(), libc_uffd::REGISTER, &mut reg) };
        cvt(r.into(), "userfaultfd register (pool mirror)").map(drop)
    }

    /// Installs unit `u`'s page-table entry from the pool's page cache. A
    /// frame its owner never touched has no page there yet: a populating
    /// read fault then allocates it (the mirror takes no missing faults),
    /// zeroed, as the owner's own first touch would. A private mirror of a
    /// hugetlb pool cannot: its fault would make a page of its own, never
    /// the pool's, so such a map is refused (hv faults hugetlb pools in
    /// whole when it makes them).
    fn install(&self, u: usize) -> io::Result<()> {
        match self.continue_unit(u) {
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {}
            r => return r,
        }
        if self.unit > PAGE_SIZE && !self.shared {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "a hugetlb page its owner never touched cannot be mirrored read-only",
            ));
        }
        // The owner may have touched it meanwhile: a minor fault again.
        self.populate(u).or_else(|_| self.continue_unit(u))
    }

    /// `UFFDIO_CONTINUE` for unit `u`: `EEXIST` (already present) is success.
    fn continue_unit(&self, u: usize) -> io::Result<()> {
        match self.continue_units(u, 1) {
            Err((_, e)) if e.raw_os_error() != Some(libc::EEXIST) => Err(e),
            _ => Ok(()),
        }
    }

    /// `UFFDIO_CONTINUE` for the `n` units from `u`. Where the kernel stops
    /// partway, the error comes with the units installed before it stopped
    /// (fewer than `n`).
    fn continue_units(&self, u: usize, n: usize) -> Result<(), (usize, io::Error)> {
        let mut c = libc_uffd::Continue {
            start: self.unit_addr(u) as u64,
            len: (n * self.unit) as u64,
            mode: 0,
            mapped: 0,
        };
        // SAFETY: UFFDIO_CONTINUE reads and writes the struct we pass; the
        // units are inside this mirror, registered for minor faults.
        let r = unsafe { libc::ioctl(self.uffd.as_raw_fd(), libc_uffd::CONTINUE, &mut c) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        let done = usize::try_from(c.mapped).unwrap_or(0) / self.unit;
        Err((done.min(n - 1), e))
    }

    /// Faults unit `u` in by `MADV_POPULATE_READ`: it succeeds only for a
    /// unit with no page in the pool yet (a present page is a minor fault,
    /// which the kernel refuses here with `EFAULT`, sending no signal).
    fn populate(&self, u: usize) -> io::Result<()> {
        // SAFETY: the unit is inside this mirror; populating only fills
        // page-table entries of this process's own mapping.
        let r = unsafe {
            libc::madvise(
                self.unit_addr(u).cast(),
                self.unit,
                libc::MADV_POPULATE_READ,
            )
        };
        cvt(r.into(), "madvise (populating a grant map)").map(drop)
    }

    /// Zaps the pages `iov` names in one `process_madvise`, or one
    /// `madvise` each where the kernel refuses the vector.
    fn zap(&mut self, iov: &[libc::iovec]) -> io::Result<()> {
        if let Some(me) = &self.me {
            // SAFETY: `iov` is a valid array of `iov.len()` entries, each a
            // range of whole units of this mirror; MADV_DONTNEED on it (shared, or private
            // and read-only, so never copied on write) only drops page-table
            // entries: the pool keeps its contents.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    me.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len(),
                    libc::MADV_DONTNEED,
                    0u32,
                )
            };
            // It returns the bytes it advised: fewer than asked means it
            // stopped partway, and the per-range path below redoes the lot.
            let asked: usize = iov.iter().map(|v| v.iov_len).sum();
            if r >= 0 && r as usize == asked {
                return Ok(());
            }
            if r < 0 {
                self.me = None;
            }
        }
        for v in iov {
            let u = (v.iov_base as usize - self.base.as_ptr() as usize) / self.unit;
            self.zap_units(u, v.iov_len / self.unit)?;
        }
        Ok(())
    }

    /// Zaps unit `u` with one `madvise`.
    fn zap_unit(&self, u: usize) -> io::Result<()> {
        self.zap_units(u, 1)
    }

    /// Zaps the `n` units from `u` with one `madvise`.
    fn zap_units(&self, u: usize, n: usize) -> io::Result<()> {
        // SAFETY: the units are inside this mirror (callers pass units of
        // it); MADV_DONTNEED on them only drops page-table entries (see `zap`).
        let r =
            unsafe { libc::madvise(self.unit_addr(u).cast(), n * self.unit, libc::MADV_DONTNEED) };
        cvt(r.into(), "madvise (grant unmap)").map(drop)
    }

    /// The address of `len` bytes at `off` in `frame`: the frame must be
    /// mapped (in a writable mirror for a store) and the range in its page.
    fn range(&self, frame: u32, off: usize, len: usize, store: bool) -> Result<*mut u8, MemError> {
        if !self.is_mapped(frame) {
            return Err(MemError::OutOfBounds { off, len, size: 0 });
        }
        if store && !self.writable {
            return Err(MemError::ReadOnly { off });
        }
        abi::mem::check_range(off, len, PAGE_SIZE)?;
        // SAFETY: frame < frames and off + len <= PAGE_SIZE (both checked).
        Ok(unsafe { self.addr(frame as usize).add(off) })
    }

    /// Copies bytes at `off` of mapped `frame` into `dst`.
    pub fn try_read_bytes(&self, frame: u32, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let s = self.range(frame, off, dst.len(), false)?;
        // SAFETY: the source lies in a frame present in the page table
        // (checked); `dst` is private memory. memcpy is opaque to the
        // optimizer, so a peer's concurrent stores can only tear bytes.
        unsafe { libc::memcpy(dst.as_mut_ptr().cast(), s.cast(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to `off` of mapped `frame` (a writable mirror).
    pub fn try_write_bytes(&self, frame: u32, off: usize, src: &[u8]) -> Result<(), MemError> {
        let d = self.range(frame, off, src.len(), true)?;
        // SAFETY: the destination lies in a frame present and writable
        // (checked); `src` is private memory.
        unsafe { libc::memcpy(d.cast(), src.as_ptr().cast(), src.len()) };
        Ok(())
    }
}

impl Drop for PoolMirror {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, not yet unmapped; no reference
        // into it exists (all access is by copies).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.refs.len() * PAGE_SIZE) };
    }
}

/// The userfaultfd ABI this file uses (`linux/userfaultfd.h`), which the
/// libc crate does not carry.
mod libc_uffd {
    pub const API: u64 = 0xAA;
    pub const FEATURE_SIGBUS: u64 = 1 << 7;
    pub const FEATURE_MINOR_HUGETLBFS: u64 = 1 << 9;
    pub const FEATURE_MINOR_SHMEM: u64 = 1 << 10;
    pub const USER_MODE_ONLY: i32 = 1;
    pub const REGISTER_MODE_MINOR: u64 = 1 << 2;
    // _IOWR(0xAA, nr, struct): dir 3 << 30 | size << 16 | 0xAA << 8 | nr.
    const fn iowr(nr: u64, size: u64) -> u64 {
        (3 << 30) | (size << 16) | (0xAA << 8) | nr
    }
    pub const API_IOCTL: u64 = iowr(0x3F, 24);
    pub const REGISTER: u64 = iowr(0x00, 32);
    pub const CONTINUE: u64 = iowr(0x07, 32);

    #[repr(C)]
    pub struct Api {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct Register {
        pub start: u64,
        pub len: u64,
        pub mode: u64,
        pub ioctls: u64,
    }
    #[repr(C)]
    pub struct Continue {
        pub start: u64,
        pub len: u64,
        pub mode: u64,
        pub mapped: i64,
    }
}

/// The flags of the one userfaultfd a mirror makes: close on exec, and
/// user-mode faults only, so it can never hold up a copy inside the kernel
/// (a domain's seccomp filter allows exactly these).
pub const USERFAULTFD_FLAGS: i32 = libc::O_CLOEXEC | libc_uffd::USER_MODE_ONLY;

/// A userfaultfd for minor faults on shmem (and on hugetlbfs, for a
/// `huge` pool), faulting with `SIGBUS`.
fn minor_fault_fd(huge: bool) -> io::Result<OwnedFd> {
    let flags = USERFAULTFD_FLAGS;
    // SAFETY: userfaultfd takes flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    let raw = cvt(raw, "userfaultfd")? as i32;
    // SAFETY: `raw` is a descriptor the kernel just gave us and nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut features = libc_uffd::FEATURE_SIGBUS | libc_uffd::FEATURE_MINOR_SHMEM;
    if huge {
        features |= libc_uffd::FEATURE_MINOR_HUGETLBFS;
    }
    let mut api = libc_uffd::Api {
        api: libc_uffd::API,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes the struct we pass, which lives
    // for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc_uffd::API_IOCTL, &mut api) };
    cvt(r.into(), "userfaultfd api (minor faults on shared memory)")?;
    Ok(fd)
}

/// A pidfd of this process, for `process_madvise` on itself.
fn self_pidfd() -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0u32) };
    // SAFETY: a descriptor the kernel just gave us and nobody else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// The pool's size in frames: a whole number of pages, at least one.
fn pool_frames(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let size = std::fs::File::from(fd.try_clone_to_owned()?)
        .metadata()?
        .len() as usize;
    if size == 0 || !size.is_multiple_of(PAGE_SIZE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a pool of {size} bytes is not a whole number of pages"),
        ));
    }
    Ok(size / PAGE_SIZE)
}

/// Bytes one page-table entry of a mirror of `fd` maps: the huge page
/// size of a hugetlbfs file (its block size), else a page.
fn entry_size(fd: BorrowedFd<'_>) -> io::Result<usize> {
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    // SAFETY: an all-zero statfs is a valid value for the kernel to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes only the struct we pass, which lives for the call.
    let r = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
    cvt(r.into(), "fstatfs (pool mirror)")?;
    if st.f_type as u32 as i64 != HUGETLBFS_MAGIC {
        return Ok(PAGE_SIZE);
    }
    let huge = st.f_bsize as usize;
    if huge < PAGE_SIZE || !huge.is_multiple_of(PAGE_SIZE) {
        return Err(unsupported("a hugetlbfs page size that is not whole pages"));
    }
    Ok(huge)
}

/// Whether any swap device is on (`/proc/swaps` lists one past its header).
fn swap_is_on() -> bool {
    std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1)
}

fn unsupported(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mapping, Memfd};
    use std::os::unix::fs::FileExt;

    /// Whether frame `f`'s page-table entry is present (`/proc/self/pagemap`
    /// bit 63), which is what a grant map installs and an unmap zaps.
    fn present(w: &PoolMirror, f: usize) -> bool {
        let pm = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut e = [0u8; 8];
        let vpn = w.addr(f) as u64 / PAGE_SIZE as u64;
        pm.read_exact_at(&mut e, vpn * 8).unwrap();
        u64::from_le_bytes(e) >> 63 == 1
    }
    use abi::SharedMemory;
    use std::os::fd::AsFd;

    fn pool(frames: usize) -> (Memfd, Mapping) {
        let m = Memfd::create("t", frames * PAGE_SIZE, false).unwrap();
        let p = Mapping::new(m.as_fd(), 0, frames * PAGE_SIZE, true).unwrap();
        for f in 0..frames {
            p.fill(f * PAGE_SIZE, PAGE_SIZE, f as u8 + 1);
        }
        (m, p)
    }

    #[test]
    fn frames_map_one_at_a_time_and_unmap_as_a_batch() {
        let (m, p) = pool(8);
        // Through a read-only descriptor, as a grantee holds a pool.
        let ro = m.reopen_readonly().unwrap();
        let mut w = PoolMirror::new(ro.as_fd(), false).unwrap();
        assert_eq!(w.frames(), 8);
        let mut b = [0u8; 4];
        // Nothing is present until mapped: a read is refused, not made.
        assert!(w.try_read_bytes(3, 0, &mut b).is_err());
        assert!((0..8).all(|f| !present(&w, f)));
        for f in [3, 6, 1] {
            w.map(f).unwrap();
        }
        assert!([1, 3, 6].iter().all(|&f| present(&w, f)));
        assert!(!present(&w, 2));
        w.try_read_bytes(6, 100, &mut b).unwrap();
        assert_eq!(b, [7; 4]);
        // The owner's later stores show through the mapped frame.
        p.write_bytes(3 * PAGE_SIZE + 8, b"abcd");
        w.try_read_bytes(3, 8, &mut b).unwrap();
        assert_eq!(&b, b"abcd");
        // A read-only mirror refuses stores; reads stay inside one page.
        assert_eq!(
            w.try_write_bytes(3, 0, b"x"),
            Err(MemError::ReadOnly { off: 0 })
        );
        assert!(w.try_read_bytes(3, PAGE_SIZE - 2, &mut b).is_err());
        w.unmap(&[3, 6, 1]).unwrap();
        for f in [1, 3, 6] {
            assert!(!w.is_mapped(f) && !present(&w, f as usize));
            assert!(w.try_read_bytes(f, 0, &mut b).is_err());
        }
        // A frame outside the pool, or unmapped twice, is refused.
        assert!(w.map(8).is_err());
        assert!(w.unmap(&[3]).is_err());
    }

    #[test]
    fn a_batch_maps_runs_together_and_unmaps_only_its_own_frames() {
        let frames = 16;
        let m = Memfd::create("t", frames * PAGE_SIZE, false).unwrap();
        let p = Mapping::new(m.as_fd(), 0, frames * PAGE_SIZE, true).unwrap();
        // Frames 9 and 10 are never touched by their owner: the run 8..=11
        // stops at 9, which is faulted in alone, and goes on from 10.
        for f in (0..frames).filter(|f| !matches!(f, 9 | 10)) {
            p.fill(f * PAGE_SIZE, PAGE_SIZE, f as u8 + 1);
        }
        let ro = m.reopen_readonly().unwrap();
        let mut w = PoolMirror::new(ro.as_fd(), false).unwrap();
        w.map(2).unwrap();
        let batch = [5, 4, 3, 2, 99, 8, 9, 10, 11, 4];
        let out = w.map_many(&batch);
        let refused: Vec<u32> = batch
            .iter()
            .zip(&out)
            .filter(|(_, r)| r.is_err())
            .map(|(f, _)| *f)
            .collect();
        assert_eq!(refused, [99]);
        let mut b = [0u8; 2];
        for (f, want) in [(2, 3), (3, 4), (5, 6), (8, 9), (9, 0), (10, 0), (11, 12)] {
            assert!(present(&w, f), "frame {f}");
            w.try_read_bytes(f as u32, 7, &mut b).unwrap();
            assert_eq!(b, [want; 2], "frame {f}");
        }
        assert!(!present(&w, 6) && !present(&w, 7) && !present(&w, 12));
        // Unmapping the batch leaves frame 2's first map, and frame 4's
        // second, in place; the rest leave the page table together.
        w.unmap(&[5, 4, 3, 2, 8, 9, 10, 11]).unwrap();
        assert!(present(&w, 2) && w.is_mapped(2));
        assert!(present(&w, 4) && w.is_mapped(4));
        for f in [3, 5, 8, 9, 10, 11] {
            assert!(!present(&w, f) && !w.is_mapped(f as u32), "frame {f}");
        }
        w.unmap(&[2, 4]).unwrap();
        assert!((0..frames).all(|f| !present(&w, f)));
    }

    #[test]
    fn a_frame_mapped_twice_stays_until_its_last_unmap() {
        let (m, p) = pool(4);
        let mut w = PoolMirror::new(m.as_fd(), true).unwrap();
        w.map(2).unwrap();
        w.map(2).unwrap();
        w.unmap(&[2]).unwrap();
        w.try_write_bytes(2, 0, b"zz").unwrap();
        let mut b = [0u8; 2];
        p.read_bytes(2 * PAGE_SIZE, &mut b);
        assert_eq!(&b, b"zz");
        w.unmap(&[2]).unwrap();
        assert!(!w.is_mapped(2));
        // An unmap naming a frame not mapped changes nothing.
        w.map(0).unwrap();
        assert!(w.unmap(&[0, 1]).is_err());
        assert!(w.is_mapped(0));
    }

    #[test]
    fn a_frame_its_owner_never_touched_maps_as_zeros() {
        let m = Memfd::create("t", 4 * PAGE_SIZE, false).unwrap();
        let ro = m.reopen_readonly().unwrap();
        let mut w = PoolMirror::new(ro.as_fd(), false).unwrap();
        w.map(1).unwrap();
        let mut b = [9u8; 4];
        w.try_read_bytes(1, 0, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
        w.unmap(&[1]).unwrap();
    }

    #[test]
    fn a_hugetlb_pool_is_mirrored_a_huge_page_at_a_time() {
        use crate::huge::{self, HugetlbPool, HUGE_PAGE};
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("SPLITNET_REQUIRE_ROOT").is_none(),
                "reserving huge pages needs root"
            );
            eprintln!("skipped: reserving huge pages needs root");
            return;
        }
        /// Gives the pool back to its old size, pass or fail.
        struct Restore(u64);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = huge::set_nr_hugepages(self.0);
            }
        }
        let old = Restore(huge::nr_hugepages().unwrap());
        if HugetlbPool::read().unwrap().available() < 1 {
            huge::set_nr_hugepages(old.0 + 1).unwrap();
        }
        let frames = HUGE_PAGE / PAGE_SIZE;
        let m = Memfd::create("t", HUGE_PAGE, true).unwrap();
        let p = Mapping::new(m.as_fd(), 0, HUGE_PAGE, true).unwrap();
        p.populate().unwrap();
        p.fill(3 * PAGE_SIZE, PAGE_SIZE, 0x33);
        let ro = m.reopen_readonly().unwrap();
        let mut w = PoolMirror::new(ro.as_fd(), false).unwrap();
        assert_eq!((w.frames(), w.entry_size()), (frames, HUGE_PAGE));
        w.map(3).unwrap();
        w.map(300).unwrap();
        // One entry maps the whole huge page; the map counts still say
        // which frames may be read.
        assert!(present(&w, 3) && present(&w, 100));
        let mut b = [0u8; 4];
        w.try_read_bytes(3, 0, &mut b).unwrap();
        assert_eq!(b, [0x33; 4]);
        assert!(w.try_read_bytes(100, 0, &mut b).is_err());
        p.write_bytes(300 * PAGE_SIZE, b"huge");
        w.try_read_bytes(300, 0, &mut b).unwrap();
        assert_eq!(&b, b"huge");
        // The entry stays until the huge page's last mapped frame goes.
        w.unmap(&[3]).unwrap();
        assert!(present(&w, 300) && !w.is_mapped(3));
        w.unmap(&[300]).unwrap();
        assert!(!present(&w, 300) && !present(&w, 3));
        // A batch naming three frames of the huge page (one twice) installs
        // its one entry once, and its unmap zaps it once all are gone.
        assert!(w.map_many(&[7, 3, 7, 511]).iter().all(|r| r.is_ok()));
        assert!(present(&w, 0) && w.is_mapped(7) && w.is_mapped(511));
        w.unmap(&[7, 511]).unwrap();
        assert!(present(&w, 0) && w.is_mapped(3) && w.is_mapped(7));
        w.unmap(&[3, 7]).unwrap();
        assert!(!present(&w, 0) && !w.is_mapped(7));
        drop((w, p, ro, m, old));
    }

    /// A pool on transparent huge pages is mirrored a 4 KiB frame at a
    /// time, read-only or writable, as Xen's grant map mapped one frame of
    /// a guest's superpage (Menon 2006 §5.3).
    #[test]
    fn a_pool_on_transparent_huge_pages_is_mirrored_a_frame_at_a_time() {
        use crate::huge::{self, HUGE_PAGE};
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: allowing huge pages for shared memory needs root");
            return;
        }
        /// Puts the host's setting back, pass or fail.
        struct Restore(Option<String>);
        impl Drop for Restore {
            fn drop(&mut self) {
                if let Some(w) = &self.0 {
                    let _ = huge::set_thp_shmem(w);
                }
            }
        }
        // Under the lock every hv takes to change the setting (toolstack's
        // thp_shmem), and only where no hv holds it: one that does is
        // left alone.
        let dir = std::path::Path::new("/run/splitnet/thp-shmem");
        std::fs::create_dir_all(dir).unwrap();
        let _lock = crate::FileLock::exclusive(&dir.join(".lock")).unwrap();
        let held = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .any(|e| !e.file_name().to_string_lossy().starts_with('.'));
        let was = (!held).then(huge::advise_thp_shmem_word).flatten();
        if was.is_some() {
            huge::set_thp_shmem("advise").unwrap();
        }
        let _restore = Restore(was);
        if !huge::thp_shmem().0.advised_ranges_get_them() {
            eprintln!("skipped: this host denies shared memory huge pages");
            return;
        }
        let m = Memfd::create("t", 2 * HUGE_PAGE, false).unwrap();
        let p = Mapping::new(m.as_fd(), 0, 2 * HUGE_PAGE, true).unwrap();
        assert_eq!(p.advise_huge().unwrap(), 2 * HUGE_PAGE);
        assert_eq!(p.huge_mapped().unwrap(), 2 * HUGE_PAGE, "the pool is huge");
        p.fill(3 * PAGE_SIZE, PAGE_SIZE, 0x33);
        let ro = m.reopen_readonly().unwrap();
        for mut w in [
            PoolMirror::new(ro.as_fd(), false).unwrap(),
            PoolMirror::new(m.as_fd(), true).unwrap(),
        ] {
            assert_eq!(w.entry_size(), PAGE_SIZE);
            w.map(3).unwrap();
            assert!(present(&w, 3) && !present(&w, 4) && !present(&w, 2));
            let mut b = [0u8; 4];
            w.try_read_bytes(3, 0, &mut b).unwrap();
            assert_eq!(b, [0x33; 4]);
            w.unmap(&[3]).unwrap();
            assert!(!present(&w, 3));
        }
        // The owner's mapping is still huge: no mirror split it.
        assert_eq!(p.huge_mapped().unwrap(), 2 * HUGE_PAGE);
    }
}
