//! `splitnet bench cni`: containers joining through the CNI plugin, as a
//! runtime calls it (the `splitnet-cni` binary beside `splitnet`, with the
//! reference `host-local` IPAM), on one topology of a driver domain, a
//! topology guest and the wire host. Five experiments:
//!
//! - **latency**: sequential ADDs, each timed from the call until the
//!   plugin returned (its interface up with its address): p50 and p99;
//! - **parallel**: simultaneous ADDs, until the last one returned;
//! - **throughput**: TCP from a container and from the topology guest to
//!   the wire host, alternating, as a ratio in each run;
//! - **leaks**: ADD/DEL cycles; hv's resources, IPAM leases and network
//!   namespaces before and after;
//! - **fault**: a container's HTTP download through a driver-domain SIGKILL,
//!   checked by SHA-256.

use crate::faults::{self, Resources, Up};
use crate::harness::{self, Args, Output};
use crate::netenv::{self, Flow, Workload};
use crate::stats::median;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The topology: a driver domain with room for 64 vifs, guest1, the wire.
const TOPOLOGY: &str = "name = \"cni-bench\"\n\
[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 32848\n\
[[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
[wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n";
const WIRE: &str = "10.77.0.254";

/// What to run.
pub struct CniOptions {
    pub exe: PathBuf,
    pub run_dir: PathBuf,
    pub sequential: usize,
    pub parallel: usize,
    pub cycles: usize,
    pub runs: usize,
    pub secs: u32,
}

impl CniOptions {
    /// The full figures (50 sequential, 20 parallel, 1,000 cycles, 3
    /// runs of 5 s), or 100 cycles and 1 run of 2 s with `quick`.
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool) -> CniOptions {
        CniOptions {
            exe,
            run_dir,
            sequential: 50,
            parallel: 20,
            cycles: if quick { 100 } else { 1000 },
            runs: if quick { 1 } else { 3 },
            secs: if quick { 2 } else { 5 },
        }
    }
}

/// The plugin as a runtime runs it.
pub(crate) struct Plugin {
    bin: PathBuf,
    cni_path: String,
    conf: String,
}

impl Plugin {
    fn new(opts: &CniOptions) -> Result<Plugin> {
        Plugin::at(&opts.exe, &opts.run_dir)
    }

    /// The plugin beside `exe`, for the instance in `run_dir` (driver
    /// domain `drv`, addresses from 10.77.0.100 to .250).
    pub(crate) fn at(exe: &Path, run_dir: &Path) -> Result<Plugin> {
        let bin = exe.with_file_name("splitnet-cni");
        if !bin.is_file() {
            bail!(
                "{} is not built (cargo build builds it beside splitnet)",
                bin.display()
            );
        }
        let dirs = ["/usr/lib/cni", "/opt/cni/bin"];
        if !dirs
            .iter()
            .any(|d| Path::new(d).join("host-local").is_file())
        {
            bail!("the reference host-local IPAM plugin is not installed (containernetworking-plugins)");
        }
        let conf = serde_json::json!({
            "cniVersion": "1.1.0", "name": "bench", "type": "splitnet",
            "driver": "drv", "runDir": run_dir,
            "ipam": {"type": "host-local",
                     "ranges": [[{"subnet": "10.77.0.0/24", "rangeStart": "10.77.0.100",
                                  "rangeEnd": "10.77.0.250", "gateway": WIRE}]],
                     "dataDir": run_dir.join("cni-ipam")},
        });
        Ok(Plugin {
            bin,
            cni_path: dirs.join(":"),
            conf: conf.to_string(),
        })
    }

    /// Starts `command` for container `id` in namespace `netns`.
    fn spawn(&self, command: &str, id: &str, netns: &str) -> Result<Child> {
        let mut c = Command::new(&self.bin)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", format!("/run/netns/{netns}"))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", &self.cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", self.bin.display()))?;
        c.stdin
            .take()
            .context("stdin")?
            .write_all(self.conf.as_bytes())?;
        Ok(c)
    }

