use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// One direction of notification between two processes: an AF_UNIX datagram
/// socket pair. The waiting end polls and drains; the ringing end sends one
/// byte. Both use `MSG_DONTWAIT` on every call, a per-call flag the peer
/// cannot change; an eventfd's O_NONBLOCK lives in the open file shared with
/// the peer, so a hostile peer could make the other side's write block.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

/// Most datagrams one drain takes, so a flooding peer cannot keep us busy.
const DRAIN_MAX: u64 = 1024;
/// Rings one `recvmmsg` takes.
pub const DRAIN_BATCH: usize = 32;

impl Doorbell {
    /// A connected pair: `(waiter, ringer)`.
    pub fn pair() -> io::Result<(Doorbell, Doorbell)> {
        let mut fds = [0 as RawFd; 2];
        cvt(
            // SAFETY: `fds` is a live array of two ints for the kernel to fill.
            unsafe {
                libc::socketpair(
                    libc::AF_UNIX,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    0,
                    fds.as_mut_ptr(),
                )
            } as libc::c_long,
            "socketpair(doorbell)",
        )?;
        // SAFETY: socketpair returned two fresh descriptors that we now own.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((Doorbell { fd: a }, Doorbell { fd: b }))
    }

    /// Wraps a descriptor received from elsewhere.
    pub fn from_fd(fd: OwnedFd) -> Doorbell {
        Doorbell { fd }
    }

    /// Another handle to the same end.
    pub fn try_clone(&self) -> io::Result<Doorbell> {
        Ok(Doorbell {
            fd: self.fd.try_clone()?,
        })
    }

    /// Rings (ringer end). Never blocks: a full queue already means "pending",
    /// and a peer that has gone away has nobody left to wake.
    pub fn ring(&self) -> io::Result<()> {
        let b = [1u8];
        crate::count_syscall();
        // SAFETY: sends one byte from a live buffer on a descriptor we hold.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                b.as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN)
            | Some(libc::ENOBUFS)
            | Some(libc::ECONNREFUSED)
            | Some(libc::EPIPE) => Ok(()),
            _ => Err(io::Error::new(e.kind(), format!("doorbell send: {e}"))),
        }
    }

    /// Takes every pending ring (waiter end) without blocking; 0 if none.
    /// One `recvmmsg` takes up to [`DRAIN_BATCH`] rings, so the usual case
    /// (one ring waiting) costs one system call, not a read and a second
    /// that finds the queue empty.
    pub fn drain(&self) -> io::Result<u64> {
        let mut n = 0;
        while n < DRAIN_MAX {
            let got = self.drain_batch()?;
            n += got as u64;
            if got < DRAIN_BATCH {
                break;
            }
        }
        Ok(n)
    }

    /// One `recvmmsg` of up to [`DRAIN_BATCH`] one-byte rings.
    fn drain_batch(&self) -> io::Result<usize> {
        let mut bytes = [0u8; DRAIN_BATCH];
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; DRAIN_BATCH];
        for (v, b) in iov.iter_mut().zip(bytes.iter_mut()) {
            v.iov_base = (b as *mut u8).cast();
            v.iov_len = 1;
        }
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; DRAIN_BATCH] = unsafe { std::mem::zeroed() };
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        crate::count_syscall();
        // SAFETY: each header points at one iovec over one byte of `bytes`,
        // all live for the call; the kernel writes at most that byte.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                DRAIN_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
            _ => Err(io::Error::new(e.kind(), format!("doorbell recv: {e}"))),
        }
    }

    /// Waits until rung (or the timeout passes) and drains. Returns 0 on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<u64> {
        loop {
            let v = self.drain()?;
            if v > 0 {
                return Ok(v);
            }
            if !poll_readable(&[self.fd.as_fd()], timeout)?[0] {
                return Ok(0);
            }
        }
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until any of `fds` is readable (or hung up). Returns one flag per fd;
/// all false on timeout. `None` waits forever. EINTR is retried.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds.iter().map(pollfd).collect();
    poll_raw(&mut pfds, timeout)?;
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// Most descriptors [`poll_readable_few`] takes.
pub const POLL_FEW: usize = 8;

