//! Suite `baseline`: throughput and CPU cost of moving a TCP or UDP stream
//! guest→wire (TX), wire→guest (RX) and guest→guest, for native networking,
//! the kernel's bridge, the minimal user-space forwarder (the ceiling of a
//! TAP-to-AF_PACKET path), user-mode networking (pasta, slirp4netns), and
//! splitnet in its seed-baseline, hv-copy and default (fast-path) modes,
//! all measured in the same run (Menon 2006 §6, Ram thesis §2.4: cycles per
//! 1514-byte packet by domain).

use crate::harness::{self, Args, Output, RunOptions};
use crate::netenv::{Latency, Workload};
use crate::plot;
use crate::stats::{median, tsc_per_us};
use crate::testbed::{self, Config, Direction, Env, CONFIGS, DIRECTIONS, ROOTLESS_CONFIGS};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use toolstack::cgroup::CgroupLayout;

mod rootless;

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct BaselineOptions {
    /// Quick: one run, 2 s per flow, TCP zero-copy only: under a minute.
    pub common: RunOptions,
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
    /// splitnet-default's event loops after each run's flows.
    #[serde(default)]
    pub loops: Vec<LoopCost>,
    /// Every configuration ran rootless, as the user, in a user namespace
    /// of the user's own (`--rootless`).
    #[serde(default)]
    pub rootless: bool,
    /// Rootless, and run by root for a user: the rootful reference root
    /// measured in the same invocation (native and splitnet-default).
    #[serde(default)]
    pub rootful: Vec<Summary>,
    /// Rootless: the targets of splitnet without root, by the numbers.
    #[serde(default)]
    pub targets: Vec<RootlessTarget>,
}

/// One target of splitnet without root: what it asks, what was measured,
/// and whether it holds (`None`: it could not be measured in this run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootlessTarget {
    pub what: String,
    pub measured: String,
    pub met: Option<bool>,
}

/// The least a rootless path may carry, as a fraction of its reference.
pub const ROOTLESS_FLOOR: f64 = 0.9;

/// System calls per frame a loop may make once batches form.
pub const LOOP_SYSCALLS: f64 = 10.0;

/// A configuration's event loops after a run's flows (`status --json`):
/// system calls per frame of the driver domain's bridge loop and of
/// guest1's loop, each under [`LOOP_SYSCALLS`] once batches form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopCost {
    pub config: Config,
    pub run: usize,
    pub driver_syscalls_per_frame: Option<f64>,
    pub guest1_syscalls_per_frame: Option<f64>,
    pub met: bool,
}

/// The loops' costs as `status --json` reports them now; none where it
/// does not say (the run goes on: this is a figure, not a gate).
fn loop_cost(opts: &RunOptions, config: Config, run: usize) -> LoopCost {
    let st = crate::status_json(&opts.exe, &opts.run_dir);
    let per = |l: &serde_json::Value| l["syscalls_per_frame"].as_f64();
    let guest1 = st["vifs"].as_array().and_then(|v| {
        v.iter()
            .find(|v| v["guest"] == "guest1")
            .and_then(|v| per(&v["guest_loop"]))
    });
    let (driver, guest1) = (per(&st["bridges"][0]["loop"]), guest1);
    LoopCost {
        config,
        run,
        driver_syscalls_per_frame: driver,
        guest1_syscalls_per_frame: guest1,
        met: [driver, guest1]
            .iter()
            .all(|v| v.is_some_and(|v| v < LOOP_SYSCALLS)),
    }
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
    } else if opts.common.quick {
        vec![Workload::TcpZerocopy]
    } else {
        vec![
            Workload::TcpZerocopy,
            Workload::TcpCopy,
            Workload::UdpSmall,
            Workload::UdpBulk,
            Workload::UdpGso,
            Workload::TcpRr,
        ]
    }
}

