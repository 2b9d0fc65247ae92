//! xl's vifspec (xl-network-configuration(5)): a vif written as
//! comma-separated `key=value` pairs, e.g.
//! `mac=00:16:3e:5e:00:01,bridge=xenbr0,ip=10.0.0.5,rate=10Mb/s@20ms,mtu=9000`.
//! Used by the topology's `vif = [...]` and by `network-attach GUEST 'VIFSPEC'`.

use crate::topology::domain::{check_name, MAX_GUEST_VIFS};
use crate::topology::vif::{CreditRate, VifOptions};
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

/// Longest vhost-user socket path: `sun_path` holds 108 bytes with the closing NUL (unix(7)).
pub const MAX_SOCKET_PATH: usize = 107;

/// One parsed vifspec: the vif's options and what picks its identity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VifSpec {
    /// The guest-side MAC (lowercase); None: the toolstack picks one.
    pub mac: Option<String>,
    /// The driver domain serving the vif; None: the guest's default.
    pub backend: Option<String>,
    /// The device number (`device/vif/<devid>`); None: the lowest free one.
    pub devid: Option<u32>,
    pub opts: VifOptions,
    /// `type=vhost-user`: an external VM's vif, served over vhost-user at
    /// `socket` (`network-attach` only; see `crate::vm`).
    pub vhost_user: bool,
    /// `socket=`: where a vhost-user vif's driver domain listens.
    pub socket: Option<String>,
    /// `socket_server=vm`: the VM's VMM listens on `socket` instead, and
    /// hv dials it (see `crate::vm`).
    pub vm_listens: bool,
}

/// The keys a `type=vhost-user` vifspec takes.
const VHOST_USER_KEYS: [&str; 7] = [
    "type",
    "socket",
    "socket_server",
    "mac",
    "bridge",
    "vlan",
    "backend",
];

/// xl's credit interval when `rate` names none (xl-network-configuration(5)).
pub const DEFAULT_RATE_INTERVAL_US: u64 = 50_000;
/// The longest credit interval accepted (1 s): a longer one would let a
/// vif burst for longer than a second, and some credits it gives could not
/// be written back as a whole RATE per second.
pub const MAX_RATE_INTERVAL_US: u64 = 1_000_000;
/// The MTUs a vif accepts: IPv4's minimum up to jumbo frames.
pub const MTU_RANGE: std::ops::RangeInclusive<u16> = 68..=9000;
/// The access VLANs a vif accepts (IEEE 802.1Q's usable ids).
pub const VLAN_RANGE: std::ops::RangeInclusive<u16> = 1..=4094;
/// Longest interface-like name (`bridge`, `vifname`): Linux's IFNAMSIZ - 1.
const MAX_IFNAME: usize = 15;

/// xl keys splitnet knows and does not implement, with what to use instead.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "model",
        "emulated NICs are chosen with the guest's `nic` key",
    ),
    (
        "gatewaydev",
        "vif-route's gateway is an uplink kind ([[port]])",
    ),
    ("netdev", "vif-route's gateway is an uplink kind ([[port]])"),
    ("accel", "there is no accelerated netfront"),
    ("trusted", "every backend is treated as untrusted"),
    ("untrusted", "every backend is treated as untrusted"),
    (
        "backend_type",
        "the backend is always netback in a driver domain",
    ),
    ("forwarddev", "COLO is not implemented"),
];

