//! The container's side: addresses, routes and the link in its network
//! namespace (`CNI_NETNS`), set, checked and removed with `ip` under
//! `nsenter`, as the reference plugins do with netlink.

use crate::error::{CniError, Result, IO_FAILURE};
use serde_json::Value;
use std::process::Command;

/// Runs `ip args` in namespace `netns`; its standard output.
fn ip(netns: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(["--", "ip"])
        .args(args)
        .output()
        .map_err(|e| CniError::new(IO_FAILURE, "running ip", e.to_string()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(CniError::new(
        IO_FAILURE,
        "configuring the container's interface",
        format!(
            "ip {} in {netns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    ))
}

/// `CNI_NETNS` names a namespace file (nsfs), checked before anything is
/// asked of hv or IPAM.
pub fn check_netns(netns: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let bad = |d: String| CniError::new(crate::error::INVALID_ENV, "invalid CNI_NETNS", d);
    let m = std::fs::metadata(netns).map_err(|e| bad(format!("CNI_NETNS={netns}: {e}")))?;
    let nsfs = std::fs::metadata("/proc/self/ns/net").map_err(|e| bad(e.to_string()))?;
    if m.dev() != nsfs.dev() {
        return Err(bad(format!("CNI_NETNS={netns} is not a namespace")));
    }
    Ok(())
}

/// Gives `ifname` the lease's addresses, brings it up, and adds the
/// lease's routes (through each address's gateway where a route has none).
pub fn configure(netns: &str, ifname: &str, ips: &[Value], routes: &[Value]) -> Result<()> {
    for a in ips.iter().filter_map(|i| i["address"].as_str()) {
        let mut args = vec!["addr", "add", a, "dev", ifname];
        if a.contains(':') {
            args.push("nodad");
        }
        ip(netns, &args)?;
    }
    ip(netns, &["link", "set", "dev", ifname, "up"])?;
    for r in routes {
        let Some(dst) = r["dst"].as_str() else {
            continue;
        };
        let v6 = dst.contains(':');
        let gw = r["gw"]
            .as_str()
            .map(str::to_string)
            .or_else(|| gateway(ips, v6));
        let mut args = vec!["route", "add", dst, "dev", ifname];
        if let Some(g) = gw.as_deref() {
            args.extend(["via", g]);
        }
        ip(netns, &args)?;
    }
    Ok(())
}

/// The first gateway of the lease's addresses of one IP version.
fn gateway(ips: &[Value], v6: bool) -> Option<String> {
    ips.iter()
        .filter(|i| i["address"].as_str().is_some_and(|a| a.contains(':') == v6))
        .find_map(|i| i["gateway"].as_str().map(str::to_string))
}

/// CHECK: `ifname` is up with `mac`, every address of the previous result
/// is on it and every route is in place.
pub fn check(
    netns: &str,
    ifname: &str,
    mac: Option<&str>,
    ips: &[Value],
    routes: &[Value],
) -> Result<()> {
    let bad = |what: String| {
        CniError::new(
            IO_FAILURE,
            "the container's interface is not as ADD left it",
            what,
        )
    };
    let link = ip(netns, &["-o", "link", "show", "dev", ifname])
        .map_err(|e| bad(format!("{ifname}: {}", e.details)))?;
    if !link.contains(",UP") {
        return Err(bad(format!("{ifname} is down")));
    }
    if let Some(m) = mac.filter(|m| !link.to_lowercase().contains(&m.to_lowercase())) {
        return Err(bad(format!("{ifname} does not have MAC {m}")));
    }
    let addrs = ip(netns, &["-o", "addr", "show", "dev", ifname])?;
    for a in ips.iter().filter_map(|i| i["address"].as_str()) {
        if !addrs.split_whitespace().any(|w| w == a) {
            return Err(bad(format!("{ifname} lacks address {a}")));
        }
    }
    for dst in routes.iter().filter_map(|r| r["dst"].as_str()) {
        let family = if dst.contains(':') { "-6" } else { "-4" };
        let shown = if dst == "0.0.0.0/0" || dst == "::/0" {
            "default"
        } else {
            dst
        };
        let table = ip(netns, &[family, "route", "show", "dev", ifname])?;
        if !table
            .lines()
            .any(|l| l.split_whitespace().next() == Some(shown))
        {
            return Err(bad(format!("no route to {dst} through {ifname}")));
        }
    }
    Ok(())
}

/// The TAP `ifname` left in `netns` by an attachment hv no longer knows
/// (hv restarted): deleted if it is there and a splitnet domain's (owned by
/// a domain's uid); any other interface of that name is not ours to touch.
/// The namespace may be gone.
pub fn remove_tap(netns: &str, ifname: &str) {
    if netns.is_empty() || !std::path::Path::new(netns).exists() {
        return;
    }
    let Ok(shown) = ip(netns, &["-d", "-j", "link", "show", "dev", ifname]) else {
        return;
    };
    if is_domains_tap(&shown) {
        let _ = ip(netns, &["tuntap", "del", "dev", ifname, "mode", "tap"]);
    }
}

/// Whether `ip -d -j link show` output is of a TAP a splitnet domain owns.
fn is_domains_tap(shown: &str) -> bool {
    let v: Value = serde_json::from_str(shown).unwrap_or(Value::Null);
    let link = &v[0]["linkinfo"];
    let owner = link["info_data"]["user"].as_u64().unwrap_or(0);
    link["info_kind"] == "tun"
        && link["info_data"]["type"] == "tap"
        && owner >= u64::from(hypercall::launch::DOMAIN_UID_BASE)
}

#[cfg(test)]
mod tests {
    use super::is_domains_tap;

    #[test]
    fn only_a_domains_tap_is_deleted() {
        let tap = |kind: &str, user: u64| {
            format!(
                r#"[{{"linkinfo": {{"info_kind": "tun", "info_data": {{"type": "{kind}", "user": {user}}}}}}}]"#
            )
        };
        assert!(is_domains_tap(&tap("tap", 1_000_000_002)));
        assert!(!is_domains_tap(&tap("tap", 1000)), "a user's TAP");
        assert!(!is_domains_tap(&tap("tun", 1_000_000_002)));
        assert!(!is_domains_tap(r#"[{"linkinfo": {"info_kind": "veth"}}]"#));
        assert!(!is_domains_tap("[]"));
    }
}
