//! Topology files (TOML): which domains exist, their memory and addresses, and
//! the external `wire` hosts, each joined to a driver domain's physical port.
//!
//! This is the model: a `[[domain]]` ([`domain`]), a resolved vif ([`vif`])
//! and the port settings ([`port`]). It names no feature; each feature (VMs,
//! placement, uplinks, port buffers) adds its rules as a [`Check`], and
//! `crate::checks` lists them for [`Topology::parse`].

use serde::Deserialize;
use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;

use crate::vifspec::VifSpec;
use domain::{check_cidr, check_domain_settings, check_kind_settings};
use port::{PortConfig, MAX_QUEUES};

pub mod domain;
pub mod hypercall_cpu;
pub mod port;
pub mod vif;

pub use domain::*;
pub use hypercall_cpu::HypercallCpu;
pub use vif::*;

/// The embedded default topology (`splitnet up` without `--config`).
pub const DEFAULT_TOML: &str = include_str!("../default.toml");

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// A label shown in status.
    #[serde(default = "default_name")]
    pub name: String,
    #[serde(rename = "domain", default)]
    pub domains: Vec<DomainConfig>,
    /// The wire hosts: `[wire]` (one) or `[[wire]]` (several, each with a
    /// name of its own; Menon 2005 Figure 3's one to three NICs). The
    /// first is [`Topology::wire`].
    #[serde(rename = "wire", default, deserialize_with = "one_or_many")]
    pub wires: Vec<WireConfig>,
    /// Driver domains' uplinks (`[[port]]`); `[wire]` is the shorthand
    /// for one of kind `wire`.
    #[serde(rename = "port", default)]
    pub ports: Vec<PortConfig>,
    /// GRO on every driver domain's ports, over each port's own `gro`
    /// (`up --port-gro`; the seed suites turn it off, as the papers'
    /// NICs coalesced nothing).
    #[serde(default)]
    pub port_gro: Option<bool>,
    /// Where hv serves each domain's hypercall batches: `"caller"` (the
    /// default), on the core the caller rang from, or `"any"`
    /// (`up --hypercall-cpu`). Read when hv starts and when an upgrade
    /// of hv resumes; `apply` leaves it as hv runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypercall_cpu: Option<HypercallCpu>,
}

fn default_name() -> String {
    "custom".into()
}

/// Guest number `i`'s MAC: the configured one or 00:16:3e:5e:<i+1 as two bytes>.
pub(crate) fn guest_mac(d: &DomainConfig, i: usize) -> String {
    let n = i + 1;
    d.mac
        .clone()
        .unwrap_or_else(|| format!("00:16:3e:5e:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff))
}

/// Guest number `i`'s MAC for its vif `devid` past the first:
/// 00:16:3e:<0x60 + devid>:<i+1 as two bytes>.
fn extra_mac(i: usize, devid: u32) -> String {
    let n = i + 1;
    format!(
        "00:16:3e:{:02x}:{:02x}:{:02x}",
        0x60 + devid,
        (n >> 8) & 0xff,
        n & 0xff
    )
}

/// Guest `d`'s vifspecs, parsed, each with its device number: a `devid`
/// given, else the lowest one free, in list order. The first is eth0, so
/// its devid is 0; `mac` and `backend` may not be set both on the guest
/// and in a vifspec.
fn guest_specs(d: &DomainConfig) -> Result<Vec<(u32, VifSpec)>, String> {
    let specs: Vec<VifSpec> = if d.vif.is_empty() {
        vec![VifSpec::default()]
    } else {
        d.vif
            .iter()
            .enumerate()
            .map(|(k, t)| {
                VifSpec::parse(t).map_err(|e| format!("domain {:?} vif[{k}] {t:?}: {e}", d.name))
            })
            .collect::<Result<_, _>>()?
    };
    if specs.len() > MAX_GUEST_VIFS as usize {
        return Err(format!(
            "domain {:?} lists {} vifs; a guest may have at most {MAX_GUEST_VIFS}",
            d.name,
            specs.len()
        ));
    }
    let conflict = |k: usize, key: &str| {
        format!(
            "domain {:?}: vif[{k}] sets {key}= and the domain sets {key} = ...; give it in one place",
            d.name
        )
    };
    if d.mac.is_some() && specs[0].mac.is_some() {
        return Err(conflict(0, "mac"));
    }
    if let Some(k) = specs.iter().position(|s| s.backend.is_some()) {
        if d.backend.is_some() {
            return Err(conflict(k, "backend"));
        }
    }
    let mut taken: Vec<u32> = specs.iter().filter_map(|s| s.devid).collect();
    if let Some(dup) = taken
        .iter()
        .enumerate()
        .find(|(k, x)| taken[..*k].contains(x))
    {
        return Err(format!(
            "domain {:?}: devid={} is given twice",
            d.name, dup.1
        ));
    }
    if specs[0].devid.is_some_and(|x| x != 0) {
        return Err(format!(
            "domain {:?}: vif[0] is eth0 and carries the domain's address: its devid must be 0",
            d.name
        ));
    }
    let mut out = Vec::new();
    for s in specs {
        let devid = match s.devid {
            Some(x) => x,
            None => {
                let x = (0..).find(|x| !taken.contains(x)).unwrap_or(0);
                taken.push(x);
                x
            }
        };
        out.push((devid, s));
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WireConfig {
    #[serde(default = "default_wire")]
    pub name: String,
    /// The driver domain whose physical port leads to this host.
    pub driver: String,
    pub address: Option<String>,
    pub ipv6: Option<String>,
    /// Shape the link to this rate in both directions (`tc` tbf on both
    /// ends), e.g. "100mbit" for the seed papers' 100 Mb/s Ethernet.
    pub rate: Option<LinkRate>,
    /// Dedicated receive queues its port offers (0..=64; default 8).
    pub queues: Option<u16>,
}

fn default_wire() -> String {
    "wire".into()
}

/// `wire` as a table (`[wire]`, one host) or an array of tables
/// (`[[wire]]`), read with each form's own error messages.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<WireConfig>, D::Error> {
    struct Wires;
    impl<'de> serde::de::Visitor<'de> for Wires {
        type Value = Vec<WireConfig>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a [wire] table or [[wire]] tables")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
            let one = WireConfig::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
            Ok(vec![one])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, s: A) -> Result<Self::Value, A::Error> {
            Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(s))
        }
    }
    d.deserialize_any(Wires)
}

/// A link rate in bits per second, written as tc does: `100mbit`, `1gbit`,
/// `512kbit`, `2000000bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkRate(pub u64);

impl<'de> Deserialize<'de> for LinkRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for LinkRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl LinkRate {
    /// Slowest and fastest rates accepted.
    const RANGE: std::ops::RangeInclusive<u64> = 8_000..=400_000_000_000;
}

impl std::str::FromStr for LinkRate {
    type Err = String;
    fn from_str(s: &str) -> Result<LinkRate, String> {
        let t = s.trim().to_ascii_lowercase();
        let (num, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
            .into_iter()
            .find_map(|(u, k)| t.strip_suffix(u).map(|n| (n.trim().to_string(), k)))
            .ok_or_else(|| {
                format!("link rate {s:?} needs a unit: bit, kbit, mbit or gbit (e.g. \"100mbit\")")
            })?;
        let n: f64 = num
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite() && *n > 0.0)
            .ok_or_else(|| format!("link rate {s:?} is not a positive number"))?;
        let bps = (n * scale).round() as u64;
        if !LinkRate::RANGE.contains(&bps) {
            return Err(format!("link rate {s:?} is outside 8kbit..400gbit"));
        }
        Ok(LinkRate(bps))
    }
}

impl std::fmt::Display for LinkRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            b if b % 1_000_000_000 == 0 => write!(f, "{}gbit", b / 1_000_000_000),
            b if b % 1_000_000 == 0 => write!(f, "{}mbit", b / 1_000_000),
            b if b % 1_000 == 0 => write!(f, "{}kbit", b / 1_000),
            b => write!(f, "{b}bit"),
        }
    }
}

