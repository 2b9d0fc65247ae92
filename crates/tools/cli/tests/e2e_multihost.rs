//! Several splitnet hosts on one machine: the underlay (a namespace per
//! host, routed through a router namespace) and independent instances
//! (`splitnet --host NAME`), each with its own hv, run directory and
//! namespaces.

mod common;

use common::Env;
use std::process::{Command, Output};

/// An underlay of `hosts` and the environment lock; every host is taken
/// down, then the underlay, when dropped.
struct Lab {
    env: Env,
    hosts: Vec<String>,
}

impl Lab {
    fn new(name: &str, hosts: &[&str]) -> Option<Lab> {
        let env = Env::new(name)?;
        let lab = Lab {
            env,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        };
        lab.clear();
        let mut args = vec!["underlay", "up"];
        args.extend_from_slice(hosts);
        lab.env.ok(&args);
        Some(lab)
    }

    /// What an earlier failed run left: its hosts' instances, then the
    /// underlay.
    fn clear(&self) {
        for h in common::shared_netns()
            .iter()
            .filter_map(|n| n.strip_prefix("splitnet@"))
            .filter(|n| !n.contains('-') && *n != "underlay")
        {
            self.on(h, &["down"]);
        }
        self.env.splitnet(&["underlay", "down"]);
    }

    /// `splitnet --host HOST ARGS` with that host's own run directory.
    fn on(&self, host: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .args(["--host", host, "--run-dir"])
            .arg(self.env.run_dir.join(host))
            .args(args)
            .output()
            .expect("run splitnet")
    }

    fn ok(&self, host: &str, args: &[&str]) -> String {
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

    /// `ping -c 3` from `domain` of `host` to `to`, with no loss.
    fn ping(&self, host: &str, domain: &str, to: &str) {
        let out = self.ok(
            host,
            &[
                "exec", domain, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", to,
            ],
        );
        assert!(
            out.contains(" 0% packet loss"),
            "{host}/{domain} -> {to}:\n{out}"
        );
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

/// The namespaces of `host`'s instance.
fn namespaces_of(host: &str) -> Vec<String> {
    let p = format!("splitnet@{host}-");
    common::shared_netns()
        .into_iter()
        .filter(|n| n.starts_with(&p))
        .collect()
}

#[test]
fn two_hosts_run_side_by_side_and_each_cleans_only_its_own() {
    let Some(lab) = Lab::new("mh-two", &["a", "b"]) else {
        return;
    };
    // The underlay routes between hosts: one hop, TTL 64 - 1.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            "splitnet@a",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "10.200.2.2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ttl=63"), "{text}");
    let st = lab.env.ok(&["underlay", "status"]);
    assert!(
        st.contains("10.200.1.2/24") && st.contains("10.200.2.2/24"),
        "{st}"
    );
    for h in ["a", "b"] {
        let up = lab.ok(h, &["up"]);
        assert!(up.contains("splitnet is up"), "{up}");
    }
    assert!(namespaces_of("a").contains(&"splitnet@a-guest1".to_string()));
    assert!(namespaces_of("b").contains(&"splitnet@b-guest1".to_string()));
    // The default instance sees none of them.
    assert_eq!(common::netns(), Vec::<String>::new());
    for h in ["a", "b"] {
        lab.ping(h, "guest1", "10.77.0.254");
    }
    // hv of a host runs in the host's namespace.
    let st: serde_json::Value = serde_json::from_str(&lab.ok("a", &["status", "--json"])).unwrap();
    let hv_pid = st["hv_pid"].as_u64().expect("hv's pid");
    let ns = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert_eq!(
        ns(&format!("/proc/{hv_pid}/ns/net")).unwrap(),
        ns("/run/netns/splitnet@a").unwrap()
    );
    // The underlay stays while a host is up.
    let o = lab.env.splitnet(&["underlay", "down"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("a, b"), "{err}");
    // One host's down leaves the other's domains alone.
    lab.ok("a", &["down"]);
    assert_eq!(namespaces_of("a"), Vec::<String>::new());
    lab.ping("b", "guest1", "10.77.0.254");
    lab.ok("b", &["down"]);
    lab.env.ok(&["underlay", "down"]);
    assert_eq!(common::shared_netns(), Vec::<String>::new());
    assert_eq!(host_cgroups(), Vec::<String>::new(), "cgroups left behind");
    common::assert_nothing_left();
}

/// Cgroups of host instances (`splitnet@NAME`) in any hierarchy.
fn host_cgroups() -> Vec<String> {
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

#[test]
fn bad_hosts_are_refused_clearly() {
    let Some(lab) = Lab::new("mh-bad", &["a"]) else {
        return;
    };
    let o = lab.env.splitnet(&["underlay", "up", "c"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("already up (hosts: a)"),
        "{err}"
    );
    let o = lab.on("zz", &["up"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("splitnet underlay up zz"),
        "{err}"
    );
    let o = lab.on("Bad", &["status"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("lowercase"), "{err}");
    assert_eq!(namespaces_of("zz"), Vec::<String>::new());
}