    /// Waits for a started call; fails with its error result.
    fn finish(child: Child, what: &str) -> Result<()> {
        let o = child.wait_with_output()?;
        if !o.status.success() {
            bail!("{what}: {}", String::from_utf8_lossy(&o.stdout).trim());
        }
        Ok(())
    }

    /// Runs `command` for `id` in `netns`; how long it took.
    pub(crate) fn call(&self, command: &str, id: &str, netns: &str) -> Result<Duration> {
        let t0 = Instant::now();
        let c = self.spawn(command, id, netns)?;
        Self::finish(c, &format!("{command} {id}"))?;
        Ok(t0.elapsed())
    }
}

/// A namespace as a runtime makes one; deleted when dropped.
pub(crate) struct Netns(pub(crate) String);

impl Netns {
    pub(crate) fn new(name: String) -> Result<Netns> {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let st = Command::new("ip").args(["netns", "add", &name]).status()?;
        if !st.success() {
            bail!("ip netns add {name} failed");
        }
        Ok(Netns(name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn namespaces(prefix: &str, n: usize) -> Result<Vec<Netns>> {
    (0..n).map(|k| Netns::new(format!("{prefix}{k}"))).collect()
}

/// ADD latency over sequential containers.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub containers: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples_ms: Vec<f64>,
}

fn latency(opts: &CniOptions, plugin: &Plugin) -> Result<Latency> {
    let ns = namespaces("sncni-s", opts.sequential)?;
    let mut samples = Vec::new();
    for (k, n) in ns.iter().enumerate() {
        samples.push(plugin.call("ADD", &format!("seq{k}"), &n.0)?.as_secs_f64() * 1e3);
    }
    for (k, n) in ns.iter().enumerate() {
        plugin.call("DEL", &format!("seq{k}"), &n.0)?;
    }
    Ok(Latency {
        containers: samples.len(),
        p50_ms: percentile(&samples, 0.50),
        p99_ms: percentile(&samples, 0.99),
        samples_ms: samples,
    })
}

/// The `q` quantile of `v` (nearest rank).
fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
    s.get(rank - 1).copied().unwrap_or(0.0)
}

/// Simultaneous ADDs.
#[derive(Debug, Serialize)]
pub struct Parallel {
    pub containers: usize,
    pub seconds: f64,
}

fn parallel(opts: &CniOptions, plugin: &Plugin) -> Result<Parallel> {
    let ns = namespaces("sncni-p", opts.parallel)?;
    let t0 = Instant::now();
    let calls: Vec<Child> = ns
        .iter()
        .enumerate()
        .map(|(k, n)| plugin.spawn("ADD", &format!("par{k}"), &n.0))
        .collect::<Result<_>>()?;
    for (k, c) in calls.into_iter().enumerate() {
        Plugin::finish(c, &format!("ADD par{k}"))?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    for (k, n) in ns.iter().enumerate() {
        plugin.call("DEL", &format!("par{k}"), &n.0)?;
    }
    Ok(Parallel {
        containers: ns.len(),
        seconds,
    })
}

/// TCP to the wire host from a container and from the topology guest.
#[derive(Debug, Serialize)]
pub struct Throughput {
    pub container_gbps: Vec<f64>,
    pub guest_gbps: Vec<f64>,
    /// Median of the per-run ratios container ÷ guest.
    pub ratio: f64,
}

fn throughput(opts: &CniOptions, plugin: &Plugin) -> Result<Throughput> {
    let ns = Netns::new("sncni-t".into())?;
    plugin.call("ADD", "tput", &ns.0)?;
    let flow = |client: &str| {
        netenv::run(&Flow {
            server_ns: &toolstack::host::netns_name("wire"),
            server_ip: WIRE,
            server_bind: None,
            port: 5301,
            client_ns: client,
            reverse: false,
            secs: opts.secs,
            workload: Workload::TcpZerocopy,
            server_cgroup: None,
            client_cgroup: None,
            server_cpu: None,
            client_cpu: None,
        })
        .map(|r| r.gbps)
    };
    let (mut c, mut g, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let guest = toolstack::host::netns_name("guest1");
    for run in 0..opts.runs {
        // Each first in turn, so that neither always meets a warmer host.
        let (cg, gg) = if run % 2 == 0 {
            let cg = flow(&ns.0)?;
            (cg, flow(&guest)?)
        } else {
            let gg = flow(&guest)?;
            (flow(&ns.0)?, gg)
        };
        ratios.push(cg / gg.max(1e-9));
        c.push(cg);
        g.push(gg);
    }
    plugin.call("DEL", "tput", &ns.0)?;
    Ok(Throughput {
        container_gbps: c,
        guest_gbps: g,
        ratio: median(&ratios),
    })
}

/// ADD/DEL cycles and what they left.
#[derive(Debug, Serialize)]
pub struct Leaks {
    pub cycles: usize,
    pub before: Resources,
    pub after: Resources,
    pub leases: (usize, usize),
    pub namespaces: (usize, usize),
    pub add_ms_median: f64,
    pub del_ms_median: f64,
}

impl Leaks {
    /// What did not come back (hv's counts exactly, its resident memory
    /// within 1 MiB, leases and namespaces exactly).
    pub fn leaked(&self) -> Vec<String> {
        let hv = self.before.leaked(&self.after);
        let mut out: Vec<String> = hv.into_iter().map(str::to_string).collect();
        if self.leases.0 != self.leases.1 {
            out.push("IPAM leases".into());
        }
        if self.namespaces.0 != self.namespaces.1 {
            out.push("network namespaces".into());
        }
        out
    }
}

fn leases(run_dir: &Path) -> usize {
    let dir = run_dir.join("cni-ipam").join("bench");
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(|c: char| c.is_ascii_digit())
        })
        .count()
}

fn netns_count() -> usize {
    let o = Command::new("ip").args(["netns", "list"]).output();
    o.map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

/// Warm-up cycles before the "before" reading (first-use growth).
const WARM_UP: usize = 10;

fn leaks(opts: &CniOptions, up: &Up<'_>, plugin: &Plugin) -> Result<Leaks> {
    let ns = Netns::new("sncni-c".into())?;
    let mut ts = up.toolstack()?;
    let cycle = |i: usize| -> Result<(f64, f64)> {
        let id = format!("cyc{i}");
        let add = plugin.call("ADD", &id, &ns.0)?;
        let del = plugin.call("DEL", &id, &ns.0)?;
        Ok((add.as_secs_f64() * 1e3, del.as_secs_f64() * 1e3))
    };
    for i in 0..WARM_UP {
        cycle(i)?;
    }
    let before = faults::resources(&mut ts)?;
    let (leases0, netns0) = (leases(&opts.run_dir), netns_count());
    let (mut adds, mut dels) = (Vec::new(), Vec::new());
    let every = (opts.cycles / 10).max(1);
    for i in 0..opts.cycles {
        let (a, d) = cycle(WARM_UP + i)?;
        adds.push(a);
        dels.push(d);
        if (i + 1) % every == 0 {
            eprintln!("bench cni: {}/{} ADD/DEL cycles", i + 1, opts.cycles);
        }
    }
    let _ = faults::wait_for("hv's resources to settle", Duration::from_secs(5), || {
        faults::resources(&mut ts).is_ok_and(|r| before.counts_back(&r))
    });
    Ok(Leaks {
        cycles: opts.cycles,
        before,
        after: faults::resources(&mut ts)?,
        leases: (leases0, leases(&opts.run_dir)),
        namespaces: (netns0, netns_count()),
        add_ms_median: median(&adds),
        del_ms_median: median(&dels),
    })
}

/// A container's download through a driver-domain kill.
#[derive(Debug, Serialize)]
pub struct Fault {
    pub mib: u64,
    pub curl_ok: bool,
    pub sha256_match: bool,
}

fn fault(opts: &CniOptions, up: &mut Up<'_>, plugin: &Plugin) -> Result<Fault> {
    const MIB: u64 = 64;
    let dir = opts.run_dir.join("cni-www");
    std::fs::create_dir_all(&dir)?;
    let file = faults::random_file(&dir, MIB)?;
    faults::serve_http(up, &dir)?;
    let ns = Netns::new("sncni-f".into())?;
    plugin.call("ADD", "fault", &ns.0)?;
    let got = opts.run_dir.join("cni-got");
    let got_s = got.to_str().context("path")?;
    // ~4 s for the whole file, so that the kill lands in the middle.
    let mut curl = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.0,
            "curl",
            "-sS",
            "--fail",
            "--limit-rate",
            "16M",
        ])
        .args([
            "--max-time",
            "120",
            "-o",
            got_s,
            "http://10.77.0.254:8080/blob",
        ])
        .spawn()?;
    faults::wait_for(
        "the download to be under way",
        Duration::from_secs(30),
        || std::fs::metadata(&got).is_ok_and(|m| m.len() > 8 << 20),
    )?;
    let mut ts = up.toolstack()?;
    faults::kill_driver(&mut ts)?;
    let curl_ok = curl.wait()?.success();
    let sha256_match = curl_ok && faults::sha256(&got)? == faults::sha256(&file)?;
    plugin.call("DEL", "fault", &ns.0)?;
    let _ = std::fs::remove_file(&got);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Fault {
        mib: MIB,
        curl_ok,
        sha256_match,
    })
}

