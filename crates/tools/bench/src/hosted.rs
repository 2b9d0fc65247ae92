//! Suite `hosted`: Sugerman, Venkitachalam and Lim (USENIX 2001), the
//! hosted NIC, reproduced beside the paper's numbers.
//!
//! - **Figure 5**: the path of one transmit-triggering OUT, in µs, from the
//!   hosted NIC's TSC counters (trap in the VMM, switch to the VMApp, its
//!   emulation, the VMNet write, the way back).
//! - **Tables 1 and 2**: where the VM world's time goes during a TCP
//!   transmit stream (guest and VMM, world switches, VMApp, host network
//!   I/O, idle), unoptimized and optimized, and each process's CPU time.
//! - **Figure 6**: TCP transmit throughput (iperf3 guest → wire) against
//!   the send size, native (a veth pair) against the unoptimized and the
//!   optimized hosted NIC, with the wire at 100 Mbit/s and unshaped.
//! - **Table 3**: idle time (cycles halted) per configuration.
//! - NIC port accesses per packet and PIC accesses per IRQ (the paper's
//!   12 and 5).
//!
//! Every hosted flow reads the NIC's counters twice while the stream runs
//! (`status --json`, which carries the guest's TSC at each reading), so the
//! shares are of a steady-state window, not of start-up and tear-down.

use crate::harness::{self, Args, Output, RunOptions};
use crate::machine::{Machine, PaperMachine, FAST_ETHERNET};
use crate::netenv::{self, Flow, Native, Workload};
use crate::stats::{median, tsc_per_us};
use crate::testbed::{bench_cgroup, proc_cpu};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use toolstack::cgroup::{Cgroup, CgroupLayout};
use toolstack::host;

mod report;
pub use report::figures;

/// Send sizes of Figure 6 (the paper's: 512 B to 64 KiB by powers of two).
const SIZES: [u32; 8] = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
/// With `--quick`.
const QUICK_SIZES: [u32; 3] = [512, 4096, 65536];
/// The send size of Tables 1–3 (the paper's nettest used 4 KB writes).
pub const TABLE_SIZE: u32 = 4096;
/// The shaped wire: the paper's 100 Mb/s Ethernet.
pub const LINK_RATE: &str = "100mbit";

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct HostedOptions {
    /// The options every suite shares.
    pub common: RunOptions,
    /// Send sizes for Figure 6.
    pub sizes: Vec<u32>,
    /// Only these configurations (native always runs); empty: all.
    pub configs: Vec<Config>,
    /// The paper's PC-733 (one 733 MHz CPU, 100 Mb/s Ethernet, §4) or this
    /// host as it is.
    pub machine: Machine,
}

impl HostedOptions {
    /// Eight sizes, 5 s per flow; or three sizes, 3 s with `quick`.
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> HostedOptions {
        HostedOptions {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 3 } else { 5 }),
            sizes: if quick {
                QUICK_SIZES.to_vec()
            } else {
                SIZES.to_vec()
            },
            configs: Vec::new(),
            machine: Machine::Paper,
        }
    }
}

/// A measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// iperf3 over a plain veth pair between two namespaces.
    Native,
    /// VMware Workstation 2.0: every NIC port access is a world switch.
    Unoptimized,
    /// Ports handled in the VMM only (Table 3's "without send combining
    /// and IRQ notification").
    PortsInVmm,
    /// Ports in the VMM and send combining (Table 3's "without IRQ
    /// notification").
    NoIrqNotification,
    /// All three optimizations.
    Optimized,
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
            Config::Unoptimized => "unoptimized",
            Config::PortsInVmm => "ports-in-vmm",
            Config::NoIrqNotification => "no-irq-notification",
            Config::Optimized => "optimized",
        }
    }

    /// The topology switches (ports in VMM, send combining, bit vector).
    fn switches(self) -> (bool, bool, bool) {
        match self {
            Config::Native | Config::Unoptimized => (false, false, false),
            Config::PortsInVmm => (true, false, false),
            Config::NoIrqNotification => (true, true, false),
            Config::Optimized => (true, true, true),
        }
    }

    /// The paper's Table 3 idle time for this configuration (PC-733).
    fn paper_idle(self) -> f64 {
        match self {
            Config::Native => 86.0,
            Config::Unoptimized => 0.0,
            Config::PortsInVmm => 2.0,
            Config::NoIrqNotification => 17.9,
            Config::Optimized => 21.7,
        }
    }

    /// Whether Figure 6 sweeps the send sizes for it (the others are
    /// measured at [`TABLE_SIZE`] only).
    fn sweeps(self) -> bool {
        matches!(
            self,
            Config::Native | Config::Unoptimized | Config::Optimized
        )
    }
}

