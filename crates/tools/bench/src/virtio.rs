//! virtio beside Xen's netif on one driver domain (`splitnet bench virtio`):
//! guest1 with `nic = "virtio"` (split virtqueues over vhost-user, the
//! guest's memory shared whole) against guest1 with netfront (Xen's rings,
//! grants) in the same run, TCP and UDP 64 B both ways, each as a ratio to a
//! native veth pair and to each other, with cycles per frame by domain; and
//! DPDK's testpmd as a VM frontend, sending 64-byte frames to the wire
//! through the vhost-user backend, against the netfront guest's UDP 64 B
//! rate, both counted where they arrive (the wire's interface).

use crate::baseline::{self, BaselineOptions, BaselineReport};
use crate::harness::{self, Args, Output, RunOptions};
use crate::hostile_vm::Attack;
use crate::isolation::{self, IsolationReport};
use crate::netenv::Workload;
use crate::stats::median;
use crate::testbed::{guest1_to_wire, vm_topology, Config, Direction, VM, VM_MAC};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::host;

/// The target of virtio against netfront, TCP, each direction.
pub const TCP_TARGET: f64 = 0.90;
/// How long testpmd may take to start sending.
const TESTPMD_START: Duration = Duration::from_secs(30);

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct VirtioOptions {
    /// The options every suite shares.
    pub common: RunOptions,
}

impl VirtioOptions {
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize) -> VirtioOptions {
        VirtioOptions {
            common: RunOptions::new(exe, run_dir, quick, runs, if quick { 3 } else { 5 }),
        }
    }
}

/// virtio over netfront for one direction and workload: each run's ratio
/// of guest1's throughput, and their median.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub direction: Direction,
    pub workload: Workload,
    pub runs: Vec<f64>,
    pub median: f64,
    /// Whether the target applies (TCP) and was met.
    pub target: Option<f64>,
    pub met: Option<bool>,
}

/// 64-byte frames per second arriving at the wire's interface.
#[derive(Debug, Clone, Serialize)]
pub struct FrameRate {
    /// `testpmd` (a vhost-user VM, txonly) or `netfront` (guest1, iperf3
    /// UDP 64 B).
    pub sender: &'static str,
    pub runs_pps: Vec<f64>,
    pub median_pps: f64,
}

/// The suite's report.
#[derive(Debug, Clone, Serialize)]
pub struct VirtioReport {
    pub suite: &'static str,
    pub runs: usize,
    pub seconds_per_flow: u32,
    pub baseline: BaselineReport,
    pub ratios: Vec<Ratio>,
    /// testpmd against the netfront guest; empty when testpmd is missing.
    pub frame_rates: Vec<FrameRate>,
    /// Why testpmd was not measured, if it was not.
    pub testpmd_skipped: Option<String>,
    /// guest1's TCP while a hostile VM attacks the same driver domain.
    pub hostile_vm: IsolationReport,
}

/// Runs the suite.
pub fn run(opts: &VirtioOptions) -> Result<VirtioReport> {
    opts.common
        .status("virtio", "netfront and virtio guests beside native");
    let b = baseline::run(&BaselineOptions {
        common: opts.common.clone(),
        profile: false,
        profile_dir: None,
        configs: vec![Config::SplitnetDefault, Config::SplitnetVirtio],
        workloads: vec![Workload::TcpZerocopy, Workload::UdpSmall],
        spin_us: None,
    })
    .context("the netfront and virtio guests")?;
    let ratios = ratios(&b);
    let (frame_rates, testpmd_skipped) = match testpmd_binary() {
        Some(bin) => (frame_rates(opts, &bin)?, None),
        None => (
            Vec::new(),
            Some("dpdk-testpmd is not installed (Debian package dpdk)".into()),
        ),
    };
    opts.common.status("virtio", "guest1 beside a hostile VM");
    let hostile_vm = isolation::run(
        &opts.common.exe,
        &opts.common.run_dir,
        opts.common.secs,
        &Attack::ALL,
    )
    .context("the hostile-VM phase")?;
    if opts.common.progress {
        eprintln!();
    }
    Ok(VirtioReport {
        hostile_vm,
        suite: "virtio",
        runs: opts.common.runs,
        seconds_per_flow: opts.common.secs,
        baseline: b,
        ratios,
        frame_rates,
        testpmd_skipped,
    })
}

