//! AF_PACKET raw sockets (packet(7), netdevice(7)): the driver domain's
//! "physical NIC" driver, bound to one real interface.

use crate::cvt;
use crate::iov::{self, IoPart, MAX_IO_PARTS};
use crate::tap::{ifreq_named, with_iovecs};
use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Socket buffer size asked for in each direction: room for a burst of
/// 64 KiB GSO frames, or a few thousand full-size ones.
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// A raw packet socket bound to one interface: every frame the interface
/// receives (promiscuously), and a way to transmit whole Ethernet frames on it.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    name: String,
    ifindex: u32,
    vnet_hdr: bool,
}

fn setsockopt_int(fd: BorrowedFd<'_>, level: i32, opt: i32, v: libc::c_int) -> io::Result<()> {
    setsockopt(fd, level, opt, &v)
}

/// Sets socket option `opt` of `level` to `v`.
pub(crate) fn setsockopt<T>(fd: BorrowedFd<'_>, level: i32, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: the kernel reads size_of::<T>() bytes from a live reference.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(rc as libc::c_long, "setsockopt")?;
    Ok(())
}

/// Sets a socket buffer size, past the rmem_max/wmem_max limit when we hold
/// CAP_NET_ADMIN over the host (the FORCE variant), within it otherwise (a
/// jailed driver domain: hv::jail).
pub(crate) fn set_buffer(
    fd: BorrowedFd<'_>,
    force: i32,
    plain: i32,
    size: libc::c_int,
) -> io::Result<()> {
    match setsockopt_int(fd, libc::SOL_SOCKET, force, size) {
        // `cvt` wraps the OS error with context, so match on its kind.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            setsockopt_int(fd, libc::SOL_SOCKET, plain, size)
        }
        r => r,
    }
}

/// Fixes a socket's receive buffer at `bytes` (SO_RCVBUF; the kernel
/// doubles it for its bookkeeping and caps it at `rmem_max`), which also
/// turns the kernel's receive-buffer autotuning off for it (socket(7)).
pub fn set_socket_rcvbuf(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let size = libc::c_int::try_from(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "receive buffer too large"))?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, size).map_err(named("SO_RCVBUF"))
}

/// The name of a failed socket option, in its error.
fn named(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A packet socket's options: the `virtio_net_hdr` in front when
/// `vnet_hdr`, VLAN tags as auxiliary data, no echo of its own
/// transmissions, and large buffers.
fn set_options(b: BorrowedFd<'_>, vnet_hdr: bool) -> io::Result<()> {
    if vnet_hdr {
        setsockopt_int(b, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
            .map_err(named("PACKET_VNET_HDR"))?;
    }
    // The kernel takes a received frame's VLAN tag off its bytes; the
    // tag comes back as auxiliary data (see `VlanTag`).
    setsockopt_int(b, libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
        .map_err(named("PACKET_AUXDATA"))?;
    // Linux 4.20 and later; without it every transmission would come back.
    setsockopt_int(b, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
        .map_err(named("PACKET_IGNORE_OUTGOING"))?;
    set_buffer(b, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUFFER)
        .map_err(named("SO_RCVBUF"))?;
    set_buffer(b, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUFFER).map_err(named("SO_SNDBUF"))
}

/// Binds the socket to every protocol on interface `ifindex`.
fn bind_all(b: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    cvt(
        // SAFETY: `sll` is a valid sockaddr_ll of the stated size.
        unsafe {
            libc::bind(
                b.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        } as libc::c_long,
        "bind",
    )?;
    Ok(())
}

/// Reads an integer socket option.
fn getsockopt_int(fd: BorrowedFd<'_>, level: i32, opt: i32) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(rc as libc::c_long, "getsockopt")?;
    Ok(v)
}

/// The interface index packet socket `fd` is bound to; None once the
/// interface left the socket's namespace or went away (the kernel unbinds
/// it then). An error when `fd` is not a packet socket.
pub fn bound_ifindex(fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `sll`, which is that large.
    let rc = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut sll as *mut libc::sockaddr_ll).cast(),
            &mut len,
        )
    };
    cvt(rc as libc::c_long, "getsockname")?;
    if sll.sll_family != libc::AF_PACKET as libc::c_ushort {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a packet socket",
        ));
    }
    Ok(u32::try_from(sll.sll_ifindex).ok().filter(|&i| i > 0))
}

