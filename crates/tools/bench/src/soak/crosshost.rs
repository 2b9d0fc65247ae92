//! The soak's traffic between hosts: two hosts of an underlay (`splitnet
//! underlay up a b`), each its own splitnet whose driver domain has a
//! vxlan port that learns the other's MACs over BGP EVPN (FRR's zebra and
//! bgpd in the driver domain's namespace, supervised by that host's hv),
//! and a checked TCP stream from guest1 on host a to guest1 on host b.
//! Its faults hit host a's BGP:
//!
//! - **bgpd killed**: SIGKILL; its hv starts it again, and the peers set
//!   up their session and exchange their routes anew;
//! - **BGP dropped**: an nftables rule in host a's driver domain drops
//!   every BGP segment both ways for longer than the sessions' 3 s hold
//!   time, so both ends tear their session down and withdraw what they
//!   learned; the rule then goes, and the sessions come back.
//!
//! Either way the stream may pause; it must lose nothing.

use super::Lab;
use crate::multihost::{self, Mode};
use anyhow::{anyhow, bail, Context, Result};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The underlay's hosts: a sends, b receives.
pub const HOSTS: [&str; 2] = ["a", "b"];
/// The host whose BGP the faults hit.
const FAULTED: &str = "a";
/// The nftables table that drops BGP while it exists.
const DROP_TABLE: &str = "splitnet_soak_bgp";
/// How long the hosts' guests may take to reach each other (EVPN's routes
/// first).
const REACH_LIMIT: Duration = Duration::from_secs(60);

/// Domain `dom` on underlay host `host`, as a flow names its ends.
pub fn remote(host: &str, dom: &str) -> String {
    format!("{host}/{dom}")
}

/// The namespace of a flow's end: a remote domain's on its host
/// ([`remote`]), else this instance's domain's.
pub fn netns_of(end: &str) -> String {
    match end.split_once('/') {
        Some((h, d)) => format!("{}{h}-{d}", toolstack::host::SHARED_PREFIX),
        None => toolstack::host::netns_name(end),
    }
}

/// The hosts, up; taken down (and the underlay with them) when dropped.
pub struct CrossHost {
    exe: PathBuf,
    run_dir: PathBuf,
    up: Vec<&'static str>,
    underlay: bool,
    /// guest1 of host b, the stream's server.
    pub server_ip: Ipv4Addr,
}

impl CrossHost {
    /// The underlay and both hosts up, guest1 on a reaching guest1 on b;
    /// refused if an underlay is already up (it is not the soak's).
    pub fn up(exe: &Path, run_dir: &Path) -> Result<CrossHost> {
        let mut args = vec!["underlay", "up"];
        args.extend(HOSTS);
        crate::splitnet(exe, run_dir, &args).context("the cross-host underlay")?;
        let mut x = CrossHost {
            exe: exe.into(),
            run_dir: run_dir.into(),
            up: Vec::new(),
            underlay: true,
            server_ip: Ipv4Addr::UNSPECIFIED,
        };
        let hosts = toolstack::underlay::hosts();
        if hosts.len() != HOSTS.len() {
            bail!(
                "the underlay has {} hosts, not {}",
                hosts.len(),
                HOSTS.len()
            );
        }
        x.server_ip = Ipv4Addr::new(10, 77, 0, hosts[1].index as u8);
        for (i, h) in HOSTS.into_iter().enumerate() {
            let dir = run_dir.join(h);
            std::fs::create_dir_all(&dir)?;
            let file = dir.join("soak-crosshost.toml");
            std::fs::write(&file, multihost::topology(&hosts, i, Mode::Evpn))?;
            x.up.push(h);
            x.on(h, &["up", "--config", &file.to_string_lossy()])?;
        }
        x.reach()
            .context("guest1 on host a reaching guest1 on host b over EVPN")?;
        Ok(x)
    }

    /// `splitnet --host HOST ARGS`, with the host's own run directory.
    fn on(&self, host: &str, args: &[&str]) -> Result<String> {
        let mut a = vec!["--host", host];
        a.extend_from_slice(args);
        crate::splitnet(&self.exe, &self.run_dir.join(host), &a)
    }