/// A configuration that cannot be used, with where and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Syntax { origin: String, message: String },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// Which transfer modes each grant mechanism can carry.
/// `max_event_channels`, if set, must hold the channels of the domain's
/// `vifs` (those it serves or owns).
fn check_event_channels(d: &DomainConfig, vifs: u32) -> Result<(), String> {
    let Some(max) = d.max_event_channels else {
        return Ok(());
    };
    if max == 0 || max > MAX_EVENT_CHANNELS {
        return Err(format!(
            "domain {:?}: max_event_channels must be 1..={MAX_EVENT_CHANNELS}",
            d.name
        ));
    }
    let need = vifs * EVENT_CHANNELS_PER_VIF;
    if max < need {
        return Err(format!(
            "domain {:?} has {vifs} vifs, which take {need} event channels, but max_event_channels = {max}: raise it to at least {need}, or leave it out to fit every vif the domain can hold",
            d.name
        ));
    }
    Ok(())
}

/// Whether a domain's quotas and memory hold what the topology's `vifs`
/// ask of it: event channels for the vifs it serves or owns, and memory
/// for a driver domain's vifs, an emulated NIC or a virtual NIC.
fn check_domain_sizes(d: &DomainConfig, vifs: &[VifConfig]) -> Result<(), String> {
    let n = vifs.iter().filter(|v| v.backend == d.name).count() as u32;
    check_event_channels(
        d,
        n + vifs.iter().filter(|v| v.guest == d.name).count() as u32,
    )?;
    if d.kind == DomainKind::Driver
        && d.memory_frames < DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * n
    {
        return Err(format!(
            "domain {:?} serves {n} vifs and needs memory_frames >= {}",
            d.name,
            DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * n
        ));
    }
    if d.kind == DomainKind::Guest && d.nic != Nic::Vif && d.memory_frames < HOSTED_MIN_FRAMES {
        return Err(format!(
            "domain {:?} has an emulated NIC (its driver's rings and buffers in its memory) and needs memory_frames >= {HOSTED_MIN_FRAMES}",
            d.name
        ));
    }
    let handles = vifs
        .iter()
        .filter(|v| v.guest == d.name)
        .map(|v| v.handle + 1)
        .max()
        .unwrap_or(0);
    if d.memory_frames < handles * GUEST_MIN_FRAMES {
        return Err(format!(
            "domain {:?} has virtual NICs up to eth{} and needs memory_frames >= {} ({GUEST_MIN_FRAMES} per vif)",
            d.name,
            handles - 1,
            handles * GUEST_MIN_FRAMES
        ));
    }
    Ok(())
}

/// A feature's rules over a topology, beyond the model's own. Each feature
/// (VMs, placement, uplinks, port buffers) implements the hooks it needs;
/// `crate::checks` lists them, so the model names none of the features.
/// [`Topology::parse_with`] runs each hook of every check, in list order,
/// at the point its doc gives.
pub trait Check {
    /// The file's text, after it parsed and before anything is filled in
    /// (what the typed parse cannot see, such as keys a kind does not take).
    fn text(&self, _text: &str) -> Result<(), String> {
        Ok(())
    }
    /// One domain, after its name and before the model's checks of it.
    fn domain(&self, _d: &DomainConfig) -> Result<(), String> {
        Ok(())
    }
    /// A domain hv runs (not a VM), after the model has checked its
    /// settings' ranges and before it checks them against its kind.
    fn settings(&self, _d: &DomainConfig) -> Result<(), String> {
        Ok(())
    }
    /// MACs beyond the vifs' (already in `taken`): each must be new.
    fn macs(&self, _t: &Topology, _taken: &mut HashSet<String>) -> Result<(), String> {
        Ok(())
    }
    /// The whole topology, after the model's own checks.
    fn topology(&self, _t: &Topology) -> Result<(), String> {
        Ok(())
    }
}