/// Puts interface `ifindex` in promiscuous mode for as long as the socket lives.
fn set_promisc(b: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { zeroed() };
    mreq.mr_ifindex = ifindex as libc::c_int;
    mreq.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
    setsockopt(b, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
        .map_err(named("PACKET_MR_PROMISC"))
}

impl PacketSocket {
    /// Opens a raw packet socket on interface `ifname` of the calling
    /// process's network namespace. It sees every frame the interface
    /// receives (the interface is put in promiscuous mode for as long as the
    /// socket lives) but not the frames it sends itself. With `vnet_hdr`,
    /// every frame read or written carries a
    /// [`VNET_HDR_LEN`](crate::VNET_HDR_LEN)-byte `virtio_net_hdr` in front,
    /// which is how checksum and segmentation offload cross the socket.
    /// Non-blocking, close-on-exec.
    pub fn bind(ifname: &str, vnet_hdr: bool) -> io::Result<PacketSocket> {
        Self::bind_with(ifname, vnet_hdr, true)
    }

    /// Like [`PacketSocket::bind`], but the interface is left out of
    /// promiscuous mode: a multi-queue port's dedicated queue (a macvlan
    /// whose frames are those to its own MAC).
    pub fn bind_queue(ifname: &str) -> io::Result<PacketSocket> {
        Self::bind_with(ifname, true, false)
    }

    fn bind_with(ifname: &str, vnet_hdr: bool, promisc: bool) -> io::Result<PacketSocket> {
        let ctx =
            |e: io::Error| io::Error::new(e.kind(), format!("packet socket on {ifname}: {e}"));
        let ifindex = ifindex(ifname)?;
        // Protocol 0 until bind: a socket created with ETH_P_ALL would start
        // queueing frames from every interface before bind narrowed it to one.
        // SAFETY: plain syscall returning a fresh descriptor.
        let fd = cvt(
            unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            } as libc::c_long,
            "socket(AF_PACKET, SOCK_RAW)",
        )
        .map_err(ctx)?;
        // SAFETY: socket returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        set_options(fd.as_fd(), vnet_hdr).map_err(ctx)?;
        bind_all(fd.as_fd(), ifindex).map_err(ctx)?;
        if promisc {
            // A bridge port must hear frames for every MAC behind it.
            set_promisc(fd.as_fd(), ifindex).map_err(ctx)?;
        }
        Ok(PacketSocket {
            fd,
            name: ifname.to_owned(),
            ifindex,
            vnet_hdr,
        })
    }

    /// Takes over packet socket `fd`, which another process opened with
    /// [`PacketSocket::bind`] (hv keeps a driver domain's uplink sockets
    /// across its restarts, so frames that arrive meanwhile wait in the
    /// socket). It must be bound to `ifname` of the caller's namespace and
    /// carry `virtio_net_hdr`s as `vnet_hdr` says; the filter an earlier
    /// owner attached is taken off.
    pub fn adopt(fd: OwnedFd, ifname: &str, vnet_hdr: bool) -> io::Result<PacketSocket> {
        let ctx =
            |e: io::Error| io::Error::new(e.kind(), format!("packet socket on {ifname}: {e}"));
        let want = ifindex(ifname)?;
        let bound = bound_ifindex(fd.as_fd()).map_err(ctx)?;
        if bound != Some(want) {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the kept socket is bound to interface index {bound:?}, not {want}"),
            )));
        }
        let hdr =
            getsockopt_int(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_VNET_HDR).map_err(ctx)?;
        if (hdr != 0) != vnet_hdr {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the kept socket's virtio-net header setting differs",
            )));
        }
        // Nothing attached is fine (ENOENT).
        let _ = setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0);
        crate::set_nonblocking(fd.as_fd()).map_err(ctx)?;
        Ok(PacketSocket {
            fd,
            name: ifname.to_owned(),
            ifindex: want,
            vnet_hdr,
        })
    }

    /// The socket's descriptor, given up (to be kept by another process).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// The bound interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Whether frames carry a `virtio_net_hdr` in front.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Receives one frame (the vnet header in front, when enabled); `Ok(None)`
    /// when nothing is queued. A frame that does not fit in `buf` is consumed
    /// and reported as an `InvalidData` error rather than silently cut.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.recv_tagged(buf)?.map(|(n, _)| n))
    }

    /// Like [`PacketSocket::recv`], with the VLAN tag the kernel took off
    /// the frame, if it had one.
    pub fn recv_tagged(&self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<VlanTag>)>> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut ctrl = AuxSpace::default();
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.0.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<AuxSpace>() as _;
        let n = loop {
            crate::count_syscall();
            // SAFETY: `msg` points at one live iovec over `buf`; with MSG_TRUNC
            // the kernel still writes at most `buf.len()` bytes and returns the
            // frame's real length.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(self.ctx(io::Error::new(e.kind(), format!("recvmsg: {e}")))),
            }
        };
        if n > buf.len() || msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(self.ctx(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("dropped a {n}-byte frame: buffer holds {}", buf.len()),
            )));
        }
        Ok(Some((n, aux_tag(&msg))))
    }

    /// Transmits one frame gathered from `parts` (with the vnet header first,
    /// when enabled) and returns the bytes sent. When the socket or device
    /// queue is full (EAGAIN, ENOBUFS) the frame is dropped and the error has
    /// kind `WouldBlock`, so the caller can count the drop.
    pub fn send(&self, parts: &[&[u8]]) -> io::Result<usize> {
        with_iovecs(parts, |iov| {
            // SAFETY: msghdr is plain old data; all-zero is valid (no address:
            // the socket is bound, so the frame leaves on its interface).
            let mut msg: libc::msghdr = unsafe { zeroed() };
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len();
            loop {
                crate::count_syscall();
                // SAFETY: `msg` points at live iovecs over borrowed slices, which
                // the kernel only reads.
                let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
                if n >= 0 {
                    return Ok(n as usize);
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                        return Err(self.ctx(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!("sendmsg: {e}"),
                        )))
                    }
                    _ => return Err(self.ctx(io::Error::new(e.kind(), format!("sendmsg: {e}")))),
                }
            }
        })
    }

    /// Transmits one frame gathered from `parts`, which may point into
    /// shared memory (Menon 2006 §4.1: the payload goes out from the guest's
    /// buffers). Errors as for [`PacketSocket::send`].
    pub fn send_parts(&self, parts: &[IoPart<'_>]) -> io::Result<usize> {
        let mut iov = iov::iovecs();
        let n = iov::gather(parts, &mut iov).map_err(|e| self.ctx(e))?;
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n;
        loop {
            crate::count_syscall();
            // SAFETY: `msg` points at iovecs checked against memory `parts`
            // borrows for this call; the kernel only reads through them.
            let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
            if r >= 0 {
                return Ok(r as usize);
            }
            match self.send_error() {
                None => continue,
                Some(e) => return Err(e),
            }
        }
    }

    /// Transmits several frames in one `sendmmsg`, each gathered from its
    /// parts; at most [`SEND_BATCH`] per call. Returns how many were sent
    /// (the first frame's error only when none was).
    pub fn send_batch(&self, frames: &[&[IoPart<'_>]]) -> io::Result<usize> {
        let count = frames.len().min(SEND_BATCH);
        if count == 0 {
            return Ok(0);
        }
        let total: usize = frames[..count].iter().map(|f| f.len()).sum();
        if total > SEND_BATCH_PARTS {
            return Err(self.ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{total} parts in one batch, at most {SEND_BATCH_PARTS}"),
            )));
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; SEND_BATCH_PARTS];
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; SEND_BATCH] = unsafe { zeroed() };
        let mut at = 0;
        for (m, parts) in msgs.iter_mut().zip(frames) {
            let mut one = iov::iovecs();
            let n = iov::gather(parts, &mut one).map_err(|e| self.ctx(e))?;
            iov[at..at + n].copy_from_slice(&one[..n]);
            m.msg_hdr.msg_iovlen = n;
            at += n;
        }
        // Pointers only once `iov` is complete (it no longer moves).
        let mut at = 0;
        for m in msgs.iter_mut().take(count) {
            m.msg_hdr.msg_iov = iov[at..].as_mut_ptr();
            at += m.msg_hdr.msg_iovlen;
        }
        loop {
            crate::count_syscall();
            // SAFETY: `msgs[..count]` point at iovecs checked against memory
            // the frames borrow for this call; the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    count as libc::c_uint,
                    0,
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            match self.send_error() {
                None => continue,
                Some(e) => return Err(e),
            }
        }
    }

    /// Receives up to a batch of frames in one `recvmmsg`, without waiting;
    /// returns how many arrived (0 when none was queued).
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let count = batch.lens.len().min(RECV_BATCH);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; RECV_BATCH];
        let slot = batch.slot;
        for (v, b) in iov.iter_mut().zip(batch.slots_mut()) {
            v.iov_base = b.as_mut_ptr().cast();
            v.iov_len = slot;
        }
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { zeroed() };
        for ((m, v), c) in msgs.iter_mut().zip(iov.iter_mut()).zip(&mut batch.ctrl) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = c.0.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = size_of::<AuxSpace>() as _;
        }
        batch.count = 0;
        // SAFETY: each of the first `count` headers points at one iovec
        // over a distinct buffer of `batch` (and its control space), which
        // lives for this call.
        let n = unsafe { self.recvmmsg_now(&mut msgs[..count])? };
        for (i, m) in msgs.iter().take(n).enumerate() {
            let len = m.msg_len as usize;
            let cut = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > batch.slot;
            batch.lens[i] = if cut { Err(len) } else { Ok(len) };
            batch.tags[i] = aux_tag(&m.msg_hdr);
        }
        batch.count = n;
        Ok(n)
    }

    /// Maps a failed send's errno: `None` to retry (EINTR); a full queue
    /// (EAGAIN, ENOBUFS) is `WouldBlock`, so the caller can count the drop.
    fn send_error(&self) -> Option<io::Error> {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => None,
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Some(self.ctx(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("send: {e}"),
            ))),
            _ => Some(self.ctx(io::Error::new(e.kind(), format!("send: {e}")))),
        }
    }

    /// Replaces the socket's filter (SO_ATTACH_FILTER): from now on it
    /// queues only the frames `f` takes. Frames already queued stay.
    pub fn set_filter(&self, f: &crate::SocketFilter) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: f.prog.len() as u16,
            // The kernel copies the program during the call and only reads it.
            filter: f.prog.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        setsockopt(
            self.fd.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
        )
        .map_err(|e| self.ctx(io::Error::new(e.kind(), format!("SO_ATTACH_FILTER: {e}"))))
    }

    /// Frames received and frames the kernel dropped (its queue was full)
    /// since the last call (PACKET_STATISTICS reads and resets them).
    pub fn take_stats(&self) -> io::Result<(u64, u64)> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        cvt(
            // SAFETY: the kernel writes at most `len` bytes into `st`.
            unsafe {
                libc::getsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    (&mut st as *mut libc::tpacket_stats).cast(),
                    &mut len,
                )
            } as libc::c_long,
            "getsockopt(PACKET_STATISTICS)",
        )
        .map_err(|e| self.ctx(e))?;
        Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
    }

    /// Receives one frame scattered over `parts` (a private vnet header,
    /// then ranges of a writable shared mapping: a guest's posted buffers,
    /// Ram thesis 3.3), without waiting. `Ok(None)` when nothing is queued;
    /// `Ok(Some(Err(len)))` when the frame was longer than the parts and so
    /// was consumed but not kept whole.
    pub fn recv_scatter(
        &self,
        parts: &mut [crate::IoPartMut<'_>],
    ) -> io::Result<Option<Result<usize, usize>>> {
        let mut iov = iov::iovecs();
        let n = iov::scatter(parts, &mut iov).map_err(|e| self.ctx(e))?;
        let room = [iov[..n].iter().map(|v| v.iov_len).sum()];
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; 1] = unsafe { zeroed() };
        msgs[0].msg_hdr.msg_iov = iov.as_mut_ptr();
        msgs[0].msg_hdr.msg_iovlen = n;
        let mut lens = [Ok(0)];
        // SAFETY: the header points at iovecs `iov::scatter` checked against
        // memory `parts` borrows mutably (or a writable mapping) for this
        // call, `room` their total length.
        let got = unsafe { self.recv_msgs(&mut msgs, &room, &mut lens) }?;
        Ok((got == 1).then_some(lens[0]))
    }

    /// Receives up to [`SCATTER_BATCH`] frames in one `recvmmsg`, frame k
    /// scattered over `msgs[k]` (a private vnet header, a range of a
    /// writable shared mapping, a private overflow: Ram thesis 3.3's
    /// placement, batched), without waiting. Returns how many arrived
    /// (0: none queued); `lens[k]` as for [`PacketSocket::recv_scatter`].
    pub fn recv_scatter_batch<const P: usize>(
        &self,
        msgs: &mut [[crate::IoPartMut<'_>; P]],
        lens: &mut [Result<usize, usize>],
    ) -> io::Result<usize> {
        let count = msgs.len().min(lens.len()).min(SCATTER_BATCH);
        if P > SCATTER_BATCH_PARTS {
            return Err(self.ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{P} parts per frame, at most {SCATTER_BATCH_PARTS}"),
            )));
        }
        let mut iov = [[libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; SCATTER_BATCH_PARTS]; SCATTER_BATCH];
        let mut room = [0usize; SCATTER_BATCH];
        for k in 0..count {
            let mut one = iov::iovecs();
            let n = iov::scatter(&mut msgs[k], &mut one).map_err(|e| self.ctx(e))?;
            iov[k][..n].copy_from_slice(&one[..n]);
            room[k] = one[..n].iter().map(|v| v.iov_len).sum();
        }
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut hdrs: [libc::mmsghdr; SCATTER_BATCH] = unsafe { zeroed() };
        // Pointers only once `iov` is complete (it no longer moves).
        for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()).take(count) {
            h.msg_hdr.msg_iov = v.as_mut_ptr();
            h.msg_hdr.msg_iovlen = P;
        }
        // SAFETY: each of the first `count` headers points at the iovecs
        // `iov::scatter` checked against the memory of its own message,
        // which `msgs` borrows mutably (or a writable mapping) for this
        // call; `room` holds their total lengths.
        unsafe { self.recv_msgs(&mut hdrs[..count], &room[..count], lens) }
    }

    /// The `recvmmsg` system call over `msgs`, without waiting and with
    /// MSG_TRUNC (a frame's real length comes back even when it did not
    /// fit): how many messages arrived, 0 when none was queued.
    ///
    /// # Safety
    /// Every header's iovecs (and control buffer, if any) must point at
    /// memory writable for the whole call, of the lengths they give, that
    /// no Rust reference reads or writes meanwhile.
    unsafe fn recvmmsg_now(&self, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
        loop {
            crate::count_syscall();
            // SAFETY: the caller's contract; with MSG_TRUNC the kernel
            // writes at most each iovec's length.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(self.ctx(io::Error::new(e.kind(), format!("recvmmsg: {e}")))),
            }
        }
    }

    /// One `recvmmsg` into `msgs` without waiting (MSG_TRUNC: a frame's real
    /// length comes back even when it did not fit): how many arrived, each
    /// one's length in `lens`, `Err` when longer than its `room`.
    ///
    /// # Safety
    /// Every header's iovecs must point at memory writable for the whole
    /// call, of the lengths they give, that no Rust reference reads or
    /// writes meanwhile (private buffers borrowed mutably, or ranges of a
    /// writable shared mapping).
    unsafe fn recv_msgs(
        &self,
        msgs: &mut [libc::mmsghdr],
        room: &[usize],
        lens: &mut [Result<usize, usize>],
    ) -> io::Result<usize> {
        let count = msgs.len().min(room.len()).min(lens.len());
        if count == 0 {
            return Ok(0);
        }
        // SAFETY: the caller's contract.
        let n = unsafe { self.recvmmsg_now(&mut msgs[..count])? };
        for ((m, r), l) in msgs.iter().zip(room).zip(lens.iter_mut()).take(n) {
            let len = m.msg_len as usize;
            let cut = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > *r;
            *l = if cut { Err(len) } else { Ok(len) };
        }
        Ok(n)
    }

    /// Sets the receive buffer (how much the kernel queues before it drops).
    pub fn set_rcvbuf(&self, bytes: usize) -> io::Result<()> {
        let size = bytes.min(libc::c_int::MAX as usize / 2) as libc::c_int;
        set_buffer(self.fd.as_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, size)
            .map_err(|e| self.ctx(io::Error::new(e.kind(), format!("SO_RCVBUF: {e}"))))
    }

    /// The bound interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn ctx(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("packet socket on {}: {e}", self.name))
    }
}