impl VifSpec {
    /// Parses a vifspec; the empty string is a vif with every default.
    /// Errors name the key and the accepted form.
    pub fn parse(text: &str) -> Result<VifSpec, String> {
        let mut spec = VifSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                if UNSUPPORTED.iter().any(|(k, _)| *k == item) {
                    return unknown_key(item); // a flag xl takes, e.g. `untrusted`
                }
                format!("vifspec item {item:?} is not key=value (e.g. mac=00:16:3e:00:00:01)")
            })?;
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(format!("vifspec key `{key}` is given twice"));
            }
            seen.push(key);
            spec.set(key, value)?;
        }
        spec.check_vhost_user(&seen)?;
        Ok(spec)
    }

    /// A `type=vhost-user` vif takes a socket and a MAC, and only the
    /// keys that apply to a VM; `socket=` needs `type=vhost-user`.
    fn check_vhost_user(&self, keys: &[&str]) -> Result<(), String> {
        if !self.vhost_user {
            return match keys
                .iter()
                .find(|k| ["socket", "socket_server"].contains(k))
            {
                Some(k) => Err(format!(
                    "vif option `{k}` is for a VM's vif: add type=vhost-user"
                )),
                None => Ok(()),
            };
        }
        if let Some(k) = keys.iter().find(|k| !VHOST_USER_KEYS.contains(k)) {
            return Err(format!(
                "vif option `{k}` does not apply to type=vhost-user, which takes {}",
                VHOST_USER_KEYS.join(", ")
            ));
        }
        for (k, given) in [
            ("socket", self.socket.is_some()),
            ("mac", self.mac.is_some()),
        ] {
            if !given {
                return Err(format!(
                    "a vif of type=vhost-user needs {k}= (e.g. type=vhost-user,socket=/run/splitnet/vm2.sock,mac=52:54:00:12:34:56)"
                ));
            }
        }
        Ok(())
    }

    fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let o = &mut self.opts;
        match key {
            "mac" => self.mac = Some(parse_mac(v)?),
            "backend" => self.backend = Some(parse_domain(v)?),
            "devid" => self.devid = Some(parse_devid(v)?),
            "bridge" => o.bridge = Some(parse_ifname(key, v)?),
            "vifname" => o.vifname = Some(parse_ifname(key, v)?),
            "ip" => o.ip = parse_ips(v)?,
            "rate" => o.rate = Some(parse_vifspec_rate(v)?),
            "vlan" => o.vlan = Some(parse_in_range(key, v, VLAN_RANGE)?),
            "mtu" => o.mtu = Some(parse_in_range(key, v, MTU_RANGE)?),
            "pdev" => o.pdev = Some(parse_ifname(key, v)?),
            "script" => o.script = Some(parse_script(v)?),
            "type" => self.vhost_user = parse_type(v)?,
            "socket" => {
                check_socket(v).map_err(|e| format!("vif option `socket`: {e}"))?;
                self.socket = Some(v.to_string());
            }
            "socket_server" => {
                self.vm_listens = match v {
                    "vm" => true,
                    "splitnet" => false,
                    _ => return Err(format!("vif option `socket_server`: {v:?} is not vm (the VMM listens) or splitnet (hv listens)")),
                }
            }
            _ => return Err(unknown_key(key)),
        }
        Ok(())
    }
}

fn unknown_key(key: &str) -> String {
    if let Some((_, why)) = UNSUPPORTED.iter().find(|(k, _)| *k == key) {
        return format!("vif option `{key}` is not supported by splitnet ({why})");
    }
    if key.starts_with("colo_") {
        return format!(
            "vif option `{key}` is not supported by splitnet (COLO is not implemented)"
        );
    }
    format!(
        "unknown vif option `{key}`: splitnet accepts mac, bridge, backend, vifname, devid, ip, rate, vlan, mtu, pdev, script, and type, socket and socket_server for a VM's vhost-user vif"
    )
}

/// `type`: xl's `vif` (the default), or `vhost-user` for a VM.
fn parse_type(v: &str) -> Result<bool, String> {
    match v {
        "vif" => Ok(false),
        "vhost-user" => Ok(true),
        "ioemu" => Err("vif option `type` is not supported by splitnet as \"ioemu\" (emulated NICs are chosen with the guest's `nic` key; type=vhost-user declares a VM's vif)".into()),
        _ => Err(format!("vif option `type` = {v:?}: give vif or vhost-user")),
    }
}

fn parse_mac(v: &str) -> Result<String, String> {
    abi::xenbus::parse_mac(v).map_err(|e| format!("vif option `mac`: {e}"))?;
    Ok(v.to_ascii_lowercase())
}

fn parse_domain(v: &str) -> Result<String, String> {
    check_name("driver domain", v).map_err(|e| format!("vif option `backend`: {e}"))?;
    Ok(v.to_string())
}

