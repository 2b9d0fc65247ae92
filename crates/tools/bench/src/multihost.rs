//! Several hosts over the kernel's VXLAN (`splitnet bench multihost`):
//! three hosts on one underlay (`splitnet underlay up a b c`), each with a
//! driver domain whose `vxlan` port (VNI 100) joins its bridge to the other
//! hosts', once with static peers (head-end replication, learning) and once
//! with BGP EVPN (FRR). Measured in each run:
//! - guest → guest TCP and UDP 64 B from host a to host b, each as a ratio
//!   to the same traffic between two plain namespaces over a kernel VXLAN
//!   device (VNI 200) on the same underlay, measured beside it;
//! - what EVPN's extra hop (a kernel bridge and a veth, where zebra reads
//!   the local MACs) costs: static ÷ evpn;
//! - a MAC move, the network side of a live migration: a guest's vif
//!   detached on one host and attached with the same MAC and address on
//!   another, timed from the attach's return until every other host's
//!   guest gets a ping reply (in the first run).

use crate::harness::{self, Args, Output, RunOptions};
use crate::netenv::{self, Flow, Workload};
use crate::plot::{self, Bar};
use crate::stats::{Series, Spread};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::host::{self, SHARED_PREFIX};
use toolstack::underlay::{self, UnderlayHost};

/// Cross-host TCP against native VXLAN: the target ratio.
pub const TCP_TARGET: f64 = 0.60;
/// The median time for a moved MAC to be reachable with EVPN, in seconds.
pub const MOVE_TARGET_S: f64 = 2.0;
/// The hosts, in underlay order (a is 10.200.1.0/24, ...).
const HOSTS: [&str; 3] = ["a", "b", "c"];
/// The guests' segment.
const VNI: u32 = 100;
/// The native reference's segment.
const NATIVE_VNI: u32 = 200;
/// The guests' and the native device's MTU: 1500 less VXLAN's 50 bytes.
const TUNNEL_MTU: &str = "1450";
/// The host end of a native namespace's link, in its host's namespace.
const NATIVE_IF: &str = "nvx0";
/// How long the hosts' guests may take to reach each other after `up`
/// (EVPN: the BGP sessions establish and the routes arrive).
const MESH_LIMIT: Duration = Duration::from_secs(60);
/// How long a moved MAC may take before the move counts as failed.
const MOVE_LIMIT: Duration = Duration::from_secs(20);
/// Ping's interval while timing a move: the resolution of the timing.
const MOVE_PING_INTERVAL: &str = "0.01";
/// The moving vif: guest1 of host a's, at home.
const MOVER_MAC: &str = "00:16:3e:77:01:01";
const MOVER_IP: &str = "10.77.0.1";
/// Where the moving vif lives: host a's guest1, and host b's guest2 (a
/// guest with a vif of its own and no address, so that the moved address
/// has one way out).
const HOME: Spot = Spot {
    host: "a",
    guest: "guest1",
};
const AWAY: Spot = Spot {
    host: "b",
    guest: "guest2",
};
/// The guests that ping the moved address: guest1 of b and c (a's guest1
/// is the mover itself).
const PINGERS: [Spot; 2] = [
    Spot {
        host: "b",
        guest: "guest1",
    },
    Spot {
        host: "c",
        guest: "guest1",
    },
];

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct MultihostOptions {
    /// The options every suite shares.
    pub common: RunOptions,
    /// MAC moves per mode.
    pub moves: usize,
}

impl MultihostOptions {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> MultihostOptions {
        MultihostOptions {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 2 } else { 5 }),
            moves: if quick { 3 } else { 10 },
        }
    }
}

/// How the driver domains find each other and the MACs behind each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Head-end replication to a static peer list; MACs learned from
    /// traffic.
    Static,
    /// BGP EVPN: type-3 routes find the VTEPs, type-2 routes carry the MACs.
    Evpn,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Static, Mode::Evpn];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::Evpn => "evpn",
        }
    }
}

/// One flow of one run: splitnet's guests and the native namespaces, in
/// the workload's unit.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub run: usize,
    pub mode: Mode,
    pub workload: Workload,
    /// `Gbit/s` (TCP) or `datagrams/s` (UDP 64 B), as received.
    pub unit: &'static str,
    pub splitnet: f64,
    pub native: f64,
}

/// One mode and workload over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct FlowCase {
    pub mode: Mode,
    pub workload: Workload,
    pub unit: &'static str,
    pub splitnet: Series,
    pub native: Series,
    /// splitnet ÷ native within each run.
    pub ratio: Series,
    pub target: Option<f64>,
    pub met: Option<bool>,
}

/// What EVPN's kernel bridge and veth cost: static ÷ evpn within each run.
#[derive(Debug, Clone, Serialize)]
pub struct HopCost {
    pub workload: Workload,
    pub ratio: Series,
}