/// The configurations a run measures (native always), and the peers left
/// out because their tool is not installed.
fn chosen_configs(opts: &BaselineOptions) -> (Vec<Config>, Vec<String>) {
    let (mut configs, mut skipped) = (Vec::new(), Vec::new());
    let by_default = |c: Config| match opts.common.rootless {
        true => ROOTLESS_CONFIGS.contains(&c),
        false => c != Config::SplitnetPasta,
    };
    let wanted = |c: Config| match opts.configs.is_empty() {
        true => by_default(c),
        false => c == Config::Native || opts.configs.contains(&c),
    };
    for cfg in CONFIGS.into_iter().filter(|&c| wanted(c)) {
        match cfg.requires() {
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
            let m = testbed::measure(env, dir, w, opts.common.secs, ctx.tsc_hz, initiator)?;
            if let (Some(p), Some(d)) = (&m.profile, &opts.profile_dir) {
                let stem = format!("{}-{}-{}-run{}", cfg.name(), dir.name(), w.name(), run + 1);
                testbed::write_profile(d, &stem, p)?;
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
    let key = |r: &Record| (r.direction, r.workload, r.run);
    let over = |cfg: Config| {
        let is = |r: &Record| (r.config == cfg).then(|| key(r));
        harness::ratios(records, is, key, |r| Some(r.gbps))
    };
    let (natives, forwarders) = (over(Config::Native), over(Config::MinimalForwarder));
    for ((r, n), f) in records.iter_mut().zip(natives).zip(forwarders) {
        (r.ratio_to_native, r.ratio_to_forwarder) = (n, f);
    }
}

/// Medians over runs, one row per (configuration, workload, direction).
fn summarize(records: &[Record], configs: &[Config], workloads: &[Workload]) -> Vec<Summary> {
    let keys = configs.iter().flat_map(|&c| {
        workloads
            .iter()
            .flat_map(move |&w| DIRECTIONS.map(|d| (c, w, d)))
    });
    let groups = harness::groups(records, keys, |r| (r.config, r.workload, r.direction));
    let mut summary = Vec::new();
    for ((cfg, w, dir), rs) in groups {
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
    summary
}

/// Runs the suite.
pub fn run(opts: &BaselineOptions) -> Result<BaselineReport> {
    let tsc_hz = tsc_per_us() * 1e6;
    let layout = match opts.common.rootless {
        // No hierarchy is the user's: domains are measured by their processes.
        true => CgroupLayout::detect().writable().0,
        false => CgroupLayout::detect(),
    };
    let workloads = chosen_workloads(opts);
    let runs = opts.common.runs.max(1);
    let (configs, skipped) = chosen_configs(opts);
    let per_run: usize = configs
        .iter()
        .flat_map(|&c| workloads.iter().map(move |&w| directions(c, w).len()))
        .sum();
    let mut progress = Progress {
        on: opts.common.progress,
        step: 0,
        total: runs * per_run,
    };
    let ctx = RunCtx {
        opts,
        workloads: &workloads,
        tsc_hz,
    };
    let (mut records, mut loops) = (Vec::new(), Vec::new());
    harness::each_run(
        runs,
        &configs,
        |c| c.name().to_string(),
        |run, &cfg| {
            let env = testbed::bring_up(cfg, &opts.common, opts.spin_us, &layout)
                .context("bringing it up")?;
            let result = measure_config(&ctx, &env, cfg, run, &mut progress, &mut records);
            if result.is_ok() && cfg == Config::SplitnetDefault {
                loops.push(loop_cost(&opts.common, cfg, run));
            }
            testbed::tear_down(env, &opts.common, &layout);
            result.context("measuring it")
        },
    )?;
    if opts.common.progress {
        eprintln!();
    }
    add_ratios(&mut records);
    let summary = summarize(&records, &configs, &workloads);
    let mut report = BaselineReport {
        suite: "baseline",
        tsc_mhz: tsc_hz / 1e6,
        runs,
        seconds_per_flow: opts.common.secs,
        spin_us: opts.spin_us,
        records,
        summary,
        skipped,
        loops,
        rootless: opts.common.rootless,
        rootful: Vec::new(),
        targets: Vec::new(),
    };
    if report.rootless {
        report.targets = report.rootless_targets();
    }
    Ok(report)
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

    /// splitnet-default's loops against [`LOOP_SYSCALLS`], per run; `None`
    /// when it was not measured.
    pub fn loops_table(&self) -> Option<String> {
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        let rows: Vec<String> = self
            .loops
            .iter()
            .map(|l| {
                let met = if l.met { "yes" } else { "no" };
                format!(
                    "| {} | {} | {} | {} | < {LOOP_SYSCALLS} | {met} |\n",
                    l.config.name(),
                    l.run + 1,
                    f(l.driver_syscalls_per_frame),
                    f(l.guest1_syscalls_per_frame),
                )
            })
            .collect();
        (!rows.is_empty()).then(|| {
            "| config | run | driver loop syscalls/frame | guest1 loop syscalls/frame | target | met |\n\
             |---|---:|---:|---:|---|---|\n"
                .to_string()
                + &rows.concat()
        })
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

/// `splitnet bench baseline`: throughput and cycles per packet for each
/// configuration and workload, with the profile table when profiled.
pub struct BaselineSuite;

impl harness::Suite for BaselineSuite {
    fn name(&self) -> &'static str {
        "baseline"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let secs = a.seconds.unwrap_or(if a.quick { 2 } else { 5 });
        let common = RunOptions {
            rootless: a.rootless,
            ..RunOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs(), secs)
        };
        let r = run(&BaselineOptions {
            common,
            profile: a.profile,
            profile_dir: a.out.as_ref().map(|d| d.join("profiles")),
            configs: Args::parsed(&a.configs)?,
            workloads: Args::parsed(&a.workloads)?,
            spin_us: a.spin_us,
        })?;
        r.output()
    }
}

impl BaselineReport {
    /// The report as `splitnet bench` writes it: JSON, every table, the chart.
    pub fn output(&self) -> Result<Output> {
        let mut table = format!("{}\n{}", self.table(), self.cycles_table());
        if self.rootless {
            table = format!("{table}\n{}", self.rootless_table());
        }
        for t in [self.loops_table(), self.profile_table()]
            .into_iter()
            .flatten()
        {
            table = format!("{table}\n{t}");
        }
        Output::of(self, table, self.svg())
    }
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
}
