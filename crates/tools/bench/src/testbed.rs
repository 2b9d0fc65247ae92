//! The testbed every throughput suite measures on: the configurations
//! (native, the kernel's bridge, the minimal forwarder, user-mode
//! networking, splitnet's modes) brought up in namespaces, the flows
//! between their ends, and the CPU time each domain spends on them,
//! as cycles per packet (Ram thesis §2.4).

use crate::harness::RunOptions;
use crate::netenv::{self, Flow, FlowResult, Forwarded, KernelBridge, Native, Workload};
use crate::usernet::{self, Tool, UserNet};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use toolstack::cgroup::{Cgroup, CgroupLayout};
use toolstack::host;

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
    /// splitnet with hv's grant copies (the thesis's "Orig" receive; its
    /// transmit mapped): RX copy, TX copy, offloads on.
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
    /// The default preset's driver domain with a `pasta` uplink instead of
    /// the wire: guest1 to the host's loopback and back through pasta, as
    /// rootless splitnet reaches the host. TX and RX only.
    SplitnetPasta,
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
            Config::SplitnetPasta => "splitnet-pasta",
        }
    }

    /// The directions a configuration carries (the forwarder has no second guest).
    pub fn directions(self) -> &'static [Direction] {
        match self {
            Config::MinimalForwarder | Config::SplitnetPasta => &DIRECTIONS[..2],
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

    /// The tool a configuration cannot run without, if any.
    pub fn requires(self) -> Option<Tool> {
        match self {
            Config::SplitnetPasta => Some(Tool::Pasta),
            c => c.tool(),
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

pub(crate) const DIRECTIONS: [Direction; 3] =
    [Direction::Tx, Direction::Rx, Direction::GuestToGuest];
pub(crate) const CONFIGS: [Config; 12] = [
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
    Config::SplitnetPasta,
];

/// The seed suites' `up` option for their ports: no GRO, as the papers'
/// NICs coalesced nothing (their drivers handed the stack MTU-sized frames).
pub const PAPER_NIC: [&str; 2] = ["--port-gro", "off"];

/// What a rootless run measures by default: what it can run, and the
/// peers a user without root would otherwise pick.
pub const ROOTLESS_CONFIGS: [Config; 5] = [
    Config::Native,
    Config::Pasta,
    Config::Slirp4netns,
    Config::SplitnetDefault,
    Config::SplitnetPasta,
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
    server_ip: String,
    /// Where the server listens, if not `server_ip`.
    server_bind: Option<&'static str>,
    port: u16,
    client_ns: String,
    /// Data flows server → client.
    reverse: bool,
    /// Indices into `Env::domains` of the server's and the client's domain.
    server_dom: usize,
    client_dom: usize,
    /// Cores the server and the client run on (the paper's machine).
    server_cpu: Option<usize>,
    client_cpu: Option<usize>,
}

impl FlowSpec {
    pub(crate) fn new(
        server_ns: &str,
        server_ip: &str,
        client_ns: &str,
        reverse: bool,
    ) -> FlowSpec {
        FlowSpec {
            server_ns: server_ns.to_string(),
            server_ip: server_ip.to_string(),
            server_bind: None,
            port: netenv::DEFAULT_PORT,
            client_ns: client_ns.to_string(),
            reverse,
            server_dom: 0,
            client_dom: 0,
            server_cpu: None,
            client_cpu: None,
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

    /// The client's namespace and the address it connects to.
    pub(crate) fn client_and_server_ip(&self) -> (&str, &str) {
        (&self.client_ns, &self.server_ip)
    }

    /// The same flow on `port` (to run beside this one).
    pub(crate) fn on_port(&self, port: u16) -> FlowSpec {
        FlowSpec {
            port,
            ..self.clone()
        }
    }

    /// Pins the server to core `server` and the client to `client`.
    pub(crate) fn pinned(mut self, server: usize, client: usize) -> FlowSpec {
        self.server_cpu = Some(server);
        self.client_cpu = Some(client);
        self
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
    _nics: Option<crate::machine::MultiNative>,
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
            _nics: None,
            splitnet: false,
        }
    }

    /// Keeps native NICs for as long as the configuration is up.
    pub(crate) fn keep_nics(&mut self, nics: crate::machine::MultiNative) {
        self._nics = Some(nics);
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

/// Runs splitnet; on the paper's machine, on the server's core, so hv and
/// everything it starts stay there.
fn splitnet(opts: &RunOptions, args: &[&str]) -> Result<()> {
    let cpu = opts.paper.map(|p| p.server_cpu);
    crate::splitnet_on(&opts.exe, &opts.run_dir, args, cpu).map(drop)
}

/// Brings up configuration `cfg`: its namespaces and processes, the
/// domains to measure and the flow each direction runs.
pub(crate) fn bring_up(
    cfg: Config,
    opts: &RunOptions,
    spin_us: Option<u32>,
    layout: &CgroupLayout,
) -> Result<Env> {
    match cfg {
        Config::Native => bring_up_native(layout),
        Config::LinuxBridge => bring_up_bridge(layout),
        Config::MinimalForwarder => bring_up_forwarder(opts, layout),
        Config::Pasta | Config::Slirp4netns => bring_up_usernet(cfg, opts, layout),
        Config::SplitnetBaseline
        | Config::SplitnetHvCopy
        | Config::SplitnetDefault
        | Config::SplitnetIdle24
        | Config::SplitnetVifOptions
        | Config::SplitnetVirtio => bring_up_splitnet(cfg, opts, spin_us, layout),
        Config::SplitnetPasta => bring_up_splitnet_pasta(opts, layout),
    }
}

/// The native peer: two namespaces joined by a veth pair, nothing between
/// them; each direction is one flow from one end to the other.
fn bring_up_native(layout: &CgroupLayout) -> Result<Env> {
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

/// The kernel baseline: guests and a wire joined through a Linux bridge in
/// a driver namespace; TX and RX run against the wire, and one flow runs
/// guest to guest.
fn bring_up_bridge(layout: &CgroupLayout) -> Result<Env> {
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

/// The minimal forwarder: a guest and a wire joined by one user-space
/// forwarder process, measured through its own cgroup.
fn bring_up_forwarder(opts: &RunOptions, layout: &CgroupLayout) -> Result<Env> {
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

/// User-mode networking (pasta or slirp4netns): TX and RX run between a
/// guest and the host through the tool's gateway, guest to guest through
/// a port the tool forwards; each tool instance is measured through its
/// cgroup.
fn bring_up_usernet(cfg: Config, opts: &RunOptions, layout: &CgroupLayout) -> Result<Env> {
    let tool = cfg.tool().context("a peer configuration without a tool")?;
    let mut env = Env::new(bench_domains(
        layout,
        &["guest1", "guest2", "wire", tool.name()],
    )?);
    let cg = env.domains[3].cgroup.as_ref();
    let u = UserNet::new(tool, cg, &opts.run_dir, opts.rootless)?;
    let to_host = |reverse| FlowSpec {
        server_bind: Some(usernet::HOST_BIND),
        ..FlowSpec::new(&u.host, &u.gateway, &u.guest1, reverse).charged(2, 0)
    };
    env.flows.insert("tx", to_host(false));
    env.flows.insert("rx", to_host(true));
    env.flows.insert(
        "guest-to-guest",
        FlowSpec {
            server_bind: Some("0.0.0.0"),
            port: usernet::GUEST2_PORT,
            ..FlowSpec::new(&u.guest2, &u.gateway, &u.guest1, false).charged(1, 0)
        },
    );
    env._usernet = Some(u);
    Ok(env)
}

/// A splitnet configuration: `splitnet up` with its preset (and for the
/// 24-guest one, a generated topology); its domains are measured through
/// their own cgroups and hv through its process.
fn bring_up_splitnet(
    cfg: Config,
    opts: &RunOptions,
    spin_us: Option<u32>,
    layout: &CgroupLayout,
) -> Result<Env> {
    let preset = match cfg {
        Config::SplitnetBaseline => "baseline",
        Config::SplitnetHvCopy => "hv-copy",
        _ => "default",
    };
    let spin = spin_us.map(|us| us.to_string());
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

/// splitnet with a `pasta` uplink: `up` with [`pasta_topology`], guest1's
/// default route through the pasta namespace, and TX and RX between
/// guest1 and the host's loopback, where pasta delivers what guest1 sends
/// to the host's gateway, as for the `pasta` peer.
fn bring_up_splitnet_pasta(opts: &RunOptions, layout: &CgroupLayout) -> Result<Env> {
    let topo = opts.run_dir.join("bench-splitnet-pasta.toml");
    std::fs::create_dir_all(&opts.run_dir)?;
    std::fs::write(&topo, pasta_topology())
        .with_context(|| format!("writing {}", topo.display()))?;
    let gateway = usernet::host_gateway()?;
    let topo_arg = topo.to_string_lossy().into_owned();
    let mut env = splitnet_env(opts, layout, &["up", "--config", &topo_arg])?;
    let g1 = host::netns_name("guest1");
    host::ip_in(&g1, &["route", "add", "default", "via", PASTA_GATEWAY])?;
    env.flows.clear();
    for (d, reverse) in [("tx", false), ("rx", true)] {
        let f = FlowSpec {
            server_bind: Some(usernet::HOST_BIND),
            ..FlowSpec::new(netenv::HOST_NETNS, &gateway, &g1, reverse).charged(4, 2)
        };
        env.flows.insert(d, f);
    }
    Ok(env)
}

/// The pasta namespace's address on the driver domain's bridge: guests'
/// gateway in [`pasta_topology`].
const PASTA_GATEWAY: &str = "10.79.0.1";

/// The default topology with a `pasta` uplink on the driver domain in
/// place of the wire.
pub fn pasta_topology() -> String {
    "# bench baseline: the default topology with a pasta uplink instead of the wire.\n\
     name = \"pasta\"\n\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\n\
     [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.79.0.2/24\"\nvif = [\"mtu=9000\"]\n\n\
     [[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.79.0.3/24\"\nvif = [\"mtu=9000\"]\n\n\
     [[port]]\ndriver = \"drv\"\nkind = \"pasta\"\nsubnet = \"10.79.0.1/24\"\nmtu = 9000\n"
        .into()
}

/// Runs `splitnet UP...` (an `up` command line) and measures its default
/// domains: hv through its process, drv, guest1 and guest2 through their
/// cgroups, the wire host through a cgroup of the suite's; flows TX and RX
/// between guest1 and the wire, guest-to-guest from guest2 to guest1.
pub(crate) fn splitnet_env(opts: &RunOptions, layout: &CgroupLayout, up: &[&str]) -> Result<Env> {
    splitnet(opts, up)?;
    if let Some(pm) = &opts.paper {
        pm.steer_wires()?;
    }
    let hv_pid = std::fs::read_to_string(opts.run_dir.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let mut domains = vec![Domain {
        name: "hv".into(),
        cgroup: None,
        pid: hv_pid,
    }];
    let pids = if layout.is_empty() {
        domain_pids(opts)
    } else {
        BTreeMap::new()
    };
    for n in ["drv", "guest1", "guest2"] {
        domains.push(Domain {
            name: n.into(),
            cgroup: Cgroup::open(layout, n),
            pid: pids.get(n).copied(),
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

/// Each domain's pid, as `status --json` says: where no cgroup hierarchy
/// is writable (rootless), a domain's CPU time is its process's.
fn domain_pids(opts: &RunOptions) -> BTreeMap<String, i32> {
    let st = crate::status_json(&opts.exe, &opts.run_dir);
    st["domains"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| Some((d["name"].as_str()?.to_string(), d["pid"].as_i64()? as i32)))
        .collect()
}

pub(crate) fn tear_down(env: Env, opts: &RunOptions, layout: &CgroupLayout) {
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

pub(crate) fn measure(
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
        server_ip: &f.server_ip,
        server_bind: f.server_bind,
        port: f.port,
        client_ns: &f.client_ns,
        reverse: f.reverse,
        secs,
        workload,
        server_cgroup: env.domains[f.server_dom].cgroup.as_ref(),
        client_cgroup: env.domains[f.client_dom].cgroup.as_ref(),
        server_cpu: f.server_cpu,
        client_cpu: f.client_cpu,
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
    let mut cpu: BTreeMap<String, f64> = env
        .domains
        .iter()
        .zip(before)
        .map(|(d, b)| (d.name.clone(), d.cpu().saturating_sub(b).as_secs_f64()))
        .collect();
    if let Some(p) = &profile {
        charge_nic(&mut cpu, p);
    }
    let cpp = cycles_per_packet(&cpu, r.packets, tsc_hz);
    Ok(Measured {
        flow: r,
        cpu_seconds: cpu,
        cycles_per_packet: cpp,
        profile,
    })
}

/// Moves each domain's share of samples in the class `nic` (host work that
/// stands for the NIC's hardware: its DMA, its MAC filter, its line rate)
/// out of that domain's CPU seconds into a "nic" entry of its own (Ram
/// thesis §3.3: a multi-queue NIC places frames in the guest's memory).
pub(crate) fn charge_nic(cpu: &mut BTreeMap<String, f64>, p: &prof::Profile) {
    let mut nic = 0.0;
    for d in &p.domains {
        let Some(secs) = cpu.get_mut(&d.name) else {
            continue;
        };
        let samples = |c: prof::CostClass| {
            d.classes
                .iter()
                .find(|s| s.class == c)
                .map_or(0, |s| s.samples)
        };
        let work = d.samples.saturating_sub(samples(prof::CostClass::Idle));
        if work == 0 {
            continue;
        }
        let moved = *secs * samples(prof::CostClass::Nic) as f64 / work as f64;
        *secs -= moved;
        nic += moved;
    }
    if nic > 0.0 {
        cpu.insert(NIC.into(), nic);
    }
}

/// Each measured domain's cycles per frame (`cpp`, after [`charge_nic`])
/// split by the cost classes of its own samples, the NIC's and idle's left
/// out: domain → class → cycles. A domain the profile did not sample is
/// left out.
pub(crate) fn classes_by_domain(
    cpp: &BTreeMap<String, f64>,
    p: &prof::Profile,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for d in &p.domains {
        let Some(&cycles) = cpp.get(&d.name) else {
            continue;
        };
        let kept: Vec<&prof::ClassShare> = d
            .classes
            .iter()
            .filter(|c| {
                c.samples > 0 && !matches!(c.class, prof::CostClass::Nic | prof::CostClass::Idle)
            })
            .collect();
        let n: u64 = kept.iter().map(|c| c.samples).sum();
        if n == 0 {
            continue;
        }
        let split = kept
            .iter()
            .map(|c| {
                (
                    c.class.name().to_string(),
                    cycles * c.samples as f64 / n as f64,
                )
            })
            .collect();
        out.insert(d.name.clone(), split);
    }
    out
}

/// The entry of [`charge_nic`]: not a domain, and outside the "total".
pub const NIC: &str = "nic";

/// Cycles per packet from CPU seconds per domain: each domain's share and a
/// "total" of the domains' (Ram thesis §2.4), which leaves out the work
/// charged to the NIC ([`NIC`]). Empty when no packet arrived.
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
    let domains = cpu_seconds.iter().filter(|(d, _)| d.as_str() != NIC);
    out.insert(
        "total".into(),
        domains.map(|(_, s)| s).sum::<f64>() * tsc_hz / packets,
    );
    out
}

/// Writes `<dir>/<stem>.json` and `<dir>/<stem>.svg`.
pub(crate) fn write_profile(dir: &std::path::Path, stem: &str, p: &prof::Profile) -> Result<()> {
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

/// The VM a vhost-user frontend stands for (testpmd, a hostile VM), and
/// its MAC.
pub(crate) const VM: &str = "vm1";
pub(crate) const VM_MAC: &str = "52:54:00:12:34:56";

/// The default topology (drv, guest1, the wire) with VM `vm1` served over
/// vhost-user at `socket` by the same driver domain.
pub fn vm_topology(name: &str, what: &str, socket: &std::path::Path) -> String {
    format!(
        "# bench virtio: {what} beside a netfront guest.\n\
         name = \"{name}\"\n\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\n\
         [[domain]]\nname = \"{VM}\"\nkind = \"vm\"\nsocket = \"{}\"\nmac = \"{VM_MAC}\"\n\n\
         [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n",
        socket.display()
    )
}

/// One iperf3 flow of `workload` from guest1 to the wire host.
pub(crate) fn guest1_to_wire(secs: u32, workload: Workload) -> Result<netenv::FlowResult> {
    let (wire, g1) = (host::netns_name("wire"), host::netns_name("guest1"));
    let f = Flow {
        server_ns: &wire,
        server_ip: "10.77.0.254",
        server_bind: None,
        port: netenv::DEFAULT_PORT,
        client_ns: &g1,
        reverse: false,
        secs,
        workload,
        server_cgroup: None,
        client_cgroup: None,
        server_cpu: None,
        client_cpu: None,
    };
    netenv::run(&f)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_nics_share_of_a_domains_samples_leaves_it_and_the_total() {
        let sample = |name: &str, class| prof::ClassifiedSample {
            domain: prof::Domain {
                name: name.into(),
                kind: prof::DomainKind::Domain,
            },
            kernel: true,
            symbol: prof::Symbol::unknown_function(),
            class,
            mode: prof::Mode::Active,
            watched: Vec::new(),
        };
        // drv: 1 sample in 4 is the NIC's; guest1: none.
        let mut samples = vec![sample("drv", prof::CostClass::Nic)];
        samples.extend((0..3).map(|_| sample("drv", prof::CostClass::Netback)));
        samples.extend((0..2).map(|_| sample("guest1", prof::CostClass::Netfront)));
        let p = prof::Profile::from_samples(prof::ProfileMeta::default(), &samples, 5);
        let mut cpu: BTreeMap<String, f64> =
            [("drv".to_string(), 0.4), ("guest1".to_string(), 0.2)]
                .into_iter()
                .collect();
        charge_nic(&mut cpu, &p);
        assert!((cpu["drv"] - 0.3).abs() < 1e-9, "{cpu:?}");
        assert!((cpu[NIC] - 0.1).abs() < 1e-9, "{cpu:?}");
        assert_eq!(cpu["guest1"], 0.2);
        let c = cycles_per_packet(&cpu, 1.0, 1.0);
        assert!(
            (c["total"] - 0.5).abs() < 1e-9,
            "the NIC is outside the total: {c:?}"
        );
        assert!((c[NIC] - 0.1).abs() < 1e-9);
        // What stays with drv is all netback's; the NIC's is in no class.
        let by = classes_by_domain(&c, &p);
        assert_eq!(by["drv"].len(), 1, "{by:?}");
        assert!((by["drv"]["netback"] - c["drv"]).abs() < 1e-9);
        assert!((by["guest1"]["netfront"] - 0.2).abs() < 1e-9);
    }
}