/// The MAC moves of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct MoveCase {
    pub mode: Mode,
    /// Seconds from the attach's return until every other host's guest
    /// had a reply, each move.
    pub reached: Series,
    /// Seconds from the attach's return until every other host's VXLAN
    /// device sent the MAC to its new VTEP, each move.
    pub learned: Series,
    /// The target applies to EVPN.
    pub target_s: Option<f64>,
    pub met: Option<bool>,
}

/// The suite's report.
#[derive(Debug, Clone, Serialize)]
pub struct MultihostReport {
    pub suite: &'static str,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub wall_seconds: f64,
    pub records: Vec<Record>,
    pub flows: Vec<FlowCase>,
    pub evpn_hop: Vec<HopCost>,
    pub moves: Vec<MoveCase>,
}

/// A guest of a host.
#[derive(Debug, Clone, Copy)]
struct Spot {
    host: &'static str,
    guest: &'static str,
}

impl Spot {
    /// The guest's namespace (`splitnet@HOST-GUEST`).
    fn ns(self) -> String {
        format!("{}-{}", underlay::host_ns(self.host), self.guest)
    }

    /// The address of the host's guest1 (10.77.0.INDEX).
    fn ip(self) -> String {
        format!("10.77.0.{}", host_index(self.host))
    }
}

/// Host `name`'s 1-based index in [`HOSTS`].
fn host_index(name: &str) -> usize {
    HOSTS.iter().position(|h| *h == name).map_or(0, |i| i + 1)
}

/// Fails once Ctrl-C (or SIGTERM) arrived; else prints what comes next.
fn step(opts: &MultihostOptions, what: &str) -> Result<()> {
    if sys::interrupted() {
        bail!("interrupted");
    }
    if opts.common.progress {
        eprintln!("multihost: {what}");
    }
    Ok(())
}

/// Runs the suite. Everything it made goes again at the end, on an error
/// and on Ctrl-C: the hosts' instances, the underlay, the native namespaces.
pub fn run(opts: &MultihostOptions) -> Result<MultihostReport> {
    sys::catch_interrupts().context("catching Ctrl-C")?;
    let started = Instant::now();
    step(
        opts,
        "underlay up (hosts a, b, c) and the native namespaces",
    )?;
    let mut lab = Lab::new(opts)?;
    let (mut records, mut moves) = (Vec::new(), Vec::new());
    let name = |m: &Mode| format!("{} mode", m.name());
    harness::each_run(opts.common.runs, &Mode::ALL, name, |run, &mode| {
        let n = if run == 0 { opts.moves } else { 0 };
        let (r, m) = lab.phase(mode, run, n)?;
        records.extend(r);
        if n > 0 {
            moves.push((mode, m));
        }
        Ok(())
    })?;
    step(opts, "underlay down")?;
    lab.close()?;
    Ok(MultihostReport::new(
        opts,
        started.elapsed().as_secs_f64(),
        records,
        moves,
    ))
}

/// The suite's world: the underlay, the native namespaces, and the hosts
/// that are up; all taken down when dropped.
struct Lab<'a> {
    opts: &'a MultihostOptions,
    hosts: Vec<UnderlayHost>,
    up: Vec<&'static str>,
    native: Option<NativeVxlan>,
    underlay: bool,
}

