//! Several hosts on one machine, for tests and demos: each host is a
//! network namespace `splitnet@NAME` with an underlay address, and a router
//! namespace joins them, so tunnel traffic between hosts is routed as it is
//! between real machines, never bridged. Host `i` (1-based) owns
//! `10.200.i.0/24`: the router's end is `.1`, the host's `ul0` is `.2`, and
//! the host answers ARP (`proxy_arp`) for any other address of it that it
//! routes onwards, such as its driver domain's VTEP (`.3` by convention).
//!
//! An instance of splitnet (`splitnet --host NAME`) runs its hv inside its
//! host's namespace: what hv makes "on the host" is made there.

pub use crate::host::ROUTER;
use crate::host::{self, SHARED_PREFIX};
use std::net::Ipv4Addr;

/// Most hosts an underlay has (one /24 each under 10.200.0.0/16).
pub const MAX_HOSTS: usize = 250;
/// The host's end of its underlay link, in its namespace.
pub const HOST_IF: &str = "ul0";
/// The MTU range of the underlay links.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 1280..=9000;

/// The router's namespace.
pub fn router_ns() -> String {
    format!("{SHARED_PREFIX}{ROUTER}")
}

/// Host `name`'s namespace.
pub fn host_ns(name: &str) -> String {
    format!("{SHARED_PREFIX}{name}")
}

/// The file that names host `name`'s namespace.
pub fn host_ns_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new("/run/netns").join(host_ns(name))
}

/// One host of the underlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderlayHost {
    pub name: String,
    /// 1-based; the third octet of its addresses.
    pub index: u8,
    /// `ul0`'s address (10.200.index.2/24).
    pub addr: Ipv4Addr,
    pub mtu: u32,
}

impl UnderlayHost {
    fn new(name: &str, index: u8, mtu: u32) -> UnderlayHost {
        UnderlayHost {
            name: name.to_string(),
            index,
            addr: Ipv4Addr::new(10, 200, index, 2),
            mtu,
        }
    }

    /// The router's address on this host's link, the host's gateway.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.index, 1)
    }

    /// The conventional VTEP address of this host's first driver domain.
    pub fn vtep(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.index, 3)
    }

    /// The router's end of this host's link.
    fn router_if(&self) -> String {
        format!("h-{}", self.name)
    }
}

/// `splitnet underlay up`: the router and one namespace per host, linked
/// and addressed. Nothing is left half made: on an error, what was made
/// goes again.
pub fn up(names: &[String], mtu: u32) -> Result<Vec<UnderlayHost>, String> {
    check(names, mtu)?;
    if host::netns_list().contains(&router_ns()) {
        let have: Vec<String> = hosts().into_iter().map(|h| h.name).collect();
        return Err(format!(
            "the underlay is already up (hosts: {}); run `splitnet underlay down` first",
            have.join(", ")
        ));
    }
    let hosts: Vec<UnderlayHost> = names
        .iter()
        .enumerate()
        .map(|(i, n)| UnderlayHost::new(n, i as u8 + 1, mtu))
        .collect();
    let made = make_router().and_then(|()| hosts.iter().try_for_each(make_host));
    if let Err(e) = made {
        remove(&hosts);
        return Err(e);
    }
    Ok(hosts)
}

fn check(names: &[String], mtu: u32) -> Result<(), String> {
    if names.is_empty() || names.len() > MAX_HOSTS {
        return Err(format!("give 1 to {MAX_HOSTS} host names"));
    }
    for (i, n) in names.iter().enumerate() {
        host::valid_host_name(n)?;
        if names[..i].contains(n) {
            return Err(format!("host {n:?} is given twice"));
        }
    }
    if !MTU_RANGE.contains(&mtu) {
        return Err(format!(
            "--mtu {mtu}: the underlay's MTU must be in {}..={}",
            MTU_RANGE.start(),
            MTU_RANGE.end()
        ));
    }
    Ok(())
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Sets sysctl `key` to `value` inside namespace `ns`.
fn sysctl_in(ns: &str, key: &str, value: &str) -> Result<(), String> {
    host::run(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            &format!("{key}={value}"),
        ],
    )
    .map(|_| ())
    .map_err(io("sysctl"))
}

fn make_router() -> Result<(), String> {
    let r = router_ns();
    host::netns_add(&r).map_err(io("the router's namespace"))?;
    sysctl_in(&r, "net.ipv4.ip_forward", "1")
}

fn make_host(h: &UnderlayHost) -> Result<(), String> {
    let (r, ns) = (router_ns(), host_ns(&h.name));
    let what = format!("host {}", h.name);
    host::netns_add(&ns).map_err(io(&what))?;
    host::veth_pair(&h.router_if(), &r, HOST_IF, &ns).map_err(io(&what))?;
    let m = h.mtu.to_string();
    host::ip_in(&r, &["link", "set", &h.router_if(), "mtu", &m]).map_err(io(&what))?;
    host::ip_in(&ns, &["link", "set", HOST_IF, "mtu", &m]).map_err(io(&what))?;
    host::addr_add(&r, &h.router_if(), &format!("{}/24", h.gateway())).map_err(io(&what))?;
    host::addr_add(&ns, HOST_IF, &format!("{}/24", h.addr)).map_err(io(&what))?;
    let gw = h.gateway().to_string();
    host::ip_in(&ns, &["route", "add", "default", "via", &gw]).map_err(io(&what))?;
    sysctl_in(&ns, "net.ipv4.ip_forward", "1")?;
    sysctl_in(&ns, &format!("net.ipv4.conf.{HOST_IF}.proxy_arp"), "1")
}