/// [`poll_readable`] without allocating, for a path that polls per packet:
/// at most [`POLL_FEW`] descriptors; bit i of the result is set when
/// `fds[i]` is readable (or hung up).
pub fn poll_readable_few(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<u32> {
    if fds.len() > POLL_FEW {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("poll: {} descriptors, at most {POLL_FEW}", fds.len()),
        ));
    }
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; POLL_FEW];
    for (p, fd) in pfds.iter_mut().zip(fds) {
        *p = pollfd(fd);
    }
    poll_raw(&mut pfds[..fds.len()], timeout)?;
    Ok(pfds[..fds.len()]
        .iter()
        .enumerate()
        .fold(0, |m, (i, p)| m | (u32::from(p.revents != 0) << i)))
}

fn pollfd(fd: &BorrowedFd<'_>) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}

fn poll_raw(pfds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    // Round up, so that a sub-millisecond timeout sleeps instead of spinning.
    let ms = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    });
    loop {
        crate::count_syscall();
        // SAFETY: `pfds` is a live, correctly sized array of pollfd.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(io::Error::new(e.kind(), format!("poll: {e}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_then_wait_and_drain() {
        let (w, r) = Doorbell::pair().unwrap();
        assert_eq!(w.drain().unwrap(), 0);
        r.ring().unwrap();
        r.ring().unwrap();
        assert_eq!(w.wait(Some(Duration::from_millis(10))).unwrap(), 2);
        assert_eq!(w.wait(Some(Duration::from_millis(10))).unwrap(), 0);
    }

    #[test]
    fn a_drain_takes_every_ring_in_batches_and_stops_at_its_bound() {
        let (w, r) = Doorbell::pair().unwrap();
        for _ in 0..(DRAIN_BATCH + 5) {
            r.ring().unwrap();
        }
        // One call takes a batch, the next the rest.
        assert_eq!(w.drain_batch().unwrap(), DRAIN_BATCH);
        assert_eq!(w.drain_batch().unwrap(), 5);
        assert_eq!(w.drain_batch().unwrap(), 0);
        for _ in 0..(DRAIN_BATCH + 5) {
            r.ring().unwrap();
        }
        assert_eq!(w.drain().unwrap(), DRAIN_BATCH as u64 + 5);
        assert_eq!(w.drain().unwrap(), 0);
        // A flood is taken in bounded slices.
        let mut rung = 0;
        while rung < 3 * DRAIN_MAX && r.ring().is_ok() {
            rung += 1;
        }
        let first = w.drain().unwrap();
        assert!(first <= DRAIN_MAX + DRAIN_BATCH as u64, "{first}");
    }

    #[test]
    fn a_peer_cannot_make_ringing_block() {
        let (w, r) = Doorbell::pair().unwrap();
        // The waiter never drains and even clears O_NONBLOCK on its end (as a
        // hostile guest could): ringing still returns at once.
        // SAFETY: plain fcntl on a descriptor we hold.
        unsafe { libc::fcntl(w.as_fd().as_raw_fd(), libc::F_SETFL, 0) };
        // SAFETY: as for the waiter: F_SETFL on a descriptor we hold, integer flags.
        unsafe { libc::fcntl(r.as_fd().as_raw_fd(), libc::F_SETFL, 0) };
        for _ in 0..100_000 {
            r.ring().unwrap();
        }
        assert!(w.drain().unwrap() > 0);
        drop(w);
        r.ring().unwrap();
    }

    #[test]
    fn poll_readable_few_reports_which_is_ready() {
        let (w1, r1) = Doorbell::pair().unwrap();
        let (w2, r2) = Doorbell::pair().unwrap();
        let fds = [w1.as_fd(), w2.as_fd()];
        // A sub-millisecond timeout sleeps (rounded up), then reports none.
        let t = Some(Duration::from_micros(300));
        assert_eq!(poll_readable_few(&fds, t).unwrap(), 0);
        r2.ring().unwrap();
        assert_eq!(poll_readable_few(&fds, t).unwrap(), 0b10);
        r1.ring().unwrap();
        assert_eq!(poll_readable_few(&fds, None).unwrap(), 0b11);
        let nine = [w1.as_fd(); POLL_FEW + 1];
        assert!(poll_readable_few(&nine, t).is_err());
    }
}
