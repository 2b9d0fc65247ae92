//! Notifications of changes to a network namespace's configuration: a
//! NETLINK_ROUTE socket that joined some of rtnetlink's multicast groups
//! (rtnetlink(7), netlink(7)). The messages are not parsed: a readable
//! socket only means "something changed, look again", so nothing a sender
//! writes is ever interpreted.

use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An rtnetlink multicast group (`enum rtnetlink_groups` in Linux's
/// `uapi/linux/rtnetlink.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteGroup {
    /// Links created, changed (flags, carrier, address) or removed.
    Link,
    /// IPv4 addresses added or removed.
    Ipv4Addr,
    /// IPv6 addresses added, changed (DAD done) or removed.
    Ipv6Addr,
    /// IPv4 multicast groups joined or left (newer Linux 6.x kernels only).
    Ipv4Mcast,
    /// IPv6 multicast groups joined or left (newer Linux 6.x kernels only).
    Ipv6Mcast,
}

impl RouteGroup {
    fn number(self) -> u32 {
        match self {
            RouteGroup::Link => libc::RTNLGRP_LINK,
            RouteGroup::Ipv4Addr => libc::RTNLGRP_IPV4_IFADDR,
            RouteGroup::Ipv6Addr => libc::RTNLGRP_IPV6_IFADDR,
            // After RTNLGRP_STATS; the libc crate does not have them yet.
            RouteGroup::Ipv4Mcast => libc::RTNLGRP_STATS + 1,
            RouteGroup::Ipv6Mcast => libc::RTNLGRP_STATS + 2,
        }
    }
}

/// Most messages one [`RouteEvents::drain`] takes, so a burst cannot keep
/// the caller's loop away from its other work (the rest stays readable).
const DRAIN_MAX: usize = 256;
/// Bytes of a message kept by a drain (the rest is discarded unread).
const DRAIN_BUF: usize = 512;

/// A socket that becomes readable when the namespace's links, addresses or
/// (where the kernel reports them) multicast groups change.
#[derive(Debug)]
pub struct RouteEvents {
    fd: OwnedFd,
}

impl RouteEvents {
    /// A socket in the caller's network namespace that joined `groups`.
    pub fn open(groups: &[RouteGroup]) -> io::Result<RouteEvents> {
        let fd = cvt(
            // SAFETY: socket takes no pointers.
            unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                    libc::NETLINK_ROUTE,
                )
            } as libc::c_long,
            "socket(NETLINK_ROUTE)",
        )?;
        // SAFETY: socket returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        cvt(
            // SAFETY: `addr` is a live sockaddr_nl of the length passed; the
            // kernel picks the port id (nl_pid 0).
            unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            } as libc::c_long,
            "bind(NETLINK_ROUTE)",
        )?;
        let events = RouteEvents { fd };
        for &g in groups {
            events.join(g)?;
        }
        Ok(events)
    }

    /// Joins `group` too. A kernel that lacks the group refuses it
    /// (EINVAL): probe optional groups this way.
    pub fn join(&self, group: RouteGroup) -> io::Result<()> {
        let (level, opt) = (libc::SOL_NETLINK, libc::NETLINK_ADD_MEMBERSHIP);
        crate::packet::setsockopt(self.fd.as_fd(), level, opt, &group.number()).map_err(|e| {
            io::Error::new(e.kind(), format!("joining rtnetlink group {group:?}: {e}"))
        })
    }

    /// Takes the pending notifications without blocking, into a fixed
    /// buffer (nothing is allocated); returns how many were taken, 0 if
    /// none. A queue that overflowed (ENOBUFS: notifications were lost)
    /// counts as one: the caller looks again either way.
    pub fn drain(&self) -> io::Result<usize> {
        let mut buf = [0u8; DRAIN_BUF];
        let mut n = 0;
        while n < DRAIN_MAX {
            crate::count_syscall();
            // SAFETY: receives into a live buffer of the length passed.
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r >= 0 {
                n += 1;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS) => n += 1,
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => break,
                _ => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("recv(NETLINK_ROUTE): {e}"),
                    ))
                }
            }
        }
        Ok(n)
    }
}

impl AsFd for RouteEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testutil::*;
    use std::time::{Duration, Instant};

    /// Waits for the socket to report something, draining it.
    fn notified(ev: &RouteEvents) -> usize {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            crate::poll_readable(&[ev.as_fd()], Some(Duration::from_millis(100))).unwrap();
            match ev.drain().unwrap() {
                0 => continue,
                n => return n,
            }
        }
        0
    }

    fn dev_mcast_has(ifname: &str, hex: &str) -> bool {
        std::fs::read_to_string("/proc/net/dev_mcast")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(ifname) && l.ends_with(hex))
    }

    #[test]
    fn nothing_pending_is_zero() {
        let ev = RouteEvents::open(&[]).unwrap();
        assert_eq!(ev.drain().unwrap(), 0);
    }

    /// A link coming up and an address added are reported; on kernels that
    /// report group joins, the address's solicited-node group is in
    /// `/proc/net/dev_mcast` once the join is reported.
    #[test]
    fn links_addresses_and_groups_are_reported() {
        let Some(_host) = root_or_skip("veth pairs") else {
            return;
        };
        let ev = RouteEvents::open(&[RouteGroup::Link, RouteGroup::Ipv6Addr]).expect("open");
        let (a, b) = (ifname("na"), ifname("nb"));
        let _link = veth(&a, &b);
        assert!(notified(&ev) > 0, "links up not reported");

        let joins = RouteEvents::open(&[]).unwrap();
        let mcast = joins.join(RouteGroup::Ipv6Mcast).is_ok();
        ip(&["-6", "addr", "add", "fd99::4:2/64", "dev", &a, "nodad"]);
        assert!(notified(&ev) > 0, "address not reported");
        if mcast {
            // Joins of other interfaces may come first.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                assert!(notified(&joins) > 0, "the group join was not reported");
                if dev_mcast_has(&a, "3333ff040002") {
                    break;
                }
                assert!(Instant::now() < deadline, "group never in dev_mcast");
            }
        } else {
            eprintln!("this kernel does not report multicast group joins");
        }
    }
}