const CONFIGS: [Config; 5] = [
    Config::Native,
    Config::Unoptimized,
    Config::PortsInVmm,
    Config::NoIrqNotification,
    Config::Optimized,
];

/// The wire: shaped to [`LINK_RATE`] or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Link {
    #[serde(rename = "100mbit")]
    Shaped,
    Unshaped,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::Shaped => "100 Mbit/s",
            Link::Unshaped => "unshaped",
        }
    }
}

const LINKS: [Link; 2] = [Link::Shaped, Link::Unshaped];

/// The hosted NIC's counters over a window of one flow (differences of two
/// readings), in TSC cycles unless named otherwise.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Window {
    /// The guest's TSC between the two readings.
    pub cycles: f64,
    pub world_switches: f64,
    pub switch_cycles: f64,
    pub service_cycles: f64,
    pub service_vmnet_cycles: f64,
    pub vmnet_tx_cycles: f64,
    pub vmnet_rx_cycles: f64,
    pub halt_cycles: f64,
    pub halts: f64,
    pub nic_accesses: f64,
    pub pic_accesses: f64,
    pub irqs: f64,
    pub tx_packets: f64,
    pub rx_packets: f64,
    pub frames_out: f64,
    /// Frames the VMApp wrote to VMNet.
    pub vmnet_frames: f64,
    pub combined_frames: f64,
    pub selects: f64,
    pub bitvector_checks: f64,
    // Figure 5.
    pub tx_outs: f64,
    pub tx_out_cycles: f64,
    pub tx_switches: f64,
    pub tx_switch_cycles: f64,
    pub tx_back_cycles: f64,
    pub tx_requests: f64,
    pub tx_arrive_cycles: f64,
    pub tx_emulate_cycles: f64,
    pub tx_write_cycles: f64,
    pub tx_finish_cycles: f64,
    /// An empty world switch timed at start-up: the cheapest and the mean
    /// (not differences; the later reading's).
    pub null_switch_min_cycles: f64,
    pub null_switch_mean_cycles: f64,
}

/// Reads the counters `Window` needs from guest1's `emulated_nic` entry.
fn counters(h: &Value) -> Option<BTreeMap<&'static str, f64>> {
    let vm = &h["vm"];
    let app = &h["vmapp"];
    let n = |v: &Value| v.as_f64();
    let ports = &vm["ports"];
    let nic = ["aprom", "rdp", "rap", "reset", "bdp"]
        .iter()
        .map(|p| ports[p].as_f64().unwrap_or(0.0))
        .sum::<f64>();
    let mut m = BTreeMap::new();
    m.insert("cycles", n(&h["stats_tsc"])?);
    m.insert("nic_accesses", nic);
    for k in [
        "world_switches",
        "switch_cycles",
        "halt_cycles",
        "halts",
        "pic_accesses",
        "irqs",
        "frames_out",
        "combined_frames",
        "tx_outs",
        "tx_out_cycles",
        "tx_switches",
        "tx_switch_cycles",
        "tx_back_cycles",
        "null_switch_min_cycles",
        "null_switch_mean_cycles",
    ] {
        m.insert(k, n(&vm[k])?);
    }
    for k in [
        "service_cycles",
        "service_vmnet_cycles",
        "vmnet_tx_cycles",
        "vmnet_rx_cycles",
        "selects",
        "bitvector_checks",
        "tx_requests",
        "vmnet_tx",
        "tx_arrive_cycles",
        "tx_emulate_cycles",
        "tx_write_cycles",
        "tx_finish_cycles",
    ] {
        m.insert(k, n(&app[k])?);
    }
    m.insert("tx_packets", n(&h["tx_packets"])?);
    m.insert("rx_packets", n(&h["rx_packets"])?);
    Some(m)
}

