//! Suite `menon2006`: Menon, Cox and Zwaenepoel's "Optimizing Network
//! Virtualization in Xen" (2006) re-measured, one configuration per bar of
//! the paper: Table 1 and Figures 3 and 4 (Linux, Xen-driver,
//! Xen-driver-opt, Xen-guest, Xen-guest-opt), Figure 5 (the six Guest-*
//! transmit configurations), Figure 7 (the high-level interface over a
//! port of each capability), Figure 10 (transmit with copying writes),
//! Figure 11 (the driver domain receiving: Driver-none, Driver-MTU,
//! Driver-MTU-SP), Figure 13 (the guest receiving: page flip, copy, copy
//! with superpages) and Figures 6 and 8 (cycles per packet by domain, and
//! by class where the profiler runs). Figures 9 and 12 count TLB misses,
//! which need a PMU this machine does not have.
//!
//! Transmit is the paper's sendfile (`iperf3 -Z`), receive arrives in
//! MTU-sized frames as a NIC delivers them (the sender's TSO and GSO off).
//! Ratios to native are taken within each run; medians over runs. A
//! configuration whose topology keys this build lacks is reported as not
//! available, not as a failure.

use crate::harness::{self, Args, Output, RunOptions};
use crate::machine::{Machine, NicRate};
use crate::netenv::{self, Workload};
use crate::nstat;
use crate::opcount;
use crate::plot::{self, Bar};
use crate::ram::{
    by_class, by_domain, domain_classes, ethtool, medians, role_classes, unknown_key,
};
use crate::stats::{tsc_per_us, Spread};
use crate::testbed::{self, Config, Env, FlowSpec, Measured};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toolstack::cgroup::CgroupLayout;
use toolstack::host;

mod bars;
mod figures;
mod ops;
mod paper;
mod xen;

pub use bars::{bar_label, PaperBar, PaperFigure, FIGURES};
pub use figures::figures;
use xen::xen_split;

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct Menon2006Options {
    /// The options every suite shares.
    pub common: RunOptions,
    /// Only these configurations (Linux is always measured); empty: all.
    pub configs: Vec<M6Config>,
    /// Profile the transmit flows of Figures 6 and 8 for cost classes.
    pub profile: bool,
    /// The paper's machine (one CPU, four gigabit NICs) or this host's.
    pub machine: Machine,
    /// How the paper's machine rates its NICs.
    pub nic: NicRate,
}

impl Menon2006Options {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> Menon2006Options {
        Menon2006Options {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 2 } else { 5 }),
            configs: Vec::new(),
            profile: true,
            machine: Machine::Paper,
            nic: NicRate::Scaled,
        }
    }
}

/// A configuration, named as in the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum M6Config {
    /// Native Linux: two namespaces over a veth pair.
    Linux,
    /// The driver domain as the endpoint, unoptimized: every received
    /// frame in a page of its own (Driver-none, §6.4.1).
    #[serde(rename = "Xen-driver")]
    XenDriver,
    /// The driver domain with MTU-sized receive buffers (Driver-MTU).
    #[serde(rename = "Driver-MTU")]
    DriverMtu,
    /// MTU-sized buffers on superpages (Driver-MTU-SP); the paper's
    /// Xen-driver-opt added global pages, which have no analog here.
    #[serde(rename = "Xen-driver-opt")]
    XenDriverOpt,
    /// The Xen 2.0 guest (Xen-guest): page flip, per-packet map, no
    /// offloads.
    #[serde(rename = "Guest-none")]
    GuestNone,
    #[serde(rename = "Guest-sp")]
    GuestSp,
    #[serde(rename = "Guest-ioc")]
    GuestIoc,
    #[serde(rename = "Guest-high")]
    GuestHigh,
    #[serde(rename = "Guest-high-ioc")]
    GuestHighIoc,
    /// Every transmit optimization (Xen-guest-opt), receiving by copy.
    #[serde(rename = "Guest-high-ioc-sp")]
    GuestHighIocSp,
    /// Guest-high over a port with no offloads (Figure 7's "None").
    #[serde(rename = "Port-none")]
    PortNone,
    #[serde(rename = "Port-csum")]
    PortCsum,
    #[serde(rename = "Port-sg")]
    PortSg,
    #[serde(rename = "Port-sg+csum")]
    PortSgCsum,
    /// The guest receiving by copy instead of page flip (§4.2).
    #[serde(rename = "Guest-copy")]
    GuestCopy,
    #[serde(rename = "Guest-copy-SP")]
    GuestCopySp,
    /// Not the paper's: splitnet's default guest (the new grant mechanism,
    /// TX gather, RX copy, offloads, LRO in netfront), for what today's
    /// mechanisms reach on the same runs.
    #[serde(rename = "splitnet-default")]
    Default,
}

/// The Xen 2.0 guest's keys (`up --preset baseline`).
const GUEST_NONE: &str =
    "grants = \"hv-copy\"\nrx_mode = \"flip\"\ntx_mode = \"map\"\noffload = false\nlro = \"off\"\n";
/// The high-level interface (SG, checksum offload, TSO) on the Xen 2.0 guest.
const GUEST_HIGH: &str =
    "grants = \"hv-copy\"\nrx_mode = \"flip\"\ntx_mode = \"map\"\noffload = \"tso\"\nlro = \"off\"\n";
/// The driver domain's address on its bridge, when it is the endpoint.
pub const DRV_ADDRESS: &str = "10.77.0.250";

