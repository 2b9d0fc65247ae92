//! TAP devices (Documentation/networking/tuntap.rst, linux/if_tun.h).
//!
//! A guest domain's virtual NIC: netfront writes the frames it took off the
//! rx ring into the TAP, and reads the guest kernel's transmissions out of it.

use crate::cvt;
use crate::iov::{self, IoPart, IoPartMut, MAX_IO_PARTS};
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Length of `struct virtio_net_hdr` without `num_buffers` (linux/virtio_net.h):
/// flags u8, gso_type u8, hdr_len u16, gso_size u16, csum_start u16,
/// csum_offset u16, in native byte order (legacy virtio, little-endian on x86).
/// TAPs and packet sockets opened with a vnet header put one of these in front
/// of every frame, in both directions.
pub const VNET_HDR_LEN: usize = 10;

/// An `ifreq` carrying interface name `name`, checked to fit IFNAMSIZ with
/// its terminating NUL.
pub(crate) fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) || name.contains('/')
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?} (1 to 15 bytes, no NUL or '/')"),
        ));
    }
    // SAFETY: ifreq is plain old data (a name and a union of integers,
    // sockaddrs and a pointer); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(ifr)
}

/// Offloads the kernel may hand a TAP reader (TUNSETOFFLOAD): the guest NIC's
/// features. With all false, the kernel checksums and segments every frame
/// before it reaches us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapOffloads {
    /// TUN_F_CSUM: frames may carry a partial checksum (VIRTIO_NET_HDR_F_NEEDS_CSUM).
    pub csum: bool,
    /// TUN_F_TSO4: frames may be TCP/IPv4 super-frames (needs `csum`).
    pub tso4: bool,
    /// TUN_F_TSO6: frames may be TCP/IPv6 super-frames (needs `csum`).
    pub tso6: bool,
    /// TUN_F_USO4 and TUN_F_USO6: frames may be UDP super-datagrams, IPv4
    /// or IPv6, to be cut into whole datagrams (needs `csum`; the kernel
    /// turns USO on only with both bits).
    pub uso: bool,
}

/// A TAP device: an Ethernet interface whose "wire" is this descriptor.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
    vnet_hdr: bool,
}

