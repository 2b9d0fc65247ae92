//! Suite `menon2005`: Menon et al., "Diagnosing Performance Overheads in
//! the Xen Virtual Machine Environment" (VEE 2005, the Xenoprof paper),
//! re-measured. Its configurations: Linux (native namespaces joined by
//! veth), Xen-domain0 (the application in the driver domain, on its
//! bridge's own address), Xen-guest0 (guest1, guest and driver domain on
//! one core: `up --placement same`) and Xen-guest1 (on separate cores:
//! `--placement split`); the guests are the Xen 2.0 guest the paper
//! measured (`grants = "hv-copy"`, RX page flip, TX map, no offloads).
//!
//! - Figures 1 and 2, Tables 1 and 2: receive throughput against the
//!   receiver's user buffer ([`crate::sink`]), the best and worst point of
//!   the guest's sweep profiled; with 4 KiB receive buffers in the driver
//!   domain (`port_buffer = "page"`) where this build has them, the
//!   paper's cause of the anomaly.
//! - Figure 3: receive with one, two and three NICs (`[[wire]]`).
//! - Tables 4-8: profiles of the receive and send runs.
//! - Figure 7: nginx serving a 1 KB file under httperf's open-loop load.
//! - Table 3 and Figures 4, 5, 6 and 8 count hardware events; where
//!   perf_event_open has none, TSC cycles per packet stand for the
//!   instruction cost and the L2 and TLB misses are not measurable here.
//!
//! A configuration whose topology keys this build lacks is reported as not
//! available in this build, not as a failure.

use crate::harness::{self, Args, Output, RunOptions};
use crate::machine::{wire_tables, wires, Machine, MultiNative, NicPath, NicRate, PaperMachine};
use crate::netenv::{self, FlowResult, PAYLOAD_PER_FRAME};
use crate::nstat;
use crate::plot::{self, Bar};
use crate::sink;
use crate::stats::{tsc_per_us, Spread};
use crate::testbed::{self, Env};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use toolstack::cgroup::{Cgroup, CgroupLayout};
use toolstack::topology::LinkRate;

mod anomaly;
mod measures;
mod nics;
mod paper;
mod web;
use anomaly::anomaly;
pub use anomaly::dips;

use measures::WEB_COST_RATE;
pub use web::{parse_httperf, Httperf};

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct Menon2005Options {
    /// The options every suite shares.
    pub common: RunOptions,
    /// The receiver's user buffer sizes of Figures 1 and 2, in bytes.
    pub buffers: Vec<usize>,
    /// httperf's request rates of Figure 7, per second.
    pub rates: Vec<u32>,
    /// Profile the runs Tables 1, 2 and 4-8 come from.
    pub profile: bool,
    /// The paper's server (one CPU, gigabit NICs) or this host as it is.
    pub machine: Machine,
    /// How the paper's machine rates its NICs.
    pub nic: NicRate,
}

impl Menon2005Options {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> Menon2005Options {
        let buffers = if quick {
            vec![512, 4096, 32768, 262144]
        } else {
            dense_buffers()
        };
        let rates = if quick {
            vec![1000, WEB_COST_RATE, 24000]
        } else {
            vec![
                500,
                1000,
                2000,
                4000,
                WEB_COST_RATE,
                6000,
                8000,
                10000,
                12000,
                16000,
                20000,
                24000,
            ]
        };
        Menon2005Options {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 2 } else { 5 }),
            buffers,
            rates,
            profile: true,
            machine: Machine::Paper,
            nic: NicRate::Scaled,
        }
    }
}

/// Figures 1 and 2's sweep: 28 user buffers from 512 B to 256 KiB, three
/// to each doubling (rounded to 64 bytes), dense enough that a dip a few
/// sizes wide shows, as in the paper's plots; every power of two from
/// 512 B on is one of them, so the quick sweep's points are too.
pub fn dense_buffers() -> Vec<usize> {
    const POINTS: usize = 28;
    (0..POINTS)
        .map(|i| {
            let b = 512.0 * 2f64.powf(i as f64 / 3.0);
            ((b / 64.0).round() as usize) * 64
        })
        .collect()
}

/// A configuration, named as in the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Setup {
    Linux,
    #[serde(rename = "Xen-domain0")]
    Domain0,
    /// Xen-domain0 with every received frame in its own 4 KiB buffer
    /// (`port_buffer = "page"`): what XenoLinux did, and the anomaly's cause.
    #[serde(rename = "Xen-domain0-page")]
    Domain0Page,
    #[serde(rename = "Xen-guest0")]
    Guest0,
    #[serde(rename = "Xen-guest1")]
    Guest1,
}

impl Setup {
    pub const ALL: [Setup; 5] = [
        Setup::Linux,
        Setup::Domain0,
        Setup::Domain0Page,
        Setup::Guest0,
        Setup::Guest1,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Setup::Linux => "Linux",
            Setup::Domain0 => "Xen-domain0",
            Setup::Domain0Page => "Xen-domain0-page",
            Setup::Guest0 => "Xen-guest0",
            Setup::Guest1 => "Xen-guest1",
        }
    }

    /// The application runs in the driver domain.
    fn in_driver(self) -> bool {
        matches!(self, Setup::Domain0 | Setup::Domain0Page)
    }

    /// `up --placement`; on the paper's one-CPU server every domain of
    /// Xen-domain0 shares its core too.
    fn placement(self, paper: bool) -> Option<&'static str> {
        match self {
            Setup::Guest0 => Some("same"),
            Setup::Guest1 => Some("split"),
            _ => paper.then_some("same"),
        }
    }

    /// The cores of its application and of its peers on the paper's
    /// machine. Xen-guest1 needs a second CPU for the server (the paper ran
    /// it on a dual-CPU machine), which leaves none for the clients here:
    /// its processes are not pinned.
    fn cores(self, paper: Option<&PaperMachine>) -> (Option<usize>, Option<usize>) {
        match paper {
            Some(p) if self != Setup::Guest1 => (Some(p.server_cpu), Some(p.client_cpu)),
            _ => (None, None),
        }
    }

    /// What it measures beyond the buffer sweep.
    fn experiments(self) -> &'static [Experiment] {
        use Experiment::*;
        match self {
            Setup::Linux | Setup::Domain0 => &[Buffer, Nics, Tx, Web],
            Setup::Domain0Page => &[Buffer],
            Setup::Guest0 => &[Nics, Tx, Web],
            Setup::Guest1 => &[Buffer, Nics, Web],
        }
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Receive throughput against the receiver's buffer (Figures 1, 2); x
    /// is the buffer in bytes.
    Buffer,
    /// Receive throughput with x NICs at once (Figure 3).
    Nics,
    /// Send throughput over one NIC (Table 8); x is 1.
    Tx,
    /// Web replies per second at x requests per second (Figure 7).
    Web,
}