impl M6Config {
    pub const ALL: [M6Config; 17] = [
        M6Config::Linux,
        M6Config::XenDriver,
        M6Config::DriverMtu,
        M6Config::XenDriverOpt,
        M6Config::GuestNone,
        M6Config::GuestSp,
        M6Config::GuestIoc,
        M6Config::GuestHigh,
        M6Config::GuestHighIoc,
        M6Config::GuestHighIocSp,
        M6Config::PortNone,
        M6Config::PortCsum,
        M6Config::PortSg,
        M6Config::PortSgCsum,
        M6Config::GuestCopy,
        M6Config::GuestCopySp,
        M6Config::Default,
    ];

    pub fn name(self) -> &'static str {
        match self {
            M6Config::Linux => "Linux",
            M6Config::XenDriver => "Xen-driver",
            M6Config::DriverMtu => "Driver-MTU",
            M6Config::XenDriverOpt => "Xen-driver-opt",
            M6Config::GuestNone => "Guest-none",
            M6Config::GuestSp => "Guest-sp",
            M6Config::GuestIoc => "Guest-ioc",
            M6Config::GuestHigh => "Guest-high",
            M6Config::GuestHighIoc => "Guest-high-ioc",
            M6Config::GuestHighIocSp => "Guest-high-ioc-sp",
            M6Config::PortNone => "Port-none",
            M6Config::PortCsum => "Port-csum",
            M6Config::PortSg => "Port-sg",
            M6Config::PortSgCsum => "Port-sg+csum",
            M6Config::GuestCopy => "Guest-copy",
            M6Config::GuestCopySp => "Guest-copy-SP",
            M6Config::Default => "splitnet-default",
        }
    }

    /// Whether the application runs in the driver domain itself.
    fn driver_endpoint(self) -> bool {
        matches!(
            self,
            M6Config::XenDriver | M6Config::DriverMtu | M6Config::XenDriverOpt
        )
    }

    /// Whether superpages back the domains' memory.
    fn superpages(self) -> bool {
        matches!(
            self,
            M6Config::XenDriverOpt
                | M6Config::GuestSp
                | M6Config::GuestHighIocSp
                | M6Config::GuestCopySp
        )
    }

    /// The keys every guest gets; `None` for Linux.
    fn guest_keys(self) -> Option<String> {
        // The I/O channel (Menon 2006 §4.1): the headers read and copied
        // by netback, the payload sent by address, no hypercall.
        let (base, ioc) = match self {
            M6Config::Linux => return None,
            M6Config::Default => return Some(String::new()),
            // The driver domain is the endpoint; its guests idle as Xen's.
            M6Config::XenDriver | M6Config::DriverMtu | M6Config::XenDriverOpt => {
                (GUEST_NONE, false)
            }
            M6Config::GuestNone | M6Config::GuestSp => (GUEST_NONE, false),
            M6Config::GuestIoc => (GUEST_NONE, true),
            M6Config::GuestHigh
            | M6Config::PortNone
            | M6Config::PortCsum
            | M6Config::PortSg
            | M6Config::PortSgCsum => (GUEST_HIGH, false),
            M6Config::GuestHighIoc | M6Config::GuestHighIocSp => (GUEST_HIGH, true),
            M6Config::GuestCopy | M6Config::GuestCopySp => (GUEST_NONE, false),
        };
        let mut k = base.to_string();
        if ioc {
            k = k.replace("tx_mode = \"map\"", "tx_mode = \"header\"");
        }
        if matches!(
            self,
            M6Config::GuestHighIocSp | M6Config::GuestCopy | M6Config::GuestCopySp
        ) {
            k = k.replace("rx_mode = \"flip\"", "rx_mode = \"copy\"");
        }
        if self.superpages() && !self.driver_endpoint() {
            k += "hugepages = true\n";
        }
        Some(k)
    }

    /// The buffers the driver domain's ports receive into (§4.2): a fresh
    /// page per packet in Xen 2.0, wherever a packet may leave the driver
    /// domain as a whole page ("each network packet has to be allocated on
    /// a separate page, so that it can be remapped"): as the endpoint
    /// (Xen-driver), and for every guest that receives by page flip.
    /// Copying lets the driver use MTU-sized buffers (Driver-MTU,
    /// Xen-driver-opt); `None` keeps the default.
    fn port_buffer(self) -> Option<&'static str> {
        match self {
            M6Config::XenDriver => Some("page"),
            M6Config::DriverMtu | M6Config::XenDriverOpt => Some("mtu"),
            _ if self.guest_keys()?.contains("rx_mode = \"flip\"") => Some("page"),
            _ => None,
        }
    }

    /// The keys the driver domain gets.
    fn driver_keys(self) -> String {
        let mut k = String::new();
        if self.driver_endpoint() {
            // Its sends go from its IP stack to the port, as dom0's went to
            // its NIC's driver; what it receives crosses the port's buffers.
            k += &format!("address = \"{DRV_ADDRESS}/24\"\nlocal_delivery = \"send\"\n");
        }
        if let Some(buf) = self.port_buffer() {
            k += &format!("port_buffer = \"{buf}\"\n");
        }
        if self.superpages() {
            k += "hugepages = true\n";
        }
        let port = match self {
            M6Config::PortNone => "none",
            M6Config::PortCsum => "csum",
            M6Config::PortSg => "sg",
            M6Config::PortSgCsum => "sg+csum",
            _ => return k,
        };
        k + &format!("port_offload = \"{port}\"\n")
    }

    /// The default topology with this configuration's keys; `None` for Linux.
    pub fn topology(self) -> Option<String> {
        let guest = self.guest_keys()?;
        let t = toolstack::topology::DEFAULT_TOML
            .replace("kind = \"guest\"\n", &format!("kind = \"guest\"\n{guest}"))
            .replace(
                "kind = \"driver\"\n",
                &format!("kind = \"driver\"\n{}", self.driver_keys()),
            );
        Some(t)
    }

    /// What is measured of it.
    fn cases(self) -> &'static [Case] {
        use Case::*;
        match self {
            M6Config::Linux | M6Config::GuestNone | M6Config::Default => &[Tx, TxWrites, Rx],
            M6Config::XenDriver | M6Config::XenDriverOpt => &[Tx, Rx],
            M6Config::DriverMtu | M6Config::GuestCopy | M6Config::GuestCopySp => &[Rx],
            M6Config::GuestHighIocSp => &[Tx, TxWrites, Rx],
            M6Config::GuestSp
            | M6Config::GuestIoc
            | M6Config::GuestHigh
            | M6Config::GuestHighIoc => &[Tx, TxWrites],
            M6Config::PortNone | M6Config::PortCsum | M6Config::PortSg | M6Config::PortSgCsum => {
                &[Tx]
            }
        }
    }

    /// Whether its transmit flow is profiled (Figures 6 and 8).
    fn profiled(self) -> bool {
        matches!(
            self,
            M6Config::GuestNone | M6Config::GuestHigh | M6Config::GuestHighIoc
        )
    }
}