/// A VLAN tag the kernel took off a received frame: Linux keeps a tag
/// apart from the frame's bytes once it is received (`skb_vlan_untag`) and
/// reports it to a packet socket as `PACKET_AUXDATA` (packet(7)); a bridge
/// puts it back to see the frame as it was on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// The tag protocol identifier (0x8100 for 802.1Q, 0x88a8 for 802.1ad).
    pub tpid: u16,
    /// Priority, drop eligibility and VLAN ID.
    pub tci: u16,
}

/// Control space for one `PACKET_AUXDATA` message, aligned for `cmsghdr`
/// (`CMSG_SPACE` of a `tpacket_auxdata` is 40 bytes on 64-bit Linux).
#[derive(Default)]
struct AuxSpace([u64; 8]);

/// The VLAN tag in the auxiliary data of a received message, if any.
fn aux_tag(msg: &libc::msghdr) -> Option<VlanTag> {
    // SAFETY: CMSG_LEN is arithmetic on its argument.
    let want = unsafe { libc::CMSG_LEN(size_of::<libc::tpacket_auxdata>() as u32) } as usize;
    // SAFETY: `msg` is a header the kernel filled, its control pointer and
    // length describing a live `AuxSpace` (or null and 0); CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within `msg_controllen` and return null past it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: `c` is a non-null header inside the control buffer.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_PACKET
            && h.cmsg_type == libc::PACKET_AUXDATA
            && h.cmsg_len as usize >= want
        {
            // SAFETY: the header's length covers a whole tpacket_auxdata
            // (checked above), which is plain old data; it may be unaligned.
            let aux: libc::tpacket_auxdata =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
            if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
                return None;
            }
            let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                aux.tp_vlan_tpid
            } else {
                0x8100
            };
            return Some(VlanTag {
                tpid,
                tci: aux.tp_vlan_tci,
            });
        }
        // SAFETY: as for CMSG_FIRSTHDR; `c` is a header of `msg`.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    None
}