fn parse_devid(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|d| *d < MAX_GUEST_VIFS)
        .ok_or_else(|| {
            format!(
                "vif option `devid` = {v:?}: give a device number 0..={}",
                MAX_GUEST_VIFS - 1
            )
        })
}

pub(crate) fn parse_ifname(key: &str, v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() <= MAX_IFNAME
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!(
            "vif option `{key}` = {v:?}: give a name of 1-{MAX_IFNAME} characters of A-Z, a-z, 0-9, '-', '_' and '.'"
        ))
    }
}

/// `ip`: one address or several separated by spaces (xl's form), IPv4 or
/// IPv6, without a prefix length.
fn parse_ips(v: &str) -> Result<Vec<IpAddr>, String> {
    let ips: Vec<IpAddr> = v
        .split_whitespace()
        .map(|a| {
            a.parse().map_err(|_| {
                format!("vif option `ip`: {a:?} is not an IPv4 or IPv6 address (no prefix length; several are separated by spaces)")
            })
        })
        .collect::<Result<_, _>>()?;
    if ips.is_empty() {
        return Err(
            "vif option `ip` is empty: give one address or several separated by spaces".into(),
        );
    }
    let max = abi::xenbus::MAX_VIF_ADDRS;
    if ips.len() > max {
        return Err(format!(
            "vif option `ip` lists {} addresses; a vif takes at most {max} (netback's limit)",
            ips.len()
        ));
    }
    Ok(ips)
}

fn parse_in_range(key: &str, v: &str, range: std::ops::RangeInclusive<u16>) -> Result<u16, String> {
    v.parse::<u16>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "vif option `{key}` = {v:?}: give a number {}..={}",
                range.start(),
                range.end()
            )
        })
}

fn parse_script(v: &str) -> Result<String, String> {
    if v.is_empty() || v.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "vif option `script` = {v:?}: give a script name or path, without spaces"
        ));
    }
    crate::vifscript::syntax(v).map_err(|e| format!("vif option `script`: {e}"))?;
    Ok(v.to_string())
}

/// `rate`: `RATE/s` or `RATE/s@INTERVAL`. RATE is bytes with an optional
/// unit, GB, MB, KB or B (bytes) or Gb, Mb, Kb or b (bits), in powers of
/// 1000; INTERVAL is microseconds with an optional unit s, ms or us, up
/// to 1 s, 50ms by default. As libxl does, the credit is the bytes RATE allows in
/// one INTERVAL ("1MB/s@20ms": 20000 bytes every 20000 us).
pub fn parse_vifspec_rate(v: &str) -> Result<CreditRate, String> {
    let form = "give RATE/s or RATE/s@INTERVAL, e.g. 10Mb/s, 250KB/s or 1MB/s@20ms (units B KB MB GB, b Kb Mb Gb; s ms us)";
    let bad = |why: &str| format!("vif option `rate` = {v:?}: {why}; {form}");
    let (rate, interval) = match v.split_once('@') {
        Some((r, i)) => (r, Some(i)),
        None => (v, None),
    };
    let rate = rate.strip_suffix("/s").ok_or_else(|| bad("no /s"))?;
    let (num, per_unit_bits) = split_unit(
        rate,
        &[
            ("GB", 8_000_000_000),
            ("MB", 8_000_000),
            ("KB", 8_000),
            ("B", 8),
            ("Gb", 1_000_000_000),
            ("Mb", 1_000_000),
            ("Kb", 1_000),
            ("b", 1),
        ],
        8,
    );
    let n: u64 = num.parse().map_err(|_| bad("RATE is not a whole number"))?;
    let bits_per_s = n
        .checked_mul(per_unit_bits)
        .ok_or_else(|| bad("RATE is too large"))?;
    let usec = match interval {
        None => DEFAULT_RATE_INTERVAL_US,
        Some(i) => {
            let (num, scale) = split_unit(i, &[("ms", 1_000), ("us", 1), ("s", 1_000_000)], 1);
            num.parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .filter(|us| (1..=MAX_RATE_INTERVAL_US).contains(us))
                .ok_or_else(|| bad("INTERVAL is not 1us..1s"))?
        }
    };
    let bytes = (u128::from(bits_per_s) * u128::from(usec) / 8 / 1_000_000) as u64;
    if bytes == 0 {
        return Err(bad("the rate allows no byte per interval"));
    }
    Ok(CreditRate { bytes, usec })
}