impl<'a> Lab<'a> {
    /// The underlay and the native namespaces; refused if an underlay is
    /// already up (it is not the suite's to take down).
    fn new(opts: &'a MultihostOptions) -> Result<Lab<'a>> {
        std::fs::create_dir_all(&opts.common.run_dir)?;
        let mut args = vec!["underlay", "up"];
        args.extend(HOSTS);
        crate::splitnet(&opts.common.exe, &opts.common.run_dir, &args)?;
        let mut lab = Lab {
            opts,
            hosts: underlay::hosts(),
            up: Vec::new(),
            native: None,
            underlay: true,
        };
        if lab.hosts.len() != HOSTS.len() {
            bail!("the underlay has {} hosts, not 3", lab.hosts.len());
        }
        lab.native = Some(NativeVxlan::new(&lab.hosts[0], &lab.hosts[1])?);
        let [na, _] = native_ns();
        reach_all(&[(na, native_ip(2))], MESH_LIMIT, Instant::now())
            .context("the native namespaces over their VXLAN")?;
        Ok(lab)
    }

    /// `splitnet --host HOST ARGS`, with the host's own run directory.
    fn on(&self, host: &str, args: &[&str]) -> Result<String> {
        let mut a = vec!["--host", host];
        a.extend_from_slice(args);
        crate::splitnet(
            &self.opts.common.exe,
            &self.opts.common.run_dir.join(host),
            &a,
        )
    }

    /// Every host up in `mode`, measured, and down again.
    fn phase(&mut self, mode: Mode, run: usize, moves: usize) -> Result<(Vec<Record>, Vec<Move>)> {
        let r = self
            .hosts_up(mode)
            .and_then(|()| self.measure(mode, run, moves));
        let d = self.hosts_down();
        let r = r?;
        d?;
        Ok(r)
    }

    fn hosts_up(&mut self, mode: Mode) -> Result<()> {
        for (i, h) in HOSTS.into_iter().enumerate() {
            step(self.opts, &format!("host {h} up ({} VXLAN)", mode.name()))?;
            let dir = self.opts.common.run_dir.join(h);
            std::fs::create_dir_all(&dir)?;
            let file = dir.join(format!("multihost-{}.toml", mode.name()));
            std::fs::write(&file, topology(&self.hosts, i, mode))?;
            self.up.push(h);
            let f = file.to_string_lossy().into_owned();
            self.on(h, &["up", "--config", &f])?;
        }
        Ok(())
    }

    /// Takes down every host that is (or may be) up; the first error.
    fn hosts_down(&mut self) -> Result<()> {
        let mut first = Ok(());
        for h in std::mem::take(&mut self.up) {
            if let Err(e) = self.on(h, &["down"]) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// The hosts are up: every guest1 reaches the next host's, then the
    /// flows, then the moves.
    fn measure(&self, mode: Mode, run: usize, moves: usize) -> Result<(Vec<Record>, Vec<Move>)> {
        let m = mode.name();
        step(
            self.opts,
            &format!("run {}: {m}: guests reach each other", run + 1),
        )?;
        let pairs: Vec<(String, String)> = (0..HOSTS.len())
            .map(|i| {
                let (me, next) = (HOSTS[i], HOSTS[(i + 1) % HOSTS.len()]);
                (guest1(me).ns(), guest1(next).ip())
            })
            .collect();
        reach_all(&pairs, MESH_LIMIT, Instant::now()).context("guest1 of each host")?;
        let mut records = Vec::new();
        for w in [Workload::TcpZerocopy, Workload::UdpSmall] {
            step(self.opts, &format!("run {}: {m}: {}", run + 1, w.name()))?;
            let [na, nb] = native_ns();
            let native = rate(&na, &nb, &native_ip(2), w, self.opts.common.secs)?;
            let (a, b) = (guest1("a"), guest1("b"));
            let splitnet = rate(&a.ns(), &b.ns(), &b.ip(), w, self.opts.common.secs)?;
            records.push(Record {
                run,
                mode,
                workload: w,
                unit: unit(w),
                splitnet,
                native,
            });
        }
        let mut times = Vec::new();
        for k in 0..moves {
            let (from, to) = if k % 2 == 0 {
                (HOME, AWAY)
            } else {
                (AWAY, HOME)
            };
            step(
                self.opts,
                &format!(
                    "{m}: move {}/{moves}: {}/{} -> {}/{}",
                    k + 1,
                    from.host,
                    from.guest,
                    to.host,
                    to.guest
                ),
            )?;
            times.push(self.move_once(from, to)?);
        }
        Ok((records, times))
    }

    /// Moves the vif `from` -> `to`: the seconds from the attach's return
    /// until every guest of another host had a reply, and until every
    /// other host's VXLAN device sent the MAC to its new VTEP.
    fn move_once(&self, from: Spot, to: Spot) -> Result<Move> {
        self.on(from.host, &["network-detach", from.guest, MOVER_MAC])?;
        let spec = format!("mac={MOVER_MAC},ip={MOVER_IP}");
        // The guest's interfaces before the attach: one of them may still
        // carry the new vif's name for a moment (a TAP on its way out).
        let old = ifindexes(&to.ns());
        let out = self.on(to.host, &["network-attach", to.guest, &spec])?;
        let t0 = Instant::now();
        let pingers: Vec<(String, String)> = PINGERS
            .iter()
            .filter(|p| p.host != to.host)
            .map(|p| (p.ns(), MOVER_IP.to_string()))
            .collect();
        let mut pings = Pings::start(&pingers, MOVE_PING_INTERVAL, MOVE_LIMIT)?;
        let drivers: Vec<String> = HOSTS
            .iter()
            .filter(|h| **h != to.host)
            .map(|h| {
                Spot {
                    host: h,
                    guest: "drv",
                }
                .ns()
            })
            .collect();
        let vtep = self.hosts[host_index(to.host) - 1].vtep().to_string();
        let (ns, dev) = (to.ns(), attached_ifname(&out)?);
        std::thread::scope(|s| {
            let mut announcing = Some(s.spawn(|| announce(&ns, &dev, &old)));
            let mut w = Watch::new(pingers.len(), drivers.len());
            while !w.done() && !sys::interrupted() && t0.elapsed() < MOVE_LIMIT {
                if announcing.as_ref().is_some_and(|a| a.is_finished()) {
                    if let Some(a) = announcing.take() {
                        a.join()
                            .map_err(|_| anyhow::anyhow!("announcing panicked"))??;
                    }
                }
                w.pass(t0, &mut pings, &drivers, &vtep)?;
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Some(a) = announcing {
                a.join()
                    .map_err(|_| anyhow::anyhow!("announcing panicked"))??;
            }
            w.finish(t0, &mut pings, &drivers, &vtep)
        })
    }

    /// Takes everything down; the first error.
    fn close(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let hosts = self.hosts_down();
        self.native.take();
        if std::mem::take(&mut self.underlay) {
            crate::splitnet(
                &self.opts.common.exe,
                &self.opts.common.run_dir,
                &["underlay", "down"],
            )?;
        }
        hosts
    }
}

impl Drop for Lab<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("multihost: cleaning up: {e:#}");
        }
    }
}

/// Host `h`'s guest1.
fn guest1(h: &'static str) -> Spot {
    Spot {
        host: h,
        guest: "guest1",
    }
}

/// One move's timings.
#[derive(Debug, Clone, Copy)]
struct Move {
    /// Until every other host's guest had a ping reply.
    reached: f64,
    /// Until every other host's VXLAN device had the MAC at its new VTEP.
    learned: f64,
}

/// What a move waits for: each pinger's reply, each other host's FDB.
struct Watch {
    replied: Vec<Option<f64>>,
    learned: Vec<Option<f64>>,
}

impl Watch {
    fn new(pingers: usize, drivers: usize) -> Watch {
        Watch {
            replied: vec![None; pingers],
            learned: vec![None; drivers],
        }
    }

