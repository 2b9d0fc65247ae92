//! Hot-plugging vifs on running guests (`xl network-attach` and
//! `network-detach`): a new vif's handle, MAC and backend, its store
//! directories, its hotplug script, the wait for both ends to connect;
//! and the same for a VM's vhost-user vif.

use super::{
    fail, given_up, home_of, state_of, vhost_listen, vif_info_key, wait_until, write_vhost,
    Supervisor, HANDSHAKE,
};
use crate::host;
use crate::store::Store;
use crate::topology::{
    DomainConfig, DomainKind, VifConfig, DRIVER_BASE_FRAMES, DRIVER_FRAMES_PER_VIF,
    GUEST_MIN_FRAMES, MAX_GUEST_VIFS,
};
use crate::vifscript::{self, ScriptCall};
use crate::vifspec::VifSpec;
use crate::vm::{check_mac, check_vm_name, VhostVif};
use abi::xenbus::{self, XenbusState};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use std::sync::Arc;

impl Supervisor {
    /// `splitnet network-attach`: a new vif on a running guest, connected
    /// (and its hotplug script run) when this returns. `spec` is an xl
    /// vifspec; `mac` and `backend` are the older flags, and may not repeat
    /// its keys. Returns its handle.
    pub(super) fn attach(
        &self,
        guest: &str,
        mac: Option<String>,
        backend: Option<String>,
        spec: Option<String>,
    ) -> HvResult<u32> {
        let hv = self.hv()?;
        self.not_a_container(guest, "take another vif")?;
        let mut vs = match spec.as_deref() {
            Some(t) => VifSpec::parse(t)
                .map_err(|e| fail(ErrorKind::Invalid, format!("vifspec {t:?}: {e}")))?,
            None => VifSpec::default(),
        };
        for (flag, key, given, slot) in [
            ("--mac", "mac", mac, &mut vs.mac),
            ("--backend", "backend", backend, &mut vs.backend),
        ] {
            if let Some(g) = given {
                if slot.is_some() {
                    return Err(fail(
                        ErrorKind::Invalid,
                        format!("{flag} and the vifspec's {key}= both name it; give one"),
                    ));
                }
                *slot = Some(g);
            }
        }
        if vs.vhost_user {
            return self.attach_vm(&hv, guest, vs).map(|()| 0);
        }
        let v = self.new_vif(&hv, guest, vs)?;
        // A vif whose hotplug script failed never came online: it goes
        // without the closing handshake (nor an `offline` run).
        if let Err(e) = self.plumb(&hv, &v) {
            self.forget(&hv, &v);
            return Err(fail(ErrorKind::Internal, e));
        }
        if let Err(e) = self.wait_usable(&hv, &v) {
            let _ = self.detach(guest, v.handle);
            return Err(e);
        }
        Ok(v.handle)
    }

