use crate::cvt;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Most descriptors one message may carry.
pub const MAX_FDS: usize = 8;

/// A connected AF_UNIX SOCK_SEQPACKET socket: reliable, ordered messages that
/// keep their boundaries and may carry file descriptors.
#[derive(Debug)]
pub struct SeqPacket {
    fd: OwnedFd,
}

/// Credentials of the process at the other end (SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall returning a fresh descriptor.
    let fd = cvt(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) }
            as libc::c_long,
        "socket(AF_UNIX, SOCK_SEQPACKET)",
    )?;
    // SAFETY: fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = (size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    Ok((addr, len))
}

/// Connects a new non-blocking `AF_UNIX` `SOCK_STREAM` socket to `path`
/// and returns it. It never waits: a listener whose backlog is full
/// answers `WouldBlock` (unix(7): a non-blocking connect fails with
/// EAGAIN then), one nobody listens on `ConnectionRefused`.
pub fn connect_stream_nonblocking(path: &Path) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    // SAFETY: plain syscall returning a fresh descriptor.
    let fd = cvt(
        unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        } as libc::c_long,
        "socket(AF_UNIX, SOCK_STREAM)",
    )?;
    // SAFETY: fresh descriptor we now own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

impl SeqPacket {
    /// A connected pair.
    pub fn pair() -> io::Result<(SeqPacket, SeqPacket)> {
        let mut fds = [0 as RawFd; 2];
        cvt(
            // SAFETY: `fds` is a live array of two ints for the kernel to fill.
            unsafe {
                libc::socketpair(
                    libc::AF_UNIX,
                    libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                    0,
                    fds.as_mut_ptr(),
                )
            } as libc::c_long,
            "socketpair",
        )?;
        // SAFETY: socketpair returned two fresh descriptors that we now own.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((SeqPacket { fd: a }, SeqPacket { fd: b }))
    }

