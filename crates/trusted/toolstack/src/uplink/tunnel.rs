//! The `vxlan` port kind's devices (what [`super::vxlan`]'s settings
//! become): before anything is made, the checks that the kernel, FRR and
//! the peers are there; then the underlay veth, the VXLAN device, evpn's
//! kernel bridge, and the FDB entries a driver domain's vifs publish.

use super::journal::Undo;
use super::vxlan::{Mode, MtuBudget, Vxlan, UNDERLAY_IF};
use super::{Uplink, UplinkKind, Uplinks};
use crate::host::{ip_in, netns_name, run};
use crate::topology::VifConfig;
use std::net::Ipv4Addr;
use std::path::Path;

/// Before anything is made for the topology: the kernel has VXLAN, FRR is
/// there for evpn, and every static or evpn peer is reachable from hv's
/// namespace (the host's underlay), through links big enough for
/// `mtu_budget = "underlay"`.
pub(super) fn preflight(uplinks: &[Uplink]) -> Result<(), String> {
    let vx: Vec<(&Uplink, &Vxlan)> = uplinks
        .iter()
        .filter_map(|u| u.vxlan.as_ref().map(|x| (u, x)))
        .collect();
    if vx.is_empty() {
        return Ok(());
    }
    kernel_has_vxlan()?;
    if vx.iter().any(|(_, x)| x.mode == Mode::Evpn) {
        super::frr::installed()?;
    }
    for (u, x) in vx {
        for p in &x.peers {
            reachable(x, *p).map_err(|e| {
                format!("vxlan port {}:{} (vni {}): {e}", u.driver, u.ifname, x.vni)
            })?;
        }
    }
    Ok(())
}

fn kernel_has_vxlan() -> Result<(), String> {
    // Loaded on demand; built in, it is listed all the same (it has parameters).
    let _ = run("modprobe", &["-q", "vxlan"]);
    if Path::new("/sys/module/vxlan").exists() {
        return Ok(());
    }
    Err("the kernel has no VXLAN (`modprobe vxlan` found no module): a vxlan port needs a kernel with CONFIG_VXLAN".into())
}

