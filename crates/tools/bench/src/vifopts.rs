//! Xen's vif options on the data path (`splitnet bench vif-options`):
//! whether `rate=` holds a guest to its rate (Xen netback's credit
//! scheduler), and what jumbo frames (`mtu=9000` on the vif and the
//! uplink) do to UDP throughput per datagram size, against MTU 1500 in the
//! same run, beside a native veth pair at the same MTUs; and, as figures
//! with targets, that a vif without `rate=` beside a limited one keeps its
//! speed and that `up --link-rate` holds the wire link to its rate. The options' cost at full speed is a configuration of `bench
//! baseline` (`splitnet-vif-options`).

use crate::harness::{self, Args, Output, RunOptions};
use crate::netenv::{self, Flow, Workload};
use crate::stats::median;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::PathBuf;
use toolstack::host;

/// The rate `rate=` is checked at, in Mbit/s, and its target band.
pub const RATE_MBIT: f64 = 100.0;
const RATE_BAND: (f64, f64) = (90.0, 105.0);
/// guest2, whose vif has no `rate=`, beside the limited guest1: at least
/// this many times guest1's rate (netback's credit is per vif).
const NEIGHBOUR_FACTOR: f64 = 5.0;
/// `up --link-rate`'s rate in Mbit/s, and the band guest1 → wire TCP must
/// stay in: near the link's rate, far below the unshaped Gbit/s.
pub const LINK_MBIT: f64 = 20.0;
const LINK_BAND: (f64, f64) = (1.0, 30.0);
/// UDP datagram sizes measured at each MTU.
pub const DATAGRAMS: [usize; 4] = [1024, 1472, 4096, 8000];
/// The jumbo MTU.
pub const JUMBO: u16 = 9000;

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct VifOptionsOptions {
    /// The options every suite shares.
    pub common: RunOptions,
}

impl VifOptionsOptions {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> VifOptionsOptions {
        VifOptionsOptions {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 3 } else { 8 }),
        }
    }
}

/// UDP with one datagram size at one MTU: through splitnet (guest1 →
/// wire) or between the two ends of a native veth pair.
#[derive(Debug, Clone, Serialize)]
pub struct UdpPoint {
    /// `splitnet` or `native`.
    pub config: &'static str,
    pub mtu: u16,
    pub datagram: usize,
    /// Medians over the runs.
    pub mbit_s: f64,
    pub datagrams_per_s: f64,
    pub runs_mbit_s: Vec<f64>,
}

/// The suite's report.
#[derive(Debug, Clone, Serialize)]
pub struct VifOptionsReport {
    pub suite: &'static str,
    pub runs: usize,
    pub seconds_per_flow: u32,
    /// guest1 → wire TCP with `rate=100Mb/s`, each run's Mbit/s.
    pub rate_runs_mbit_s: Vec<f64>,
    pub rate_median_mbit_s: f64,
    pub rate_in_band: bool,
    /// guest2 → wire TCP beside it, without `rate=`, each run's Mbit/s.
    pub neighbour_runs_mbit_s: Vec<f64>,
    pub neighbour_median_mbit_s: f64,
    /// guest2 kept at least NEIGHBOUR_FACTOR times guest1's rate.
    pub neighbour_unlimited: bool,
    /// guest1 → wire TCP over `up --link-rate 20mbit`, each run's Mbit/s.
    pub link_runs_mbit_s: Vec<f64>,
    pub link_median_mbit_s: f64,
    pub link_in_band: bool,
    pub udp: Vec<UdpPoint>,
}

/// The default topology with guest1's vif given `spec` (an xl vifspec), and
/// the wire link's MTU set to `mtu`.
pub fn topology(spec: &str, mtu: u16) -> String {
    format!(
        "# bench vif-options: guest1's vif is \"{spec}\", the wire link MTU {mtu}.\n\
         name = \"vif-options\"\n\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         vif = [\"{spec}\"]\n\n\
         [[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\n\n\
         [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n\n\
         [[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = {mtu}\n"
    )
}

