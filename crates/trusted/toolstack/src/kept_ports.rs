//! hv's hold on each driver domain's uplink sockets. Before a driver
//! domain starts, hv opens a packet socket on each of its uplink
//! interfaces, in the domain's namespace, or keeps the one it opened for
//! the domain's predecessor while that is still bound there; the domain
//! takes a duplicate (`Request::PortSocket`) instead of opening its own.
//! The same goes for the host interfaces of the emulated NICs it serves
//! (a hosted guest's VMNet, an HVM guest's device model), which their
//! VMApp or device model makes after the domain starts: hv opens each the
//! first time the domain asks for it ([`opener`]).
//! Frames that reach an uplink while its driver domain restarts then wait
//! in the socket, as in a NIC's receive ring while its driver reloads,
//! and a TCP flow from outside loses nothing to the restart: without the
//! socket they were dropped, and each flow waited out a retransmission
//! timeout (200 ms at least) before it moved again.

use hv::Hypervisor;
use std::os::fd::AsFd;
use sys::PacketSocket;

/// Keeps a socket on each of `ifnames` in driver domain `driver`'s
/// namespace `ns`: the one kept before when it is still bound to that
/// interface (a `host` NIC given back and lent again is a new binding),
/// else a new one; and likewise on each of `if_present` that exists now
/// (an emulated NIC's host interface, made again if its device model
/// restarted). How many it opened.
pub fn keep(
    hv: &Hypervisor,
    driver: &str,
    ns: &str,
    ifnames: &[String],
    if_present: &[String],
) -> Result<usize, String> {
    crate::host::in_netns(ns, || {
        let present = if_present.iter().filter(|n| sys::ifindex(n).is_ok());
        let mut opened = 0;
        for ifname in ifnames.iter().chain(present) {
            if still_bound(hv, driver, ifname) {
                continue;
            }
            hv.port_keep(driver, ifname, PacketSocket::bind(ifname, true)?.into_fd());
            opened += 1;
        }
        Ok(opened)
    })
    .map_err(|e| e.to_string())
}

/// hv's [`hv::PortOpener`] for the driver domain in namespace `ns`: a
/// socket on each of `names` the first time the domain asks for it, once
/// its interface exists.
pub fn opener(ns: &str, names: Vec<String>) -> hv::PortOpener {
    let ns = ns.to_string();
    Box::new(move |ifname| {
        if !names.iter().any(|n| n == ifname) {
            return None;
        }
        crate::host::in_netns(&ns, || {
            if sys::ifindex(ifname).is_err() {
                return Ok(None);
            }
            Ok(Some(PacketSocket::bind(ifname, true)?.into_fd()))
        })
        .transpose()
    })
}

/// Whether the socket hv keeps on `driver`'s `ifname` is bound to the
/// interface of that name in the calling thread's namespace.
fn still_bound(hv: &Hypervisor, driver: &str, ifname: &str) -> bool {
    let Ok(Some(fd)) = hv.port_kept(driver, ifname) else {
        return false;
    };
    let now = sys::ifindex(ifname).ok();
    now.is_some() && sys::bound_ifindex(fd.as_fd()).ok().flatten() == now
}