    /// Connects to a listening socket at `path`.
    pub fn connect(path: &Path) -> io::Result<SeqPacket> {
        let fd = socket()?;
        let (addr, len) = sockaddr(path)?;
        cvt(
            // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
            unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_un).cast(),
                    len,
                )
            } as libc::c_long,
            "connect",
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{e} ({})", path.display())))?;
        Ok(SeqPacket { fd })
    }

    /// Wraps an inherited descriptor (it must be a SOCK_SEQPACKET socket).
    pub fn from_fd(fd: OwnedFd) -> SeqPacket {
        SeqPacket { fd }
    }

    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<SeqPacket> {
        Ok(SeqPacket {
            fd: self.fd.try_clone()?,
        })
    }

    /// Sends one message with up to [`MAX_FDS`] descriptors attached.
    pub fn send(&self, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_flags(data, fds, 0)
    }

    fn send_flags(&self, data: &[u8], fds: &[BorrowedFd<'_>], flags: i32) -> io::Result<()> {
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many fds in one message",
            ));
        }
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        let mut cbuf = [0u64; 8]; // CMSG_SPACE(8 fds) fits in 64 bytes, 8-aligned
                                  // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let payload = (fds.len() * size_of::<RawFd>()) as u32;
            // SAFETY: CMSG_* compute sizes and walk `cbuf`, which is large enough for
            // one header plus MAX_FDS descriptors and suitably aligned.
            unsafe {
                msg.msg_control = cbuf.as_mut_ptr().cast();
                msg.msg_controllen = libc::CMSG_SPACE(payload) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for (i, fd) in fds.iter().enumerate() {
                    p.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        loop {
            crate::count_syscall();
            // SAFETY: `msg` points at live iovec and control buffers.
            let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | flags) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Err(e);
            }
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(e.kind(), format!("sendmsg: {e}")));
            }
        }
    }

    /// Sends one message without blocking. Returns `Ok(false)` when the peer's
    /// queue is full (the message is dropped), so a peer that never reads
    /// cannot stall the sender.
    pub fn try_send(&self, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<bool> {
        match self.send_flags(data, fds, libc::MSG_DONTWAIT) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Receives one message. Returns its length (0 at end of stream) and any
    /// descriptors it carried. A message larger than `buf` is an error.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        self.recv_flags(buf, 0)
    }

    /// As [`SeqPacket::recv`], but the message stays queued: the next
    /// receive (or [`SeqPacket::discard`]) takes it again. A server that
    /// takes a request only once it has answered leaves it for whoever
    /// serves the socket after a crash.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        self.recv_flags(buf, libc::MSG_PEEK)
    }

    /// Takes the next message off the queue unread (one [`SeqPacket::peek`]
    /// saw).
    pub fn discard(&self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        match self.recv_flags(&mut byte, 0) {
            Ok(_) => Ok(()),
            // Truncated on purpose: its bytes were read by the peek.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn recv_flags(&self, buf: &mut [u8], flags: i32) -> io::Result<(usize, Vec<OwnedFd>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = [0u64; 8];
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<[u64; 8]>() as _;
        let n = loop {
            crate::count_syscall();
            // SAFETY: `msg` points at live iovec and control buffers of the stated sizes.
            let n = unsafe {
                libc::recvmsg(
                    self.fd.as_raw_fd(),
                    &mut msg,
                    libc::MSG_CMSG_CLOEXEC | flags,
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(e.kind(), format!("recvmsg: {e}")));
            }
        };
        let mut fds = Vec::new();
        // SAFETY: the kernel filled `msg`; CMSG_* walk only within msg_controllen,
        // and every SCM_RIGHTS descriptor is fresh and owned by us from now on.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let count =
                        ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                    let p = libc::CMSG_DATA(c).cast::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message larger than buffer",
            ));
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "too many descriptors in message",
            ));
        }
        Ok((n, fds))
    }

    /// Sets a receive timeout; `None` blocks forever.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_RCVTIMEO, t)
    }

    /// Bounds how long a [`SeqPacket::send`] may wait for room (None:
    /// forever); past it the send fails with `WouldBlock`. hv's replies to
    /// a domain that does not read them then fail instead of stalling.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_SNDTIMEO, t)
    }

    fn set_timeout(&self, which: libc::c_int, t: Option<Duration>) -> io::Result<()> {
        let tv = match t {
            Some(d) => libc::timeval {
                tv_sec: d.as_secs() as libc::time_t,
                tv_usec: d.subsec_micros() as libc::suseconds_t,
            },
            None => libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
        };
        cvt(
            // SAFETY: passes a live timeval of the right size.
            unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    which,
                    (&tv as *const libc::timeval).cast(),
                    size_of::<libc::timeval>() as libc::socklen_t,
                )
            } as libc::c_long,
            "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)",
        )?;
        Ok(())
    }

    /// Credentials of the peer process.
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        // SAFETY: ucred is plain old data; all-zero is valid.
        let mut cred: libc::ucred = unsafe { zeroed() };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        cvt(
            // SAFETY: passes a live ucred and its length for the kernel to fill.
            unsafe {
                libc::getsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_PEERCRED,
                    (&mut cred as *mut libc::ucred).cast(),
                    &mut len,
                )
            } as libc::c_long,
            "getsockopt(SO_PEERCRED)",
        )?;
        Ok(PeerCred {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
        })
    }

    /// Sets the send buffer to `bytes` (beyond `wmem_max` when the caller
    /// may): how much a sender that uses [`SeqPacket::try_send`] can have
    /// queued before messages are dropped.
    pub fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        crate::packet::set_buffer(self.as_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, size)
    }

    /// Whether the peer has closed its end (a non-blocking check).
    pub fn peer_closed(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        crate::count_syscall();
        // SAFETY: one live pollfd, no wait.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        rc > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Shuts down both directions, waking a peer blocked in `recv`.
    pub fn shutdown(&self) {
        // SAFETY: plain syscall on a descriptor we hold.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

impl From<SeqPacket> for OwnedFd {
    fn from(s: SeqPacket) -> OwnedFd {
        s.fd
    }
}

impl AsFd for SeqPacket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A listening SOCK_SEQPACKET socket bound to a path.
#[derive(Debug)]
pub struct SeqPacketListener {
    fd: OwnedFd,
}

impl SeqPacketListener {
    /// Binds and listens at `path` (which must not exist).
    pub fn bind(path: &Path) -> io::Result<SeqPacketListener> {
        let fd = socket()?;
        let (addr, len) = sockaddr(path)?;
        cvt(
            // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
            unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_un).cast(),
                    len,
                )
            } as libc::c_long,
            "bind",
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{e} ({})", path.display())))?;
        cvt(
            // SAFETY: plain syscall on a descriptor we own.
            unsafe { libc::listen(fd.as_raw_fd(), 64) } as libc::c_long,
            "listen",
        )?;
        Ok(SeqPacketListener { fd })
    }

    /// A listener this process bound before it replaced its program (hv's
    /// upgrade in place), taken back from its descriptor.
    pub fn from_fd(fd: OwnedFd) -> SeqPacketListener {
        SeqPacketListener { fd }
    }

    /// Accepts one connection.
    pub fn accept(&self) -> io::Result<SeqPacket> {
        loop {
            // SAFETY: NULL address buffers are allowed; returns a fresh descriptor.
            let fd = unsafe {
                libc::accept4(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd >= 0 {
                return Ok(SeqPacket {
                    // SAFETY: accept4 returned a fresh descriptor that we now own.
                    fd: unsafe { OwnedFd::from_raw_fd(fd) },
                });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(e.kind(), format!("accept: {e}")));
            }
        }
    }
}

impl AsFd for SeqPacketListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Doorbell;

    #[test]
    fn messages_carry_descriptors() {
        let (a, b) = SeqPacket::pair().unwrap();
        let (w, e) = Doorbell::pair().unwrap();
        a.send(b"hi", &[e.as_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(fds.len(), 1);
        let e2 = Doorbell::from_fd(fds.into_iter().next().unwrap());
        e2.ring().unwrap();
        assert_eq!(w.drain().unwrap(), 1);
        assert_eq!(a.peer_cred().unwrap().pid, std::process::id() as i32);
        drop(a);
        assert_eq!(b.recv(&mut buf).unwrap().0, 0);
    }

    #[test]
    fn a_peeked_message_stays_queued_until_it_is_discarded() {
        let (a, b) = SeqPacket::pair().unwrap();
        a.send(b"first", &[]).unwrap();
        a.send(b"second", &[]).unwrap();
        let mut buf = [0u8; 16];
        for _ in 0..2 {
            let (n, _) = b.peek(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"first");
        }
        b.discard().unwrap();
        let (n, _) = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"second");
    }

    #[test]
    fn oversized_message_is_an_error() {
        let (a, b) = SeqPacket::pair().unwrap();
        a.send(&[0u8; 64], &[]).unwrap();
        let mut buf = [0u8; 8];
        assert!(b.recv(&mut buf).is_err());
    }
}
