//! An address-space window for frames mapped a batch at a time: the Xen
//! 2.0 transmit path maps each granted page, copies out and unmaps
//! (Menon 2006 §2), and Linux netback batches those maps over a ring batch
//! so that the unmap, and the TLB flush it costs, happens once per batch.
//!
//! The window is reserved once (inaccessible anonymous memory), frames of
//! a memory file are mapped over its slots with `MAP_FIXED`, one `mmap`
//! per run of consecutive frames, and a run of slots is given back to the
//! reservation with one `mmap` over its range. Since the reservation is
//! replaced in place, never unmapped, no other mapping can land inside
//! the window meanwhile.

use crate::{cvt, PAGE_SIZE};
use abi::MemError;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// What a slot of a [`Window`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Empty,
    ReadOnly,
    Writable,
}

/// A reserved range of `slots` pages into which frames of memory files are
/// mapped and unmapped in runs. Like [`crate::Mapping`], it is accessed
/// only through byte copies, checked against the slot's page and whether
/// the slot holds a frame; no reference into it is ever created.
#[derive(Debug)]
pub struct Window {
    base: NonNull<u8>,
    slots: Vec<Slot>,
}

// SAFETY: the window is plain shared memory and its state lives in `slots`,
// which only `&mut self` changes; all access to the memory is by opaque copies.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