impl Experiment {
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Buffer => "receive buffer",
            Experiment::Nics => "NICs",
            Experiment::Tx => "transmit",
            Experiment::Web => "web",
        }
    }
}

/// The receiver's buffer in the NIC and transmit runs.
const STREAM_BUFFER: usize = 64 * 1024;
/// The receive buffer of the sweep's socket: Linux 2.6's default
/// (`tcp_rmem`'s middle value), fixed.
const SWEEP_RCVBUF: usize = 87380;
/// The port every sink of a run listens on (plus the NIC's index).
const SINK_PORT: u16 = 5301;
/// nginx's port.
const WEB_PORT: u16 = 8080;

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub setup: Setup,
    pub experiment: Experiment,
    pub x: f64,
    pub run: usize,
    /// Gbit/s, or replies per second for the web server.
    pub value: f64,
    pub ratio_to_native: Option<f64>,
    /// TSC cycles per 1448-byte packet by domain, and "total" (streams only).
    pub cycles_per_packet: BTreeMap<String, f64>,
    /// Segments the receiver's TCP collapsed to make room in its receive
    /// queue (`TcpExtTCPRcvCollapsed`), per MB received: the buffer
    /// sweep's points only.
    #[serde(default)]
    pub collapsed_per_mb: Option<f64>,
}

/// The medians over runs of one point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub setup: Setup,
    pub experiment: Experiment,
    pub x: f64,
    pub runs: usize,
    pub value: Spread,
    pub ratio_to_native: Option<Spread>,
    pub cycles_per_packet: BTreeMap<String, f64>,
    /// The median of the runs' [`Record::collapsed_per_mb`].
    #[serde(default)]
    pub collapsed_per_mb: Option<f64>,
}

/// A function's share of a domain's samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hot {
    pub function: String,
    pub module: String,
    pub class: String,
    pub samples: u64,
    pub share_pct: f64,
}

/// One domain of a profile, by its role in the paper's tables.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoleProfile {
    /// The profile's name for it (drv, guest1, hv, bench-wire, ...).
    pub domain: String,
    /// guest, driver, hv, sender, receiver (Linux), idle, other.
    pub role: String,
    pub samples: u64,
    pub kernel_samples: u64,
    pub share_pct: f64,
    pub top: Vec<Hot>,
    /// Its samples by cost class, every class with any (none in runs
    /// saved before classes were kept).
    #[serde(default)]
    pub classes: BTreeMap<String, u64>,
    /// The TCP send routines Table 8 names, each with its callees'
    /// samples (`measures::tcp_send_watch`).
    #[serde(default)]
    pub watched: BTreeMap<String, u64>,
    /// Samples in any of them, each once.
    #[serde(default)]
    pub watched_samples: u64,
}

/// A profiled run: what Tables 1, 2 and 4-8 are read from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profiled {
    pub setup: Setup,
    /// "rx, 1 NIC", "rx, 3 NICs", "tx", "buffer A" or "buffer B".
    pub what: String,
    pub x: f64,
    pub gbps: f64,
    pub clock: String,
    pub callchains: bool,
    pub domains: Vec<RoleProfile>,
    /// Percent of all samples per cost class.
    pub classes: BTreeMap<String, f64>,
    /// TSC cycles per 1448-byte packet by domain (from CPU time).
    pub cycles_per_packet: BTreeMap<String, f64>,
    /// Hardware events: (event, measurable, note).
    pub events: Vec<(String, bool, String)>,
}

/// Whether throughput against the receive buffer is erratic.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Anomaly {
    /// Per setup: (coefficient of variation over the sweep, min, max) in Gbit/s.
    pub spread: BTreeMap<String, (f64, f64, f64)>,
    pub verdict: String,
}

/// The suite's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Menon2005Report {
    #[serde(skip_deserializing)]
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub wall_seconds: f64,
    pub records: Vec<Record>,
    pub summary: Vec<Point>,
    pub profiles: Vec<Profiled>,
    /// Configurations (or parts) not measured, and why.
    pub unavailable: Vec<(String, String)>,
    pub anomaly: Option<Anomaly>,
    /// Why Table 3 and Figures 4, 5, 6 and 8 have no event counts, if so.
    pub events_note: String,
    /// The machine the numbers come from ([`crate::machine`]).
    #[serde(default = "crate::machine::modern_note")]
    pub machine: String,
}

/// What every measurement of a run shares.
struct Ctx<'a> {
    opts: &'a Menon2005Options,
    base: RunOptions,
    layout: CgroupLayout,
    tsc_hz: f64,
    profile: AtomicBool,
    progress: crate::Progress,
}

impl Ctx<'_> {
    fn say(&self, what: &str) {
        self.progress.say(what);
    }
}

/// The driver domain's own address on its bridge (Xen-domain0's receiver).
pub const DRIVER_ADDRESS: &str = "10.77.0.10";
/// guest1's address.
pub const GUEST_ADDRESS: &str = "10.77.0.1";

/// The paper's topology: a driver domain (with its own address when
/// `driver_address`, which frames from the wires reach in its kernel as
/// in dom0, or through its bridge into 4 KiB receive buffers when `page`),
/// guest1 as the Xen 2.0 guest, and `n` wires (`[[wire]]` when more than
/// one).
pub fn topology(n: usize, driver_address: bool, page: bool, rate: Option<LinkRate>) -> String {
    let mut t = String::from(
        "# bench menon2005: Menon 2005's receiver, driver domain and wires.\nname = \"menon2005\"\n\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n",
    );
    if driver_address {
        t += &format!("address = \"{DRIVER_ADDRESS}/24\"\n");
    }
    if page {
        t += "port_buffer = \"page\"\n";
    } else if driver_address {
        // dom0's own frames went from its NIC's driver up its kernel.
        t += "local_delivery = \"kernel\"\n";
    }
    t += &format!(
        "\n[[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"{GUEST_ADDRESS}/24\"\n\
         grants = \"hv-copy\"\nrx_mode = \"flip\"\ntx_mode = \"map\"\noffload = false\n"
    );
    t + &wire_tables(n, "drv", rate)
}

