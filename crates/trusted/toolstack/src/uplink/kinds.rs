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

fn err(e: std::io::Error) -> String {
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

/// Sets `/proc/sys/<path>` to `value`, journaling its old value (owned by
/// the topology: several uplinks may need it) if it changes.
fn sysctl(run_dir: &Path, path: &str, value: &str) -> Result<(), String> {
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
        free_host_iface(iface, &u.driver)?;
        self.note(
            u,
            Undo::Link {
                ns: Some(ns.clone()),
                ifname: u.ifname.clone(),
            },
        )?;
        let mut args = vec![
            "link", "add", "link", iface, "name", &u.ifname, "netns", &ns,
        ];
        let mtu = u.mtu.map(|m| m.to_string());
        if let Some(m) = &mtu {
            args.extend(["mtu", m]);
        }
        if let Some(m) = &u.mac {
            args.extend(["address", m]);
        }
        args.extend(["type", "macvlan", "mode", "private"]);
        run("ip", &args).map_err(|e| {
            format!("the kernel refused a macvlan on {iface} (is the macvlan module available? `modprobe macvlan`): {e}")
        })?;
        ip_in(
            &ns,
            &["link", "set", "dev", &u.ifname, "allmulticast", "on", "up"],
        )
        .map_err(err)?;
        Ok(())
    }

    /// A veth whose host end is `u.host_end` and whose other end is the
    /// uplink in the driver domain's namespace, both up.
    fn veth(&self, u: &Uplink) -> Result<String, String> {
        let he = u.host_end.clone().unwrap_or_default();
        let ns = netns_name(&u.driver);
        self.note(
            u,
            Undo::Link {
                ns: None,
                ifname: he.clone(),
            },
        )?;
        run(
            "ip",
            &[
                "link", "add", &he, "type", "veth", "peer", "name", &u.ifname, "netns", &ns,
            ],
        )
        .map_err(|e| format!("the veth of {}'s {} uplink: {e}", u.driver, u.kind.as_str()))?;
        if let Some(m) = u.mtu {
            let m = m.to_string();
            run("ip", &["link", "set", "dev", &he, "mtu", &m]).map_err(err)?;
            ip_in(&ns, &["link", "set", "dev", &u.ifname, "mtu", &m]).map_err(err)?;
        }
        run("ip", &["link", "set", "dev", &he, "up"]).map_err(err)?;
        ip_in(&ns, &["link", "set", "dev", &u.ifname, "up"]).map_err(err)?;
        Ok(he)
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
        fs::write(Path::new("/proc/sys").join(conf("ipv4", "proxy_arp")), "1").map_err(err)?;
        sysctl(&self.run_dir, "net/ipv4/ip_forward", "1")?;
        if u.routes.iter().any(IpAddr::is_ipv6) {
            fs::write(Path::new("/proc/sys").join(conf("ipv6", "proxy_ndp")), "1").map_err(err)?;
            sysctl(&self.run_dir, "net/ipv6/conf/all/forwarding", "1")?;
        }
        for ip in &u.routes {
            let dst = if ip.is_ipv6() {
                format!("{ip}/128")
            } else {
                format!("{ip}/32")
            };
            run("ip", &["route", "replace", &dst, "dev", &he]).map_err(err)?;
        }
        Ok(())
    }
}

/// Runs an nftables script in one transaction (all or nothing).
fn nft_script(rules: &str) -> Result<(), String> {
    use std::io::Write;
    let child = {
        let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
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
