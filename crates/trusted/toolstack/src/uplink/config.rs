//! `[[port]]`: a driver domain's uplinks as the topology file gives them,
//! checked, and resolved into what hv sets up ([`Uplink`]).

use crate::host::PHYS_PORT;
pub use crate::topology::port::{PortConfig, UplinkKind, MAX_MTU, MAX_QUEUES, MIN_MTU};
use crate::topology::{Check, DomainKind, Topology};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

/// An uplink as hv sets it up.
#[derive(Debug, Clone, PartialEq)]
pub struct Uplink {
    pub driver: String,
    pub bridge: String,
    pub kind: UplinkKind,
    /// `host`, `macvlan`: the host interface.
    pub iface: Option<String>,
    /// The interface's name in the driver domain's namespace.
    pub ifname: String,
    /// `nat`, `route`: the host end of the veth.
    pub host_end: Option<String>,
    pub mtu: Option<u32>,
    pub vlan: Option<u16>,
    /// `nat`: the host end's address and prefix.
    pub subnet: Option<(Ipv4Addr, u8)>,
    /// `macvlan`: the primary's MAC.
    pub mac: Option<String>,
    /// `route`: the guests' addresses the host routes to the port.
    pub routes: Vec<IpAddr>,
    /// `pasta`: host ports forwarded to guests.
    pub publish: Vec<super::pasta::Publish>,
    /// Dedicated receive queues (`queues`); None: the driver's default.
    pub queues: Option<u16>,
    /// `vxlan`: its settings.
    pub vxlan: Option<super::vxlan::Vxlan>,
    /// The kernel's GRO on the port ([`PortConfig::gro`], resolved).
    pub gro: bool,
}

impl Uplink {
    /// The store value of `uplinks/<ifname>`
    /// (`bridge=..[,vlan=..][,queues=..]`).
    pub fn store_value(&self) -> String {
        let mut v = format!("bridge={}", self.bridge);
        if let Some(vid) = self.vlan {
            v += &format!(",vlan={vid}");
        }
        if let Some(q) = self.queues {
            v += &format!(",queues={q}");
        }
        v
    }

    /// Whether it sets up anything on the host that must be undone.
    pub fn touches_host(&self) -> bool {
        self.kind != UplinkKind::Wire
    }
}

/// Whether `n` is a usable Linux interface name (dev_valid_name).
pub fn valid_ifname(n: &str) -> bool {
    !n.is_empty()
        && n.len() < 16
        && n != "."
        && n != ".."
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | '+'))
}

fn parse_subnet(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let bad = || {
        format!("port subnet = {s:?} must be an IPv4 address with a prefix of 8..=30, like \"10.78.0.1/24\"")
    };
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let a: Ipv4Addr = a.parse().map_err(|_| bad())?;
    let l: u8 = l.parse().map_err(|_| bad())?;
    if !(8..=30).contains(&l) {
        return Err(bad());
    }
    let host = u32::from(a) & (u32::MAX >> l);
    if host == 0 || host == u32::MAX >> l {
        return Err(format!(
            "port subnet = {s:?}: the host side needs a host address, not the network or broadcast one"
        ));
    }
    Ok((a, l))
}

