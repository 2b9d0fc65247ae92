//! A macvlan uplink's group: one member macvlan per guest MAC behind it.
//!
//! The kernel's macvlan hands a received unicast frame to the macvlan whose
//! MAC is its destination (the lower device's receive handler looks the
//! MAC up), so one macvlan receives the unicast of one MAC only. For every
//! vif on the uplink's bridge, served by its driver domain, hv makes a
//! *member* macvlan on the same host interface with the vif's MAC; the
//! driver domain reads each member as the uplink's own bridge port and
//! sends through the uplink (the *primary*) only. Primary and members are
//! in mode `private`, so none delivers a frame to another locally: what
//! the driver sends reaches the wire once and comes back on no member.
//! A multi-queue NIC's VMQ does the same in hardware: a receive queue per
//! guest MAC, filled by the NIC's MAC filter.

use super::journal::{self, Undo};
use super::{Uplink, UplinkKind, Uplinks};
use crate::host::{ip_in, netns_name};
use crate::store::Store;
use crate::topology::VifConfig;

/// Member `name` of a group, with its guest's MAC.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub name: String,
    pub mac: String,
}

impl Uplink {
    /// Whether vif `v` is behind this uplink: served by its driver domain,
    /// on its bridge, in a VLAN it carries.
    pub fn reaches(&self, v: &VifConfig) -> bool {
        let bridge = v
            .opts
            .bridge
            .as_deref()
            .unwrap_or(abi::xenbus::DEFAULT_BRIDGE);
        let carries = self.vlan.is_none() || self.vlan == v.opts.vlan;
        self.driver == v.backend && self.bridge == bridge && carries
    }

    /// The member macvlan this uplink needs for vif `v`, if any: a macvlan
    /// uplink of `v`'s driver domain on `v`'s bridge that carries `v`'s
    /// VLAN, whose own MAC is not `v`'s (then it receives it itself).
    pub fn member_for(&self, v: &VifConfig) -> Option<Member> {
        let own = self
            .mac
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case(&v.mac));
        (self.kind == UplinkKind::Macvlan && self.reaches(v) && !own).then(|| Member {
            // `uplN` + `v` + the vif's index in its driver domain: at
            // most 3 + 2 + 1 + 4 bytes, within Linux's 15.
            name: format!("{}v{}", self.ifname, v.index),
            mac: v.mac.clone(),
        })
    }

    /// The store value of member `m`'s `uplinks/<m>`.
    pub(super) fn member_value(&self) -> String {
        format!("{},group={}", self.store_value(), self.ifname)
    }
}

impl Uplinks {
    /// Vif `v`'s directories were written (driver domain `b`, home
    /// `home`): each macvlan uplink it needs a member of gets it (made
    /// unless it exists, journaled first) and names it in the store; each
    /// evpn port of its bridge publishes its MAC ([`super::vxlan`]).
    pub fn join(&self, ts: &mut Store<'_>, home: &str, v: &VifConfig) -> Result<(), String> {
        for u in &self.of(&v.backend) {
            let Some(m) = u.member_for(v) else { continue };
            let ns = netns_name(&u.driver);
            if !journal::exists(Some(&ns), &m.name) {
                self.member_link(u, &m, &ns).map_err(|e| {
                    format!(
                        "the member macvlan {} of uplink {} for vif {} of {} (MAC {}): {e}",
                        m.name, u.ifname, v.handle, v.guest, m.mac
                    )
                })?;
            }
            ts.write(&format!("{home}/uplinks/{}", m.name), &u.member_value())?;
            let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            let list = g.entry(u.info_key()).or_default();
            if !list.contains(&m) {
                list.push(m);
            }
        }
        self.publish(v)
    }

    /// Vif `v` is going (detached, or its guest died): its members leave
    /// the store and the host, its MAC the evpn ports.
    pub fn leave(&self, ts: &mut Store<'_>, home: Option<&str>, v: &VifConfig) {
        self.unpublish(v);
        for u in &self.of(&v.backend) {
            let Some(m) = u.member_for(v) else { continue };
            if let Some(home) = home {
                let _ = ts.rm(&format!("{home}/uplinks/{}", m.name));
            }
            let errors = journal::replay(&self.run_dir, |owner, undo| {
                owner == u.driver
                    && matches!(undo, Undo::Link { ns: Some(_), ifname } if *ifname == m.name)
            });
            for e in errors {
                hv::log!(Warning, "removing member macvlan {}: {e}", m.name);
            }
            let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(list) = g.get_mut(&u.info_key()) {
                list.retain(|x| *x != m);
            }
        }
    }

    /// Creates member `m` of `u` in namespace `ns`: a private-mode macvlan
    /// with the guest's MAC, without IPv6 addresses of its own (the
    /// driver domain's stack must not answer for the guest's link-local
    /// address), up.
    fn member_link(&self, u: &Uplink, m: &Member, ns: &str) -> Result<(), String> {
        self.private_macvlan(u, &m.name, ns, Some(&m.mac))?;
        // Best effort: without IPv6 in the namespace there is nothing to turn off.
        let _ = ip_in(ns, &["link", "set", "dev", &m.name, "addrgenmode", "none"]);
        ip_in(ns, &["link", "set", "dev", &m.name, "up"]).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The members of uplink `u` now.
    pub fn members_of(&self, u: &Uplink) -> Vec<Member> {
        let g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        g.get(&u.info_key()).cloned().unwrap_or_default()
    }
}
