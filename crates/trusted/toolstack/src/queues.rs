//! The driver domains' dedicated receive queues (Ram thesis ch. 3, the
//! multi-queue NIC), made by hv on a driver domain's request. A queue is a
//! macvlan in mode private on one of the domain's uplinks, with its vif's
//! MAC, read through a packet socket: the kernel sorts each frame to its
//! guest's queue as the thesis's NIC did in hardware. Making the macvlan
//! takes CAP_NET_ADMIN over the namespace, which hv withholds from every
//! driver domain (on a host NIC its firmware, features and names would be
//! within reach), so hv makes it, once it has checked the request: the
//! port is one of the domain's uplinks and no macvlan, the MAC one of its
//! vifs', and the domain holds fewer than [`MAX_QUEUES`] queues. A dead
//! driver domain's queues go before its successor starts ([`drop_all`]),
//! a new domain or a new process taking it over in place.

use crate::host;
use abi::xenbus::{is_queue_name, mac_text, queue_name};
use hv::error::{ErrorKind, HvError, HvResult};
use std::io;
use std::os::fd::OwnedFd;
use sys::rtnl::{Link, Rtnl};
use sys::PacketSocket;

/// The most queues hv keeps for one driver domain, over all its uplinks
/// (an uplink offers at most 64).
pub const MAX_QUEUES: usize = 256;

/// The MACs of the vifs a driver domain backs now.
pub type VifMacs = Box<dyn Fn() -> Vec<[u8; 6]> + Send + Sync>;

/// hv's [`hv::QueueMaker`] for one driver domain.
pub struct Queues {
    driver: String,
    /// Its namespace.
    ns: String,
    /// Its uplinks' interfaces, the only ones it may queue on.
    uplinks: Vec<String>,
    macs: VifMacs,
}

impl Queues {
    pub fn new(driver: &str, ns: &str, uplinks: Vec<String>, macs: VifMacs) -> Queues {
        Queues {
            driver: driver.into(),
            ns: ns.into(),
            uplinks,
            macs,
        }
    }

    /// Refuses a request on anything but one of the domain's uplinks.
    fn check_port(&self, port: &str) -> HvResult<()> {
        if self.uplinks.iter().any(|u| u == port) {
            return Ok(());
        }
        Err(refused(format!(
            "{port} is not an uplink of {}: no queue on it",
            self.driver
        )))
    }

    /// Refuses a MAC that is not one of the domain's vifs' (which are
    /// unicast: `parse_mac` read them).
    fn check_mac(&self, mac: [u8; 6]) -> HvResult<()> {
        if (self.macs)().contains(&mac) {
            return Ok(());
        }
        Err(refused(format!(
            "{} is the MAC of no vif of {}: no queue for it",
            mac_text(&mac),
            self.driver
        )))
    }
}

impl hv::QueueMaker for Queues {
    fn open(&self, port: &str, owner: u32, mac: [u8; 6], rcvbuf: usize) -> HvResult<OwnedFd> {
        self.check_port(port)?;
        self.check_mac(mac)?;
        let made = host::in_netns(&self.ns, || make(port, owner, mac, rcvbuf));
        made.map_err(|e| match e.kind() {
            io::ErrorKind::InvalidInput | io::ErrorKind::QuotaExceeded => refused(e.to_string()),
            _ => self.failed(port, e),
        })
    }

    fn close(&self, port: &str, owner: u32) -> HvResult<()> {
        self.check_port(port)?;
        host::in_netns(&self.ns, || {
            let name = queue_name(sys::ifindex(port)?, owner);
            let mut nl = Rtnl::open()?;
            let links = nl.links()?;
            delete_named(&mut nl, &links, &name).map(|_| ())
        })
        .map_err(|e| self.failed(port, e))
    }
}

impl Queues {
    /// The kernel refused a queue on `port`.
    fn failed(&self, port: &str, e: io::Error) -> HvError {
        HvError::internal(&format!("{}'s queue on {port}", self.driver), e)
    }
}