/// Checks one `[[port]]` on its own.
fn check_port(p: &PortConfig, t: &Topology) -> Result<(), String> {
    let who = format!("[[port]] of {:?}", p.driver);
    match t.domain(&p.driver) {
        Some(d) if d.kind == DomainKind::Driver => {}
        Some(_) => return Err(format!("{who}: {:?} is not a driver domain", p.driver)),
        None => return Err(format!("{who}: driver = {:?} names no domain", p.driver)),
    }
    if let Some(b) = &p.bridge {
        if !valid_ifname(b) {
            return Err(format!("{who}: bridge = {b:?} is not a valid bridge name"));
        }
    }
    let needs_iface = matches!(p.kind, UplinkKind::Host | UplinkKind::Macvlan);
    match (&p.iface, needs_iface) {
        (None, true) => {
            return Err(format!(
                "{who}: kind = {:?} needs iface = \"<host interface>\"",
                p.kind.as_str()
            ))
        }
        (Some(_), false) => {
            return Err(format!(
                "{who}: iface is for kinds host and macvlan, not {:?}",
                p.kind.as_str()
            ))
        }
        (Some(i), true) if !valid_ifname(i) || i == "lo" => {
            return Err(format!(
                "{who}: iface = {i:?} is not a usable interface name"
            ))
        }
        _ => {}
    }
    if let Some(m) = p.mtu.filter(|m| !(MIN_MTU..=MAX_MTU).contains(m)) {
        return Err(format!("{who}: mtu = {m} is outside {MIN_MTU}..={MAX_MTU}"));
    }
    if let Some(v) = p.vlan.filter(|v| !(1..=4094).contains(v)) {
        return Err(format!("{who}: vlan = {v} is outside 1..=4094"));
    }
    if let Some(q) = p.queues.filter(|q| *q > MAX_QUEUES) {
        return Err(format!("{who}: queues = {q} is outside 0..={MAX_QUEUES}"));
    }
    check_masqueraded(p, &who)?;
    match (&p.mac, p.kind) {
        (Some(m), UplinkKind::Macvlan) => {
            abi::xenbus::parse_mac(m).map_err(|e| format!("{who}: mac = {m:?}: {e}"))?;
        }
        (Some(_), _) => return Err(format!("{who}: mac is for kind macvlan only")),
        (None, _) => {}
    }
    super::vxlan::check_keys(p).map_err(|e| format!("{who}: {e}"))?;
    if p.kind == UplinkKind::Wire {
        let ports = t
            .ports
            .iter()
            .filter(|q| q.kind == UplinkKind::Wire && q.driver == p.driver);
        if ports.count() > t.wires_of(&p.driver).count() {
            return Err(format!(
                "{who}: kind = \"wire\" needs a [wire] section with driver = {:?} (one per such [[port]]: the kth names its kth wire)",
                p.driver
            ));
        }
    }
    Ok(())
}

/// `subnet` (kinds nat and pasta, which masquerade it) and `publish`
/// (pasta only).
fn check_masqueraded(p: &PortConfig, who: &str) -> Result<(), String> {
    let natted = matches!(p.kind, UplinkKind::Nat | UplinkKind::Pasta);
    match (&p.subnet, natted) {
        (None, true) => {
            return Err(format!(
                "{who}: kind = {:?} needs subnet = \"10.78.0.1/24\" (the host side's address)",
                p.kind.as_str()
            ))
        }
        (Some(s), true) => drop(parse_subnet(s)?),
        (Some(_), false) => return Err(format!("{who}: subnet is for kinds nat and pasta only")),
        (None, false) => {}
    }
    match (&p.publish, p.kind) {
        (Some(list), UplinkKind::Pasta) => {
            for s in list {
                super::pasta::Publish::parse(s)
                    .map_err(|e| format!("{who}: publish {s:?}: {e}"))?;
            }
        }
        (Some(_), _) => return Err(format!("{who}: publish is for kind pasta only")),
        (None, _) => {}
    }
    Ok(())
}

/// The topology's `[[port]]` rules ([`crate::checks`]).
pub struct PortCheck;

impl Check for PortCheck {
    fn topology(&self, t: &Topology) -> Result<(), String> {
        t.check_ports()
    }
}

impl Topology {
    /// Checks the `[[port]]` sections, each and together: one port per
    /// host interface, distinct interface names within a driver domain.
    pub(crate) fn check_ports(&self) -> Result<(), String> {
        for p in &self.ports {
            check_port(p, self)?;
        }
        let mut ifaces = HashSet::new();
        for p in &self.ports {
            if let Some(i) = &p.iface {
                if !ifaces.insert(i.as_str()) {
                    return Err(format!(
                        "host interface {i:?} is the iface of two [[port]]s; each needs its own"
                    ));
                }
            }
        }
        super::vxlan::check_together(&self.ports)?;
        let mut pasta = HashSet::new();
        for p in self.ports.iter().filter(|p| p.kind == UplinkKind::Pasta) {
            if !pasta.insert(p.driver.as_str()) {
                return Err(format!(
                    "driver domain {:?} has two [[port]]s of kind \"pasta\"; one pasta namespace serves each driver domain",
                    p.driver
                ));
            }
        }
        let mut names = HashSet::new();
        for u in self.uplinks() {
            if !names.insert((u.driver.clone(), u.ifname.clone())) {
                return Err(format!(
                    "driver domain {:?} would have two uplinks named {:?} (a [wire] port and a [[port]] kind = \"wire\", or a host interface with that name)",
                    u.driver, u.ifname
                ));
            }
        }
        Ok(())
    }

