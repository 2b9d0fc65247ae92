//! Several hosts for the multi-host tests: an underlay of hosts (`splitnet
//! underlay up`), `splitnet --host NAME` commands with a run directory per
//! host, their tunnels' status, and a check that nothing is left.

use super::Env;
use serde_json::Value;
use std::process::{Command, Output};

/// An underlay of `hosts` and the environment lock; every host is taken
/// down, then the underlay, when dropped.
pub struct Lab {
    pub env: Env,
    pub hosts: Vec<String>,
}

impl Lab {
    /// An underlay of `hosts` with links of MTU `mtu`, or None (SKIPPED)
    /// when not root.
    pub fn new(name: &str, hosts: &[&str], mtu: u32) -> Option<Lab> {
        let env = Env::new(name)?;
        let lab = Lab {
            env,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        };
        clear(&lab.env);
        let mtu = mtu.to_string();
        let mut args = vec!["underlay", "up", "--mtu", &mtu];
        args.extend_from_slice(hosts);
        lab.env.ok(&args);
        Some(lab)
    }

    /// `splitnet --host HOST ARGS` with that host's own run directory.
    pub fn on(&self, host: &str, args: &[&str]) -> Output {
        self.command(host, args).output().expect("run splitnet")
    }

    /// The command `splitnet --host HOST ARGS`, not started.
    pub fn command(&self, host: &str, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_splitnet"));
        c.args(["--host", host, "--run-dir"])
            .arg(self.env.run_dir.join(host))
            .args(args);
        c
    }

    /// As [`Lab::on`], and it must succeed; its stdout.
    pub fn ok(&self, host: &str, args: &[&str]) -> String {
        let o = self.on(host, args);
        assert!(
            o.status.success(),
            "splitnet --host {host} {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}\nhv.log:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(self.env.run_dir.join(host).join("hv.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn status(&self, host: &str) -> Value {
        serde_json::from_str(&self.ok(host, &["status", "--json"])).expect("status --json")
    }

    /// The `vxlan` object of `host`'s tunnel port.
    pub fn tunnel(&self, host: &str) -> Value {
        self.status(host)["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["vxlan"].is_object())
            .map(|p| p["vxlan"].clone())
            .unwrap_or_default()
    }

    /// The MACs `host`'s tunnel puts behind `vtep`, as JSON text.
    pub fn macs_behind(&self, host: &str, vtep: &str) -> String {
        let t = self.tunnel(host);
        let peers = t["peers"].as_array().cloned().unwrap_or_default();
        let p = peers.iter().find(|p| p["vtep"] == vtep);
        p.map(|p| p["macs"].to_string()).unwrap_or_default()
    }

    /// Takes every host down, then the underlay; nothing may be left: no
    /// namespace, cgroup, process, FRR daemon or FRR state directory.
    pub fn down_all(&self) {
        for h in &self.hosts {
            self.ok(h, &["down"]);
        }
        self.env.ok(&["underlay", "down"]);
        assert_eq!(super::shared_netns(), Vec::<String>::new());
        assert_eq!(host_cgroups(), Vec::<String>::new(), "cgroups left behind");
        assert_eq!(frr_left(), Vec::<String>::new(), "FRR left behind");
        super::assert_nothing_left();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &self.hosts {
            self.on(h, &["down"]);
        }
        self.env.splitnet(&["underlay", "down"]);
    }
}

/// What an earlier failed run left: its hosts' instances, then the
/// underlay.
pub fn clear(env: &Env) {
    for h in super::shared_netns()
        .iter()
        .filter_map(|n| n.strip_prefix("splitnet@"))
        .filter(|n| !n.contains('-') && *n != "underlay")
    {
        Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .args(["--host", h, "--run-dir"])
            .arg(env.run_dir.join(h))
            .arg("down")
            .output()
            .expect("run splitnet");
    }
    env.splitnet(&["underlay", "down"]);
}

/// Cgroups of host instances (`splitnet@NAME`) in any hierarchy.
pub fn host_cgroups() -> Vec<String> {
    [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/cpuacct",
    ]
    .iter()
    .filter_map(|d| std::fs::read_dir(d).ok())
    .flat_map(|rd| rd.flatten())
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|n| n.starts_with("splitnet@"))
    .collect()
}

/// FRR daemons and state directories of splitnet's driver domains.
pub fn frr_left() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/var/run/frr")
        .into_iter()
        .flat_map(|rd| rd.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("splitnet"))
        .collect();
    v.extend(
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("/usr/lib/frr/") && c.contains("splitnet@")),
    );
    v
}
