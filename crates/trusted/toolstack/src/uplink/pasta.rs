//! The `pasta` uplink: the driver domain's port is a veth to a namespace of
//! hv's own (`<prefix>pasta-<driver>`), where the port's subnet is routed
//! and masqueraded by an nftables table, and which pasta (Debian's
//! `passt`) joins to the host's network: pasta answers there as the
//! host's gateway and carries each flow over a socket of the host's, as it
//! does for rootless podman. It needs no privilege on the host, so it is
//! the uplink of splitnet without root (docs/ARCHITECTURE.md, "Without
//! root"). Host ports given in `publish` are forwarded by pasta into that
//! namespace and from there, translated, to a guest. hv starts pasta,
//! restarts it if it exits, and stops it with the driver domain's uplinks.

use super::journal::Undo;
use super::kinds::{err, nft_script_in};
use super::procs::{Daemon, Ready};
use super::{Uplink, Uplinks};
use crate::host::{self, ip_in, netns_name};
use std::net::Ipv4Addr;

/// pasta's interface in its namespace.
pub const PASTA_IF: &str = "up0";

/// A veth's MTU, the port's unless it sets `mtu`.
const DEFAULT_MTU: u32 = 1500;

/// A host port forwarded to a guest: `proto:HOSTPORT:GUESTADDR:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub udp: bool,
    pub port: u16,
    pub to: Ipv4Addr,
    pub to_port: u16,
}

impl Publish {
    /// Parses `tcp|udp:HOSTPORT:GUESTADDR:PORT`.
    pub fn parse(s: &str) -> Result<Publish, String> {
        let f: Vec<&str> = s.split(':').collect();
        let [proto, port, to, to_port] = f.as_slice() else {
            return Err("expected tcp|udp:HOSTPORT:GUESTADDR:PORT".into());
        };
        let udp = match *proto {
            "tcp" => false,
            "udp" => true,
            p => return Err(format!("protocol {p:?} is neither tcp nor udp")),
        };
        let port_of = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("port {p:?} is not 1..=65535")),
        };
        Ok(Publish {
            udp,
            port: port_of(port)?,
            to: to
                .parse()
                .map_err(|_| format!("{to:?} is not an IPv4 address"))?,
            to_port: port_of(to_port)?,
        })
    }

    fn proto(&self) -> &'static str {
        if self.udp {
            "udp"
        } else {
            "tcp"
        }
    }
}

/// The namespace pasta joins for driver domain `driver`'s uplink.
pub fn pasta_netns(driver: &str) -> String {
    format!("{}pasta-{driver}", host::prefix())
}

/// The nftables table of a pasta namespace: published ports translated to
/// their guests, whether pasta delivers a connection through its interface
/// (prerouting) or, from the host's own loopback, from a socket in the
/// namespace (output); the subnet's traffic out masqueraded, and so the
/// namespace's own loopback source of the latter.
fn rules(he: &str, net: Ipv4Addr, len: u8, publish: &[Publish]) -> String {
    let dnat: String = publish
        .iter()
        .map(|p| {
            format!(
                "  {} dport {} dnat to {}:{}\n",
                p.proto(),
                p.port,
                p.to,
                p.to_port
            )
        })
        .collect();
    let masquerade = format!(
        "  ip saddr {net}/{len} oifname != \"{he}\" masquerade\n  ip saddr 127.0.0.0/8 oifname \"{he}\" masquerade\n"
    );
    let chain = |name: &str, hook: &str, body: &str| {
        format!(" chain {name} {{\n  type nat hook {hook}; policy accept;\n{body} }}\n")
    };
    let chains = [
        chain("prerouting", "prerouting priority dstnat", &dnat),
        chain("output", "output priority -100", &dnat),
        chain("postrouting", "postrouting priority srcnat", &masquerade),
    ];
    format!("table ip splitnet_pasta {{\n{}}}\n", chains.concat())
}

/// pasta's command line: join namespace `ns`, configure its interface from
/// the host's with MTU `mtu` (the port's: pasta's frames cross the bridge,
/// where a larger one would be dropped), forward the published ports and
/// nothing else, stay in the foreground (hv supervises it) as the user hv
/// runs as.
fn args(ns: &str, pid_file: &str, mtu: u32, publish: &[Publish]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--config-net",
        "--foreground",
        "--quiet",
        "--runas",
        "0",
        "--ns-ifname",
        PASTA_IF,
        "--pid",
        pid_file,
        "-T",
        "none",
        "-U",
        "none",
        "--netns",
        ns,
        "--mtu",
        &mtu.to_string(),
    ]
    .map(String::from)
    .to_vec();
    for udp in [false, true] {
        let ports: Vec<String> = publish
            .iter()
            .filter(|p| p.udp == udp)
            .map(|p| p.port.to_string())
            .collect();
        let flag = if udp { "-u" } else { "-t" };
        let spec = if ports.is_empty() {
            "none".to_string()
        } else {
            ports.join(",")
        };
        a.extend([flag.to_string(), spec]);
    }
    a
}