impl Window {
    fn between(a: &BTreeMap<&'static str, f64>, b: &BTreeMap<&'static str, f64>) -> Window {
        let d = |k: &str| {
            (b.get(k).copied().unwrap_or(0.0) - a.get(k).copied().unwrap_or(0.0)).max(0.0)
        };
        Window {
            cycles: d("cycles"),
            world_switches: d("world_switches"),
            switch_cycles: d("switch_cycles"),
            service_cycles: d("service_cycles"),
            service_vmnet_cycles: d("service_vmnet_cycles"),
            vmnet_tx_cycles: d("vmnet_tx_cycles"),
            vmnet_rx_cycles: d("vmnet_rx_cycles"),
            halt_cycles: d("halt_cycles"),
            halts: d("halts"),
            nic_accesses: d("nic_accesses"),
            pic_accesses: d("pic_accesses"),
            irqs: d("irqs"),
            tx_packets: d("tx_packets"),
            rx_packets: d("rx_packets"),
            frames_out: d("frames_out"),
            vmnet_frames: d("vmnet_tx"),
            combined_frames: d("combined_frames"),
            selects: d("selects"),
            bitvector_checks: d("bitvector_checks"),
            tx_outs: d("tx_outs"),
            tx_out_cycles: d("tx_out_cycles"),
            tx_switches: d("tx_switches"),
            tx_switch_cycles: d("tx_switch_cycles"),
            tx_back_cycles: d("tx_back_cycles"),
            tx_requests: d("tx_requests"),
            tx_arrive_cycles: d("tx_arrive_cycles"),
            tx_emulate_cycles: d("tx_emulate_cycles"),
            tx_write_cycles: d("tx_write_cycles"),
            tx_finish_cycles: d("tx_finish_cycles"),
            null_switch_min_cycles: b.get("null_switch_min_cycles").copied().unwrap_or(0.0),
            null_switch_mean_cycles: b.get("null_switch_mean_cycles").copied().unwrap_or(0.0),
        }
    }

    /// The VM world's time by category, in percent of the window (Tables 1
    /// and 2): guest OS and VMM, world switches, the VMApp, host network
    /// I/O inside switches, and idle (halted).
    pub fn shares(&self) -> Shares {
        let t = self.cycles.max(1.0);
        let host_net = self.service_vmnet_cycles.min(self.service_cycles);
        let vmapp = self.service_cycles - host_net;
        let switch = (self.switch_cycles - self.service_cycles).max(0.0);
        let idle = self.halt_cycles.min(t);
        let guest = (t - self.switch_cycles - idle).max(0.0);
        let pct = |x: f64| 100.0 * x / t;
        Shares {
            guest_and_vmm: pct(guest),
            world_switch: pct(switch),
            vmapp: pct(vmapp),
            host_network: pct(host_net),
            idle: pct(idle),
        }
    }

    /// Figure 5's stages in TSC cycles per transmitting OUT: trap and resume
    /// in the VMM, switch to the host, the VMApp until the write, the VMNet
    /// write(s), and back (the VMApp's answer and the switch to the VM).
    pub fn path(&self) -> Option<[f64; 5]> {
        if self.tx_outs < 1.0 || self.tx_switches < 1.0 || self.tx_requests < 1.0 {
            return None;
        }
        let per = |x: f64, n: f64| x / n;
        let out = per(self.tx_out_cycles, self.tx_outs);
        let round = per(self.tx_switch_cycles, self.tx_switches);
        let arrive = per(self.tx_arrive_cycles, self.tx_requests);
        let emulate = per(self.tx_emulate_cycles, self.tx_requests);
        let write = per(self.tx_write_cycles, self.tx_requests);
        let finish = per(self.tx_finish_cycles, self.tx_requests);
        let back = per(self.tx_back_cycles, self.tx_switches);
        Some([
            (out - round).max(0.0),
            arrive,
            emulate,
            write,
            finish + back,
        ])
    }
}

/// Percent of the VM world's time by category.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Shares {
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub guest_and_vmm: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub world_switch: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub vmapp: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub host_network: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub idle: f64,
}

/// One flow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub config: Config,
    pub link: Link,
    pub send_size: u32,
    pub run: usize,
    pub mbps: f64,
    pub ratio_to_native: Option<f64>,
    /// CPU time per process group during the window, in percent of one CPU.
    pub cpu_percent: BTreeMap<String, f64>,
    /// Seconds of the CPU-time window.
    pub window_seconds: f64,
    /// The hosted NIC's counters over the window (hosted configurations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<Window>,
}