/// Deletes the link named `name` among `links`, if there is one; whether
/// there was.
fn delete_named(nl: &mut Rtnl, links: &[Link], name: &str) -> io::Result<bool> {
    match links.iter().find(|l| l.name == name) {
        Some(l) => nl.delete(l.index).map(|()| true),
        None => Ok(false),
    }
}

/// Whether `l` is a queue's macvlan.
fn is_queue(l: &Link) -> bool {
    l.kind == "macvlan" && is_queue_name(&l.name)
}

/// Deletes every queue a dead driver domain `name` left in its namespace,
/// which outlives it while it may come back: the one place they are
/// cleaned up after a crash, before any successor starts. Over netlink,
/// in the namespace: no `ip` to start while a restart waits.
pub fn drop_all(name: &str) {
    let ns = host::netns_name(name);
    let r = host::in_netns(&ns, || {
        let mut nl = Rtnl::open()?;
        for l in nl.links()?.into_iter().filter(is_queue) {
            if let Err(e) = nl.delete(l.index) {
                hv::log!(Warning, dom = name, "deleting queue {}: {e}", l.name);
            }
        }
        Ok(())
    });
    if let Err(e) = r {
        hv::log!(Warning, dom = name, "looking for its queues: {e}");
    }
}

/// In the driver domain's namespace: the queue's macvlan (one left by an
/// earlier queue of that name goes first) and a packet socket on it.
fn make(port: &str, owner: u32, mac: [u8; 6], rcvbuf: usize) -> io::Result<OwnedFd> {
    let lower = sys::ifindex(port)?;
    let name = queue_name(lower, owner);
    if name.len() > 15 {
        let why = format!("queue name {name} is longer than an interface name may be");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    let mut nl = Rtnl::open()?;
    let links = nl.links()?;
    if links.iter().any(|l| l.name == port && l.kind == "macvlan") {
        // The kernel would stack the queue on the macvlan's own lower
        // device, past the port (and its owner's filter).
        let why = format!("uplink {port} is a macvlan: its queues would bypass it");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    if !delete_named(&mut nl, &links, &name)?
        && links.iter().filter(|l| is_queue_name(&l.name)).count() >= MAX_QUEUES
    {
        let why = format!("the driver domain holds {MAX_QUEUES} queues already");
        return Err(io::Error::new(io::ErrorKind::QuotaExceeded, why));
    }
    let link = nl.create_macvlan(&name, lower, mac)?;
    let sock = PacketSocket::bind_queue(&name).and_then(|s| {
        s.set_rcvbuf(rcvbuf)?;
        Ok(s)
    });
    match sock {
        Ok(s) => Ok(s.into_fd()),
        Err(e) => {
            let _ = nl.delete(link);
            Err(e)
        }
    }
}

fn refused(why: String) -> HvError {
    HvError::new(ErrorKind::Invalid, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hv::QueueMaker;

    const MAC: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];

    fn queues() -> Queues {
        Queues::new(
            "drv",
            "splitnet-nonexistent",
            vec!["peth0".into()],
            Box::new(|| vec![MAC]),
        )
    }

    /// What a driver domain asks is checked before any namespace is
    /// entered: another interface, another MAC, a multicast MAC.
    #[test]
    fn a_queue_on_a_port_or_mac_not_the_domains_is_refused() {
        let q = queues();
        let e = q.open("eth9", 0, MAC, 1 << 20).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.message.contains("eth9 is not an uplink of drv"), "{e}");
        let other = [0, 0x16, 0x3e, 0, 0, 2];
        let e = q.open("peth0", 0, other, 1 << 20).unwrap_err();
        assert!(
            e.message
                .contains("00:16:3e:00:00:02 is the MAC of no vif of drv"),
            "{e}"
        );
        let multicast = [1, 0x16, 0x3e, 0, 0, 1];
        assert!(q.open("peth0", 0, multicast, 1 << 20).is_err());
        assert!(q.close("eth9", 0).is_err());
    }
}