/// Everything the suite measured.
#[derive(Debug, Serialize)]
pub struct CniReport {
    pub latency: Latency,
    pub parallel: Parallel,
    pub throughput: Throughput,
    pub leaks: Leaks,
    pub fault: Fault,
}

/// Runs the five experiments on one topology.
pub fn run(opts: &CniOptions) -> Result<CniReport> {
    let plugin = Plugin::new(opts)?;
    std::fs::create_dir_all(&opts.run_dir)?;
    let topology = opts.run_dir.join("cni-bench.toml");
    std::fs::write(&topology, TOPOLOGY)?;
    let topo = topology.to_str().context("path")?;
    let mut up = Up::with(&opts.exe, &opts.run_dir, &["--config", topo])?;
    let say = |m: &str| eprintln!("bench cni: {m}");
    say(&format!("{} sequential ADDs", opts.sequential));
    let latency = latency(opts, &plugin)?;
    say(&format!("{} parallel ADDs", opts.parallel));
    let parallel = parallel(opts, &plugin)?;
    say(&format!("TCP, container and guest1, {} runs", opts.runs));
    let throughput = throughput(opts, &plugin)?;
    say(&format!("{} ADD/DEL cycles", opts.cycles));
    let leaks = leaks(opts, &up, &plugin)?;
    say("a download through a driver-domain kill");
    let fault = fault(opts, &mut up, &plugin).map_err(|e| anyhow!("fault: {e}"))?;
    Ok(CniReport {
        latency,
        parallel,
        throughput,
        leaks,
        fault,
    })
}