    /// Every uplink: the `[[port]]`s, and the `[wire]` port unless a
    /// `[[port]] kind = "wire"` already names it.
    pub fn uplinks(&self) -> Vec<Uplink> {
        let ports = self.port_list();
        let mut out: Vec<Uplink> = Vec::new();
        for (p, k) in &ports {
            let n = out.iter().filter(|u| u.driver == p.driver).count();
            out.push(self.resolve(p, n, *k));
        }
        out
    }

    /// The `[[port]]`s, and first the port of each wire no `[[port]] kind
    /// = "wire"` names; each with its wire's number among its driver
    /// domain's wires (the kth `kind = "wire"` port of a driver domain
    /// names its kth wire), which names it `peth<k>`.
    fn port_list(&self) -> Vec<(PortConfig, usize)> {
        let mut named: Vec<(String, usize)> = Vec::new();
        let mut out: Vec<(PortConfig, usize)> = Vec::new();
        for p in &self.ports {
            let k = named.iter().filter(|(d, _)| *d == p.driver).count();
            if p.kind == UplinkKind::Wire {
                named.push((p.driver.clone(), k));
            }
            out.push((p.clone(), k));
        }
        let mut implicit = Vec::new();
        for (k, w) in self.wires.iter().enumerate() {
            let nth = self.wires[..k]
                .iter()
                .filter(|x| x.driver == w.driver)
                .count();
            if named.iter().any(|(d, i)| *d == w.driver && *i == nth) {
                continue;
            }
            implicit.push((wire_port(&w.driver, w.queues), nth));
        }
        implicit.extend(out);
        implicit
    }

    /// The interface name of driver domain `driver`'s uplink on `bridge`
    /// (what `mq = true` gives a vif as its `pdev`), without resolving the
    /// rest of the uplink.
    pub(crate) fn uplink_ifname_on(&self, driver: &str, bridge: &str) -> Option<String> {
        let ports = self.port_list();
        let mine = ports.iter().filter(|(p, _)| p.driver == driver);
        mine.enumerate()
            .find(|(_, (p, _))| {
                p.bridge.as_deref().unwrap_or(abi::xenbus::DEFAULT_BRIDGE) == bridge
            })
            .map(|(n, (p, k))| uplink_ifname(p, n, *k))
    }

    /// The uplinks of driver domain `driver`.
    pub fn uplinks_of(&self, driver: &str) -> Vec<Uplink> {
        let mut v = self.uplinks();
        v.retain(|u| u.driver == driver);
        v
    }