/// virtio's throughput over netfront's, run by run, for guest1 → wire and
/// wire → guest1.
fn ratios(b: &BaselineReport) -> Vec<Ratio> {
    let mut out = Vec::new();
    for w in [Workload::TcpZerocopy, Workload::UdpSmall] {
        for d in [Direction::Tx, Direction::Rx] {
            let of = |cfg: Config, run: usize| {
                b.records
                    .iter()
                    .find(|r| {
                        r.config == cfg && r.workload == w && r.direction == d && r.run == run
                    })
                    .map(|r| r.gbps)
            };
            let runs: Vec<f64> = (0..b.runs)
                .filter_map(|run| {
                    let (v, n) = (
                        of(Config::SplitnetVirtio, run)?,
                        of(Config::SplitnetDefault, run)?,
                    );
                    (n > 0.0).then(|| v / n)
                })
                .collect();
            let m = median(&runs);
            let target = (w == Workload::TcpZerocopy).then_some(TCP_TARGET);
            out.push(Ratio {
                direction: d,
                workload: w,
                met: target.map(|t| m >= t),
                target,
                median: m,
                runs,
            });
        }
    }
    out
}

/// `dpdk-testpmd` on PATH.
pub(crate) fn testpmd_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("dpdk-testpmd"))
            .find(|f| f.is_file())
    })
}

/// The topology testpmd's VM joins: the default one with a `kind = "vm"`
/// domain on the same driver domain.
pub fn testpmd_topology(socket: &Path) -> String {
    vm_topology(
        "virtio-testpmd",
        "DPDK's testpmd as a vhost-user VM",
        socket,
    )
}

/// Per run: testpmd's 64-byte frames per second into the wire, then the
/// netfront guest's UDP 64 B datagrams, both read off the wire's counters.
fn frame_rates(opts: &VirtioOptions, bin: &Path) -> Result<Vec<FrameRate>> {
    std::fs::create_dir_all(&opts.common.run_dir)?;
    let socket = opts.common.run_dir.join(format!("bench-{VM}.sock"));
    let topo = opts.common.run_dir.join("bench-virtio-testpmd.toml");
    std::fs::write(&topo, testpmd_topology(&socket))?;
    let (mut pmd, mut nf) = (Vec::new(), Vec::new());
    harness::runs(opts.common.runs, |run| {
        opts.common.status(
            "virtio",
            &format!("run {} testpmd and netfront UDP 64 B", run + 1),
        );
        let t = topo.to_string_lossy().into_owned();
        crate::splitnet(
            &opts.common.exe,
            &opts.common.run_dir,
            &["up", "--config", &t],
        )?;
        let r = one_run(opts, bin, &socket);
        let _ = crate::splitnet(&opts.common.exe, &opts.common.run_dir, &["down"]);
        let (p, n) = r.context("testpmd and netfront")?;
        pmd.push(p);
        nf.push(n);
        Ok(())
    })?;
    Ok(vec![
        FrameRate {
            sender: "testpmd",
            median_pps: median(&pmd),
            runs_pps: pmd,
        },
        FrameRate {
            sender: "netfront",
            median_pps: median(&nf),
            runs_pps: nf,
        },
    ])
}

/// One run on a topology that is up: (testpmd's rate, netfront's rate).
fn one_run(opts: &VirtioOptions, bin: &Path, socket: &Path) -> Result<(f64, f64)> {
    let wire = host::netns_name("wire");
    let wire_mac = link_json(&wire)?["address"]
        .as_str()
        .context("the wire's MAC")?
        .to_string();
    let mut child = Testpmd::start(bin, socket, &wire_mac)?;
    let pmd = child.wait_sending(&wire).and_then(|_| {
        rx_rate(&wire, opts.common.secs, || {
            std::thread::sleep(Duration::from_secs(opts.common.secs.into()));
            Ok(())
        })
    });
    child.stop();
    let pmd = pmd?;
    let nf = rx_rate(&wire, opts.common.secs, || {
        guest1_to_wire(opts.common.secs, Workload::UdpSmall).map(drop)
    })?;
    Ok((pmd, nf))
}

/// Frames per second the wire's `eth0` received while `during` ran.
fn rx_rate(ns: &str, secs: u32, during: impl FnOnce() -> Result<()>) -> Result<f64> {
    let before = rx_packets(ns)?;
    let t = Instant::now();
    during()?;
    let n = rx_packets(ns)? - before;
    let elapsed = t.elapsed().as_secs_f64().max(f64::from(secs).min(1.0));
    Ok(n as f64 / elapsed)
}

/// `ip -s -j link show eth0` in namespace `ns`.
fn link_json(ns: &str) -> Result<serde_json::Value> {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "eth0"])
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip -n {ns} link show eth0: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v.get(0).cloned().context("ip printed no link")
}

/// Packets the interface `eth0` in `ns` received so far.
fn rx_packets(ns: &str) -> Result<u64> {
    link_json(ns)?["stats64"]["rx"]["packets"]
        .as_u64()
        .context("no rx packet counter")
}

/// testpmd as a virtio-user frontend of the VM's socket, sending 64-byte
/// UDP frames to the wire (`txonly`) until told to stop.
struct Testpmd {
    child: Child,
}

