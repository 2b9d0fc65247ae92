//! A vif's lifecycle in the driver domain: probing a backend directory the
//! toolstack wrote, waiting for its frontend, connecting, and retiring it
//! when its frontend closes or the toolstack takes it away.

use super::events::{BACKENDS, CAPTURES, PENDING, PORTS, UPGRADE};
use super::ports::uplink_attach;
use super::queues::PDEV;
use super::state::{Driver, DriverError, CONNECT_TIMEOUT};
use super::vif::{Vif, VifQueue};
use crate::netback::{self, Netback, NetbackError, Pending};
use crate::switch::bridge::Bridge;
use crate::switch::vlan::{self, Attach, Mode};
use hypercall::{DomId, HvClient};
use std::collections::BTreeSet;
use std::time::Duration;

/// A vif's attachment, from its backend nodes `bridge` (absent: the
/// default bridge) and `splitnet-vlan` (absent: no VLAN).
pub(super) fn vif_attach(
    hv: &mut HvClient,
    be: &str,
    bridge: &mut Bridge,
) -> Result<Attach, String> {
    use abi::xenbus::keys;
    let name = hv
        .store_read_str(&format!("{be}/{}", keys::BRIDGE))
        .unwrap_or_else(|_| abi::xenbus::DEFAULT_BRIDGE.to_string());
    let vlan = match hv.store_read_str(&format!("{be}/{}", keys::VLAN)) {
        Ok(v) => Some(vlan::parse_vid(&v)?),
        Err(_) => None,
    };
    let a = uplink_attach(bridge, vlan::check_ifname(&name)?, vlan)?;
    Ok(Attach {
        mode: Mode::Access(vlan.unwrap_or(0)),
        ..a
    })
}

/// The backend directories a change under `base` touched: the one a write
/// named (`<guest>/<handle>`), a guest's (`<guest>`: its directory's
/// permissions were set, or it went), or all of them (the watch was just
/// set). Like Xen's backend bus, which probes the one device a change
/// under `backend/vif` names, a rescan then looks at those alone: an attach
/// costs the same store requests beside 2 vifs as beside 256.
#[derive(Default)]
pub(super) enum Touched {
    #[default]
    Nothing,
    Dirs(BTreeSet<String>),
    All,
}

impl Touched {
    /// Notes a change at `path`, within `base`.
    pub(super) fn note(&mut self, base: &str, path: &str) {
        let within: Vec<&str> = (path.strip_prefix(base))
            .and_then(|rest| rest.strip_prefix('/'))
            .map(|rest| rest.splitn(3, '/').take(2).collect())
            .unwrap_or_default();
        let dir = match within[..] {
            [guest] | [guest, ""] if !guest.is_empty() => Some(format!("{base}/{guest}")),
            [guest, handle] if !guest.is_empty() => Some(format!("{base}/{guest}/{handle}")),
            _ => None,
        };
        match (dir, &mut *self) {
            (_, Touched::All) => {}
            (Some(dir), Touched::Dirs(dirs)) => {
                dirs.insert(dir);
            }
            (Some(dir), Touched::Nothing) => *self = Touched::Dirs(BTreeSet::from([dir])),
            (None, _) => *self = Touched::All,
        }
    }

    pub(super) fn any(&self) -> bool {
        !matches!(self, Touched::Nothing)
    }