/// Splits `s` into its number and the scale of its unit (the first of
/// `units` it ends with), or `none` without a unit.
fn split_unit<'a>(s: &'a str, units: &[(&str, u64)], none: u64) -> (&'a str, u64) {
    units
        .iter()
        .find_map(|(u, k)| s.strip_suffix(u).map(|n| (n, *k)))
        .unwrap_or((s, none))
}

/// The rate as a vifspec writes it: bytes per second (rounded up, so that
/// parsing it gives the same credit) at the credit's interval.
pub fn format_rate(r: &CreditRate) -> String {
    let per_s = (u128::from(r.bytes) * 1_000_000).div_ceil(u128::from(r.usec));
    format!("{per_s}B/s@{}us", r.usec)
}

impl fmt::Display for VifSpec {
    /// The vifspec in canonical form (keys in the man page's order).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        let ips: Vec<String> = o.ip.iter().map(ToString::to_string).collect();
        let items: Vec<String> = [
            ("mac", self.mac.clone()),
            ("bridge", o.bridge.clone()),
            ("backend", self.backend.clone()),
            ("vifname", o.vifname.clone()),
            ("devid", self.devid.map(|d| d.to_string())),
            ("ip", (!ips.is_empty()).then(|| ips.join(" "))),
            ("rate", o.rate.as_ref().map(format_rate)),
            ("vlan", o.vlan.map(|v| v.to_string())),
            ("mtu", o.mtu.map(|v| v.to_string())),
            ("pdev", o.pdev.clone()),
            ("script", o.script.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
        f.write_str(&items.join(","))
    }
}

/// A vhost-user socket path (a VM's, or `network-attach`'s `socket=`): absolute, fits `sun_path`, no `..` and no odd bytes.
pub fn check_socket(s: &str) -> Result<(), String> {
    let p = Path::new(s);
    if !p.is_absolute() {
        return Err(format!("socket {s:?} must be an absolute path"));
    }
    if s.len() > MAX_SOCKET_PATH {
        return Err(format!(
            "socket {s:?} is {} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}",
            s.len()
        ));
    }
    if s.ends_with('/') || p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(format!("socket {s:?} must name a file, without `..`"));
    }
    if s.chars().any(|c| c.is_control() || c == ',' || c == '|') {
        return Err(format!(
            "socket {s:?} has a control character, ',' or '|' (QEMU's option syntax)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        VifSpec::parse(text).unwrap_err()
    }

    #[test]
    fn the_issues_examples_parse_and_round_trip() {
        let s = VifSpec::parse(
            "mac=00:16:3E:5e:00:01,bridge=xenbr0,ip=10.0.0.5,rate=10Mb/s@20ms,mtu=9000",
        )
        .unwrap();
        assert_eq!(s.mac.as_deref(), Some("00:16:3e:5e:00:01"));
        assert_eq!(s.opts.bridge.as_deref(), Some("xenbr0"));
        assert_eq!(s.opts.ip, vec!["10.0.0.5".parse::<IpAddr>().unwrap()]);
        // 10 Mbit/s is 1.25 MB/s: 25000 bytes per 20 ms.
        assert_eq!(
            s.opts.rate,
            Some(CreditRate {
                bytes: 25_000,
                usec: 20_000
            })
        );
        assert_eq!(s.opts.mtu, Some(9000));
        let t = VifSpec::parse("mac=00:16:3e:5e:00:01,bridge=xenbr0,ip=10.77.0.1,rate=100Mb/s")
            .unwrap();
        // The default interval, 50 ms: 12.5 MB/s * 0.05 s.
        assert_eq!(
            t.opts.rate,
            Some(CreditRate {
                bytes: 625_000,
                usec: 50_000
            })
        );
        for spec in [s, t] {
            assert_eq!(VifSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }

    #[test]
    fn every_key_parses() {
        let s = VifSpec::parse(
            " mac=00:16:3e:00:00:09 , bridge=xenbr1,backend=drv2,vifname=web0.1,devid=7,\
             ip=10.0.0.5 fd00::5,rate=1MB/s@20ms,vlan=4094,mtu=68,script=vif-bridge,",
        )
        .unwrap();
        assert_eq!(s.backend.as_deref(), Some("drv2"));
        assert_eq!(s.devid, Some(7));
        assert_eq!(s.opts.vifname.as_deref(), Some("web0.1"));
        assert_eq!(s.opts.ip.len(), 2);
        assert!(s.opts.ip[1].is_ipv6());
        assert_eq!(
            s.opts.rate,
            Some(CreditRate {
                bytes: 20_000,
                usec: 20_000
            })
        );
        assert_eq!((s.opts.vlan, s.opts.mtu), (Some(4094), Some(68)));
        assert_eq!(s.opts.script.as_deref(), Some("vif-bridge"));
        assert_eq!(VifSpec::parse(&s.to_string()).unwrap(), s);
        assert_eq!(VifSpec::parse("").unwrap(), VifSpec::default());
        assert_eq!(VifSpec::default().to_string(), "");
    }

    #[test]
    fn rates_follow_the_man_page() {
        let r = |t: &str| parse_vifspec_rate(t).map(|c| (c.bytes, c.usec));
        assert_eq!(r("250KB/s"), Ok((12_500, 50_000)));
        assert_eq!(r("1MB/s@20ms"), Ok((20_000, 20_000)));
        assert_eq!(r("8b/s@1s"), Ok((1, 1_000_000)));
        assert_eq!(r("1000/s@1000us"), Ok((1, 1_000)));
        assert_eq!(r("1Gb/s@500"), Ok((62_500, 500)));
        assert_eq!(r("2GB/s@1ms"), Ok((2_000_000, 1_000)));
        assert_eq!(r("100Kb/s@1s"), Ok((12_500, 1_000_000)));
        for bad in [
            "10Mb",
            "10Mb/h",
            "Mb/s",
            "-1Mb/s",
            "1.5Mb/s",
            "10Mb/s@",
            "10Mb/s@0ms",
            "10Mb/s@1h",
            "1b/s@1us",
            "99999999999999999999GB/s",
            "10TB/s",
            "10mb/s",
        ] {
            let e = r(bad).unwrap_err();
            assert!(
                e.contains("`rate`") && e.contains("RATE/s@INTERVAL"),
                "{bad}: {e}"
            );
        }
        for c in [(25_000, 20_000), (625_000, 50_000), (1, 3), (7, 1_000_000)] {
            let back = r(&format_rate(&CreditRate {
                bytes: c.0,
                usec: c.1,
            }));
            assert_eq!(back, Ok(c));
        }
    }

    #[test]
    fn bad_values_name_the_key_and_the_form() {
        for (text, needle) in [
            ("mac=00:16:3e:00:00", "`mac`"),
            ("mac=01:16:3e:00:00:01", "multicast"),
            ("bridge=", "`bridge`"),
            ("bridge=a-name-far-too-long", "1-15 characters"),
            ("bridge=br 0", "`bridge`"),
            ("vifname=x/y", "`vifname`"),
            ("backend=Drv", "`backend`"),
            ("devid=8", "0..=7"),
            ("devid=-1", "`devid`"),
            ("ip=10.0.0.1/24", "no prefix length"),
            ("ip=", "`ip` is empty"),
            ("ip=10.0.0.1 nope", "\"nope\""),
            ("vlan=0", "1..=4094"),
            ("vlan=4095", "1..=4094"),
            ("vlan=trunk", "`vlan`"),
            ("mtu=67", "68..=9000"),
            ("mtu=9001", "68..=9000"),
            ("script=", "`script`"),
            ("script=./vif-up", "a relative path is refused"),
            ("script=/etc/../bin/rm", "`..` and `.` are refused"),
            ("mtu=1500,mtu=9000", "given twice"),
            ("mac", "not key=value"),
            (
                "mtu=1500,untrusted",
                "`untrusted` is not supported by splitnet",
            ),
            ("colour=blue", "unknown vif option `colour`"),
        ] {
            let e = err(text);
            assert!(e.contains(needle), "{text}: {e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn ip_takes_as_many_addresses_as_netback_does() {
        let ips = |n: usize| {
            let v: Vec<String> = (0..n)
                .map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1))
                .collect();
            format!("ip={}", v.join(" "))
        };
        let max = abi::xenbus::MAX_VIF_ADDRS;
        assert_eq!(VifSpec::parse(&ips(max)).unwrap().opts.ip.len(), max);
        let e = err(&ips(max + 1));
        assert!(
            e.contains("lists 65 addresses; a vif takes at most 64"),
            "{e}"
        );
    }

    #[test]
    fn xl_keys_splitnet_lacks_are_refused_by_name() {
        for key in [
            "model",
            "gatewaydev",
            "netdev",
            "accel",
            "trusted",
            "backend_type",
            "colo_sock_mirror_id",
        ] {
            let e = err(&format!("{key}=x"));
            assert!(
                e.contains(&format!("`{key}` is not supported by splitnet")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_vhost_user_vif_takes_a_socket_and_a_mac_and_only_a_vms_keys() {
        let v = VifSpec::parse(
            "type=vhost-user,socket=/run/splitnet/vm2.sock,mac=52:54:00:AA:00:02,bridge=xenbr1,vlan=20,backend=drv",
        )
        .unwrap();
        assert!(v.vhost_user);
        assert_eq!(v.socket.as_deref(), Some("/run/splitnet/vm2.sock"));
        assert_eq!(v.mac.as_deref(), Some("52:54:00:aa:00:02"));
        assert_eq!(v.opts.bridge.as_deref(), Some("xenbr1"));
        assert_eq!((v.opts.vlan, v.backend.as_deref()), (Some(20), Some("drv")));
        assert!(!VifSpec::parse("type=vif,mtu=9000").unwrap().vhost_user);
        let ok = "type=vhost-user,socket=/run/splitnet/vm2.sock,mac=52:54:00:00:00:02";
        assert!(!v.vm_listens);
        assert!(
            VifSpec::parse(&format!("{ok},socket_server=vm"))
                .unwrap()
                .vm_listens
        );
        assert!(
            !VifSpec::parse(&format!("{ok},socket_server=splitnet"))
                .unwrap()
                .vm_listens
        );
        for (text, needle) in [
            (
                format!("{ok},mtu=9000"),
                "vif option `mtu` does not apply to type=vhost-user",
            ),
            (format!("{ok},ip=10.0.0.1"), "`ip` does not apply"),
            (format!("{ok},devid=1"), "`devid` does not apply"),
            (
                "type=vhost-user,mac=52:54:00:00:00:02".into(),
                "type=vhost-user needs socket=",
            ),
            (
                "type=vhost-user,socket=/run/x.sock".into(),
                "type=vhost-user needs mac=",
            ),
            ("socket=/run/x.sock".into(), "add type=vhost-user"),
            (
                "socket_server=vm".into(),
                "`socket_server` is for a VM's vif",
            ),
            (
                format!("{ok},socket_server=qemu"),
                "is not vm (the VMM listens)",
            ),
            (
                "type=vhost-user,socket=vm2.sock,mac=52:54:00:00:00:02".into(),
                "must be an absolute path",
            ),
            (
                "type=vhost-user,socket=/run/../x.sock,mac=52:54:00:00:00:02".into(),
                "without `..`",
            ),
            (
                format!(
                    "type=vhost-user,socket=/{},mac=52:54:00:00:00:02",
                    "a".repeat(120)
                ),
                "holds at most 107",
            ),
            (
                "type=vhost-user,socket=/run/x.sock,mac=01:00:5e:00:00:01".into(),
                "multicast",
            ),
            (
                "type=ioemu".into(),
                "`type` is not supported by splitnet as \"ioemu\"",
            ),
            ("type=virtio".into(), "give vif or vhost-user"),
        ] {
            let e = err(&text);
            assert!(e.contains(needle), "{text}: {e:?} lacks {needle:?}");
        }
    }
}
