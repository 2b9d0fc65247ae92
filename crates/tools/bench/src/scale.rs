//! Suite `scale`: one driver domain serving 2 to 256 guests. For each
//! guest count it brings the topology up (`many_guests_topology`) and
//! measures what the count costs: time to come up, memory per guest (PSS),
//! whether every guest reaches the wire, guest1's request-response latency
//! and TCP throughput while every other guest is idle, and the driver
//! domain's CPU and wake-ups while all guests are idle. Each figure is also
//! given against the 2-guest case of the same run. A doorbell flood (one
//! guest ringing 10^6 times a second) is measured beside it, in process
//! (`flood.rs`).

use crate::flood::{self, FloodResult};
use crate::harness::{self, Args, Output, RunOptions};
use crate::netenv::{self, Workload};
use crate::plot::{self, Bar};
use crate::stats::median;
use crate::testbed::{guest1_to_wire, many_guests_topology, proc_cpu};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::cgroup::{Cgroup, CgroupLayout};
use toolstack::host;

/// The wire host's address in the many-guests topology.
const WIRE: &str = "10.77.0.254";
/// Pings in flight at once (each is an `ip netns exec ping` process).
const PING_PARALLEL: usize = 32;
/// The longest wait for the guests to fall quiet before the idle window.
const SETTLE_MAX: Duration = Duration::from_secs(30);
/// Attempts per guest before it counts as not reaching the wire.
const PING_TRIES: usize = 3;

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// The options every suite shares.
    pub common: RunOptions,
    /// Guest counts measured; the first is the reference of every ratio.
    pub guests: Vec<usize>,
    /// Seconds the driver domain's CPU is watched with every guest idle.
    pub idle_secs: f64,
    /// Seconds of each half (quiet, flooded) of the doorbell flood.
    pub flood_secs: f64,
}

impl ScaleOptions {
    /// 2, 32, 128 and 256 guests, or 2 and 32 with `quick`.
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> ScaleOptions {
        ScaleOptions {
            guests: if quick {
                vec![2, 32]
            } else {
                vec![2, 32, 128, 256]
            },
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 2 } else { 5 }),
            idle_secs: if quick { 2.0 } else { 4.0 },
            flood_secs: if quick { 1.0 } else { 2.0 },
        }
    }
}

/// What one bring-up measured, or the medians of several.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Figures {
    /// `splitnet up --config` from start to return (every vif connected).
    pub up_seconds: f64,
    /// PSS of hv and of every domain's processes, summed, ÷ guests, MiB.
    pub pss_mib_per_guest: f64,
    /// guest1 → wire, sockperf ping-pong over TCP, one-way µs.
    pub rr_p50_us: f64,
    pub rr_p99_us: f64,
    /// guest1 → wire, iperf3 TCP zero-copy.
    pub tcp_gbps: f64,
    /// The driver domain's CPU while every guest is idle, ms per second.
    pub drv_idle_cpu_ms_per_s: f64,
    /// Its context switches (its wake-ups) per second meanwhile.
    pub drv_idle_wakeups_per_s: f64,
    /// hv's CPU meanwhile, ms per second (USER_HZ resolution).
    pub hv_idle_cpu_ms_per_s: f64,
    /// Frames the guests' kernels sent and received meanwhile, per second
    /// (their own chatter: neighbour discovery, ARP), summed over guests.
    pub idle_guest_frames_per_s: f64,
}

impl Figures {
    fn to_array(self) -> [f64; 9] {
        [
            self.up_seconds,
            self.pss_mib_per_guest,
            self.rr_p50_us,
            self.rr_p99_us,
            self.tcp_gbps,
            self.drv_idle_cpu_ms_per_s,
            self.drv_idle_wakeups_per_s,
            self.hv_idle_cpu_ms_per_s,
            self.idle_guest_frames_per_s,
        ]
    }