impl std::str::FromStr for M6Config {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        crate::by_name(&M6Config::ALL, M6Config::name, s)
    }
}

/// What is measured of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// The endpoint sends with sendfile (`iperf3 -Z`).
    Tx,
    /// The endpoint sends with copying writes (Figure 10).
    TxWrites,
    /// The endpoint receives MTU-sized frames.
    Rx,
    /// The endpoint sends with sendfile over one NIC of the paper's
    /// machine: Figures 6 and 8's profiles ran "on a single network
    /// interface" (§6.3), each configuration at that NIC's rate.
    TxOneNic,
}

impl Case {
    pub const ALL: [Case; 4] = [Case::Tx, Case::TxWrites, Case::Rx, Case::TxOneNic];

    pub fn name(self) -> &'static str {
        match self {
            Case::Tx => "tx",
            Case::TxWrites => "tx, writes",
            Case::Rx => "rx",
            Case::TxOneNic => "tx, one NIC",
        }
    }

    fn workload(self) -> Workload {
        match self {
            Case::TxWrites => Workload::TcpCopy,
            _ => Workload::TcpZerocopy,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct M6Record {
    pub config: M6Config,
    pub case: Case,
    pub run: usize,
    pub gbps: f64,
    pub ratio_to_native: Option<f64>,
    /// TSC cycles per 1514-byte frame: "total" and one per measured domain.
    pub cycles_per_packet: BTreeMap<String, f64>,
    /// Cycles per frame by role: driver, guest, hv, wire.
    pub by_domain: BTreeMap<String, f64>,
    /// Total cycles per frame split by the profile's class shares.
    pub by_class: BTreeMap<String, f64>,
    /// Cycles per frame by role as Xenoprof split them ([`xen_split`]);
    /// empty when the flow was not profiled.
    #[serde(default)]
    pub xen_by_domain: BTreeMap<String, f64>,
    /// Segments the receiver's stack dropped for a bad checksum
    /// (`TcpInCsumErrors` + `UdpInCsumErrors` over the flow).
    pub csum_errors: u64,
    /// Reordering the sender's TCP detected over the flow
    /// (`TcpExtTCPSACKReorder`, `TCPTSReorder`, `TCPRenoReorder`).
    pub reorder_events: u64,
    /// Operations per wire frame, from hv's and netback's counters
    /// ([`opcount`]); empty for Linux.
    #[serde(default)]
    pub ops_per_frame: BTreeMap<String, f64>,
}

/// The guest whose vif the operation counts follow.
const GUEST: &str = "guest1";

/// Counters of one namespace's stack that say a stream arrived damaged
/// or out of order.
const CSUM_COUNTERS: [&str; 2] = ["TcpInCsumErrors", "UdpInCsumErrors"];
const REORDER_COUNTERS: [&str; 3] = [
    "TcpExtTCPSACKReorder",
    "TcpExtTCPTSReorder",
    "TcpExtTCPRenoReorder",
];

/// The sum of `names` over the namespaces `nss`.
fn nstat_total(nss: &[String], names: &[&str]) -> Result<u64> {
    nss.iter().map(|ns| nstat::sum(ns, names)).sum()
}

/// The namespaces the flows `names` send from and arrive in, each once.
fn endpoints(env: &Env, names: &[&str]) -> Result<(Vec<String>, Vec<String>)> {
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for n in names {
        let f = env.flows.get(n).with_context(|| format!("no flow {n}"))?;
        let (s, r) = f.sender_and_receiver();
        for (list, ns) in [(&mut senders, s), (&mut receivers, r)] {
            if !list.iter().any(|x: &String| x == ns) {
                list.push(ns.to_string());
            }
        }
    }
    Ok((senders, receivers))
}

/// Medians over runs of one (configuration, case).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct M6Summary {
    pub config: M6Config,
    pub case: Case,
    pub runs: usize,
    pub gbps: Spread,
    pub ratio_to_native: Option<Spread>,
    pub cycles_per_packet: Option<Spread>,
    pub by_domain: BTreeMap<String, f64>,
    pub by_class: BTreeMap<String, f64>,
    /// Median cycles per frame by role as Xenoprof split them ([`xen_split`]).
    #[serde(default)]
    pub xen_by_domain: BTreeMap<String, f64>,
    /// Median operations per wire frame ([`opcount`]).
    #[serde(default)]
    pub ops_per_frame: BTreeMap<String, f64>,
}

impl M6Summary {
    /// Cycles per frame by role for Figures 6 and 8: Xenoprof's split
    /// ([`xen_split`]) where the run profiled it, else by process.
    pub fn split(&self) -> &BTreeMap<String, f64> {
        if self.xen_by_domain.is_empty() {
            &self.by_domain
        } else {
            &self.xen_by_domain
        }
    }
}

/// The suite's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Menon2006Report {
    pub suite: String,
    pub tsc_mhz: f64,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub wall_seconds: f64,
    pub records: Vec<M6Record>,
    pub summary: Vec<M6Summary>,
    /// Configurations not measured, and why.
    pub unavailable: Vec<(M6Config, String)>,
    /// Whether Figures 6 and 8 have cost classes (the profiler started).
    pub profiled: bool,
    /// The machine the numbers come from ([`crate::machine`]).
    #[serde(default = "crate::machine::modern_note")]
    pub machine: String,
}