    /// Whether backend directory `be` is, or is in, one touched.
    fn covers(&self, be: &str) -> bool {
        match self {
            Touched::Nothing => false,
            Touched::Dirs(dirs) => dirs.iter().any(|d| {
                be.strip_prefix(d.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }),
            Touched::All => true,
        }
    }

    /// The backend directories to probe (`<guest>/<handle>`), with their
    /// guests.
    fn dirs(&self, hv: &mut HvClient, base: &str) -> Vec<(DomId, String)> {
        let dirs = match self {
            Touched::Nothing => return Vec::new(),
            Touched::Dirs(dirs) => dirs,
            Touched::All => return backend_dirs(hv, base),
        };
        let mut found = Vec::new();
        for dir in dirs {
            let within = dir.strip_prefix(base).unwrap_or_default();
            let mut parts = within.split('/').skip(1);
            let Some(Ok(guest)) = parts.next().map(str::parse::<DomId>) else {
                continue;
            };
            if parts.next().is_some() {
                found.push((guest, dir.clone()));
                continue;
            }
            for handle in hv.store_directory(dir).unwrap_or_default() {
                found.push((guest, format!("{dir}/{handle}")));
            }
        }
        found
    }
}

/// Brings the vifs in line with the backend directories the toolstack
/// wrote, of those `touched`: a vif whose directory went away or was set
/// offline (`network-detach`) is disconnected and its slot freed; a new
/// directory, complete once the toolstack wrote its `state` (last), is
/// probed.
pub(super) fn rescan(
    hv: &mut HvClient,
    base: &str,
    touched: &Touched,
    pending: &mut Vec<Pending>,
    vifs: &mut [Vif],
) -> Result<(), DriverError> {
    let online = |hv: &mut HvClient, be: &str| {
        hv.store_read_str(&format!("{be}/online"))
            .map_or(true, |v| v != "0")
    };
    // A handle detached and attached again between two looks is a new
    // attachment in the same directory: the old vif goes, the new is probed.
    let wanted = |hv: &mut HvClient, be: &str, attach: &str| {
        hv.read_state(be).is_ok() && online(hv, be) && hv.read_attachment(be) == attach
    };
    let mine = |be: &str| touched.covers(be);
    for (i, v) in vifs.iter_mut().enumerate() {
        if v.gone || !mine(&v.nb.be) {
            continue;
        }
        if !wanted(hv, &v.nb.be, &v.nb.attach) {
            v.nb.disconnect(hv, "the toolstack removed the vif");
            let _ = hv.unwatch(&format!("{}/state", v.nb.fe), &format!("fe:{i}"));
            let _ = hv.unwatch(&multicast_node(&v.nb.fe), &format!("fe:{i}"));
            v.gone = true;
        }
    }
    let mut i = 0;
    while i < pending.len() {
        if !mine(&pending[i].be) || wanted(hv, &pending[i].be, &pending[i].attach) {
            i += 1;
        } else {
            let p = pending.swap_remove(i);
            let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
        }
    }
    for (guest, be) in touched.dirs(hv, base) {
        let known =
            pending.iter().any(|p| p.be == be) || vifs.iter().any(|v| !v.gone && v.nb.be == be);
        if known {
            continue;
        }
        let fresh = matches!(
            hv.read_state(&be),
            Ok(abi::xenbus::XenbusState::Initialising)
        );
        if fresh && online(hv, &be) {
            pend(hv, guest, &be, pending)?;
        }
    }
    Ok(())
}

/// Every backend directory under `base` (`<guest>/<handle>`), with its
/// guest.
pub(super) fn backend_dirs(hv: &mut HvClient, base: &str) -> Vec<(DomId, String)> {
    let mut dirs = Vec::new();
    for g in hv.store_directory(base).unwrap_or_default() {
        let Ok(guest) = g.parse::<DomId>() else {
            continue;
        };
        for dev in hv
            .store_directory(&format!("{base}/{g}"))
            .unwrap_or_default()
        {
            dirs.push((guest, format!("{base}/{g}/{dev}")));
        }
    }
    dirs
}

impl Driver {
    /// Connects every pending vif whose frontend has published its rings;
    /// the others stay pending, watched. A vif whose bridge or VLAN node is
    /// bad is given up (logged, counted, its backend Closed with the reason).
    pub(super) fn connect_ready(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let mut retry = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let ready = matches!(
                hv.read_state(&self.pending[i].fe),
                Ok(abi::xenbus::XenbusState::Connected)
            );
            if !ready {
                i += 1;
                continue;
            }
            let p = self.pending.swap_remove(i);
            let _ = hv.unwatch(&format!("{}/state", p.fe), PENDING);
            let name = crate::vif_name(&p.be);
            let (guest, be, index) = (p.guest, p.be.clone(), p.index);
            let attach = match vif_attach(hv, &be, &mut self.bridge) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("driver: {name}: {e}; giving it up");
                    self.stats.config_errors += 1;
                    netback::give_up(hv, &be, &NetbackError::Protocol(e));
                    continue;
                }
            };
            match Netback::connect(hv, p, CONNECT_TIMEOUT) {
                Ok(nb) => self.add_vif(hv, nb, attach, index)?,
                Err(e) if e.is_quota() => {
                    eprintln!("driver: {name}: could not connect: {e}; giving it up");
                    netback::give_up(hv, &be, &e);
                }
                Err(e) => {
                    // A frontend state left over from an earlier backend, or a
                    // frontend that broke the handshake: wait for its next
                    // state change.
                    eprintln!("driver: {name}: could not connect: {e}");
                    retry.push((guest, be));
                }
            }
        }
        for (guest, be) in retry {
            pend(hv, guest, &be, &mut self.pending)?;
        }
        Ok(())
    }

    /// Puts a connected vif in a slot (a freed one, and its bridge port, is
    /// reused) and registers its doorbells.
    pub(super) fn add_vif(
        &mut self,
        hv: &mut HvClient,
        nb: Netback,
        attach: Attach,
        index: u32,
    ) -> Result<(), DriverError> {
        let pdev = hv
            .store_read_str(&format!("{}/{}", nb.be, PDEV))
            .ok()
            .filter(|p| !p.is_empty());
        let vifs = &mut self.vifs;
        let slot = vifs.iter().position(|v| v.gone).unwrap_or(vifs.len());
        hv.watch(&format!("{}/state", nb.fe), &format!("fe:{slot}"))?;
        hv.watch(&multicast_node(&nb.fe), &format!("fe:{slot}"))?;
        // While the uplinks are held at start: how long after it this vif
        // came back (a restart's timeline, in the log).
        let since_start = self.ports.held_for().map_or(String::new(), |d| {
            format!(", {} ms after the driver domain started", d.as_millis())
        });
        eprintln!(
            "driver: {} connected on {} {:?} (grants {}, rx {}, tx {}, offload {}){since_start}",
            crate::vif_name(&nb.be),
            self.bridge.name(attach.bridge),
            attach.mode,
            if nb.modes.ngm { "ngm" } else { "hv-copy" },
            if nb.modes.rx_flip { "flip" } else { "copy" },
            nb.modes.tx_name(),
            nb.modes.offload
        );
        let bells = self.events.watch_vif(slot, &nb);
        let v = Vif {
            nb,
            stats_written: String::new(),
            forgotten: false,
            gone: false,
            bells,
            attach,
            index,
            queue: VifQueue {
                pdev,
                ..VifQueue::default()
            },
        };
        if slot == vifs.len() {
            vifs.push(v);
        } else {
            vifs[slot] = v;
        }
        self.attach_queue(hv, slot);
        Ok(())
    }
}

