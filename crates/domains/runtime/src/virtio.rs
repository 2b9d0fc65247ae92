//! A guest with `nic = "virtio"`: its own vhost-user frontend and
//! virtio-net driver (`virtio::frontend`) serve its TAP `eth0`, over a
//! connection hv makes to the vif the driver domain backs.

use anyhow::{anyhow, Result};
use hypercall::HvClient;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;
use virtio::frontend::{self, Host, VirtioNet};

/// The guest's side of the frontend's loop: connections from hv, the
/// status in `<home>/nic/stats`, and hv's channel to notice it going.
struct HvHost<'a> {
    hv: &'a mut HvClient,
    stats: String,
    written: String,
    watch: OwnedFd,
}

impl Host for HvHost<'_> {
    fn connect(&mut self) -> io::Result<OwnedFd> {
        vhost_connection(self.hv)
    }

    fn tick(&mut self, nic: &VirtioNet) -> Result<bool, String> {
        // hv closing our connection is how a domain is shut down.
        while self
            .hv
            .next_watch(Duration::ZERO)
            .map_err(|e| e.to_string())?
            .is_some()
        {}
        let text = nic.status().to_string();
        if text != self.written {
            self.hv
                .store_write(&self.stats, &text)
                .map_err(|e| e.to_string())?;
            self.written = text;
        }
        Ok(true)
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.watch.as_fd())
    }
}

/// A new connection to this guest's vhost-user vif: hv connects it to the
/// listener it keeps for the vif, which the driver domain serves.
fn vhost_connection(hv: &mut HvClient) -> io::Result<OwnedFd> {
    hv.vhost_connect()
        .map_err(|e| io::Error::other(format!("hv's VhostConnect: {e}")))
}

/// Runs the guest's virtio NIC on TAP `eth0` until hv goes away.
pub fn guest(hv: &mut HvClient, home: &str) -> Result<()> {
    let (tap, _mac) = crate::hosted::guest_tap(hv, home, true)?;
    let mut nic = VirtioNet::new(tap).map_err(|e| anyhow!("virtio NIC: {e}"))?;
    let watch = hv.watch_fd().try_clone_to_owned()?;
    let mut host = HvHost {
        hv,
        stats: format!("{home}/nic/stats"),
        written: String::new(),
        watch,
    };
    eprintln!("virtio: serving eth0 over vhost-user");
    frontend::run(&mut nic, &mut host).map_err(|e| anyhow!("virtio NIC: {e}"))
}
