//! hv without root (docs/ARCHITECTURE.md, "Without root"): `splitnet up`
//! run by a user starts hv in a user namespace of the user's own (its uid
//! 0 the user, its other ids the user's subordinate range) and a mount
//! namespace of its own. There hv holds privilege over the namespaces it
//! makes and over nothing of the host's, so what needs the host's network
//! namespace, devices or memory pools is refused by name.

use crate::topology::Topology;
use crate::uplink::UplinkKind;
use std::path::Path;

/// Whether this process runs rootless: in a user namespace other than the
/// host's.
pub fn active() -> bool {
    !jail::in_host_userns()
}

/// Where `ip netns` names namespaces (iproute2's `NETNS_RUN_DIR`).
pub const NETNS_DIR: &str = "/run/netns";

/// Gives hv a `/run/netns` of its own (a tmpfs in its mount namespace),
/// where `ip netns attach` may name the namespaces it makes; the host's
/// stays as it was.
pub fn private_netns_dir() -> Result<(), String> {
    if !Path::new(NETNS_DIR).is_dir() {
        return Err(format!(
            "{NETNS_DIR} does not exist, and only root may make it: as root, `mkdir -p {NETNS_DIR}` (scripts/setup.sh also installs a tmpfiles.d entry that makes it at boot)"
        ));
    }
    sys::jail::mount_tmpfs(NETNS_DIR, "mode=0755").map_err(|e| {
        format!("mounting a private {NETNS_DIR}: {e} (hv must run in a mount namespace of its own: `splitnet up` makes one)")
    })
}

/// Before a rootless hv builds topology `t`: refuses it if it needs the
/// host's root, naming what, then gives hv its own `/run/netns`; a host of
/// a rootless underlay already runs in the underlay's namespaces, whose
/// `/run/netns` names its host. Nothing under root.
pub fn prepare(t: &Topology) -> Result<(), String> {
    if !active() {
        return Ok(());
    }
    let no = refusals(t);
    if !no.is_empty() {
        return Err(format!("without root, {}", no.join("; ")));
    }
    match crate::host::instance() {
        Some(h) if crate::underlay::host_ns_file(h).exists() => Ok(()),
        Some(h) => Err(format!(
            "host {h} is not a host of your underlay: `splitnet underlay up {h} ...` first"
        )),
        None => private_netns_dir(),
    }
}

/// What topology `t` asks for that needs the host's root, each named with
/// why; empty when it can all run rootless.
pub fn refusals(t: &Topology) -> Vec<String> {
    let mut no = Vec::new();
    for p in &t.ports {
        let why = match p.kind {
            UplinkKind::Host | UplinkKind::Macvlan => "takes a host NIC",
            UplinkKind::Nat | UplinkKind::Route => {
                "makes a veth, addresses and firewall rules in the host's network namespace"
            }
            UplinkKind::Vxlan => match (crate::host::instance(), vxlan_evpn(p)) {
                (None, _) => "needs a veth in the host's network namespace (without root, run it on a host of `splitnet underlay up`, with --host)",
                (Some(_), true) => "with evpn = true runs FRR's daemons as user frr, whom your user namespace does not map",
                (Some(_), false) => continue,
            },
            UplinkKind::Wire | UplinkKind::Pasta => continue,
        };
        let instead = match p.kind {
            UplinkKind::Nat => {
                " (kind = \"pasta\" masquerades the subnet in a namespace of yours instead)"
            }
            _ => "",
        };
        no.push(format!(
            "the {} uplink of {} {why}, which needs root{instead}",
            p.kind.as_str(),
            p.driver
        ));
    }
    for d in t.domains.iter().filter(|d| d.hugepages) {
        no.push(format!(
            "domain {}: hugepages = true changes the host's huge-page settings (shared memory's transparent huge pages, or the hugetlb pool), which needs root",
            d.name
        ));
    }
    no
}

/// Whether port `p` asks for EVPN.
fn vxlan_evpn(p: &crate::topology::port::PortConfig) -> bool {
    p.evpn.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_needs_root_is_refused_by_name_and_a_wire_is_not() {
        let t: Topology = toml::from_str(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\nhugepages = true\n\
             [[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\n\
             [[port]]\ndriver = \"drv\"\nkind = \"host\"\niface = \"eth9\"\n\
             [wire]\nname = \"wire\"\ndriver = \"drv\"\n",
        )
        .unwrap();
        let no = refusals(&t);
        assert_eq!(no.len(), 3, "{no:?}");
        assert!(no[0].contains("nat uplink of drv") && no[0].contains("needs root"));
        assert!(no[0].contains("kind = \"pasta\""), "{}", no[0]);
        assert!(no[1].contains("host uplink of drv"));
        assert!(no[2].contains("domain drv: hugepages"));
        let wire: Topology =
            toml::from_str("[[domain]]\nname = \"drv\"\nkind = \"driver\"\n[wire]\nname = \"w\"\ndriver = \"drv\"\n")
                .unwrap();
        assert!(refusals(&wire).is_empty());
    }
}
