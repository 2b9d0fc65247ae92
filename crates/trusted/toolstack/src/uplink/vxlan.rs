//! The `vxlan` port kind: the driver domain's bridge reaches other hosts
//! over the kernel's VXLAN (RFC 7348), its peers given statically
//! (head-end replication), by a multicast group, or found by BGP EVPN
//! (RFC 7432, RFC 8365) from FRR ([`super::frr`]).
//!
//! hv makes every device, in the driver domain's namespace:
//! - the underlay: veth `ul0` (the VTEP address as a /32, a default route
//!   out of it) to a host end in hv's namespace (a route to the VTEP
//!   address, proxy ARP, forwarding);
//! - static and multicast: `vx<vni>`, learning, which the driver domain
//!   opens as its port; static peers are all-zero FDB entries, one per
//!   peer, where the kernel sends what it floods;
//! - evpn: `vx<vni>` without learning in kernel bridge `kbr<vni>`, and a
//!   veth `vxp<vni>` (the driver domain's port) to `vxk<vni>` (a member of
//!   `kbr<vni>`); each local vif MAC is a static FDB entry on `vxk<vni>`,
//!   which zebra reads and bgpd advertises as a type-2 route.
//!
//! The driver domain only opens a packet socket on its port.

use super::config::PortConfig;
use super::journal::Undo;
use super::{Uplink, UplinkKind, Uplinks};
use crate::host::{ip_in, netns_name, run};
use crate::topology::VifConfig;
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::Path;

/// VXLAN's encapsulation: outer Ethernet 14, IPv4 20, UDP 8, VXLAN 8.
pub const OVERHEAD: u32 = 50;
/// IANA's UDP port for VXLAN (RFC 7348 section 5).
pub const UDP_PORT: u16 = 4789;
/// The iBGP AS of `evpn` without `asn`.
pub const DEFAULT_ASN: u32 = 65000;
/// Largest VNI: 24 bits.
pub const MAX_VNI: u32 = 0xff_ffff;
/// The driver domain's end of the underlay veth.
pub const UNDERLAY_IF: &str = "ul0";
/// An Ethernet link's usual MTU.
const ETHERNET_MTU: u32 = 1500;

/// Who pays for the encapsulation.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MtuBudget {
    /// The guests: their vifs get 1450 unless a vif sets `mtu`.
    #[default]
    Guests,
    /// The underlay: its links are made 1550, refused if the host's are smaller.
    Underlay,
}

impl MtuBudget {
    pub fn as_str(self) -> &'static str {
        match self {
            MtuBudget::Guests => "guests",
            MtuBudget::Underlay => "underlay",
        }
    }
}

/// How a vxlan port finds the other VTEPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A static list: head-end replication.
    Static,
    /// A multicast group the underlay carries.
    Multicast,
    /// BGP EVPN type-3 routes from the peers (iBGP neighbours).
    Evpn,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::Multicast => "multicast",
            Mode::Evpn => "evpn",
        }
    }
}

/// A vxlan port as hv sets it up.
#[derive(Debug, Clone, PartialEq)]
pub struct Vxlan {
    pub vni: u32,
    pub mode: Mode,
    /// The VTEP address, on `ul0`.
    pub local: Ipv4Addr,
    pub peers: Vec<Ipv4Addr>,
    pub group: Option<Ipv4Addr>,
    pub asn: u32,
    pub budget: MtuBudget,
}

impl Vxlan {
    /// The MTU the guests' vifs get.
    pub fn guest_mtu(&self) -> u32 {
        match self.budget {
            MtuBudget::Guests => ETHERNET_MTU - OVERHEAD,
            MtuBudget::Underlay => ETHERNET_MTU,
        }
    }

    /// The MTU of the underlay veth.
    pub fn underlay_mtu(&self) -> u32 {
        self.guest_mtu() + OVERHEAD
    }

    /// The kernel's VXLAN device.
    pub fn device(&self) -> String {
        format!("vx{}", self.vni)
    }

    /// evpn: the kernel bridge holding the VXLAN device.
    pub fn kernel_bridge(&self) -> String {
        format!("kbr{}", self.vni)
    }

    /// evpn: the veth end in the kernel bridge, where local MACs are published.
    pub fn kernel_member(&self) -> String {
        format!("vxk{}", self.vni)
    }