/// A brought-up configuration.
struct Bed {
    setup: Setup,
    env: Env,
    paths: Vec<NicPath>,
    /// Indices into `env.domains` of the receiving application's domain
    /// and of the senders'.
    app_dom: usize,
    peer_dom: usize,
    /// The cores of the application and of its peers, if pinned.
    cores: (Option<usize>, Option<usize>),
    _native: Option<MultiNative>,
}

/// The topology this build takes for `setup`: three wires if it can, else
/// one; `Err(why)` when not even that.
fn choose_topology(
    setup: Setup,
    rate: Option<LinkRate>,
) -> std::result::Result<(String, usize), String> {
    let (addr, page) = (setup.in_driver(), setup == Setup::Domain0Page);
    let mut why = String::new();
    for n in [3, 1] {
        let t = topology(n, addr, page, rate);
        match toolstack::topology::Topology::parse(&t, "menon2005.toml") {
            Ok(_) => return Ok((t, n)),
            Err(e) => why = e.to_string(),
        }
    }
    Err(format!("not available in this build ({why})"))
}

/// Brings `setup` up with its senders sending MTU-sized frames, as the
/// paper's gigabit NICs delivered them (veth otherwise carries a local
/// sender's 64 KiB TSO frames whole).
fn bring_up(ctx: &Ctx<'_>, setup: Setup) -> Result<std::result::Result<Bed, String>> {
    let bed = match bring_up_bed(ctx, setup)? {
        Ok(b) => b,
        Err(why) => return Ok(Err(why)),
    };
    for p in &bed.paths {
        if let Err(e) = crate::ram::ethtool(&p.sender_ns, &["tso", "off", "gso", "off"]) {
            tear_down(ctx, bed);
            return Err(e);
        }
    }
    Ok(Ok(bed))
}

fn bring_up_bed(ctx: &Ctx<'_>, setup: Setup) -> Result<std::result::Result<Bed, String>> {
    let paper = ctx.base.paper.as_ref();
    if setup == Setup::Linux {
        let native = MultiNative::new(3, paper)?;
        let mut env = Env::new(testbed::bench_domains(&ctx.layout, &["client", "server"])?);
        env.domains.shrink_to_fit();
        return Ok(Ok(Bed {
            setup,
            env,
            paths: native.paths.clone(),
            app_dom: 1,
            peer_dom: 0,
            cores: setup.cores(paper),
            _native: Some(native),
        }));
    }
    let (topo, n) = match choose_topology(setup, paper.map(|p| LinkRate(p.rate_bps))) {
        Ok(t) => t,
        Err(why) => return Ok(Err(why)),
    };
    std::fs::create_dir_all(&ctx.opts.common.run_dir)?;
    let path = ctx
        .opts
        .common
        .run_dir
        .join(format!("menon2005-{}.toml", setup.name()));
    std::fs::write(&path, topo).with_context(|| format!("writing {}", path.display()))?;
    let path = path.to_string_lossy().into_owned();
    let mut up = vec!["up", "--config", path.as_str()];
    up.extend(testbed::PAPER_NIC);
    if let Some(p) = setup.placement(paper.is_some()) {
        up.extend(["--placement", p]);
    }
    // Xen-guest1's second server CPU: splitnet runs unpinned, and
    // `--placement split` spreads the domains (Setup::cores).
    let base = match setup {
        Setup::Guest1 => RunOptions {
            paper: None,
            ..ctx.base.clone()
        },
        _ => ctx.base.clone(),
    };
    let env = testbed::splitnet_env(&base, &ctx.layout, &up)?;
    if let (Some(pm), Setup::Domain0) = (paper, setup) {
        pm.steer_ports("drv", n)?; // its kernel reads its ports (`local_delivery`)
    }
    let (receiver_ns, receiver_ip, app_dom) = if setup.in_driver() {
        (toolstack::host::netns_name("drv"), DRIVER_ADDRESS, 1)
    } else {
        (toolstack::host::netns_name("guest1"), GUEST_ADDRESS, 2)
    };
    let paths = wires(n)
        .iter()
        .map(|(name, ip)| NicPath {
            sender_ns: toolstack::host::netns_name(name),
            sender_ip: ip.to_string(),
            receiver_ns: receiver_ns.clone(),
            receiver_ip: receiver_ip.to_string(),
        })
        .collect();
    // splitnet_env's domains: hv, drv, guest1, guest2, the wire hosts.
    Ok(Ok(Bed {
        setup,
        env,
        paths,
        app_dom,
        peer_dom: 4,
        cores: setup.cores(paper),
        _native: None,
    }))
}

/// `ip netns exec NS ARGS...` with stdout piped, placed in `cg`; on core
/// `cpu` as a batch process when given (the paper's machine).
fn spawn_in(ns: &str, args: &[&str], (cg, cpu): (Option<&Cgroup>, Option<usize>)) -> Result<Child> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::machine::place_application(&mut cmd, cpu)?;
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {} in {ns}", args[0]))?;
    if let Some(cg) = cg {
        cg.add(child.id() as i32)?;
    }
    Ok(child)
}