impl Topology {
    /// Reads and validates a file with `checks`.
    pub fn load_with(path: &Path, checks: &[&dyn Check]) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Topology::parse_with(&text, &path.display().to_string(), checks)
    }

    /// Parses TOML text and validates it with the model's checks and
    /// `checks`; `origin` names it in errors.
    pub fn parse_with(
        text: &str,
        origin: &str,
        checks: &[&dyn Check],
    ) -> Result<Topology, TopologyError> {
        let mut t: Topology = toml::from_str(text).map_err(|e| TopologyError::Syntax {
            origin: origin.into(),
            message: e.to_string().trim_end().into(),
        })?;
        let invalid = |message| TopologyError::Invalid {
            origin: origin.into(),
            message,
        };
        for c in checks {
            c.text(text).map_err(invalid)?;
        }
        t.fill_memory();
        t.validate(checks).map_err(invalid)?;
        Ok(t)
    }

    /// Every error of the topology, one per line (an apply file with
    /// errors is refused whole, each named).
    fn validate(&self, checks: &[&dyn Check]) -> Result<(), String> {
        let mut errors: Vec<String> = Vec::new();
        let mut note = |r: Result<(), String>| {
            if let Err(e) = r {
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
        };
        if self.domains.is_empty() {
            note(Err(
                "no [[domain]] sections: a topology needs at least one domain".into(),
            ));
        }
        let mut seen = HashSet::new();
        for d in &self.domains {
            note(check_name("domain", &d.name));
            if !seen.insert(d.name.as_str()) {
                note(Err(format!("domain name {:?} is used twice", d.name)));
            }
            note(self.check_domain(d, checks));
        }
        match self.vifs_unchecked() {
            Ok(vifs) => {
                for d in &self.domains {
                    note(check_domain_sizes(d, &vifs));
                }
                note(self.check_macs(&vifs, checks));
            }
            Err(e) => note(Err(e)),
        }
        for w in &self.wires {
            note(self.check_wire(w, &seen));
        }
        note(self.check_wires_together());
        for c in checks {
            note(c.topology(self));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    /// Domain `d`'s own settings, by the model's checks and `checks`.
    fn check_domain(&self, d: &DomainConfig, checks: &[&dyn Check]) -> Result<(), String> {
        for c in checks {
            c.domain(d)?;
        }
        if d.kind == DomainKind::Vm {
            return self.backend_of(d).map(|_| ());
        }
        check_domain_settings(d)?;
        for c in checks {
            c.settings(d)?;
        }
        check_kind_settings(d)
    }

    /// Every MAC is used once, vifs' and the checks' own.
    fn check_macs(&self, vifs: &[VifConfig], checks: &[&dyn Check]) -> Result<(), String> {
        let mut macs = HashSet::new();
        for v in vifs {
            if !macs.insert(v.mac.to_ascii_lowercase()) {
                return Err(format!(
                    "MAC {} is used twice (again by vif {} of {:?})",
                    v.mac, v.handle, v.guest
                ));
            }
        }
        for c in checks {
            c.macs(self, &mut macs)?;
        }
        Ok(())
    }

    /// The wire host: a name of its own, a driver domain that exists and is
    /// one, and well-formed addresses.
    fn check_wire(&self, w: &WireConfig, domain_names: &HashSet<&str>) -> Result<(), String> {
        check_name("wire", &w.name)?;
        if domain_names.contains(w.name.as_str()) {
            return Err(format!(
                "wire host {:?} has the same name as a domain",
                w.name
            ));
        }
        match self.domains.iter().find(|d| d.name == w.driver) {
            Some(d) if d.kind == DomainKind::Driver => {}
            Some(_) => {
                return Err(format!(
                    "wire.driver = {:?} is not a driver domain",
                    w.driver
                ))
            }
            None => return Err(format!("wire.driver = {:?} names no domain", w.driver)),
        }
        if let Some(q) = w.queues.filter(|q| *q > MAX_QUEUES) {
            return Err(format!(
                "[wire]: queues = {q} is outside 0..={}",
                MAX_QUEUES
            ));
        }
        check_cidr("wire address", &w.address, false)?;
        check_cidr("wire ipv6", &w.ipv6, true)?;
        Ok(())
    }

    /// The wires together: distinct names (a second one must be named),
    /// and no address given twice, to a wire host or a domain.
    fn check_wires_together(&self) -> Result<(), String> {
        let mut names = HashSet::new();
        for w in &self.wires {
            if !names.insert(w.name.as_str()) {
                return Err(format!(
                    "wire name {:?} is used twice: give each [[wire]] a name of its own (e.g. name = \"wire2\")",
                    w.name
                ));
            }
        }
        let mut seen: Vec<(IpAddr, String)> = Vec::new();
        let domains = self
            .domains
            .iter()
            .map(|d| (format!("domain {:?}", d.name), [&d.address, &d.ipv6]));
        let wires = self
            .wires
            .iter()
            .map(|w| (format!("wire {:?}", w.name), [&w.address, &w.ipv6]));
        for (who, addrs) in domains.chain(wires) {
            for a in addrs.into_iter().flatten() {
                let Some(ip) = a.split('/').next().and_then(|i| i.parse::<IpAddr>().ok()) else {
                    continue;
                };
                if let Some((_, other)) = seen.iter().find(|(x, _)| *x == ip) {
                    return Err(format!(
                        "address {ip} is given twice: to {other} and to {who}"
                    ));
                }
                seen.push((ip, who.clone()));
            }
        }
        Ok(())
    }

    /// The first wire host (the `[wire]` of older topologies), if any.
    pub fn wire(&self) -> Option<&WireConfig> {
        self.wires.first()
    }

    /// The wires joined to driver domain `driver`, in order: the `k`th is
    /// its port `peth<k>`.
    pub fn wires_of<'a>(&'a self, driver: &'a str) -> impl Iterator<Item = &'a WireConfig> + 'a {
        self.wires.iter().filter(move |w| w.driver == driver)
    }

    /// Wire `w`'s place among its driver domain's wires: its port there is
    /// [`crate::uplink::config::wire_ifname`] of it (`peth<k>`).
    pub fn wire_index(&self, w: &WireConfig) -> usize {
        self.wires_of(&w.driver)
            .position(|x| x.name == w.name)
            .unwrap_or(0)
    }

    /// Descriptors hv holds for this topology, with room to spare: about
    /// 15 per domain (control socket, doorbells, memory) and 10 per vif
    /// (two event channels of 5); 25 per guest measured with 256 guests.
    pub fn descriptors_needed(&self) -> u64 {
        64 + 16 * self.domains.len() as u64 + 10 * self.vifs().len() as u64
    }

    /// Every guest's virtual NIC.
    pub fn vifs(&self) -> Vec<VifConfig> {
        self.vifs_unchecked().unwrap_or_default()
    }

    /// Every guest with an emulated NIC (`nic = "hosted"` or `"hvm"`).
    pub fn emulated_nics(&self) -> Vec<EmulatedNic> {
        let mut out = Vec::new();
        for (i, d) in self
            .domains
            .iter()
            .filter(|d| d.kind == DomainKind::Guest)
            .enumerate()
        {
            if !matches!(d.nic, Nic::Hosted | Nic::Hvm) {
                continue;
            }
            let Ok(backend) = self.backend_of(d) else {
                continue;
            };
            out.push(EmulatedNic {
                guest: d.name.clone(),
                kind: d.nic,
                backend,
                mac: guest_mac(d, i),
                ports_in_vmm: d.hosted_ports_in_vmm,
                send_combining: d.hosted_send_combining,
                irq_bitvector: d.hosted_irq_bitvector,
                hvm_pic: d.hvm_pic.unwrap_or_default(),
                hvm_poll_us: (d.hvm_rx == Some(HvmRx::Poll))
                    .then(|| d.hvm_poll_us.unwrap_or(DEFAULT_HVM_POLL_US)),
                hvm_wake: d.hvm_wake.unwrap_or_default(),
                hvm_timer_hz: d.hvm_timer_hz.unwrap_or(0),
            });
        }
        out
    }

    /// The uplink `mq = true` gives a vif of guest `d` on `backend`: the
    /// one on the vif's bridge. A vif with a VLAN, or on a bridge with no
    /// uplink, cannot have one (the queue's frames would skip the bridge).
    fn mq_pdev(&self, d: &DomainConfig, backend: &str, o: &VifOptions) -> Result<String, String> {
        let bridge = o.bridge.as_deref().unwrap_or(abi::xenbus::DEFAULT_BRIDGE);
        if o.vlan.is_some() {
            return Err(format!(
                "domain {:?}: mq = true gives each vif a queue of its own, which a vif with vlan= cannot have (it needs the bridge to tag its frames)",
                d.name
            ));
        }
        self.uplink_ifname_on(backend, bridge).ok_or_else(|| {
            format!(
                "domain {:?}: mq = true needs an uplink on bridge {bridge:?} of driver domain {backend:?} (a [wire] or [[port]])",
                d.name
            )
        })
    }

    /// The driver domain serving guest (or VM) `d`.
    pub(crate) fn backend_of(&self, d: &DomainConfig) -> Result<String, String> {
        let drivers: Vec<&str> = self
            .domains
            .iter()
            .filter(|d| d.kind == DomainKind::Driver)
            .map(|d| d.name.as_str())
            .collect();
        match (&d.backend, drivers.as_slice()) {
            (Some(b), _) if drivers.contains(&b.as_str()) => Ok(b.clone()),
            (Some(b), _) => Err(format!(
                "domain {:?}: backend = {b:?} is not a driver domain",
                d.name
            )),
            (None, [only]) => Ok(only.to_string()),
            (None, []) => Err(format!("domain {:?}: no driver domain", d.name)),
            (None, _) => Err(format!(
                "domain {:?}: several driver domains exist; name one with backend = ...",
                d.name
            )),
        }
    }

    fn vifs_unchecked(&self) -> Result<Vec<VifConfig>, String> {
        let any_driver = self.domains.iter().any(|d| d.kind == DomainKind::Driver);
        let mut out: Vec<VifConfig> = Vec::new();
        for (i, d) in self
            .domains
            .iter()
            .filter(|d| d.kind == DomainKind::Guest)
            .enumerate()
        {
            if !any_driver && d.backend.is_none() {
                continue;
            }
            if d.nic != Nic::Vif {
                self.backend_of(d)?;
                if !d.vif.is_empty() {
                    return Err(format!(
                        "domain {:?}: vif = [...] lists virtual NICs; nic = {:?} has one of its own",
                        d.name,
                        d.nic.as_str()
                    ));
                }
                continue;
            }
            for (pos, (devid, spec)) in guest_specs(d)?.into_iter().enumerate() {
                let backend = match spec.backend {
                    Some(b) => self.driver_named(d, &b)?,
                    None => self.backend_of(d)?,
                };
                let mac = match (spec.mac, pos) {
                    (Some(m), _) => m,
                    (None, 0) => guest_mac(d, i),
                    (None, _) => extra_mac(i, devid),
                };
                let index = out.iter().filter(|v| v.backend == backend).count();
                let mut opts = spec.opts;
                if opts.mtu.is_none() {
                    opts.mtu = self.default_vif_mtu(&backend, opts.bridge.as_deref());
                }
                if d.mq && opts.pdev.is_none() {
                    opts.pdev = Some(self.mq_pdev(d, &backend, &opts)?);
                }
                out.push(VifConfig {
                    guest: d.name.clone(),
                    handle: devid,
                    mac,
                    backend,
                    rx_mode: d.rx_mode,
                    tx_mode: d.tx_mode,
                    grants: d.grants,
                    offload: d.offload,
                    lro: d.lro_at(),
                    prefetch: d.prefetch,
                    rx_buffer: d.rx_buffer,
                    index,
                    opts,
                });
            }
        }
        Ok(out)
    }

    /// Driver domain `name`, named by a vifspec's `backend` on guest `d`.
    fn driver_named(&self, d: &DomainConfig, name: &str) -> Result<String, String> {
        match self.domain(name) {
            Some(x) if x.kind == DomainKind::Driver => Ok(name.to_string()),
            _ => Err(format!(
                "domain {:?}: vif backend={name} is not a driver domain",
                d.name
            )),
        }
    }

    /// Fills in the `memory_frames` left out: 2048 frames, or what the
    /// domain's vifs need (a guest [`GUEST_MIN_FRAMES`] per handle up to
    /// its highest, a driver domain its staging per vif served).
    fn fill_memory(&mut self) {
        let vifs = self.vifs_unchecked().unwrap_or_default();
        for d in self.domains.iter_mut().filter(|d| d.memory_frames == 0) {
            let need = match d.kind {
                DomainKind::Guest => {
                    let top = vifs
                        .iter()
                        .filter(|v| v.guest == d.name)
                        .map(|v| v.handle + 1);
                    top.max().unwrap_or(0) * GUEST_MIN_FRAMES
                }
                DomainKind::Driver => {
                    let n = vifs.iter().filter(|v| v.backend == d.name).count() as u32;
                    DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * n
                }
                // hv gives a VM nothing: its memory is its own VMM's.
                DomainKind::Vm => continue,
            };
            let frames = need.max(DEFAULT_FRAMES);
            d.memory_frames = if d.hugepages {
                frames.next_multiple_of(512)
            } else {
                frames
            };
        }
    }

    /// Sets every vif to a preset's modes.
    pub fn apply_preset(&mut self, p: Preset) {
        for d in self
            .domains
            .iter_mut()
            .filter(|d| d.kind == DomainKind::Guest)
        {
            let (rx, tx, g, off) = match p {
                Preset::Default => (RxMode::Copy, TxMode::Gather, Grants::Ngm, true),
                Preset::HvCopy => (RxMode::Copy, TxMode::Copy, Grants::HvCopy, true),
                Preset::Baseline => (RxMode::Flip, TxMode::Map, Grants::HvCopy, false),
            };
            d.rx_mode = rx;
            d.tx_mode = tx;
            d.grants = g;
            d.offload = Offloads::from_bool(off);
            // The default takes LRO in netfront (faster in `bench ram`);
            // the seed configurations had none.
            if d.nic == Nic::Vif {
                let lro = if p == Preset::Default { "guest" } else { "off" };
                d.lro = Some(lro.to_string());
            }
        }
    }

    /// Sets every domain's spin before sleeping (`DomainConfig::spin_us`).
    pub fn apply_spin(&mut self, us: u32) {
        for d in &mut self.domains {
            d.spin_us = us;
        }
    }

    /// Shapes every wire link to `rate` (`up --link-rate`).
    /// GRO on (or off on) every port (`up --port-gro`).
    pub fn apply_port_gro(&mut self, on: bool) {
        self.port_gro = Some(on);
    }

    pub fn apply_link_rate(&mut self, rate: LinkRate) -> Result<(), String> {
        if self.wires.is_empty() {
            return Err(format!(
                "topology {:?} has no wire host whose link could be shaped",
                self.name
            ));
        }
        for w in &mut self.wires {
            w.rate = Some(rate);
        }
        Ok(())
    }

    /// Looks up a domain by name.
    pub fn domain(&self, name: &str) -> Option<&DomainConfig> {
        self.domains.iter().find(|d| d.name == name)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn link_rates_read_as_tc_writes_them() {
        for (text, bps, shown) in [
            ("100mbit", 100_000_000, "100mbit"),
            ("1gbit", 1_000_000_000, "1gbit"),
            ("1.5Mbit", 1_500_000, "1500kbit"),
            ("64kbit", 64_000, "64kbit"),
            ("2000001bit", 2_000_001, "2000001bit"),
        ] {
            let r: LinkRate = text.parse().unwrap();
            assert_eq!((r.0, r.to_string()), (bps, shown.to_string()), "{text}");
        }
        for bad in [
            "100", "mbit", "-1mbit", "0mbit", "1kbit", "1tbit", "fastmbit", "500gbit",
        ] {
            assert!(bad.parse::<LinkRate>().is_err(), "{bad} accepted");
        }
        let t = Topology::parse(
            "[[domain]]\nname = \"d\"\nkind = \"driver\"\n[wire]\ndriver = \"d\"\nrate = \"100mbit\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(t.wire().unwrap().rate, Some(LinkRate(100_000_000)));
        let e = Topology::parse(
            "[[domain]]\nname = \"d\"\nkind = \"driver\"\n[wire]\ndriver = \"d\"\nrate = \"fast\"\n",
            "t.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("needs a unit"), "{e}");
    }

    use super::*;

    const DRV: &str = "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n";

    #[test]
    fn mq_gives_each_vif_its_bridges_uplink_and_refuses_what_cannot_have_one() {
        let wire = "[wire]\ndriver = \"drv\"\nqueues = 4\n";
        let g = |extra: &str| {
            format!("{DRV}[[domain]]\nname = \"g\"\nkind = \"guest\"\nmq = true\n{extra}\n{wire}")
        };
        let t = Topology::parse(&g(""), "t.toml").unwrap();
        assert_eq!(t.vifs()[0].opts.pdev.as_deref(), Some("peth0"));
        assert_eq!(t.uplinks()[0].store_value(), "bridge=xenbr0,queues=4");
        // A vifspec's pdev= stays as given; without mq, nothing.
        let t = Topology::parse(&g("vif = [\"pdev=upl9\"]"), "t.toml").unwrap();
        assert_eq!(t.vifs()[0].opts.pdev.as_deref(), Some("upl9"));
        let plain = format!("{DRV}[[domain]]\nname = \"g\"\nkind = \"guest\"\n{wire}");
        assert_eq!(
            Topology::parse(&plain, "t").unwrap().vifs()[0].opts.pdev,
            None
        );
        for (extra, needle) in [
            ("vif = [\"vlan=10\"]", "vlan= cannot have"),
            (
                "vif = [\"bridge=xenbr1\"]",
                "needs an uplink on bridge \"xenbr1\"",
            ),
            ("mq = 1", "mq"),
        ] {
            let text = g(extra).replace("mq = true\nmq = 1", "mq = 1");
            let e = Topology::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("t.toml"), "{extra}: {e}");
        }
        let e = Topology::parse(&g("").replace("queues = 4", "queues = 65"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("queues = 65 is outside 0..=64"), "{e}");
        let port = format!("{DRV}[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\nqueues = 99\n");
        let e = Topology::parse(&port, "t.toml").unwrap_err().to_string();
        assert!(e.contains("queues = 99 is outside 0..=64"), "{e}");
    }

    #[test]
    fn a_hosted_guest_has_no_vif_and_keeps_its_mac() {
        let t = Topology::parse(
            &format!(
                "{DRV}[[domain]]\nname = \"g1\"\nkind = \"guest\"\nnic = \"hosted\"\nhosted_irq_bitvector = false\n\
                 [[domain]]\nname = \"g2\"\nkind = \"guest\"\n"
            ),
            "t",
        )
        .unwrap();
        let vifs = t.vifs();
        assert_eq!(vifs.len(), 1);
        assert_eq!(
            (vifs[0].guest.as_str(), vifs[0].mac.as_str()),
            ("g2", "00:16:3e:5e:00:02")
        );
        let e = t.emulated_nics();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].guest.as_str(), e[0].backend.as_str()), ("g1", "drv"));
        assert_eq!(e[0].mac, "00:16:3e:5e:00:01");
        assert!(e[0].ports_in_vmm && e[0].send_combining && !e[0].irq_bitvector);
        assert_eq!(e[0].host_ifname(), "vn-g1");
    }

    #[test]
    fn emulated_nic_settings_are_checked() {
        let guest = |extra: &str| {
            Topology::parse(
                &format!("{DRV}[[domain]]\nname = \"g\"\nkind = \"guest\"\n{extra}"),
                "t.toml",
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert!(guest("nic = \"hosted\"\n").is_ok());
        let e = guest("nic = \"hosted\"\nhosted_ports_in_vmm = false\n").unwrap_err();
        assert!(
            e.contains("hosted_send_combining") && e.contains("t.toml"),
            "{e}"
        );
        assert!(guest(
            "nic = \"hosted\"\nhosted_ports_in_vmm = false\nhosted_send_combining = false\n"
        )
        .is_ok());
        let e = guest("hosted_irq_bitvector = false\n").unwrap_err();
        assert!(
            e.contains("nic = \\\"hosted\\\" only") || e.contains("only"),
            "{e}"
        );
        assert!(guest("nic = \"hvm\"\n").is_ok());
        assert!(
            guest("nic = \"hvm\"\nhvm_pic = \"dm\"\nhvm_rx = \"poll\"\nhvm_poll_us = 2000\n")
                .is_ok()
        );
        let e = guest("nic = \"hvm\"\nhvm_poll_us = 2000\n").unwrap_err();
        assert!(e.contains("polling period"), "{e}");
        let e = guest("nic = \"hvm\"\nhvm_rx = \"poll\"\nhvm_poll_us = 5\n").unwrap_err();
        assert!(e.contains("hvm_poll_us must be 100..=1000000"), "{e}");
        let e = guest("nic = \"hosted\"\nhvm_pic = \"dm\"\n").unwrap_err();
        assert!(e.contains("hvm_* keys"), "{e}");
        let e = guest("nic = \"hvm\"\nhvm_pic = \"qemu\"\n").unwrap_err();
        assert!(e.contains("hvm_pic"), "{e}");
        assert!(guest("nic = \"hvm\"\nhvm_wake = \"upcall\"\n").is_ok());
        let e = guest("nic = \"hvm\"\nhvm_wake = \"twice\"\n").unwrap_err();
        assert!(e.contains("hvm_wake"), "{e}");
        assert!(guest("nic = \"hvm\"\nhvm_timer_hz = 1000\n").is_ok());
        let e = guest("nic = \"hvm\"\nhvm_timer_hz = 0\n").unwrap_err();
        assert!(e.contains("hvm_timer_hz must be 1..=1000"), "{e}");
        let e = guest("hvm_wake = \"upcall\"\n").unwrap_err();
        assert!(e.contains("hvm_* keys"), "{e}");
        let e = guest("nic = \"lance\"\n").unwrap_err();
        assert!(e.contains("hosted"), "{e}");
        let e = guest("nic = \"hosted\"\nmemory_frames = 16\n").unwrap_err();
        assert!(e.contains("memory_frames >= 64"), "{e}");
    }

    #[test]
    fn restart_policies_default_by_kind_and_parse() {
        let t = Topology::default_topology();
        let policy = |n: &str| {
            t.domains
                .iter()
                .find(|d| d.name == n)
                .unwrap()
                .restart_policy()
        };
        assert_eq!(policy("drv"), Restart::OnCrash);
        assert_eq!(policy("guest1"), Restart::Never);
        let t = Topology::parse(
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\nrestart = \"always\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(t.domains[0].restart_policy(), Restart::Always);
        let e = Topology::parse(
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\nrestart = \"sometimes\"\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("on-crash"), "{e}");
        use std::os::unix::process::ExitStatusExt;
        let (ok, failed, killed) = (
            std::process::ExitStatus::from_raw(0),
            std::process::ExitStatus::from_raw(1 << 8),
            std::process::ExitStatus::from_raw(9),
        );
        assert!(!Restart::OnCrash.applies(ok));
        assert!(Restart::OnCrash.applies(failed) && Restart::OnCrash.applies(killed));
        assert!(Restart::Always.applies(ok) && !Restart::Never.applies(killed));
    }

    #[test]
    fn default_topology_is_valid() {
        let t = Topology::default_topology();
        assert_eq!(t.domains.len(), 3);
        assert_eq!(t.wire().unwrap().driver, "drv");
        let v = t.vifs();
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].guest.as_str(), v[0].backend.as_str(), v[0].index),
            ("guest1", "drv", 0)
        );
        assert_eq!(v[1].mac, "00:16:3e:5e:00:02");
        assert_eq!(
            (v[1].rx_mode, v[1].tx_mode, v[1].grants, v[1].offload),
            (RxMode::Copy, TxMode::Gather, Grants::Ngm, Offloads::ALL)
        );
        let mut h = t.clone();
        h.apply_preset(Preset::HvCopy);
        assert_eq!(
            (h.vifs()[0].tx_mode, h.vifs()[0].grants),
            (TxMode::Copy, Grants::HvCopy)
        );
        let mut b = t.clone();
        b.apply_preset(Preset::Baseline);
        assert_eq!(
            (
                b.vifs()[0].rx_mode,
                b.vifs()[0].tx_mode,
                b.vifs()[0].offload
            ),
            (RxMode::Flip, TxMode::Map, Offloads::NONE)
        );
        // LRO in netfront is the default preset's, and no seed configuration's.
        assert_eq!(v[0].lro, LroAt::Guest);
        assert_eq!(h.vifs()[0].lro, LroAt::Off);
        assert_eq!(b.vifs()[0].lro, LroAt::Off);
        let mut d = t.clone();
        d.apply_preset(Preset::Default);
        assert_eq!(d.vifs()[0].lro, LroAt::Guest);
    }

    /// A driver domain `drv` with memory for `n` vifs, serving `n` guests.
    fn guests(n: usize, drv_extra: &str) -> String {
        let mut t = format!(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = {}\n{drv_extra}",
            DRIVER_BASE_FRAMES + DRIVER_FRAMES_PER_VIF * n as u32
        );
        for i in 1..=n {
            t += &format!("[[domain]]\nname = \"g{i}\"\nkind = \"guest\"\n");
        }
        t
    }

    #[test]
    fn quotas_grow_with_the_vifs_a_domain_can_hold() {
        let t = Topology::parse(&guests(256, ""), "t.toml").unwrap();
        let drv = t.domain("drv").unwrap();
        assert_eq!(drv.vif_capacity(), 256);
        let q = drv.quotas();
        let base = hv::Quotas::default();
        assert_eq!(q.event_channels, base.event_channels + 2 * 256);
        assert!(q.store_nodes >= base.store_nodes + 25 * 256);
        assert!(q.store_watches > base.store_watches + 256);
        // A guest's quotas hold its most vifs.
        let g = t.domain("g1").unwrap().quotas();
        assert!(g.event_channels >= (EVENT_CHANNELS_PER_VIF * MAX_GUEST_VIFS) as usize);
        // 256 guests get 256 distinct, well-formed MACs.
        let macs: HashSet<String> = t.vifs().into_iter().map(|v| v.mac).collect();
        assert_eq!(macs.len(), 256);
        assert!(macs.iter().all(|m| abi::xenbus::parse_mac(m).is_ok()));
        assert!(macs.contains("00:16:3e:5e:01:00"));
        // hv's descriptors: at least the 25 per guest measured.
        assert!(t.descriptors_needed() >= 25 * 256);
    }

    #[test]
    fn grant_maps_is_a_driver_domain_key() {
        let t = Topology::parse(&guests(1, "grant_maps = \"mmap\"\n"), "t.toml").unwrap();
        assert_eq!(t.domain("drv").unwrap().grant_maps, Some(GrantMaps::Mmap));
        let t = Topology::parse(&guests(1, ""), "t.toml").unwrap();
        assert_eq!(t.domain("drv").unwrap().grant_maps, None);
        bad(
            &format!("{}grant_maps = \"pte\"\n", guests(1, "")),
            "domain \"g1\": grant_maps applies to driver domains only",
        );
        bad(
            &guests(1, "grant_maps = \"flip\"\n"),
            "unknown variant `flip`",
        );
    }

    #[test]
    fn max_event_channels_is_checked_against_the_vifs() {
        let t = Topology::parse(&guests(2, "max_event_channels = 4\n"), "t.toml").unwrap();
        assert_eq!(t.domain("drv").unwrap().quotas().event_channels, 4);
        bad(
            &guests(2, "max_event_channels = 3\n"),
            "domain \"drv\" has 2 vifs, which take 4 event channels, but max_event_channels = 3: raise it to at least 4",
        );
        bad(
            &guests(1, "max_event_channels = 0\n"),
            "max_event_channels must be 1..=131072",
        );
    }

    #[test]
    fn tx_gather_works_under_either_grant_mechanism() {
        for grants in ["ngm", "hv-copy"] {
            let t = Topology::parse(
                &format!("[[domain]]\nname = \"a\"\nkind = \"guest\"\ngrants = \"{grants}\"\ntx_mode = \"gather\"\n"),
                "test",
            )
            .unwrap();
            assert_eq!(t.domains[0].tx_mode, TxMode::Gather, "{grants}");
        }
    }

    fn bad(text: &str, needle: &str) {
        let e = Topology::parse(text, "t.toml").unwrap_err().to_string();
        assert!(e.contains(needle), "error {e:?} should mention {needle:?}");
        assert!(e.starts_with("t.toml"), "error {e:?} should name the file");
    }

    #[test]
    fn malformed_files_get_clear_errors() {
        bad("[[domain]\nname = 1", "t.toml");
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nmemroy = 3\n",
            "unknown field `memroy`",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\ncpu = 4096\n",
            "cpu = 4096",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"hyper\"\n",
            "unknown variant `hyper`",
        );
        bad(
            "[[domain]]\nname = \"Bad_Name\"\nkind = \"guest\"\n",
            "must be 1-10 characters",
        );
        bad("[[domain]]\nname = \"a\"\nkind = \"guest\"\n[[domain]]\nname = \"a\"\nkind = \"guest\"\n", "used twice");
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\naddress = \"10.0.0.1\"\n",
            "needs a prefix length",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nipv6 = \"10.0.0.1/24\"\n",
            "wrong IP version",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\n[wire]\ndriver = \"a\"\n",
            "not a driver domain",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"driver\"\n[wire]\ndriver = \"b\"\n",
            "names no domain",
        );
        bad("name = \"x\"\n", "no [[domain]]");
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\ntx_mode = \"map\"\n",
            "need grants = \"hv-copy\"",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\ntx_mode = \"header\"\n",
            "reads Xen's grant table and needs grants = \"hv-copy\"",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nhugepages = true\nmemory_frames = 100\n",
            "multiple of 512",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nspin_us = 20000\n",
            "spin_us must be 0..=10000",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nrx_buffer = \"quarter\"\n",
            "unknown variant `quarter`, expected `page` or `half`",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nrx_buffer = \"half\"\noffload = false\n",
            "domain \"a\": rx_buffer = \"half\" needs",
        );
        bad(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nprefetch = \"yes\"\n",
            "prefetch",
        );
    }

    #[test]
    fn rx_buffer_and_prefetch_reach_each_vif() {
        let t = Topology::parse(
            "[[domain]]\nname = \"d\"\nkind = \"driver\"\n[[domain]]\nname = \"a\"\nkind = \"guest\"\nrx_buffer = \"half\"\nprefetch = true\nvif = [\"\", \"\"]\n[[domain]]\nname = \"b\"\nkind = \"guest\"\n",
            "t.toml",
        )
        .unwrap();
        let v = t.vifs();
        let got: Vec<_> = v
            .iter()
            .map(|v| (v.guest.as_str(), v.prefetch, v.rx_buffer))
            .collect();
        assert_eq!(
            got,
            [
                ("a", true, RxBuffer::Half),
                ("a", true, RxBuffer::Half),
                ("b", false, RxBuffer::Page)
            ]
        );
    }

    #[test]
    fn spin_is_read_per_domain_and_set_for_all() {
        let mut t = Topology::parse(
            "[[domain]]\nname = \"a\"\nkind = \"guest\"\nspin_us = 50\n[[domain]]\nname = \"b\"\nkind = \"driver\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!((t.domains[0].spin_us, t.domains[1].spin_us), (50, 0));
        t.apply_spin(20);
        assert!(t.domains.iter().all(|d| d.spin_us == 20));
    }
}