    fn done(&self) -> bool {
        self.replied
            .iter()
            .chain(&self.learned)
            .all(Option::is_some)
    }

    /// One look at the pings and the FDBs, timed from `t0`.
    fn pass(
        &mut self,
        t0: Instant,
        pings: &mut Pings,
        drivers: &[String],
        vtep: &str,
    ) -> Result<()> {
        pings.poll(t0, &mut self.replied)?;
        for (i, ns) in drivers.iter().enumerate() {
            if self.learned[i].is_none() && fdb_points_at(ns, vtep)? {
                self.learned[i] = Some(t0.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    /// The move's timings once everything arrived, else what did not.
    fn finish(
        mut self,
        t0: Instant,
        pings: &mut Pings,
        drivers: &[String],
        vtep: &str,
    ) -> Result<Move> {
        self.pass(t0, pings, drivers, vtep)?;
        if sys::interrupted() {
            bail!("interrupted");
        }
        if let Some(i) = self.replied.iter().position(Option::is_none) {
            let (ns, ip) = &pings.to[i];
            bail!("{ns} got no reply from {ip} within {MOVE_LIMIT:?} of the attach");
        }
        if let Some(i) = self.learned.iter().position(Option::is_none) {
            bail!(
                "{}'s VXLAN device did not send {MOVER_MAC} to {vtep} within {MOVE_LIMIT:?} of the attach",
                drivers[i]
            );
        }
        let max = |v: &[Option<f64>]| v.iter().flatten().copied().fold(0.0, f64::max);
        Ok(Move {
            reached: max(&self.replied),
            learned: max(&self.learned),
        })
    }
}

/// Whether the VXLAN device of driver domain namespace `ns` sends the
/// moving MAC to `vtep` (an entry learned from traffic, or installed by
/// zebra from a type-2 route).
fn fdb_points_at(ns: &str, vtep: &str) -> Result<bool> {
    let dev = format!("vx{VNI}");
    let out = host::run("bridge", &["-n", ns, "-j", "fdb", "show", "dev", &dev])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("bridge fdb's JSON")?;
    Ok(v.as_array()
        .is_some_and(|es| es.iter().any(|e| e["mac"] == MOVER_MAC && e["dst"] == vtep)))
}

/// The moved guest has its address on the new vif and announces it with a
/// gratuitous ARP, as Xen's netfront does when it reconnects after a
/// migration (the kernel sends one when the MAC is set with `arp_notify`).
fn announce(ns: &str, dev: &str, old: &[u64]) -> Result<()> {
    wait_up(ns, dev, old)?;
    host::ip_in(
        ns,
        &["addr", "replace", &format!("{MOVER_IP}/24"), "dev", dev],
    )?;
    sysctl(ns, &format!("net.ipv4.conf.{dev}.arp_notify"), "1")?;
    host::ip_in(ns, &["link", "set", dev, "address", MOVER_MAC])?;
    Ok(())
}

/// The interface indexes of namespace `ns`.
fn ifindexes(ns: &str) -> Vec<u64> {
    host::ip_in(ns, &["-j", "link", "show"])
        .ok()
        .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
        .and_then(|v| {
            v.as_array()
                .map(|a| a.iter().filter_map(|l| l["ifindex"].as_u64()).collect())
        })
        .unwrap_or_default()
}

/// Waits until interface `dev` of namespace `ns` exists and is up (the
/// guest makes it after the vif connects) as a device that is none of
/// `old` (a TAP of the same name that the guest is removing does not
/// count), or fails after [`MOVE_LIMIT`].
fn wait_up(ns: &str, dev: &str, old: &[u64]) -> Result<()> {
    let deadline = Instant::now() + MOVE_LIMIT;
    loop {
        let up = host::ip_in(ns, &["-j", "link", "show", "dev", dev])
            .ok()
            .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
            .is_some_and(|v| {
                let new = v[0]["ifindex"].as_u64().is_some_and(|i| !old.contains(&i));
                new && v[0]["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"))
            });
        if up {
            return Ok(());
        }
        if Instant::now() > deadline || sys::interrupted() {
            bail!("{dev} of {ns} was not up within {MOVE_LIMIT:?} of its attach");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The guest interface `network-attach` said it connected ("vif N
/// connected as ethN").
fn attached_ifname(out: &str) -> Result<String> {
    out.split_whitespace()
        .skip_while(|w| *w != "as")
        .nth(1)
        .filter(|n| n.starts_with("eth"))
        .map(str::to_string)
        .with_context(|| format!("network-attach did not say which interface: {out:?}"))
}

/// Sets sysctl `key` in namespace `ns`.
fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    let kv = format!("{key}={value}");
    host::run("ip", &["netns", "exec", ns, "sysctl", "-qw", &kv])?;
    Ok(())
}

/// The unit a workload's rate is given in.
fn unit(w: Workload) -> &'static str {
    match w {
        Workload::UdpSmall => "datagrams/s",
        _ => "Gbit/s",
    }
}

/// One flow from `client` to `server_ip` in `server`: Gbit/s received, or
/// datagrams per second for UDP 64 B.
fn rate(client: &str, server: &str, server_ip: &str, w: Workload, secs: u32) -> Result<f64> {
    let f = Flow {
        server_ns: server,
        server_ip,
        server_bind: None,
        port: netenv::DEFAULT_PORT,
        client_ns: client,
        reverse: false,
        secs,
        workload: w,
        server_cgroup: None,
        client_cgroup: None,
        server_cpu: None,
        client_cpu: None,
    };
    let r = netenv::run(&f)?;
    Ok(match w {
        Workload::UdpSmall => r.packets / r.seconds.max(1e-9),
        _ => r.gbps,
    })
}

/// Ping processes, each until its first reply; killed when dropped.
struct Pings {
    to: Vec<(String, String)>,
    interval: &'static str,
    deadline: Instant,
    children: Vec<Child>,
}

impl Pings {
    /// From each namespace to its address, every `interval` seconds, for
    /// at most `limit`.
    fn start(to: &[(String, String)], interval: &'static str, limit: Duration) -> Result<Pings> {
        let mut p = Pings {
            to: to.to_vec(),
            interval,
            deadline: Instant::now() + limit,
            children: Vec::new(),
        };
        for i in 0..to.len() {
            let c = p.spawn(i)?;
            p.children.push(c);
        }
        Ok(p)
    }

    /// A ping that stops at its first reply, or at an error (ARP gave up:
    /// "Destination Host Unreachable"), or at the deadline.
    fn spawn(&self, i: usize) -> Result<Child> {
        let (ns, ip) = &self.to[i];
        let left = self.deadline.saturating_duration_since(Instant::now());
        let w = left.as_secs().max(1).to_string();
        Command::new("ip")
            .args(["netns", "exec", ns, "ping", "-n", "-q", "-c", "1"])
            .args(["-i", self.interval, "-w", &w, ip])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting ping")
    }

    /// Records in `took` the pings that had their reply (seconds from
    /// `t0`); starts again those that stopped without one, until the
    /// deadline.
    fn poll(&mut self, t0: Instant, took: &mut [Option<f64>]) -> Result<()> {
        for (i, t) in took.iter_mut().enumerate() {
            if t.is_some() {
                continue;
            }
            let Some(st) = self.children[i].try_wait()? else {
                continue;
            };
            if st.success() {
                *t = Some(t0.elapsed().as_secs_f64());
            } else if Instant::now() < self.deadline {
                self.children[i] = self.spawn(i)?;
            }
        }
        Ok(())
    }

    /// Seconds from `t0` until each had its reply.
    fn wait(mut self, t0: Instant) -> Result<Vec<f64>> {
        let mut took = vec![None; self.to.len()];
        while took.iter().any(Option::is_none) {
            if sys::interrupted() {
                bail!("interrupted");
            }
            self.poll(t0, &mut took)?;
            if let Some(i) = took.iter().position(Option::is_none) {
                if Instant::now() > self.deadline {
                    let (ns, ip) = &self.to[i];
                    bail!("{ns} got no reply from {ip} in time");
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(took.into_iter().flatten().collect())
    }
}

impl Drop for Pings {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until every namespace gets a reply from its address; the seconds
/// each took from `t0`.
fn reach_all(to: &[(String, String)], limit: Duration, t0: Instant) -> Result<Vec<f64>> {
    Pings::start(to, "0.2", limit)?.wait(t0)
}

/// The native namespaces, beside hosts a and b (`splitnet@native-a`,
/// `splitnet@native-b`: the '-' keeps them from reading as hosts).
fn native_ns() -> [String; 2] {
    [HOSTS[0], HOSTS[1]].map(|h| format!("{SHARED_PREFIX}native-{h}"))
}

/// The native namespace of host index `i`'s address on its VXLAN.
fn native_ip(i: u8) -> String {
    format!("10.99.0.{i}")
}

/// A native namespace's VTEP: `.4` of its host's underlay /24.
fn native_vtep(h: &UnderlayHost) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, h.index, 4)
}

/// The reference: two plain namespaces beside hosts a and b, each behind a
/// veth to its host (VTEP 10.200.i.4, routed and proxy-ARPed by the host as
/// hv does for a driver domain's underlay link), with a kernel VXLAN
/// device each (VNI 200, MTU 1450, flooding to the other). Deleted on drop.
struct NativeVxlan {
    ns: [String; 2],
}

impl NativeVxlan {
    fn new(a: &UnderlayHost, b: &UnderlayHost) -> Result<NativeVxlan> {
        let n = NativeVxlan { ns: native_ns() };
        for ns in &n.ns {
            // What a run that was killed outright may have left.
            host::netns_del(ns);
        }
        native_end(&n.ns[0], a, b)?;
        native_end(&n.ns[1], b, a)?;
        Ok(n)
    }
}

/// Namespace `ns` beside host `me`, tunnelling to the one beside `other`.
fn native_end(ns: &str, me: &UnderlayHost, other: &UnderlayHost) -> Result<()> {
    let hns = underlay::host_ns(&me.name);
    let vtep = native_vtep(me).to_string();
    host::netns_add(ns)?;
    host::veth_pair(NATIVE_IF, &hns, underlay::HOST_IF, ns)?;
    host::ip_in(
        &hns,
        &["route", "add", &format!("{vtep}/32"), "dev", NATIVE_IF],
    )?;
    sysctl(&hns, &format!("net.ipv4.conf.{NATIVE_IF}.proxy_arp"), "1")?;
    host::addr_add(ns, underlay::HOST_IF, &format!("{vtep}/32"))?;
    host::ip_in(ns, &["route", "add", "default", "dev", underlay::HOST_IF])?;
    let vni = NATIVE_VNI.to_string();
    let vx = format!("vx{NATIVE_VNI}");
    host::ip_in(
        ns,
        &[
            "link", "add", &vx, "mtu", TUNNEL_MTU, "type", "vxlan", "id", &vni, "local", &vtep,
            "dstport", "4789",
        ],
    )?;
    let peer = native_vtep(other).to_string();
    let zero = "00:00:00:00:00:00";
    host::run(
        "bridge",
        &["-n", ns, "fdb", "append", zero, "dev", &vx, "dst", &peer],
    )?;
    host::addr_add(ns, &vx, &format!("{}/24", native_ip(me.index)))?;
    host::ip_in(ns, &["link", "set", &vx, "up"])?;
    Ok(())
}

impl Drop for NativeVxlan {
    fn drop(&mut self) {
        for ns in &self.ns {
            host::netns_del(ns);
        }
    }
}

/// Host `i`'s topology in `mode`: a driver domain with a vxlan port to the
/// other hosts' VTEPs, guest1 (10.77.0.INDEX), and on host b guest2, where
/// the moving vif goes. Every guest's MAC is set: the default ones are the
/// same on every host.
pub fn topology(hosts: &[UnderlayHost], i: usize, mode: Mode) -> String {
    let h = &hosts[i];
    let peers: Vec<String> = hosts
        .iter()
        .filter(|o| o.index != h.index)
        .map(|o| format!("\"{}\"", o.vtep()))
        .collect();
    let mut s = format!(
        "# bench multihost: host {name}, {mode} VXLAN.\n\
         name = \"multihost-{name}\"\n\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\n\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\n\
         address = \"10.77.0.{index}/24\"\nmac = \"00:16:3e:77:{index:02x}:01\"\n\n",
        name = h.name,
        mode = mode.name(),
        index = h.index,
    );
    if h.name == AWAY.host {
        s += &format!(
            "[[domain]]\nname = \"{}\"\nkind = \"guest\"\nmac = \"00:16:3e:77:{:02x}:02\"\n\n",
            AWAY.guest, h.index
        );
    }
    s += &format!(
        "[[port]]\ndriver = \"drv\"\nkind = \"vxlan\"\nvni = {VNI}\nlocal = \"{}\"\n\
         peers = [{}]\nevpn = {}\n",
        h.vtep(),
        peers.join(", "),
        mode == Mode::Evpn
    );
    s
}

impl MultihostReport {
    fn new(
        opts: &MultihostOptions,
        wall_seconds: f64,
        records: Vec<Record>,
        moves: Vec<(Mode, Vec<Move>)>,
    ) -> MultihostReport {
        let workloads = [Workload::TcpZerocopy, Workload::UdpSmall];
        let mut flows = Vec::new();
        for mode in Mode::ALL {
            for w in workloads {
                flows.push(flow_case(&records, mode, w));
            }
        }
        let evpn_hop = workloads.iter().map(|&w| hop_cost(&records, w)).collect();
        let moves = moves
            .into_iter()
            .map(|(mode, m)| {
                let reached = Series::of(m.iter().map(|m| m.reached).collect());
                let target_s = (mode == Mode::Evpn).then_some(MOVE_TARGET_S);
                MoveCase {
                    mode,
                    met: target_s.zip(reached.spread).map(|(t, s)| s.median <= t),
                    target_s,
                    reached,
                    learned: Series::of(m.iter().map(|m| m.learned).collect()),
                }
            })
            .collect();
        MultihostReport {
            suite: "multihost",
            runs: opts.common.runs,
            seconds_per_flow: opts.common.secs,
            wall_seconds,
            records,
            flows,
            evpn_hop,
            moves,
        }
    }
}

/// The records of `mode` and `w`, in run order.
fn of(records: &[Record], mode: Mode, w: Workload) -> impl Iterator<Item = &Record> {
    records
        .iter()
        .filter(move |r| r.mode == mode && r.workload == w)
}

fn flow_case(records: &[Record], mode: Mode, w: Workload) -> FlowCase {
    let series = |v: fn(&Record) -> f64| Series::of(of(records, mode, w).map(v).collect());
    let ratio = Series::of(
        of(records, mode, w)
            .filter(|r| r.native > 0.0)
            .map(|r| r.splitnet / r.native)
            .collect(),
    );
    let target = (w == Workload::TcpZerocopy).then_some(TCP_TARGET);
    FlowCase {
        mode,
        workload: w,
        unit: unit(w),
        splitnet: series(|r| r.splitnet),
        native: series(|r| r.native),
        met: target.zip(ratio.spread).map(|(t, r)| r.median >= t),
        target,
        ratio,
    }
}

fn hop_cost(records: &[Record], w: Workload) -> HopCost {
    let ratio = of(records, Mode::Static, w)
        .filter_map(|s| {
            of(records, Mode::Evpn, w)
                .find(|e| e.run == s.run && e.splitnet > 0.0)
                .map(|e| s.splitnet / e.splitnet)
        })
        .collect();
    HopCost {
        workload: w,
        ratio: Series::of(ratio),
    }
}

fn cell(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| s.to_string())
}

/// A rate with its unit's usual precision: Gbit/s to two places,
/// datagrams per second as thousands.
fn amount(s: Option<Spread>, unit: &str) -> String {
    match s {
        Some(s) if unit == "datagrams/s" => format!(
            "{:.0} k/s ({:.0}–{:.0})",
            s.median / 1e3,
            s.min / 1e3,
            s.max / 1e3
        ),
        Some(s) => format!("{s} Gbit/s"),
        None => "-".into(),
    }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "not met",
        None => "-",
    }
}

impl MultihostReport {
    /// Markdown: the flows against native, EVPN's hop, the moves.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### Guest → guest across hosts (a → b) over VXLAN, against two plain namespaces over a kernel VXLAN on the same underlay ({} runs of {} s; median (min–max))\n\n\
             | mode | workload | splitnet | native | splitnet ÷ native | target | met |\n|---|---|---:|---:|---:|---:|---|\n",
            self.runs, self.seconds_per_flow
        );
        for f in &self.flows {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                f.mode.name(),
                f.workload.name(),
                amount(f.splitnet.spread, f.unit),
                amount(f.native.spread, f.unit),
                cell(f.ratio.spread),
                f.target.map_or("-".into(), |t| format!("≥ {t:.2}")),
                verdict(f.met)
            );
        }
        s += "\n### EVPN's extra hop (a kernel bridge and a veth): static ÷ evpn, within each run\n\n\
              | workload | static ÷ evpn |\n|---|---:|\n";
        for h in &self.evpn_hop {
            s += &format!("| {} | {} |\n", h.workload.name(), cell(h.ratio.spread));
        }
        s += "\n### A moved MAC: detached on one host, attached on another; seconds from the attach until every other host's guest has a reply\n\n\
              | mode | moves | reached: median (min–max) s | target | met | every other host's VXLAN FDB at the new VTEP, s |\n|---|---:|---:|---:|---|---:|\n";
        for m in &self.moves {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                m.mode.name(),
                m.reached.values.len(),
                cell(m.reached.spread),
                m.target_s.map_or("-".into(), |t| format!("≤ {t:.1}")),
                verdict(m.met),
                cell(m.learned.spread)
            );
        }
        s + &format!("\nWall time: {:.0} s.\n", self.wall_seconds)
    }

    /// Bars: splitnet ÷ native for each mode and workload, whiskers min–max.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .flows
            .iter()
            .filter_map(|f| {
                f.ratio.spread.map(|r| Bar {
                    label: format!("{} {}", f.mode.name(), f.workload.name()),
                    value: r.median,
                    range: Some((r.min, r.max)),
                })
            })
            .collect();
        plot::hbars(
            "Guest → guest across hosts ÷ native kernel VXLAN",
            "× native",
            "bars: median; whiskers: min–max over runs; TCP target 0.60",
            &bars,
        )
    }