    /// Port `p`, the `n`th of its driver domain (and, of kind wire, its
    /// `wire`th wire port), with its interface names.
    fn resolve(&self, p: &PortConfig, n: usize, wire: usize) -> Uplink {
        let bridge = p
            .bridge
            .clone()
            .unwrap_or_else(|| abi::xenbus::DEFAULT_BRIDGE.to_string());
        let ifname = uplink_ifname(p, n, wire);
        let host_end = match p.kind {
            UplinkKind::Nat | UplinkKind::Route | UplinkKind::Pasta => {
                Some(format!("sn{n}-{}", p.driver))
            }
            UplinkKind::Vxlan => Some(self.underlay_end(&p.driver)),
            _ => None,
        };
        let behind = self.vifs().into_iter().filter(|v| {
            v.backend == p.driver
                && v.opts
                    .bridge
                    .as_deref()
                    .unwrap_or(abi::xenbus::DEFAULT_BRIDGE)
                    == bridge
        });
        let mut routes = Vec::new();
        for v in behind {
            if v.handle != 0 {
                continue;
            }
            let d = self.domain(&v.guest);
            for a in d.into_iter().flat_map(|d| [&d.address, &d.ipv6]).flatten() {
                if let Some(ip) = a.split('/').next().and_then(|s| s.parse().ok()) {
                    routes.push(ip);
                }
            }
        }
        Uplink {
            driver: p.driver.clone(),
            bridge,
            kind: p.kind,
            iface: p.iface.clone(),
            ifname,
            host_end,
            mtu: p.mtu,
            vlan: p.vlan,
            subnet: p.subnet.as_deref().and_then(|s| parse_subnet(s).ok()),
            mac: (p.kind == UplinkKind::Macvlan).then(|| {
                p.mac
                    .clone()
                    .unwrap_or_else(|| primary_mac(&p.driver, p.iface.as_deref().unwrap_or("")))
            }),
            routes: if p.kind == UplinkKind::Route {
                routes
            } else {
                Vec::new()
            },
            queues: p.queues,
            publish: p
                .publish
                .iter()
                .flatten()
                .filter_map(|s| super::pasta::Publish::parse(s).ok())
                .collect(),
            vxlan: (p.kind == UplinkKind::Vxlan)
                .then(|| super::vxlan::parse(p).ok())
                .flatten(),
            gro: self
                .port_gro
                .or(p.gro)
                .unwrap_or_else(|| self.gro_by_default(p)),
        }
    }

    /// Whether port `p` coalesces without being told: as a NIC's driver
    /// does, but for pasta's (pasta reads whole frames from its TAP), a
    /// `port_buffer` driver domain's (its frames stay MTU-sized), and one
    /// whose driver domain gives guests dedicated queues (`mq`: frames are
    /// placed straight into a guest's posted buffers, as the thesis's NIC
    /// placed them, which a coalesced frame would not fit).
    fn gro_by_default(&self, p: &PortConfig) -> bool {
        let sized = self
            .domain(&p.driver)
            .is_some_and(|d| d.port_buffer.is_some());
        let queued = self
            .vifs()
            .iter()
            .any(|v| v.backend == p.driver && self.domain(&v.guest).is_some_and(|d| d.mq));
        p.kind != UplinkKind::Pasta && !sized && !queued
    }

    /// The host end of driver domain `driver`'s underlay veth (its vxlan
    /// ports share it): named after the first of them.
    fn underlay_end(&self, driver: &str) -> String {
        let ports = self.port_list();
        let n = ports
            .iter()
            .filter(|(p, _)| p.driver == driver)
            .position(|(p, _)| p.kind == UplinkKind::Vxlan)
            .unwrap_or(0);
        format!("sn{n}-{driver}")
    }

    /// The MTU a vif on `bridge` of `driver` gets without `mtu` of its own
    /// (1450 behind a vxlan port that leaves the budget to the guests).
    pub(crate) fn default_vif_mtu(&self, driver: &str, bridge: Option<&str>) -> Option<u16> {
        let bridge = bridge.unwrap_or(abi::xenbus::DEFAULT_BRIDGE);
        super::vxlan::guest_mtu(&self.ports, driver, bridge)
    }
}

/// The interface name in the driver domain of port `p`, the `n`th of its
/// driver domain (a wire port: of its wires, the `wire`th).
fn uplink_ifname(p: &PortConfig, n: usize, wire: usize) -> String {
    match p.kind {
        UplinkKind::Wire => wire_ifname(wire),
        UplinkKind::Host => p.iface.clone().unwrap_or_default(),
        UplinkKind::Vxlan => match super::vxlan::parse(p) {
            Ok(x) => x.port_ifname(),
            Err(_) => format!("upl{n}"),
        },
        _ => format!("upl{n}"),
    }
}

/// A macvlan primary's default MAC: locally administered (IEEE 802's
/// U/L bit set, unicast), from an FNV-1a hash of the driver domain and the
/// host interface, so it is the same on every run and differs between
/// uplinks.
fn primary_mac(driver: &str, iface: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in driver.bytes().chain([b'/']).chain(iface.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4]
    )
}