/// One target: what it asks, what was measured, and whether it holds.
pub struct Target {
    pub what: &'static str,
    pub measured: String,
    pub met: bool,
}

impl CniReport {
    /// Each of the targets, met or not by the numbers.
    pub fn targets(&self) -> Vec<Target> {
        let (l, p, t, k, f) = (
            &self.latency,
            &self.parallel,
            &self.throughput,
            &self.leaks,
            &self.fault,
        );
        let leaked = k.leaked();
        vec![
            Target {
                what: "ADD p50 at most 150 ms",
                measured: format!("{:.1} ms over {}", l.p50_ms, l.containers),
                met: l.p50_ms <= 150.0,
            },
            Target {
                what: "ADD p99 at most 400 ms",
                measured: format!("{:.1} ms", l.p99_ms),
                met: l.p99_ms <= 400.0,
            },
            Target {
                what: "20 parallel ADDs within 3 s",
                measured: format!("{} in {:.2} s", p.containers, p.seconds),
                met: p.containers >= 20 && p.seconds <= 3.0,
            },
            Target {
                what: "container TCP within 5% of a topology guest's",
                measured: format!(
                    "{:.3} of guest1 (median of {})",
                    t.ratio,
                    t.container_gbps.len()
                ),
                met: t.ratio >= 0.95,
            },
            Target {
                what: "ADD/DEL cycles leak nothing",
                measured: if leaked.is_empty() {
                    format!("{} cycles, nothing left", k.cycles)
                } else {
                    format!("{} cycles left: {}", k.cycles, leaked.join(", "))
                },
                met: leaked.is_empty(),
            },
            Target {
                what: "a driver-domain SIGKILL mid-download loses no byte",
                measured: format!(
                    "{} MiB, SHA-256 {}",
                    f.mib,
                    if f.sha256_match { "matches" } else { "differs" }
                ),
                met: f.sha256_match,
            },
        ]
    }

