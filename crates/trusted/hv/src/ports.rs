//! The driver domains' port sockets (on their uplinks, and on the host
//! interfaces of the emulated NICs they serve), kept by hv while their
//! domain may come back. A NIC's receive ring outlives a reload of its
//! driver; here the packet socket on a driver domain's port plays that
//! ring, and frames that arrive while the domain restarts wait in it
//! instead of being dropped by an interface no one listens on. hv never
//! reads from these sockets: it only holds them and hands duplicates to
//! the driver domain named as their owner.

use crate::error::{ErrorKind, HvError, HvResult};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Opens the socket on one of a driver domain's ports the first time the
/// domain asks hv for one it does not keep yet (the host side of an
/// emulated NIC, which appears after the domain starts); None when `name`
/// is not such a port or its interface does not exist yet.
pub type PortOpener = Box<dyn Fn(&str) -> Option<std::io::Result<OwnedFd>> + Send + Sync>;

/// Makes and deletes a driver domain's dedicated receive queues on its
/// uplinks for it (`QueueOpen`, `QueueClose`; Ram thesis ch. 3). The
/// toolstack sets one per driver domain: it knows the domain's namespace,
/// uplinks and vifs, and checks each request against them.
pub trait QueueMaker: Send + Sync {
    /// A packet socket on a new queue on uplink `port` for vif `owner`
    /// with MAC `mac`, its receive buffer `rcvbuf` bytes; an error (the
    /// request refused, or the kernel's refusal) says why.
    fn open(&self, port: &str, owner: u32, mac: [u8; 6], rcvbuf: usize) -> HvResult<OwnedFd>;
    /// Deletes that queue, if it exists.
    fn close(&self, port: &str, owner: u32) -> HvResult<()>;
}

/// Kept sockets by (driver domain name, interface name), the openers of
/// the ports hv opens on a driver domain's first ask, and each driver
/// domain's queue maker.
#[derive(Default)]
pub(crate) struct KeptPorts {
    all: Mutex<BTreeMap<(String, String), OwnedFd>>,
    openers: Mutex<BTreeMap<String, std::sync::Arc<PortOpener>>>,
    queues: Mutex<BTreeMap<String, std::sync::Arc<dyn QueueMaker>>>,
}

