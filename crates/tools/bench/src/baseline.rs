//! Suite `baseline`: throughput and CPU cost of moving a TCP or UDP stream
//! guest→wire (TX), wire→guest (RX) and guest→guest, for native networking,
//! the kernel's bridge, the minimal user-space forwarder (the ceiling of a
//! TAP-to-AF_PACKET path), user-mode networking (pasta, slirp4netns), and
//! splitnet in its seed-baseline, hv-copy and default (fast-path) modes,
//! all measured in the same run (Menon 2006 §6, Ram thesis §2.4: cycles per
//! 1514-byte packet by domain).

use crate::netenv::{self, Flow, FlowResult, Forwarded, KernelBridge, Latency, Native, Workload};
use crate::stats::{median, tsc_per_us};
use crate::usernet::{self, Tool, UserNet};
use crate::{plot, seeds};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use toolstack::host::{self, Cgroup, CgroupLayout};

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct BaselineOptions {
    /// One run, 2 s per flow, TCP zero-copy only: under a minute.
    pub quick: bool,
    pub runs: usize,
    pub secs: u32,
    /// The `splitnet` executable (to bring splitnet topologies up and down).
    pub exe: PathBuf,
    /// Run directory for splitnet's hv.
    pub run_dir: PathBuf,
    pub progress: bool,
    /// Attach a profile to every flow (`bench --profile`); its summary goes
    /// into the record.
    pub profile: bool,
    /// Where each flow's whole profile (JSON and SVG) is written, if anywhere.
    pub profile_dir: Option<PathBuf>,
    /// Only these configurations (native is always added); empty: all.
    pub configs: Vec<Config>,
    /// Only these workloads; empty: the default set.
    pub workloads: Vec<Workload>,
    /// splitnet's domains spin this many microseconds before sleeping
    /// (`splitnet up --spin-us`); `None` keeps the topology's setting (none).
    pub spin_us: Option<u32>,
}

impl BaselineOptions {
    /// The options another suite brings `baseline`'s environments up with:
    /// no progress, profile or filters of this suite's own.
    pub fn for_suite(
        exe: &std::path::Path,
        run_dir: &std::path::Path,
        quick: bool,
        runs: usize,
        secs: u32,
    ) -> BaselineOptions {
        BaselineOptions {
            quick,
            runs,
            secs,
            exe: exe.to_path_buf(),
            run_dir: run_dir.to_path_buf(),
            progress: false,
            profile: false,
            profile_dir: None,
            configs: Vec::new(),
            workloads: Vec::new(),
            spin_us: None,
        }
    }
}

/// A measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// The same application over a plain veth pair between two namespaces.
    Native,
    /// veth into a Linux bridge in a "driver" namespace (the kernel baseline).
    LinuxBridge,
    /// One process forwarding between a TAP and AF_PACKET, nothing else:
    /// the ceiling of any user-space NIC path (`forwarder.rs`). TX and RX only.
    MinimalForwarder,
    /// User-mode networking with pasta (passt), as rootless Podman uses.
    Pasta,
    /// User-mode networking with slirp4netns (libslirp).
    Slirp4netns,
    /// splitnet, seed baseline: RX flip, TX map, no offloads.
    SplitnetBaseline,
    /// splitnet with hv's grant copies (the thesis's "Orig"): RX copy, TX copy, offloads on.
    SplitnetHvCopy,
    /// splitnet default, the fast path: the new grant mechanism, TX gather,
    /// RX single copy, offloads on.
    SplitnetDefault,
    /// The default preset with 24 guests of which 22 stay idle: what idle
    /// vifs cost the busy ones.
    #[serde(rename = "splitnet-24-guests")]
    SplitnetIdle24,
    /// The default preset with Xen's `ip=` anti-spoofing and a `rate=`
    /// credit far above the link's speed on both guests' vifs: what checking
    /// them costs a frame.
    SplitnetVifOptions,
    /// The default preset with guest1 on `nic = "virtio"`: virtio split
    /// rings over vhost-user to the same driver domain, instead of Xen's
    /// netif rings and grants.
    SplitnetVirtio,
}

impl std::str::FromStr for Config {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Config> {
        crate::by_name(&CONFIGS, Config::name, s)
    }
}

impl Config {
    pub fn name(self) -> &'static str {
        match self {
            Config::Native => "native",
            Config::LinuxBridge => "linux-bridge",
            Config::MinimalForwarder => "minimal-forwarder",
            Config::Pasta => "pasta",
            Config::Slirp4netns => "slirp4netns",
            Config::SplitnetBaseline => "splitnet-baseline",
            Config::SplitnetHvCopy => "splitnet-hv-copy",
            Config::SplitnetDefault => "splitnet-default",
            Config::SplitnetIdle24 => "splitnet-24-guests",
            Config::SplitnetVifOptions => "splitnet-vif-options",
            Config::SplitnetVirtio => "splitnet-virtio",
        }
    }

    /// The directions a configuration carries (the forwarder has no second guest).
    pub fn directions(self) -> &'static [Direction] {
        match self {
            Config::MinimalForwarder => &DIRECTIONS[..2],
            _ => &DIRECTIONS,
        }
    }

    /// The user-mode networking tool a peer configuration runs.
    pub fn tool(self) -> Option<Tool> {
        match self {
            Config::Pasta => Some(Tool::Pasta),
            Config::Slirp4netns => Some(Tool::Slirp4netns),
            _ => None,
        }
    }
}

/// Direction of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// guest → wire.
    Tx,
    /// wire → guest.
    Rx,
    /// guest → guest.
    GuestToGuest,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
            Direction::GuestToGuest => "guest-to-guest",
        }
    }
}

/// A value per domain (CPU seconds, cycles per packet).
pub type PerDomain = BTreeMap<String, f64>;

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub config: Config,
    pub direction: Direction,
    pub workload: Workload,
    pub run: usize,
    pub gbps: f64,
    pub ratio_to_native: Option<f64>,
    /// Against the minimal forwarder of the same run (TX and RX).
    pub ratio_to_forwarder: Option<f64>,
    /// CPU time per domain during the flow, kernel time included.
    pub cpu_seconds: BTreeMap<String, f64>,
    /// TSC cycles per 1514-byte frame (or per datagram for UDP): "total" and one per domain.
    pub cycles_per_packet: BTreeMap<String, f64>,
    pub packets: f64,
    /// One-way latency (request-response workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    /// With `--profile`: shares of the samples taken during the flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(skip_deserializing)]
    pub profile: Option<prof::ProfileSummary>,
}