    fn from_array(a: [f64; 9]) -> Figures {
        let [up_seconds, pss_mib_per_guest, rr_p50_us, rr_p99_us, tcp_gbps, drv_idle_cpu_ms_per_s, drv_idle_wakeups_per_s, hv_idle_cpu_ms_per_s, idle_guest_frames_per_s] =
            a;
        Figures {
            up_seconds,
            pss_mib_per_guest,
            rr_p50_us,
            rr_p99_us,
            tcp_gbps,
            drv_idle_cpu_ms_per_s,
            drv_idle_wakeups_per_s,
            hv_idle_cpu_ms_per_s,
            idle_guest_frames_per_s,
        }
    }

    /// The median of each figure over `all`.
    fn median(all: &[Figures]) -> Figures {
        let rows: Vec<[f64; 9]> = all.iter().map(|f| f.to_array()).collect();
        Figures::from_array(std::array::from_fn(|i| {
            median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>())
        }))
    }
}

/// One guest count in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub guests: usize,
    pub run: usize,
    #[serde(flatten)]
    pub figures: Figures,
    /// PSS of hv and of every domain's processes, summed, in MiB.
    pub pss_mib_total: f64,
    /// Guests whose ping reached the wire (of `guests`).
    pub pinged: usize,
    /// The first few that did not.
    pub ping_failures: Vec<String>,
    /// Every guest's ping, in parallel (bounded), start to last answer.
    pub ping_all_seconds: f64,
}

/// Medians over runs of one guest count, and their ratios to the first
/// guest count's medians.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub guests: usize,
    pub runs: usize,
    #[serde(flatten)]
    pub median: Figures,
    pub up_seconds_max: f64,
    /// The fewest guests that reached the wire in any run.
    pub pinged_min: usize,
    pub p50_ratio: f64,
    pub p99_ratio: f64,
    pub tcp_ratio: f64,
}

/// The suite's results.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub suite: &'static str,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub idle_seconds: f64,
    pub records: Vec<Record>,
    pub summary: Vec<Summary>,
    /// The doorbell flood, one per run.
    pub flood: Vec<FloodResult>,
}

/// The domains of the many-guests topology with `n` guests.
fn domain_names(n: usize) -> impl Iterator<Item = String> {
    std::iter::once("drv".to_string()).chain((1..=n).map(|g| format!("guest{g}")))
}

/// Proportional set size of process `pid` in KiB (`smaps_rollup`).
pub fn pss_kib(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    pss_of(&s)
}

