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
//! The driver domain only opens a packet socket on its port. This file is
//! the settings and their checks; [`super::tunnel`] makes the devices.

pub use crate::topology::port::MtuBudget;
use crate::topology::port::{PortConfig, UplinkKind};
use std::net::Ipv4Addr;

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
