//! An epoll set: each source is registered once with a token, and a wait
//! reports only the sources that are ready (after Firecracker's and
//! rust-vmm's event managers), so a loop's cost per wake-up follows what is
//! ready, not what is registered.

use crate::{count_syscall, cvt};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// What a wait found ready on one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The token the source was registered with.
    pub token: u64,
    /// Data (or a hang-up, which a read then reports) is waiting.
    pub readable: bool,
    /// The source failed or hung up (EPOLLERR, EPOLLHUP): read it to learn
    /// why, or remove it.
    pub failed: bool,
}

/// A level-triggered epoll set with a fixed event buffer, so a wait
/// allocates nothing.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
}

impl Epoll {
    /// A new set reporting at most `max_events` ready sources per wait
    /// (the rest are reported by the next wait: epoll round-robins them).
    pub fn new(max_events: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = cvt(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as libc::c_long,
            "epoll_create1",
        )?;
        // SAFETY: epoll_create1 returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let empty = libc::epoll_event { events: 0, u64: 0 };
        Ok(Epoll {
            fd,
            events: vec![empty; max_events.max(1)],
            ready: 0,
        })
    }

    fn ctl(&self, op: i32, fd: BorrowedFd<'_>, token: u64, what: &'static str) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        count_syscall();
        // SAFETY: `ev` is a live event for the call; both descriptors are open.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) };
        cvt(rc as libc::c_long, what).map(|_| ())
    }

    /// Registers `fd` for input under `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, "epoll_ctl(add)")
    }

    /// Registers a handle of the caller's own on `fd`'s open file under
    /// `token` and returns it: the source then stays registered only as
    /// long as the caller keeps that handle, and [`Epoll::remove`] works on
    /// it whenever the owner of `fd` has closed its own (another process,
    /// or a peer's channel teardown, may hold the same file).
    pub fn add_own(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<OwnedFd> {
        let own = fd.try_clone_to_owned()?;
        self.add(own.as_fd(), token)?;
        Ok(own)
    }

    /// Turns input interest for a registered `fd` on or off, keeping it
    /// registered (a source that must not wake the loop for now, such as a
    /// TAP while the ring it feeds is full).
    pub fn set_interest(&self, fd: BorrowedFd<'_>, token: u64, on: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: if on { libc::EPOLLIN as u32 } else { 0 },
            u64: token,
        };
        count_syscall();
        // SAFETY: `ev` is a live event for the call; both descriptors are open.
        let rc = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_MOD,
                fd.as_raw_fd(),
                &mut ev,
            )
        };
        cvt(rc as libc::c_long, "epoll_ctl(mod)").map(|_| ())
    }

    /// Removes `fd`. Call it before the descriptor is closed: epoll keys
    /// on the open file, which another process (hv) may still hold, so a
    /// closed descriptor can otherwise stay registered.
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, "epoll_ctl(del)")
    }

    /// Waits until a source is ready or `timeout` passes (`None`: forever;
    /// sub-millisecond timeouts are rounded up, so they sleep rather than
    /// spin). EINTR counts as a wake-up with nothing ready. Returns how many
    /// sources are ready; read them with [`Epoll::event`].
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ms = timeout.map_or(-1, |t| {
            t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        });
        count_syscall();
        // SAFETY: `events` is a live buffer of the length passed.
        let rc = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                ms,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                self.ready = 0;
                return Ok(0);
            }
            return Err(io::Error::new(e.kind(), format!("epoll_wait: {e}")));
        }
        self.ready = rc as usize;
        Ok(self.ready)
    }

    /// The `i`th ready source of the last wait (`None` past the end).
    pub fn event(&self, i: usize) -> Option<Event> {
        if i >= self.ready {
            return None;
        }
        let e = self.events.get(i)?;
        let (bits, token) = (e.events, e.u64);
        Some(Event {
            token,
            readable: bits & libc::EPOLLIN as u32 != 0,
            failed: bits & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
        })
    }
}

/// The set itself is pollable: readable while a source in it is ready, so
/// a set can stand for several sources in another loop's set.
impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Doorbell;

    #[test]
    fn reports_only_the_ready_sources_by_token() {
        let mut ep = Epoll::new(4).unwrap();
        let bells: Vec<_> = (0..3).map(|_| Doorbell::pair().unwrap()).collect();
        for (i, (w, _)) in bells.iter().enumerate() {
            ep.add(w.as_fd(), 100 + i as u64).unwrap();
        }
        assert_eq!(ep.wait(Some(Duration::from_micros(100))).unwrap(), 0);
        bells[1].1.ring().unwrap();
        assert_eq!(ep.wait(None).unwrap(), 1);
        let e = ep.event(0).unwrap();
        assert_eq!((e.token, e.readable, e.failed), (101, true, false));
        assert_eq!(ep.event(1), None);
        // Level-triggered: still ready until drained.
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 1);
        bells[1].0.drain().unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 0);
        // A source whose interest is off is not reported, and is again once on.
        bells[0].1.ring().unwrap();
        ep.set_interest(bells[0].0.as_fd(), 100, false).unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 0);
        ep.set_interest(bells[0].0.as_fd(), 100, true).unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(ep.event(0).unwrap().token, 100);
        bells[0].0.drain().unwrap();
        // A removed source is no longer reported.
        ep.remove(bells[2].0.as_fd()).unwrap();
        bells[2].1.ring().unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn an_own_handle_keeps_the_source_removable_after_its_owner_closed_it() {
        let mut ep = Epoll::new(2).unwrap();
        let (w, r) = Doorbell::pair().unwrap();
        let own = ep.add_own(w.as_fd(), 9).unwrap();
        drop(w);
        r.ring().unwrap();
        assert_eq!(ep.wait(Some(Duration::from_millis(100))).unwrap(), 1);
        assert_eq!(ep.event(0).unwrap().token, 9);
        ep.remove(own.as_fd()).unwrap();
        assert_eq!(ep.wait(Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn a_hung_up_source_is_reported_failed() {
        let mut ep = Epoll::new(2).unwrap();
        let (a, b) = crate::SeqPacket::pair().unwrap();
        ep.add(a.as_fd(), 7).unwrap();
        drop(b);
        assert_eq!(ep.wait(Some(Duration::from_millis(100))).unwrap(), 1);
        assert!(ep.event(0).unwrap().failed);
        assert!(ep.add(a.as_fd(), 7).is_err(), "adding twice is refused");
    }
}