/// Most frames per [`PacketSocket::send_batch`].
pub const SEND_BATCH: usize = 32;
/// Most parts over all frames of one [`PacketSocket::send_batch`].
/// Most parts (iovecs) one [`PacketSocket::send_batch`] takes in all.
pub const SEND_BATCH_PARTS: usize = 4 * MAX_IO_PARTS;
/// Most frames per [`PacketSocket::recv_batch`].
pub const RECV_BATCH: usize = 64;
/// Most frames one [`PacketSocket::recv_scatter_batch`] receives.
pub const SCATTER_BATCH: usize = 32;
/// Most parts each frame of a scatter batch has.
pub const SCATTER_BATCH_PARTS: usize = 4;

/// Buffers for [`PacketSocket::recv_batch`], allocated once and reused for
/// every batch.
pub struct RecvBatch {
    /// One allocation holding every frame's slot, the first at `base`.
    mem: Vec<u8>,
    base: usize,
    slot: usize,
    lens: Vec<Result<usize, usize>>,
    ctrl: Vec<AuxSpace>,
    tags: Vec<Option<VlanTag>>,
    count: usize,
}

impl RecvBatch {
    /// Room for `frames` frames (at most [`RECV_BATCH`] are used) of up to
    /// `frame_size` bytes each.
    pub fn new(frames: usize, frame_size: usize) -> RecvBatch {
        RecvBatch::aligned(frames, frame_size, 1)
    }

    /// Room for `frames` frames in slots of `slot` bytes laid out one after
    /// another from an address aligned to `align` (a power of two): with a
    /// 4 KiB alignment and slot, each frame has a page of its own; with a
    /// 2 KiB slot, two frames share each page.
    pub fn aligned(frames: usize, slot: usize, align: usize) -> RecvBatch {
        let frames = frames.clamp(1, RECV_BATCH);
        let align = align.max(1).next_power_of_two();
        let mem = vec![0u8; frames * slot + align - 1];
        let base = mem.as_ptr().align_offset(align);
        RecvBatch {
            mem,
            base,
            slot,
            lens: vec![Ok(0); frames],
            ctrl: (0..frames).map(|_| AuxSpace::default()).collect(),
            tags: vec![None; frames],
            count: 0,
        }
    }

    /// Asks for transparent huge pages under the slots (Menon 2006 §5.3;
    /// best before the first batch touches them). Slots that fit in one
    /// huge page move into a fresh allocation that holds a whole aligned
    /// one, so that they sit on it. Returns the bytes advised.
    pub fn advise_huge(&mut self) -> usize {
        use crate::huge::HUGE_PAGE;
        if self.lens.len() * self.slot <= HUGE_PAGE {
            self.mem = vec![0u8; 2 * HUGE_PAGE];
            self.base = self.mem.as_ptr().align_offset(HUGE_PAGE);
        }
        crate::huge::advise_huge(&mut self.mem[self.base..])
    }

    /// Gives the pages under the first `frames` slots back to the kernel
    /// (`MADV_DONTNEED`), so that the next frame received into each lands
    /// on a page the kernel has just allocated and zeroed: the driver
    /// domain's socket-buffer allocator of Xen 2.0 under memory pressure,
    /// which released its pages and zeroed every page it acquired anew
    /// (Menon 2006 §4.2, §6.4.1). Only page-sized, page-aligned slots can;
    /// returns the pages released (0 for other slots).
    pub fn release_pages(&mut self, frames: usize) -> io::Result<usize> {
        let n = frames.min(self.lens.len());
        let start = self.mem.as_ptr() as usize + self.base;
        let aligned =
            self.slot.is_multiple_of(crate::PAGE_SIZE) && start.is_multiple_of(crate::PAGE_SIZE);
        if n == 0 || !aligned {
            return Ok(0);
        }
        let len = n * self.slot;
        let pages = &mut self.mem[self.base..self.base + len];
        // SAFETY: the range is whole pages inside `mem`, a private anonymous
        // allocation this batch owns and nothing else borrows (`&mut self`).
        // MADV_DONTNEED leaves it mapped and makes its next read see zeros,
        // a valid value for its bytes; no frame view outlives the callback
        // that read it.
        let r = unsafe { libc::madvise(pages.as_mut_ptr().cast(), len, libc::MADV_DONTNEED) };
        crate::count_syscall();
        crate::cvt(r as libc::c_long, "madvise(MADV_DONTNEED)")?;
        Ok(len / crate::PAGE_SIZE)
    }