impl Tap {
    /// Creates (or attaches to) TAP `name` in the calling process's network
    /// namespace, without packet information (IFF_NO_PI). With `vnet_hdr`,
    /// every frame read or written carries a [`VNET_HDR_LEN`]-byte
    /// `virtio_net_hdr` in front. The descriptor is non-blocking and
    /// close-on-exec; the device goes away when it closes, unless persistent.
    pub fn create(name: &str, vnet_hdr: bool) -> io::Result<Tap> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("tap {name}: {e}"));
        let mut ifr = ifreq_named(name).map_err(ctx)?;
        // SAFETY: plain syscall on a NUL-terminated constant path; returns a
        // fresh descriptor on success.
        let fd = cvt(
            unsafe {
                libc::open(
                    c"/dev/net/tun".as_ptr(),
                    libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
            } as libc::c_long,
            "open /dev/net/tun",
        )
        .map_err(ctx)?;
        // SAFETY: open returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI;
        if vnet_hdr {
            flags |= libc::IFF_VNET_HDR;
        }
        ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
        cvt(
            // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `ifr` is.
            unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) } as libc::c_long,
            "ioctl(TUNSETIFF)",
        )
        .map_err(ctx)?;
        // The kernel writes back the name it used (the same, for a fixed name).
        let end = ifr
            .ifr_name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(libc::IFNAMSIZ);
        let raw: Vec<u8> = ifr.ifr_name[..end].iter().map(|&c| c as u8).collect();
        let name = String::from_utf8_lossy(&raw).into_owned();
        if vnet_hdr {
            let sz: libc::c_int = VNET_HDR_LEN as libc::c_int;
            cvt(
                // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, a live local.
                unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &sz) } as libc::c_long,
                "ioctl(TUNSETVNETHDRSZ)",
            )
            .map_err(|e| io::Error::new(e.kind(), format!("tap {name}: {e}")))?;
        }
        Ok(Tap { fd, name, vnet_hdr })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether frames carry a `virtio_net_hdr` in front.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Sets the length of the header in front of every frame
    /// (TUNSETVNETHDRSZ): 12 for virtio 1.x's `virtio_net_hdr` with
    /// `num_buffers`, which the kernel skips on write and leaves untouched
    /// on read. Only for a TAP created with a vnet header.
    pub fn set_vnet_hdr_len(&self, len: usize) -> io::Result<()> {
        if !self.vnet_hdr {
            return Err(self.ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no vnet header to size",
            )));
        }
        let sz = libc::c_int::try_from(len)
            .map_err(|_| self.ctx(io::Error::from(io::ErrorKind::InvalidInput)))?;
        cvt(
            // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, a live local.
            unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &sz) } as libc::c_long,
            "ioctl(TUNSETVNETHDRSZ)",
        )
        .map_err(|e| self.ctx(e))?;
        Ok(())
    }

    /// Tells the kernel which offloads it may leave to us (TUNSETOFFLOAD).
    /// TSO or USO without checksum offload is refused, as the kernel would.
    pub fn set_offloads(&self, o: TapOffloads) -> io::Result<()> {
        if (o.tso4 || o.tso6 || o.uso) && !o.csum {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tap {}: TSO and USO need checksum offload", self.name),
            ));
        }
        let mut bits: libc::c_uint = 0;
        if o.csum {
            bits |= libc::TUN_F_CSUM;
        }
        if o.tso4 {
            bits |= libc::TUN_F_TSO4;
        }
        if o.tso6 {
            bits |= libc::TUN_F_TSO6;
        }
        if o.uso {
            bits |= libc::TUN_F_USO4 | libc::TUN_F_USO6;
        }
        cvt(
            // SAFETY: TUNSETOFFLOAD takes its flags by value, not through a pointer.
            unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    bits as libc::c_ulong,
                )
            } as libc::c_long,
            "ioctl(TUNSETOFFLOAD)",
        )
        .map_err(|e| self.ctx(e))?;
        Ok(())
    }

    /// Turns the link carrier on or off as the guest sees it (TUNSETCARRIER,
    /// Linux 5.0 and later): the guest's `ip link` shows NO-CARRIER while off.
    pub fn set_carrier(&self, up: bool) -> io::Result<()> {
        let v: libc::c_int = up.into();
        cvt(
            // SAFETY: TUNSETCARRIER reads one int through the pointer, a live local.
            unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TUNSETCARRIER, &v) } as libc::c_long,
            "ioctl(TUNSETCARRIER)",
        )
        .map_err(|e| self.ctx(e))?;
        Ok(())
    }

    /// Reads one frame (the vnet header in front, when enabled). `Ok(None)`
    /// when nothing is queued. A frame longer than `buf` is cut short by the
    /// kernel without notice, so `buf` should hold the largest frame the
    /// offloads allow (64 KiB plus the header with TSO).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            crate::count_syscall();
            // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(self.ctx(io::Error::new(e.kind(), format!("read: {e}")))),
            }
        }
    }

    /// Writes one frame gathered from `parts` (for example `[vnet_hdr, frame]`),
    /// which the kernel then receives on the TAP interface. Returns the bytes
    /// written.
    pub fn send(&self, parts: &[&[u8]]) -> io::Result<usize> {
        with_iovecs(parts, |iov| loop {
            crate::count_syscall();
            // SAFETY: every iovec points at a live, borrowed slice of its length.
            let n = unsafe {
                libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int)
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(self.ctx(io::Error::new(e.kind(), format!("writev: {e}"))));
            }
        })
    }

    /// Reads one frame (the vnet header first, when enabled) scattered
    /// over `parts`, which may point into shared memory; `Ok(None)` when
    /// nothing is queued. A frame longer than the parts is cut short by the
    /// kernel, so they should cover the largest frame the offloads allow.
    pub fn readv(&self, parts: &mut [IoPartMut<'_>]) -> io::Result<Option<usize>> {
        let mut iov = iov::iovecs();
        let n = iov::scatter(parts, &mut iov).map_err(|e| self.ctx(e))?;
        loop {
            crate::count_syscall();
            // SAFETY: every iovec was checked against a live private buffer or
            // a writable mapping that `parts` borrows for this call.
            let r = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), n as libc::c_int) };
            if r >= 0 {
                return Ok(Some(r as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(self.ctx(io::Error::new(e.kind(), format!("readv: {e}")))),
            }
        }
    }

    /// Writes one frame gathered from `parts`, which may point into shared
    /// memory. Returns the bytes written.
    pub fn writev(&self, parts: &[IoPart<'_>]) -> io::Result<usize> {
        let mut iov = iov::iovecs();
        let n = iov::gather(parts, &mut iov).map_err(|e| self.ctx(e))?;
        loop {
            crate::count_syscall();
            // SAFETY: every iovec was checked against a live slice or mapping
            // that `parts` borrows for this call; the kernel only reads.
            let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), n as libc::c_int) };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(self.ctx(io::Error::new(e.kind(), format!("writev: {e}"))));
            }
        }
    }

    fn ctx(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("tap {}: {e}", self.name))
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Runs `f` over iovecs describing `parts`, built on the stack, for
/// writev/sendmsg. The kernel only reads through them.
pub(crate) fn with_iovecs<R>(
    parts: &[&[u8]],
    f: impl FnOnce(&[libc::iovec]) -> io::Result<R>,
) -> io::Result<R> {
    if parts.len() > MAX_IO_PARTS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame in {} parts, at most {MAX_IO_PARTS}", parts.len()),
        ));
    }
    let mut iov = iov::iovecs();
    for (v, p) in iov.iter_mut().zip(parts) {
        v.iov_base = p.as_ptr() as *mut libc::c_void;
        v.iov_len = p.len();
    }
    f(&iov[..parts.len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testutil::*;
    use crate::PacketSocket;
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(2);

    fn tap_up(suffix: &str, vnet_hdr: bool) -> (Tap, Link) {
        let name = ifname(suffix);
        let tap = Tap::create(&name, vnet_hdr).unwrap();
        let guard = Link(name.clone());
        assert_eq!(tap.name(), name);
        assert_eq!(tap.vnet_hdr(), vnet_hdr);
        ip(&["link", "set", &name, "up"]);
        (tap, guard)
    }

    fn tap_frame(tap: &Tap, ethertype: u16) -> Option<Vec<u8>> {
        let skip = if tap.vnet_hdr() { VNET_HDR_LEN } else { 0 };
        recv_matching(tap, |b| tap.recv(b), skip, ethertype, WAIT)
    }

    fn sock_frame(s: &PacketSocket, ethertype: u16) -> Option<Vec<u8>> {
        let skip = if s.vnet_hdr() { VNET_HDR_LEN } else { 0 };
        recv_matching(s, |b| s.recv(b), skip, ethertype, WAIT)
    }

    #[test]
    fn bad_names_are_refused() {
        let e = Tap::create("a-name-far-too-long", false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a-name-far-too-long"), "{e}");
        assert!(Tap::create("lo", false).is_err(), "lo is no TAP");
    }

    /// Frames written into the TAP are received on the interface, and frames
    /// sent on the interface come out of the TAP, with and without headers.
    #[test]
    fn frames_cross_a_tap_both_ways() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        for (i, vnet) in [false, true].into_iter().enumerate() {
            let (tap, _guard) = tap_up(&format!("t{i}"), vnet);
            let sock = PacketSocket::bind(tap.name(), false).unwrap();
            let zero = [0u8; VNET_HDR_LEN];
            let hdr: &[u8] = if vnet { &zero } else { &[] };

            let f = frame(0x40 + i as u8, 600);
            assert_eq!(tap.send(&[hdr, &f]).unwrap(), hdr.len() + f.len());
            assert_eq!(sock_frame(&sock, ETHERTYPE).expect("tap -> socket"), f);

            let f = frame(0x50 + i as u8, 1514);
            sock.send(&[&f]).unwrap();
            let got = tap_frame(&tap, ETHERTYPE).expect("socket -> tap");
            assert_eq!(got.len(), hdr.len() + f.len());
            if vnet {
                assert_eq!(
                    got[..VNET_HDR_LEN],
                    [0u8; VNET_HDR_LEN],
                    "plain frame header"
                );
            }
            assert_eq!(&got[hdr.len()..], &f[..]);
        }
    }

    #[test]
    fn offloads_and_carrier() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        let (tap, _guard) = tap_up("o", true);
        let all = TapOffloads {
            csum: true,
            tso4: true,
            tso6: true,
            uso: true,
        };
        tap.set_offloads(all).unwrap();
        tap.set_offloads(TapOffloads::default()).unwrap();
        for o in [
            TapOffloads {
                tso4: true,
                ..TapOffloads::default()
            },
            TapOffloads {
                uso: true,
                ..TapOffloads::default()
            },
        ] {
            let e = tap.set_offloads(o).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }

        tap.set_carrier(false).unwrap();
        let show = ip(&["link", "show", tap.name()]);
        assert!(show.contains("NO-CARRIER"), "{show}");
        tap.set_carrier(true).unwrap();
        let show = ip(&["link", "show", tap.name()]);
        assert!(!show.contains("NO-CARRIER"), "{show}");
    }

    /// With a 12-byte header (virtio 1.x's, with `num_buffers`), the two
    /// extra bytes are skipped on write and left alone on read; a TAP
    /// without a vnet header has none to size.
    #[test]
    fn vnet_header_of_twelve_bytes() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        let (plain, _g) = tap_up("p", false);
        let e = plain.set_vnet_hdr_len(12).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let (tap, _guard) = tap_up("h", true);
        tap.set_vnet_hdr_len(12).unwrap();
        let sock = PacketSocket::bind(tap.name(), false).unwrap();
        let f = frame(0x61, 200);
        let hdr = [0u8; 12];
        assert_eq!(tap.send(&[&hdr, &f]).unwrap(), 12 + f.len());
        assert_eq!(sock_frame(&sock, ETHERTYPE).expect("tap -> socket"), f);
        sock.send(&[&f]).unwrap();
        let got = recv_matching(&tap, |b| tap.recv(b), 12, ETHERTYPE, WAIT).expect("socket -> tap");
        assert_eq!(got.len(), 12 + f.len());
        assert_eq!(&got[12..], &f[..]);
    }

    /// What the TAP reader gets for a TSO frame sent on the interface depends
    /// on the offloads it accepted: the super-frame whole with TSO4, or
    /// MSS-sized segments with checksums done when it accepted nothing.
    #[test]
    fn tap_offloads_decide_segmentation() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        let (tap, _guard) = tap_up("s", true);
        let sock = PacketSocket::bind(tap.name(), true).unwrap();
        let (h, f) = crate::packet::tests::gso_tcp4(20000, 1448);

        tap.set_offloads(TapOffloads {
            csum: true,
            tso4: true,
            ..TapOffloads::default()
        })
        .unwrap();
        sock.send(&[&h, &f]).unwrap();
        let got = tap_frame(&tap, 0x0800).expect("super-frame");
        assert_eq!(got.len(), VNET_HDR_LEN + f.len());
        assert_eq!(got[1], 1, "gso_type TCPV4");
        assert_eq!(u16::from_ne_bytes([got[4], got[5]]), 1448);
        assert_eq!(&got[VNET_HDR_LEN..], &f[..]);

        tap.set_offloads(TapOffloads::default()).unwrap();
        sock.send(&[&h, &f]).unwrap();
        let mut payload = 0;
        let mut segments = 0;
        while payload < 20000 {
            let got = tap_frame(&tap, 0x0800).expect("segment");
            let seg = &got[VNET_HDR_LEN..];
            assert_eq!(got[1], 0, "no GSO once segmented");
            assert_eq!(got[0] & 1, 0, "checksum completed");
            assert!(seg.len() <= 14 + 40 + 1448);
            // The TCP checksum over pseudo-header and segment must verify.
            let ip_len = u16::from_be_bytes([seg[16], seg[17]]) as usize;
            let mut pseudo = seg[26..34].to_vec();
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&((ip_len - 20) as u16).to_be_bytes());
            let sum = crate::packet::tests::csum_fold(0, &pseudo) as u32;
            assert_eq!(
                crate::packet::tests::csum_fold(sum, &seg[34..14 + ip_len]),
                0xffff
            );
            payload += ip_len - 40;
            segments += 1;
        }
        assert_eq!(payload, 20000);
        assert_eq!(segments, 20000usize.div_ceil(1448));

        // The other way: a super-frame written into the TAP is received whole.
        tap.send(&[&h, &f]).unwrap();
        let got = sock_frame(&sock, 0x0800).expect("super-frame into the tap");
        assert_eq!(got.len(), VNET_HDR_LEN + f.len());
        assert_eq!(got[1], 1, "gso_type TCPV4");
        assert_eq!(&got[VNET_HDR_LEN..], &f[..]);
    }

    /// USO: with it, a UDP super-datagram sent on the interface reaches
    /// the TAP reader whole (gso_type UDP_L4); without, as whole datagrams
    /// of `size` payload bytes, each with its own length and checksum.
    #[test]
    fn tap_uso_hands_over_udp_super_datagrams() {
        let Some(_host) = root_or_skip("TAP devices") else {
            return;
        };
        let (tap, _guard) = tap_up("u", true);
        let sock = PacketSocket::bind(tap.name(), true).unwrap();
        let (h, f) = crate::packet::tests::gso_udp4(9000, 1400);
        tap.set_offloads(TapOffloads {
            csum: true,
            uso: true,
            ..TapOffloads::default()
        })
        .unwrap();
        sock.send(&[&h, &f]).unwrap();
        let got = tap_frame(&tap, 0x0800).expect("super-datagram");
        assert_eq!(got[1], 5, "gso_type UDP_L4");
        assert_eq!(u16::from_ne_bytes([got[4], got[5]]), 1400);
        assert_eq!(&got[VNET_HDR_LEN..], &f[..]);

        tap.set_offloads(TapOffloads::default()).unwrap();
        sock.send(&[&h, &f]).unwrap();
        let mut payload = 0;
        while payload < 9000 {
            let got = tap_frame(&tap, 0x0800).expect("datagram");
            let seg = &got[VNET_HDR_LEN..];
            assert_eq!(got[1], 0, "no GSO once cut");
            let ulen = u16::from_be_bytes([seg[38], seg[39]]) as usize;
            assert!(ulen - 8 <= 1400 && seg.len() == 34 + ulen, "{ulen}");
            let mut pseudo = seg[26..34].to_vec();
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&(ulen as u16).to_be_bytes());
            let sum = crate::packet::tests::csum_fold(0, &pseudo) as u32;
            if got[0] & 1 == 0 {
                assert_eq!(crate::packet::tests::csum_fold(sum, &seg[34..]), 0xffff);
            }
            payload += ulen - 8;
        }
        assert_eq!(payload, 9000);
    }
}