/// Medians over runs of one (config, link, size).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub config: Config,
    pub link: Link,
    pub send_size: u32,
    pub runs: usize,
    pub median_mbps: f64,
    pub min_mbps: f64,
    pub max_mbps: f64,
    pub median_ratio_to_native: Option<f64>,
}

/// Medians over runs at the table size ([`TABLE_SIZE`]) for one hosted configuration and link.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Breakdown {
    pub config: Config,
    pub link: Link,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub mbps: f64,
    /// Tables 1 and 2: percent of the VM world's time.
    pub shares: Shares,
    /// Table 3: percent of time the guest was halted (native: the part of
    /// one CPU the sending side did not use).
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub idle_percent: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub paper_idle_percent: f64,
    /// CPU per process group, percent of one CPU.
    pub cpu_percent: BTreeMap<String, f64>,
    /// Figure 5, µs: trap and resume in the VMM, switch to host, VMApp,
    /// VMNet write, back.
    pub path_us: Option<[f64; 5]>,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub switches_per_packet: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub nic_accesses_per_packet: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub nic_accesses_per_tx_packet: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub pic_accesses_per_irq: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub frames_per_send: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub mean_switch_us: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub mean_vmnet_write_us: f64,
    /// An empty world switch at start-up, µs: the cheapest and the mean.
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub null_switch_min_us: f64,
    #[serde(deserialize_with = "crate::stats::nan_if_null")]
    pub null_switch_mean_us: f64,
}

/// The suite's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostedReport {
    #[serde(skip_deserializing)]
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub runs: usize,
    /// The machine the numbers come from ([`crate::machine`]).
    #[serde(default = "crate::machine::modern_note")]
    pub machine: String,
    pub seconds_per_flow: u32,
    pub sizes: Vec<u32>,
    /// The send size of Tables 1–3 and Figure 5.
    pub table_size: u32,
    pub records: Vec<Record>,
    pub figure6: Vec<Point>,
    pub breakdowns: Vec<Breakdown>,
}

/// Figure 5 in the paper (PC-733), µs: VMM, switch to host, VMApp, VMNet,
/// back (31.63 − 23.8).
pub const PAPER_PATH_US: [f64; 5] = [0.57, 4.45, 1.23, 17.55, 7.83];
const PATH_STAGES: [&str; 5] = [
    "VMM: trap the OUT, resume the guest",
    "world switch to the host",
    "VMApp: emulate the Lance up to the write",
    "VMNet write (host network I/O)",
    "back: VMApp's answer, switch to the VMM",
];

fn splitnet(opts: &HostedOptions, args: &[&str]) -> Result<String> {
    crate::splitnet(&opts.common.exe, &opts.common.run_dir, args)
}

/// The topology: guest1 with a hosted NIC, the driver domain, the wire.
pub fn topology(cfg: Config) -> String {
    let (p, c, b) = cfg.switches();
    format!(
        "name = \"bench-hosted\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         nic = \"hosted\"\nhosted_ports_in_vmm = {p}\nhosted_send_combining = {c}\n\
         hosted_irq_bitvector = {b}\n\
         [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n"
    )
}

/// A process group whose CPU time is read: its name, and its cgroup or pid.
type Group = (String, Option<Cgroup>, Option<i32>);

/// Where the flow runs and what is charged.
struct Env {
    client_ns: String,
    server_ns: String,
    server_ip: &'static str,
    /// Process groups whose CPU time is read: name → cgroup or pid.
    groups: Vec<Group>,
    client_cg: usize,
    server_cg: usize,
    hosted: bool,
    /// On the paper's machine: the cores of the server's (receiver's) and
    /// the client's (sender's) applications.
    cores: Option<(usize, usize)>,
    _native: Option<Native>,
}

impl Env {
    fn cpu(&self) -> Vec<Duration> {
        self.groups
            .iter()
            .map(|(_, cg, pid)| match (cg, pid) {
                (_, Some(p)) => proc_cpu(*p).unwrap_or_default(),
                (Some(c), None) => c.cpu_usage().unwrap_or_default(),
                _ => Duration::ZERO,
            })
            .collect()
    }
}

fn guest1(status: &Value) -> Option<&Value> {
    status["domains"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == "guest1")
}

