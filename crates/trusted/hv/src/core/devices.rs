//! hv's part in the guest NICs that are not split drivers, and the
//! sockets it keeps for driver domains: an HVM guest's I/O path to its
//! device model ([`crate::hvm`]), vhost-user vifs' listening sockets
//! ([`crate::vhost`]) and driver domains' uplink sockets (`crate::ports`),
//! each in its own registry.

use super::Hypervisor;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::hvm::{HvmConfig, HvmGuest};
use crate::proto::{DomId, Request};
use crate::vhost::VhostSpec;
use std::os::fd::OwnedFd;
use std::sync::Arc;

impl Hypervisor {
    /// Makes domain `domid` an HVM guest: creates its I/O path. Its process
    /// takes [`HvmGuest::vcpu_fds`], its device model [`HvmGuest::dm_fds`].
    pub fn hvm_attach(self: &Arc<Self>, domid: DomId, cfg: HvmConfig) -> HvResult<Arc<HvmGuest>> {
        let Some(name) = self.domain_name(domid) else {
            return err(
                ErrorKind::BadDomain,
                format!("domain {domid} does not exist"),
            );
        };
        if self.hvm.contains(domid) {
            return err(
                ErrorKind::Invalid,
                format!("domain {domid} is already an HVM guest"),
            );
        }
        // A panic in the relay destroys this guest only.
        let spawn = |name, body| self.spawn_guarded(name, Some(domid), body);
        let g = Arc::new(HvmGuest::create(&name, cfg, spawn)?);
        self.hvm.insert(domid, g.clone());
        // Destroyed meanwhile: do not keep its path.
        if self.domain_name(domid).is_none() {
            self.hvm.detach(domid);
            return err(
                ErrorKind::BadDomain,
                format!("domain {domid} was destroyed"),
            );
        }
        Ok(g)
    }

    /// Pauses every HVM guest's relay between two exits, its state kept,
    /// until the guard drops (an upgrade's `execve` comes between, and
    /// the next program goes on from the kept state).
    pub fn pause_hvm(self: &Arc<Self>) -> HvmPaused {
        self.hvm.pause_all();
        HvmPaused(self.clone())
    }

    /// Serves `HvmVcpu` (the guest itself) and `HvmDeviceModel` (only the
    /// domain named as the guest's device model): the descriptors to send.
    pub(super) fn hvm_fds(&self, caller: DomId, req: &Request) -> HvResult<Vec<OwnedFd>> {
        let not_hvm = |d: DomId| {
            HvError::new(
                ErrorKind::Invalid,
                format!("domain {d} is not an HVM guest"),
            )
        };
        match *req {
            Request::HvmVcpu => {
                let g = self.hvm_guest(caller).ok_or_else(|| not_hvm(caller))?;
                let f = g.vcpu_fds()?;
                Ok(vec![f.page, f.kick, f.done, f.irq])
            }
            Request::HvmDeviceModel { guest } => {
                let g = self.hvm_guest(guest).ok_or_else(|| not_hvm(guest))?;
                if g.config().device_model != Some(caller) {
                    return err(
                        ErrorKind::PermissionDenied,
                        format!("domain {caller} is not the device model of domain {guest}"),
                    );
                }
                let f = g.dm_fds()?;
                let pool = self.pool_fd_for_device_model(guest)?;
                Ok(vec![f.page, f.kick, f.done, pool])
            }
            _ => err(ErrorKind::Invalid, "not an HVM request"),
        }
    }

    /// Domain `domid`'s I/O path, if it is an HVM guest.
    pub fn hvm_guest(&self, domid: DomId) -> Option<Arc<HvmGuest>> {
        self.hvm.get(domid)
    }

    /// Declares vhost-user vif `spec`: hv listens on its socket from now
    /// until [`Hypervisor::vhost_remove`]. A path in use or that is not a
    /// socket is refused; a stale socket file is replaced.
    pub fn vhost_add(&self, spec: VhostSpec) -> HvResult<()> {
        self.vhost.add(spec)
    }

    /// Forgets vhost-user vif `name`: its listener closes and its socket
    /// file goes. Returns whether it existed.
    pub fn vhost_remove(&self, name: &str) -> bool {
        self.vhost.remove(name)
    }

    /// The identity of vhost-user vif `name`'s listener, unique among the
    /// listeners this hv made; None when it listens for no such vif.
    pub fn vhost_listener_id(&self, name: &str) -> Option<u64> {
        self.vhost.id(name)
    }

    /// Every vhost-user vif hv listens for.
    pub fn vhost_vifs(&self) -> Vec<VhostSpec> {
        self.vhost.specs()
    }