#[cfg(test)]
mod vif_list_tests {
    use super::*;

    fn topo(guest: &str) -> Result<Topology, String> {
        Topology::parse(
            &format!(
                "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
                 [[domain]]\nname = \"drv2\"\nkind = \"driver\"\n\
                 [[domain]]\nname = \"g\"\nkind = \"guest\"\n{guest}"
            ),
            "t.toml",
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn lro_is_read_per_guest_and_checked() {
        for (v, at) in [
            // The default: netfront coalesces, unless the guest receives by flip.
            ("", LroAt::Guest),
            (
                "grants = \"hv-copy\"\nrx_mode = \"flip\"\ntx_mode = \"copy\"\n",
                LroAt::Off,
            ),
            ("lro = \"off\"\n", LroAt::Off),
            ("lro = \"guest\"\n", LroAt::Guest),
            ("lro = \"driver\"\n", LroAt::Driver),
        ] {
            let t = topo(&format!("backend = \"drv\"\n{v}")).unwrap();
            let v1 = t.vifs().into_iter().find(|x| x.guest == "g").unwrap();
            assert_eq!(v1.lro, at, "for {v:?}");
        }
        let e = topo("backend = \"drv\"\nlro = \"nic\"\n").unwrap_err();
        for needle in [
            "t.toml",
            "domain \"g\"",
            "lro = \"nic\"",
            "\"off\", \"guest\" or \"driver\"",
        ] {
            assert!(e.contains(needle), "{e:?} should mention {needle:?}");
        }
        let e = topo("backend = \"drv\"\nlro = \"driver\"\noffload = false\n").unwrap_err();
        assert!(e.contains("needs offload = \"tso\""), "{e}");
        let e = Topology::parse(
            "[[domain]]\nname = \"a\"\nkind = \"driver\"\nlro = \"guest\"\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("lro applies to guests"), "{e}");
    }

    #[test]
    fn offload_sets_parse_from_names_and_booleans() {
        for (val, want) in [
            ("true", Offloads::ALL),
            ("false", Offloads::NONE),
            ("\"none\"", Offloads::NONE),
            ("\"csum\"", Offloads::CSUM),
            ("\"sg\"", Offloads::SG),
            ("\"sg+csum\"", Offloads::SG_CSUM),
            ("\"tso\"", Offloads::TSO),
            ("\"all\"", Offloads::ALL),
        ] {
            let t = topo(&format!(
                "backend = \"drv\"\nlro = \"off\"\noffload = {val}\n"
            ))
            .unwrap_or_else(|e| panic!("offload = {val}: {e}"));
            let v = t.vifs().into_iter().find(|x| x.guest == "g").unwrap();
            assert_eq!(v.offload, want, "offload = {val}");
            let t = Topology::parse(
                &format!("[[domain]]\nname = \"d\"\nkind = \"driver\"\nport_offload = {val}\n"),
                "t.toml",
            )
            .unwrap();
            assert_eq!(t.domains[0].port_offload, want, "port_offload = {val}");
        }
        let t = topo("backend = \"drv\"\n").unwrap();
        let g = t.domains.iter().find(|d| d.name == "g").unwrap();
        assert_eq!(g.offload, Offloads::ALL, "the default");
        for bad in ["\"gso\"", "3"] {
            let e = topo(&format!("backend = \"drv\"\noffload = {bad}\n")).unwrap_err();
            assert!(e.contains("\"sg+csum\""), "{bad}: {e}");
        }
        // Half-page buffers need scatter-gather, not TSO.
        let half = "backend = \"drv\"\nlro = \"off\"\nrx_buffer = \"half\"\noffload = ";
        assert!(topo(&format!("{half}\"sg\"\n")).is_ok());
        assert!(topo(&format!("{half}\"csum\"\n")).is_err());
    }

    #[test]
    fn a_guest_lists_eight_vifs_and_memory_follows() {
        let specs: Vec<String> = (0..8)
            .map(|k| format!("\"mac=00:16:3e:77:00:0{k},mtu={}\"", 1500 + k))
            .collect();
        let t = topo(&format!(
            "backend = \"drv\"\nvif = [{}]\n",
            specs.join(", ")
        ))
        .unwrap();
        let v = t.vifs();
        assert_eq!(v.len(), 8);
        assert_eq!(
            v.iter().map(|v| v.handle).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(v[3].mac, "00:16:3e:77:00:03");
        assert_eq!(v[7].opts.mtu, Some(1507));
        assert_eq!(v[7].index, 7);
        // Without memory_frames, each domain gets what its vifs need.
        assert_eq!(t.domain("g").unwrap().memory_frames, 8 * GUEST_MIN_FRAMES);
        assert_eq!(
            t.domain("drv").unwrap().memory_frames,
            DRIVER_BASE_FRAMES + 8 * DRIVER_FRAMES_PER_VIF
        );
        assert_eq!(t.domain("drv2").unwrap().memory_frames, DEFAULT_FRAMES);
        assert_eq!(t.domain("g").unwrap().guest_vif_room(), 8);
        // Given memory is checked against every vif.
        let e = topo(&format!(
            "backend = \"drv\"\nmemory_frames = 2048\nvif = [{}]\n",
            specs.join(", ")
        ))
        .unwrap_err();
        assert!(
            e.contains("needs memory_frames >= 4112 (514 per vif)"),
            "{e}"
        );
        let e = Topology::parse(
            &format!(
                "[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 2048\n\
                 [[domain]]\nname = \"g\"\nkind = \"guest\"\nvif = [{}]\n",
                specs.join(", ")
            ),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("serves 8 vifs and needs memory_frames >= 4120"),
            "{e}"
        );
        let nine = format!("backend = \"drv\"\nvif = [{}, \"\"]\n", specs.join(", "));
        assert!(topo(&nine).unwrap_err().contains("at most 8"));
    }

    #[test]
    fn vifspecs_pick_devids_macs_and_backends() {
        let t = topo(
            "vif = [\"backend=drv\", \"devid=5,backend=drv2,bridge=xenbr1\", \"backend=drv,vlan=7\"]\n",
        )
        .unwrap();
        let v = t.vifs();
        assert_eq!(
            v.iter()
                .map(|v| (v.handle, v.backend.as_str()))
                .collect::<Vec<_>>(),
            [(0, "drv"), (5, "drv2"), (1, "drv")]
        );
        assert_eq!(v[0].mac, "00:16:3e:5e:00:01");
        assert_eq!(v[1].mac, "00:16:3e:65:00:01");
        assert_eq!((v[1].index, v[2].index), (0, 1));
        assert_eq!(v[1].opts.bridge.as_deref(), Some("xenbr1"));
        assert_eq!(v[2].opts.vlan, Some(7));
        assert_eq!(t.domain("g").unwrap().memory_frames, 6 * GUEST_MIN_FRAMES);
        // Without vif: today's one default vif.
        let t = topo("backend = \"drv\"\n").unwrap();
        assert_eq!(t.vifs().len(), 1);
        assert_eq!(t.vifs()[0].opts, VifOptions::default());
        assert_eq!(t.domain("g").unwrap().memory_frames, DEFAULT_FRAMES);
    }

    #[test]
    fn bad_vif_lists_are_refused_clearly() {
        for (guest, needle) in [
            (
                "vif = [\"mtu=9001\"]\n",
                "vif[0] \"mtu=9001\": vif option `mtu`",
            ),
            (
                "vif = [\"\", \"model=e1000\"]\n",
                "vif[1] \"model=e1000\": vif option `model` is not supported by splitnet",
            ),
            ("vif = [\"speed=1\"]\n", "unknown vif option `speed`"),
            (
                "mac = \"00:16:3e:00:00:01\"\nvif = [\"mac=00:16:3e:00:00:02\"]\n",
                "vif[0] sets mac=",
            ),
            (
                "backend = \"drv\"\nvif = [\"\", \"backend=drv2\"]\n",
                "vif[1] sets backend=",
            ),
            (
                "vif = [\"backend=drv\", \"\"]\n",
                "several driver domains exist",
            ),
            (
                "vif = [\"\", \"devid=3\", \"devid=3\"]\n",
                "devid=3 is given twice",
            ),
            ("vif = [\"devid=2\"]\n", "its devid must be 0"),
            (
                "backend = \"drv\"\nvif = [\"mac=00:16:3e:00:00:01\", \"mac=00:16:3E:00:00:01\"]\n",
                "used twice",
            ),
            (
                "backend = \"drv\"\nnic = \"hosted\"\nvif = [\"\"]\n",
                "has one of its own",
            ),
            ("memory_frames = 0\n", "memory_frames must be 1..=1048576"),
            (
                "backend = \"drv\"\n[[domain]]\nname = \"d3\"\nkind = \"driver\"\nvif = [\"\"]\n",
                "backend, mac and vif are guest settings",
            ),
        ] {
            let e = topo(guest).unwrap_err();
            assert!(e.contains(needle), "{guest}: {e:?} lacks {needle:?}");
        }
        let e = Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[[domain]]\nname = \"g\"\nkind = \"guest\"\nvif = [\"backend=g\"]\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vif backend=g is not a driver domain"), "{e}");
    }
}

#[cfg(test)]
mod wire_list_tests {
    use super::*;

    const DRV: &str = "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n";

    fn wire(name: Option<&str>, addr: &str) -> String {
        let name = name
            .map(|n| format!("name = \"{n}\"\n"))
            .unwrap_or_default();
        format!("[[wire]]\n{name}driver = \"drv\"\naddress = \"{addr}\"\n")
    }

    fn parse(text: &str) -> Result<Topology, String> {
        Topology::parse(text, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn an_array_of_wires_gives_each_its_own_port_and_the_table_still_reads() {
        let t = parse(&format!(
            "{DRV}{}{}{}",
            wire(None, "10.77.0.254/24"),
            wire(Some("wire2"), "10.77.0.253/24"),
            wire(Some("wire3"), "10.77.0.252/24").replace("driver", "queues = 2\ndriver")
        ))
        .unwrap();
        let names: Vec<&str> = t.wires.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["wire", "wire2", "wire3"]);
        assert_eq!(t.wire().unwrap().name, "wire");
        let ports: Vec<(String, String)> = t
            .uplinks_of("drv")
            .into_iter()
            .map(|u| (u.ifname.clone(), u.store_value()))
            .collect();
        assert_eq!(
            ports,
            [
                ("peth0".into(), "bridge=xenbr0".into()),
                ("peth1".into(), "bridge=xenbr0".into()),
                ("peth2".into(), "bridge=xenbr0,queues=2".into())
            ]
        );
        // The old table: one wire, named "wire".
        let one = parse(&format!("{DRV}[wire]\ndriver = \"drv\"\n")).unwrap();
        assert_eq!(one.wires.len(), 1);
        assert_eq!(one.uplinks_of("drv")[0].ifname, "peth0");
        // `up --link-rate` shapes every wire.
        let mut t = t;
        t.apply_link_rate(LinkRate(1_000_000)).unwrap();
        assert!(t.wires.iter().all(|w| w.rate == Some(LinkRate(1_000_000))));
    }

    #[test]
    fn a_wire_port_names_the_wire_of_its_rank() {
        let t = parse(&format!(
            "{DRV}{}{}[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 9000\n[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 4000\n",
            wire(None, "10.77.0.254/24"),
            wire(Some("wire2"), "10.77.0.253/24"),
        ))
        .unwrap();
        let u = t.uplinks_of("drv");
        let got: Vec<(&str, Option<u32>)> = u.iter().map(|u| (u.ifname.as_str(), u.mtu)).collect();
        assert_eq!(got, [("peth0", Some(9000)), ("peth1", Some(4000))]);
        let e = parse(&format!(
            "{DRV}{}[[port]]\ndriver = \"drv\"\nkind = \"wire\"\n[[port]]\ndriver = \"drv\"\nkind = \"wire\"\n",
            wire(None, "10.77.0.254/24"),
        ))
        .unwrap_err();
        assert!(e.contains("one per such [[port]]"), "{e}");
    }

    #[test]
    fn duplicate_wire_names_and_addresses_are_refused() {
        let e = parse(&format!(
            "{DRV}{}{}",
            wire(None, "10.77.0.254/24"),
            wire(None, "10.77.0.253/24")
        ))
        .unwrap_err();
        assert!(
            e.contains("wire name \"wire\" is used twice") && e.contains("name = \"wire2\""),
            "{e}"
        );
        let e = parse(&format!(
            "{DRV}{}{}",
            wire(None, "10.77.0.254/24"),
            wire(Some("wire2"), "10.77.0.254/16")
        ))
        .unwrap_err();
        assert!(
            e.contains(
                "address 10.77.0.254 is given twice: to wire \"wire\" and to wire \"wire2\""
            ),
            "{e}"
        );
        let e = parse(&format!(
            "{DRV}[[domain]]\nname = \"g\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n{}",
            wire(Some("w"), "10.77.0.1/24")
        ))
        .unwrap_err();
        assert!(e.contains("to domain \"g\" and to wire \"w\""), "{e}");
        let e = parse(&format!("{DRV}{}", wire(Some("drv"), "10.77.0.9/24"))).unwrap_err();
        assert!(e.contains("same name as a domain"), "{e}");
        let e = parse(&format!("{DRV}[[wire]]\ndriver = \"drv\"\nspeed = 1\n")).unwrap_err();
        assert!(e.contains("unknown field `speed`"), "{e}");
        let e = parse(&format!("{DRV}[wire]\ndriver = \"drv\"\nrate = \"fast\"\n")).unwrap_err();
        assert!(e.contains("needs a unit"), "{e}");
    }

    #[test]
    fn a_driver_domain_may_have_addresses_but_no_guest_settings() {
        let t = parse(&format!(
            "{DRV}address = \"10.77.0.100/24\"\nipv6 = \"fd77::100/64\"\n{}",
            wire(None, "10.77.0.254/24")
        ))
        .unwrap();
        let d = t.domain("drv").unwrap();
        assert_eq!(d.address.as_deref(), Some("10.77.0.100/24"));
        assert_eq!(d.ipv6.as_deref(), Some("fd77::100/64"));
        for (key, needle) in [
            (
                "mac = \"00:16:3e:00:00:01\"\n",
                "backend, mac and vif are guest settings",
            ),
            ("address = \"10.77.0.100\"\n", "needs a prefix length"),
            (
                "address = \"10.77.0.254/24\"\n",
                "address 10.77.0.254 is given twice",
            ),
        ] {
            let e = parse(&format!("{DRV}{key}{}", wire(None, "10.77.0.254/24"))).unwrap_err();
            assert!(e.contains(needle), "{key}: {e}");
        }
    }
}