/// Whether `peer` is reachable from hv's namespace (`ip route get`), not
/// an address of this host, and through a link of at least the underlay
/// MTU the port needs.
fn reachable(x: &Vxlan, peer: Ipv4Addr) -> Result<(), String> {
    let p = peer.to_string();
    let out = run("ip", &["-j", "route", "get", &p])
        .map_err(|e| format!("peer {peer} is unreachable from the host's underlay: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("ip -j route get: {e}"))?;
    let r = &v[0];
    match r["type"].as_str().unwrap_or("unicast") {
        "unicast" => {}
        "local" => return Err(format!("peer {peer} is an address of this host itself")),
        t => {
            return Err(format!(
                "peer {peer} is unreachable from the host's underlay (its route is of type {t})"
            ))
        }
    }
    let dev = r["dev"].as_str().unwrap_or_default();
    if x.budget == MtuBudget::Underlay {
        let link = run("ip", &["-j", "link", "show", "dev", dev]).map_err(err)?;
        let link: serde_json::Value =
            serde_json::from_str(&link).map_err(|e| format!("ip -j link: {e}"))?;
        let mtu = link[0]["mtu"].as_u64().unwrap_or(0) as u32;
        if mtu < x.underlay_mtu() {
            return Err(format!(
                "mtu_budget = \"underlay\" needs underlay links of {} bytes or more, but the route to peer {peer} leaves by {dev} with MTU {mtu}; enlarge it, or leave the budget to the guests",
                x.underlay_mtu()
            ));
        }
    }
    Ok(())
}

fn err(e: std::io::Error) -> String {
    e.to_string()
}

/// `bridge ARGS` in namespace `ns`.
fn bridge_in(ns: &str, args: &[&str]) -> std::io::Result<String> {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("bridge", &a)
}

impl Uplinks {
    /// `vxlan`: the driver domain's underlay (with its first vxlan port),
    /// the VXLAN device, and its peers or (evpn) its kernel bridge.
    pub(super) fn vxlan(&self, u: &Uplink) -> Result<(), String> {
        let x = u
            .vxlan
            .as_ref()
            .ok_or("a vxlan uplink without its settings")?;
        let ns = netns_name(&u.driver);
        let first = self
            .of(&u.driver)
            .into_iter()
            .find(|w| w.kind == UplinkKind::Vxlan)
            .is_some_and(|w| w.ifname == u.ifname);
        if first {
            self.underlay(u, x, &ns)?;
        }
        self.vxlan_device(u, x, &ns)?;
        let dev = x.device();
        match x.mode {
            Mode::Static => {
                for p in &x.peers {
                    let p = p.to_string();
                    bridge_in(
                        &ns,
                        &["fdb", "append", "00:00:00:00:00:00", "dev", &dev, "dst", &p],
                    )
                    .map_err(|e| format!("the flood entry of {dev} to peer {p}: {e}"))?;
                }
            }
            Mode::Multicast => {}
            Mode::Evpn => self.kernel_bridge(u, x, &ns)?,
        }
        ip_in(&ns, &["link", "set", "dev", &dev, "up"]).map_err(err)?;
        Ok(())
    }

    /// The underlay veth: `ul0` with the VTEP address and a default route,
    /// its host end with a route to the VTEP address and proxy ARP (so the
    /// driver domain's ARP for any peer is answered), and forwarding on.
    fn underlay(&self, u: &Uplink, x: &Vxlan, ns: &str) -> Result<(), String> {
        let he = u.host_end.clone().unwrap_or_default();
        self.host_veth(u, &he, UNDERLAY_IF, Some(x.underlay_mtu()))?;
        let local = format!("{}/32", x.local);
        ip_in(ns, &["addr", "add", &local, "dev", UNDERLAY_IF]).map_err(err)?;
        ip_in(ns, &["route", "add", "default", "dev", UNDERLAY_IF]).map_err(err)?;
        super::kinds::proxy_arp(&he)?;
        super::kinds::sysctl(&self.run_dir, "net/ipv4/ip_forward", "1")?;
        super::kinds::host_route(&local, &he)
    }

    /// Journals, then creates, link `name` in namespace `ns` (`ip link add
    /// NAME ARGS`), without IPv6 addresses of its own (the driver domain's
    /// stack must not speak on the tunnel).
    fn ns_link(&self, u: &Uplink, ns: &str, name: &str, args: &[&str]) -> Result<(), String> {
        super::kinds::refuse_taken(Some(ns), name)?;
        self.note(
            u,
            Undo::Link {
                ns: Some(ns.to_string()),
                ifname: name.to_string(),
            },
        )?;
        let mut a = vec!["link", "add", name];
        a.extend_from_slice(args);
        ip_in(ns, &a).map_err(err)?;
        // Best effort: without IPv6 in the namespace there is nothing to turn off.
        let _ = ip_in(ns, &["link", "set", "dev", name, "addrgenmode", "none"]);
        Ok(())
    }

    /// `vx<vni>`: learning for static peers and a group, not with evpn
    /// (zebra installs the remote MACs); its MTU leaves room for the
    /// encapsulation on the underlay.
    fn vxlan_device(&self, u: &Uplink, x: &Vxlan, ns: &str) -> Result<(), String> {
        let args = x.device_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ns_link(u, ns, &x.device(), &args)
            .map_err(|e| format!("the VXLAN device {} of {}: {e}", x.device(), u.driver))
    }

    /// evpn: kernel bridge `kbr<vni>` holding `vx<vni>` (learning off:
    /// remote MACs come from BGP) and `vxk<vni>`, whose veth peer
    /// `vxp<vni>` is the driver domain's port.
    fn kernel_bridge(&self, u: &Uplink, x: &Vxlan, ns: &str) -> Result<(), String> {
        let (dev, kbr, vxk) = (x.device(), x.kernel_bridge(), x.kernel_member());
        let mtu = x.guest_mtu().to_string();
        self.ns_link(u, ns, &kbr, &["type", "bridge"])?;
        let run = |args: &[&str]| ip_in(ns, args).map(drop).map_err(err);
        run(&["link", "set", "dev", &dev, "master", &kbr])?;
        run(&[
            "link",
            "set",
            "dev",
            &dev,
            "type",
            "bridge_slave",
            "learning",
            "off",
            "neigh_suppress",
            "off",
        ])?;
        let vxp = x.port_ifname();
        let veth = [
            "mtu", &mtu, "type", "veth", "peer", "name", &vxk, "mtu", &mtu,
        ];
        self.ns_link(u, ns, &vxp, &veth)?;
        let _ = ip_in(ns, &["link", "set", "dev", &vxk, "addrgenmode", "none"]);
        run(&["link", "set", "dev", &vxk, "master", &kbr])?;
        for l in [&kbr, &vxk, &vxp] {
            run(&["link", "set", "dev", l, "up"])?;
        }
        Ok(())
    }

    /// Vif `v` is plumbed: its MAC is published on each evpn port of its
    /// bridge (a static FDB entry on `vxk<vni>`, which zebra advertises).
    pub(super) fn publish(&self, v: &VifConfig) -> Result<(), String> {
        for u in &self.of(&v.backend) {
            let Some(member) = u.publishes(v) else {
                continue;
            };
            let ns = netns_name(&u.driver);
            let args = ["fdb", "replace", &v.mac, "dev", &member, "master", "static"];
            bridge_in(&ns, &args)
                .map_err(|e| format!("publishing {}'s MAC {} on {member}: {e}", v.guest, v.mac))?;
        }
        Ok(())
    }

    /// Vif `v` is going: its MAC is withdrawn from each evpn port.
    pub(super) fn unpublish(&self, v: &VifConfig) {
        for u in &self.of(&v.backend) {
            let Some(member) = u.publishes(v) else {
                continue;
            };
            let ns = netns_name(&u.driver);
            // Gone already with its link (the driver domain's namespace went).
            if super::journal::exists(Some(&ns), &member) {
                let args = ["fdb", "del", &v.mac, "dev", &member, "master"];
                if let Err(e) = bridge_in(&ns, &args) {
                    hv::log!(Warning, dom = v.guest, "withdrawing its MAC {}: {e}", v.mac);
                }
            }
        }
    }
}

impl Uplink {
    /// The `status` fact of a vxlan uplink's settings.
    pub fn vxlan_info_key(&self) -> String {
        format!("vxlan.{}/{}", self.driver, self.ifname)
    }

    /// The kernel bridge member on which this uplink publishes vif `v`'s
    /// MAC: an evpn port of `v`'s driver domain on `v`'s bridge that
    /// carries `v`'s VLAN.
    pub fn publishes(&self, v: &VifConfig) -> Option<String> {
        let x = self.vxlan.as_ref().filter(|x| x.mode == Mode::Evpn)?;
        self.reaches(v).then(|| x.kernel_member())
    }
}