/// What every measurement of a run shares.
struct Ctx<'a> {
    opts: &'a Menon2006Options,
    base: RunOptions,
    layout: CgroupLayout,
    tsc_hz: f64,
    profile: std::cell::Cell<bool>,
    progress: crate::Progress,
}

impl Ctx<'_> {
    fn say(&self, what: &str) {
        self.progress.say(what);
    }
}

/// Brings `cfg` up; `Ok(Err(why))` when this build cannot run it.
fn bring_up(ctx: &Ctx<'_>, cfg: M6Config) -> Result<Result<Env, String>> {
    let Some(mut topo) = cfg.topology() else {
        return Ok(Ok(match &ctx.base.paper {
            Some(pm) => paper::native(&ctx.layout, pm)?,
            None => testbed::bring_up(Config::Native, &ctx.base, None, &ctx.layout)?,
        }));
    };
    if let Some(pm) = &ctx.base.paper {
        topo = paper::topology(&topo, pm);
    }
    if let Err(e) = toolstack::topology::Topology::parse(&topo, cfg.name()) {
        let e = e.to_string();
        let why = match unknown_key(&e) {
            Some(k) => format!("its topology key `{k}` is unknown"),
            None => e.lines().last().unwrap_or_default().trim().to_string(),
        };
        return Ok(Err(format!("not available in this build ({why})")));
    }
    std::fs::create_dir_all(&ctx.opts.common.run_dir)?;
    let path = ctx
        .opts
        .common
        .run_dir
        .join(format!("menon2006-{}.toml", cfg.name().replace('+', "-")));
    std::fs::write(&path, topo).with_context(|| format!("writing {}", path.display()))?;
    let path = path.to_string_lossy().into_owned();
    let mut up = vec!["up", "--config", &path];
    up.extend(testbed::PAPER_NIC);
    if ctx.base.paper.is_some() {
        up.extend(["--placement", "same"]);
    }
    match testbed::splitnet_env(&ctx.base, &ctx.layout, &up) {
        Ok(mut env) => {
            endpoint_flows(ctx, cfg, &mut env);
            reachable(&env)?;
            Ok(Ok(env))
        }
        Err(e) => {
            let e = format!("{e:#}");
            match unknown_key(&e) {
                Some(k) => Ok(Err(format!(
                    "not available in this build (its topology key `{k}` is unknown)"
                ))),
                None if cfg.superpages() && e.contains("huge") => Ok(Err(format!(
                    "superpages could not be set up here: {}",
                    e.lines().last().unwrap_or(&e)
                ))),
                None => Err(anyhow::anyhow!(e)),
            }
        }
    }
}

/// Waits until every flow's endpoint reaches its peer's address: `up`
/// returns once the vifs are connected, and a flow started before the
/// wire's ports carry traffic would fail to connect.
fn reachable(env: &Env) -> Result<()> {
    // A direction's two flows share their endpoints: each pair once.
    let mut pairs: Vec<(&str, &str)> = env
        .flows
        .values()
        .map(|f| f.client_and_server_ip())
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    for (client, server) in pairs {
        netenv::wait_reachable(client, server, Duration::from_secs(10))?;
    }
    Ok(())
}

/// Points `env`'s flows at `cfg`'s endpoint: guest1, or the driver domain
/// itself (index 1) against the wire host (index 4); on the paper's
/// machine, one flow per wire.
fn endpoint_flows(ctx: &Ctx<'_>, cfg: M6Config, env: &mut Env) {
    let (ns, dom) = if cfg.driver_endpoint() {
        (host::netns_name("drv"), 1)
    } else {
        (host::netns_name("guest1"), 2)
    };
    if let Some(pm) = &ctx.base.paper {
        return paper::splitnet_flows(env, pm, &ns, dom);
    }
    if cfg.driver_endpoint() {
        let wire = host::netns_name("wire");
        for (name, reverse) in [("tx", false), ("rx", true)] {
            let f = FlowSpec::new(&wire, "10.77.0.254", &ns, reverse).charged(4, dom);
            env.flows.insert(name, f);
        }
    }
}