    /// `network-attach NAME 'type=vhost-user,...'`: declares external VM
    /// `name`'s vhost-user vif: hv listens on its socket and its driver
    /// domain (if running) learns of it from the store.
    pub(super) fn attach_vm(&self, hv: &Arc<Hypervisor>, name: &str, vs: VifSpec) -> HvResult<()> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        check_vm_name(name).map_err(bad)?;
        if let Ok(d) = self.config(name) {
            return Err(bad(format!(
                "{name} is a {} of the topology; a vhost-user vif is named after its own VM",
                d.kind.as_str()
            )));
        }
        let backend = match vs.backend {
            Some(b) => b,
            None => self.default_backend(name)?,
        };
        if self.config(&backend)?.kind != DomainKind::Driver {
            return Err(bad(format!("{backend} is not a driver domain")));
        }
        let mac = check_mac(vs.mac.as_deref().unwrap_or_default()).map_err(bad)?;
        let v = VhostVif {
            name: name.to_string(),
            backend,
            socket: vs.socket.unwrap_or_default().into(),
            mac,
            bridge: vs.opts.bridge,
            vlan: vs.opts.vlan,
            guest: false,
            vm_listens: vs.vm_listens,
        };
        self.add_vhost(hv, v)
    }

    /// Serves vhost-user vif `v` from now on: hv listens on its socket,
    /// and its driver domain (if running) learns of it from the store.
    pub(super) fn add_vhost(&self, hv: &Arc<Hypervisor>, v: VhostVif) -> HvResult<()> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        let name = v.name.clone();
        let mut st = self.lock();
        if st.vhost.iter().any(|x| x.name == v.name) {
            return Err(fail(
                ErrorKind::InUse,
                format!("vhost-user vif {name} exists"),
            ));
        }
        let macs = st
            .vifs
            .iter()
            .map(|x| &x.mac)
            .chain(st.vhost.iter().map(|x| &x.mac));
        if macs.into_iter().any(|m| m.eq_ignore_ascii_case(&v.mac)) {
            return Err(bad(format!("MAC {} is in use", v.mac)));
        }
        vhost_listen(hv, &v).map_err(bad)?;
        if let Some(b) = hv.domid_of(&v.backend) {
            if let Err(e) = write_vhost(&mut Store::new(hv), b, &v) {
                hv.vhost_remove(&v.name);
                hv.remove_info(&v.info_key());
                return Err(fail(ErrorKind::Internal, e));
            }
        }
        st.vhost.push(v);
        Ok(())
    }

    /// `network-detach NAME`: VM `name`'s vhost-user vif goes: its store
    /// node (the driver domain closes its port), then hv's listener and
    /// its socket file. None: `name` has no such vif.
    pub(super) fn detach_vm(&self, hv: &Arc<Hypervisor>, name: &str) -> Option<HvResult<()>> {
        let st = self.lock();
        let i = st.vhost.iter().position(|v| v.name == name)?;
        if st.vhost[i].guest {
            return Some(Err(fail(
                ErrorKind::Invalid,
                format!("{name}'s virtio NIC is part of the guest (nic = \"virtio\"); it goes with the guest"),
            )));
        }
        drop(st);
        self.drop_vhost(hv, name);
        Some(Ok(()))
    }

    /// Vhost-user vif `name` (a VM's or a virtio guest's) goes: its store
    /// node (the driver domain closes its port), then hv's listener and
    /// its socket file.
    pub(super) fn drop_vhost(&self, hv: &Arc<Hypervisor>, name: &str) {
        let mut st = self.lock();
        let Some(i) = st.vhost.iter().position(|v| v.name == name) else {
            return;
        };
        let v = st.vhost.remove(i);
        drop(st);
        if let Some(b) = hv.domid_of(&v.backend) {
            let _ = Store::new(hv).rm_with_parent(&v.store_path(&home_of(b)));
        }
        hv.vhost_remove(&v.name);
        hv.remove_info(&v.info_key());
    }

    /// Checks what `vs` asks for guest `guest` (a driver domain, a free
    /// handle within the guest's memory, room in the driver domain, a MAC
    /// nobody uses) and records the new vif.
    pub(super) fn new_vif(
        &self,
        hv: &Arc<Hypervisor>,
        guest: &str,
        vs: VifSpec,
    ) -> HvResult<VifConfig> {
        let gcfg = self.config(guest)?;
        if gcfg.kind != DomainKind::Guest {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{guest} is a driver domain; vifs belong to guests"),
            ));
        }
        if gcfg.nic == crate::topology::Nic::Virtio {
            return Err(fail(
                ErrorKind::Invalid,
                format!(
                    "{guest} has nic = \"{}\": it runs no netfront, so a netif vif cannot attach to it",
                    gcfg.nic.as_str()
                ),
            ));
        }
        let backend = match vs.backend {
            Some(b) => b,
            None => self.default_backend(guest)?,
        };
        if self.config(&backend)?.kind != DomainKind::Driver {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{backend} is not a driver domain"),
            ));
        }
        if let Some(m) = &vs.mac {
            xenbus::parse_mac(m)
                .map_err(|e| fail(ErrorKind::Invalid, format!("--mac {m}: {e}")))?;
        }
        Self::domid(hv, guest)?;
        Self::domid(hv, &backend)?;
        let mut st = self.lock();
        let handle = free_handle(&st.vifs, &gcfg, vs.devid)?;
        let index = self.driver_room(&st.vifs, &backend)?;
        let mac = match vs.mac {
            Some(m) => m,
            None => {
                st.macs_given += 1;
                let n = st.macs_given;
                format!("00:16:3e:5f:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff)
            }
        };
        if st.vifs.iter().any(|v| v.mac.eq_ignore_ascii_case(&mac)) {
            return Err(fail(ErrorKind::Invalid, format!("MAC {mac} is in use")));
        }
        let mut v = VifConfig {
            guest: guest.to_string(),
            handle,
            backend,
            mac,
            rx_mode: gcfg.rx_mode,
            tx_mode: gcfg.tx_mode,
            grants: gcfg.grants,
            offload: gcfg.offload,
            lro: gcfg.lro_at(),
            prefetch: gcfg.prefetch,
            rx_buffer: gcfg.rx_buffer,
            index,
            opts: vs.opts,
        };
        if v.opts.mtu.is_none() {
            v.opts.mtu = self
                .topo()
                .default_vif_mtu(&v.backend, v.opts.bridge.as_deref());
        }
        st.vifs.push(v.clone());
        Ok(v)
    }

    /// The lowest free index among `backend`'s vifs, if its memory has a
    /// staging area for one more.
    pub(super) fn driver_room(&self, vifs: &[VifConfig], backend: &str) -> HvResult<usize> {
        let staging = self.config(backend)?.memory_frames;
        let index = (0..)
            .find(|i| !vifs.iter().any(|v| v.backend == backend && v.index == *i))
            .unwrap_or(0);
        let need = DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * (index as u32 + 1);
        if need > staging {
            return Err(fail(
                ErrorKind::Quota,
                format!("{backend} has memory for no more vifs (memory_frames = {staging})"),
            ));
        }
        Ok(index)
    }

    /// Runs vif `v`'s hotplug script, if it has one, with `command`
    /// (`online` or `offline`); after `online` the backend directory says
    /// `hotplug-status` = `connected`, as Xen's scripts leave it, and the
    /// vif comes online (`setup_vif` left it offline for the script).
    pub(super) fn hotplug(
        &self,
        hv: &Arc<Hypervisor>,
        v: &VifConfig,
        be: &str,
        command: &str,
    ) -> Result<(), String> {
        let Some(script) = &v.opts.script else {
            return Ok(());
        };
        let vif = v
            .opts
            .vifname
            .clone()
            .unwrap_or_else(|| xenbus::vif_name(be));
        let call = ScriptCall {
            netns: &host::netns_name(&v.backend),
            script,
            command,
            vif: &vif,
            xenbus_path: be,
        };
        let scratch = self
            .run_dir
            .join(format!("hotplug-{}-{}.stderr", v.guest, v.handle));
        vifscript::run(&call, &scratch)
            .map_err(|e| format!("vif {} of {} ({vif}): {e}", v.handle, v.guest))?;
        if command == "online" {
            let mut ts = Store::new(hv);
            ts.write(
                &format!("{be}/{}", xenbus::keys::HOTPLUG_STATUS),
                "connected",
            )?;
            ts.write(&format!("{be}/{}", xenbus::keys::ONLINE), "1")?;
        }
        Ok(())
    }

    /// The driver domain of the guest's first vif, else the only one.
    pub(super) fn default_backend(&self, guest: &str) -> HvResult<String> {
        if let Some(v) = self.lock().vifs.iter().find(|v| v.guest == guest) {
            return Ok(v.backend.clone());
        }
        let topology = self.topo();
        let drivers: Vec<&DomainConfig> = topology
            .domains
            .iter()
            .filter(|d| d.kind == DomainKind::Driver)
            .collect();
        match drivers.as_slice() {
            [only] => Ok(only.name.clone()),
            [] => Err(fail(
                ErrorKind::Invalid,
                "the topology has no driver domain",
            )),
            _ => Err(fail(
                ErrorKind::Invalid,
                "several driver domains exist; name one with --backend",
            )),
        }
    }

    /// The vif's two store directories, by the domains running now.
    pub(super) fn paths(hv: &Hypervisor, v: &VifConfig) -> HvResult<(String, String)> {
        let g = Self::domid(hv, &v.guest)?;
        let b = Self::domid(hv, &v.backend)?;
        Ok((
            xenbus::frontend_path(g, v.handle),
            xenbus::backend_path(b, g, v.handle),
        ))
    }

    /// Waits until both ends of `v` are Connected. The paths are looked up
    /// again at each look: a driver domain that restarts meanwhile comes
    /// back under a new domain id, and its restart sets the vif up there.
    pub(super) fn wait_connected(&self, hv: &Arc<Hypervisor>, v: &VifConfig) -> HvResult<()> {
        let (mut fe, mut be) = Self::paths(hv, v)?;
        let connected = |p: &str| state_of(hv, p) == Some(XenbusState::Connected);
        let mut why = None;
        let up = wait_until(HANDSHAKE, || {
            if let Ok(now) = Self::paths(hv, v) {
                (fe, be) = now;
            }
            why = given_up(hv, &be);
            why.is_some() || (connected(&fe) && connected(&be))
        });
        if let Some(why) = why {
            let kind = if why.contains("quota") {
                ErrorKind::Quota
            } else {
                ErrorKind::Internal
            };
            return Err(fail(
                kind,
                format!(
                    "vif {} of {}: {} gave it up: {why}",
                    v.handle, v.guest, v.backend
                ),
            ));
        }
        if up {
            return Ok(());
        }
        Err(fail(
            ErrorKind::Internal,
            format!(
                "vif {} of {} did not connect within {HANDSHAKE:?} (frontend {:?}, backend {:?}){}",
                v.handle,
                v.guest,
                state_of(hv, &fe),
                state_of(hv, &be),
                self.backend_said(hv, v)
            ),
        ))
    }

    /// What `v`'s driver domain last logged about it, for an error that
    /// says the handshake stalled ([`said_about`]).
    fn backend_said(&self, hv: &Hypervisor, v: &VifConfig) -> String {
        let Ok(guest) = Self::domid(hv, &v.guest) else {
            return String::new();
        };
        let log = crate::logs::log_end(&self.run_dir.join(format!("{}.log", v.backend)));
        said_about(&log, &format!("vif{guest}.{}", v.handle))
    }

    /// Waits until `v` is connected ([`Supervisor::wait_connected`]) and
    /// its guest's interface is up with its addresses: what `apply`,
    /// `network-attach` and `restart` return after, so that the guest's
    /// first packet has a route. A container's interface is its runtime's
    /// to address: only the connection is waited for.
    pub(super) fn wait_usable(&self, hv: &Arc<Hypervisor>, v: &VifConfig) -> HvResult<()> {
        self.wait_connected(hv, v)?;
        if self.lock().containers.iter().any(|c| c.name == v.guest) {
            return Ok(());
        }
        let want = crate::readiness::guest_addresses(&self.topo(), &v.guest, v.handle);
        let (ns, ifname) = (host::netns_name(&v.guest), format!("eth{}", v.handle));
        let up = wait_until(HANDSHAKE, || {
            let ifs = crate::status::interfaces(&ns);
            crate::readiness::interface_ready(&ifs, &ifname, &want)
        });
        if up {
            return Ok(());
        }
        let with = match want.is_empty() {
            true => String::new(),
            false => format!(" with {}", want.join(" and ")),
        };
        Err(fail(
            ErrorKind::Internal,
            format!(
                "vif {} of {} connected, but {ifname} in {ns} was not up{with} within {HANDSHAKE:?} (see the guest's log)",
                v.handle, v.guest
            ),
        ))
    }

    /// `splitnet network-detach`: the backend is told to let go (`online`
    /// 0), both ends close, then both directories are removed. A peer that
    /// does not close in time loses its directory anyway.
    pub(super) fn detach(&self, guest: &str, handle: u32) -> HvResult<()> {
        let hv = self.hv()?;
        let v = self
            .lock()
            .vifs
            .iter()
            .find(|v| v.guest == guest && v.handle == handle)
            .cloned()
            .ok_or_else(|| fail(ErrorKind::BadDomain, format!("{guest} has no vif {handle}")))?;
        if let Ok((fe, be)) = Self::paths(&hv, &v) {
            let _ = Store::new(&hv).write(&format!("{be}/online"), "0");
            let closed = |p: &str| {
                matches!(
                    state_of(&hv, p),
                    None | Some(XenbusState::Closed) | Some(XenbusState::Initialising)
                )
            };
            let clean = wait_until(HANDSHAKE, || closed(&be) && closed(&fe));
            if !clean {
                hv::log!(
                    Warning,
                    dom = guest,
                    "vif {handle}: the handshake did not finish; removing it"
                );
            }
            if let Err(e) = self.hotplug(&hv, &v, &be, "offline") {
                hv::log!(Warning, dom = guest, "{e}");
            }
        }
        self.forget(&hv, &v);
        Ok(())
    }

    /// Driver domain `name` (id `domid`) died: the vifs it served run
    /// their hotplug scripts with `offline` and the dead backend's path,
    /// as a guest's death does; `plumb` runs them `online` again under the
    /// driver domain's new id when it is back.
    pub(super) fn offline_served(&self, hv: &Arc<Hypervisor>, name: &str, domid: hv::proto::DomId) {
        let vifs: Vec<VifConfig> = self
            .lock()
            .vifs
            .iter()
            .filter(|v| v.backend == name && v.opts.script.is_some())
            .cloned()
            .collect();
        for v in vifs {
            let Some(g) = hv.domid_of(&v.guest) else {
                continue;
            };
            let be = xenbus::backend_path(domid, g, v.handle);
            if let Err(e) = self.hotplug(hv, &v, &be, "offline") {
                hv::log!(Warning, dom = v.backend, "{e}");
            }
        }
    }

    /// Removes vif `v`'s directories (its peers let go of a device whose
    /// directory vanished), its `status` entry and its record.
    pub(super) fn forget(&self, hv: &Arc<Hypervisor>, v: &VifConfig) {
        if let Ok((fe, be)) = Self::paths(hv, v) {
            let mut ts = Store::new(hv);
            let _ = ts.rm(&fe);
            let _ = ts.rm(&be);
        }
        self.leave_uplinks(hv, v);
        hv.remove_info(&vif_info_key(v));
        self.lock()
            .vifs
            .retain(|x| !(x.guest == v.guest && x.handle == v.handle));
    }
}

