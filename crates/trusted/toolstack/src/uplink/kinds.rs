//! How each uplink kind is set up on the host; each change is journaled
//! before it is made.

use super::journal::{record, Undo, TOPOLOGY};
use super::{Uplink, Uplinks};
use crate::host::{self, ip_in, netns_name, run};
use serde_json::Value;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use sys::signals::SpawnUnblocked;

pub(super) fn err(e: std::io::Error) -> String {
    e.to_string()
}

/// `ip -j -d link show dev IFACE` of host interface `iface`, refused with
/// a clear error if it is absent, in a splitnet namespace, enslaved or the
/// loopback.
fn free_host_iface(iface: &str, driver: &str) -> Result<Value, String> {
    let Ok(out) = run("ip", &["-j", "-d", "link", "show", "dev", iface]) else {
        if let Some(ns) = host::our_netns()
            .into_iter()
            .find(|ns| ip_in(ns, &["link", "show", "dev", iface]).is_ok())
        {
            return Err(format!(
                "host interface {iface} is in use: it is in namespace {ns} (another splitnet uplink has it)"
            ));
        }
        return Err(format!(
            "host interface {iface} does not exist (`ip link show {iface}` finds no such device)"
        ));
    };
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("ip -j link: {e}"))?;
    let link = v.get(0).cloned().unwrap_or(Value::Null);
    if let Some(m) = link["master"].as_str() {
        return Err(format!(
            "host interface {iface} is in use: it is enslaved to {m} (a bridge or bond port); release it first"
        ));
    }
    let flags: Vec<&str> = link["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if flags.contains(&"LOOPBACK") {
        return Err(format!(
            "host interface {iface} is a loopback; {driver} needs an Ethernet interface"
        ));
    }
    if link["link_type"].as_str() != Some("ether") {
        return Err(format!(
            "host interface {iface} is not an Ethernet interface (link type {})",
            link["link_type"]
        ));
    }
    Ok(link)
}

/// Host interface `iface`'s addresses as `ip addr replace` arguments:
/// the permanent, non-link-local ones (the kernel makes link-local again).
fn addresses_of(iface: &str) -> Result<Vec<Vec<String>>, String> {
    let out = run("ip", &["-j", "addr", "show", "dev", iface]).map_err(err)?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("ip -j addr: {e}"))?;
    let mut addrs = Vec::new();
    for a in v[0]["addr_info"].as_array().into_iter().flatten() {
        if a["scope"] == "link" || a["dynamic"] == true {
            continue;
        }
        let (Some(local), Some(len)) = (a["local"].as_str(), a["prefixlen"].as_u64()) else {
            continue;
        };
        let mut args = vec![format!("{local}/{len}")];
        if let Some(b) = a["broadcast"].as_str() {
            args.extend(["broadcast".to_string(), b.to_string()]);
        }
        if a["family"] == "inet6" {
            args.push("nodad".to_string());
        }
        addrs.push(args);
    }
    Ok(addrs)
}

/// Host interface `iface`'s routes in the main table, IPv4 and IPv6, as
/// [`Undo::Lend`] keeps them ([`route_args`]).
fn routes_of(iface: &str) -> Result<Vec<Vec<String>>, String> {
    let mut routes = Vec::new();
    for family in ["-4", "-6"] {
        let out = run("ip", &["-j", family, "route", "show", "dev", iface]).map_err(err)?;
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("ip -j route: {e}"))?;
        let all = v.as_array().into_iter().flatten();
        routes.extend(all.filter_map(|r| route_args(family, r)));
    }
    Ok(routes)
}

/// One route of `ip -j route show dev IFACE` as `ip FAMILY route add`
/// arguments: family, destination, the rest (without `dev`). None for the
/// kernel's own (the connected routes of the addresses, made again with
/// them), those a daemon keeps (router advertisements, DHCP: dynamic
/// addresses are not kept either), multipath routes and other types than
/// unicast.
fn route_args(family: &str, r: &Value) -> Option<Vec<String>> {
    let dst = r["dst"].as_str()?;
    let proto = r["protocol"].as_str().unwrap_or("boot");
    let unicast = r["type"].as_str().is_none_or(|t| t == "unicast");
    let simple = r.get("nexthops").is_none() && r.get("nhid").is_none();
    if matches!(proto, "kernel" | "ra" | "dhcp") || !unicast || !simple {
        return None;
    }
    let mut args = vec![family.to_string(), dst.to_string()];
    for (key, word) in [
        ("gateway", "via"),
        ("protocol", "proto"),
        ("scope", "scope"),
        ("metric", "metric"),
        ("prefsrc", "src"),
        ("pref", "pref"),
    ] {
        match &r[key] {
            Value::String(x) => args.extend([word.to_string(), x.clone()]),
            Value::Number(n) => args.extend([word.to_string(), n.to_string()]),
            _ => {}
        }
    }
    let flags = r["flags"].as_array();
    if flags.is_some_and(|f| f.iter().any(|x| x == "onlink")) {
        args.push("onlink".into());
    }
    Some(args)
}