/// Brings splitnet up with `toml` (and `up`'s further `args`), runs `f`,
/// and always takes it down.
fn with_topology<T>(
    opts: &VifOptionsOptions,
    (toml, args): (&str, &[&str]),
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    std::fs::create_dir_all(&opts.common.run_dir)?;
    let path = opts.common.run_dir.join("bench-vif-options.toml");
    std::fs::write(&path, toml).with_context(|| format!("writing {}", path.display()))?;
    let p = path.to_string_lossy().into_owned();
    let up = [&["up", "--config", &p][..], args].concat();
    crate::splitnet(&opts.common.exe, &opts.common.run_dir, &up)?;
    let r = f();
    let _ = crate::splitnet(&opts.common.exe, &opts.common.run_dir, &["down"]);
    r
}

/// One flow of `workload` from `client_ns` to `server_ip` in `server_ns`,
/// with extra iperf3 client options.
fn flow(
    (server_ns, server_ip, client_ns): (&str, &str, &str),
    secs: u32,
    workload: Workload,
    extra: &[&str],
) -> Result<netenv::FlowResult> {
    let flow = Flow {
        server_ns,
        server_ip,
        server_bind: None,
        port: netenv::DEFAULT_PORT,
        client_ns,
        reverse: false,
        secs,
        workload,
        server_cgroup: None,
        client_cgroup: None,
        server_cpu: None,
        client_cpu: None,
    };
    netenv::run_with(&flow, extra)
}

/// `guest` → wire.
fn to_wire(guest: &str) -> (String, &'static str, String) {
    (
        host::netns_name("wire"),
        "10.77.0.254",
        host::netns_name(guest),
    )
}

/// UDP from `client_ns` to `server_ip` at each datagram size (iperf3's
/// later `-l` overrides the workload's 64).
fn udp_sweep(ends: (&str, &str, &str), secs: u32) -> Result<Vec<(usize, f64, f64)>> {
    let mut out = Vec::new();
    for size in DATAGRAMS {
        let l = size.to_string();
        let r = flow(ends, secs, Workload::UdpSmall, &["-l", &l])?;
        // What the receiver got: a datagram that lost a fragment is lost.
        let per_s = r.bytes / size as f64 / r.seconds.max(1e-9);
        out.push((size, r.gbps * 1e3, per_s));
    }
    Ok(out)
}

/// One run's UDP figures: Mbit/s and datagrams per second.
type Sample = (f64, f64);

/// UDP over a native veth pair whose ends have MTU `mtu`.
fn native_udp(mtu: u16, secs: u32) -> Result<Vec<(usize, f64, f64)>> {
    let n = netenv::Native::new()?;
    for ns in [&n.a, &n.b] {
        host::ip_in(ns, &["link", "set", "dev", "eth0", "mtu", &mtu.to_string()])?;
    }
    udp_sweep((&n.a, netenv::NATIVE_A, &n.b), secs)
}

/// One run's Mbit/s guest1 → wire under `rate=`, guest2 → wire beside
/// it without, and guest1 → wire over `up --link-rate`.
fn rates(opts: &VifOptionsOptions, run: usize) -> Result<(f64, f64, f64)> {
    opts.common
        .status("vif-options", &format!("run {} rate=100Mb/s", run + 1));
    let spec = format!("rate={RATE_MBIT}Mb/s");
    let (w, ip, g) = to_wire("guest1");
    let (_, _, g2) = to_wire("guest2");
    let (r, free) = with_topology(opts, (&topology(&spec, 1500), &[]), || {
        let r = flow((&w, ip, &g), opts.common.secs, Workload::TcpCopy, &[])?;
        let free = flow((&w, ip, &g2), opts.common.secs, Workload::TcpCopy, &[])?;
        Ok((r, free))
    })
    .context("the rate limit")?;
    let (rate, free) = (r.gbps * 1e3, free.gbps * 1e3);
    opts.common.status(
        "vif-options",
        &format!("run {} --link-rate {LINK_MBIT}mbit", run + 1),
    );
    let link = format!("{LINK_MBIT}mbit");
    let up = ["--link-rate", link.as_str()];
    let r = with_topology(opts, (&topology("mtu=1500", 1500), &up), || {
        flow((&w, ip, &g), opts.common.secs, Workload::TcpCopy, &[])
    })
    .context("the link rate")?;
    Ok((rate, free, r.gbps * 1e3))
}