fn bring_up(cfg: Config, link: Link, opts: &HostedOptions, layout: &CgroupLayout) -> Result<Env> {
    // On the paper's machine the sender (native's first namespace, guest1)
    // is the paper's machine; the receiver (the wire host) its peer.
    let cores = opts.common.paper.map(|p| (p.client_cpu, p.server_cpu));
    // After `splitnet up`, which starts its cgroup tree afresh.
    let bench_groups = || -> Result<Vec<Group>> {
        ["client", "server"]
            .iter()
            .map(|n| Ok((n.to_string(), Some(bench_cgroup(layout, n)?), None)))
            .collect()
    };
    if cfg == Config::Native {
        let groups = bench_groups()?;
        let n = Native::new()?;
        if link == Link::Shaped {
            for ns in [&n.a, &n.b] {
                host::run(
                    "tc",
                    &[
                        "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                        LINK_RATE, "burst", "32kbit", "latency", "50ms",
                    ],
                )?;
            }
        }
        return Ok(Env {
            client_ns: n.a.clone(),
            server_ns: n.b.clone(),
            server_ip: netenv::NATIVE_B,
            groups,
            client_cg: 0,
            server_cg: 1,
            hosted: false,
            cores,
            _native: Some(n),
        });
    }
    std::fs::create_dir_all(&opts.common.run_dir)
        .with_context(|| format!("creating {}", opts.common.run_dir.display()))?;
    let path = opts.common.run_dir.join("bench-hosted.toml");
    std::fs::write(&path, topology(cfg)).with_context(|| format!("writing {}", path.display()))?;
    let _ = splitnet(opts, &["down"]);
    let p = path.to_string_lossy().into_owned();
    let mut up = vec!["up", "--config", p.as_str()];
    up.extend(crate::testbed::PAPER_NIC);
    if link == Link::Shaped {
        up.extend(["--link-rate", LINK_RATE]);
    }
    crate::splitnet_on(
        &opts.common.exe,
        &opts.common.run_dir,
        &up,
        opts.common.paper.map(|p| p.server_cpu),
    )?;
    let status: Value = serde_json::from_str(&splitnet(opts, &["status", "--json"])?)
        .context("reading status --json")?;
    let g = guest1(&status).context("no guest1 in status")?;
    let mut groups = bench_groups()?;
    let pid = |v: &Value| v.as_i64().map(|p| p as i32);
    groups.push(("VM (guest1's process)".into(), None, pid(&g["pid"])));
    groups.push(("VMApp".into(), None, pid(&g["emulated_nic"]["vmapp_pid"])));
    groups.push(("driver domain".into(), Cgroup::open(layout, "drv"), None));
    let hv_pid = std::fs::read_to_string(opts.common.run_dir.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    groups.push(("hv".into(), None, hv_pid));
    Ok(Env {
        client_ns: host::netns_name("guest1"),
        server_ns: host::netns_name("wire"),
        server_ip: "10.77.0.254",
        groups,
        client_cg: 0,
        server_cg: 1,
        hosted: true,
        cores,
        _native: None,
    })
}

fn tear_down(env: Env, opts: &HostedOptions, layout: &CgroupLayout) {
    if env.hosted {
        let _ = splitnet(opts, &["down"]);
    }
    drop(env);
    for n in ["client", "server"] {
        if let Some(cg) = Cgroup::open(layout, &format!("bench-{n}")) {
            cg.destroy(Duration::from_millis(200));
        }
    }
}

/// One reading: the NIC's counters (hosted) and every group's CPU time.
struct Reading {
    at: Instant,
    cpu: Vec<Duration>,
    counters: Option<BTreeMap<&'static str, f64>>,
}

fn read(env: &Env, opts: &HostedOptions) -> Reading {
    let counters = env.hosted.then(|| {
        splitnet(opts, &["status", "--json"])
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| guest1(&v).and_then(|g| counters(&g["emulated_nic"])))
    });
    Reading {
        at: Instant::now(),
        cpu: env.cpu(),
        counters: counters.flatten(),
    }
}

