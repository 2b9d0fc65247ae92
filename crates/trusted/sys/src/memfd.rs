use crate::cvt;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Size of one frame (Xen's PAGE_SIZE on x86).
pub const PAGE_SIZE: usize = 4096;

/// An anonymous, sealed, fixed-size memory file: a domain's machine frames.
#[derive(Debug)]
pub struct Memfd {
    fd: OwnedFd,
    len: usize,
}

impl Memfd {
    /// Creates a zeroed memfd of `len` bytes. With `huge`, it is backed by
    /// 2 MiB hugetlb pages (the superpage option), which must be reserved in
    /// `/proc/sys/vm/nr_hugepages` and `len` must be a multiple of 2 MiB.
    pub fn create(name: &str, len: usize, huge: bool) -> io::Result<Memfd> {
        let cname = CString::new(name).map_err(|_| io::Error::other("memfd name has a NUL"))?;
        let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        if huge {
            flags |= libc::MFD_HUGETLB | libc::MFD_HUGE_2MB;
        }
        // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
        let fd = cvt(
            unsafe { libc::memfd_create(cname.as_ptr(), flags) } as libc::c_long,
            "memfd_create",
        )?;
        // SAFETY: memfd_create returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        cvt(
            // SAFETY: plain syscall on a descriptor we own.
            unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } as libc::c_long,
            "ftruncate(memfd)",
        )
        .map_err(|e| {
            if huge {
                io::Error::new(
                    e.kind(),
                    format!("{e} (hugepage pool: reserve pages with `echo N > /proc/sys/vm/nr_hugepages`)"),
                )
            } else {
                e
            }
        })?;
        cvt(
            // Owner root, mode 0600: a domain (another uid) holding a read-only
            // descriptor cannot reopen it writable through /proc/self/fd/N.
            // memfd_create makes the file 0777.
            // SAFETY: plain syscall on a descriptor we own.
            unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } as libc::c_long,
            "fchmod(memfd)",
        )?;
        // No peer may ever shrink or grow it: a shrink would turn accesses into SIGBUS.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        cvt(
            // SAFETY: plain fcntl on a descriptor we own.
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } as libc::c_long,
            "fcntl(F_ADD_SEALS)",
        )?;
        Ok(Memfd { fd, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the memfd has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A new read-only descriptor for the same memory. A peer given only this
    /// one cannot map it writable: the kernel refuses `PROT_WRITE`.
    pub fn reopen_readonly(&self) -> io::Result<OwnedFd> {
        let path = CString::new(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .map_err(|_| io::Error::other("bad fd path"))?;
        // SAFETY: `path` is a valid C string; open returns a fresh descriptor.
        let fd = cvt(
            unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) } as libc::c_long,
            "open(memfd, O_RDONLY)",
        )?;
        // SAFETY: open returned a fresh descriptor that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// A second read-write descriptor for the same memory.
    pub fn dup(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// A memfd this process made before it replaced its program (hv's
    /// upgrade in place), taken back from its descriptor: its length is the
    /// file's, and it must still be sealed against shrinking and growing,
    /// as [`Memfd::create`] left it.
    pub fn adopt(fd: OwnedFd) -> io::Result<Memfd> {
        let meta = std::fs::File::from(fd.try_clone()?).metadata()?;
        // SAFETY: plain fcntl on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let want = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & want != want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a memfd sealed against resizing",
            ));
        }
        Ok(Memfd {
            fd,
            len: meta.len() as usize,
        })
    }
}

/// Makes sure the file behind `fd` (a peer's memory, about to be mapped)
/// can no longer shrink: adds `F_SEAL_SHRINK` if it is a memfd that allows
/// it. Whether the file is now sealed against shrinking; false for a file
/// that cannot be sealed (not a memfd, or sealing closed without it). A
/// mapping of a file that shrinks turns accesses past its new end into
/// SIGBUS.
pub fn seal_shrink(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: plain fcntl calls on a descriptor borrowed for the duration.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    crate::count_syscall();
    if seals < 0 {
        return false;
    }
    if seals & libc::F_SEAL_SHRINK != 0 {
        return true;
    }
    crate::count_syscall();
    // SAFETY: as above.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) == 0 }
}

/// An anonymous file in memory that grows as it is written (unsealed, unlike
/// [`Memfd`]): a log kept by a descriptor alone, which outlives the process
/// that writes it when another holds a duplicate.
pub fn memory_file(name: &str) -> io::Result<std::fs::File> {
    let cname = CString::new(name).map_err(|_| io::Error::other("memfd name has a NUL"))?;
    crate::count_syscall();
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
    let fd = cvt(
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) } as libc::c_long,
        "memfd_create",
    )?;
    // SAFETY: memfd_create returned a fresh descriptor that we now own.
    Ok(std::fs::File::from(unsafe {
        OwnedFd::from_raw_fd(fd as i32)
    }))
}

/// Frees bytes `offset..offset + len` of a file in memory, keeping its size:
/// they read as zeros from then on.
pub fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::other("hole beyond the largest file offset"));
    };
    crate::count_syscall();
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: plain fallocate on a descriptor borrowed for the duration.
    cvt(
        unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) } as libc::c_long,
        "fallocate(PUNCH_HOLE)",
    )
    .map(drop)
}

impl AsFd for Memfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