/// Refuses a link name `ifname` that is already taken in `ns` (the host's:
/// None): splitnet creates its links under names of its own, and the undo
/// journal deletes them by name, so an existing one must never be mistaken
/// for one of them.
pub(super) fn refuse_taken(ns: Option<&str>, ifname: &str) -> Result<(), String> {
    if !super::journal::exists(ns, ifname) {
        return Ok(());
    }
    Err(format!(
        "an interface named {ifname} already exists {}; splitnet will not take it over: remove or rename it",
        ns.map_or("on the host".to_string(), |n| format!("in namespace {n}"))
    ))
}

/// Sets `/proc/sys/<path>` to `value`, journaling its old value (owned by
/// the topology: several uplinks may need it) if it changes.
pub(super) fn sysctl(run_dir: &Path, path: &str, value: &str) -> Result<(), String> {
    let full = Path::new("/proc/sys").join(path);
    let old = fs::read_to_string(&full).map_err(|e| format!("reading {}: {e}", full.display()))?;
    if old.trim() == value {
        return Ok(());
    }
    record(
        run_dir,
        TOPOLOGY,
        Undo::Sysctl {
            path: path.into(),
            old: old.trim().into(),
        },
    )?;
    fs::write(&full, value).map_err(|e| format!("writing {}: {e}", full.display()))
}

impl Uplinks {
    /// `host`: moves the host interface into the driver domain's namespace,
    /// its settings journaled first.
    pub(super) fn lend(&self, u: &Uplink) -> Result<(), String> {
        let iface = u.iface.as_deref().unwrap_or_default();
        let ns = netns_name(&u.driver);
        let link = free_host_iface(iface, &u.driver)?;
        let flags = link["flags"].as_array().cloned().unwrap_or_default();
        self.note(
            u,
            Undo::Lend {
                ns: ns.clone(),
                iface: iface.into(),
                mtu: link["mtu"].as_u64().unwrap_or(1500) as u32,
                up: flags.iter().any(|f| f == "UP"),
                addrs: addresses_of(iface)?,
                routes: routes_of(iface)?,
            },
        )?;
        run("ip", &["link", "set", "dev", iface, "netns", &ns])
            .map_err(|e| format!("moving host interface {iface} into {ns}: {e}"))?;
        if let Some(m) = u.mtu {
            ip_in(&ns, &["link", "set", "dev", iface, "mtu", &m.to_string()]).map_err(err)?;
        }
        ip_in(&ns, &["link", "set", "dev", iface, "up"]).map_err(err)?;
        Ok(())
    }

    /// `macvlan`: the group's primary, a private-mode macvlan on the host
    /// interface with a MAC of its own, receiving every multicast
    /// (`allmulticast`), made in the driver domain's namespace; its
    /// members come with the vifs ([`super::group`]).
    pub(super) fn macvlan(&self, u: &Uplink) -> Result<(), String> {
        let iface = u.iface.as_deref().unwrap_or_default();
        let ns = netns_name(&u.driver);
        refuse_taken(Some(&ns), &u.ifname)?;
        free_host_iface(iface, &u.driver)?;
        self.private_macvlan(u, &u.ifname, &ns, u.mac.as_deref())?;
        ip_in(
            &ns,
            &["link", "set", "dev", &u.ifname, "allmulticast", "on", "up"],
        )
        .map_err(err)?;
        Ok(())
    }

    /// Journals, then creates, macvlan `name` on `u`'s host interface in
    /// namespace `ns`: private mode (its frames never reach another macvlan
    /// of the interface here), `u`'s MTU, and MAC `mac` if given. Down.
    pub(super) fn private_macvlan(
        &self,
        u: &Uplink,
        name: &str,
        ns: &str,
        mac: Option<&str>,
    ) -> Result<(), String> {
        let iface = u.iface.as_deref().unwrap_or_default();
        self.note(
            u,
            Undo::Link {
                ns: Some(ns.to_string()),
                ifname: name.to_string(),
            },
        )?;
        let mut args = vec!["link", "add", "link", iface, "name", name, "netns", ns];
        let mtu = u.mtu.map(|m| m.to_string());
        if let Some(m) = &mtu {
            args.extend(["mtu", m]);
        }
        if let Some(m) = mac {
            args.extend(["address", m]);
        }
        args.extend(["type", "macvlan", "mode", "private"]);
        run("ip", &args).map_err(|e| {
            format!("the kernel refused a macvlan on {iface} (is the macvlan module available? `modprobe macvlan`): {e}")
        })?;
        Ok(())
    }

