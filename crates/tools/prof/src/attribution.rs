//! Which domain a sample belongs to, from its pid.
//!
//! Every splitnet domain runs in its own cgroup `.../splitnet/<name>`, so the
//! task's cgroup names the domain. The hv daemon is known by its pid, pid 0
//! is the idle task, and everything else is the host. A kernel-mode sample
//! belongs to the domain whose task was running (Xenoprof charges a guest's
//! kernel to the guest).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// What kind of place a sample was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DomainKind {
    /// The hv daemon (the hypervisor).
    Hv,
    /// A splitnet domain (driver domain or guest), found by its cgroup.
    Domain,
    /// The idle task (pid 0).
    Idle,
    /// Any other process on the host.
    Host,
}

/// A domain a sample is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Domain {
    /// `hv`, `idle`, `host`, or the domain's name.
    pub name: String,
    /// Its kind.
    pub kind: DomainKind,
}

impl Domain {
    /// The hypervisor.
    pub fn hv() -> Domain {
        Domain {
            name: "hv".into(),
            kind: DomainKind::Hv,
        }
    }
    /// The idle task.
    pub fn idle() -> Domain {
        Domain {
            name: "idle".into(),
            kind: DomainKind::Idle,
        }
    }
    /// Anything that is not splitnet.
    pub fn host() -> Domain {
        Domain {
            name: "host".into(),
            kind: DomainKind::Host,
        }
    }
    /// A named splitnet domain.
    pub fn named(name: &str) -> Domain {
        Domain {
            name: name.into(),
            kind: DomainKind::Domain,
        }
    }
    /// Whether samples here count as attributed (everything but `host`).
    pub fn is_attributed(&self) -> bool {
        self.kind != DomainKind::Host
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The splitnet domain named by the contents of a `/proc/<pid>/cgroup` file,
/// if any line's path has a `splitnet/<name>` component pair.
pub fn domain_from_cgroup(contents: &str) -> Option<String> {
    for line in contents.lines() {
        // hierarchy-id:controllers:path
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        if let Some(i) = parts.iter().position(|p| *p == "splitnet") {
            if let Some(name) = parts.get(i + 1) {
                return Some((*name).to_string());
            }
        }
    }
    None
}

/// The device side of an emulated NIC a process is, from its command line
/// (`splitnet-domain vmapp ...` or `splitnet-domain hvm-dm ...`): `vmapp` or `dm`. These
/// run in their guest's cgroup but the driver domain's namespace; a profile
/// names them `<guest>/vmapp` and `<guest>/dm`.
pub fn device_side_from_cmdline(cmdline: &[u8]) -> Option<&'static str> {
    let mut args = cmdline.split(|&b| b == 0);
    let exe = args.next()?;
    if !exe.ends_with(b"splitnet-domain") {
        return None;
    }
    match args.next()? {
        b"vmapp" => Some("vmapp"),
        b"hvm-dm" => Some("dm"),
        _ => None,
    }
}

/// Maps pids to domains, caching each answer (a process does not change
/// cgroup while a profile runs; one that exits keeps its last answer).
#[derive(Debug, Default)]
pub struct Attributor {
    hv_pid: Option<u32>,
    cache: HashMap<u32, Domain>,
    /// Network namespaces splitnet created (`/run/netns/splitnet-<name>`),
    /// by their `net:[inode]` link text, with the domain or host name.
    netns: HashMap<String, String>,
}

/// The `net:[inode]` identities of the named network namespaces that start
/// with `prefix`, each with the rest of its name (the domain).
fn splitnet_netns(prefix: &str) -> HashMap<String, String> {
    use std::os::unix::fs::MetadataExt;
    let mut m = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return m;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(short) = name.strip_prefix(prefix) else {
            continue;
        };
        if let Ok(md) = std::fs::metadata(e.path()) {
            m.insert(format!("net:[{}]", md.ino()), short.to_string());
        }
    }
    m
}

impl Attributor {
    /// An attributor that knows the hv daemon's pid, if given, and names
    /// the domains whose namespaces start with `netns_prefix`.
    pub fn new(hv_pid: Option<u32>, netns_prefix: &str) -> Attributor {
        Attributor {
            hv_pid,
            cache: HashMap::new(),
            netns: splitnet_netns(netns_prefix),
        }
    }

    /// Learns a pid's domain ahead of time (e.g. read while it was alive).
    pub fn insert(&mut self, pid: u32, domain: Domain) {
        self.cache.insert(pid, domain);
    }

    /// Reads the cgroups of every live process now, so that short-lived
    /// processes are known before they exit.
    pub fn prime(&mut self) {
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                    self.domain_of(pid);
                }
            }
        }
    }

    /// The domain of `pid`.
    pub fn domain_of(&mut self, pid: u32) -> Domain {
        if let Some(d) = self.cache.get(&pid) {
            return d.clone();
        }
        let d = if pid == 0 {
            Domain::idle()
        } else if Some(pid) == self.hv_pid {
            Domain::hv()
        } else {
            // A domain's own processes are in its cgroup; applications a
            // user started in its network namespace (`splitnet exec`), and
            // the wire host's, belong to whoever owns that namespace.
            let by_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|s| domain_from_cgroup(&s));
            let by_netns = || {
                let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
                self.netns.get(link.to_str()?).cloned()
            };
            let side = || {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                device_side_from_cmdline(&cmdline)
            };
            match by_cgroup {
                Some(n) => match side() {
                    Some(s) => Domain::named(&format!("{n}/{s}")),
                    None => Domain::named(&n),
                },
                None => match by_netns() {
                    Some(n) => Domain::named(&n),
                    None => Domain::host(),
                },
            }
        };
        self.cache.insert(pid, d.clone());
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths() {
        assert_eq!(
            domain_from_cgroup("0::/splitnet/dom1\n").as_deref(),
            Some("dom1")
        );
        assert_eq!(
            domain_from_cgroup("12:cpu,cpuacct:/splitnet/drv0\n0::/user.slice\n").as_deref(),
            Some("drv0")
        );
        assert_eq!(domain_from_cgroup("0::/system.slice/ssh.service\n"), None);
        assert_eq!(domain_from_cgroup("0::/splitnet\n"), None);
    }

    #[test]
    fn device_sides_by_command_line() {
        let side = |c: &str| device_side_from_cmdline(c.replace(' ', "\0").as_bytes());
        assert_eq!(side("/x/splitnet-domain vmapp --guest g1"), Some("vmapp"));
        assert_eq!(side("/x/splitnet-domain hvm-dm --guest g1"), Some("dm"));
        assert_eq!(side("/x/splitnet-domain"), None);
        assert_eq!(side("/x/splitnet vmapp --guest g1"), None);
        assert_eq!(side("/usr/bin/iperf3 vmapp"), None);
        assert_eq!(side(""), None);
    }

    #[test]
    fn special_pids() {
        let mut a = Attributor::new(Some(std::process::id()), "splitnet-");
        assert_eq!(a.domain_of(0), Domain::idle());
        assert_eq!(a.domain_of(std::process::id()), Domain::hv());
        // A pid that cannot exist is the host.
        assert_eq!(a.domain_of(u32::MAX - 1), Domain::host());
        a.insert(77, Domain::named("g1"));
        assert_eq!(a.domain_of(77).kind, DomainKind::Domain);
    }
}