/// Medians over runs of one (config, direction, workload).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub config: Config,
    pub direction: Direction,
    pub workload: Workload,
    pub runs: usize,
    pub median_gbps: f64,
    pub min_gbps: f64,
    pub max_gbps: f64,
    pub median_ratio_to_native: Option<f64>,
    pub median_ratio_to_forwarder: Option<f64>,
    pub median_cycles_per_packet: f64,
    /// Request-response workloads: median one-way p50 and p99 (µs), and
    /// each as a multiple of native's in the same run (lower is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
}

/// Medians of a request-response workload's latency.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LatencySummary {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p50_x_native: Option<f64>,
    pub p99_x_native: Option<f64>,
}

/// The suite's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineReport {
    #[serde(skip_deserializing)]
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub runs: usize,
    pub seconds_per_flow: u32,
    /// splitnet's spin before sleeping, if one was set (`--spin-us`).
    pub spin_us: Option<u32>,
    pub records: Vec<Record>,
    pub summary: Vec<Summary>,
    /// Peers that were not measured, and why.
    pub skipped: Vec<String>,
}

const DIRECTIONS: [Direction; 3] = [Direction::Tx, Direction::Rx, Direction::GuestToGuest];
const CONFIGS: [Config; 11] = [
    Config::Native,
    Config::LinuxBridge,
    Config::MinimalForwarder,
    Config::Pasta,
    Config::Slirp4netns,
    Config::SplitnetBaseline,
    Config::SplitnetHvCopy,
    Config::SplitnetDefault,
    Config::SplitnetIdle24,
    Config::SplitnetVifOptions,
    Config::SplitnetVirtio,
];

/// A domain whose CPU time is measured.
pub(crate) struct Domain {
    pub(crate) name: String,
    pub(crate) cgroup: Option<Cgroup>,
    /// A process measured through /proc (hv, which has no cgroup of its own).
    pub(crate) pid: Option<i32>,
}

/// Clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on Linux x86).
const USER_HZ: f64 = 100.0;