    /// Waits until guest1 on a reaches guest1 on b.
    fn reach(&self) -> Result<()> {
        let ns = netns_of(&remote(HOSTS[0], "guest1"));
        crate::netenv::wait_reachable(&ns, &self.server_ip.to_string(), REACH_LIMIT)
    }

    /// Takes down the hosts that are up, then the underlay; the first error.
    fn down(&mut self) -> Result<()> {
        let mut first = Ok(());
        for h in std::mem::take(&mut self.up) {
            if let Err(e) = self.on(h, &["down"]) {
                first = first.and(Err(e));
            }
        }
        if std::mem::take(&mut self.underlay) {
            let r = crate::splitnet(&self.exe, &self.run_dir, &["underlay", "down"]);
            first = first.and(r.map(drop));
        }
        first
    }
}

impl Drop for CrossHost {
    fn drop(&mut self) {
        if let Err(e) = self.down() {
            eprintln!("bench soak: taking the cross-host underlay down: {e:#}");
        }
    }
}

/// The faulted host's driver domain's namespace.
fn faulted_ns() -> String {
    netns_of(&remote(FAULTED, "drv"))
}

/// The pid in bgpd's pid file for the faulted host, if it names a live
/// process.
fn bgpd_pid() -> Option<i32> {
    let file = toolstack::uplink::frr::state_dir(&faulted_ns()).join("bgpd.pid");
    let pid: i32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    (pid > 0 && Path::new(&format!("/proc/{pid}")).exists()).then_some(pid)
}

/// An nftables script in the faulted host's driver domain, all or nothing.
fn nft(script: &str) -> Result<()> {
    toolstack::uplink::nft_script_in(Some(&faulted_ns()), script)
        .map_err(|e| anyhow!("nft in {}: {e}", faulted_ns()))
}

impl Lab {
    /// SIGKILL of host a's bgpd; returns once its hv runs a new one and
    /// guest1 on a reaches guest1 on b again.
    pub(super) fn kill_bgpd(&self) -> Result<String> {
        let old = bgpd_pid().ok_or_else(|| anyhow!("host {FAULTED}'s bgpd is not running"))?;
        let t0 = Instant::now();
        super::events::signal("KILL", old)?;
        let deadline = t0 + REACH_LIMIT;
        let new = loop {
            match bgpd_pid() {
                Some(p) if p != old => break p,
                _ if Instant::now() > deadline => {
                    bail!("host {FAULTED}'s bgpd was not running again {REACH_LIMIT:?} after its kill")
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let again = t0.elapsed();
        self.cross.reach()?;
        Ok(format!(
            "host {FAULTED}'s bgpd (pid {old}) killed; running again as pid {new} after {:.0} ms; guest1 on {FAULTED} reached guest1 on {} again (pings of 1 s) {:.0} ms after the kill",
            again.as_secs_f64() * 1e3,
            HOSTS[1],
            t0.elapsed().as_secs_f64() * 1e3
        ))
    }

    /// Drops host a's BGP both ways for `ms`, then lets it through again;
    /// returns once guest1 on a reaches guest1 on b again.
    pub(super) fn drop_bgp(&self, ms: u64) -> Result<String> {
        let chain = |name: &str, hook: &str| {
            format!(
                "  chain {name} {{\n    type filter hook {hook} priority 0;\n    tcp dport 179 drop\n    tcp sport 179 drop\n  }}\n"
            )
        };
        let table = format!(
            "table inet {DROP_TABLE} {{\n{}{}}}\n",
            chain("i", "input"),
            chain("o", "output")
        );
        nft(&table)?;
        std::thread::sleep(Duration::from_millis(ms));
        nft(&format!("delete table inet {DROP_TABLE}\n"))?;
        let t0 = Instant::now();
        self.cross.reach()?;
        Ok(format!(
            "host {FAULTED}'s BGP dropped both ways for {ms} ms (the hold time is 3 s); guest1 on {FAULTED} reached guest1 on {} again (pings of 1 s) {:.0} ms after",
            HOSTS[1],
            t0.elapsed().as_secs_f64() * 1e3
        ))
    }
}