    /// A veth whose host end is `u.host_end` and whose other end is the
    /// uplink in the driver domain's namespace, both up.
    fn veth(&self, u: &Uplink) -> Result<String, String> {
        let he = u.host_end.clone().unwrap_or_default();
        self.host_veth(u, &he, &u.ifname, u.mtu)?;
        Ok(he)
    }

    /// A veth `he` (in hv's namespace, journaled) to `inner` in the driver
    /// domain's namespace, both of MTU `mtu` if given, and up.
    pub(super) fn host_veth(
        &self,
        u: &Uplink,
        he: &str,
        inner: &str,
        mtu: Option<u32>,
    ) -> Result<(), String> {
        let ns = netns_name(&u.driver);
        refuse_taken(None, he)?;
        self.note(
            u,
            Undo::Link {
                ns: None,
                ifname: he.to_string(),
            },
        )?;
        run(
            "ip",
            &[
                "link", "add", he, "type", "veth", "peer", "name", inner, "netns", &ns,
            ],
        )
        .map_err(|e| format!("the veth of {}'s {} uplink: {e}", u.driver, u.kind.as_str()))?;
        if let Some(m) = mtu {
            let m = m.to_string();
            run("ip", &["link", "set", "dev", he, "mtu", &m]).map_err(err)?;
            ip_in(&ns, &["link", "set", "dev", inner, "mtu", &m]).map_err(err)?;
        }
        run("ip", &["link", "set", "dev", he, "up"]).map_err(err)?;
        ip_in(&ns, &["link", "set", "dev", inner, "up"]).map_err(err)?;
        Ok(())
    }

    /// `nat` (vif-nat): the veth, the subnet on its host end, forwarding,
    /// a masquerading nftables table, and dnsmasq.
    pub(super) fn nat(&self, u: &Uplink) -> Result<(), String> {
        let (addr, len) = u.subnet.ok_or("nat uplink without a subnet")?;
        let net = Ipv4Addr::from(u32::from(addr) & !(u32::MAX >> len));
        let table = format!("splitnet_{}", u.host_end.as_deref().unwrap_or_default());
        let he = self.veth(u)?;
        run("ip", &["addr", "add", &format!("{addr}/{len}"), "dev", &he]).map_err(err)?;
        sysctl(&self.run_dir, "net/ipv4/ip_forward", "1")?;
        self.note(
            u,
            Undo::Table {
                family: "ip".into(),
                name: table.clone(),
            },
        )?;
        let rules = format!(
            "table ip {table} {{\n chain postrouting {{\n  type nat hook postrouting priority srcnat; policy accept;\n  ip saddr {net}/{len} oifname != \"{he}\" masquerade\n }}\n}}\n"
        );
        nft_script(&rules).map_err(|e| {
            format!("nftables refused {}'s NAT table (is nftables installed, and the kernel's nf_tables NAT?): {e}", u.driver)
        })?;
        self.dnsmasq(u, &he, addr, len)
    }

    /// `route` (vif-route): the veth, proxy ARP on its host end,
    /// forwarding, and a host route to each guest address behind it.
    pub(super) fn route(&self, u: &Uplink) -> Result<(), String> {
        let he = self.veth(u)?;
        let conf = |v: &str, k: &str| format!("net/{v}/conf/{he}/{k}");
        proxy_arp(&he)?;
        sysctl(&self.run_dir, "net/ipv4/ip_forward", "1")?;
        if u.routes.iter().any(IpAddr::is_ipv6) {
            fs::write(Path::new("/proc/sys").join(conf("ipv6", "proxy_ndp")), "1").map_err(err)?;
            warn_ra_stops(&u.driver);
            sysctl(&self.run_dir, "net/ipv6/conf/all/forwarding", "1")?;
        }
        for ip in &u.routes {
            let dst = if ip.is_ipv6() {
                format!("{ip}/128")
            } else {
                format!("{ip}/32")
            };
            host_route(&dst, &he)?;
        }
        Ok(())
    }
}

/// Turns proxy ARP on for host interface `he` (it goes with `he`).
pub(super) fn proxy_arp(he: &str) -> Result<(), String> {
    let p = format!("/proc/sys/net/ipv4/conf/{he}/proxy_arp");
    fs::write(&p, "1").map_err(|e| format!("writing {p}: {e}"))
}

