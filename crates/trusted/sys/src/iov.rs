//! I/O vectors that point straight into shared memory, the shape of rust-vmm
//! vm-memory's `read_from`/`write_to`: a frame moves between a descriptor
//! (a TAP, a packet socket) and the frames of a [`Mapping`] in one system
//! call, without passing through a private buffer.
//!
//! Letting the kernel read or fill memory a peer may be writing at the same
//! time is sound: the kernel copies with its own routines, no Rust reference
//! to the memory is ever formed, and a peer that scribbles during the copy
//! can only tear the bytes of its own frame, which every consumer validates
//! anyway. Every range is checked against its mapping before its address is
//! taken, and a scatter into a read-only mapping is refused.

use crate::Mapping;
use std::io;

/// Most parts one frame may have: a vnet header, a header copy, and the
/// pages of a 64 KiB frame, with room to spare.
pub const MAX_IO_PARTS: usize = 64;

/// One piece of a gather list: private bytes, or a range of a shared mapping.
#[derive(Clone, Copy)]
pub enum IoPart<'a> {
    Private(&'a [u8]),
    Shared {
        map: &'a Mapping,
        off: usize,
        len: usize,
    },
}

/// One piece of a scatter list: a private buffer, or a range of a writable
/// shared mapping.
pub enum IoPartMut<'a> {
    Private(&'a mut [u8]),
    Shared {
        map: &'a Mapping,
        off: usize,
        len: usize,
    },
}

const EMPTY: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn too_many(n: usize) -> io::Error {
    invalid(format!("frame in {n} parts, at most {MAX_IO_PARTS}"))
}

/// Checks a shared range and returns its address (an out-of-range or
/// read-only range is an `InvalidInput` error naming it, never a panic).
fn shared(map: &Mapping, off: usize, len: usize, write: bool) -> io::Result<*mut u8> {
    map.io_range(off, len, write)
        .map_err(|e| invalid(format!("an I/O vector over shared memory: {e}")))
}

/// Fills `iov` for a gather list (the kernel only reads through it).
pub(crate) fn gather(
    parts: &[IoPart<'_>],
    iov: &mut [libc::iovec; MAX_IO_PARTS],
) -> io::Result<usize> {
    if parts.len() > MAX_IO_PARTS {
        return Err(too_many(parts.len()));
    }
    for (v, p) in iov.iter_mut().zip(parts) {
        *v = match *p {
            IoPart::Private(b) => libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            },
            IoPart::Shared { map, off, len } => libc::iovec {
                iov_base: shared(map, off, len, false)?.cast(),
                iov_len: len,
            },
        };
    }
    Ok(parts.len())
}

/// Fills `iov` for a scatter list (the kernel writes through it).
pub(crate) fn scatter(
    parts: &mut [IoPartMut<'_>],
    iov: &mut [libc::iovec; MAX_IO_PARTS],
) -> io::Result<usize> {
    if parts.len() > MAX_IO_PARTS {
        return Err(too_many(parts.len()));
    }
    for (v, p) in iov.iter_mut().zip(parts.iter_mut()) {
        *v = match p {
            IoPartMut::Private(b) => libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            },
            IoPartMut::Shared { map, off, len } => libc::iovec {
                iov_base: shared(map, *off, *len, true)?.cast(),
                iov_len: *len,
            },
        };
    }
    Ok(parts.len())
}

/// A fresh, empty iovec array (on the caller's stack).
pub(crate) fn iovecs() -> [libc::iovec; MAX_IO_PARTS] {
    [EMPTY; MAX_IO_PARTS]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memfd;
    use std::os::fd::AsFd;

    #[test]
    fn ranges_are_checked_before_any_address_is_taken() {
        let m = Memfd::create("t", 8192, false).unwrap();
        let rw = Mapping::new(m.as_fd(), 0, 8192, true).unwrap();
        let ro = Mapping::new(m.as_fd(), 0, 8192, false).unwrap();
        let mut iov = iovecs();
        let ok = [IoPart::Shared {
            map: &rw,
            off: 4096,
            len: 4096,
        }];
        assert_eq!(gather(&ok, &mut iov).unwrap(), 1);
        assert_eq!(iov[0].iov_len, 4096);
        for (off, len) in [(4097, 4096), (usize::MAX, 2), (8192, 1)] {
            let bad = [IoPart::Shared { map: &rw, off, len }];
            let e = gather(&bad, &mut iov).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
        let mut into_ro = [IoPartMut::Shared {
            map: &ro,
            off: 0,
            len: 10,
        }];
        let e = scatter(&mut into_ro, &mut iov).unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
        let many: Vec<IoPart<'_>> = (0..MAX_IO_PARTS + 1)
            .map(|_| IoPart::Private(&[1u8]))
            .collect();
        assert_eq!(
            gather(&many, &mut iov).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