    /// Each frame's slot, in order.
    fn slots_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        let n = self.lens.len();
        self.mem[self.base..].chunks_exact_mut(self.slot).take(n)
    }

    /// Bytes each frame may have (longer ones are dropped, not cut).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The address of frame `i`'s slot (for checking a layout).
    pub fn slot_addr(&self, i: usize) -> usize {
        self.mem[self.base..].as_ptr() as usize + i * self.slot
    }

    /// Frames the last [`PacketSocket::recv_batch`] received.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the last batch was empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The VLAN tag the kernel took off frame `i` of the last batch.
    pub fn tag(&self, i: usize) -> Option<VlanTag> {
        self.tags
            .get(i)
            .copied()
            .flatten()
            .filter(|_| i < self.count)
    }

    /// Frame `i` of the last batch, or `Err(real length)` when it was longer
    /// than its buffer and so was dropped rather than cut.
    pub fn frame(&self, i: usize) -> Result<&[u8], usize> {
        if i >= self.count {
            return Err(0);
        }
        match self.lens[i] {
            Ok(n) => Ok(&self.mem[self.base + i * self.slot..][..n]),
            Err(n) => Err(n),
        }
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The index of interface `name` in the calling process's network namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    ifreq_named(name)?; // the same name checks as everywhere else
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a live NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {name}: {e}")));
    }
    Ok(idx)
}

/// A throwaway socket to address interface ioctls to.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall returning a fresh descriptor.
    let fd = cvt(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }
            as libc::c_long,
        "socket(AF_INET, SOCK_DGRAM)",
    )?;
    // SAFETY: fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this process may open an ICMP echo ("ping") socket in its
/// network namespace: its group is inside `net.ipv4.ping_group_range`.
/// Unprivileged programs that relay ping, pasta among them, need it.
pub fn ping_sockets_allowed() -> bool {
    // SAFETY: plain syscall returning a fresh descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: fresh descriptor we own; dropping it closes it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    true
}

/// The Ethernet address of interface `ifname` (SIOCGIFHWADDR).
pub fn get_mac(ifname: &str) -> io::Result<[u8; 6]> {
    let ctx = |e: io::Error| io::Error::new(e.kind(), format!("interface {ifname}: {e}"));
    let mut ifr = ifreq_named(ifname).map_err(ctx)?;
    let s = ioctl_socket().map_err(ctx)?;
    cvt(
        // SAFETY: SIOCGIFHWADDR reads and writes one `struct ifreq`, which `ifr` is.
        unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFHWADDR, &mut ifr) } as libc::c_long,
        "ioctl(SIOCGIFHWADDR)",
    )
    .map_err(ctx)?;
    // SAFETY: the kernel filled the hwaddr member of the union; every bit
    // pattern of a sockaddr is a valid value.
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// Sets the Ethernet address of interface `ifname` (SIOCSIFHWADDR; needs
/// CAP_NET_ADMIN, and some drivers want the link down).
pub fn set_mac(ifname: &str, mac: [u8; 6]) -> io::Result<()> {
    let ctx = |e: io::Error| io::Error::new(e.kind(), format!("interface {ifname}: {e}"));
    let mut ifr = ifreq_named(ifname).map_err(ctx)?;
    // SAFETY: sockaddr is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr = unsafe { zeroed() };
    sa.sa_family = libc::ARPHRD_ETHER;
    for (d, s) in sa.sa_data.iter_mut().zip(mac) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_hwaddr = sa;
    let s = ioctl_socket().map_err(ctx)?;
    cvt(
        // SAFETY: SIOCSIFHWADDR reads one `struct ifreq`, which `ifr` is.
        unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFHWADDR, &ifr) } as libc::c_long,
        "ioctl(SIOCSIFHWADDR)",
    )
    .map_err(ctx)?;
    Ok(())
}

/// Helpers for tests that build real interfaces (they need root).
#[cfg(test)]
pub(crate) mod testutil {
    use std::io;
    use std::os::fd::AsFd;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// Local experimental ethertype (IEEE 802): the host stack ignores it.
    pub const ETHERTYPE: u16 = 0x88b5;

    pub use ::testutil::root_or_skip;

    /// A unique interface name for this test process: `sntst<pid>` + `suffix`.
    pub fn ifname(suffix: &str) -> String {
        let n = format!("sntst{}{suffix}", std::process::id() % 10000);
        assert!(n.len() < libc::IFNAMSIZ, "{n} too long");
        n
    }