pub(crate) fn proc_cpu(pid: i32) -> Option<Duration> {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// User and system CPU time from a `stat` file of /proc (a process's, or
/// a thread's under `/proc/<pid>/task/`).
pub(crate) fn stat_cpu(path: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = s.rsplit(')').next()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (u, k): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some(Duration::from_secs_f64((u + k) / USER_HZ))
}

impl Domain {
    fn cpu(&self) -> Duration {
        if let Some(p) = self.pid {
            return proc_cpu(p).unwrap_or_default();
        }
        self.cgroup
            .as_ref()
            .and_then(Cgroup::cpu_usage)
            .unwrap_or_default()
    }
}

/// Where one direction's endpoints are.
#[derive(Clone)]
pub(crate) struct FlowSpec {
    server_ns: String,
    /// Where the client connects.
    server_ip: &'static str,
    /// Where the server listens, if not `server_ip`.
    server_bind: Option<&'static str>,
    port: u16,
    client_ns: String,
    /// Data flows server → client.
    reverse: bool,
    /// Indices into `Env::domains` of the server's and the client's domain.
    server_dom: usize,
    client_dom: usize,
}

impl FlowSpec {
    pub(crate) fn new(
        server_ns: &str,
        server_ip: &'static str,
        client_ns: &str,
        reverse: bool,
    ) -> FlowSpec {
        FlowSpec {
            server_ns: server_ns.to_string(),
            server_ip,
            server_bind: None,
            port: netenv::DEFAULT_PORT,
            client_ns: client_ns.to_string(),
            reverse,
            server_dom: 0,
            client_dom: 0,
        }
    }

    /// The namespaces the data leaves and reaches: (sender, receiver).
    pub(crate) fn sender_and_receiver(&self) -> (&str, &str) {
        if self.reverse {
            (&self.server_ns, &self.client_ns)
        } else {
            (&self.client_ns, &self.server_ns)
        }
    }

    /// The same flow on `port` (to run beside this one).
    pub(crate) fn on_port(&self, port: u16) -> FlowSpec {
        FlowSpec {
            port,
            ..self.clone()
        }
    }

    /// Charges the server to domain `server` and the client to `client`.
    pub(crate) fn charged(mut self, server: usize, client: usize) -> FlowSpec {
        self.server_dom = server;
        self.client_dom = client;
        self
    }
}

/// A brought-up configuration: where each direction's endpoints are.
pub(crate) struct Env {
    pub(crate) domains: Vec<Domain>,
    pub(crate) flows: BTreeMap<&'static str, FlowSpec>,
    _native: Option<Native>,
    _kb: Option<KernelBridge>,
    _usernet: Option<UserNet>,
    _fwd: Option<Forwarded>,
    splitnet: bool,
}

impl Env {
    pub(crate) fn new(domains: Vec<Domain>) -> Env {
        Env {
            domains,
            flows: BTreeMap::new(),
            _native: None,
            _kb: None,
            _usernet: None,
            _fwd: None,
            splitnet: false,
        }
    }
}

/// Names of the cgroups the suite creates (as `bench-<name>`).
const BENCH_CGROUPS: [&str; 8] = [
    "client",
    "server",
    "guest1",
    "guest2",
    "wire",
    "pasta",
    "slirp4netns",
    "forwarder",
];

pub(crate) fn bench_cgroup(layout: &CgroupLayout, name: &str) -> Result<Cgroup> {
    Ok(Cgroup::create(layout, &format!("bench-{name}"))?)
}

/// Domains measured through their own fresh cgroups.
pub(crate) fn bench_domains(layout: &CgroupLayout, names: &[&str]) -> Result<Vec<Domain>> {
    names
        .iter()
        .map(|n| {
            Ok(Domain {
                name: n.to_string(),
                cgroup: Some(bench_cgroup(layout, n)?),
                pid: None,
            })
        })
        .collect()
}

fn splitnet(opts: &BaselineOptions, args: &[&str]) -> Result<()> {
    crate::splitnet(&opts.exe, &opts.run_dir, args).map(drop)
}

pub(crate) fn bring_up(cfg: Config, opts: &BaselineOptions, layout: &CgroupLayout) -> Result<Env> {
    match cfg {
        Config::Native => {
            let n = Native::new()?;
            let mut env = Env::new(bench_domains(layout, &["client", "server"])?);
            for d in DIRECTIONS {
                let rev = d == Direction::Rx;
                env.flows.insert(
                    d.name(),
                    FlowSpec::new(&n.b, netenv::NATIVE_B, &n.a, rev).charged(1, 0),
                );
            }
            env._native = Some(n);
            Ok(env)
        }
        Config::LinuxBridge => {
            let kb = KernelBridge::new()?;
            let mut env = Env::new(bench_domains(layout, &["guest1", "guest2", "wire"])?);
            let f = &mut env.flows;
            f.insert(
                "tx",
                FlowSpec::new(&kb.wire, netenv::KB_WIRE, &kb.guest1, false).charged(2, 0),
            );
            f.insert(
                "rx",
                FlowSpec::new(&kb.wire, netenv::KB_WIRE, &kb.guest1, true).charged(2, 0),
            );
            f.insert(
                "guest-to-guest",
                FlowSpec::new(&kb.guest2, netenv::KB_GUEST2, &kb.guest1, false).charged(1, 0),
            );
            env._kb = Some(kb);
            Ok(env)
        }
        Config::MinimalForwarder => {
            let mut env = Env::new(bench_domains(layout, &["guest1", "wire", "forwarder"])?);
            let fw = Forwarded::new(&opts.exe, env.domains[2].cgroup.as_ref())?;
            for (d, rev) in [("tx", false), ("rx", true)] {
                env.flows.insert(
                    d,
                    FlowSpec::new(&fw.wire, netenv::FWD_WIRE, &fw.guest, rev).charged(1, 0),
                );
            }
            env._fwd = Some(fw);
            Ok(env)
        }
        Config::Pasta | Config::Slirp4netns => {
            let tool = cfg.tool().context("a peer configuration without a tool")?;
            let mut env = Env::new(bench_domains(
                layout,
                &["guest1", "guest2", "wire", tool.name()],
            )?);
            let u = UserNet::new(tool, env.domains[3].cgroup.as_ref(), &opts.run_dir)?;
            let to_host = |reverse| FlowSpec {
                server_bind: Some(usernet::HOST_BIND),
                ..FlowSpec::new(&u.host, tool.gateway(), &u.guest1, reverse).charged(2, 0)
            };
            env.flows.insert("tx", to_host(false));
            env.flows.insert("rx", to_host(true));
            env.flows.insert(
                "guest-to-guest",
                FlowSpec {
                    server_bind: Some("0.0.0.0"),
                    port: usernet::GUEST2_PORT,
                    ..FlowSpec::new(&u.guest2, tool.gateway(), &u.guest1, false).charged(1, 0)
                },
            );
            env._usernet = Some(u);
            Ok(env)
        }
        Config::SplitnetBaseline
        | Config::SplitnetHvCopy
        | Config::SplitnetDefault
        | Config::SplitnetIdle24
        | Config::SplitnetVifOptions
        | Config::SplitnetVirtio => bring_up_splitnet(cfg, opts, layout),
    }
}

/// A splitnet configuration: `splitnet up` with its preset (and for the
/// 24-guest one, a generated topology); its domains are measured through
/// their own cgroups and hv through its process.
fn bring_up_splitnet(cfg: Config, opts: &BaselineOptions, layout: &CgroupLayout) -> Result<Env> {
    let preset = match cfg {
        Config::SplitnetBaseline => "baseline",
        Config::SplitnetHvCopy => "hv-copy",
        _ => "default",
    };
    let spin = opts.spin_us.map(|us| us.to_string());
    let topo = opts.run_dir.join(format!("bench-{}.toml", cfg.name()));
    let topo_arg = topo.to_string_lossy().into_owned();
    let mut up = vec!["up", "--preset", preset];
    let generated = match cfg {
        Config::SplitnetIdle24 => Some(many_guests_topology(24)),
        Config::SplitnetVifOptions => Some(vif_options_topology()),
        Config::SplitnetVirtio => Some(virtio_topology()),
        _ => None,
    };
    if let Some(t) = generated {
        std::fs::create_dir_all(&opts.run_dir)?;
        std::fs::write(&topo, t).with_context(|| format!("writing {}", topo.display()))?;
        up.extend(["--config", topo_arg.as_str()]);
    }
    if let Some(us) = &spin {
        up.extend(["--spin-us", us.as_str()]);
    }
    splitnet_env(opts, layout, &up)
}

/// Runs `splitnet UP...` (an `up` command line) and measures its default
/// domains: hv through its process, drv, guest1 and guest2 through their
/// cgroups, the wire host through a cgroup of the suite's; flows TX and RX
/// between guest1 and the wire, guest-to-guest from guest2 to guest1.
pub(crate) fn splitnet_env(
    opts: &BaselineOptions,
    layout: &CgroupLayout,
    up: &[&str],
) -> Result<Env> {
    splitnet(opts, up)?;
    let hv_pid = std::fs::read_to_string(opts.run_dir.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let mut domains = vec![Domain {
        name: "hv".into(),
        cgroup: None,
        pid: hv_pid,
    }];
    for n in ["drv", "guest1", "guest2"] {
        domains.push(Domain {
            name: n.into(),
            cgroup: Cgroup::open(layout, n),
            pid: None,
        });
    }
    domains.extend(bench_domains(layout, &["wire"])?);
    let mut env = Env::new(domains);
    env.splitnet = true;
    let ns = host::netns_name;
    let (wire, g1, g2) = (ns("wire"), ns("guest1"), ns("guest2"));
    // Applications run in their guest's cgroup: the guest pays for its own stack.
    let f = &mut env.flows;
    f.insert(
        "tx",
        FlowSpec::new(&wire, "10.77.0.254", &g1, false).charged(4, 2),
    );
    f.insert(
        "rx",
        FlowSpec::new(&wire, "10.77.0.254", &g1, true).charged(4, 2),
    );
    f.insert(
        "guest-to-guest",
        FlowSpec::new(&g2, "10.77.0.2", &g1, false).charged(3, 2),
    );
    Ok(env)
}

pub(crate) fn tear_down(env: Env, opts: &BaselineOptions, layout: &CgroupLayout) {
    if env.splitnet {
        let _ = splitnet(opts, &["down"]);
    }
    drop(env);
    for n in BENCH_CGROUPS {
        if let Some(cg) = Cgroup::open(layout, &format!("bench-{n}")) {
            cg.destroy(Duration::from_millis(200));
        }
    }
}

/// What one flow (or several at once) measured.
pub(crate) struct Measured {
    pub(crate) flow: FlowResult,
    pub(crate) cpu_seconds: PerDomain,
    pub(crate) cycles_per_packet: PerDomain,
    pub(crate) profile: Option<prof::Profile>,
}

fn measure(
    env: &Env,
    dir: Direction,
    workload: Workload,
    secs: u32,
    tsc_hz: f64,
    profile: Option<&str>,
) -> Result<Measured> {
    measure_flows(env, &[dir.name()], workload, secs, tsc_hz, profile)
}

/// One flow of `env`, as named in `Env::flows`.
fn run_flow(env: &Env, name: &str, workload: Workload, secs: u32) -> Result<FlowResult> {
    let f = env.flows.get(name).context("no such direction")?;
    netenv::run(&Flow {
        server_ns: &f.server_ns,
        server_ip: f.server_ip,
        server_bind: f.server_bind,
        port: f.port,
        client_ns: &f.client_ns,
        reverse: f.reverse,
        secs,
        workload,
        server_cgroup: env.domains[f.server_dom].cgroup.as_ref(),
        client_cgroup: env.domains[f.client_dom].cgroup.as_ref(),
    })
}

/// The flows `names` of `env` at once (each on its own port), with every
/// domain's CPU time over them; throughput and packets are their sums.
pub(crate) fn measure_flows(
    env: &Env,
    names: &[&str],
    workload: Workload,
    secs: u32,
    tsc_hz: f64,
    profile: Option<&str>,
) -> Result<Measured> {
    let flow = || -> Result<FlowResult> {
        let results: Vec<Result<FlowResult>> = std::thread::scope(|sc| {
            let hs: Vec<_> = names
                .iter()
                .map(|n| sc.spawn(move || run_flow(env, n, workload, secs)))
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a flow panicked")))
                })
                .collect()
        });
        sum_flows(results)
    };
    let opts = profile.map(|initiator| prof::ProfileOptions {
        initiator: initiator.to_string(),
        ..Default::default()
    });
    measure_with(env, tsc_hz, opts, flow)
}