    /// `VhostListener`: a duplicate of vif `name`'s listener, for the
    /// driver domain that backs it and no one else.
    pub(super) fn vhost_listener(&self, caller: DomId, name: &str) -> HvResult<OwnedFd> {
        let me = self.caller_name(caller)?;
        self.vhost.listener(caller, &me, name)
    }

    /// `VhostDial`: a new connection to the socket VM vif `name`'s VMM
    /// listens on, for the driver domain that backs it and no one else.
    pub(super) fn vhost_dial(&self, caller: DomId, name: &str) -> HvResult<OwnedFd> {
        let me = self.caller_name(caller)?;
        self.vhost.dial(caller, &me, name)
    }

    /// `VhostConnect`: a new connection to the caller's own vif (a `nic =
    /// "virtio"` guest's), handed over blocking. hv never waits for it: a
    /// full backlog (a driver domain that accepts nothing) is an error the
    /// guest may retry.
    pub(super) fn vhost_connect(&self, caller: DomId) -> HvResult<OwnedFd> {
        let me = self.caller_name(caller)?;
        self.vhost.connect(caller, &me)
    }

    /// Keeps `fd`, a packet socket on driver domain `driver`'s uplink
    /// `ifname`, for its later starts (`ports.rs`); replaces one kept before.
    pub fn port_keep(&self, driver: &str, ifname: &str, fd: OwnedFd) {
        self.ports.keep(driver, ifname, fd);
    }

    /// A duplicate of the socket kept on `driver`'s uplink `ifname`, if any.
    pub fn port_kept(&self, driver: &str, ifname: &str) -> HvResult<Option<OwnedFd>> {
        self.ports.get(driver, ifname)
    }

    /// Closes the socket kept on `driver`'s port `ifname` (an emulated
    /// NIC's host interface that went with its guest); whether there was
    /// one.
    pub fn port_drop(&self, driver: &str, ifname: &str) -> bool {
        self.ports.drop_one(driver, ifname)
    }

    /// Has hv open `driver`'s ports that `opener` names the first time the
    /// domain asks for them (`PortSocket`), and keep them from then on.
    pub fn port_opener(&self, driver: &str, opener: crate::ports::PortOpener) {
        self.ports.set_opener(driver, opener);
    }

    /// Has `maker` make and delete `driver`'s dedicated receive queues
    /// (`QueueOpen`, `QueueClose`).
    pub fn queue_maker(&self, driver: &str, maker: std::sync::Arc<dyn crate::QueueMaker>) {
        self.ports.set_queue_maker(driver, maker);
    }

    /// `QueueOpen`: a queue on the caller's own uplink, by its maker.
    pub(super) fn queue_open(
        &self,
        caller: DomId,
        port: &str,
        (owner, mac): (u32, [u8; 6]),
        rcvbuf: u32,
    ) -> HvResult<OwnedFd> {
        let me = self.caller_name(caller)?;
        let rcvbuf = rcvbuf.min(hypercall::proto::QUEUE_RCVBUF_MAX) as usize;
        self.ports.queue_maker(&me)?.open(port, owner, mac, rcvbuf)
    }

    /// `QueueClose`: deletes a queue `QueueOpen` made for the caller.
    pub(super) fn queue_close(&self, caller: DomId, port: &str, owner: u32) -> HvResult<()> {
        let me = self.caller_name(caller)?;
        self.ports.queue_maker(&me)?.close(port, owner)
    }

    /// Closes the sockets kept for `driver`, which will not come back.
    pub fn port_forget(&self, driver: &str) -> usize {
        self.ports.forget(driver)
    }

    /// `PortSocket`: a duplicate of the socket hv keeps on the caller's own
    /// port `ifname`; no domain gets another's.
    pub(super) fn port_socket(&self, caller: DomId, ifname: &str) -> HvResult<OwnedFd> {
        let me = self.caller_name(caller)?;
        self.ports
            .get_or_open(&me, ifname)?
            .ok_or_else(|| crate::ports::none_kept(&me, ifname))
    }

    /// The caller's name, which the vhost-user registry knows it by.
    fn caller_name(&self, caller: DomId) -> HvResult<String> {
        self.domain_name(caller).ok_or_else(|| {
            HvError::new(
                ErrorKind::NotPrivileged,
                format!("domain {caller} may not use vhost-user sockets"),
            )
        })
    }
}

/// HVM relays paused ([`Hypervisor::pause_hvm`]); they run again on drop.
pub struct HvmPaused(Arc<Hypervisor>);

impl Drop for HvmPaused {
    fn drop(&mut self) {
        let hv = &self.0;
        let started = hv
            .hvm
            .start_all(|id, name, body| hv.spawn_guarded(name, Some(id), body));
        if let Err(e) = started {
            crate::log!(Error, "an HVM guest's relay did not start again: {e}");
        }
    }
}
