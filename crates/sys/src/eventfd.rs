use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A counter-style eventfd: the doorbell of an event channel.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new non-blocking eventfd with count zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; returns a fresh descriptor on success.
        let fd = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) } as libc::c_long,
            "eventfd",
        )?;
        // SAFETY: eventfd returned a fresh descriptor that we now own.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        })
    }

    /// Wraps a descriptor received from elsewhere (it must be an eventfd).
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Another handle to the same eventfd.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        Ok(EventFd {
            fd: self.fd.try_clone()?,
        })
    }

    /// Adds one to the counter, waking a waiter.
    pub fn signal(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local to a descriptor we hold.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // A saturated counter still means "pending"; nothing is lost.
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(())
        } else {
            Err(io::Error::new(e.kind(), format!("eventfd write: {e}")))
        }
    }

    /// Takes the counter without blocking; 0 when nothing was signalled.
    pub fn consume(&self) -> io::Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live local from a descriptor we hold.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(v);
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(io::Error::new(e.kind(), format!("eventfd read: {e}")))
        }
    }

    /// Waits until signalled (or the timeout passes) and takes the counter.
    /// Returns 0 on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<u64> {
        loop {
            let v = self.consume()?;
            if v > 0 {
                return Ok(v);
            }
            let ready = poll_readable(&[self.fd.as_fd()], timeout)?;
            if !ready[0] {
                return Ok(0);
            }
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until any of `fds` is readable (or hung up). Returns one flag per fd;
/// all false on timeout. `None` waits forever. EINTR is retried.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    loop {
        // SAFETY: `pfds` is a live, correctly sized array of pollfd.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(io::Error::new(e.kind(), format!("poll: {e}")));
        }
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_then_wait() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.consume().unwrap(), 0);
        e.signal().unwrap();
        e.signal().unwrap();
        assert_eq!(e.wait(Some(Duration::from_millis(10))).unwrap(), 2);
        assert_eq!(e.wait(Some(Duration::from_millis(10))).unwrap(), 0);
    }
}
