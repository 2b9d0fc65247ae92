//! Link requests over rtnetlink (rtnetlink(7), netlink(7)): creating a
//! macvlan on a lower device, listing links, deleting one. The driver
//! domain makes its multi-queue "hardware queues" this way in its own
//! network namespace (Ram thesis ch. 3). Replies are parsed with every
//! length checked; the kernel is the only sender a NETLINK_ROUTE socket
//! hears from (a message from any other port id is ignored).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// From Linux's uapi/linux/rtnetlink.h, if_link.h and netlink.h.
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_MULTI: u16 = 2;
const NLM_F_ACK: u16 = 4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_MACVLAN_MODE: u16 = 1;
/// Macvlan mode "private": no frame passes between macvlans of one lower
/// device, so nothing a queue sends loops back locally.
const MACVLAN_MODE_PRIVATE: u32 = 1;
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;
const RECV_BUF: usize = 32 * 1024;

/// A link as a dump reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` ("macvlan", "veth"), empty when the link has none.
    pub kind: String,
}

/// A NETLINK_ROUTE socket for link requests, in the caller's namespace.
pub struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

/// A request under construction: nlmsghdr, ifinfomsg, attributes.
struct Msg {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

impl Msg {
    fn new(kind: u16, flags: u16, index: u32, ifi_flags: u32, change: u32) -> Msg {
        let mut buf = vec![0u8; NLMSG_HDR + IFINFOMSG];
        buf[4..6].copy_from_slice(&kind.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        // ifinfomsg: family AF_UNSPEC, type 0, index, flags, change.
        let at = NLMSG_HDR;
        buf[at + 4..at + 8].copy_from_slice(&(index as i32).to_ne_bytes());
        buf[at + 8..at + 12].copy_from_slice(&ifi_flags.to_ne_bytes());
        buf[at + 12..at + 16].copy_from_slice(&change.to_ne_bytes());
        Msg {
            buf,
            nests: Vec::new(),
        }
    }

    fn attr(&mut self, kind: u16, data: &[u8]) -> &mut Msg {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn open(&mut self, kind: u16) -> &mut Msg {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    fn close(&mut self) -> &mut Msg {
        if let Some(at) = self.nests.pop() {
            let len = (self.buf.len() - at) as u16;
            self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }

    fn finish(mut self, seq: u32) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.buf
    }
}

/// The attributes in `b`: (type without flags, payload), stopping at the
/// first one whose length does not fit.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((kind, data))
    })
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A link from an RTM_NEWLINK message's payload (ifinfomsg and attributes).
fn parse_link(p: &[u8]) -> Option<Link> {
    if p.len() < IFINFOMSG {
        return None;
    }
    let index = u32_at(p, 4);
    let mut link = Link {
        index,
        name: String::new(),
        kind: String::new(),
    };
    for (t, d) in attrs(&p[IFINFOMSG..]) {
        let text = |d: &[u8]| {
            let d = d.split(|&c| c == 0).next().unwrap_or(&[]);
            String::from_utf8_lossy(d).into_owned()
        };
        match t {
            IFLA_IFNAME => link.name = text(d),
            IFLA_LINKINFO => {
                if let Some((_, k)) = attrs(d).find(|(t, _)| *t == IFLA_INFO_KIND) {
                    link.kind = text(k);
                }
            }
            _ => {}
        }
    }
    Some(link)
}

impl Rtnl {
    /// A socket in the caller's network namespace.
    pub fn open() -> io::Result<Rtnl> {
        let fd = cvt(
            // SAFETY: socket takes no pointers.
            unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_ROUTE,
                )
            } as libc::c_long,
            "socket(NETLINK_ROUTE)",
        )?;
        // SAFETY: socket returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // Replies come within the call that asked: a second's wait at most.
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        crate::packet::setsockopt(
            std::os::fd::AsFd::as_fd(&fd),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv,
        )?;
        Ok(Rtnl { fd, seq: 1 })
    }