/// Waits until something listens on `port` in `ns`, or fails if `child`
/// exits or 10 s pass.
fn wait_listening(what: &str, ns: &str, port: u16, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !netenv::listening(ns, port)? {
        if let Some(st) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            bail!("{what} in {ns} exited before listening on port {port} ({st}): {err}");
        }
        if Instant::now() > deadline {
            bail!("{what} in {ns} was not listening on port {port} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Kills and reaps a child.
fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Where a stream's process runs: its cgroup and its core, if pinned.
type Endpoint<'a> = (Option<&'a Cgroup>, Option<usize>);

/// How the receiving application reads: its user buffer, and its socket's
/// receive buffer if fixed.
#[derive(Debug, Clone, Copy)]
struct Reading {
    buffer: usize,
    rcvbuf: Option<usize>,
}

impl Reading {
    /// The NIC and transmit runs: 64 KiB reads, the kernel's autotuning.
    const STREAM: Reading = Reading {
        buffer: STREAM_BUFFER,
        rcvbuf: None,
    };

    /// A point of Figures 1 and 2: the buffer under test, and the socket's
    /// receive buffer fixed at Linux 2.6's default (autotuning off), so
    /// that what each packet is charged decides how soon it fills.
    fn sweep(buffer: usize) -> Reading {
        Reading {
            buffer,
            rcvbuf: Some(SWEEP_RCVBUF),
        }
    }
}

/// One stream: `splitnet sink` at `to` reading as `read` says, `splitnet
/// source` at `from` writing 64 KiB at a time, for `secs`.
fn stream(
    exe: &Path,
    to: (&str, &str, Endpoint<'_>),
    from: (&str, Endpoint<'_>),
    port: u16,
    read: Reading,
    secs: u32,
) -> Result<FlowResult> {
    let (rx_ns, rx_ip, rx_at) = to;
    let exe = exe.to_string_lossy();
    let listen = format!("{rx_ip}:{port}");
    let (buf, s) = (read.buffer.to_string(), secs.to_string());
    let rcvbuf = read.rcvbuf.map(|n| n.to_string());
    let mut args = vec![
        &*exe, "sink", "--listen", &listen, "--buffer", &buf, "--secs", &s,
    ];
    if let Some(n) = &rcvbuf {
        args.extend(["--rcvbuf", n.as_str()]);
    }
    let mut rx = spawn_in(rx_ns, &args, rx_at)?;
    if let Err(e) = wait_listening("the sink", rx_ns, port, &mut rx) {
        stop(rx);
        return Err(e);
    }
    let bound = (secs + 10).to_string();
    let args = [&*exe, "source", "--connect", &listen, "--secs", &bound];
    let tx = match spawn_in(from.0, &args, from.1) {
        Ok(tx) => tx,
        Err(e) => {
            stop(rx);
            return Err(e);
        }
    };
    let out = rx.wait_with_output().context("waiting for the sink")?;
    stop(tx);
    let text = String::from_utf8_lossy(&out.stdout);
    let r = sink::parse(&text).with_context(|| {
        format!(
            "the sink in {rx_ns} said {:?} ({})",
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    Ok(FlowResult {
        gbps: r.gbps(),
        bytes: r.bytes as f64,
        packets: r.bytes as f64 / PAYLOAD_PER_FRAME,
        seconds: r.seconds,
        latency: None,
    })
}

impl Bed {
    /// Streams over the first `nics` paths at once, toward the application
    /// (receive) or from it (`tx`), summed.
    fn streams(&self, ctx: &Ctx<'_>, nics: usize, read: Reading, tx: bool) -> Result<FlowResult> {
        let cg = |i: usize| self.env.domains.get(i).and_then(|d| d.cgroup.as_ref());
        let (app, peer) = (
            (cg(self.app_dom), self.cores.0),
            (cg(self.peer_dom), self.cores.1),
        );
        let (exe, secs) = (&ctx.opts.common.exe, ctx.opts.common.secs);
        let results = std::thread::scope(|sc| {
            let hs: Vec<_> = self.paths[..nics]
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let port = SINK_PORT + i as u16;
                    sc.spawn(move || {
                        if tx {
                            let to = (p.sender_ns.as_str(), p.sender_ip.as_str(), peer);
                            stream(exe, to, (&p.receiver_ns, app), port, read, secs)
                        } else {
                            let to = (p.receiver_ns.as_str(), p.receiver_ip.as_str(), app);
                            stream(exe, to, (&p.sender_ns, peer), port, read, secs)
                        }
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a stream panicked")))
                })
                .collect()
        });
        testbed::sum_flows(results)
    }

    /// Measures streams, profiled when `profile` names what for.
    fn measure(
        &self,
        ctx: &Ctx<'_>,
        nics: usize,
        read: Reading,
        tx: bool,
        profile: bool,
    ) -> Result<testbed::Measured> {
        let opts = (profile && ctx.profile.load(Ordering::Relaxed)).then(|| prof::ProfileOptions {
            initiator: "splitnet bench menon2005".into(),
            top_n: 40,
            watch: measures::tcp_send_watch(),
            events: prof::HwEvent::ALL.to_vec(),
            ..Default::default()
        });
        let flow = || self.streams(ctx, nics, read, tx);
        match testbed::measure_with(&self.env, ctx.tsc_hz, opts.clone(), flow) {
            Err(e) if opts.is_some() && format!("{e}").starts_with("profiling the flow") => {
                ctx.say(&format!("no profiles from here on: {e}"));
                ctx.profile.store(false, Ordering::Relaxed);
                testbed::measure_with(&self.env, ctx.tsc_hz, None, || {
                    self.streams(ctx, nics, read, tx)
                })
            }
            r => r,
        }
    }
}

/// The role a profile's domain plays in the paper's tables.
pub fn role(domain: &str) -> &'static str {
    match domain {
        "hv" => "hv",
        "drv" => "driver",
        "guest1" | "guest2" => "guest",
        // Native's cgroups: "server" in the suite's CPU accounting,
        // "bench-server" in a profile.
        "server" | "bench-server" | "m5-rx" => "receiver",
        "client" | "bench-client" | "bench-wire" => "sender",
        "idle" => "idle",
        crate::testbed::NIC => "nic",
        d if d.starts_with("wire") || d.starts_with("m5-tx") => "sender",
        _ => "other",
    }
}

/// The server's share of cycles per packet by domain: hv's, the driver
/// domain's, the guests' and native's receiver's, not the clients'. A
/// guest idle in the configuration is counted too: at 5,000 requests/s it
/// took at most 160 cycles per reply (0.04%) in the 2026-11-30 runs.
fn server_cycles(cycles: &BTreeMap<String, f64>) -> f64 {
    let server = |d: &str| matches!(role(d), "hv" | "driver" | "guest" | "receiver");
    cycles
        .iter()
        .filter(|(d, _)| server(d))
        .map(|(_, c)| c)
        .sum()
}

fn profiled(setup: Setup, what: &str, x: f64, m: &testbed::Measured) -> Option<Profiled> {
    let p = m.profile.as_ref()?;
    let domains = p
        .domains
        .iter()
        .map(|d| RoleProfile {
            domain: d.name.clone(),
            role: role(&d.name).to_string(),
            samples: d.samples,
            kernel_samples: d.kernel_samples,
            share_pct: d.share_pct,
            // Only the paper's roles' lists are read in full.
            top: d
                .top_functions
                .iter()
                .take(match role(&d.name) {
                    "guest" | "driver" | "hv" => usize::MAX,
                    _ => 5,
                })
                .map(|f| Hot {
                    function: f.function.clone(),
                    module: f.module.clone(),
                    class: f.class.name().to_string(),
                    samples: f.samples,
                    share_pct: f.share_pct,
                })
                .collect(),
            classes: d
                .classes
                .iter()
                .filter(|c| c.samples > 0)
                .map(|c| (c.class.name().to_string(), c.samples))
                .collect(),
            watched: d
                .watched
                .iter()
                .map(|w| (w.function.clone(), w.samples))
                .collect(),
            watched_samples: d.watched_samples,
        })
        .collect();
    Some(Profiled {
        setup,
        what: what.to_string(),
        x,
        gbps: m.flow.gbps,
        clock: p.meta.clock.clone(),
        callchains: p.meta.callchains,
        domains,
        classes: p.summary().classes,
        cycles_per_packet: m.cycles_per_packet.clone(),
        events: p
            .events
            .iter()
            .map(|e| (e.event.clone(), e.measurable, e.note.clone()))
            .collect(),
    })
}

/// Everything one run measures of one bed.
struct RunOut<'a> {
    records: &'a mut Vec<Record>,
    profiles: &'a mut Vec<Profiled>,
}

fn push(out: &mut RunOut<'_>, bed: &Bed, e: Experiment, x: f64, run: usize, m: &testbed::Measured) {
    out.records.push(Record {
        setup: bed.setup,
        experiment: e,
        x,
        run,
        value: m.flow.gbps,
        ratio_to_native: None,
        cycles_per_packet: m.cycles_per_packet.clone(),
        collapsed_per_mb: None,
    });
}

/// The receiver's counter of segments TCP collapsed to make room in a full
/// receive queue (`tcp_collapse`, Menon 2005 Table 2).
const COLLAPSED: [&str; 1] = ["TcpExtTCPRcvCollapsed"];

/// Figures 1 and 2 on `bed`: one stream per buffer size, each point's
/// collapsed segments counted.
fn buffer_sweep(ctx: &Ctx<'_>, bed: &Bed, run: usize, out: &mut RunOut<'_>) -> Result<()> {
    let mut points = Vec::new();
    let receiver = &bed.paths[0].receiver_ns;
    for &b in &ctx.opts.buffers {
        let c0 = nstat::sum(receiver, &COLLAPSED)?;
        let m = bed.measure(ctx, 1, Reading::sweep(b), false, false)?;
        let collapsed = nstat::sum(receiver, &COLLAPSED)?.saturating_sub(c0);
        let per_mb = collapsed as f64 / (m.flow.bytes / 1e6).max(1e-9);
        ctx.say(&format!(
            "run {} {} receive, {b}-byte buffer: {:.2} Gbit/s, {per_mb:.1} segments collapsed per MB",
            run + 1,
            bed.setup.name(),
            m.flow.gbps
        ));
        push(out, bed, Experiment::Buffer, b as f64, run, &m);
        if let Some(r) = out.records.last_mut() {
            r.collapsed_per_mb = Some(per_mb);
        }
        points.push((b, m.flow.gbps));
    }
    // Beside Xen-domain0's 1-NIC profile (the same buffer): where page
    // buffers' time goes.
    if run == 0 && bed.setup == Setup::Domain0Page && ctx.opts.profile {
        let m = bed.measure(ctx, 1, Reading::STREAM, false, true)?;
        out.profiles
            .extend(profiled(bed.setup, "rx, 1 NIC", 1.0, &m));
    }
    // Tables 1 and 2: the best (A) and worst (B) point of the guest's sweep.
    if run == 0 && bed.setup == Setup::Guest1 && ctx.opts.profile {
        let by = |a: &&(usize, f64), b: &&(usize, f64)| a.1.total_cmp(&b.1);
        let best = points.iter().max_by(by).map(|p| p.0);
        let worst = points.iter().min_by(by).map(|p| p.0);
        for (what, b) in [("buffer A", best), ("buffer B", worst)] {
            let Some(b) = b else { continue };
            let m = bed.measure(ctx, 1, Reading::sweep(b), false, true)?;
            out.profiles.extend(profiled(bed.setup, what, b as f64, &m));
        }
    }
    Ok(())
}

/// Figure 3 on `bed`: one to three NICs at once; the 1-NIC run (and
/// Xen-domain0's 3-NIC run) profiled once for Tables 4-7.
fn nic_sweep(ctx: &Ctx<'_>, bed: &Bed, run: usize, out: &mut RunOut<'_>) -> Result<()> {
    for n in 1..=bed.paths.len() {
        let m = bed.measure(ctx, n, Reading::STREAM, false, false)?;
        ctx.say(&format!(
            "run {} {} receive, {n} NIC(s): {:.2} Gbit/s, {:.0} cycles/packet",
            run + 1,
            bed.setup.name(),
            m.flow.gbps,
            m.cycles_per_packet.get("total").copied().unwrap_or(0.0)
        ));
        push(out, bed, Experiment::Nics, n as f64, run, &m);
    }
    // Linux is the throughput reference; its profiles would not be read.
    if run == 0 && ctx.opts.profile && bed.setup != Setup::Linux {
        let mut ns = vec![1];
        if bed.paths.len() > 1 && bed.setup == Setup::Domain0 {
            ns.push(bed.paths.len());
        }
        for n in ns {
            let m = bed.measure(ctx, n, Reading::STREAM, false, true)?;
            let what = if n == 1 {
                "rx, 1 NIC".to_string()
            } else {
                format!("rx, {n} NICs")
            };
            out.profiles
                .extend(profiled(bed.setup, &what, n as f64, &m));
        }
    }
    Ok(())
}

/// Table 8 on `bed`: the application sends over one NIC, profiled.
fn transmit(ctx: &Ctx<'_>, bed: &Bed, run: usize, out: &mut RunOut<'_>) -> Result<()> {
    let prof = run == 0 && ctx.opts.profile && bed.setup != Setup::Linux;
    let m = bed.measure(ctx, 1, Reading::STREAM, true, prof)?;
    ctx.say(&format!(
        "run {} {} transmit: {:.2} Gbit/s",
        run + 1,
        bed.setup.name(),
        m.flow.gbps
    ));
    push(out, bed, Experiment::Tx, 1.0, run, &m);
    out.profiles.extend(profiled(bed.setup, "tx", 1.0, &m));
    Ok(())
}

fn measure_bed(ctx: &Ctx<'_>, bed: &Bed, run: usize, out: &mut RunOut<'_>) -> Result<()> {
    for e in bed.setup.experiments() {
        match e {
            Experiment::Buffer => buffer_sweep(ctx, bed, run, out)?,
            Experiment::Nics => nic_sweep(ctx, bed, run, out)?,
            Experiment::Tx => transmit(ctx, bed, run, out)?,
            Experiment::Web => web::web_sweep(ctx, bed, run, out)?,
        }
    }
    Ok(())
}

fn tear_down(ctx: &Ctx<'_>, bed: Bed) {
    let Bed { env, _native, .. } = bed;
    drop(_native);
    testbed::tear_down(env, &ctx.base, &ctx.layout);
}

/// One run: every setup in turn.
fn one_run(
    ctx: &Ctx<'_>,
    run: usize,
    out: &mut RunOut<'_>,
    unavailable: &mut Vec<(String, String)>,
) -> Result<()> {
    for setup in Setup::ALL {
        let bed =
            match bring_up(ctx, setup).with_context(|| format!("bringing up {}", setup.name()))? {
                Ok(b) => b,
                Err(why) => {
                    ctx.say(&format!("{}: {why}", setup.name()));
                    if !unavailable.iter().any(|u| u.0 == setup.name()) {
                        unavailable.push((setup.name().to_string(), why));
                    }
                    continue;
                }
            };
        if bed.paths.len() < 3 && setup.experiments().contains(&Experiment::Nics) {
            let what = format!("{} with 2 and 3 NICs", setup.name());
            if !unavailable.iter().any(|u| u.0 == what) {
                unavailable.push((
                    what,
                    "not available in this build (no `[[wire]]` array of wires)".into(),
                ));
            }
        }
        let r = measure_bed(ctx, &bed, run, out);
        tear_down(ctx, bed);
        r.with_context(|| format!("measuring {}", setup.name()))?;
    }
    Ok(())
}

/// Fails clearly when a tool the suite runs is missing.
fn check_tools() -> Result<()> {
    for (tool, package) in [("nginx", "nginx-light"), ("httperf", "httperf")] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            bail!("bench menon2005 needs {tool}: install the Debian package {package} (scripts/setup.sh does)");
        }
    }
    Ok(())
}

/// Runs the suite.
pub fn run(opts: &Menon2005Options) -> Result<Menon2005Report> {
    check_tools()?;
    let paper = match opts.machine {
        Machine::Paper => Some(PaperMachine::new(3, crate::machine::GIGABIT)?),
        Machine::Modern => None,
    };
    let mut ctx = Ctx {
        opts,
        base: RunOptions {
            progress: false,
            paper,
            ..opts.common.clone()
        },
        layout: CgroupLayout::detect(),
        tsc_hz: tsc_per_us() * 1e6,
        profile: AtomicBool::new(opts.profile),
        progress: crate::Progress::start("menon2005", opts.common.progress),
    };
    if opts.nic == NicRate::Scaled {
        nics::calibrate(&mut ctx).context("calibrating the paper's NICs to this host")?;
    }
    let ctx = ctx;
    let (mut records, mut profiles, mut unavailable) = (Vec::new(), Vec::new(), Vec::new());
    harness::runs(opts.common.runs, |run| {
        let mut out = RunOut {
            records: &mut records,
            profiles: &mut profiles,
        };
        one_run(&ctx, run, &mut out, &mut unavailable)
    })?;
    add_ratios(&mut records);
    let summary = summarize(&records);
    let events_note = events_note(&profiles);
    Ok(Menon2005Report {
        suite: "menon2005",
        tsc_mhz: ctx.tsc_hz / 1e6,
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        wall_seconds: ctx.progress.seconds(),
        anomaly: anomaly(&summary, &profiles),
        records,
        summary,
        profiles,
        unavailable,
        events_note,
        machine: ctx
            .base
            .paper
            .map_or_else(crate::machine::modern_note, |p| p.describe()),
    })
}

/// Why the hardware-event tables are empty, from the profiles' notes.
fn events_note(profiles: &[Profiled]) -> String {
    let Some(p) = profiles.first() else {
        return "no profile was taken".into();
    };
    let missing: Vec<String> = p
        .events
        .iter()
        .filter(|e| !e.1)
        .map(|e| format!("{}: {}", e.0, e.2))
        .collect();
    if missing.is_empty() {
        String::new()
    } else {
        missing.join("; ")
    }
}

/// Each record over Linux's of the same run, experiment and x.
fn add_ratios(records: &mut [Record]) {
    let key = |r: &Record| (r.run, r.experiment, r.x);
    let linux = |r: &Record| (r.setup == Setup::Linux).then(|| key(r));
    let ratios = harness::ratios(records, linux, key, |r| Some(r.value));
    for (r, x) in records.iter_mut().zip(ratios) {
        r.ratio_to_native = x;
    }
}

/// One point per (setup, experiment, x), in that order.
fn summarize(records: &[Record]) -> Vec<Point> {
    let mut keys: Vec<(Setup, Experiment, f64)> = Vec::new();
    for r in records {
        if !keys
            .iter()
            .any(|k| (k.0, k.1, k.2) == (r.setup, r.experiment, r.x))
        {
            keys.push((r.setup, r.experiment, r.x));
        }
    }
    keys.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(a.2.total_cmp(&b.2)));
    harness::groups(records, keys, |r| (r.setup, r.experiment, r.x))
        .into_iter()
        .filter_map(|((s, e, x), rs)| {
            let v: Vec<f64> = rs.iter().map(|r| r.value).collect();
            let ratios: Vec<f64> = rs.iter().filter_map(|r| r.ratio_to_native).collect();
            let collapsed: Vec<f64> = rs.iter().filter_map(|r| r.collapsed_per_mb).collect();
            Some(Point {
                setup: s,
                experiment: e,
                x,
                runs: rs.len(),
                value: Spread::of(&v)?,
                ratio_to_native: Spread::of(&ratios),
                cycles_per_packet: crate::ram::medians(rs.iter().map(|r| &r.cycles_per_packet)),
                collapsed_per_mb: Spread::of(&collapsed).map(|c| c.median),
            })
        })
        .collect()
}

pub use paper::figures;

impl Menon2005Report {
    /// The median of a point.
    fn point(&self, s: Setup, e: Experiment, x: f64) -> Option<&Point> {
        self.summary
            .iter()
            .find(|p| p.setup == s && p.experiment == e && p.x == x)
    }

    /// The points of one setup's experiment, by x.
    fn series(&self, s: Setup, e: Experiment) -> Vec<&Point> {
        self.summary
            .iter()
            .filter(|p| p.setup == s && p.experiment == e)
            .collect()
    }

    /// The profile of `what` in setup `s`.
    fn profile(&self, s: Setup, what: &str) -> Option<&Profiled> {
        self.profiles
            .iter()
            .find(|p| p.setup == s && p.what == what)
    }

    /// The whole report as Markdown: one section per figure and table.
    pub fn table(&self) -> String {
        let mut s = paper::tables(self);
        s += &format!(
            "\n{} run(s), {} s per stream, TSC {:.0} MHz, {:.0} s in all. Streams: `splitnet sink` \
             reading with the stated buffer against `splitnet source` writing 64 KiB at a time \
             (the paper's sendfile of a cached 64 KB file); ratios to Linux within each run, then the \
             median. Machine: {}.\n",
            self.runs, self.seconds_per_flow, self.tsc_mhz, self.wall_seconds, self.machine
        );
        for (what, why) in &self.unavailable {
            s += &format!("{what}: {why}.\n");
        }
        s
    }

    /// Receive throughput of every setup and experiment, as bars.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .summary
            .iter()
            .filter(|p| p.experiment == Experiment::Nics)
            .map(|p| Bar {
                label: format!("{} {} NIC", p.setup.name(), p.x),
                value: p.value.median,
                range: Some((p.value.min, p.value.max)),
            })
            .collect();
        plot::hbars(
            "splitnet bench menon2005: receive throughput with 1-3 NICs (Figure 3)",
            "Gbit/s",
            "bars: median; whiskers: min–max over runs",
            &bars,
        )
    }

    /// Further charts by file name.
    pub fn charts(&self) -> Vec<(String, String)> {
        figures(self)
            .into_iter()
            .filter(|f| !f.svg.is_empty())
            .map(|f| (paper::file_name(&f), f.svg))
            .collect()
    }
}

/// `splitnet bench menon2005`: the Xenoprof paper's receive, send and web-server
/// experiments and its profiles.
pub struct Menon2005Suite;

impl harness::Suite for Menon2005Suite {
    fn name(&self) -> &'static str {
        "menon2005"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = Menon2005Options::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        if !a.sizes.is_empty() {
            opts.buffers = a.sizes.iter().map(|&s| s as usize).collect();
        }
        opts.machine = a.machine.unwrap_or(opts.machine);
        opts.nic = a.nic.unwrap_or(opts.nic);
        let r = run(&opts)?;
        Ok(Output::of(&r, r.table(), r.svg())?.with_charts(r.charts()))
    }

    fn seeds(&self) -> Option<crate::seeds::Reader> {
        Some(|json| harness::figures_of("menon2005", json, figures))
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
    use toolstack::topology::Topology;

    #[test]
    fn the_dense_sweep_spans_512_b_to_256_kib_through_the_quick_points() {
        let b = dense_buffers();
        assert_eq!(b.len(), 28);
        assert_eq!((b[0], b[27]), (512, 262144));
        assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        assert!(b.iter().all(|x| x % 64 == 0));
        let quick = Menon2005Options::new("s".into(), "/r".into(), true, 1).buffers;
        assert!(quick.iter().all(|q| b.contains(q)), "{quick:?} in {b:?}");
    }

    #[test]
    fn the_paper_topology_parses_or_names_what_this_build_lacks() {
        let one = topology(1, false, false, None);
        let t = Topology::parse(&one, "m").expect("one wire and guest1 parse");
        let g = t.domain("guest1").unwrap();
        assert_eq!(g.grants, toolstack::topology::Grants::HvCopy);
        assert!(one.contains("rx_mode = \"flip\"") && one.contains("offload = false"));
        let three = topology(3, true, true, Some(crate::machine::GIGABIT));
        assert_eq!(three.matches("[[wire]]").count(), 3);
        for (name, addr) in wires(3) {
            assert!(three.contains(&format!("name = \"{name}\"")), "{three}");
            assert!(
                three.contains(&format!("address = \"{addr}/24\"")),
                "{three}"
            );
        }
        assert_eq!(wires(3)[0], ("wire", "10.77.0.254"));
        assert_eq!(wires(3)[2].0, "wire3");
        assert!(three.contains(&format!("address = \"{DRIVER_ADDRESS}/24\"")));
        assert!(!three.contains("local_delivery"), "{three}");
        let dom0 = topology(3, true, false, None);
        assert!(dom0.contains("local_delivery = \"kernel\""), "{dom0}");
        assert!(!one.contains("local_delivery"), "{one}");
        // Each setup gets a topology or a reason, never a panic.
        for s in Setup::ALL.into_iter().filter(|s| *s != Setup::Linux) {
            match choose_topology(s, None) {
                Ok((t, n)) => assert!(Topology::parse(&t, "m").is_ok() && (n == 1 || n == 3)),
                Err(why) => assert!(why.starts_with("not available in this build"), "{why}"),
            }
        }
    }

    #[test]
    fn profile_domains_get_the_papers_roles() {
        assert_eq!(role("hv"), "hv");
        assert_eq!(role("drv"), "driver");
        assert_eq!(role("guest1"), "guest");
        assert_eq!(role("bench-wire"), "sender");
        assert_eq!(role("wire2"), "sender");
        assert_eq!(role("bench-server"), "receiver");
        assert_eq!(role("host"), "other");
        // Native's CPU accounting, and what of it is the server's.
        assert_eq!((role("server"), role("client")), ("receiver", "sender"));
        let cycles: BTreeMap<String, f64> = [
            ("server", 3.0),
            ("client", 100.0),
            ("hv", 1.0),
            ("drv", 10.0),
            ("guest1", 20.0),
            ("guest2", 40.0),
            ("total", 174.0),
        ]
        .into_iter()
        .map(|(d, c)| (d.to_string(), c))
        .collect();
        assert_eq!(server_cycles(&cycles), 74.0);
    }

    /// A record whose total cost per packet is 100 × its value.
    pub(super) fn rec(setup: Setup, e: Experiment, x: f64, run: usize, value: f64) -> Record {
        Record {
            setup,
            experiment: e,
            x,
            run,
            value,
            ratio_to_native: None,
            cycles_per_packet: [("total".to_string(), value * 100.0)].into(),
            collapsed_per_mb: None,
        }
    }

    #[test]
    fn ratios_are_taken_within_a_run_at_the_same_point() {
        let mut rs = vec![
            rec(Setup::Linux, Experiment::Nics, 1.0, 0, 10.0),
            rec(Setup::Linux, Experiment::Nics, 1.0, 1, 20.0),
            rec(Setup::Guest0, Experiment::Nics, 1.0, 0, 5.0),
            rec(Setup::Guest0, Experiment::Nics, 1.0, 1, 5.0),
            rec(Setup::Guest0, Experiment::Nics, 2.0, 0, 5.0),
        ];
        add_ratios(&mut rs);
        assert_eq!(rs[2].ratio_to_native, Some(0.5));
        assert_eq!(rs[3].ratio_to_native, Some(0.25));
        assert_eq!(rs[4].ratio_to_native, None);
        let s = summarize(&rs);
        assert_eq!(s.len(), 3);
        let g = s
            .iter()
            .find(|p| p.setup == Setup::Guest0 && p.x == 1.0)
            .unwrap();
        assert_eq!(g.runs, 2);
        assert_eq!(g.ratio_to_native.unwrap().median, 0.375);
        assert_eq!(g.cycles_per_packet["total"], 500.0);
    }

    fn sweep(setup: Setup, v: &[f64]) -> Vec<Record> {
        v.iter()
            .enumerate()
            .map(|(i, g)| rec(setup, Experiment::Buffer, (512 << i) as f64, 0, *g))
            .collect()
    }

    fn rerun(what: &str, x: f64, gbps: f64) -> Profiled {
        Profiled {
            setup: Setup::Guest1,
            what: what.into(),
            x,
            gbps,
            clock: "cpu-clock".into(),
            callchains: true,
            domains: Vec::new(),
            classes: BTreeMap::new(),
            cycles_per_packet: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    #[test]
    fn an_erratic_sweep_is_an_anomaly_only_when_its_rerun_agrees() {
        assert_eq!(dips(&[5.0, 2.0, 5.0, 5.0]), 1);
        assert_eq!(dips(&[1.0, 2.0, 3.0, 3.0]), 0);
        let mut rs = sweep(Setup::Linux, &[3.0, 5.0, 7.0, 7.0]);
        rs.extend(sweep(Setup::Guest1, &[2.0, 0.5, 2.0, 2.0]));
        let s = summarize(&rs);
        let smooth = anomaly(&summarize(&sweep(Setup::Linux, &[3.0, 5.0, 7.0])), &[]).unwrap();
        assert!(
            smooth.verdict.starts_with("the anomaly needs each"),
            "{}",
            smooth.verdict
        );
        let confirmed = [
            rerun("buffer A", 512.0, 2.0),
            rerun("buffer B", 1024.0, 0.6),
        ];
        let a = anomaly(&s, &confirmed).unwrap();
        assert!(
            a.verdict
                .starts_with("erratic where Linux is not: Xen-guest1"),
            "{}",
            a.verdict
        );
        let noise = [
            rerun("buffer A", 512.0, 2.0),
            rerun("buffer B", 1024.0, 1.9),
        ];
        let a = anomaly(&s, &noise).unwrap();
        assert!(a.verdict.starts_with("not reproducible"), "{}", a.verdict);
        assert!(anomaly(&s, &[]).unwrap().verdict.contains("not confirmed"));
        assert_eq!(a.spread["Xen-guest1"].1, 0.5);
    }

    #[test]
    fn every_figure_and_table_of_the_paper_has_a_status() {
        let mut rs = sweep(Setup::Linux, &[3.0, 5.0]);
        rs.push(rec(Setup::Linux, Experiment::Nics, 1.0, 0, 9.0));
        rs.push(rec(Setup::Guest0, Experiment::Nics, 1.0, 0, 3.0));
        rs.push(rec(Setup::Linux, Experiment::Web, 1000.0, 0, 990.0));
        rs.push(rec(Setup::Guest0, Experiment::Web, 1000.0, 0, 500.0));
        add_ratios(&mut rs);
        let summary = summarize(&rs);
        let r = Menon2005Report {
            suite: "menon2005",
            tsc_mhz: 1.0,
            runs: 1,
            seconds_per_flow: 1,
            wall_seconds: 1.0,
            anomaly: anomaly(&summary, &[]),
            records: rs,
            summary,
            profiles: Vec::new(),
            unavailable: vec![("Xen-domain0".into(), "not available in this build".into())],
            events_note: "instructions: not measurable here".into(),
            machine: crate::machine::modern_note(),
        };
        let f = figures(&r);
        let mut ids: Vec<&str> = f.iter().map(|f| f.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 16, "{ids:?}");
        let get = |id| f.iter().find(|f| f.id == id).unwrap();
        assert!(!get("Figure 3").ours.is_empty());
        assert!(get("Table 5").ours.is_empty(), "no profile, no samples");
        assert!(
            get("Figure 7")
                .table
                .contains("| 1000 req/s | 990 | 500 (0.51×) |"),
            "{}",
            get("Figure 7").table
        );
        let t = r.table();
        assert!(
            t.contains("### Figure 1:") && t.contains("### Table 8:"),
            "{t}"
        );
        assert!(
            t.contains("Xen-domain0: not available in this build."),
            "{t}"
        );
        assert!(r.svg().contains("<svg"));
        assert!(r.charts().iter().any(|(n, _)| n == "figure-3.svg"));
        // The seeds report reads it back from the JSON the suite writes.
        let json = serde_json::to_string(&r).unwrap();
        let back = harness::figures_of("menon2005", &json, figures).unwrap();
        assert_eq!(back.len(), f.len());
        assert!(back.iter().all(|f| f.seed == crate::seeds::Seed::Menon2005));
    }
}