/// Deletes the namespaces of `hosts` and the router.
fn remove(hosts: &[UnderlayHost]) {
    for h in hosts {
        host::netns_del(&host_ns(&h.name));
    }
    host::netns_del(&router_ns());
}

/// The namespaces of host `name`'s domains (`splitnet@NAME-*`), which
/// exist while it is up.
fn domains_of(name: &str, all: &[String]) -> Vec<String> {
    let p = format!("{}-", host_ns(name));
    all.iter().filter(|n| n.starts_with(&p)).cloned().collect()
}

/// `splitnet underlay down`: refused while a host is up; else every host's
/// namespace and the router's go.
pub fn down() -> Result<Vec<String>, String> {
    let all = host::netns_list();
    let hosts = hosts();
    let busy: Vec<&str> = hosts
        .iter()
        .filter(|h| !domains_of(&h.name, &all).is_empty())
        .map(|h| h.name.as_str())
        .collect();
    if !busy.is_empty() {
        return Err(format!(
            "hosts {} are still up: run `splitnet --host NAME down` for each first",
            busy.join(", ")
        ));
    }
    remove(&hosts);
    let gone: Vec<String> = hosts.into_iter().map(|h| h.name).collect();
    Ok(gone)
}

/// The hosts of the underlay that is up, in index order, read back from
/// their namespaces.
pub fn hosts() -> Vec<UnderlayHost> {
    let mut out: Vec<UnderlayHost> = host::netns_list()
        .iter()
        .filter_map(|ns| ns.strip_prefix(SHARED_PREFIX))
        .filter(|n| *n != ROUTER && host::valid_host_name(n).is_ok())
        .filter_map(read_host)
        .collect();
    out.sort_by_key(|h| h.index);
    out
}

fn read_host(name: &str) -> Option<UnderlayHost> {
    let out = host::ip_in(&host_ns(name), &["-j", "addr", "show", "dev", HOST_IF]).ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    let link = v.as_array()?.first()?;
    let mtu = link["mtu"].as_u64()? as u32;
    let addr: Ipv4Addr = link["addr_info"]
        .as_array()?
        .iter()
        .find(|a| a["family"] == "inet")?["local"]
        .as_str()?
        .parse()
        .ok()?;
    let [10, 200, index, 2] = addr.octets() else {
        return None;
    };
    Some(UnderlayHost::new(name, index, mtu))
}

/// For hv of host NAME (`SPLITNET_HOST`): fails unless this process runs
/// in the host's namespace, where what hv makes "on the host" belongs.
pub fn check_in_host_ns() -> Result<(), String> {
    let Some(h) = host::instance() else {
        if std::env::var_os(host::HOST_ENV).is_some_and(|v| !v.is_empty()) {
            return Err(format!("{} is not a valid host name", host::HOST_ENV));
        }
        return Ok(());
    };
    let ns = host_ns(h);
    let want = std::fs::metadata(host_ns_file(h))
        .map_err(|e| format!("host {h}: no namespace {ns} ({e})"))?;
    let mine = std::fs::metadata("/proc/self/ns/net").map_err(|e| e.to_string())?;
    use std::os::unix::fs::MetadataExt;
    if (want.dev(), want.ino()) != (mine.dev(), mine.ino()) {
        return Err(format!(
            "hv of host {h} must run inside namespace {ns} (`splitnet --host {h} up` starts it there)"
        ));
    }
    Ok(())
}

/// The underlay as `splitnet underlay status` prints it.
pub fn describe(hosts: &[UnderlayHost]) -> String {
    if hosts.is_empty() {
        return "no underlay is up (`splitnet underlay up NAME...` makes one)\n".into();
    }
    let all = host::netns_list();
    let mut s = format!(
        "underlay: router namespace {}, {} hosts\n",
        router_ns(),
        hosts.len()
    );
    for h in hosts {
        let up = domains_of(&h.name, &all).len();
        s += &format!(
            "  {:<8} namespace {:<18} {}/24 via {}  mtu {}  VTEP {}  {}\n",
            h.name,
            host_ns(&h.name),
            h.addr,
            h.gateway(),
            h.mtu,
            h.vtep(),
            if up > 0 {
                format!("up ({up} namespaces)")
            } else {
                "not up".into()
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_checked_before_anything_is_made() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(check(&v(&[]), 1500).unwrap_err().contains("1 to 250"));
        assert!(check(&v(&["a", "a"]), 1500)
            .unwrap_err()
            .contains("given twice"));
        assert!(check(&v(&["A"]), 1500).unwrap_err().contains("lowercase"));
        assert!(check(&v(&["toolongname"]), 1500).is_err());
        assert!(check(&v(&["underlay"]), 1500)
            .unwrap_err()
            .contains("router"));
        assert!(check(&v(&["a"]), 1279).unwrap_err().contains("1280..=9000"));
        assert!(check(&v(&["a", "b2"]), 9000).is_ok());
    }

    #[test]
    fn addresses_follow_the_index() {
        let h = UnderlayHost::new("b", 2, 1500);
        assert_eq!(h.addr, Ipv4Addr::new(10, 200, 2, 2));
        assert_eq!(h.gateway(), Ipv4Addr::new(10, 200, 2, 1));
        assert_eq!(h.vtep(), Ipv4Addr::new(10, 200, 2, 3));
        assert_eq!(host_ns("b"), "splitnet@b");
        assert_eq!(router_ns(), "splitnet@underlay");
    }
}