/// Runs one flow at `size`, reading counters 1 s in and near the end.
fn measure(env: &Env, opts: &HostedOptions, size: u32) -> Result<(f64, Reading, Reading)> {
    let secs = opts.common.secs.max(3);
    let len = size.to_string();
    std::thread::scope(|s| {
        let flow = s.spawn(|| {
            netenv::run_with(
                &Flow {
                    server_ns: &env.server_ns,
                    server_ip: env.server_ip,
                    server_bind: None,
                    port: netenv::DEFAULT_PORT,
                    client_ns: &env.client_ns,
                    reverse: false,
                    secs,
                    workload: Workload::TcpCopy,
                    server_cgroup: env.groups[env.server_cg].1.as_ref(),
                    client_cgroup: env.groups[env.client_cg].1.as_ref(),
                    server_cpu: env.cores.map(|c| c.0),
                    client_cpu: env.cores.map(|c| c.1),
                },
                &["-l", &len],
            )
        });
        // The server takes a moment to listen; the stream then runs `secs`.
        std::thread::sleep(Duration::from_millis(1300));
        let a = read(env, opts);
        std::thread::sleep(Duration::from_millis(u64::from(secs) * 1000 - 1500));
        let b = read(env, opts);
        let r = flow
            .join()
            .map_err(|_| anyhow::anyhow!("the iperf3 thread panicked"))??;
        Ok((r.gbps * 1000.0, a, b))
    })
}

/// Each configuration and link a run measures, with its send sizes.
type Plan = Vec<(Config, Link, Vec<u32>)>;

/// What a run measures: each configuration (of those asked for) and link
/// with its send sizes; the sizes; and the one Tables 1–3 and Figure 5
/// are read at (4 KiB, or the first size).
fn plan(opts: &HostedOptions) -> (Plan, Vec<u32>, u32) {
    let sizes = if opts.sizes.is_empty() {
        vec![TABLE_SIZE]
    } else {
        opts.sizes.clone()
    };
    let table_size = if sizes.contains(&TABLE_SIZE) {
        TABLE_SIZE
    } else {
        sizes[0]
    };
    let wanted =
        |c: &&Config| opts.configs.is_empty() || **c == Config::Native || opts.configs.contains(c);
    let plan = CONFIGS
        .iter()
        .filter(wanted)
        .flat_map(|&c| LINKS.map(|l| (c, l)))
        .map(|(c, l)| {
            let s = if c.sweeps() {
                sizes.clone()
            } else {
                vec![table_size]
            };
            (c, l, s)
        })
        .collect();
    (plan, sizes, table_size)
}

/// One flow's record from the readings at its window's start and end.
fn record(
    env: &Env,
    opts: &HostedOptions,
    (cfg, link, size, run): (Config, Link, u32, usize),
    (mbps, a, b): (f64, Reading, Reading),
) -> Record {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let cpu_percent = env
        .groups
        .iter()
        .zip(a.cpu.iter().zip(&b.cpu))
        .map(|((n, ..), (x, y))| (n.clone(), 100.0 * y.saturating_sub(*x).as_secs_f64() / secs))
        .collect();
    let counters = match (&a.counters, &b.counters) {
        (Some(x), Some(y)) => Some(Window::between(x, y)),
        _ => None,
    };
    if env.hosted && counters.as_ref().is_none_or(|w| w.cycles <= 0.0) {
        opts.common.say(
            "hosted",
            "  the hosted NIC's counters did not advance in this flow",
        );
    }
    opts.common.say("hosted", &format!("  {mbps:.1} Mbit/s"));
    Record {
        config: cfg,
        link,
        send_size: size,
        run,
        mbps,
        ratio_to_native: None,
        cpu_percent,
        window_seconds: secs,
        counters,
    }
}

/// Ratios against native of the same run, link and size.
fn add_ratios(records: &mut [Record]) {
    let key = |r: &Record| (r.link, r.send_size, r.run);
    let native = |r: &Record| (r.config == Config::Native).then(|| key(r));
    let ratios = harness::ratios(records, native, key, |r| Some(r.mbps));
    for (r, x) in records.iter_mut().zip(ratios) {
        r.ratio_to_native = x;
    }
}