/// What a pasta uplink cannot do on this host, each said with its fix:
/// pasta relays ICMP echo through ping sockets, which the kernel opens only
/// for the groups of `net.ipv4.ping_group_range` (many distributions open
/// it to all; the kernel's default opens it to none).
pub fn limits() -> Vec<String> {
    if sys::ping_sockets_allowed() {
        return Vec::new();
    }
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
        .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    vec![format!(
        "ping through pasta gets no answer: net.ipv4.ping_group_range ({range}) leaves out \
         hv's group, and pasta relays ICMP echo through ping sockets \
         (as root: sysctl -w net.ipv4.ping_group_range=\"0 2147483647\")"
    )]
}

impl Uplinks {
    /// `pasta`: the namespace, the veth from the driver domain's port to
    /// it with the subnet's address there, forwarding, the nftables table,
    /// and pasta joined to it.
    pub(super) fn pasta(&self, u: &Uplink) -> Result<(), String> {
        let (addr, len) = u.subnet.ok_or("pasta uplink without a subnet")?;
        let net = Ipv4Addr::from(u32::from(addr) & !(u32::MAX >> len));
        let ns = pasta_netns(&u.driver);
        let he = u.host_end.clone().unwrap_or_default();
        self.note(u, Undo::Netns { name: ns.clone() })?;
        host::netns_add(&ns).map_err(err)?;
        host::veth_pair(&he, &ns, &u.ifname, &netns_name(&u.driver)).map_err(err)?;
        if let Some(m) = u.mtu {
            let m = m.to_string();
            ip_in(&ns, &["link", "set", "dev", &he, "mtu", &m]).map_err(err)?;
            let drv = netns_name(&u.driver);
            ip_in(&drv, &["link", "set", "dev", &u.ifname, "mtu", &m]).map_err(err)?;
        }
        ip_in(&ns, &["addr", "add", &format!("{addr}/{len}"), "dev", &he]).map_err(err)?;
        // Forwarding, and loopback sources routed out (a published port's
        // connection from the host's loopback arrives from 127.0.0.1).
        let set = "echo 1 > /proc/sys/net/ipv4/ip_forward && \
                   echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet";
        host::run("ip", &["netns", "exec", &ns, "/bin/sh", "-c", set]).map_err(err)?;
        nft_script_in(Some(&ns), &rules(&he, net, len, &u.publish))
            .map_err(|e| format!("nftables refused {}'s pasta table: {e}", u.driver))?;
        let pid_file = self.run_dir.join(format!("pasta-{}.pid", u.driver));
        self.run_daemon(Daemon {
            name: "pasta".into(),
            owner: u.driver.clone(),
            program: "pasta".into(),
            args: args(
                &ns,
                &pid_file.display().to_string(),
                u.mtu.unwrap_or(DEFAULT_MTU),
                &u.publish,
            ),
            log: self.run_dir.join(format!("pasta-{}.log", u.driver)),
            ready: Ready::Path(pid_file.clone()),
            pid_file,
            run_dir: self.run_dir.clone(),
            package: "passt".into(),
        })?;
        for l in limits() {
            hv::log!(Warning, "{}: {l}", u.driver);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_is_parsed_and_its_errors_named() {
        let p = Publish::parse("tcp:8080:10.79.0.2:80").unwrap();
        assert_eq!((p.udp, p.port, p.to_port), (false, 8080, 80));
        assert_eq!(p.to, Ipv4Addr::new(10, 79, 0, 2));
        assert!(Publish::parse("udp:53:10.79.0.2:53").unwrap().udp);
        assert!(Publish::parse("sctp:1:10.0.0.1:1")
            .unwrap_err()
            .contains("sctp"));
        assert!(Publish::parse("tcp:0:10.0.0.1:1")
            .unwrap_err()
            .contains("\"0\""));
        assert!(Publish::parse("tcp:80:nowhere:80")
            .unwrap_err()
            .contains("nowhere"));
        assert!(Publish::parse("tcp:80").unwrap_err().contains("expected"));
    }

    #[test]
    fn pasta_forwards_only_what_is_published() {
        let p = [Publish::parse("tcp:8080:10.79.0.2:80").unwrap()];
        let a = args("splitnet-pasta-drv", "/r/p.pid", 1500, &p).join(" ");
        assert!(a.contains("-t 8080") && a.contains("-u none"), "{a}");
        assert!(a.contains("--mtu 1500"), "{a}");
        assert!(a.contains("-T none -U none") && a.contains("--netns splitnet-pasta-drv"));
        let r = rules("sn0-drv", Ipv4Addr::new(10, 79, 0, 0), 24, &p);
        assert_eq!(
            r.matches("tcp dport 8080 dnat to 10.79.0.2:80").count(),
            2,
            "{r}"
        );
        assert!(r.contains("ip saddr 10.79.0.0/24 oifname != \"sn0-drv\" masquerade"));
    }
}