    fn send(&mut self, m: Msg) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let buf = m.finish(self.seq);
        // SAFETY: sockaddr_nl is plain old data; all-zero (port 0) is the kernel.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        cvt(
            // SAFETY: sends `buf` (live, of the length passed) to the kernel.
            unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    0,
                    (&to as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            } as libc::c_long,
            "sendto(NETLINK_ROUTE)",
        )?;
        Ok(self.seq)
    }

    /// Reads the replies to request `seq`, handing each RTM_NEWLINK payload
    /// to `each`, until its ACK, error or end of dump.
    fn replies(&mut self, seq: u32, each: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let mut buf = vec![0u8; RECV_BUF];
        loop {
            // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            let n = cvt(
                // SAFETY: receives into a live buffer of the length passed,
                // and the sender's address into a live sockaddr_nl.
                unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&mut from as *mut libc::sockaddr_nl).cast(),
                        &mut flen,
                    )
                } as libc::c_long,
                "recv(NETLINK_ROUTE)",
            )? as usize;
            if from.nl_pid != 0 {
                continue; // not the kernel
            }
            let mut b = &buf[..n];
            while b.len() >= NLMSG_HDR {
                let len = u32_at(b, 0) as usize;
                if len < NLMSG_HDR || len > b.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "rtnetlink: a truncated reply",
                    ));
                }
                let (kind, flags, s) = (u16_at(b, 4), u16_at(b, 6), u32_at(b, 8));
                let payload = &b[NLMSG_HDR..len];
                b = &b[len.next_multiple_of(4).min(b.len())..];
                if s != seq {
                    continue;
                }
                match kind {
                    NLMSG_ERROR if payload.len() >= 4 => {
                        let err =
                            i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]);
                        if err == 0 {
                            return Ok(());
                        }
                        return Err(io::Error::from_raw_os_error(-err));
                    }
                    NLMSG_DONE => return Ok(()),
                    RTM_NEWLINK => each(payload),
                    _ => {}
                }
                if flags & NLM_F_MULTI == 0 && kind != RTM_NEWLINK {
                    return Ok(());
                }
            }
        }
    }

    fn call(&mut self, m: Msg, what: &str) -> io::Result<()> {
        let seq = self.send(m)?;
        self.replies(seq, &mut |_| {})
            .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))
    }

    /// Creates macvlan `name` on lower device `lower` (an ifindex), mode
    /// private, with Ethernet address `mac`, IPv6 address generation off
    /// (no link-local address, no DAD traffic) and up. Returns its index.
    pub fn create_macvlan(&mut self, name: &str, lower: u32, mac: [u8; 6]) -> io::Result<u32> {
        crate::tap::ifreq_named(name)?; // the kernel's name rules
        let what = format!("creating macvlan {name}");
        let mut m = Msg::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, 0, 0, 0);
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        m.attr(IFLA_IFNAME, &cname)
            .attr(IFLA_LINK, &lower.to_ne_bytes())
            .attr(IFLA_ADDRESS, &mac)
            .open(IFLA_LINKINFO)
            .attr(IFLA_INFO_KIND, b"macvlan")
            .open(IFLA_INFO_DATA)
            .attr(IFLA_MACVLAN_MODE, &MACVLAN_MODE_PRIVATE.to_ne_bytes())
            .close()
            .close();
        self.call(m, &what)?;
        let index = crate::ifindex(name)?;
        let up = libc::IFF_UP as u32;
        let mut m = Msg::new(RTM_NEWLINK, NLM_F_ACK, index, up, up);
        m.open(IFLA_AF_SPEC)
            .open(libc::AF_INET6 as u16)
            .attr(IFLA_INET6_ADDR_GEN_MODE, &[IN6_ADDR_GEN_MODE_NONE])
            .close()
            .close();
        if let Err(e) = self.call(m, &format!("{what}: bringing it up")) {
            let _ = self.delete(index);
            return Err(e);
        }
        Ok(index)
    }

    /// Deletes link `index`.
    pub fn delete(&mut self, index: u32) -> io::Result<()> {
        let m = Msg::new(RTM_DELLINK, NLM_F_ACK, index, 0, 0);
        self.call(m, &format!("deleting link {index}"))
    }

    /// Every link of the namespace.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let mut m = Msg::new(RTM_GETLINK, NLM_F_DUMP, 0, 0, 0);
        m.pad();
        let seq = self.send(m)?;
        let mut out = Vec::new();
        self.replies(seq, &mut |p| out.extend(parse_link(p)))
            .map_err(|e| io::Error::new(e.kind(), format!("listing links: {e}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testutil::*;

    #[test]
    fn attributes_nest_and_parse_back() {
        let mut m = Msg::new(RTM_NEWLINK, 0, 7, 0, 0);
        m.attr(IFLA_IFNAME, b"ab\0")
            .open(IFLA_LINKINFO)
            .attr(IFLA_INFO_KIND, b"macvlan")
            .close();
        let b = m.finish(9);
        assert_eq!(u32_at(&b, 0) as usize, b.len());
        let l = parse_link(&b[NLMSG_HDR..]).unwrap();
        assert_eq!(
            (l.index, l.name.as_str(), l.kind.as_str()),
            (7, "ab", "macvlan")
        );
        // A length past the end stops the walk, never panics.
        let bad = [0xff, 0x00, 3, 0, 1, 2];
        assert_eq!(attrs(&bad).count(), 0);
        assert!(parse_link(&[0; 8]).is_none());
    }

    #[test]
    fn macvlans_are_made_listed_and_deleted() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let (a, b) = (ifname("ma"), ifname("mb"));
        let _link = veth(&a, &b);
        let mut nl = Rtnl::open().unwrap();
        let q = ifname("mq");
        let mac = [0x02, 0x53, 0x4e, 9, 9, 9];
        let idx = nl
            .create_macvlan(&q, crate::ifindex(&a).unwrap(), mac)
            .unwrap();
        let shown = ip(&["-d", "link", "show", &q]);
        assert!(shown.contains("macvlan mode private"), "{shown}");
        assert!(shown.contains("02:53:4e:09:09:09"), "{shown}");
        assert!(shown.contains("addrgenmode none"), "{shown}");
        assert!(shown.contains(",UP"), "{shown}");
        let l = nl.links().unwrap();
        assert!(l
            .iter()
            .any(|l| l.index == idx && l.name == q && l.kind == "macvlan"));
        let dup = nl.create_macvlan(&q, crate::ifindex(&a).unwrap(), mac);
        assert_eq!(dup.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        nl.delete(idx).unwrap();
        assert!(!nl.links().unwrap().iter().any(|l| l.name == q));
        assert!(nl.delete(idx).is_err());
    }

    /// A macvlan queue with its filter takes unicast to its MAC only, into
    /// shared memory; the lower device's filtered socket takes the rest.
    #[test]
    fn a_queue_splits_frames_by_mac_with_the_filters() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        use crate::{IoPartMut, Mapping, Memfd, PacketSocket, SocketFilter, VNET_HDR_LEN};
        use abi::SharedMemory;
        use std::os::fd::AsFd;
        let (a, b) = (ifname("qa"), ifname("qb"));
        let _link = veth(&a, &b);
        let mut nl = Rtnl::open().unwrap();
        let q = ifname("qq");
        let mac = [0x02, 0x53, 0x4e, 7, 7, 7];
        let _qi = nl
            .create_macvlan(&q, crate::ifindex(&b).unwrap(), mac)
            .unwrap();
        let port = PacketSocket::bind(&b, true).unwrap();
        port.set_filter(&SocketFilter::drop_unicast_to(&[mac]).unwrap())
            .unwrap();
        let queue = PacketSocket::bind_queue(&q).unwrap();
        queue
            .set_filter(&SocketFilter::only_unicast_to(mac))
            .unwrap();
        let sa = PacketSocket::bind(&a, false).unwrap();
        let mut to_q = frame(0x71, 1400);
        to_q[..6].copy_from_slice(&mac);
        let mut other = frame(0x72, 100);
        other[..6].copy_from_slice(&[0x02, 0x53, 0x4e, 7, 7, 8]);
        let bcast = frame(0x73, 100);
        let m = Memfd::create("t", 4 * 4096, false).unwrap();
        let pool = Mapping::new(m.as_fd(), 0, 4 * 4096, true).unwrap();
        let mut hdr = [0u8; VNET_HDR_LEN];
        // A link just made may drop the first frames: send until one lands.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let n = loop {
            sa.send(&[&to_q]).unwrap();
            crate::poll_readable(
                &[queue.as_fd()],
                Some(std::time::Duration::from_millis(200)),
            )
            .unwrap();
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
            if let Some(r) = queue.recv_scatter(&mut parts).unwrap() {
                break r.unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nothing reached the queue"
            );
        };
        assert_eq!(n, VNET_HDR_LEN + to_q.len());
        let mut back = vec![0u8; to_q.len()];
        pool.read_bytes(4096, &mut back[..1000]);
        pool.read_bytes(3 * 4096, &mut back[1000..]);
        assert_eq!(back, to_q, "scattered into shared memory intact");
        for f in [&other, &bcast] {
            sa.send(&[f]).unwrap();
        }
        // The default queue: the other MAC and the broadcast, never the queue's.
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 9000];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while seen.len() < 2 && std::time::Instant::now() < deadline {
            crate::poll_readable(&[port.as_fd()], Some(std::time::Duration::from_millis(200)))
                .unwrap();
            while let Some(n) = port.recv(&mut buf).unwrap() {
                let f = &buf[VNET_HDR_LEN..n];
                if f.len() > 14 && f[12..14] == ETHERTYPE.to_be_bytes() {
                    seen.push(f[11]);
                }
            }
        }
        assert_eq!(seen, [0x72, 0x73]);
        // The queue: copies of its own frame at most.
        while let Some(n) = queue.recv(&mut buf).unwrap() {
            let f = &buf[VNET_HDR_LEN..n];
            if f.len() > 14 && f[12..14] == ETHERTYPE.to_be_bytes() {
                assert_eq!(f[11], 0x71, "the queue took another MAC's frame");
            }
        }
        let (got, dropped) = queue.take_stats().unwrap();
        assert!(got >= 1 && dropped == 0, "{got} {dropped}");
        batch_into_shared_memory_with_overflow(&sa, &queue, &pool, mac);
    }

    /// A batch receive: each frame's first bytes in its shared range, the
    /// rest in its private overflow, in the order they were sent.
    fn batch_into_shared_memory_with_overflow(
        sa: &crate::PacketSocket,
        queue: &crate::PacketSocket,
        pool: &crate::Mapping,
        mac: [u8; 6],
    ) {
        use crate::{IoPartMut, VNET_HDR_LEN};
        use abi::SharedMemory;
        use std::os::fd::AsFd;
        let sent: Vec<Vec<u8>> = [(0x81, 500), (0x82, 1400), (0x83, 300)]
            .iter()
            .map(|&(t, n)| {
                let mut f = frame(t, n);
                f[..6].copy_from_slice(&mac);
                f
            })
            .collect();
        for f in &sent {
            sa.send(&[f]).unwrap();
        }
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while seen.len() < 3 && std::time::Instant::now() < deadline {
            crate::poll_readable(
                &[queue.as_fd()],
                Some(std::time::Duration::from_millis(200)),
            )
            .unwrap();
            let mut hdrs = [[0u8; VNET_HDR_LEN]; 4];
            let mut over = [[0u8; 2000]; 4];
            let mut lens = [Ok(0); 4];
            let mut msgs: Vec<[IoPartMut<'_>; 3]> = hdrs
                .iter_mut()
                .zip(over.iter_mut())
                .enumerate()
                .map(|(k, (h, o))| {
                    [
                        IoPartMut::Private(h),
                        IoPartMut::Shared {
                            map: pool,
                            off: k * 4096,
                            len: 1000,
                        },
                        IoPartMut::Private(o),
                    ]
                })
                .collect();
            let n = queue.recv_scatter_batch(&mut msgs, &mut lens).unwrap();
            drop(msgs);
            for (k, l) in lens.iter().take(n).enumerate() {
                let len = l.unwrap() - VNET_HDR_LEN;
                let mut f = vec![0u8; len];
                pool.read_bytes(k * 4096, &mut f[..len.min(1000)]);
                if len > 1000 {
                    f[1000..].copy_from_slice(&over[k][..len - 1000]);
                }
                if f.len() > 14 && f[12..14] == ETHERTYPE.to_be_bytes() && f[11] >= 0x81 {
                    seen.push(f);
                }
            }
        }
        assert_eq!(seen, sent, "a batch lands in order, overflow joined intact");
    }
}