/// Runs the suite.
pub fn run(opts: &HostedOptions) -> Result<HostedReport> {
    let tsc_hz = tsc_per_us() * 1e6;
    let layout = CgroupLayout::detect();
    let (plan, sizes, table_size) = plan(opts);
    let flows: usize = plan.iter().map(|p| p.2.len()).sum::<usize>() * opts.common.runs;
    let mut step = 0;
    let mut records = Vec::new();
    let name = |p: &(Config, Link, Vec<u32>)| format!("{} ({})", p.0.name(), p.1.name());
    harness::each_run(opts.common.runs, &plan, name, |run, (cfg, link, sizes)| {
        let (cfg, link) = (*cfg, *link);
        let env = bring_up(cfg, link, opts, &layout).context("bringing it up")?;
        let mut result = Ok(());
        for &size in sizes {
            step += 1;
            opts.common.say(
                "hosted",
                &format!(
                    "{step}/{flows} run {} {} wire {} send size {size} B",
                    run + 1,
                    cfg.name(),
                    link.name()
                ),
            );
            match measure(&env, opts, size) {
                Ok(m) => records.push(record(&env, opts, (cfg, link, size, run), m)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        tear_down(env, opts, &layout);
        result.context("measuring it")
    })?;
    add_ratios(&mut records);
    Ok(HostedReport {
        suite: "hosted",
        tsc_mhz: tsc_hz / 1e6,
        runs: opts.common.runs,
        machine: opts
            .common
            .paper
            .map_or_else(crate::machine::modern_note, |p| p.describe()),
        seconds_per_flow: opts.common.secs.max(3),
        table_size,
        figure6: figure6(&records),
        breakdowns: breakdowns(&records, table_size, tsc_hz / 1e6),
        sizes,
        records,
    })
}

fn figure6(records: &[Record]) -> Vec<Point> {
    let mut keys: Vec<(Config, Link, u32)> = records
        .iter()
        .map(|r| (r.config, r.link, r.send_size))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(c, l, s)| {
            let rs: Vec<&Record> = records
                .iter()
                .filter(|r| r.config == c && r.link == l && r.send_size == s)
                .collect();
            let m: Vec<f64> = rs.iter().map(|r| r.mbps).collect();
            let ratios: Vec<f64> = rs.iter().filter_map(|r| r.ratio_to_native).collect();
            Point {
                config: c,
                link: l,
                send_size: s,
                runs: rs.len(),
                median_mbps: median(&m),
                min_mbps: m.iter().copied().fold(f64::INFINITY, f64::min),
                max_mbps: m.iter().copied().fold(0.0, f64::max),
                median_ratio_to_native: (!ratios.is_empty()).then(|| median(&ratios)),
            }
        })
        .collect()
}

fn breakdowns(records: &[Record], table_size: u32, tsc_mhz: f64) -> Vec<Breakdown> {
    let mut out = Vec::new();
    for link in LINKS {
        for cfg in CONFIGS {
            let rs: Vec<&Record> = records
                .iter()
                .filter(|r| r.config == cfg && r.link == link && r.send_size == table_size)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let med = |f: &dyn Fn(&Record) -> Option<f64>| {
                let v: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| f(r))
                    .filter(|x| x.is_finite())
                    .collect();
                if v.is_empty() {
                    f64::NAN
                } else {
                    median(&v)
                }
            };
            let w = |f: fn(&Window) -> f64| {
                move |r: &Record| r.counters.as_ref().filter(|w| w.cycles > 0.0).map(f)
            };
            let mut cpu = BTreeMap::new();
            for k in rs[0].cpu_percent.keys() {
                cpu.insert(k.clone(), med(&|r| r.cpu_percent.get(k).copied()));
            }
            let shares = Shares {
                guest_and_vmm: med(&w(|w| w.shares().guest_and_vmm)),
                world_switch: med(&w(|w| w.shares().world_switch)),
                vmapp: med(&w(|w| w.shares().vmapp)),
                host_network: med(&w(|w| w.shares().host_network)),
                idle: med(&w(|w| w.shares().idle)),
            };
            let idle_percent = if cfg == Config::Native {
                med(&|r| r.cpu_percent.get("client").map(|c| (100.0 - c).max(0.0)))
            } else {
                shares.idle
            };
            let path: Vec<[f64; 5]> = rs
                .iter()
                .filter_map(|r| r.counters.as_ref().and_then(Window::path))
                .collect();
            let path_us = (!path.is_empty()).then(|| {
                let mut p = [0.0; 5];
                for (i, x) in p.iter_mut().enumerate() {
                    let v: Vec<f64> = path.iter().map(|s| s[i]).collect();
                    *x = median(&v) / tsc_mhz;
                }
                p
            });
            out.push(Breakdown {
                config: cfg,
                link,
                mbps: med(&|r| Some(r.mbps)),
                shares,
                idle_percent,
                paper_idle_percent: cfg.paper_idle(),
                cpu_percent: cpu,
                path_us,
                switches_per_packet: med(&w(|w| w.world_switches / packets(w))),
                nic_accesses_per_packet: med(&w(|w| w.nic_accesses / packets(w))),
                nic_accesses_per_tx_packet: med(&w(|w| w.nic_accesses / w.tx_packets.max(1.0))),
                pic_accesses_per_irq: med(&w(|w| w.pic_accesses / w.irqs.max(1.0))),
                frames_per_send: med(&w(|w| w.vmnet_frames / w.tx_requests.max(1.0))),
                mean_switch_us: med(&w(|w| w.switch_cycles / w.world_switches.max(1.0))) / tsc_mhz,
                mean_vmnet_write_us: med(&w(|w| w.vmnet_tx_cycles / w.vmnet_frames.max(1.0)))
                    / tsc_mhz,
                null_switch_min_us: med(&w(|w| w.null_switch_min_cycles)) / tsc_mhz,
                null_switch_mean_us: med(&w(|w| w.null_switch_mean_cycles)) / tsc_mhz,
            });
        }
    }
    out
}

/// Packets both ways in a window (at least one).
fn packets(w: &Window) -> f64 {
    (w.tx_packets + w.rx_packets).max(1.0)
}

/// `splitnet bench hosted`: the hosted NIC against Sugerman 2001.
pub struct HostedSuite;

impl harness::Suite for HostedSuite {
    fn name(&self) -> &'static str {
        "hosted"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = HostedOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 3);
        if !a.sizes.is_empty() {
            opts.sizes = a.sizes.clone();
        }
        opts.configs = Args::parsed(&a.configs)?;
        opts.machine = a.machine.unwrap_or(opts.machine);
        opts.common.paper = match opts.machine {
            // PC-733: one CPU, 100 Mb/s Ethernet (§4).
            Machine::Paper => Some(PaperMachine::new(1, FAST_ETHERNET)?),
            Machine::Modern => None,
        };
        let r = run(&opts)?;
        Ok(Output::of(&r, r.table(), r.svg())?.with_charts(r.charts()))
    }

    fn seeds(&self) -> Option<crate::seeds::Reader> {
        Some(|json| harness::figures_of("hosted", json, figures))
    }

    fn machines(&self) -> &'static [Machine] {
        &[Machine::Paper, Machine::Modern]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_the_window_and_the_path_adds_up() {
        let w = Window {
            cycles: 1000.0,
            switch_cycles: 400.0,
            service_cycles: 150.0,
            service_vmnet_cycles: 100.0,
            halt_cycles: 200.0,
            tx_outs: 2.0,
            tx_out_cycles: 220.0,
            tx_switches: 2.0,
            tx_switch_cycles: 200.0,
            tx_back_cycles: 20.0,
            tx_requests: 2.0,
            tx_arrive_cycles: 40.0,
            tx_emulate_cycles: 20.0,
            tx_write_cycles: 100.0,
            tx_finish_cycles: 20.0,
            ..Window::default()
        };
        let s = w.shares();
        assert_eq!(s.idle, 20.0);
        assert_eq!(s.world_switch, 25.0);
        assert_eq!(s.vmapp, 5.0);
        assert_eq!(s.host_network, 10.0);
        assert_eq!(s.guest_and_vmm, 40.0);
        let sum = s.idle + s.world_switch + s.vmapp + s.host_network + s.guest_and_vmm;
        assert!((sum - 100.0).abs() < 1e-9);
        let p = w.path().unwrap();
        assert_eq!(p, [10.0, 20.0, 10.0, 50.0, 20.0]);
        // A round trip is arrive + emulate + write + back.
        assert_eq!(p[1..].iter().sum::<f64>(), 100.0);
        assert!(Window::default().path().is_none());
    }

    #[test]
    fn topologies_set_the_three_switches() {
        let t = topology(Config::NoIrqNotification);
        assert!(t.contains("hosted_ports_in_vmm = true"));
        assert!(t.contains("hosted_send_combining = true"));
        assert!(t.contains("hosted_irq_bitvector = false"));
        assert!(topology(Config::Unoptimized).contains("hosted_ports_in_vmm = false"));
    }
}