    /// The interface the driver domain opens as its port.
    pub fn port_ifname(&self) -> String {
        match self.mode {
            Mode::Evpn => format!("vxp{}", self.vni),
            _ => self.device(),
        }
    }

    /// `ip link add vx<vni>`'s arguments after the name: learning for
    /// static peers and a group (joined on `ul0`), not with evpn (zebra
    /// installs the remote MACs); an MTU that leaves room for the
    /// encapsulation on the underlay.
    pub fn device_args(&self) -> Vec<String> {
        let mut a = format!(
            "mtu {} type vxlan id {} local {} dstport {UDP_PORT}",
            self.guest_mtu(),
            self.vni,
            self.local
        );
        match (self.mode, self.group) {
            (Mode::Multicast, Some(g)) => a += &format!(" group {g} dev {UNDERLAY_IF}"),
            (Mode::Evpn, _) => a += " nolearning",
            _ => {}
        }
        a.split(' ').map(str::to_string).collect()
    }

    /// The `status` fact describing it (JSON).
    pub fn info(&self) -> String {
        serde_json::json!({
            "vni": self.vni,
            "mode": self.mode.as_str(),
            "local": self.local.to_string(),
            "peers": self.peers.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            "group": self.group.map(|g| g.to_string()),
            "asn": (self.mode == Mode::Evpn).then_some(self.asn),
            "mtu_budget": self.budget.as_str(),
            "guest_mtu": self.guest_mtu(),
            "underlay_mtu": self.underlay_mtu(),
            "device": self.device(),
        })
        .to_string()
    }
}

/// `s` as a usable IPv4 unicast address (not unspecified, loopback,
/// multicast, broadcast or reserved).
fn unicast(what: &str, s: &str) -> Result<Ipv4Addr, String> {
    let a: Ipv4Addr = s
        .parse()
        .map_err(|_| format!("{what} = {s:?} is not an IPv4 address"))?;
    let reserved = a.octets()[0] >= 240;
    if a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast() || reserved {
        return Err(format!(
            "{what} = {s:?} is not a usable IPv4 unicast address"
        ));
    }
    Ok(a)
}

/// The vxlan keys of `p`, checked; `p` is a vxlan port.
pub(super) fn parse(p: &PortConfig) -> Result<Vxlan, String> {
    let vni = p.vni.ok_or("kind = \"vxlan\" needs vni = <1..=16777215>")?;
    if !(1..=MAX_VNI).contains(&vni) {
        return Err(format!("vni = {vni} is outside 1..={MAX_VNI}"));
    }
    let local = p
        .local
        .as_deref()
        .ok_or("kind = \"vxlan\" needs local = \"<the VTEP's IPv4 address>\"")?;
    let local = unicast("local", local)?;
    let mut peers = Vec::new();
    for s in p.peers.iter().flatten() {
        let a = unicast("a peer", s)?;
        if a == local {
            return Err(format!("peer {a} is the port's own local address"));
        }
        if peers.contains(&a) {
            return Err(format!("peer {a} is listed twice"));
        }
        peers.push(a);
    }
    let group = match &p.group {
        Some(g) => {
            let a: Ipv4Addr = g
                .parse()
                .map_err(|_| format!("group = {g:?} is not an IPv4 address"))?;
            if !a.is_multicast() {
                return Err(format!(
                    "group = {g:?} is not a multicast address (224.0.0.0/4)"
                ));
            }
            Some(a)
        }
        None => None,
    };
    let evpn = p.evpn.unwrap_or(false);
    let mode = match (evpn, peers.is_empty(), group.is_some()) {
        (true, _, true) => {
            return Err("evpn = true takes peers (its BGP neighbours), not a group".into())
        }
        (true, true, _) => {
            return Err("evpn = true needs peers = [...] (its iBGP neighbours)".into())
        }
        (true, false, false) => Mode::Evpn,
        (false, false, true) => {
            return Err("give peers (head-end replication) or a multicast group, not both".into())
        }
        (false, true, false) => {
            return Err(
                "kind = \"vxlan\" needs peers = [...] or group = \"<multicast address>\"".into(),
            )
        }
        (false, false, false) => Mode::Static,
        (false, true, true) => Mode::Multicast,
    };
    let asn = match p.asn {
        Some(_) if !evpn => return Err("asn is for evpn = true only".into()),
        Some(0) => return Err("asn = 0 is not a usable AS number".into()),
        Some(a) => a,
        None => DEFAULT_ASN,
    };
    Ok(Vxlan {
        vni,
        mode,
        local,
        peers,
        group,
        asn,
        budget: p.mtu_budget.unwrap_or_default(),
    })
}