/// The sum of flows run at once: throughput, bytes and packets add up.
pub(crate) fn sum_flows(results: Vec<Result<FlowResult>>) -> Result<FlowResult> {
    let mut sum: Option<FlowResult> = None;
    for r in results {
        let r = r?;
        sum = Some(match sum {
            None => r,
            Some(s) => FlowResult {
                gbps: s.gbps + r.gbps,
                bytes: s.bytes + r.bytes,
                packets: s.packets + r.packets,
                seconds: s.seconds.max(r.seconds),
                latency: None,
            },
        });
    }
    sum.context("no flow to measure")
}

/// Runs `flow` with every domain's CPU time over it, under the profiler
/// when `profile` is given (hv's pid filled in from `env`).
pub(crate) fn measure_with(
    env: &Env,
    tsc_hz: f64,
    profile: Option<prof::ProfileOptions>,
    flow: impl FnOnce() -> Result<FlowResult> + Send,
) -> Result<Measured> {
    let before: Vec<Duration> = env.domains.iter().map(Domain::cpu).collect();
    let (r, profile) = match profile {
        None => (flow()?, None),
        Some(mut opts) => {
            opts.hv_pid = env
                .domains
                .iter()
                .find(|d| d.name == "hv")
                .and_then(|d| d.pid);
            let (r, p) = prof::profile_while(opts, flow)
                .map_err(|e| anyhow::anyhow!("profiling the flow: {e}"))?;
            (r?, Some(p))
        }
    };
    let cpu: BTreeMap<String, f64> = env
        .domains
        .iter()
        .zip(before)
        .map(|(d, b)| (d.name.clone(), d.cpu().saturating_sub(b).as_secs_f64()))
        .collect();
    let cpp = cycles_per_packet(&cpu, r.packets, tsc_hz);
    Ok(Measured {
        flow: r,
        cpu_seconds: cpu,
        cycles_per_packet: cpp,
        profile,
    })
}

/// Cycles per packet from CPU seconds per domain: each domain's share and a
/// "total" (Ram thesis §2.4). Empty when no packet arrived.
pub fn cycles_per_packet(
    cpu_seconds: &BTreeMap<String, f64>,
    packets: f64,
    tsc_hz: f64,
) -> BTreeMap<String, f64> {
    if packets <= 0.0 {
        return BTreeMap::new();
    }
    let mut out: BTreeMap<String, f64> = cpu_seconds
        .iter()
        .map(|(d, s)| (d.clone(), s * tsc_hz / packets))
        .collect();
    out.insert(
        "total".into(),
        cpu_seconds.values().sum::<f64>() * tsc_hz / packets,
    );
    out
}