/// Probes the vif of backend directory `be` (InitWait) and waits for its
/// frontend, watched; a directory that does not probe is logged and left.
pub(super) fn pend(
    hv: &mut HvClient,
    guest: DomId,
    be: &str,
    pending: &mut Vec<Pending>,
) -> Result<(), DriverError> {
    match netback::probe(hv, guest, be) {
        Ok(p) => {
            hv.watch(&format!("{}/state", p.fe), PENDING)?;
            pending.push(p);
        }
        Err(e) => {
            eprintln!("driver: {}: {e}", crate::vif_name(be));
            if e.gives_up() {
                netback::give_up(hv, be, &e);
            }
        }
    }
    Ok(())
}

/// The frontend node Xen's dynamic multicast control re-reads.
pub(super) fn multicast_node(fe: &str) -> String {
    format!("{fe}/{}", abi::xenbus::keys::REQUEST_MULTICAST_CONTROL)
}

/// What the watches that fired call for.
#[derive(Default)]
pub(super) struct Fired {
    /// A pending frontend's state changed.
    pub(super) pending: bool,
    /// The backend directories the toolstack changed.
    pub(super) rescan: Touched,
    /// A capture channel was opened or ended.
    pub(super) captures: bool,
    /// The extra ports changed.
    pub(super) ports: bool,
    /// A connected vif's frontend went away.
    pub(super) vifs_changed: bool,
    /// Backend directories whose options the toolstack changed in place.
    pub(super) options: Vec<String>,
    /// The toolstack asks for the program to be replaced (`upgrade`).
    pub(super) upgrade: bool,
}

impl Fired {
    /// hv dropped watch events ([`hypercall::proto::WATCHES_LOST`]): every
    /// backend directory, pending frontend, capture and port is looked at
    /// again, and each connected vif whose options are newer than those it
    /// took takes them.
    fn all_again(&mut self, hv: &mut HvClient, vifs: &[Vif]) {
        use abi::xenbus::keys::{OPTIONS, OPTIONS_TAKEN};
        (self.pending, self.captures, self.ports) = (true, true, true);
        self.rescan = Touched::All;
        for v in vifs.iter().filter(|v| !v.gone && v.nb.is_connected()) {
            let be = &v.nb.be;
            let asked = hv.store_read_str(&format!("{be}/{OPTIONS}")).ok();
            let taken = hv.store_read_str(&format!("{be}/{OPTIONS_TAKEN}"));
            let taken = taken
                .ok()
                .and_then(|t| t.split(' ').next().map(str::to_string));
            if asked.is_some() && asked != taken {
                self.options.push(be.clone());
            }
        }
    }
}