/// The handle for a new vif of guest `g`: `devid` if free, else the lowest
/// free one; either must fit the guest's pool ([`GUEST_MIN_FRAMES`] each).
fn free_handle(vifs: &[VifConfig], g: &DomainConfig, devid: Option<u32>) -> HvResult<u32> {
    let used = |h: u32| vifs.iter().any(|v| v.guest == g.name && v.handle == h);
    let room = g.guest_vif_room();
    let handle = match devid {
        Some(h) if used(h) => {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{} has a vif devid={h} (eth{h}) already", g.name),
            ))
        }
        Some(h) => h,
        None => (0..MAX_GUEST_VIFS).find(|h| !used(*h)).ok_or_else(|| {
            fail(
                ErrorKind::Quota,
                format!(
                    "{} has {MAX_GUEST_VIFS} vifs already, the most a guest may have",
                    g.name
                ),
            )
        })?,
    };
    if handle >= room {
        return Err(fail(
            ErrorKind::Quota,
            format!(
                "{}'s memory (memory_frames = {}) holds vifs eth0..eth{} only ({GUEST_MIN_FRAMES} frames each); raise its memory_frames to {} for eth{handle}",
                g.name,
                g.memory_frames,
                room.saturating_sub(1),
                (handle + 1) * GUEST_MIN_FRAMES
            ),
        ));
    }
    Ok(handle)
}