/// Writes `<dir>/<stem>.json` and `<dir>/<stem>.svg`.
fn write_profile(dir: &std::path::Path, stem: &str, p: &prof::Profile) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (ext, text) in [("json", p.to_json()), ("svg", p.to_svg())] {
        let path = dir.join(format!("{stem}.{ext}"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The default topology with `guests` guests (guest1 and guest2 as in the
/// default; the others idle, each with its own address).
pub fn many_guests_topology(guests: usize) -> String {
    let mut t = String::from(
        "# bench baseline: the default topology with idle guests beside guest1 and guest2.\n\
         name = \"many-guests\"\n\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n",
    );
    t += &format!("memory_frames = {}\n", 4096 + 512 * guests);
    for g in 1..=guests {
        t += &format!(
            "\n[[domain]]\nname = \"guest{g}\"\nkind = \"guest\"\naddress = \"10.77.{}.{}/16\"\n",
            g / 250,
            g % 250
        );
    }
    t + "\n[wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/16\"\n"
}

/// The default topology with `ip=` (each guest's own IPv4 and IPv6
/// addresses) and `rate=` (10 GB/s, above what any path here carries) on
/// both guests' vifs.
pub fn vif_options_topology() -> String {
    let mut t = String::from(
        "# bench baseline: the default topology with ip= and rate= on both guests' vifs.\n\
         name = \"vif-options\"\n\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n",
    );
    for g in 1..=2 {
        t += &format!(
            "\n[[domain]]\nname = \"guest{g}\"\nkind = \"guest\"\naddress = \"10.77.0.{g}/24\"\n\
             ipv6 = \"fd77::{g}/64\"\nvif = [\"ip=10.77.0.{g} fd77::{g},rate=10GB/s\"]\n"
        );
    }
    t + "\n[wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\nipv6 = \"fd77::fe/64\"\n"
}

/// The default topology with guest1 on `nic = "virtio"` (guest2 keeps its
/// netfront vif).
pub fn virtio_topology() -> String {
    "# bench baseline: the default topology with guest1 on a virtio NIC over vhost-user.\n\
     name = \"virtio\"\n\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\n\
     [[domain]]\nname = \"guest1\"\nkind = \"guest\"\nnic = \"virtio\"\naddress = \"10.77.0.1/24\"\n\n\
     [[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\n\n\
     [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n"
        .into()
}

/// The directions measured for workload `w`: a request-response flow is
/// the same both ways, so it runs guest→wire and guest→guest only.
fn directions(cfg: Config, w: Workload) -> &'static [Direction] {
    match (w.is_latency(), cfg.directions().len()) {
        (true, 2) => &DIRECTIONS[..1],
        (true, _) => &[Direction::Tx, Direction::GuestToGuest],
        _ => cfg.directions(),
    }
}

/// Median latency of a row's runs, and against native's of the same run
/// and direction.
fn latency_summary(rs: &[&Record], all: &[Record], w: Workload) -> Option<LatencySummary> {
    if !w.is_latency() {
        return None;
    }
    let lat: Vec<(usize, Latency)> = rs
        .iter()
        .filter_map(|r| Some((r.run, r.latency?)))
        .collect();
    if lat.is_empty() {
        return None;
    }
    let native = |run: usize, dir: Direction| {
        all.iter()
            .find(|n| {
                n.config == Config::Native && n.workload == w && n.run == run && n.direction == dir
            })
            .and_then(|n| n.latency)
    };
    let dir = rs.first()?.direction;
    let times = |pick: fn(&Latency) -> f64| {
        let v: Vec<f64> = lat
            .iter()
            .filter_map(|(run, l)| native(*run, dir).map(|n| pick(l) / pick(&n)))
            .filter(|x| x.is_finite())
            .collect();
        (!v.is_empty()).then(|| median(&v))
    };
    let p50: Vec<f64> = lat.iter().map(|(_, l)| l.p50_us).collect();
    let p99: Vec<f64> = lat.iter().map(|(_, l)| l.p99_us).collect();
    Some(LatencySummary {
        p50_us: median(&p50),
        p99_us: median(&p99),
        p50_x_native: times(|l| l.p50_us),
        p99_x_native: times(|l| l.p99_us),
    })
}

/// The workloads a run measures: those asked for, or the default set.
fn chosen_workloads(opts: &BaselineOptions) -> Vec<Workload> {
    if !opts.workloads.is_empty() {
        opts.workloads.clone()
    } else if opts.quick {
        vec![Workload::TcpZerocopy]
    } else {
        vec![
            Workload::TcpZerocopy,
            Workload::TcpCopy,
            Workload::UdpSmall,
            Workload::TcpRr,
        ]
    }
}

/// The configurations a run measures (native always), and the peers left
/// out because their tool is not installed.
fn chosen_configs(opts: &BaselineOptions) -> (Vec<Config>, Vec<String>) {
    let (mut configs, mut skipped) = (Vec::new(), Vec::new());
    let wanted =
        |c: Config| opts.configs.is_empty() || c == Config::Native || opts.configs.contains(&c);
    for cfg in CONFIGS.into_iter().filter(|&c| wanted(c)) {
        match cfg.tool() {
            Some(t) if !t.installed() => skipped.push(format!(
                "{}: not installed (Debian package {})",
                t.name(),
                t.package()
            )),
            _ => configs.push(cfg),
        }
    }
    (configs, skipped)
}

/// A progress bar on stderr, one step per flow.
struct Progress {
    on: bool,
    step: usize,
    total: usize,
}

impl Progress {
    fn show(&mut self, run: usize, cfg: Config, dir: Direction, w: Workload) {
        self.step += 1;
        if !self.on {
            return;
        }
        let done = self.step * 30 / self.total.max(1);
        eprint!(
            "\r[{}{}] {}/{} run {} {} {} {}          ",
            "#".repeat(done),
            ".".repeat(30usize.saturating_sub(done)),
            self.step,
            self.total,
            run + 1,
            cfg.name(),
            dir.name(),
            w.name()
        );
        let _ = std::io::stderr().flush();
    }
}

/// What one run of one configuration is measured with.
struct RunCtx<'a> {
    opts: &'a BaselineOptions,
    workloads: &'a [Workload],
    tsc_hz: f64,
}

/// Every flow of one configuration in one run, appended to `records`.
fn measure_config(
    ctx: &RunCtx<'_>,
    env: &Env,
    cfg: Config,
    run: usize,
    progress: &mut Progress,
    records: &mut Vec<Record>,
) -> Result<()> {
    let opts = ctx.opts;
    for &w in ctx.workloads {
        for &dir in directions(cfg, w) {
            progress.show(run, cfg, dir, w);
            let initiator = opts.profile.then_some("splitnet bench baseline");
            let m = measure(env, dir, w, opts.secs, ctx.tsc_hz, initiator)?;
            if let (Some(p), Some(d)) = (&m.profile, &opts.profile_dir) {
                let stem = format!("{}-{}-{}-run{}", cfg.name(), dir.name(), w.name(), run + 1);
                write_profile(d, &stem, p)?;
            }
            records.push(Record {
                config: cfg,
                direction: dir,
                workload: w,
                run,
                gbps: m.flow.gbps,
                ratio_to_native: None,
                ratio_to_forwarder: None,
                cpu_seconds: m.cpu_seconds,
                cycles_per_packet: m.cycles_per_packet,
                packets: m.flow.packets,
                latency: m.flow.latency,
                profile: m.profile.map(|p| p.summary()),
            });
        }
    }
    Ok(())
}

/// Ratios against native and the forwarder of the same run, direction and workload.
fn add_ratios(records: &mut [Record]) {
    let of = |cfg: Config| -> Vec<(Direction, Workload, usize, f64)> {
        records
            .iter()
            .filter(|r| r.config == cfg)
            .map(|r| (r.direction, r.workload, r.run, r.gbps))
            .collect()
    };
    let (natives, forwarders) = (of(Config::Native), of(Config::MinimalForwarder));
    let ratio = |refs: &[(Direction, Workload, usize, f64)], r: &Record| {
        refs.iter()
            .find(|n| n.0 == r.direction && n.1 == r.workload && n.2 == r.run && n.3 > 0.0)
            .map(|n| r.gbps / n.3)
    };
    for r in records.iter_mut() {
        r.ratio_to_native = ratio(&natives, r);
        r.ratio_to_forwarder = ratio(&forwarders, r);
    }
}

/// Medians over runs, one row per (configuration, workload, direction).
fn summarize(records: &[Record], configs: &[Config], workloads: &[Workload]) -> Vec<Summary> {
    let mut summary = Vec::new();
    for &cfg in configs {
        for &w in workloads {
            for dir in DIRECTIONS {
                let rs: Vec<&Record> = records
                    .iter()
                    .filter(|r| r.config == cfg && r.workload == w && r.direction == dir)
                    .collect();
                if rs.is_empty() {
                    continue;
                }
                let g: Vec<f64> = rs.iter().map(|r| r.gbps).collect();
                let ratios: Vec<f64> = rs.iter().filter_map(|r| r.ratio_to_native).collect();
                let fwd: Vec<f64> = rs.iter().filter_map(|r| r.ratio_to_forwarder).collect();
                let cpp: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| r.cycles_per_packet.get("total").copied())
                    .collect();
                summary.push(Summary {
                    config: cfg,
                    direction: dir,
                    workload: w,
                    runs: rs.len(),
                    median_gbps: median(&g),
                    min_gbps: g.iter().copied().fold(f64::INFINITY, f64::min),
                    max_gbps: g.iter().copied().fold(0.0, f64::max),
                    median_ratio_to_native: (!ratios.is_empty()).then(|| median(&ratios)),
                    median_ratio_to_forwarder: (!fwd.is_empty()).then(|| median(&fwd)),
                    median_cycles_per_packet: median(&cpp),
                    latency: latency_summary(&rs, records, w),
                });
            }
        }
    }
    summary
}

/// Runs the suite.
pub fn run(opts: &BaselineOptions) -> Result<BaselineReport> {
    let tsc_hz = tsc_per_us() * 1e6;
    let layout = CgroupLayout::detect();
    let workloads = chosen_workloads(opts);
    let runs = opts.runs.max(1);
    let (configs, skipped) = chosen_configs(opts);
    let per_run: usize = configs
        .iter()
        .flat_map(|&c| workloads.iter().map(move |&w| directions(c, w).len()))
        .sum();
    let mut progress = Progress {
        on: opts.progress,
        step: 0,
        total: runs * per_run,
    };
    let ctx = RunCtx {
        opts,
        workloads: &workloads,
        tsc_hz,
    };
    let mut records: Vec<Record> = Vec::new();
    for run in 0..runs {
        for &cfg in &configs {
            let env = bring_up(cfg, opts, &layout)
                .with_context(|| format!("bringing up {}", cfg.name()))?;
            let result = measure_config(&ctx, &env, cfg, run, &mut progress, &mut records);
            tear_down(env, opts, &layout);
            result.with_context(|| format!("measuring {}", cfg.name()))?;
        }
    }
    if opts.progress {
        eprintln!();
    }
    add_ratios(&mut records);
    let summary = summarize(&records, &configs, &workloads);
    Ok(BaselineReport {
        suite: "baseline",
        tsc_mhz: tsc_hz / 1e6,
        runs,
        seconds_per_flow: opts.secs,
        spin_us: opts.spin_us,
        records,
        summary,
        skipped,
    })
}

impl BaselineReport {
    /// The records (one per run) behind a summary row.
    fn runs_of<'a>(&'a self, m: &'a Summary) -> impl Iterator<Item = &'a Record> {
        self.records.iter().filter(move |r| {
            r.config == m.config && r.workload == m.workload && r.direction == m.direction
        })
    }

    /// A Markdown table of the medians.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| config | direction | workload | Gbit/s (median) | min–max | ratio to native | ratio to forwarder | cycles/packet |\n\
             |---|---|---|---:|---:|---:|---:|---:|\n",
        );
        for m in self.summary.iter().filter(|m| m.latency.is_none()) {
            s += &format!(
                "| {} | {} | {} | {:.2} | {:.2}–{:.2} | {} | {} | {:.0} |\n",
                m.config.name(),
                m.direction.name(),
                m.workload.name(),
                m.median_gbps,
                m.min_gbps,
                m.max_gbps,
                m.median_ratio_to_native
                    .map_or("-".into(), |r| format!("{r:.3}")),
                m.median_ratio_to_forwarder
                    .map_or("-".into(), |r| format!("{r:.3}")),
                m.median_cycles_per_packet
            );
        }
        s += &self.latency_table();
        s += &format!(
            "\n{} run(s), {} s per flow, TSC {:.0} MHz. Cycles per packet: CPU time of every domain (kernel included) \
             × TSC rate ÷ 1514-byte frames (TCP payload / 1448) or UDP datagrams.\n",
            self.runs, self.seconds_per_flow, self.tsc_mhz
        );
        if let Some(us) = self.spin_us {
            s += &format!("splitnet's domains spun {us} µs before sleeping (`--spin-us`).\n");
        }
        for k in &self.skipped {
            s += &format!("\nNot measured: {k}.");
        }
        s + "\n"
    }

    /// The request-response rows: one-way latency and its multiple of native's.
    fn latency_table(&self) -> String {
        let rows: Vec<(&Summary, &LatencySummary)> = self
            .summary
            .iter()
            .filter_map(|m| Some((m, m.latency.as_ref()?)))
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        let mut s = String::from(
            "\n| config | direction | workload | p50 µs | p99 µs | p50 × native | p99 × native | cycles/message |\n\
             |---|---|---|---:|---:|---:|---:|---:|\n",
        );
        let x = |v: Option<f64>| v.map_or("-".into(), |r| format!("{r:.2}"));
        for (m, l) in rows {
            s += &format!(
                "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.0} |\n",
                m.config.name(),
                m.direction.name(),
                m.workload.name(),
                l.p50_us,
                l.p99_us,
                x(l.p50_x_native),
                x(l.p99_x_native),
                m.median_cycles_per_packet
            );
        }
        s
    }

    /// Per-domain cycles per packet of every median run, as a second table.
    pub fn cycles_table(&self) -> String {
        let mut s = String::from(
            "| config | direction | workload | cycles/packet by domain |\n|---|---|---|---|\n",
        );
        for m in &self.summary {
            let rs: Vec<&Record> = self.runs_of(m).collect();
            let mut doms: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            for r in rs {
                for (k, v) in &r.cycles_per_packet {
                    if k != "total" {
                        doms.entry(k).or_default().push(*v);
                    }
                }
            }
            let parts: Vec<String> = doms
                .iter()
                .map(|(k, v)| format!("{k} {:.0}", median(v)))
                .collect();
            s += &format!(
                "| {} | {} | {} | {} |\n",
                m.config.name(),
                m.direction.name(),
                m.workload.name(),
                parts.join(", ")
            );
        }
        s
    }

    /// With `--profile`: where each configuration's samples went (median
    /// shares over runs; the three largest domains and classes).
    pub fn profile_table(&self) -> Option<String> {
        if self.records.iter().all(|r| r.profile.is_none()) {
            return None;
        }
        let mut s = String::from(
            "| config | direction | workload | attributed | domains (share of samples) | classes (share of samples) |\n\
             |---|---|---|---:|---|---|\n",
        );
        let top = |shares: BTreeMap<String, Vec<f64>>| {
            let mut v: Vec<(String, f64)> =
                shares.into_iter().map(|(k, v)| (k, median(&v))).collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            v.iter()
                .take(3)
                .map(|(k, p)| format!("{k} {p:.0}%"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for m in &self.summary {
            let ps: Vec<&prof::ProfileSummary> =
                self.runs_of(m).filter_map(|r| r.profile.as_ref()).collect();
            if ps.is_empty() {
                continue;
            }
            let (mut doms, mut classes) = (BTreeMap::new(), BTreeMap::new());
            for p in &ps {
                for (k, v) in &p.domains {
                    doms.entry(k.clone()).or_insert_with(Vec::new).push(*v);
                }
                for (k, v) in &p.classes {
                    classes.entry(k.clone()).or_insert_with(Vec::new).push(*v);
                }
            }
            let attributed: Vec<f64> = ps.iter().map(|p| p.attributed_fraction).collect();
            s += &format!(
                "| {} | {} | {} | {:.1}% | {} | {} |\n",
                m.config.name(),
                m.direction.name(),
                m.workload.name(),
                median(&attributed) * 100.0,
                top(doms),
                top(classes)
            );
        }
        Some(s)
    }

    /// Throughput of the first stream workload: the configurations side by
    /// side in each direction.
    pub fn svg(&self) -> String {
        let stream = self.summary.iter().find(|m| !m.workload.is_latency());
        let Some(first) = stream.map(|m| m.workload) else {
            return String::new();
        };
        let rows: Vec<&Summary> = self
            .summary
            .iter()
            .filter(|m| m.workload == first)
            .collect();
        let dirs: Vec<Direction> = DIRECTIONS
            .into_iter()
            .filter(|d| rows.iter().any(|m| m.direction == *d))
            .collect();
        let configs: Vec<Config> = CONFIGS
            .into_iter()
            .filter(|c| rows.iter().any(|m| m.config == *c))
            .collect();
        plot::grouped(&plot::Grouped {
            title: format!(
                "splitnet bench baseline: {} throughput (median)",
                first.name()
            ),
            y_label: "Gbit/s".into(),
            groups: dirs.iter().map(|d| d.name().to_string()).collect(),
            series: configs.iter().map(|c| c.name().to_string()).collect(),
            values: configs
                .iter()
                .map(|c| {
                    dirs.iter()
                        .map(|d| {
                            rows.iter()
                                .find(|m| m.config == *c && m.direction == *d)
                                .map(|m| m.median_gbps)
                        })
                        .collect()
                })
                .collect(),
            paper: Vec::new(),
            reference: None,
        })
    }
}

/// The seed configurations' medians for one direction of the first stream
/// workload: throughput over native, and cycles per frame by domain.
fn seed_rows(
    r: &BaselineReport,
    dir: Direction,
) -> Vec<(Config, Option<f64>, BTreeMap<String, f64>)> {
    let Some(w) = r
        .summary
        .iter()
        .find(|m| !m.workload.is_latency())
        .map(|m| m.workload)
    else {
        return Vec::new();
    };
    let cfgs = [
        Config::Native,
        Config::SplitnetBaseline,
        Config::SplitnetHvCopy,
        Config::SplitnetDefault,
    ];
    cfgs.into_iter()
        .filter_map(|c| {
            let m = r
                .summary
                .iter()
                .find(|m| m.config == c && m.direction == dir && m.workload == w)?;
            let recs: Vec<&Record> = r
                .records
                .iter()
                .filter(|x| x.config == c && x.direction == dir && x.workload == w)
                .collect();
            let mut by: BTreeMap<String, f64> = BTreeMap::new();
            let keys: Vec<&String> = recs
                .iter()
                .flat_map(|x| x.cycles_per_packet.keys())
                .collect();
            for k in keys.into_iter().filter(|k| k.as_str() != "total") {
                let v: Vec<f64> = recs
                    .iter()
                    .filter_map(|x| x.cycles_per_packet.get(k).copied())
                    .collect();
                by.insert(k.clone(), crate::stats::median(&v));
            }
            if by.is_empty() {
                by.insert("total".into(), m.median_cycles_per_packet);
            }
            Some((c, m.median_ratio_to_native, by))
        })
        .collect()
}

/// Cycles per frame by domain of the seed configurations, a table and stacked bars.
fn seed_cycles(r: &BaselineReport, dir: Direction, title: &str) -> (String, String, bool) {
    let rows = seed_rows(r, dir);
    let mut classes: Vec<String> = Vec::new();
    for (_, _, by) in &rows {
        for k in by.keys() {
            if !classes.contains(k) {
                classes.push(k.clone());
            }
        }
    }
    let mut t = format!(
        "| configuration | × native (throughput) | {} |\n|---|---:|{}\n",
        classes.join(" | "),
        "---:|".repeat(classes.len())
    );
    for (c, ratio, by) in &rows {
        let cells: Vec<String> = classes
            .iter()
            .map(|k| by.get(k).map_or("-".into(), |v| format!("{v:.0}")))
            .collect();
        t += &format!(
            "| {} | {} | {} |\n",
            c.name(),
            ratio.map_or("-".into(), |v| format!("{v:.2}")),
            cells.join(" | ")
        );
    }
    let svg = plot::stacked(&plot::Stacked {
        title: title.to_string(),
        y_label: "TSC cycles per frame (median)".into(),
        bars: rows.iter().map(|r| r.0.name().to_string()).collect(),
        values: rows
            .iter()
            .map(|(_, _, by)| {
                classes
                    .iter()
                    .map(|k| by.get(k).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect(),
        classes,
    });
    let measured = rows.iter().any(|r| r.0 != Config::Native);
    (t, svg, measured)
}

/// The seeds' figures this suite speaks to, for `bench seeds`: the Ram
/// thesis's Figures 2.4 and 2.5 with the seed's Xen 2.0 preset, and Menon
/// 2006's Table 1 for the guest.
pub fn figures(r: &BaselineReport) -> Vec<seeds::Figure> {
    use seeds::{Figure, Kind, Seed, Status};
    let why = "bench baseline: the seed's Xen 2.0 preset and splitnet's presets against native, \
               in 64 KiB GSO frames (bench ram's Orig is the thesis's own configuration)";
    let mut out = Vec::new();
    for (id, dir) in [("Figure 2.4", Direction::Rx), ("Figure 2.5", Direction::Tx)] {
        let (t, svg, measured) = seed_cycles(
            r,
            dir,
            &format!(
                "Ram thesis {id}, bench baseline: {} cycles per frame by domain",
                dir.name()
            ),
        );
        let mut f = Figure::new(Seed::Ram, id, Kind::Stacked, t, svg).missing_if(!measured);
        if measured {
            f.status = Status::Partly;
            f.reason = why.into();
        }
        let total = |c| {
            r.summary
                .iter()
                .find(|m| m.config == c && m.direction == dir && !m.workload.is_latency())
                .map(|m| m.median_cycles_per_packet)
        };
        if let (Some(x), Some(n)) = (total(Config::SplitnetBaseline), total(Config::Native)) {
            f.ours.push(("total ÷ native".into(), x / n));
        }
        out.push(f);
    }
    let ratio = |d| {
        seed_rows(r, d)
            .into_iter()
            .find(|x| x.0 == Config::SplitnetBaseline)
            .and_then(|x| x.1)
    };
    let mut t = String::from("| configuration | TX × native | RX × native |\n|---|---:|---:|\n");
    let (tx, rx) = (seed_rows(r, Direction::Tx), seed_rows(r, Direction::Rx));
    let cell = |rows: &[(Config, Option<f64>, BTreeMap<String, f64>)], c| {
        rows.iter()
            .find(|x| x.0 == c)
            .and_then(|x| x.1)
            .map_or("-".to_string(), |v| format!("{v:.2}"))
    };
    for c in [
        Config::Native,
        Config::SplitnetBaseline,
        Config::SplitnetHvCopy,
        Config::SplitnetDefault,
    ] {
        t += &format!("| {} | {} | {} |\n", c.name(), cell(&tx, c), cell(&rx, c));
    }
    let mut t1 = Figure::new(Seed::Menon2006, "Table 1", Kind::Grouped, t, r.svg());
    t1.status = Status::Partly;
    t1.reason = "bench baseline measures a guest under the seed's Xen 2.0 preset against native; \
                 the driver-domain rows need `splitnet bench menon2006`"
        .into();
    for (label, d) in [
        ("guest RX ÷ native", Direction::Rx),
        ("guest TX ÷ native", Direction::Tx),
    ] {
        if let Some(v) = ratio(d) {
            t1.ours.push((label.into(), v));
        }
    }
    let empty = t1.ours.is_empty();
    out.push(t1.missing_if(empty));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_serializes_as_it_is_named() {
        for c in CONFIGS {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name(), "{c:?}");
        }
    }

    #[test]
    fn the_many_guests_topology_parses_with_every_guest() {
        let t = toolstack::topology::Topology::parse(&many_guests_topology(24), "24.toml")
            .expect("the generated topology is valid");
        let guests = t
            .domains
            .iter()
            .filter(|d| d.name.starts_with("guest"))
            .count();
        assert_eq!(guests, 24);
    }

    #[test]
    fn the_vif_options_topology_sets_ip_and_rate_on_both_guests() {
        let t = toolstack::topology::Topology::parse(&vif_options_topology(), "vif-options.toml")
            .expect("the generated topology is valid");
        let vifs = t.vifs();
        assert_eq!(vifs.len(), 2);
        for v in vifs {
            assert_eq!(v.opts.ip.len(), 2, "{v:?}");
            assert!(v.opts.rate.is_some(), "{v:?}");
        }
    }

    #[test]
    fn cycles_per_packet_divides_each_domains_cycles_by_frames() {
        // 1 Gbit/s of TCP payload for 1 s = 125e6 B = 86326 frames of 1448 B.
        let packets = 125e6 / netenv::PAYLOAD_PER_FRAME;
        let cpu: BTreeMap<String, f64> = [("drv".to_string(), 0.5), ("guest1".to_string(), 0.25)]
            .into_iter()
            .collect();
        let c = cycles_per_packet(&cpu, packets, 2.0e9);
        assert!((c["drv"] - 0.5 * 2.0e9 / packets).abs() < 1e-6);
        assert!((c["guest1"] - 5792.0).abs() < 1.0, "{c:?}");
        assert!((c["total"] - (c["drv"] + c["guest1"])).abs() < 1e-6);
        assert!(cycles_per_packet(&cpu, 0.0, 2.0e9).is_empty());
    }
}