fn pss_of(smaps_rollup: &str) -> Option<u64> {
    smaps_rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Context switches of process `pid` so far, voluntary and not (each
/// voluntary one is a sleep, so a later wake-up).
fn ctxt_switches(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

fn hv_pid(run_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(run_dir.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// PSS of hv and every process of every domain, MiB.
fn memory_mib(layout: &CgroupLayout, n: usize, hv: Option<i32>) -> f64 {
    let mut pids: Vec<i32> = domain_names(n)
        .filter_map(|d| Cgroup::open(layout, &d))
        .flat_map(|cg| cg.pids())
        .collect();
    pids.extend(hv);
    pids.sort_unstable();
    pids.dedup();
    pids.iter().filter_map(|&p| pss_kib(p)).sum::<u64>() as f64 / 1024.0
}

/// Pings the wire from every guest, `PING_PARALLEL` at a time, each guest
/// up to `PING_TRIES` times. Returns the guests that never got an answer.
fn ping_all(n: usize) -> Result<Vec<String>> {
    let mut todo: Vec<String> = (1..=n).map(|g| format!("guest{g}")).collect();
    for _ in 0..PING_TRIES {
        let mut failed = Vec::new();
        for chunk in todo.chunks(PING_PARALLEL) {
            let children = chunk
                .iter()
                .map(|g| {
                    Command::new("ip")
                        .args(["netns", "exec", &host::netns_name(g)])
                        .args(["ping", "-c", "1", "-W", "5", WIRE])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .map(|c| (g, c))
                        .context("starting ping (iputils-ping)")
                })
                .collect::<Result<Vec<_>>>()?;
            for (g, mut c) in children {
                if !c.wait()?.success() {
                    failed.push(g.clone());
                }
            }
        }
        todo = failed;
        if todo.is_empty() {
            break;
        }
    }
    Ok(todo)
}

/// guest1 → wire: one sockperf ping-pong and one iperf3 TCP stream.
fn guest1_flows(secs: u32) -> Result<(netenv::Latency, f64)> {
    let rr = guest1_to_wire(secs, Workload::TcpRr)?;
    let latency = rr.latency.context("sockperf gave no latency")?;
    let tcp = guest1_to_wire(secs, Workload::TcpZerocopy)?;
    Ok((latency, tcp.gbps))
}

/// Packets guest `g`'s `eth0` has sent and received so far.
fn guest_frames(g: &str) -> u64 {
    let ns = host::netns_name(g);
    let Ok(o) = Command::new("ip")
        .args(["-n", &ns, "-s", "-j", "link", "show", "dev", "eth0"])
        .output()
    else {
        return 0;
    };
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let st = &v[0]["stats64"];
    ["rx", "tx"]
        .iter()
        .filter_map(|d| st[d]["packets"].as_u64())
        .sum()
}

fn all_guest_frames(n: usize) -> u64 {
    (1..=n).map(|g| guest_frames(&format!("guest{g}"))).sum()
}

/// What the driver domain (and hv) cost per second over `secs` with every
/// guest idle: CPU ms, wake-ups, hv's CPU ms; and the guests' own frames.
fn idle_cost(layout: &CgroupLayout, hv: Option<i32>, n: usize, secs: f64) -> Result<[f64; 4]> {
    let drv = Cgroup::open(layout, "drv").context("the driver domain has no cgroup")?;
    let switches = |cg: &Cgroup| cg.pids().into_iter().map(ctxt_switches).sum::<u64>();
    let hv_cpu = || hv.and_then(proc_cpu).unwrap_or_default();
    // Idle means no frame: wait out the guests' start-up chatter (IPv6
    // duplicate address detection, router solicitations, MLD reports).
    let quiet_from = Instant::now();
    let mut f0 = all_guest_frames(n);
    while quiet_from.elapsed() < SETTLE_MAX {
        std::thread::sleep(Duration::from_secs(1));
        let f = all_guest_frames(n);
        if f == f0 {
            break;
        }
        f0 = f;
    }
    let (c0, s0, h0, t0) = (drv.cpu_usage(), switches(&drv), hv_cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (c1, s1, h1) = (drv.cpu_usage(), switches(&drv), hv_cpu());
    let dt = t0.elapsed().as_secs_f64();
    let frames = all_guest_frames(n).saturating_sub(f0);
    let (Some(c0), Some(c1)) = (c0, c1) else {
        bail!("the driver domain's cgroup reports no CPU usage");
    };
    Ok([
        c1.saturating_sub(c0).as_secs_f64() * 1e3 / dt,
        s1.saturating_sub(s0) as f64 / dt,
        h1.saturating_sub(h0).as_secs_f64() * 1e3 / dt,
        frames as f64 / dt,
    ])
}

fn splitnet(opts: &ScaleOptions, args: &[&str]) -> Result<String> {
    crate::splitnet(&opts.common.exe, &opts.common.run_dir, args)
}

/// Brings `n` guests up, measures them, and takes them down again.
fn measure(opts: &ScaleOptions, layout: &CgroupLayout, n: usize, run: usize) -> Result<Record> {
    std::fs::create_dir_all(&opts.common.run_dir)?;
    let topo = opts.common.run_dir.join(format!("bench-scale-{n}.toml"));
    std::fs::write(&topo, many_guests_topology(n))
        .with_context(|| format!("writing {}", topo.display()))?;
    let t0 = Instant::now();
    splitnet(opts, &["up", "--config", &topo.to_string_lossy()])?;
    let up_seconds = t0.elapsed().as_secs_f64();
    let r = measure_up(opts, layout, n, run, up_seconds);
    let down = splitnet(opts, &["down"]);
    let r = r?;
    down?;
    Ok(r)
}

fn measure_up(
    opts: &ScaleOptions,
    layout: &CgroupLayout,
    n: usize,
    run: usize,
    up_seconds: f64,
) -> Result<Record> {
    let hv = hv_pid(&opts.common.run_dir);
    let pss = memory_mib(layout, n, hv);
    let t = Instant::now();
    let failed = ping_all(n)?;
    let ping_all_seconds = t.elapsed().as_secs_f64();
    let (lat, tcp_gbps) = guest1_flows(opts.common.secs)?;
    let [drv_cpu, drv_wakeups, hv_cpu, chatter] = idle_cost(layout, hv, n, opts.idle_secs)?;
    Ok(Record {
        guests: n,
        run,
        figures: Figures {
            up_seconds,
            pss_mib_per_guest: pss / n as f64,
            rr_p50_us: lat.p50_us,
            rr_p99_us: lat.p99_us,
            tcp_gbps,
            drv_idle_cpu_ms_per_s: drv_cpu,
            drv_idle_wakeups_per_s: drv_wakeups,
            hv_idle_cpu_ms_per_s: hv_cpu,
            idle_guest_frames_per_s: chatter,
        },
        pss_mib_total: pss,
        pinged: n - failed.len(),
        ping_failures: failed.into_iter().take(8).collect(),
        ping_all_seconds,
    })
}

fn progress(opts: &ScaleOptions, step: usize, total: usize, what: &str) {
    if opts.common.progress {
        let done = step * 30 / total.max(1);
        eprint!(
            "\r[{}{}] {step}/{total} {what}                    ",
            "#".repeat(done),
            ".".repeat(30 - done)
        );
        let _ = std::io::stderr().flush();
    }
}

/// Runs the suite.
pub fn run(opts: &ScaleOptions) -> Result<ScaleReport> {
    let layout = CgroupLayout::detect();
    let total = opts.common.runs * (opts.guests.len() + 1);
    let (mut step, mut records, mut floods) = (0, Vec::new(), Vec::new());
    harness::runs(opts.common.runs, |run| {
        for &n in &opts.guests {
            progress(opts, step, total, &format!("run {} {n} guests", run + 1));
            let r =
                measure(opts, &layout, n, run).with_context(|| format!("measuring {n} guests"))?;
            records.push(r);
            step += 1;
        }
        progress(
            opts,
            step,
            total,
            &format!("run {} doorbell flood", run + 1),
        );
        floods.push(flood::run(opts.flood_secs).context("the doorbell flood")?);
        step += 1;
        Ok(())
    })?;
    progress(opts, step, total, "done");
    if opts.common.progress {
        eprintln!();
    }
    Ok(ScaleReport {
        suite: "scale",
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        idle_seconds: opts.idle_secs,
        summary: summarize(&opts.guests, &records),
        records,
        flood: floods,
    })
}

/// Medians per guest count; ratios against the first count's medians.
fn summarize(guests: &[usize], records: &[Record]) -> Vec<Summary> {
    let mut out: Vec<Summary> = Vec::new();
    for (n, rs) in harness::groups(records, guests.iter().copied(), |r| r.guests) {
        let figures: Vec<Figures> = rs.iter().map(|r| r.figures).collect();
        let m = Figures::median(&figures);
        let base = out.first().map_or(m, |b| b.median);
        out.push(Summary {
            guests: n,
            runs: rs.len(),
            median: m,
            up_seconds_max: figures.iter().map(|f| f.up_seconds).fold(0.0, f64::max),
            pinged_min: rs.iter().map(|r| r.pinged).min().unwrap_or(0),
            p50_ratio: m.rr_p50_us / base.rr_p50_us,
            p99_ratio: m.rr_p99_us / base.rr_p99_us,
            tcp_ratio: m.tcp_gbps / base.tcp_gbps,
        });
    }
    out
}

impl ScaleReport {
    /// A Markdown table of the medians, the flood, and the suite's targets.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| guests | up s (max) | MiB/guest | pinged wire | guest1 p50 µs (min–max) | ×2g | p99 µs | ×2g | TCP Gbit/s | ×2g | drv idle ms CPU/s | drv idle wake-ups/s | hv idle ms CPU/s | guests' own frames/s |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for m in &self.summary {
            let p50: Vec<f64> = self
                .records
                .iter()
                .filter(|r| r.guests == m.guests)
                .map(|r| r.figures.rr_p50_us)
                .collect();
            let lo = p50.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = p50.iter().copied().fold(0.0, f64::max);
            s += &format!(
                "| {} | {:.2} ({:.2}) | {:.2} | {}/{} | {:.1} ({lo:.1}–{hi:.1}) | {:.2} | {:.1} | {:.2} | {:.2} | {:.3} | {:.2} | {:.1} | {:.1} | {:.1} |\n",
                m.guests,
                m.median.up_seconds,
                m.up_seconds_max,
                m.median.pss_mib_per_guest,
                m.pinged_min,
                m.guests,
                m.median.rr_p50_us,
                m.p50_ratio,
                m.median.rr_p99_us,
                m.p99_ratio,
                m.median.tcp_gbps,
                m.tcp_ratio,
                m.median.drv_idle_cpu_ms_per_s,
                m.median.drv_idle_wakeups_per_s,
                m.median.hv_idle_cpu_ms_per_s,
                m.median.idle_guest_frames_per_s
            );
        }
        s += &format!(
            "\n{} run(s); medians; ×2g: against the {}-guest case of the same suite. guest1 → wire: sockperf ping-pong \
             over TCP (one-way latency) and iperf3 TCP zero-copy, {} s each, every other guest idle. Memory: PSS of hv \
             and every domain process (smaps_rollup) ÷ guests. Idle: {} s once the guests' frame counters stood still for 1 s (at most 30 s), the driver domain's cgroup \
             CPU and its context switches, and the frames the guests' kernels sent or received meanwhile (each one \
             crosses the driver domain).\n",
            self.runs,
            self.summary.first().map_or(0, |m| m.guests),
            self.seconds_per_flow,
            self.idle_seconds
        );
        s += &flood::table(&self.flood);
        s += &self.targets();
        s
    }

    /// The suite's targets, each with what was measured.
    fn targets(&self) -> String {
        let Some(base) = self.summary.first() else {
            return String::new();
        };
        let mut s = String::from("\n| target | measured | met |\n|---|---|---|\n");
        let mut row = |t: String, m: String, ok: bool| {
            s += &format!("| {t} | {m} | {} |\n", if ok { "yes" } else { "no" });
        };
        for m in self.summary.iter().skip(1) {
            let g = m.guests;
            if g >= 256 {
                row(
                    format!("{g} guests up in under 20 s"),
                    format!("{:.2} s (max {:.2})", m.median.up_seconds, m.up_seconds_max),
                    m.up_seconds_max < 20.0,
                );
            }
            row(
                format!("every one of {g} guests pings the wire"),
                format!("{} in the worst run", m.pinged_min),
                m.pinged_min == g,
            );
            row(
                format!("{g} guests: idle ones cost the driver domain no CPU (at most 1 ms/s more than {})", base.guests),
                format!(
                    "{:.2} ms/s ({:.0} wake-ups/s, guests' own frames {:.0}/s) against {:.2} with {}",
                    m.median.drv_idle_cpu_ms_per_s,
                    m.median.drv_idle_wakeups_per_s,
                    m.median.idle_guest_frames_per_s,
                    base.median.drv_idle_cpu_ms_per_s,
                    base.guests
                ),
                m.median.drv_idle_cpu_ms_per_s <= base.median.drv_idle_cpu_ms_per_s + 1.0,
            );
            row(
                format!("{g} guests: guest1's p50 within 10%"),
                format!("{:+.0}%", (m.p50_ratio - 1.0) * 100.0),
                m.p50_ratio <= 1.10,
            );
            row(
                format!("{g} guests: guest1's TCP within 5%"),
                format!("{:+.0}%", (m.tcp_ratio - 1.0) * 100.0),
                m.tcp_ratio >= 0.95,
            );
        }
        if let Some(r) = flood::median_ratio(&self.flood) {
            row(
                "a doorbell flood: the other pair's throughput within 20% of quiet".into(),
                format!("{:.2} of quiet (median)", r),
                r >= 0.80,
            );
        }
        s
    }

    /// guest1's p50 latency against the number of guests.
    pub fn svg(&self) -> String {
        let bars = |f: fn(&Record) -> f64| -> Vec<Bar> {
            self.summary
                .iter()
                .map(|m| {
                    let v: Vec<f64> = self
                        .records
                        .iter()
                        .filter(|r| r.guests == m.guests)
                        .map(f)
                        .collect();
                    Bar {
                        label: format!("{} guests", m.guests),
                        value: median(&v),
                        range: Some((
                            v.iter().copied().fold(f64::INFINITY, f64::min),
                            v.iter().copied().fold(0.0, f64::max),
                        )),
                    }
                })
                .collect()
        };
        plot::hbars(
            "splitnet bench scale: guest1 → wire p50 (sockperf, TCP), others idle",
            "µs",
            "bars: median; whiskers: min–max over runs",
            &bars(|r| r.figures.rr_p50_us),
        )
    }

    /// The other charts: up time, memory per guest, idle driver CPU.
    pub fn charts(&self) -> Vec<(String, String)> {
        let by = |f: fn(&Summary) -> f64| -> Vec<Bar> {
            self.summary
                .iter()
                .map(|m| Bar {
                    label: format!("{} guests", m.guests),
                    value: f(m),
                    range: None,
                })
                .collect()
        };
        vec![
            (
                "up-time.svg".into(),
                plot::hbars(
                    "splitnet up: seconds to connect every vif",
                    "s",
                    "median over runs",
                    &by(|m| m.median.up_seconds),
                ),
            ),
            (
                "memory.svg".into(),
                plot::hbars(
                    "PSS per guest (hv and every domain process ÷ guests)",
                    "MiB",
                    "median over runs",
                    &by(|m| m.median.pss_mib_per_guest),
                ),
            ),
            (
                "idle-cpu.svg".into(),
                plot::hbars(
                    "driver domain CPU with every guest idle",
                    "ms/s",
                    "median over runs",
                    &by(|m| m.median.drv_idle_cpu_ms_per_s),
                ),
            ),
        ]
    }
}

/// `splitnet bench scale`: one driver domain serving many guests.
pub struct ScaleSuite;

impl harness::Suite for ScaleSuite {
    fn name(&self) -> &'static str {
        "scale"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = ScaleOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        let r = run(&opts)?;
        Ok(Output::of(&r, r.table(), r.svg())?.with_charts(r.charts()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(guests: usize, p50: f64, tcp: f64) -> Record {
        Record {
            guests,
            run: 0,
            figures: Figures {
                up_seconds: 1.0,
                pss_mib_per_guest: 10.0 / guests as f64,
                rr_p50_us: p50,
                rr_p99_us: 2.0 * p50,
                tcp_gbps: tcp,
                drv_idle_wakeups_per_s: 5.0,
                ..Figures::default()
            },
            pss_mib_total: 10.0,
            pinged: guests,
            ping_failures: Vec::new(),
            ping_all_seconds: 0.1,
        }
    }

    #[test]
    fn pss_is_read_from_smaps_rollup() {
        let s = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  4096 kB\nPss:  1234 kB\nPss_Anon: 1000 kB\n";
        assert_eq!(pss_of(s), Some(1234));
        assert_eq!(pss_of("Rss: 1 kB\n"), None);
        assert!(pss_kib(std::process::id() as i32).is_some_and(|k| k > 0));
    }

    #[test]
    fn ratios_are_against_the_first_guest_count() {
        let rs = vec![
            rec(2, 40.0, 10.0),
            rec(2, 60.0, 10.0),
            rec(32, 55.0, 9.0),
            rec(32, 55.0, 9.0),
        ];
        let s = summarize(&[2, 32], &rs);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].median.rr_p50_us, 50.0);
        assert_eq!(s[0].p50_ratio, 1.0);
        assert!((s[1].p50_ratio - 1.1).abs() < 1e-9);
        assert!((s[1].tcp_ratio - 0.9).abs() < 1e-9);
        let report = ScaleReport {
            suite: "scale",
            runs: 2,
            seconds_per_flow: 2,
            idle_seconds: 2.0,
            records: rs,
            summary: s,
            flood: Vec::new(),
        };
        let t = report.table();
        assert!(
            t.contains("| 32 guests: guest1's TCP within 5% | -10% | no |"),
            "{t}"
        );
        assert!(report.svg().contains("32 guests"));
        assert_eq!(report.charts().len(), 3);
    }
}