    /// Further charts: the moves' seconds per mode.
    pub fn charts(&self) -> Vec<(String, String)> {
        let bars: Vec<Bar> = self
            .moves
            .iter()
            .filter_map(|m| {
                m.reached.spread.map(|s| Bar {
                    label: format!("{} ({} moves)", m.mode.name(), m.reached.values.len()),
                    value: s.median,
                    range: Some((s.min, s.max)),
                })
            })
            .collect();
        vec![(
            "moves.svg".into(),
            plot::hbars(
                "A moved MAC reachable from every other host",
                "s",
                "bars: median; whiskers: min–max over moves; EVPN target 2 s",
                &bars,
            ),
        )]
    }
}

/// `splitnet bench multihost`: three hosts over VXLAN, static and EVPN, against
/// native VXLAN; the moved MAC.
pub struct MultihostSuite;

impl harness::Suite for MultihostSuite {
    fn name(&self) -> &'static str {
        "multihost"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = MultihostOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        let r = run(&opts)?;
        Ok(Output::of(&r, r.table(), r.svg())?.with_charts(r.charts()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run: usize, mode: Mode, w: Workload, splitnet: f64, native: f64) -> Record {
        Record {
            run,
            mode,
            workload: w,
            unit: unit(w),
            splitnet,
            native,
        }
    }

    #[test]
    fn ratios_are_taken_within_each_run() {
        let t = Workload::TcpZerocopy;
        let records = vec![
            record(0, Mode::Static, t, 6.0, 10.0),
            record(0, Mode::Evpn, t, 5.0, 10.0),
            record(1, Mode::Static, t, 8.0, 10.0),
            record(1, Mode::Evpn, t, 2.0, 4.0),
        ];
        let f = flow_case(&records, Mode::Evpn, t);
        assert_eq!(f.ratio.values, vec![0.5, 0.5]);
        assert_eq!(f.met, Some(false));
        let f = flow_case(&records, Mode::Static, t);
        assert_eq!(f.ratio.values, vec![0.6, 0.8]);
        assert_eq!(f.met, Some(true));
        let h = hop_cost(&records, t);
        assert_eq!(h.ratio.values, vec![1.2, 4.0]);
        assert_eq!(
            flow_case(&records, Mode::Static, Workload::UdpSmall).met,
            None
        );
    }

    #[test]
    fn every_hosts_topology_parses_in_both_modes() {
        let hosts: Vec<UnderlayHost> = (1..=3u8)
            .map(|i| UnderlayHost {
                name: HOSTS[i as usize - 1].into(),
                index: i,
                addr: Ipv4Addr::new(10, 200, i, 2),
                mtu: 1500,
            })
            .collect();
        for mode in Mode::ALL {
            for (i, h) in HOSTS.into_iter().enumerate() {
                let text = topology(&hosts, i, mode);
                let t = toolstack::topology::Topology::parse(&text, "bench").unwrap();
                let guests = if h == AWAY.host { 2 } else { 1 };
                assert_eq!(t.domains.len(), 1 + guests, "{text}");
                assert!(text.contains(&format!("evpn = {}", mode == Mode::Evpn)));
            }
        }
        let b = topology(&hosts, 1, Mode::Static);
        assert!(b.contains("local = \"10.200.2.3\""), "{b}");
        assert!(
            b.contains("peers = [\"10.200.1.3\", \"10.200.3.3\"]"),
            "{b}"
        );
    }

    #[test]
    fn the_interface_is_read_from_the_attach() {
        assert_eq!(
            attached_ifname("guest2: vif 1 connected as eth1\n").unwrap(),
            "eth1"
        );
        assert!(attached_ifname("nothing").is_err());
    }
}