/// Runs the suite.
pub fn run(opts: &VifOptionsOptions) -> Result<VifOptionsReport> {
    let (mut rate_runs, mut neighbour_runs, mut link_runs) = (Vec::new(), Vec::new(), Vec::new());
    // (configuration, MTU, datagram size, each run's (Mbit/s, datagrams/s)).
    let mut udp: Vec<(&'static str, u16, usize, Vec<Sample>)> = Vec::new();
    harness::runs(opts.common.runs, |run| {
        let (rate, free, link) = rates(opts, run)?;
        rate_runs.push(rate);
        neighbour_runs.push(free);
        link_runs.push(link);
        for mtu in [1500, JUMBO] {
            opts.common
                .status("vif-options", &format!("run {} UDP at MTU {mtu}", run + 1));
            let spec = format!("mtu={mtu}");
            let (w, ip, g) = to_wire("guest1");
            let points = with_topology(opts, (&topology(&spec, mtu), &[]), || {
                udp_sweep((&w, ip, &g), opts.common.secs)
            })
            .with_context(|| format!("UDP at MTU {mtu}"))?;
            let native = native_udp(mtu, opts.common.secs)
                .with_context(|| format!("native UDP at MTU {mtu}"))?;
            for (config, points) in [("splitnet", points), ("native", native)] {
                for (size, mbit, per_s) in points {
                    let key = |e: &&mut (&str, u16, usize, Vec<Sample>)| {
                        e.0 == config && e.1 == mtu && e.2 == size
                    };
                    match udp.iter_mut().find(key) {
                        Some(e) => e.3.push((mbit, per_s)),
                        None => udp.push((config, mtu, size, vec![(mbit, per_s)])),
                    }
                }
            }
        }
        Ok(())
    })?;
    if opts.common.progress {
        eprintln!();
    }
    let rate = median(&rate_runs);
    let (free, link) = (median(&neighbour_runs), median(&link_runs));
    Ok(VifOptionsReport {
        suite: "vif-options",
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        rate_in_band: (RATE_BAND.0..=RATE_BAND.1).contains(&rate),
        rate_median_mbit_s: rate,
        rate_runs_mbit_s: rate_runs,
        neighbour_unlimited: free > NEIGHBOUR_FACTOR * RATE_MBIT,
        neighbour_median_mbit_s: free,
        neighbour_runs_mbit_s: neighbour_runs,
        link_in_band: (LINK_BAND.0..=LINK_BAND.1).contains(&link),
        link_median_mbit_s: link,
        link_runs_mbit_s: link_runs,
        udp: udp
            .into_iter()
            .map(|(config, mtu, datagram, v)| {
                let mbit: Vec<f64> = v.iter().map(|p| p.0).collect();
                let per_s: Vec<f64> = v.iter().map(|p| p.1).collect();
                UdpPoint {
                    config,
                    mtu,
                    datagram,
                    mbit_s: median(&mbit),
                    datagrams_per_s: median(&per_s),
                    runs_mbit_s: mbit,
                }
            })
            .collect(),
    })
}

impl VifOptionsReport {
    /// Markdown tables: the rate limit against its band, then UDP per
    /// datagram size at both MTUs.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### rate=100Mb/s on guest1's vif (guest1 → wire TCP, {} runs of {} s)\n\n\
             | median Mbit/s | runs | target | met |\n|---:|---|---|---|\n| {:.1} | {} | {}–{} | {} |\n\n",
            self.runs,
            self.seconds_per_flow,
            self.rate_median_mbit_s,
            self.rate_runs_mbit_s
                .iter()
                .map(|v| format!("{v:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            RATE_BAND.0,
            RATE_BAND.1,
            if self.rate_in_band { "yes" } else { "no" },
        );
        s += &self.beside_table();
        s += "### UDP by datagram size at MTU 1500 and 9000: splitnet guest1 → wire and a native veth pair (Mbit/s received, medians)\n\n\
              | datagram (bytes) | native 1500 | splitnet 1500 | native 9000 | splitnet 9000 | splitnet 9000 / 1500 | splitnet / native at 9000 |\n\
              |---:|---:|---:|---:|---:|---:|---:|\n";
        for size in DATAGRAMS {
            let at = |config, mtu| {
                self.udp
                    .iter()
                    .find(|p| p.config == config && p.mtu == mtu && p.datagram == size)
                    .map_or(f64::NAN, |p| p.mbit_s)
            };
            let (n1, s1, n9, s9) = (
                at("native", 1500),
                at("splitnet", 1500),
                at("native", JUMBO),
                at("splitnet", JUMBO),
            );
            s += &format!(
                "| {size} | {n1:.0} | {s1:.0} | {n9:.0} | {s9:.0} | {} | {} |\n",
                ratio(s9, s1),
                ratio(s9, n9)
            );
        }
        s
    }

    /// guest2 without `rate=` beside the limited guest1, and guest1 over
    /// `up --link-rate`, each against its target.
    fn beside_table(&self) -> String {
        let runs = |v: &[f64]| v.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>();
        let met = |b: bool| if b { "yes" } else { "no" };
        format!(
            "### Beside it: guest2 without rate= (guest2 → wire TCP), and guest1 over `up --link-rate {LINK_MBIT}mbit`\n\n\
             | flow | median Mbit/s | runs | target | met |\n|---|---:|---|---|---|\n\
             | guest2, no rate= | {:.1} | {} | > {} | {} |\n\
             | guest1, link at {LINK_MBIT} Mbit/s | {:.1} | {} | {}–{} | {} |\n\n",
            self.neighbour_median_mbit_s,
            runs(&self.neighbour_runs_mbit_s).join(", "),
            NEIGHBOUR_FACTOR * RATE_MBIT,
            met(self.neighbour_unlimited),
            self.link_median_mbit_s,
            runs(&self.link_runs_mbit_s).join(", "),
            LINK_BAND.0,
            LINK_BAND.1,
            met(self.link_in_band),
        )
    }

    /// Bars of UDP Mbit/s per configuration, datagram size and MTU.
    pub fn svg(&self) -> String {
        let bars: Vec<crate::plot::Bar> = self
            .udp
            .iter()
            .map(|p| crate::plot::Bar {
                label: format!("{} {} B datagrams, MTU {}", p.config, p.datagram, p.mtu),
                value: p.mbit_s,
                range: None,
            })
            .collect();
        crate::plot::hbars(
            "UDP received by datagram size and MTU",
            "Mbit/s",
            "median of the runs",
            &bars,
        )
    }
}

/// `a / b` to two places, or "-" when `b` carried nothing.
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// `splitnet bench vif-options`: Xen's vif options on the data path.
pub struct VifOptionsSuite;

impl harness::Suite for VifOptionsSuite {
    fn name(&self) -> &'static str {
        "vif-options"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = VifOptionsOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 1);
        let r = run(&opts)?;
        Output::of(&r, r.table(), r.svg())
    }
}

#[cfg(test)]
mod tests {
    use toolstack::topology::Topology;

    #[test]
    fn the_topologies_are_valid_and_give_guest1_its_options() {
        for (spec, mtu) in [("rate=100Mb/s", 1500), ("mtu=9000", super::JUMBO)] {
            let t = Topology::parse(&super::topology(spec, mtu), "bench").unwrap();
            let v = t.vifs().into_iter().find(|v| v.guest == "guest1").unwrap();
            assert!(v.opts.rate.is_some() || v.opts.mtu == Some(9000), "{spec}");
        }
    }
}