/// The last three lines of `log` that name vif `vif` (`vif3.1`, not
/// `vif3.10`), as "; its driver domain's log: …"; empty if none do.
fn said_about(log: &str, vif: &str) -> String {
    let names = |line: &str| {
        line.match_indices(vif).any(|(at, _)| {
            let after = line[at + vif.len()..].chars().next();
            let before = line[..at].chars().next_back();
            !after.is_some_and(|c| c.is_ascii_digit())
                && !before.is_some_and(|c| c.is_ascii_alphanumeric())
        })
    };
    let lines: Vec<&str> = log.lines().filter(|l| names(l)).collect();
    match lines.len() {
        0 => String::new(),
        n => format!(
            "; its driver domain's log: {}",
            lines[n.saturating_sub(3)..].join(" | ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::said_about;

    #[test]
    fn a_stalled_vifs_own_log_lines_are_quoted() {
        let log = "driver: vif2.1 connected on xenbr0\n\
                   driver: vif2.10: could not connect: refused\n\
                   netback vif2.1: disconnected: gone\n\
                   driver: vif2.1: could not connect: evtchn busy\n\
                   driver: xvif2.1 is not ours\n";
        let said = said_about(log, "vif2.1");
        assert_eq!(
            said,
            "; its driver domain's log: driver: vif2.1 connected on xenbr0 | netback vif2.1: disconnected: gone | driver: vif2.1: could not connect: evtchn busy"
        );
        assert_eq!(said_about(log, "vif3.0"), "");
        assert_eq!(said_about("", "vif2.1"), "");
    }
}
