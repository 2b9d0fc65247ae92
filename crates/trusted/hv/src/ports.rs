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

/// Kept sockets by (driver domain name, interface name).
#[derive(Default)]
pub(crate) struct KeptPorts {
    all: Mutex<BTreeMap<(String, String), OwnedFd>>,
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

    /// Closes every socket kept for driver `driver`; how many there were.
    pub(crate) fn forget(&self, driver: &str) -> usize {
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
}