/// The driver domain's end of its `k`th wire: `peth<k>` (the first is
/// [`PHYS_PORT`]).
pub fn wire_ifname(k: usize) -> String {
    if k == 0 {
        PHYS_PORT.to_string()
    } else {
        format!("peth{k}")
    }
}

fn wire_port(driver: &str, queues: Option<u16>) -> PortConfig {
    PortConfig {
        driver: driver.to_string(),
        bridge: None,
        kind: UplinkKind::Wire,
        iface: None,
        mtu: None,
        vlan: None,
        queues,
        subnet: None,
        publish: None,
        mac: None,
        vni: None,
        local: None,
        peers: None,
        group: None,
        evpn: None,
        asn: None,
        mtu_budget: None,
        gro: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[[domain]]\nname = \"g\"\nkind = \"guest\"\naddress = \"10.80.0.5/24\"\n";

    fn parse(ports: &str) -> Result<Topology, String> {
        Topology::parse(&format!("{BASE}{ports}"), "t").map_err(|e| e.to_string())
    }

    fn bad(ports: &str, needle: &str) {
        let e = parse(ports).unwrap_err();
        assert!(e.contains(needle), "{ports:?}: {e:?} lacks {needle:?}");
    }

    #[test]
    fn a_pasta_port_needs_a_subnet_takes_publish_and_comes_once_per_driver() {
        let one = "[[port]]\ndriver = \"drv\"\nkind = \"pasta\"\nsubnet = \"10.79.0.1/24\"\n";
        let t = parse(&format!("{one}publish = [\"tcp:8080:10.79.0.5:80\"]\n")).unwrap();
        assert_eq!(t.uplinks()[0].publish.len(), 1);
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"pasta\"\n",
            "needs subnet",
        );
        bad(
            &format!("{one}publish = [\"tcp:8080\"]\n"),
            "publish \"tcp:8080\"",
        );
        bad(&format!("{one}{one}"), "two [[port]]s of kind \"pasta\"");
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\npublish = [\"tcp:1:10.0.0.1:1\"]\n",
            "publish is for kind pasta only",
        );
    }

    #[test]
    fn ports_resolve_to_uplinks_with_their_names_and_store_values() {
        let t = parse(
            "[wire]\ndriver = \"drv\"\n\
             [[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"eth1\"\nmtu = 9000\n\
             [[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\nbridge = \"xenbr1\"\nvlan = 10\n\
             [[port]]\ndriver = \"drv\"\nkind = \"route\"\n",
        )
        .unwrap();
        let u = t.uplinks();
        let names: Vec<(&str, &str)> = u
            .iter()
            .map(|u| (u.kind.as_str(), u.ifname.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("wire", "peth0"),
                ("host", "eth1"),
                ("nat", "upl2"),
                ("route", "upl3")
            ]
        );
        assert_eq!(u[1].mtu, Some(9000));
        assert_eq!(u[2].store_value(), "bridge=xenbr1,vlan=10");
        assert_eq!(u[2].host_end.as_deref(), Some("sn2-drv"));
        assert_eq!(u[2].subnet, Some(("10.78.0.1".parse().unwrap(), 24)));
        assert_eq!(u[3].routes, ["10.80.0.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(u[0].store_value(), "bridge=xenbr0");
        // A macvlan's primary has a locally administered MAC of its own
        // unless given one; the guest behind it gets a member with its MAC.
        let t =
            parse("[[port]]\ndriver = \"drv\"\nkind = \"macvlan\"\niface = \"eth1\"\n").unwrap();
        let u = &t.uplinks()[0];
        let mac = u.mac.clone().unwrap();
        let parsed = abi::xenbus::parse_mac(&mac).unwrap();
        assert_eq!(
            parsed[0] & 3,
            2,
            "{mac} is not locally administered unicast"
        );
        assert_eq!(mac, primary_mac("drv", "eth1"));
        assert_ne!(mac, primary_mac("drv", "eth2"));
        let v = &t.vifs()[0];
        let m = u.member_for(v).unwrap();
        assert_eq!(
            (m.name.as_str(), m.mac.as_str()),
            ("upl0v0", "00:16:3e:5e:00:01")
        );
        assert_eq!(u.member_value(), "bridge=xenbr0,group=upl0");
        // Another bridge, another VLAN, or the primary's own MAC: no member.
        let mut other = v.clone();
        other.opts.bridge = Some("xenbr1".into());
        assert!(u.member_for(&other).is_none());
        let mut access = u.clone();
        access.vlan = Some(10);
        assert!(access.member_for(v).is_none());
        other = v.clone();
        other.opts.vlan = Some(10);
        assert!(access.member_for(&other).is_some());
        let mut same = u.clone();
        same.mac = Some(v.mac.to_uppercase());
        assert!(same.member_for(v).is_none());
    }

    #[test]
    fn bad_ports_get_clear_errors() {
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"host\"\n",
            "needs iface",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"macvlan\"\n",
            "needs iface",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\n",
            "needs subnet",
        );
        bad(
            "[[port]]\ndriver = \"g\"\nkind = \"route\"\n",
            "is not a driver domain",
        );
        bad(
            "[[port]]\ndriver = \"x\"\nkind = \"route\"\n",
            "names no domain",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"bogus\"\n",
            "unknown variant",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\ncolour = 1\n",
            "unknown field",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\niface = \"eth1\"\n",
            "iface is for kinds host and macvlan",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"lo\"\n",
            "not a usable interface name",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"a/b\"\n",
            "not a usable interface name",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\nmtu = 9001\n",
            "outside 68..=9000",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\nvlan = 4095\n",
            "outside 1..=4094",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.0/24\"\n",
            "host address",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1\"\n",
            "prefix of 8..=30",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\nsubnet = \"10.78.0.1/24\"\n",
            "for kinds nat and pasta only",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"wire\"\n",
            "needs a [wire] section",
        );
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\nbridge = \"a bridge\"\n",
            "not a valid bridge name",
        );
        bad("[[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"eth1\"\n[[port]]\ndriver = \"drv\"\nkind = \"macvlan\"\niface = \"eth1\"\n", "iface of two");
        bad("[wire]\ndriver = \"drv\"\n[[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"peth0\"\n", "two uplinks named \"peth0\"");
    }

    #[test]
    fn gro_is_on_as_a_nics_but_for_pasta_and_the_topology_says_last() {
        let ports = "[wire]\ndriver = \"drv\"\n\
             [[port]]\ndriver = \"drv\"\nkind = \"pasta\"\nsubnet = \"10.79.0.1/24\"\n\
             [[port]]\ndriver = \"drv\"\nkind = \"route\"\nbridge = \"b2\"\ngro = false\n";
        let gro = |t: &Topology| t.uplinks().iter().map(|u| u.gro).collect::<Vec<_>>();
        let mut t = parse(ports).unwrap();
        assert_eq!(gro(&t), [true, false, false]);
        t.apply_port_gro(true);
        assert_eq!(gro(&t), [true, true, true]);
        t.apply_port_gro(false);
        assert_eq!(gro(&t), [false, false, false]);
        let sized = parse(ports).map(|mut t| {
            t.domains[0].port_buffer = Some(crate::topology::port::PortBuffer::Mtu);
            gro(&t)
        });
        assert_eq!(sized.unwrap(), [false, false, false]);
        let queued = parse(ports).map(|mut t| {
            t.domains[1].mq = true;
            gro(&t)
        });
        assert_eq!(queued.unwrap(), [false, false, false]);
    }

    const VX: &str = "[[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\n";

    #[test]
    fn vxlan_ports_resolve_and_give_guests_room_for_the_encapsulation() {
        let t = parse(&format!(
            "[wire]\ndriver = \"drv\"\n{VX}vni = 100\nlocal = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\n\
             {VX}bridge = \"xenbr1\"\nvni = 200\nlocal = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\nevpn = true\nmtu_budget = \"underlay\"\n\
             {VX}bridge = \"xenbr2\"\nvni = 300\nlocal = \"10.200.1.3\"\ngroup = \"239.1.1.1\"\n"
        ))
        .unwrap();
        let u = t.uplinks();
        let names: Vec<&str> = u.iter().map(|u| u.ifname.as_str()).collect();
        assert_eq!(names, ["peth0", "vx100", "vxp200", "vx300"]);
        // One underlay per driver domain, named after its first vxlan port.
        for x in &u[1..] {
            assert_eq!(x.host_end.as_deref(), Some("sn1-drv"));
        }
        let (s, e, m) = (
            u[1].vxlan.clone().unwrap(),
            u[2].vxlan.clone().unwrap(),
            u[3].vxlan.clone().unwrap(),
        );
        assert_eq!(
            (s.mode, s.asn, s.guest_mtu(), s.underlay_mtu()),
            (super::super::vxlan::Mode::Static, 65000, 1450, 1500)
        );
        assert_eq!(
            (e.mode, e.guest_mtu(), e.underlay_mtu()),
            (super::super::vxlan::Mode::Evpn, 1500, 1550)
        );
        assert_eq!(
            (e.device(), e.kernel_bridge(), e.kernel_member()),
            ("vx200".into(), "kbr200".into(), "vxk200".into())
        );
        assert_eq!(
            (m.mode, m.group),
            (
                super::super::vxlan::Mode::Multicast,
                Some("239.1.1.1".parse().unwrap())
            )
        );
        // The kernel's devices: learning but with evpn, a group on the
        // underlay, room for the encapsulation unless the underlay pays.
        let args = |x: &super::super::vxlan::Vxlan| x.device_args().join(" ");
        assert_eq!(
            args(&s),
            "mtu 1450 type vxlan id 100 local 10.200.1.3 dstport 4789"
        );
        assert_eq!(
            args(&e),
            "mtu 1500 type vxlan id 200 local 10.200.1.3 dstport 4789 nolearning"
        );
        assert_eq!(
            args(&m),
            "mtu 1450 type vxlan id 300 local 10.200.1.3 dstport 4789 group 239.1.1.1 dev ul0"
        );
        // The guest on xenbr0 gets 1450 (budget "guests"); on xenbr1
        // ("underlay") the default; a vif's own mtu wins.
        assert_eq!(t.vifs()[0].opts.mtu, Some(1450));
        assert_eq!(t.default_vif_mtu("drv", Some("xenbr1")), None);
        let own = parse(&format!(
            "{VX}vni = 100\nlocal = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\n\
             [[domain]]\nname = \"g2\"\nkind = \"guest\"\nvif = [\"mtu=1400\"]\n"
        ))
        .unwrap();
        let mtus: Vec<Option<u16>> = own.vifs().iter().map(|v| v.opts.mtu).collect();
        assert_eq!(mtus, [Some(1450), Some(1400)]);
        // The evpn port publishes a guest's MAC on its bridge only.
        let mut v = t.vifs()[0].clone();
        assert_eq!(u[2].publishes(&v), None);
        v.opts.bridge = Some("xenbr1".into());
        assert_eq!(u[2].publishes(&v).as_deref(), Some("vxk200"));
        assert_eq!(u[1].publishes(&v), None, "a static port publishes nothing");
    }

    #[test]
    fn bad_vxlan_ports_get_clear_errors() {
        let ok = "vni = 100\nlocal = \"10.200.1.3\"\n";
        let peers = "peers = [\"10.200.2.3\"]\n";
        for (keys, needle) in [
            (
                "local = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\n",
                "needs vni",
            ),
            (
                "vni = 0\nlocal = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\n",
                "outside 1..=16777215",
            ),
            (
                "vni = 16777216\nlocal = \"10.200.1.3\"\npeers = [\"10.200.2.3\"]\n",
                "outside 1..=16777215",
            ),
            ("vni = 100\npeers = [\"10.200.2.3\"]\n", "needs local"),
            (
                "vni = 100\nlocal = \"10.200.1.300\"\npeers = [\"10.200.2.3\"]\n",
                "not an IPv4 address",
            ),
            (
                "vni = 100\nlocal = \"239.1.1.1\"\npeers = [\"10.200.2.3\"]\n",
                "not a usable IPv4 unicast",
            ),
            (
                "vni = 100\nlocal = \"0.0.0.0\"\npeers = [\"10.200.2.3\"]\n",
                "not a usable IPv4 unicast",
            ),
            (
                "vni = 100\nlocal = \"127.0.0.1\"\npeers = [\"10.200.2.3\"]\n",
                "not a usable IPv4 unicast",
            ),
            (
                "vni = 100\nlocal = \"255.255.255.255\"\npeers = [\"10.200.2.3\"]\n",
                "not a usable IPv4 unicast",
            ),
            (ok, "needs peers = [...] or group"),
            (&*format!("{ok}{peers}group = \"239.1.1.1\"\n"), "not both"),
            (
                &*format!("{ok}group = \"10.1.1.1\"\n"),
                "not a multicast address",
            ),
            (&*format!("{ok}evpn = true\n"), "evpn = true needs peers"),
            (
                &*format!("{ok}evpn = true\ngroup = \"239.1.1.1\"\n"),
                "not a group",
            ),
            (
                &*format!("{ok}{peers}asn = 65001\n"),
                "asn is for evpn = true only",
            ),
            (&*format!("{ok}{peers}evpn = true\nasn = 0\n"), "asn = 0"),
            (
                &*format!("{ok}peers = [\"10.200.1.3\"]\n"),
                "own local address",
            ),
            (
                &*format!("{ok}peers = [\"10.200.2.3\", \"10.200.2.3\"]\n"),
                "listed twice",
            ),
            (
                &*format!("{ok}peers = [\"224.0.0.5\"]\n"),
                "a peer = \"224.0.0.5\" is not a usable",
            ),
            (&*format!("{ok}{peers}mtu = 1500\n"), "not mtu"),
            (
                &*format!("{ok}{peers}mtu_budget = \"jumbo\"\n"),
                "unknown variant",
            ),
            (
                &*format!("{ok}{peers}iface = \"eth1\"\n"),
                "iface is for kinds host and macvlan",
            ),
        ] {
            bad(&format!("{VX}{keys}"), needle);
        }
        bad(
            "[[port]]\ndriver = \"drv\"\nkind = \"route\"\nvni = 100\n",
            "are for kind vxlan, not \"route\"",
        );
        let port = |bridge: &str, vni: u32, local: &str| {
            format!("{VX}bridge = \"{bridge}\"\nvni = {vni}\nlocal = \"{local}\"\n{peers}")
        };
        // A VNI on two ports: two bridges of one driver domain, or two
        // driver domains.
        bad(
            &format!(
                "{}{}",
                port("xenbr0", 100, "10.200.1.3"),
                port("xenbr1", 100, "10.200.1.3")
            ),
            "vni = 100 is on two vxlan [[port]]s",
        );
        let two_drivers = format!(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[[domain]]\nname = \"drv2\"\nkind = \"driver\"\n{}{}",
            port("xenbr0", 100, "10.200.1.3"),
            port("xenbr0", 100, "10.200.1.4").replace("\"drv\"", "\"drv2\"")
        );
        let e = Topology::parse(&two_drivers, "t").unwrap_err().to_string();
        assert!(e.contains("vni = 100 is on two vxlan [[port]]s"), "{e}");
        bad(
            &format!(
                "{}{}",
                port("xenbr0", 100, "10.200.1.3"),
                port("xenbr0", 200, "10.200.1.3")
            ),
            "has two vxlan [[port]]s",
        );
        bad(
            &format!(
                "{}{}",
                port("xenbr0", 100, "10.200.1.3"),
                port("xenbr1", 200, "10.200.1.4")
            ),
            "one VTEP address",
        );
        let evpn = |bridge: &str, vni: u32, asn: u32| {
            format!(
                "{}evpn = true\nasn = {asn}\n",
                port(bridge, vni, "10.200.1.3")
            )
        };
        bad(
            &format!(
                "{}{}",
                evpn("xenbr0", 100, 65000),
                evpn("xenbr1", 200, 65001)
            ),
            "one bgpd serves them",
        );
        assert!(parse(&format!(
            "{}{}",
            evpn("xenbr0", 100, 65001),
            evpn("xenbr1", 200, 65001)
        ))
        .is_ok());
    }
}