/// A frontend whose state went to Closing or Closed loses its backend.
pub(super) fn handle_watches(
    hv: &mut HvClient,
    base: &str,
    vifs: &mut [Vif],
) -> Result<Fired, DriverError> {
    let mut fired = Fired::default();
    while let Some(ev) = hv.next_watch(Duration::ZERO)? {
        if ev.token == hypercall::proto::WATCHES_LOST {
            fired.all_again(hv, vifs);
            for v in vifs.iter_mut().filter(|v| !v.gone) {
                v.nb.resample_multicast(hv);
                fired.vifs_changed |= frontend_closed(hv, v);
            }
            continue;
        }
        if ev.token == PENDING {
            fired.pending = true;
            continue;
        }
        if ev.token == CAPTURES {
            fired.captures = true;
            continue;
        }
        if ev.token == PORTS {
            fired.ports = true;
            continue;
        }
        if ev.token == UPGRADE {
            fired.upgrade = true;
            continue;
        }
        if ev.token == BACKENDS {
            use abi::xenbus::keys::{OPTIONS, OPTIONS_TAKEN};
            let at = |key: &str| ev.path.strip_suffix(key).and_then(|p| p.strip_suffix('/'));
            if let Some(be) = at(OPTIONS) {
                fired.options.push(be.to_string());
            }
            // Our own counters are written there twice a second, and our
            // answers to option changes.
            if at("stats").is_none() && at(OPTIONS_TAKEN).is_none() {
                fired.rescan.note(base, &ev.path);
            }
            continue;
        }
        let Some(i) = ev
            .token
            .strip_prefix("fe:")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(v) = vifs.get_mut(i).filter(|v| !v.gone) else {
            continue;
        };
        if ev.path == multicast_node(&v.nb.fe) {
            v.nb.resample_multicast(hv);
            continue;
        }
        fired.vifs_changed |= frontend_closed(hv, v);
    }
    Ok(fired)
}

/// Disconnects connected vif `v` if its frontend went to Closing or
/// Closed (or its state went); whether it did.
fn frontend_closed(hv: &mut HvClient, v: &mut Vif) -> bool {
    let gone = match hv.read_state(&v.nb.fe) {
        Ok(s) => matches!(
            s,
            abi::xenbus::XenbusState::Closing | abi::xenbus::XenbusState::Closed
        ),
        Err(_) => true,
    };
    if gone && v.nb.is_connected() {
        v.nb.disconnect(hv, "the frontend went away");
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::Touched;

    const BASE: &str = "/local/domain/1/backend/vif";

    fn after(paths: &[&str]) -> Touched {
        let mut t = Touched::default();
        for p in paths {
            t.note(BASE, p);
        }
        t
    }

    #[test]
    fn a_change_touches_the_one_backend_directory_it_is_in() {
        let t = after(&[&format!("{BASE}/5/0/state"), &format!("{BASE}/5/0")]);
        assert!(t.any());
        assert!(t.covers(&format!("{BASE}/5/0")));
        assert!(!t.covers(&format!("{BASE}/5/1")));
        assert!(!t.covers(&format!("{BASE}/6/0")));
        assert!(!after(&[]).any());
    }

    #[test]
    fn a_change_to_a_guests_directory_touches_that_guests() {
        let t = after(&[&format!("{BASE}/5")]);
        assert!(t.covers(&format!("{BASE}/5/0")));
        assert!(t.covers(&format!("{BASE}/5/3")));
        assert!(!t.covers(&format!("{BASE}/50/0")));
        assert!(!t.covers(&format!("{BASE}/6/0")));
    }

    #[test]
    fn a_change_above_the_guests_directories_touches_them_all() {
        for above in [BASE.to_string(), format!("{BASE}/"), format!("{BASE}//0")] {
            let t = after(&[&format!("{BASE}/5/0/state"), &above]);
            assert!(t.covers(&format!("{BASE}/7/3")), "{above}");
        }
    }
}
