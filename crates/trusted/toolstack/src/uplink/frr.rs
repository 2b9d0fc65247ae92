//! EVPN's control plane for a driver domain's evpn ports: FRR's zebra
//! (reads the kernel's VXLAN devices and FDB, installs remote MACs and
//! flood lists) and bgpd (iBGP to each peer, `address-family l2vpn evpn`,
//! `advertise-all-vni`: type-3 routes find the VTEPs, type-2 routes carry
//! the MACs; RFC 7432, RFC 8365). They run in the driver domain's
//! namespace, started, restarted and stopped by hv, with the namespace's
//! name as FRR's pathspace (`-N`): `vtysh -N <namespace>` reads them.

use super::journal::{record, Undo};
use super::procs::{Daemon, Ready};
use super::vxlan::{Mode, Vxlan};
use super::Uplinks;
use crate::host::netns_name;
use std::fmt::Write;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// Where Debian's frr installs its daemons.
const FRR_BIN: &str = "/usr/lib/frr";
/// FRR's state directory: `<this>/<pathspace>` holds a pathspace's sockets
/// and pid files.
pub const STATE_DIR: &str = "/var/run/frr";

/// The daemons hv runs, in start order, with the socket that says each is
/// ready.
const DAEMONS: [(&str, &str); 2] = [("zebra", "zserv.api"), ("bgpd", "bgpd.vty")];

/// Refuses evpn without FRR's daemons.
pub(super) fn installed() -> Result<(), String> {
    installed_in(Path::new(FRR_BIN))
}

/// Refuses evpn without FRR's daemons in `dir`.
fn installed_in(dir: &Path) -> Result<(), String> {
    for (d, _) in DAEMONS {
        let p = dir.join(d);
        if !p.exists() {
            return Err(format!(
                "evpn = true needs FRR's zebra and bgpd, but {} is missing: install Debian's frr",
                p.display()
            ));
        }
    }
    Ok(())
}

/// FRR's state directory for namespace `ns`.
pub fn state_dir(ns: &str) -> PathBuf {
    Path::new(STATE_DIR).join(ns)
}

/// zebra's configuration: resolve the peers' next hops through the
/// default route (`ul0`'s).
fn zebra_conf(host: &str) -> String {
    format!("frr defaults datacenter\nhostname {host}\nip nht resolve-via-default\n")
}

/// bgpd's configuration: iBGP in AS `asn` to each peer with 1 s keepalives
/// and reconnects, EVPN only, every local VNI advertised.
fn bgpd_conf(host: &str, router_id: Ipv4Addr, asn: u32, peers: &[Ipv4Addr]) -> String {
    let mut c = format!(
        "frr defaults datacenter\nhostname {host}\nrouter bgp {asn}\n bgp router-id {router_id}\n no bgp default ipv4-unicast\n"
    );
    for p in peers {
        let _ = write!(
            c,
            " neighbor {p} remote-as internal\n neighbor {p} timers 1 3\n neighbor {p} timers connect 1\n"
        );
    }
    c += " address-family l2vpn evpn\n";
    for p in peers {
        let _ = writeln!(c, "  neighbor {p} activate");
    }
    c += "  advertise-all-vni\n exit-address-family\n";
    c
}

impl Uplinks {
    /// Starts zebra and bgpd for driver domain `driver` if it has evpn
    /// ports (after their devices exist), each supervised.
    pub(super) fn evpn(&self, driver: &str) -> Result<(), String> {
        let ups = self.of(driver);
        let evpn: Vec<&Vxlan> = ups
            .iter()
            .filter_map(|u| u.vxlan.as_ref())
            .filter(|x| x.mode == Mode::Evpn)
            .collect();
        let Some(first) = evpn.first() else {
            return Ok(());
        };
        let mut peers: Vec<Ipv4Addr> = Vec::new();
        for p in evpn.iter().flat_map(|x| &x.peers) {
            if !peers.contains(p) {
                peers.push(*p);
            }
        }
        let ns = netns_name(driver);
        let state = state_dir(&ns);
        record(
            &self.run_dir,
            driver,
            Undo::Dir {
                path: state.display().to_string(),
            },
        )?;
        let confs = [
            zebra_conf(driver),
            bgpd_conf(driver, first.local, first.asn, &peers),
        ];
        for ((d, ready), conf) in DAEMONS.into_iter().zip(confs) {
            let file = self.run_dir.join(format!("frr-{driver}-{d}.conf"));
            fs::write(&file, conf).map_err(|e| format!("{}: {e}", file.display()))?;
            self.run_daemon(self.frr_daemon(driver, d, &file, state.join(ready)))
                .map_err(|e| format!("{driver}'s FRR: {e}"))?;
        }
        Ok(())
    }

    /// FRR daemon `d` of driver domain `driver`, in its namespace, with
    /// configuration `conf`: as user frr, no TCP vty (nothing in the
    /// namespace but hv reaches its configuration), logging to its log in
    /// the run directory.
    fn frr_daemon(&self, driver: &str, d: &str, conf: &Path, ready: PathBuf) -> Daemon {
        let ns = netns_name(driver);
        let pid_file = state_dir(&ns).join(format!("{d}.pid"));
        let args = [
            "netns",
            "exec",
            &ns,
            &format!("{FRR_BIN}/{d}"),
            "-N",
            &ns,
            "-f",
            &conf.display().to_string(),
            "-i",
            &pid_file.display().to_string(),
            "-u",
            "frr",
            "-g",
            "frr",
            "-P",
            "0",
            "--log",
            "stdout",
        ]
        .map(String::from)
        .to_vec();
        Daemon {
            name: d.to_string(),
            owner: driver.to_string(),
            program: "ip".into(),
            args,
            pid_file,
            log: self.run_dir.join(format!("frr-{driver}-{d}.log")),
            run_dir: self.run_dir.clone(),
            ready: Ready::Path(ready),
            package: "frr".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bgpd_peers_each_neighbour_for_evpn_only() {
        let peers = ["10.200.2.3".parse().unwrap(), "10.200.3.3".parse().unwrap()];
        let c = bgpd_conf("drv", "10.200.1.3".parse().unwrap(), 65001, &peers);
        assert!(
            c.contains("router bgp 65001\n bgp router-id 10.200.1.3\n"),
            "{c}"
        );
        assert!(c.contains(" no bgp default ipv4-unicast\n"), "{c}");
        for p in ["10.200.2.3", "10.200.3.3"] {
            for l in [
                format!(" neighbor {p} remote-as internal\n"),
                format!(" neighbor {p} timers 1 3\n"),
                format!(" neighbor {p} timers connect 1\n"),
                format!("  neighbor {p} activate\n"),
            ] {
                assert!(c.contains(&l), "{c} lacks {l:?}");
            }
        }
        assert!(
            c.ends_with("  advertise-all-vni\n exit-address-family\n"),
            "{c}"
        );
        assert!(zebra_conf("drv").contains("ip nht resolve-via-default\n"));
    }

    #[test]
    fn evpn_without_frr_is_refused_with_what_to_install() {
        let dir = std::env::temp_dir().join(format!("splitnet-nofrr-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("zebra"), "").unwrap();
        let e = installed_in(&dir).unwrap_err();
        assert!(e.contains("bgpd is missing: install Debian's frr"), "{e}");
        fs::write(dir.join("bgpd"), "").unwrap();
        assert_eq!(installed_in(&dir), Ok(()));
        let _ = fs::remove_dir_all(&dir);
    }
}