/// The flows a case runs at once: one, or one per NIC of the paper's
/// machine.
fn case_flows(ctx: &Ctx<'_>, case: Case) -> &'static [&'static str] {
    let nics = match case {
        Case::TxOneNic => 1,
        _ => ctx.base.paper.map_or(1, |p| p.nics),
    };
    paper::flows(case, nics)
}

/// The case Figures 6 and 8 profile: over one NIC on the paper's machine,
/// as the paper's profiles ran; else the transmit case.
fn breakdown_case(ctx: &Ctx<'_>) -> Case {
    if ctx.base.paper.is_some() {
        Case::TxOneNic
    } else {
        Case::Tx
    }
}

/// What is measured of `cfg` on this run's machine: its cases, and for
/// Figures 6 and 8's configurations on the paper's, transmit over one NIC.
fn cases_of(ctx: &Ctx<'_>, cfg: M6Config) -> Vec<Case> {
    let mut cases = cfg.cases().to_vec();
    if cfg.profiled() && breakdown_case(ctx) == Case::TxOneNic {
        cases.push(Case::TxOneNic);
    }
    cases
}

/// Receive arrives as a NIC delivers it: MTU-sized frames, so each
/// sender's TSO and GSO go off (over veth they otherwise cross as 64 KiB
/// frames).
fn mtu_frames(ctx: &Ctx<'_>, env: &Env) -> Result<()> {
    for name in case_flows(ctx, Case::Rx) {
        if let Some(f) = env.flows.get(name) {
            let (sender, _) = f.sender_and_receiver();
            ethtool(sender, &["tso", "off", "gso", "off"])?;
        }
    }
    Ok(())
}

fn measure(ctx: &Ctx<'_>, env: &Env, cfg: M6Config, case: Case) -> Result<Measured> {
    let (secs, tsc) = (ctx.opts.common.secs, ctx.tsc_hz);
    let flows = case_flows(ctx, case);
    if ctx.profile.get() && cfg.profiled() && case == breakdown_case(ctx) {
        let r = testbed::measure_flows(
            env,
            flows,
            case.workload(),
            secs,
            tsc,
            Some("splitnet bench menon2006"),
        );
        match r {
            Err(e) if format!("{e}").starts_with("profiling the flow") => {
                ctx.say(&format!("no cost classes from here on: {e}"));
                ctx.profile.set(false);
            }
            r => return r,
        }
    }
    testbed::measure_flows(env, flows, case.workload(), secs, tsc, None)
}

/// Brings `cfg` up and measures its cases; notes it in `unavailable` when
/// this build cannot run it.
fn one_config(
    ctx: &Ctx<'_>,
    cfg: M6Config,
    run: usize,
    out: &mut Vec<M6Record>,
    unavailable: &mut Vec<(M6Config, String)>,
) -> Result<()> {
    let env = match bring_up(ctx, cfg).with_context(|| format!("bringing up {}", cfg.name()))? {
        Ok(env) => env,
        Err(why) => {
            ctx.say(&format!("{}: {why}", cfg.name()));
            if !unavailable.iter().any(|u| u.0 == cfg) {
                unavailable.push((cfg, why));
            }
            return Ok(());
        }
    };
    let result = measure_cases(ctx, &env, cfg, run, out);
    testbed::tear_down(env, &ctx.base, &ctx.layout);
    result.with_context(|| format!("measuring {}", cfg.name()))
}

fn measure_cases(
    ctx: &Ctx<'_>,
    env: &Env,
    cfg: M6Config,
    run: usize,
    out: &mut Vec<M6Record>,
) -> Result<()> {
    mtu_frames(ctx, env).with_context(|| format!("setting up {}'s RX sender", cfg.name()))?;
    let settled = || opcount::settled(&ctx.base, GUEST, Duration::from_secs(5));
    // One settled reading between two flows serves as the first's end and
    // the next's start: nothing runs between them.
    let mut ops0 = cfg.topology().is_some().then(settled).transpose()?;
    for case in cases_of(ctx, cfg) {
        let (senders, receivers) = endpoints(env, case_flows(ctx, case))?;
        let csum0 = nstat_total(&receivers, &CSUM_COUNTERS)?;
        let reorder0 = nstat_total(&senders, &REORDER_COUNTERS)?;
        let ipis0 = opcount::host_ipis()?;
        let m = measure(ctx, env, cfg, case)?;
        let ipis = opcount::per_frame(&ipis0, &opcount::host_ipis()?, m.flow.packets);
        let mut ops_per_frame = match ops0.take() {
            Some(a) => {
                let b = settled()?;
                let per = opcount::per_frame(&a, &b, m.flow.packets);
                ops0 = Some(b);
                per
            }
            None => BTreeMap::new(),
        };
        ops_per_frame.extend(ipis);
        let csum_errors = nstat_total(&receivers, &CSUM_COUNTERS)?.saturating_sub(csum0);
        let reorder_events = nstat_total(&senders, &REORDER_COUNTERS)?.saturating_sub(reorder0);
        let total = m.cycles_per_packet.get("total").copied().unwrap_or(0.0);
        ctx.say(&format!(
            "run {} {} {}: {:.2} Gbit/s, {:.0} cycles/frame",
            run + 1,
            cfg.name(),
            case.name(),
            m.flow.gbps,
            total
        ));
        let per_domain = domain_classes(&m.cycles_per_packet, m.profile.as_ref());
        let roles = by_domain(&m.cycles_per_packet);
        out.push(M6Record {
            config: cfg,
            case,
            run,
            gbps: m.flow.gbps,
            ratio_to_native: None,
            xen_by_domain: xen_split(&roles, &role_classes(&per_domain)),
            by_domain: roles,
            by_class: by_class(&per_domain),
            cycles_per_packet: m.cycles_per_packet,
            csum_errors,
            reorder_events,
            ops_per_frame,
        });
    }
    Ok(())
}

/// The configurations asked for, Linux first.
fn chosen(opts: &Menon2006Options) -> Vec<M6Config> {
    M6Config::ALL
        .into_iter()
        .filter(|c| *c == M6Config::Linux || opts.configs.is_empty() || opts.configs.contains(c))
        .collect()
}

/// Runs the suite.
pub fn run(opts: &Menon2006Options) -> Result<Menon2006Report> {
    if opts.configs == [M6Config::Linux] {
        bail!("--configs Linux alone measures nothing against it; name a splitnet configuration");
    }
    let mut base = RunOptions {
        progress: false,
        ..opts.common.clone()
    };
    if opts.machine == Machine::Paper {
        base = paper::on_paper(&base)?;
    }
    let mut ctx = Ctx {
        opts,
        base,
        layout: CgroupLayout::detect(),
        tsc_hz: tsc_per_us() * 1e6,
        profile: std::cell::Cell::new(opts.profile),
        progress: crate::Progress::start("menon2006", opts.common.progress),
    };
    if opts.nic == NicRate::Scaled {
        paper::calibrate(&mut ctx).context("calibrating the paper's NICs to this host")?;
    }
    let ctx = ctx;
    let (mut records, mut unavailable) = (Vec::new(), Vec::new());
    let name = |c: &M6Config| c.name().to_string();
    harness::each_run(opts.common.runs, &chosen(opts), name, |run, &cfg| {
        one_config(&ctx, cfg, run, &mut records, &mut unavailable)
    })?;
    add_ratios(&mut records);
    let summary = summarize(&records);
    Ok(Menon2006Report {
        suite: "menon2006".into(),
        tsc_mhz: ctx.tsc_hz / 1e6,
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        wall_seconds: ctx.progress.seconds(),
        records,
        summary,
        unavailable,
        profiled: ctx.profile.get(),
        machine: ctx
            .base
            .paper
            .map_or_else(crate::machine::modern_note, |p| p.describe()),
    })
}

/// Each record over Linux's of the same run and case.
fn add_ratios(records: &mut [M6Record]) {
    let key = |r: &M6Record| (r.run, r.case);
    let linux = |r: &M6Record| (r.config == M6Config::Linux).then(|| key(r));
    let ratios = harness::ratios(records, linux, key, |r| Some(r.gbps));
    for (r, x) in records.iter_mut().zip(ratios) {
        r.ratio_to_native = x;
    }
}

fn summarize(records: &[M6Record]) -> Vec<M6Summary> {
    let keys = M6Config::ALL
        .iter()
        .flat_map(|&c| Case::ALL.map(|k| (c, k)));
    let mut out = Vec::new();
    for ((cfg, case), rs) in harness::groups(records, keys, |r| (r.config, r.case)) {
        let g: Vec<f64> = rs.iter().map(|r| r.gbps).collect();
        let Some(gbps) = Spread::of(&g) else {
            continue;
        };
        let pick = |f: fn(&M6Record) -> Option<f64>| -> Vec<f64> {
            rs.iter().filter_map(|r| f(r)).collect()
        };
        out.push(M6Summary {
            config: cfg,
            case,
            runs: rs.len(),
            gbps,
            ratio_to_native: Spread::of(&pick(|r| r.ratio_to_native)),
            cycles_per_packet: Spread::of(&pick(|r| r.cycles_per_packet.get("total").copied())),
            by_domain: medians(rs.iter().map(|r| &r.by_domain)),
            xen_by_domain: medians(rs.iter().map(|r| &r.xen_by_domain)),
            by_class: medians(rs.iter().map(|r| &r.by_class)),
            ops_per_frame: medians(rs.iter().map(|r| &r.ops_per_frame)),
        });
    }
    out
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("n/a".into(), crate::seeds::num)
}

impl Menon2006Report {
    pub fn row(&self, cfg: M6Config, case: Case) -> Option<&M6Summary> {
        self.summary
            .iter()
            .find(|m| m.config == cfg && m.case == case)
    }

    /// Our ratio to native for a bar (median), if measured.
    pub fn ours(&self, cfg: M6Config, case: Case) -> Option<f64> {
        self.row(cfg, case)
            .and_then(|m| m.ratio_to_native.map(|s| s.median))
    }

    /// One paper figure as a table: each bar, the paper's Mb/s and ratio to
    /// its Linux, our Gbit/s and ratio to native.
    pub fn figure_table(&self, f: &PaperFigure) -> String {
        let mut s = format!(
            "**{}: {}**\n\n| bar | paper Mb/s | paper ÷ Linux | ours Gbit/s | ours ÷ native |\n|---|---:|---:|---:|---:|\n",
            f.id, f.title
        );
        let case = f.bars.first().map_or(Case::Tx, |b| b.1);
        if let Some(l) = self.row(M6Config::Linux, case) {
            s += &format!(
                "| Linux | {:.0} | 1.00 | {:.2} | 1.00 |\n",
                f.linux_mbps, l.gbps.median
            );
        }
        for &(cfg, case, paper) in f.bars {
            let m = self.row(cfg, case);
            s += &format!(
                "| {} | {} | {} | {} | {} |\n",
                bar_label(f.id, cfg),
                paper.map_or("-".into(), |p| format!("{p:.0}")),
                ratio(paper.map(|p| p / f.linux_mbps)),
                m.map_or("n/a".into(), |m| format!("{:.2}", m.gbps.median)),
                ratio(self.ours(cfg, case)),
            );
        }
        s
    }

    /// Table 1: Linux, the driver domain and the guest, both directions.
    pub fn table1(&self) -> String {
        let mut s = String::from(
            "**Table 1: Network performance, unoptimized**\n\n| configuration | paper RX Mb/s (÷ Linux) | paper TX Mb/s (÷ Linux) | ours RX ÷ native | ours TX ÷ native |\n|---|---:|---:|---:|---:|\n",
        );
        for (name, cfg, rx, tx) in [
            ("Linux", M6Config::Linux, 2508.0, 3760.0),
            ("Xen driver", M6Config::XenDriver, 1738.0, 3760.0),
            ("Xen guest", M6Config::GuestNone, 820.0, 750.0),
        ] {
            s += &format!(
                "| {name} | {rx:.0} ({:.2}) | {tx:.0} ({:.2}) | {} | {} |\n",
                rx / 2508.0,
                tx / 3760.0,
                ratio(self.ours(cfg, Case::Rx)),
                ratio(self.ours(cfg, Case::Tx)),
            );
        }
        s
    }

    /// Figures 6 and 8: cycles per frame by domain (and by class where
    /// profiled) of the transmit configurations they compare.
    pub fn breakdown_table(&self) -> String {
        let over = match self.breakdown_case() {
            Case::TxOneNic => "transmit over one NIC (as the paper's profiles ran)",
            _ => "transmit",
        };
        let mut s = format!(
            "**Figures 6 and 8: cycles per 1514-byte frame by domain, {over}**\n\n| configuration | guest | driver | Xen | wire | nic | total | by class |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for cfg in [
            M6Config::GuestNone,
            M6Config::GuestHigh,
            M6Config::GuestHighIoc,
        ] {
            let Some(m) = self.row(cfg, self.breakdown_case()) else {
                continue;
            };
            let d = |k: &str| m.split().get(k).map_or("-".into(), |v| format!("{v:.0}"));
            let mut classes: Vec<(&String, &f64)> =
                m.by_class.iter().filter(|(_, c)| **c >= 0.5).collect();
            classes.sort_by(|a, b| b.1.total_cmp(a.1));
            let classes: Vec<String> = classes
                .iter()
                .take(6)
                .map(|(k, c)| format!("{k} {c:.0}"))
                .collect();
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                cfg.name(),
                d("guest"),
                d("driver"),
                d("hv"),
                d("wire"),
                d("nic"),
                m.cycles_per_packet
                    .map_or("-".into(), |c| format!("{:.0}", c.median)),
                if classes.is_empty() {
                    "-".into()
                } else {
                    classes.join(", ")
                },
            );
        }
        s += "\nXen is hv's cycles plus each domain's hypervisor class: its kernel's work for its hypercalls \
              (the trap into hv, a grant map's page-table entries and their TLB flush), which Xen ran in its \
              own code and Xenoprof counted as Xen's; the guest and the driver domain keep the rest.\n";
        s += &format!("\n{}\n", self.breakdown_ratios());
        s
    }

    /// The paper's factors (§6.3.1, §6.3.2) beside ours.
    fn breakdown_ratios(&self) -> String {
        format!("{} {}", self.high_level_factors(), self.ioc_cut())
    }

    /// The case Figures 6 and 8 were measured in: transmit over one NIC
    /// where the run has it (the paper's machine), else transmit.
    pub fn breakdown_case(&self) -> Case {
        if self.summary.iter().any(|m| m.case == Case::TxOneNic) {
            Case::TxOneNic
        } else {
            Case::Tx
        }
    }

    /// Cycles of `k` per frame of `c`'s transmit flow, when measured.
    fn role(&self, c: M6Config, k: &str) -> Option<f64> {
        self.row(c, self.breakdown_case())
            .and_then(|m| m.split().get(k).copied())
            .filter(|v| *v > 0.0)
    }

    /// Figure 6: Guest-none over Guest-high per frame, by domain.
    fn high_level_factors(&self) -> String {
        let factor = |k: &str| {
            self.role(M6Config::GuestNone, k)
                .zip(self.role(M6Config::GuestHigh, k))
                .map_or("n/a".into(), |(a, b)| format!("{:.1}×", a / b))
        };
        format!(
            "High-level interface, Guest-none ÷ Guest-high per frame: guest {} (paper about 4×), Xen {} (paper 1.9×), \
             driver domain {} (paper 2.1×).",
            factor("guest"),
            factor("hv"),
            factor("driver"),
        )
    }

    /// Figure 8: hv's time per frame with the I/O-channel optimization.
    fn ioc_cut(&self) -> String {
        let hv_cut = self
            .role(M6Config::GuestHigh, "hv")
            .zip(self.role(M6Config::GuestHighIoc, "hv"))
            .map_or("n/a".into(), |(a, b)| {
                format!("{:+.0}%", (b / a - 1.0) * 100.0)
            });
        format!(
            "I/O channel, Xen's time of Guest-high-ioc against Guest-high: {hv_cut} (paper −38%): the per-packet grant map goes."
        )
    }

    /// Every table of the suite, Markdown.
    pub fn table(&self) -> String {
        let mut s = self.table1();
        for f in &FIGURES {
            s += "\n";
            s += &self.figure_table(f);
        }
        s += "\n";
        s += &self.breakdown_table();
        s += "\n";
        s += &self.ops_table();
        s += "\n**Figures 9 and 12 (TLB misses)**: not measurable here: no hardware performance counters \
              (`splitnet profile --events` says so); superpages' effect shows only in throughput and cycles.\n";
        s += &format!(
            "\n{} run(s), {} s per iperf3 TCP flow, TSC {:.0} MHz, {:.0} s in all. Transmit uses sendfile \
             (`iperf3 -Z`) except Figure 10; receive arrives in MTU-sized frames. Ratios to native are \
             taken within each run, then the median. Machine: {}.\n",
            self.runs, self.seconds_per_flow, self.tsc_mhz, self.wall_seconds, self.machine
        );
        s += &self.integrity();
        for (c, why) in &self.unavailable {
            s += &format!("{}: {why}.\n", c.name());
        }
        s
    }

    /// Bad checksums and reordering over every flow of the suite, native's
    /// flows apart: the senders' reordering counters also move after a
    /// loss, which native's veth shows as well.
    pub fn integrity(&self) -> String {
        let sum = |native: bool, f: fn(&M6Record) -> u64| -> u64 {
            self.records
                .iter()
                .filter(|r| (r.config == M6Config::Linux) == native)
                .map(f)
                .sum()
        };
        let bad: Vec<String> = self
            .records
            .iter()
            .filter(|r| r.config != M6Config::Linux && r.csum_errors + r.reorder_events > 0)
            .map(|r| format!("{} {} {}", r.config.name(), r.case.name(), r.reorder_events))
            .collect();
        format!(
            "Over {} flows: {} segments with a bad checksum at splitnet's receivers ({} at native's); \
             reorderings the senders detected: {} in splitnet's flows, {} in native's{}.\n",
            self.records.len(),
            sum(false, |r| r.csum_errors),
            sum(true, |r| r.csum_errors),
            sum(false, |r| r.reorder_events),
            sum(true, |r| r.reorder_events),
            if bad.is_empty() {
                String::new()
            } else {
                format!(" (by flow: {})", bad.join(", "))
            }
        )
    }

    /// Every configuration and case's ratio to native.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .summary
            .iter()
            .filter_map(|m| {
                let r = m.ratio_to_native?;
                Some(Bar {
                    label: format!("{} {}", m.config.name(), m.case.name()),
                    value: r.median,
                    range: Some((r.min, r.max)),
                })
            })
            .collect();
        plot::hbars(
            "Menon 2006 re-measured: throughput ÷ native",
            "× native",
            "median of the runs; whiskers: min–max",
            &bars,
        )
    }
}