/// Checks a `[[port]]`'s vxlan keys: all of them on a vxlan port (and
/// no `mtu`: `mtu_budget` decides), none on another kind.
pub(super) fn check_keys(p: &PortConfig) -> Result<(), String> {
    if p.kind == UplinkKind::Vxlan {
        if p.mtu.is_some() {
            return Err(
                "kind = \"vxlan\" takes mtu_budget = \"guests\" or \"underlay\", not mtu".into(),
            );
        }
        return parse(p).map(drop);
    }
    let any = p.vni.is_some()
        || p.local.is_some()
        || p.peers.is_some()
        || p.group.is_some()
        || p.evpn.is_some()
        || p.asn.is_some()
        || p.mtu_budget.is_some();
    if any {
        return Err(format!(
            "vni, local, peers, group, evpn, asn and mtu_budget are for kind vxlan, not {:?}",
            p.kind.as_str()
        ));
    }
    Ok(())
}

/// Checks the vxlan ports together: a VNI on one port only, one vxlan
/// port per bridge, one VTEP address per driver domain, and one AS for
/// a driver domain's evpn ports (one bgpd serves them).
pub(super) fn check_together(ports: &[PortConfig]) -> Result<(), String> {
    let vx: Vec<(&PortConfig, Vxlan)> = ports
        .iter()
        .filter(|p| p.kind == UplinkKind::Vxlan)
        .filter_map(|p| parse(p).ok().map(|x| (p, x)))
        .collect();
    let bridge = |p: &PortConfig| {
        p.bridge
            .clone()
            .unwrap_or_else(|| abi::xenbus::DEFAULT_BRIDGE.to_string())
    };
    for (i, (p, x)) in vx.iter().enumerate() {
        for (q, y) in &vx[..i] {
            if x.vni == y.vni {
                return Err(format!(
                    "vni = {} is on two vxlan [[port]]s ({}:{} and {}:{}); a VNI joins one bridge",
                    x.vni,
                    q.driver,
                    bridge(q),
                    p.driver,
                    bridge(p)
                ));
            }
            if p.driver != q.driver {
                continue;
            }
            if bridge(p) == bridge(q) {
                return Err(format!(
                    "bridge {:?} of {:?} has two vxlan [[port]]s (vni {} and {}); a bridge has one VNI",
                    bridge(p),
                    p.driver,
                    y.vni,
                    x.vni
                ));
            }
            if x.local != y.local {
                return Err(format!(
                    "the vxlan [[port]]s of {:?} have local = {} and {}; a driver domain has one VTEP address",
                    p.driver, y.local, x.local
                ));
            }
            if x.mode == Mode::Evpn && y.mode == Mode::Evpn && x.asn != y.asn {
                return Err(format!(
                    "the evpn [[port]]s of {:?} have asn = {} and {}; one bgpd serves them",
                    p.driver, y.asn, x.asn
                ));
            }
        }
    }
    Ok(())
}

/// The MTU a vif on `bridge` of driver domain `driver` gets without its own
/// `mtu`: 1450 if a vxlan port on that bridge leaves the budget to the guests.
pub(crate) fn guest_mtu(ports: &[PortConfig], driver: &str, bridge: &str) -> Option<u16> {
    ports
        .iter()
        .filter(|p| p.kind == UplinkKind::Vxlan && p.driver == driver)
        .filter(|p| p.bridge.as_deref().unwrap_or(abi::xenbus::DEFAULT_BRIDGE) == bridge)
        .find(|p| p.mtu_budget.unwrap_or_default() == MtuBudget::Guests)
        .map(|_| (ETHERNET_MTU - OVERHEAD) as u16)
}

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
        for u in self.of(&v.backend) {
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
        for u in self.of(&v.backend) {
            let Some(member) = u.publishes(v) else {
                continue;
            };
            let ns = netns_name(&u.driver);
            // Gone already with its link (the driver domain's namespace went).
            if super::journal::exists(Some(&ns), &member) {
                let args = ["fdb", "del", &v.mac, "dev", &member, "master"];
                if let Err(e) = bridge_in(&ns, &args) {
                    eprintln!("hv: withdrawing {}'s MAC {}: {e}", v.guest, v.mac);
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