impl Window {
    /// Reserves `slots` pages of address space, inaccessible until mapped.
    pub fn reserve(slots: usize) -> io::Result<Window> {
        let len = slots
            .checked_mul(PAGE_SIZE)
            .filter(|l| *l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "window: bad size"))?;
        // SAFETY: a fresh anonymous mapping chosen by the kernel (addr NULL)
        // aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            cvt(-1, "mmap (window reservation)")?;
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Window {
            base,
            slots: vec![Slot::Empty; slots],
        })
    }

    /// Slots in the window.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether slot `slot` holds a frame.
    pub fn is_mapped(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(|s| *s != Slot::Empty)
    }

    /// The first run of `n` consecutive empty slots, if there is one.
    pub fn find_empty(&self, n: usize) -> Option<usize> {
        let mut run = 0;
        for (i, s) in self.slots.iter().enumerate() {
            run = if *s == Slot::Empty { run + 1 } else { 0 };
            if run == n {
                return Some(i + 1 - n);
            }
        }
        (n == 0).then_some(0)
    }

    /// The address of slot `slot` after checking `first..first + n` are
    /// slots of the window.
    fn at(&self, first: usize, n: usize) -> io::Result<*mut libc::c_void> {
        if n == 0
            || first
                .checked_add(n)
                .is_none_or(|end| end > self.slots.len())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slots {first}+{n} outside a window of {}", self.slots.len()),
            ));
        }
        // SAFETY: first < slots, so the offset stays inside the reservation.
        Ok(unsafe { self.base.as_ptr().add(first * PAGE_SIZE) }.cast())
    }

    /// Maps `n` consecutive pages of `fd` from `offset` (page-aligned) over
    /// slots `first..first + n`, which must be empty: one `mmap`, its
    /// page-table entries written in the call (`MAP_POPULATE`), as Xen's
    /// grant map writes them in the hypercall, so the first touch takes no
    /// fault. A hugetlb file refuses (`InvalidInput`): it maps only in
    /// whole huge pages.
    pub fn map(
        &mut self,
        first: usize,
        n: usize,
        fd: BorrowedFd<'_>,
        offset: u64,
        writable: bool,
    ) -> io::Result<()> {
        let addr = self.at(first, n)?;
        if self.slots[first..first + n]
            .iter()
            .any(|s| *s != Slot::Empty)
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("window slots {first}+{n} are in use"),
            ));
        }
        if !offset.is_multiple_of(PAGE_SIZE as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mmap: offset not page-aligned",
            ));
        }
        // SAFETY: the range is inside this window's reservation (checked by
        // `at`) and holds no frame (checked above), so MAP_FIXED replaces only
        // inaccessible memory this window owns; no Rust object lives there.
        let p = unsafe {
            libc::mmap(
                addr,
                n * PAGE_SIZE,
                crate::mapping::prot(writable),
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            cvt(-1, "mmap (window slot)")?;
        }
        let s = if writable {
            Slot::Writable
        } else {
            Slot::ReadOnly
        };
        self.slots[first..first + n].fill(s);
        Ok(())
    }

    /// Gives slots `first..first + n` back to the reservation, whatever they
    /// hold: one `mmap` over the range, so one TLB flush for the run.
    pub fn unmap(&mut self, first: usize, n: usize) -> io::Result<()> {
        let addr = self.at(first, n)?;
        // SAFETY: the range is inside this window's reservation (checked by
        // `at`); MAP_FIXED replaces frames this window mapped there, to which
        // no reference exists (all access is by copies through `&self`, and
        // `&mut self` excludes any in progress).
        let p = unsafe {
            libc::mmap(
                addr,
                n * PAGE_SIZE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            cvt(-1, "mmap (window release)")?;
        }
        self.slots[first..first + n].fill(Slot::Empty);
        Ok(())
    }

    /// The address of `len` bytes at `off` in slot `slot`: the slot must
    /// hold a frame (writable for a store) and the range stay in its page.
    fn range(&self, slot: usize, off: usize, len: usize, store: bool) -> Result<*mut u8, MemError> {
        let s = self.slots.get(slot).copied().unwrap_or(Slot::Empty);
        if s == Slot::Empty {
            return Err(MemError::OutOfBounds { off, len, size: 0 });
        }
        if store && s != Slot::Writable {
            return Err(MemError::ReadOnly { off });
        }
        abi::mem::check_range(off, len, PAGE_SIZE)?;
        // SAFETY: slot < slots and off + len <= PAGE_SIZE (both checked), so
        // the range is inside the slot's page.
        Ok(unsafe { self.base.as_ptr().add(slot * PAGE_SIZE + off) })
    }

    /// Copies bytes at `off` of the frame in slot `slot` into `dst`.
    pub fn try_read_bytes(&self, slot: usize, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let s = self.range(slot, off, dst.len(), false)?;
        // SAFETY: source range checked to lie in a mapped page of the window;
        // `dst` is private memory. memcpy is opaque to the optimizer, so a
        // peer's concurrent stores can only tear bytes.
        unsafe { libc::memcpy(dst.as_mut_ptr().cast(), s.cast(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to `off` of the frame in slot `slot` (mapped writable).
    pub fn try_write_bytes(&self, slot: usize, off: usize, src: &[u8]) -> Result<(), MemError> {
        let d = self.range(slot, off, src.len(), true)?;
        // SAFETY: destination checked to lie in a page mapped writable;
        // `src` is private memory.
        unsafe { libc::memcpy(d.cast(), src.as_ptr().cast(), src.len()) };
        Ok(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: the reservation `reserve` made, frames included, not yet unmapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.slots.len() * PAGE_SIZE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mapping, Memfd};
    use abi::SharedMemory;
    use std::os::fd::AsFd;

    #[test]
    fn frames_map_in_runs_and_unmap_in_one_call() {
        let m = Memfd::create("t", 4 * PAGE_SIZE, false).unwrap();
        let pool = Mapping::new(m.as_fd(), 0, 4 * PAGE_SIZE, true).unwrap();
        for f in 0..4 {
            pool.fill(f * PAGE_SIZE, PAGE_SIZE, f as u8 + 1);
        }
        let mut w = Window::reserve(8).unwrap();
        assert_eq!(w.find_empty(3), Some(0));
        // Frames 1 and 2 in one run at slots 2..4, frame 0 alone at slot 5.
        w.map(2, 2, m.as_fd(), PAGE_SIZE as u64, false).unwrap();
        w.map(5, 1, m.as_fd(), 0, true).unwrap();
        assert_eq!(w.find_empty(3), None);
        assert_eq!(w.find_empty(2), Some(0));
        let mut b = [0u8; 4];
        w.try_read_bytes(3, 100, &mut b).unwrap();
        assert_eq!(b, [3; 4]);
        w.try_write_bytes(5, 8, b"abcd").unwrap();
        pool.read_bytes(8, &mut b);
        assert_eq!(&b, b"abcd");
        // Read-only slots refuse stores; reads stay inside one page.
        assert_eq!(
            w.try_write_bytes(2, 0, b"x"),
            Err(MemError::ReadOnly { off: 0 })
        );
        assert!(w.try_read_bytes(2, PAGE_SIZE - 2, &mut b).is_err());
        // A used slot cannot be mapped over; a run is released in one call.
        assert!(w.map(3, 1, m.as_fd(), 0, false).is_err());
        w.unmap(2, 4).unwrap();
        assert!(!w.is_mapped(2) && !w.is_mapped(5));
        assert_eq!(
            w.try_read_bytes(2, 0, &mut b),
            Err(MemError::OutOfBounds {
                off: 0,
                len: 4,
                size: 0
            })
        );
        assert_eq!(w.find_empty(8), Some(0));
        // Slots outside the window are refused, not mapped.
        assert!(w.map(7, 2, m.as_fd(), 0, false).is_err());
        assert!(w.unmap(usize::MAX, 2).is_err());
        assert!(w.try_read_bytes(99, 0, &mut b).is_err());
    }
}