/// `splitnet bench menon2006`: the 2006 paper's configurations and figures.
pub struct Menon2006Suite;

impl harness::Suite for Menon2006Suite {
    fn name(&self) -> &'static str {
        "menon2006"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = Menon2006Options::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        opts.configs = Args::parsed(&a.configs)?;
        opts.machine = a.machine.unwrap_or(opts.machine);
        opts.nic = a.nic.unwrap_or(opts.nic);
        let r = run(&opts)?;
        Output::of(&r, r.table(), r.svg())
    }

    fn seeds(&self) -> Option<crate::seeds::Reader> {
        Some(|json| harness::figures_of("menon2006", json, figures))
    }

    fn machines(&self) -> &'static [Machine] {
        &[Machine::Paper, Machine::Modern]
    }

    fn takes_nic(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_is_a_valid_topology() {
        for cfg in M6Config::ALL {
            let Some(t) = cfg.topology() else {
                assert_eq!(cfg, M6Config::Linux);
                continue;
            };
            if let Err(e) = toolstack::topology::Topology::parse(&t, cfg.name()) {
                panic!("{}: {e}", cfg.name());
            }
        }
    }

    #[test]
    fn configurations_differ_by_the_paper_s_switches() {
        let g = |c: M6Config| c.guest_keys().unwrap();
        assert!(g(M6Config::GuestNone).contains("offload = false"));
        assert!(g(M6Config::GuestHigh).contains("offload = \"tso\""));
        assert!(g(M6Config::GuestIoc).contains("tx_mode = \"header\""));
        assert!(g(M6Config::GuestHighIocSp).contains("hugepages = true"));
        assert!(g(M6Config::GuestCopy).contains("rx_mode = \"copy\""));
        assert!(M6Config::XenDriver
            .driver_keys()
            .contains("port_buffer = \"page\""));
        for c in [
            M6Config::XenDriver,
            M6Config::DriverMtu,
            M6Config::XenDriverOpt,
        ] {
            assert!(c.driver_keys().contains("local_delivery = \"send\""));
        }
        assert!(!M6Config::GuestNone.driver_keys().contains("local_delivery"));
        // A guest that receives by flip has a Xen 2.0 driver domain behind
        // it; one that receives by copy, the default buffers.
        for c in [M6Config::GuestNone, M6Config::GuestHigh, M6Config::PortSg] {
            assert!(
                c.driver_keys().contains("port_buffer = \"page\""),
                "{}",
                c.name()
            );
        }
        for c in [
            M6Config::GuestCopy,
            M6Config::GuestHighIocSp,
            M6Config::Default,
        ] {
            assert!(!c.driver_keys().contains("port_buffer"), "{}", c.name());
        }
        assert!(M6Config::PortSgCsum
            .driver_keys()
            .contains("port_offload = \"sg+csum\""));
        assert!(!M6Config::GuestHigh.driver_keys().contains("port_offload"));
    }

    #[test]
    fn names_parse_back() {
        for c in M6Config::ALL {
            assert_eq!(c.name().parse::<M6Config>().unwrap(), c);
        }
        assert!("Guest-fast".parse::<M6Config>().is_err());
    }
}