    /// A Markdown summary.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "### Containers through splitnet-cni\n\n| target | measured | |\n|---|---|---|\n",
        );
        for t in self.targets() {
            s += &format!(
                "| {} | {} | {} |\n",
                t.what,
                t.measured,
                if t.met { "met" } else { "missed" }
            );
        }
        let t = &self.throughput;
        s += &format!(
            "\nTCP to the wire host, Gbit/s per run: container {:?}, guest1 {:?}.\n",
            t.container_gbps
                .iter()
                .map(|g| format!("{g:.2}"))
                .collect::<Vec<_>>(),
            t.guest_gbps
                .iter()
                .map(|g| format!("{g:.2}"))
                .collect::<Vec<_>>()
        );
        let k = &self.leaks;
        s += &format!(
            "ADD/DEL cycle: median ADD {:.1} ms, DEL {:.1} ms.\n\n| resource | before | after |\n|---|---|---|\n",
            k.add_ms_median, k.del_ms_median
        );
        for (name, b, a) in k.before.rows(&k.after) {
            s += &format!("| hv's {name} | {b} | {a} |\n");
        }
        s += &format!("| IPAM leases | {} | {} |\n", k.leases.0, k.leases.1);
        s += &format!(
            "| network namespaces | {} | {} |\n",
            k.namespaces.0, k.namespaces.1
        );
        s
    }

    /// ADD latency, sequential samples sorted.
    pub fn svg(&self) -> String {
        let mut v = self.latency.samples_ms.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        let bars: Vec<crate::plot::Bar> =
            [("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0)]
                .iter()
                .map(|(label, q)| crate::plot::Bar {
                    label: format!("ADD {label}"),
                    value: percentile(&v, *q),
                    range: None,
                })
                .chain(std::iter::once(crate::plot::Bar {
                    label: format!("{} parallel ADDs, all", self.parallel.containers),
                    value: self.parallel.seconds * 1e3,
                    range: None,
                }))
                .collect();
        crate::plot::hbars(
            "CNI ADD: from the call until the interface is up with its address",
            "ms",
            "splitnet-cni with host-local, sequential containers; and all of the parallel ones",
            &bars,
        )
    }
}

/// `splitnet bench cni`: containers through the CNI plugin.
pub struct CniSuite;

impl harness::Suite for CniSuite {
    fn name(&self) -> &'static str {
        "cni"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let r = run(&CniOptions::new(a.exe.clone(), a.run_dir.clone(), a.quick))?;
        let missed: Vec<&str> = r
            .targets()
            .iter()
            .filter(|t| !t.met)
            .map(|t| t.what)
            .collect();
        if !missed.is_empty() {
            eprintln!("bench cni: targets missed: {}", missed.join("; "));
        }
        Output::of(&r, r.table(), r.svg())
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 25.0);
        assert_eq!(percentile(&v, 0.99), 50.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }
}
