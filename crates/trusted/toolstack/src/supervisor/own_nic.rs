//! A guest whose NIC is not a vif, added and removed in place by `apply`:
//! an emulated NIC's host interface (Sugerman 2001's VMNet, Zhang & Dong's
//! device model's TAP) becomes an extra port of its driver domain; a
//! virtio guest's vhost-user vif is served as a VM's is.

use super::{fail, home_of, wait_until, Supervisor, HANDSHAKE};
use crate::host;
use crate::store::Store;
use crate::topology::{DomainKind, EmulatedNic};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use serde_json::Value;
use std::sync::Arc;

impl Supervisor {
    /// Before guest `name`'s domain is created, whose home names it: its
    /// virtio vif, if it has one, served from now on.
    pub(super) fn serve_virtio(&self, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        let mut all = self.topo().vhost_vifs(&self.run_dir).into_iter();
        match all.find(|v| v.guest && v.name == name) {
            Some(v) => self.add_vhost(hv, v),
            None => Ok(()),
        }
    }

    /// Before guest `name`'s process starts: the host interface its
    /// emulated NIC's device side is to make, if it has one, an extra port
    /// of its driver domain (which opens it once it exists), and one hv
    /// opens for that domain when it asks.
    pub(super) fn serve_emulated(&self, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        let emulated = self.topo().emulated_nics();
        let Some(e) = emulated.into_iter().find(|e| e.guest == name) else {
            return Ok(());
        };
        let b = Self::domid(hv, &e.backend)?;
        let node = format!("{}/ports/{}", home_of(b), e.host_ifname());
        Store::new(hv)
            .write(&node, name)
            .map_err(|x| fail(ErrorKind::Internal, x))?;
        self.set_port_opener(hv, &e.backend, &host::netns_name(&e.backend));
        Ok(())
    }

    /// Guest `name`'s NIC parts that are not vifs, once its process is
    /// gone: the extra port naming it in any running driver domain of the
    /// running topology (the domain closes it; hv's socket on it closes
    /// too), its `nic.` fact, and its virtio vif.
    pub(super) fn unserve_own_nic(&self, hv: &Arc<Hypervisor>, name: &str) {
        let ifname = EmulatedNic::ifname_of(name);
        let drivers: Vec<String> = (self.topo().domains.iter())
            .filter(|d| d.kind == DomainKind::Driver)
            .map(|d| d.name.clone())
            .collect();
        let mut ts = Store::new(hv);
        for d in drivers {
            let Some(b) = hv.domid_of(&d) else { continue };
            let node = format!("{}/ports/{ifname}", home_of(b));
            if ts.read(&node).as_deref() == Some(name) {
                let _ = ts.rm_with_parent(&node);
                hv.port_drop(&d, &ifname);
                self.set_port_opener(hv, &d, &host::netns_name(&d));
            }
        }
        hv.remove_info(&format!("nic.{name}"));
        self.drop_vhost(hv, name);
    }

    /// Waits until guest `name`'s own NIC, if it has one, is up as `up`
    /// waits for it ([`crate::readiness`]): an emulated NIC's driver runs
    /// in the guest (its counters are in) and its driver domain bridges the
    /// NIC's host interface; and the guest's `eth0` is up with its
    /// addresses. Until then the first frames to it are lost.
    pub(super) fn wait_own_nic(&self, hv: &Arc<Hypervisor>, name: &str) -> HvResult<()> {
        let t = self.topo().clone();
        let Some(d) = t
            .domain(name)
            .filter(|d| d.nic != crate::topology::Nic::Vif)
        else {
            return Ok(());
        };
        let emulated = t.emulated_nics().into_iter().find(|e| e.guest == name);
        let bridged = |e: &EmulatedNic| {
            let (Some(g), Some(b)) = (hv.domid_of(&e.guest), hv.domid_of(&e.backend)) else {
                return false;
            };
            let mut ts = Store::new(hv);
            let running = ts.read(&format!("/local/domain/{g}/nic/stats")).is_some();
            let doc = ts.read(&format!("/local/domain/{b}/splitnet/stats"));
            let doc: Value = doc
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            let ports = doc["extra_ports"].as_array().cloned().unwrap_or_default();
            let ifname = e.host_ifname();
            running && (ports.iter()).any(|p| p["name"] == ifname.as_str() && p["open"] == true)
        };
        let want = crate::readiness::guest_addresses(&t, name, 0);
        let ns = host::netns_name(name);
        let up = wait_until(HANDSHAKE, || {
            let ifs = crate::status::interfaces(&ns);
            emulated.as_ref().is_none_or(bridged)
                && crate::readiness::interface_ready(&ifs, "eth0", &want)
        });
        match up {
            true => Ok(()),
            false => Err(fail(
                ErrorKind::Internal,
                format!(
                    "the {} NIC of {name} was not up within {HANDSHAKE:?} (see its log and its device side's)",
                    d.nic.as_str()
                ),
            )),
        }
    }
}