impl Testpmd {
    fn start(bin: &Path, socket: &Path, peer: &str) -> Result<Testpmd> {
        let vdev = format!(
            "net_virtio_user0,path={},mac={VM_MAC},queues=1",
            socket.display()
        );
        let child = Command::new(bin)
            .args(["--no-huge", "-m", "1024", "--lcores", "0@0,1@0", "--no-pci"])
            .arg(format!(
                "--file-prefix=splitnet-bench-{}",
                std::process::id()
            ))
            .args(["--vdev", &vdev, "--"])
            .args(["--forward-mode=txonly", "--txpkts=64"])
            .arg(format!("--eth-peer=0,{peer}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Testpmd { child })
    }

    /// Waits until the wire sees frames arrive (testpmd connected and
    /// sending), or testpmd exits, or the deadline passes.
    fn wait_sending(&mut self, wire: &str) -> Result<()> {
        let start = rx_packets(wire)?;
        let deadline = Instant::now() + TESTPMD_START;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait()? {
                bail!("testpmd exited before sending ({s})");
            }
            if rx_packets(wire)? > start + 1000 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("testpmd sent nothing to the wire in {TESTPMD_START:?}")
    }

    fn stop(&mut self) {
        stop_testpmd(&mut self.child, Duration::from_secs(10));
    }
}

/// Stops a non-interactive testpmd started with a piped standard input:
/// Enter ends it; it is killed if it lingers past `grace`.
pub(crate) fn stop_testpmd(child: &mut Child, grace: Duration) {
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(b"\n");
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl VirtioReport {
    /// Markdown: virtio over netfront per direction, the testpmd rate, and
    /// baseline's tables of the three configurations underneath.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### guest1 on virtio over guest1 on netfront, same driver domain ({} runs of {} s)\n\n\
             | direction | workload | virtio ÷ netfront (median) | runs | target | met |\n|---|---|---:|---|---:|---|\n",
            self.runs, self.seconds_per_flow
        );
        for r in &self.ratios {
            s += &format!(
                "| {} | {} | {:.2} | {} | {} | {} |\n",
                r.direction.name(),
                r.workload.name(),
                r.median,
                r.runs
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.target.map_or("-".into(), |t| format!("{t:.2}")),
                r.met.map_or("-", |m| if m { "yes" } else { "no" }),
            );
        }
        s += "\n### 64-byte frames per second into the wire: testpmd (a vhost-user VM, txonly) and the netfront guest (iperf3 UDP 64 B)\n\n";
        match &self.testpmd_skipped {
            Some(why) => s += &format!("Not measured: {why}.\n"),
            None => {
                s += "| sender | frames/s (median) | runs |\n|---|---:|---|\n";
                for f in &self.frame_rates {
                    s += &format!(
                        "| {} | {:.0} | {} |\n",
                        f.sender,
                        f.median_pps,
                        f.runs_pps
                            .iter()
                            .map(|v| format!("{v:.0}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                if let [p, n] = &self.frame_rates[..] {
                    if n.median_pps > 0.0 {
                        s += &format!(
                            "\ntestpmd ÷ netfront: {:.2} (target ≥ 1.00: {}).\n",
                            p.median_pps / n.median_pps,
                            if p.median_pps >= n.median_pps {
                                "met"
                            } else {
                                "not met"
                            }
                        );
                    }
                }
            }
        }
        s += "\n";
        s += &self.hostile_vm.table();
        format!(
            "{s}\n### The configurations\n\n{}\n{}",
            self.baseline.table(),
            self.baseline.cycles_table()
        )
    }

    /// Bars: virtio over netfront per direction and workload.
    pub fn svg(&self) -> String {
        let bars: Vec<crate::plot::Bar> = self
            .ratios
            .iter()
            .map(|r| crate::plot::Bar {
                label: format!("{} {}", r.workload.name(), r.direction.name()),
                value: r.median,
                range: None,
            })
            .collect();
        crate::plot::hbars(
            "guest1 on virtio ÷ guest1 on netfront (same driver domain)",
            "ratio",
            "median of the runs; TCP target 0.90",
            &bars,
        )
    }
}

/// `splitnet bench virtio`: a virtio guest against a netfront guest, and testpmd.
pub struct VirtioSuite;

impl harness::Suite for VirtioSuite {
    fn name(&self) -> &'static str {
        "virtio"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = VirtioOptions::new(a.exe.clone(), a.bench_dir(), a.quick, a.runs());
        a.seconds_into(&mut opts.common, 2);
        let r = run(&opts)?;
        Output::of(&r, r.table(), r.svg())
    }
}

#[cfg(test)]
mod tests {
    use toolstack::topology::Topology;

    #[test]
    fn the_virtio_topologies_parse() {
        Topology::parse(&crate::testbed::virtio_topology(), "bench").unwrap();
        Topology::parse(
            &super::testpmd_topology(std::path::Path::new("/tmp/vm1.sock")),
            "bench",
        )
        .unwrap();
    }
}