    /// Runs `ip args...`, panicking with its stderr on failure.
    pub fn ip(args: &[&str]) -> String {
        let out = Command::new("ip").args(args).output().expect("run ip");
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Deletes the interface when dropped, even when the test panics.
    pub struct Link(pub String);

    impl Drop for Link {
        fn drop(&mut self) {
            let _ = Command::new("ip")
                .args(["link", "del", &self.0])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// A veth pair `a`, `b`, both up, deleted on drop (deleting one end
    /// deletes both).
    pub fn veth(a: &str, b: &str) -> Link {
        let _ = Command::new("ip")
            .args(["link", "del", a])
            .stderr(std::process::Stdio::null())
            .status();
        ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
        let guard = Link(a.to_owned());
        ip(&["link", "set", a, "up"]);
        ip(&["link", "set", b, "up"]);
        ::testutil::wait_links_up(&[a, b]);
        guard
    }

    /// A broadcast Ethernet frame of our test ethertype: the marker byte
    /// makes frames of concurrent tests tell apart.
    pub fn frame(marker: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0x53, 0x4e, 0, 0, marker]);
        f.extend_from_slice(&ETHERTYPE.to_be_bytes());
        f.extend((0..len - 14).map(|i| (i as u8) ^ marker));
        f
    }

    /// Reads frames via `recv` until one carries ethertype `ethertype` (after
    /// `skip` bytes of vnet header), or `timeout` passes. Other traffic (IPv6
    /// router solicitations and the like) is skipped.
    pub fn recv_matching(
        fd: &impl AsFd,
        mut recv: impl FnMut(&mut [u8]) -> io::Result<Option<usize>>,
        skip: usize,
        ethertype: u16,
        timeout: Duration,
    ) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 70000];
        loop {
            while let Some(n) = recv(&mut buf).expect("recv") {
                let f = &buf[..n];
                if n >= skip + 14 && f[skip + 12..skip + 14] == ethertype.to_be_bytes() {
                    return Some(f.to_vec());
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            crate::poll_readable(&[fd.as_fd()], Some(left)).expect("poll");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::testutil::*;
    use super::*;
    use crate::VNET_HDR_LEN;
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(2);
    const QUIET: Duration = Duration::from_millis(300);

    #[test]
    fn released_slot_pages_come_back_zeroed_and_only_page_slots_release() {
        let mut b = RecvBatch::aligned(4, crate::PAGE_SIZE, crate::PAGE_SIZE);
        for s in b.slots_mut() {
            s.fill(0xab);
        }
        assert_eq!(b.release_pages(2).unwrap(), 2);
        let slots: Vec<Vec<u8>> = b.slots_mut().map(|s| s.to_vec()).collect();
        assert!(slots[0].iter().chain(&slots[1]).all(|&x| x == 0));
        assert!(slots[2].iter().all(|&x| x == 0xab), "past the frames asked");
        assert_eq!(b.release_pages(99).unwrap(), 4, "at most the batch's slots");
        let mut mtu = RecvBatch::aligned(4, 2048, crate::PAGE_SIZE);
        assert_eq!(mtu.release_pages(4).unwrap(), 0);
    }

    fn expect_frame(s: &PacketSocket, ethertype: u16) -> Vec<u8> {
        let skip = if s.vnet_hdr() { VNET_HDR_LEN } else { 0 };
        recv_matching(s, |b| s.recv(b), skip, ethertype, WAIT).expect("frame arrives")
    }

    fn no_frame(s: &PacketSocket, ethertype: u16) {
        let skip = if s.vnet_hdr() { VNET_HDR_LEN } else { 0 };
        let got = recv_matching(s, |b| s.recv(b), skip, ethertype, QUIET);
        assert!(got.is_none(), "unexpected frame {got:?}");
    }

    #[test]
    fn bad_names_are_refused() {
        assert_eq!(ifindex("").unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            ifindex("a-name-far-too-long").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let e = PacketSocket::bind("sntst-nonesuch", false).unwrap_err();
        assert!(e.to_string().contains("sntst-nonesuch"), "{e}");
        assert_eq!(ifindex("lo").unwrap(), 1);
    }

    /// Frames cross a veth pair intact in every header combination, and a
    /// sender never hears its own frame.
    #[test]
    fn veth_frames_cross_intact() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("a"), ifname("b"));
        let _link = veth(&a, &b);
        let zero_hdr = [0u8; VNET_HDR_LEN];
        for (i, (va, vb)) in [(false, false), (true, true), (true, false), (false, true)]
            .into_iter()
            .enumerate()
        {
            let sa = PacketSocket::bind(&a, va).unwrap();
            let sb = PacketSocket::bind(&b, vb).unwrap();
            assert_eq!(sa.ifindex(), ifindex(&a).unwrap());
            let f = frame(0x10 + i as u8, 1514);
            // Scatter-gather: header and payload in separate parts.
            let parts: Vec<&[u8]> = if va {
                vec![&zero_hdr, &f[..14], &f[14..]]
            } else {
                vec![&f[..14], &f[14..]]
            };
            let sent = sa.send(&parts).unwrap();
            assert_eq!(sent, f.len() + if va { VNET_HDR_LEN } else { 0 });
            let got = expect_frame(&sb, ETHERTYPE);
            if vb {
                assert_eq!(got.len(), VNET_HDR_LEN + f.len());
                // No offload asked for: no GSO, no partial checksum.
                assert_eq!(got[1], 0, "gso_type");
                assert_eq!(got[0] & 1, 0, "NEEDS_CSUM");
                assert_eq!(&got[VNET_HDR_LEN..], &f[..]);
            } else {
                assert_eq!(got, f);
            }
            // PACKET_IGNORE_OUTGOING: the sender's socket stays quiet.
            no_frame(&sa, ETHERTYPE);
        }
    }

    #[test]
    fn oversized_frame_is_an_error_not_a_cut() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("c"), ifname("d"));
        let _link = veth(&a, &b);
        let sa = PacketSocket::bind(&a, false).unwrap();
        let sb = PacketSocket::bind(&b, false).unwrap();
        let f = frame(0x20, 1000);
        sa.send(&[&f]).unwrap();
        let mut small = [0u8; 100];
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            crate::poll_readable(&[sb.as_fd()], Some(WAIT)).unwrap();
            match sb.recv(&mut small) {
                Ok(Some(n)) if n < small.len() => continue, // small unrelated traffic
                Ok(None) => {}
                Ok(Some(n)) => panic!("a {n}-byte read from a 1000-byte frame"),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                    assert!(e.to_string().contains("1000-byte"), "{e}");
                    break;
                }
            }
            assert!(std::time::Instant::now() < deadline, "no frame");
        }
    }

    /// A kept socket is taken over only on the interface it is bound to,
    /// with its header setting; what was queued in it before is read by the
    /// new owner; a socket of another kind is refused.
    #[test]
    fn a_kept_socket_is_adopted_only_as_it_was_bound() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("g"), ifname("h"));
        let _link = veth(&a, &b);
        let sb = PacketSocket::bind(&b, true).unwrap();
        assert_eq!(
            bound_ifindex(sb.as_fd()).unwrap(),
            Some(ifindex(&b).unwrap())
        );
        let kept = sb.into_fd();
        let e = PacketSocket::adopt(kept.try_clone().unwrap(), &a, true).unwrap_err();
        assert!(e.to_string().contains("bound to interface index"), "{e}");
        let e = PacketSocket::adopt(kept.try_clone().unwrap(), &b, false).unwrap_err();
        assert!(e.to_string().contains("header"), "{e}");
        let (x, _y) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let e = PacketSocket::adopt(OwnedFd::from(x), &b, true).unwrap_err();
        assert!(e.to_string().contains("not a packet socket"), "{e}");
        // Sent while no one reads, read by the adopter.
        let sa = PacketSocket::bind(&a, false).unwrap();
        sa.send(&[&frame(0x21, 200)]).unwrap();
        let sb = PacketSocket::adopt(kept, &b, true).unwrap();
        let got = recv_matching(&sb, |buf| sb.recv(buf), VNET_HDR_LEN, ETHERTYPE, WAIT);
        assert!(
            got.is_some(),
            "the frame queued before the adoption is lost"
        );
    }

    #[test]
    fn mac_addresses() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("e"), ifname("f"));
        let _link = veth(&a, &b);
        let mac = [0x02, 0x53, 0x4e, 0x01, 0x02, 0x03];
        set_mac(&a, mac).unwrap();
        assert_eq!(get_mac(&a).unwrap(), mac);
        assert!(ip(&["link", "show", &a]).contains("02:53:4e:01:02:03"));
    }

    /// Internet checksum over `data`, folded, not complemented.
    pub fn csum_fold(mut sum: u32, data: &[u8]) -> u16 {
        for c in data.chunks(2) {
            sum += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    /// A TCP/IPv4 super-frame of `payload` bytes in a vnet header asking for
    /// TSO: NEEDS_CSUM over the TCP header, gso_size `mss`. Unicast to a MAC
    /// nobody owns, so the receiving host stack drops it as PACKET_OTHERHOST.
    pub fn gso_tcp4(payload: usize, mss: u16) -> (Vec<u8>, Vec<u8>) {
        let mut f = vec![
            0x02, 0x53, 0x4e, 0xee, 0xee, 0xee, 0x02, 0x53, 0x4e, 0, 0, 0x30,
        ];
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let tot = (20 + 20 + payload) as u16;
        let (src, dst) = ([198, 18, 0, 1], [198, 18, 0, 2]); // RFC 2544 bench range
        let mut iph = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0];
        iph[2..4].copy_from_slice(&tot.to_be_bytes());
        iph.extend_from_slice(&src);
        iph.extend_from_slice(&dst);
        let c = !csum_fold(0, &iph);
        iph[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&iph);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x18; // PSH ACK
        tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
        // Partial checksum: the pseudo-header sum, which the segmenter completes.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src);
        pseudo.extend_from_slice(&dst);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
        tcp[16..18].copy_from_slice(&csum_fold(0, &pseudo).to_be_bytes());
        f.extend_from_slice(&tcp);
        f.extend((0..payload).map(|i| (i % 251) as u8));
        let mut h = vec![0u8; VNET_HDR_LEN];
        h[0] = 1; // VIRTIO_NET_HDR_F_NEEDS_CSUM
        h[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        h[2..4].copy_from_slice(&54u16.to_ne_bytes()); // hdr_len: Ethernet+IP+TCP
        h[4..6].copy_from_slice(&mss.to_ne_bytes());
        h[6..8].copy_from_slice(&34u16.to_ne_bytes()); // csum_start: the TCP header
        h[8..10].copy_from_slice(&16u16.to_ne_bytes()); // csum_offset: tcp.check
        (h, f)
    }

    /// A UDP/IPv4 super-datagram of `payload` bytes in a vnet header asking
    /// for USO (`VIRTIO_NET_HDR_GSO_UDP_L4`): NEEDS_CSUM over the UDP
    /// header, each segment `size` payload bytes; addressed as
    /// [`gso_tcp4`]'s frames are.
    pub fn gso_udp4(payload: usize, size: u16) -> (Vec<u8>, Vec<u8>) {
        let (mut h, tcp) = gso_tcp4(0, size);
        let mut f = tcp[..14 + 20].to_vec();
        let (src, dst) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        let tot = (20 + 8 + payload) as u16;
        f[14 + 2..14 + 4].copy_from_slice(&tot.to_be_bytes());
        f[14 + 9] = 17;
        f[14 + 10..14 + 12].fill(0);
        let c = !csum_fold(0, &f[14..34]);
        f[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
        let ulen = (8 + payload) as u16;
        let mut pseudo = [&src[..], &dst[..], &[0, 17]].concat();
        pseudo.extend_from_slice(&ulen.to_be_bytes());
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&5201u16.to_be_bytes());
        f.extend_from_slice(&ulen.to_be_bytes());
        f.extend_from_slice(&csum_fold(0, &pseudo).to_be_bytes());
        f.extend((0..payload).map(|i| (i % 251) as u8));
        h[1] = 5; // VIRTIO_NET_HDR_GSO_UDP_L4
        h[2..4].copy_from_slice(&42u16.to_ne_bytes()); // hdr_len: Ethernet+IP+UDP
        h[8..10].copy_from_slice(&6u16.to_ne_bytes()); // csum_offset: udp.check
        (h, f)
    }

    /// Frames gathered from shared memory cross a veth intact, one by one
    /// and in a batch, and a batch receive returns several at once; a frame
    /// longer than the batch's buffers is reported, never cut.
    #[test]
    fn shared_memory_gather_and_batches_cross_intact() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        use crate::{IoPart, Mapping, Memfd, RecvBatch};
        use abi::SharedMemory;
        let (a, b) = (ifname("i"), ifname("j"));
        let _link = veth(&a, &b);
        let sa = PacketSocket::bind(&a, true).unwrap();
        let sb = PacketSocket::bind(&b, true).unwrap();
        let m = Memfd::create("t", 8 * 4096, false).unwrap();
        let pool = Mapping::new(m.as_fd(), 0, 8 * 4096, true).unwrap();
        // A GSO super-frame: the header copy private, the payload in pages.
        let (h, f) = gso_tcp4(12000, 1448);
        let (head, rest) = f.split_at(54);
        pool.write_bytes(4096, &rest[..4096]);
        pool.write_bytes(3 * 4096, &rest[4096..]);
        let parts = [
            IoPart::Private(&h),
            IoPart::Private(head),
            IoPart::Shared {
                map: &pool,
                off: 4096,
                len: 4096,
            },
            IoPart::Shared {
                map: &pool,
                off: 3 * 4096,
                len: rest.len() - 4096,
            },
        ];
        assert_eq!(sa.send_parts(&parts).unwrap(), VNET_HDR_LEN + f.len());
        let got = expect_frame(&sb, 0x0800);
        assert_eq!(
            &got[VNET_HDR_LEN..],
            &f[..],
            "gathered frame arrives intact"
        );

        let frames: Vec<Vec<u8>> = (0..5u8)
            .map(|i| frame(0x40 + i, 300 + i as usize))
            .collect();
        for (i, fr) in frames.iter().enumerate() {
            pool.write_bytes(i * 4096, fr);
        }
        let zero = [0u8; VNET_HDR_LEN];
        let lists: Vec<[IoPart<'_>; 2]> = frames
            .iter()
            .enumerate()
            .map(|(i, fr)| {
                [
                    IoPart::Private(&zero),
                    IoPart::Shared {
                        map: &pool,
                        off: i * 4096,
                        len: fr.len(),
                    },
                ]
            })
            .collect();
        let refs: Vec<&[IoPart<'_>]> = lists.iter().map(|l| &l[..]).collect();
        assert_eq!(sa.send_batch(&refs).unwrap(), 5);
        let mut batch = RecvBatch::new(16, 2048);
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while seen.len() < 5 && std::time::Instant::now() < deadline {
            crate::poll_readable(&[sb.as_fd()], Some(WAIT)).unwrap();
            let n = sb.recv_batch(&mut batch).unwrap();
            assert_eq!(n, batch.len());
            for i in 0..n {
                let fr = batch.frame(i).expect("fits");
                if fr.len() > VNET_HDR_LEN + 14
                    && fr[VNET_HDR_LEN + 12..VNET_HDR_LEN + 14] == ETHERTYPE.to_be_bytes()
                {
                    seen.push(fr[VNET_HDR_LEN..].to_vec());
                }
            }
        }
        assert_eq!(seen, frames, "every batched frame arrives, in order");

        // Too long for the batch's buffers: reported with its length.
        let big = frame(0x50, 1400);
        sa.send(&[&zero, &big]).unwrap();
        let mut small = RecvBatch::new(4, 1000);
        let deadline = std::time::Instant::now() + WAIT;
        let mut cut = None;
        while cut.is_none() && std::time::Instant::now() < deadline {
            crate::poll_readable(&[sb.as_fd()], Some(WAIT)).unwrap();
            let n = sb.recv_batch(&mut small).unwrap();
            for i in 0..n {
                if let Err(len) = small.frame(i) {
                    cut = Some(len);
                }
            }
        }
        assert_eq!(cut, Some(VNET_HDR_LEN + big.len()));
    }

    /// A frame read from a TAP lands in shared pages as asked, and one
    /// written from shared pages reaches the other side intact.
    #[test]
    fn tap_scatter_and_gather_through_shared_memory() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        use crate::{IoPart, IoPartMut, Mapping, Memfd, Tap};
        use abi::SharedMemory;
        let name = ifname("k");
        let tap = Tap::create(&name, true).unwrap();
        let _guard = Link(name.clone());
        ip(&["link", "set", &name, "up"]);
        let sock = PacketSocket::bind(&name, false).unwrap();
        let m = Memfd::create("t", 4 * 4096, false).unwrap();
        let pool = Mapping::new(m.as_fd(), 0, 4 * 4096, true).unwrap();
        // Kernel → TAP reader: a frame sent on the interface is read by the TAP.
        let f = frame(0x60, 1400);
        sock.send(&[&f]).unwrap();
        let mut hdr = [0u8; VNET_HDR_LEN];
        let deadline = std::time::Instant::now() + WAIT;
        let n = loop {
            crate::poll_readable(&[tap.as_fd()], Some(WAIT)).unwrap();
            let mut parts = [
                IoPartMut::Private(&mut hdr),
                IoPartMut::Shared {
                    map: &pool,
                    off: 4096,
                    len: 1000,
                },
                IoPartMut::Shared {
                    map: &pool,
                    off: 3 * 4096,
                    len: 4096,
                },
            ];
            let n = tap.readv(&mut parts).unwrap().unwrap_or(0);
            let mut et = [0u8; 2];
            pool.read_bytes(4096 + 12, &mut et);
            if n > 0 && et == ETHERTYPE.to_be_bytes() {
                break n;
            }
            assert!(std::time::Instant::now() < deadline, "no frame on the TAP");
        };
        assert_eq!(n, VNET_HDR_LEN + f.len());
        let mut back = vec![0u8; f.len()];
        pool.read_bytes(4096, &mut back[..1000]);
        pool.read_bytes(3 * 4096, &mut back[1000..]);
        assert_eq!(back, f, "scattered over two pages intact");
        // TAP writer → kernel: the packet socket sees the gathered frame.
        let g = frame(0x61, 5000);
        pool.write_bytes(0, &g[..4096]);
        pool.write_bytes(2 * 4096, &g[4096..]);
        let zero = [0u8; VNET_HDR_LEN];
        let parts = [
            IoPart::Private(&zero),
            IoPart::Shared {
                map: &pool,
                off: 0,
                len: 4096,
            },
            IoPart::Shared {
                map: &pool,
                off: 2 * 4096,
                len: g.len() - 4096,
            },
        ];
        assert_eq!(tap.writev(&parts).unwrap(), VNET_HDR_LEN + g.len());
        let got = recv_matching(&sock, |b| sock.recv(b), 0, ETHERTYPE, WAIT).expect("frame");
        assert_eq!(got, g);
        // A bad range is refused before the system call.
        let bad = [IoPart::Shared {
            map: &pool,
            off: 4 * 4096 - 10,
            len: 20,
        }];
        assert_eq!(
            tap.writev(&bad).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// A 20000-byte TSO frame sent with a vnet header crosses a veth whole
    /// (veth advertises GSO, so nothing segments it) and arrives with its GSO
    /// fields; a plain socket on the peer sees the same super-frame.
    #[test]
    fn veth_carries_gso_frames_whole() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("g"), ifname("h"));
        let _link = veth(&a, &b);
        let sa = PacketSocket::bind(&a, true).unwrap();
        let sb = PacketSocket::bind(&b, true).unwrap();
        let plain = PacketSocket::bind(&b, false).unwrap();
        let (h, f) = gso_tcp4(20000, 1448);
        assert_eq!(sa.send(&[&h, &f]).unwrap(), VNET_HDR_LEN + f.len());
        let got = expect_frame(&sb, 0x0800);
        let u16at = |i: usize| u16::from_ne_bytes([got[i], got[i + 1]]);
        eprintln!(
            "received vnet hdr: flags {:#x} gso_type {} hdr_len {} gso_size {} csum_start {} csum_offset {}, frame {} bytes",
            got[0], got[1], u16at(2), u16at(4), u16at(6), u16at(8), got.len() - VNET_HDR_LEN
        );
        assert_eq!(got.len(), VNET_HDR_LEN + f.len(), "not segmented");
        assert_eq!(got[0] & 1, 1, "NEEDS_CSUM");
        assert_eq!(got[1], 1, "gso_type TCPV4");
        assert_eq!(u16at(4), 1448, "gso_size");
        assert_eq!(u16at(6), 34, "csum_start");
        assert_eq!(u16at(8), 16, "csum_offset");
        assert_eq!(&got[VNET_HDR_LEN..], &f[..]);
        let got = expect_frame(&plain, 0x0800);
        assert_eq!(got, f, "plain socket sees the super-frame as is");
    }
}

#[cfg(test)]
mod recv_layout_tests {
    use super::RecvBatch;

    #[test]
    fn aligned_batches_give_each_frame_a_page_or_half_of_one() {
        let page = RecvBatch::aligned(8, 4096, 4096);
        for i in 0..8 {
            assert_eq!(page.slot_addr(i) % 4096, 0, "slot {i}");
        }
        let half = RecvBatch::aligned(8, 2048, 4096);
        assert_eq!(half.slot(), 2048);
        assert_eq!(half.slot_addr(0) % 4096, 0);
        for i in 0..8 {
            assert_eq!(half.slot_addr(i) / 4096, half.slot_addr(0) / 4096 + i / 2);
        }
        // The old constructor: one slot per frame of the size asked.
        let any = RecvBatch::new(3, 1000);
        assert_eq!(any.slot_addr(2) - any.slot_addr(0), 2000);
        assert!(any.is_empty() && any.frame(0).is_err());
    }
}