impl KeptPorts {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), OwnedFd>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `fd` as driver `driver`'s socket on `ifname`, closing the one
    /// it replaces.
    pub(crate) fn keep(&self, driver: &str, ifname: &str, fd: OwnedFd) {
        self.lock().insert((driver.into(), ifname.into()), fd);
    }

    /// Every kept socket as (driver domain, interface, descriptor number),
    /// for an upgrade of hv to carry.
    pub(crate) fn list_raw(&self) -> Vec<(String, String, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        let all = self.lock();
        all.iter()
            .map(|((d, i), fd)| (d.clone(), i.clone(), fd.as_raw_fd()))
            .collect()
    }

    /// A duplicate of driver `driver`'s socket on `ifname`, if hv keeps one.
    pub(crate) fn get(&self, driver: &str, ifname: &str) -> HvResult<Option<OwnedFd>> {
        let all = self.lock();
        let Some(fd) = all.get(&(driver.to_string(), ifname.to_string())) else {
            return Ok(None);
        };
        fd.try_clone()
            .map(Some)
            .map_err(|e| HvError::internal("dup of a kept port socket", e))
    }

    /// `driver`'s ports that hv opens on the domain's first ask.
    pub(crate) fn set_opener(&self, driver: &str, opener: PortOpener) {
        let mut o = self.openers.lock().unwrap_or_else(|p| p.into_inner());
        o.insert(driver.into(), std::sync::Arc::new(opener));
    }

    /// Driver domain `driver`'s queues are made by `maker`.
    pub(crate) fn set_queue_maker(&self, driver: &str, maker: std::sync::Arc<dyn QueueMaker>) {
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.insert(driver.into(), maker);
    }

    /// `driver`'s queue maker; a refusal if it has none.
    pub(crate) fn queue_maker(&self, driver: &str) -> HvResult<std::sync::Arc<dyn QueueMaker>> {
        let q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.get(driver).cloned().ok_or_else(|| {
            HvError::new(
                ErrorKind::NotPrivileged,
                format!("hv makes no queues for {driver}"),
            )
        })
    }

    /// [`KeptPorts::get`], and where hv keeps none, one its opener for
    /// `driver` opens now and hv keeps from then on.
    pub(crate) fn get_or_open(&self, driver: &str, ifname: &str) -> HvResult<Option<OwnedFd>> {
        if let Some(fd) = self.get(driver, ifname)? {
            return Ok(Some(fd));
        }
        let opener = {
            let o = self.openers.lock().unwrap_or_else(|p| p.into_inner());
            o.get(driver).cloned()
        };
        match opener.and_then(|open| open(ifname)) {
            None => Ok(None),
            Some(Err(e)) => Err(HvError::internal(&format!("opening port {ifname}"), e)),
            Some(Ok(fd)) => {
                self.keep(driver, ifname, fd);
                self.get(driver, ifname)
            }
        }
    }

    /// Closes the socket kept on `driver`'s `ifname`, if hv keeps one.
    pub(crate) fn drop_one(&self, driver: &str, ifname: &str) -> bool {
        let key = (driver.to_string(), ifname.to_string());
        self.lock().remove(&key).is_some()
    }

    /// Closes every socket kept for driver `driver`, and forgets its
    /// opener; how many sockets there were.
    pub(crate) fn forget(&self, driver: &str) -> usize {
        self.openers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(driver);
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(driver);
        let mut all = self.lock();
        let before = all.len();
        all.retain(|(d, _), _| d != driver);
        before - all.len()
    }

    /// Closes them all.
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.lock());
        drop(all);
    }

    /// How many sockets are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The refusal a domain gets for an interface hv keeps nothing on.
pub(crate) fn none_kept(driver: &str, ifname: &str) -> HvError {
    HvError::new(
        ErrorKind::BadDomain,
        format!("hv keeps no socket for {driver}'s port {ifname}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        OwnedFd::from(std::os::unix::net::UnixDatagram::pair().unwrap().0)
    }

    #[test]
    fn a_driver_gets_only_its_own_sockets_until_they_are_forgotten() {
        let k = KeptPorts::default();
        k.keep("drv", "peth0", fd());
        k.keep("drv", "peth1", fd());
        k.keep("drv2", "peth0", fd());
        assert!(k.get("drv", "peth0").unwrap().is_some());
        assert!(k.get("drv", "peth9").unwrap().is_none());
        // Kept again: the one before is replaced, not added.
        k.keep("drv", "peth0", fd());
        assert_eq!(k.len(), 3);
        assert_eq!(k.forget("drv"), 2);
        assert!(k.get("drv", "peth0").unwrap().is_none());
        assert!(k.get("drv2", "peth0").unwrap().is_some());
        k.clear();
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn a_port_is_opened_on_its_first_ask_and_kept() {
        let k = KeptPorts::default();
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = opened.clone();
        k.set_opener(
            "drv",
            Box::new(move |name| {
                (name == "vn-guest4").then(|| {
                    n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(fd())
                })
            }),
        );
        assert!(k.get_or_open("drv", "peth9").unwrap().is_none());
        assert!(k.get_or_open("drv2", "vn-guest4").unwrap().is_none());
        assert!(k.get_or_open("drv", "vn-guest4").unwrap().is_some());
        assert!(k.get_or_open("drv", "vn-guest4").unwrap().is_some());
        assert_eq!(opened.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(k.len(), 1);
        k.forget("drv");
        assert!(k.get_or_open("drv", "vn-guest4").unwrap().is_none());
    }
}