/// Says which host interfaces stop taking router advertisements when IPv6
/// forwarding goes on (ip-sysctl: `accept_ra` = 1 accepts them only while
/// the host does not forward; 2 accepts them anyway): their SLAAC
/// addresses and default routes lapse while the route uplink is up.
fn warn_ra_stops(driver: &str) {
    let conf = Path::new("/proc/sys/net/ipv6/conf");
    let read = |p: std::path::PathBuf| fs::read_to_string(p).unwrap_or_default();
    if read(conf.join("all/forwarding")).trim() == "1" {
        return;
    }
    let mut names: Vec<String> = fs::read_dir(conf)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| read(e.path().join("accept_ra")).trim() == "1")
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !matches!(n.as_str(), "all" | "default" | "lo"))
        .collect();
    names.sort();
    if !names.is_empty() {
        hv::log!(
            Warning,
            dom = driver,
            "its route uplink turns IPv6 forwarding on: {} (accept_ra=1) stop taking router advertisements until it goes; set accept_ra=2 on them to keep SLAAC",
            names.join(", ")
        );
    }
}

/// Adds the host route to `dst` through `he`, refused if the host has a
/// route to `dst` already (splitnet never replaces one: it would be lost
/// when the uplink goes). The route goes with `he`, so it is not journaled.
pub(super) fn host_route(dst: &str, he: &str) -> Result<(), String> {
    let family = if dst.contains(':') { "-6" } else { "-4" };
    let existing = run("ip", &[family, "route", "show", dst]).map_err(err)?;
    if !existing.trim().is_empty() {
        return Err(format!(
            "the host has a route to {dst} already ({}); a route uplink will not replace it: remove it, or route that guest another way",
            existing.trim()
        ));
    }
    run("ip", &[family, "route", "add", dst, "dev", he])
        .map(drop)
        .map_err(|e| format!("the host route to {dst}: {e}"))
}

/// Runs an nftables script in one transaction (all or nothing).
fn nft_script(rules: &str) -> Result<(), String> {
    nft_script_in(None, rules)
}

/// Runs an nftables script in one transaction, in namespace `ns` (hv's
/// own without one).
pub fn nft_script_in(ns: Option<&str>, rules: &str) -> Result<(), String> {
    use std::io::Write;
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "nft"]);
            c
        }
        None => Command::new("nft"),
    };
    let child = {
        let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        cmd.args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_unblocked()
    };
    let mut child = child.map_err(|e| format!("nft: {e} (is nftables installed?)"))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(rules.as_bytes()).map_err(err)?;
    }
    let out = child.wait_with_output().map_err(err)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_interface_keeps_its_static_routes_not_the_kernels() {
        let v4: Value = serde_json::from_str(
            r#"[{"dst":"10.9.0.0/24","protocol":"kernel","scope":"link","prefsrc":"10.9.0.1","flags":[]},
                {"dst":"10.81.0.0/24","gateway":"10.9.0.2","flags":[]},
                {"dst":"10.82.0.0/16","scope":"link","metric":5,"flags":[]},
                {"dst":"default","gateway":"10.9.0.254","protocol":"dhcp","prefsrc":"10.9.0.7","metric":100,"flags":[]},
                {"dst":"10.83.0.0/24","gateway":"10.8.0.1","flags":["onlink"]},
                {"dst":"10.84.0.0/24","nexthops":[{"gateway":"10.9.0.2","dev":"d0"}]}]"#,
        )
        .unwrap();
        let got: Vec<Vec<String>> = v4
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| route_args("-4", r))
            .collect();
        let want: Vec<Vec<String>> = vec![
            vec!["-4", "10.81.0.0/24", "via", "10.9.0.2"],
            vec!["-4", "10.82.0.0/16", "scope", "link", "metric", "5"],
            vec!["-4", "10.83.0.0/24", "via", "10.8.0.1", "onlink"],
        ]
        .into_iter()
        .map(|r| r.into_iter().map(String::from).collect())
        .collect();
        assert_eq!(got, want);
        let v6: Value = serde_json::from_str(
            r#"[{"dst":"fd00:81::/64","metric":1024,"flags":[],"pref":"medium"},
                {"dst":"fe80::/64","protocol":"kernel","metric":256,"flags":[],"pref":"medium"},
                {"dst":"default","gateway":"fe80::1","protocol":"ra","metric":1024,"expires":1799,"flags":[],"pref":"medium"}]"#,
        )
        .unwrap();
        let got: Vec<Vec<String>> = v6
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| route_args("-6", r))
            .collect();
        assert_eq!(
            got,
            vec![vec![
                "-6",
                "fd00:81::/64",
                "metric",
                "1024",
                "pref",
                "medium"
            ]]
        );
    }
}
