//! `splitnet bench faults`: recovery and hotplug, measured against
//! its targets. Three experiments, each on a fresh default topology:
//!
//! - **kills** (`kills.rs`): an iperf3 stream each way between guest1 and
//!   the wire host (`--bidir`); the driver domain is killed with SIGKILL
//!   in the middle and a new process takes it over in place. The outage,
//!   each way, is the time from the kill until the receiver gets bytes
//!   again (read from its interface counter every millisecond); the
//!   served-again time is until both ends of guest1's vif are Connected
//!   under the new process; the two ends' TCP retransmission timeouts
//!   across the kill are counted. Each stream must end without error.
//! - **kills-restart**: the same with takeover off, so that hv restarts
//!   the driver domain as a new domain and the guests reconnect.
//! - **http**: a 256 MiB download over HTTP from the wire host, slowed so
//!   that it lasts ~10 s, survives five driver-domain kills and arrives
//!   with the right SHA-256.
//! - **hotplug**: `network-attach` / `network-detach` cycles on guest1;
//!   hv's grant pins, event channels, store nodes, watches, open
//!   descriptors and resident memory before and after.
//! - **apply** (`apply.rs`): a guest added and removed among 32 while
//!   three others stream, and a long seeded random sequence of applies.
//! - **upgrades** (`upgrade.rs`): the driver domain upgraded in place
//!   during a stream each way; the longest gap in each direction.
//! - **hv-upgrades** (`hv_upgrade.rs`): hv upgraded in place during a
//!   stream each way and a 1 ms ping; the longest gap, and how long the
//!   control plane did not answer.
//! - **hv-crashes** (`hv_upgrade.rs` too): hv killed with SIGKILL and
//!   started again by its guardian, measured the same way.

mod apply;
mod hv_upgrade;
mod kills;
mod resources;
mod upgrade;

pub use kills::Kill;
pub use resources::Resources;
pub(crate) use resources::{resources, settled};

use crate::harness::{self, Args, Output};
use crate::machine::PaperMachine;
use crate::plot::{self, Bar};
use crate::stats::median;
use anyhow::{anyhow, bail, Context, Result};
use hv::status::SystemStatus;
use hv::Toolstack;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolstack::daemon::socket_path;

/// What to run.
pub struct FaultsOptions {
    pub exe: PathBuf,
    pub run_dir: PathBuf,
    /// Driver-domain kills during iperf3 streams.
    pub kills: usize,
    /// Kills during the HTTP download.
    pub http_kills: usize,
    /// Size of the HTTP download, MiB.
    pub http_mib: u64,
    /// network-attach/detach cycles.
    pub cycles: usize,
    /// Runs of the "one guest among 32" experiment.
    pub apply_runs: usize,
    /// Steps of the random apply sequence, and its seed.
    pub apply_steps: usize,
    pub apply_seed: u64,
    /// Driver-domain upgrades in place during streams.
    pub upgrades: usize,
    /// The experiments to run, of [`EXPERIMENTS`] (`--workloads`; empty:
    /// all).
    pub only: Vec<String>,
    pub progress: bool,
}

impl FaultsOptions {
    /// The full figures (10 kills, 5 during 256 MiB, 10,000 cycles, 3
    /// runs of a guest applied among 32, 1,000 random applies), or fewer of
    /// each with `quick`.
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool) -> FaultsOptions {
        FaultsOptions {
            exe,
            run_dir,
            kills: if quick { 3 } else { 10 },
            http_kills: 5,
            http_mib: 256,
            cycles: if quick { 200 } else { 10_000 },
            apply_runs: if quick { 1 } else { 3 },
            apply_steps: if quick { 100 } else { 1000 },
            apply_seed: 1,
            upgrades: if quick { 3 } else { 10 },
            only: Vec::new(),
            progress: true,
        }
    }

    /// Whether experiment `name` runs.
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

/// The suite's experiments, as `--workloads` names them.
pub const EXPERIMENTS: [&str; 8] = [
    "kills",
    "kills-restart",
    "http",
    "hotplug",
    "apply",
    "upgrades",
    "hv-upgrades",
    "hv-crashes",
];

/// The HTTP download with kills in the middle.
#[derive(Debug, Serialize)]
pub struct Http {
    pub mib: u64,
    pub kills: usize,
    pub seconds: f64,
    pub sha256_match: bool,
    pub curl_ok: bool,
}

/// The hotplug cycles.
#[derive(Debug, Serialize)]
pub struct Hotplug {
    pub cycles: usize,
    pub before: Resources,
    pub after: Resources,
    pub attach_ms_median: f64,
    pub detach_ms_median: f64,
}

/// Everything the suite measured.
#[derive(Debug, Serialize)]
pub struct FaultsReport {
    /// Kills taken over in place (the default).
    pub kills: Vec<Kill>,
    /// Kills with takeover off: the driver domain restarted as a new one.
    pub restart_kills: Vec<Kill>,
    pub median_outage_ms: f64,
    pub median_reconnect_ms: f64,
    pub http: Option<Http>,
    pub hotplug: Option<Hotplug>,
    pub apply: Option<apply::ApplyReport>,
    pub upgrades: Option<upgrade::Upgrades>,
    pub hv_upgrades: Option<hv_upgrade::HvUpgrades>,
    pub hv_crashes: Option<hv_upgrade::HvUpgrades>,
}

/// A topology brought up for one experiment; down when dropped.
pub(crate) struct Up<'a> {
    exe: &'a Path,
    run_dir: &'a Path,
    children: Vec<Child>,
    /// The paper's machine it runs on, if any: splitnet and the guests'
    /// applications on its server core, the wire hosts' on its client core.
    paper: Option<PaperMachine>,
}

impl<'a> Up<'a> {
    fn new(opts: &'a FaultsOptions) -> Result<Up<'a>> {
        Up::with(&opts.exe, &opts.run_dir, &[])
    }

    /// `splitnet up` with `args` (after a `down`) from `exe` in `run_dir`.
    pub(crate) fn with(exe: &'a Path, run_dir: &'a Path, args: &[&str]) -> Result<Up<'a>> {
        Up::on(exe, run_dir, args, None)
    }

    /// [`Up::with`] on the paper's machine when `paper` is given
    /// ([`crate::machine`]): `splitnet up` (so hv and every domain) pinned
    /// to its server core.
    pub(crate) fn on(
        exe: &'a Path,
        run_dir: &'a Path,
        args: &[&str],
        paper: Option<PaperMachine>,
    ) -> Result<Up<'a>> {
        let up = Up {
            exe,
            run_dir,
            children: Vec::new(),
            paper,
        };
        up.cli(&["down"]).ok();
        let mut a = vec!["up"];
        a.extend_from_slice(args);
        crate::splitnet_on(exe, run_dir, &a, paper.map(|p| p.server_cpu))?;
        Ok(up)
    }

    /// Where an application in `domain` runs on the paper's machine: a wire
    /// host is a client machine; anything else runs on the server.
    fn core_of(&self, domain: &str) -> Option<usize> {
        let p = self.paper?;
        Some(if domain.starts_with("wire") {
            p.client_cpu
        } else {
            p.server_cpu
        })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.exe);
        c.arg("--run-dir").arg(self.run_dir).args(args);
        c
    }

    /// `splitnet exec domain -- cmd`, placed as an application of `domain`
    /// on the paper's machine.
    pub(crate) fn exec_cmd(&self, domain: &str, cmd: &[&str]) -> Result<Command> {
        let mut args = vec!["exec", domain, "--"];
        args.extend_from_slice(cmd);
        let mut c = self.cmd(&args);
        crate::machine::place_application(&mut c, self.core_of(domain))?;
        Ok(c)
    }

    pub(crate) fn cli(&self, args: &[&str]) -> Result<String> {
        crate::splitnet(self.exe, self.run_dir, args)
    }

    /// Starts a command in a domain's namespace; returns its pid (the
    /// command itself: `exec` replaces the CLI process).
    pub(crate) fn spawn(&mut self, domain: &str, cmd: &[&str]) -> Result<u32> {
        let child = self
            .exec_cmd(domain, cmd)?
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Runs a command in a domain's namespace, placed as [`Up::spawn`]
    /// places it, and returns what it printed; fails, with its error
    /// output, unless it exits 0.
    pub(crate) fn output_in(&self, domain: &str, cmd: &[&str]) -> Result<String> {
        let what = format!("`{}` in {domain}", cmd.join(" "));
        crate::stdout_of(&mut self.exec_cmd(domain, cmd)?, &what)
    }

    /// Waits for the child `pid` to exit; whether it exited 0.
    pub(crate) fn wait_child(&mut self, pid: u32, limit: Duration) -> Result<bool> {
        let i = self
            .children
            .iter()
            .position(|c| c.id() == pid)
            .ok_or_else(|| anyhow!("no child {pid}"))?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.children[i].try_wait()? {
                // Reaped by try_wait; forget it.
                let _ = self.children.swap_remove(i).wait();
                return Ok(s.success());
            }
            if Instant::now() > deadline {
                bail!("a command did not finish within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn toolstack(&self) -> Result<Toolstack> {
        Toolstack::connect(&self.socket()).map_err(|e| anyhow!("{e}"))
    }

    /// hv's toolstack socket.
    pub(crate) fn socket(&self) -> PathBuf {
        socket_path(self.run_dir)
    }
}

impl Drop for Up<'_> {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.cli(&["down"]);
    }
}

/// Bytes an interface of the namespace process `pid` lives in has sent
/// (`tx`) or received, from `/proc/<pid>/net/dev`.
fn if_bytes(pid: u32, ifname: &str, tx: bool) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{ifname}:")))?;
    let fields: Vec<&str> = line.split(':').nth(1)?.split_whitespace().collect();
    fields.get(if tx { 8 } else { 0 })?.parse().ok()
}

/// Polls `fact` every millisecond until it holds or `limit` passes.
pub(crate) fn wait_for(
    what: &str,
    limit: Duration,
    mut fact: impl FnMut() -> bool,
) -> Result<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if fact() {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(crate) fn domain_pid(s: &SystemStatus, name: &str) -> Option<(u16, i32)> {
    s.domains
        .iter()
        .find(|d| d.name == name)
        .and_then(|d| Some((d.id, d.pid?)))
}

/// Whether both ends of `guest`'s vif 0 on driver domain `drv` are
/// Connected, as `s` names their domains.
pub(crate) fn vif_connected_in(
    ts: &mut Toolstack,
    s: &SystemStatus,
    guest: &str,
    drv: &str,
) -> bool {
    let (Some((g, _)), Some((b, _))) = (domain_pid(s, guest), domain_pid(s, drv)) else {
        return false;
    };
    let fe = abi::xenbus::frontend_path(g, 0);
    let be = abi::xenbus::backend_path(b, g, 0);
    [fe, be].iter().all(|p| {
        ts.store_read(&format!("{p}/state"))
            .is_ok_and(|v| v.trim() == "4")
    })
}

/// Kills the driver domain; returns when its process is gone, with the
/// time of the kill and the old domain id and pid.
pub(crate) fn kill_driver(ts: &mut Toolstack) -> Result<(Instant, (u16, i32))> {
    kill_domain(ts, "drv")
}

/// Kills domain `name` with SIGKILL; returns when its process is gone,
/// with the time of the kill and the old domain id and pid.
pub(crate) fn kill_domain(ts: &mut Toolstack, name: &str) -> Result<(Instant, (u16, i32))> {
    let s = ts.status().map_err(|e| anyhow!("{e}"))?;
    let (id, pid) = domain_pid(&s, name).ok_or_else(|| anyhow!("{name} is not running"))?;
    let t0 = Instant::now();
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill -9 {pid} failed");
    }
    let proc = format!("/proc/{pid}/stat");
    let dead = || std::fs::read_to_string(&proc).map_or(true, |s| s.contains(") Z "));
    let what = format!("{name} to die");
    if wait_for(&what, SLOW_DEATH, dead).is_err() {
        eprintln!(
            "bench: {name} (pid {pid}) is still dying {} s after SIGKILL; the kernel holds it in: {}",
            SLOW_DEATH.as_secs(),
            kernel_stack(pid)
        );
        wait_for(&what, DEATH_LIMIT, dead)?;
    }
    Ok((t0, (id, pid)))
}

/// A SIGKILLed domain is gone once the kernel has torn down what it held:
/// its TAPs and sockets, whose devices unregister under the RTNL lock and
/// wait for RCU grace periods. On a loaded two-CPU host another
/// namespace's teardown can hold that lock for seconds.
const DEATH_LIMIT: Duration = Duration::from_secs(30);

/// A death slower than this is reported with where the kernel holds the
/// process, so a long one names its cause.
const SLOW_DEATH: Duration = Duration::from_secs(2);

/// The kernel stack of `pid` (`/proc/PID/stack`, root only), on one line,
/// or its wait channel where the stack cannot be read.
fn kernel_stack(pid: i32) -> String {
    let stack = std::fs::read_to_string(format!("/proc/{pid}/stack")).unwrap_or_default();
    let frames: Vec<&str> = stack
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    if !frames.is_empty() {
        return frames.join(" < ");
    }
    std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .map_or_else(|e| format!("unknown ({e})"), |w| format!("wchan {w}"))
}

/// A process's resident memory, KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A stream's cell in a table.
pub(crate) fn stream_cell(ok: bool) -> &'static str {
    if ok {
        "ended without error"
    } else {
        "failed"
    }
}

fn say(opts: &FaultsOptions, msg: &str) {
    if opts.progress {
        eprintln!("bench faults: {msg}");
    }
}

/// A fresh default topology with an iperf3 server on the wire host,
/// listening: the server's pid, and the toolstack.
pub(crate) fn with_iperf3_server(opts: &FaultsOptions) -> Result<(Up<'_>, u32, Toolstack)> {
    with_iperf3_server_on(opts, &[])
}

/// [`with_iperf3_server`], brought up with `splitnet up` `args`.
fn with_iperf3_server_on<'a>(
    opts: &'a FaultsOptions,
    args: &[&str],
) -> Result<(Up<'a>, u32, Toolstack)> {
    let mut up = Up::with(&opts.exe, &opts.run_dir, args)?;
    let srv = up.spawn("wire", &["iperf3", "-s", "-B", "10.77.0.254"])?;
    wait_for("iperf3 to listen", Duration::from_secs(10), || {
        crate::netenv::listening(&toolstack::host::netns_name("wire"), 5201).unwrap_or(false)
    })?;
    let ts = up.toolstack()?;
    Ok((up, srv, ts))
}

/// Starts an iperf3 stream each way (`--bidir`, `secs` long) between
/// guest1 and the wire host's server `srv`, and returns once 16 MiB have
/// reached the wire host: guest1's pid and the client's.
pub(crate) fn start_bidir(
    up: &mut Up<'_>,
    ts: &mut Toolstack,
    srv: u32,
    secs: &str,
) -> Result<(u32, u32)> {
    let s = ts.status().map_err(|e| anyhow!("{e}"))?;
    let g1 = domain_pid(&s, "guest1")
        .ok_or_else(|| anyhow!("guest1 is not running"))?
        .1 as u32;
    let start = if_bytes(srv, "eth0", false).unwrap_or(0);
    let client = up.spawn(
        "guest1",
        &["iperf3", "-c", "10.77.0.254", "-t", secs, "--bidir"],
    )?;
    wait_for("the stream to flow", Duration::from_secs(10), || {
        if_bytes(srv, "eth0", false).unwrap_or(0) > start + (16 << 20)
    })?;
    Ok((g1, client))
}

pub(crate) fn sha256(path: &Path) -> Result<String> {
    let o = Command::new("sha256sum").arg(path).output()?;
    let text = String::from_utf8_lossy(&o.stdout);
    text.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("sha256sum {}: no digest", path.display()))
}

/// `dir/blob`, `mib` MiB of random bytes.
pub(crate) fn random_file(dir: &Path, mib: u64) -> Result<PathBuf> {
    let file = dir.join("blob");
    let st = Command::new("dd")
        .args(["if=/dev/urandom", "bs=1M", "status=none"])
        .arg(format!("of={}", file.display()))
        .arg(format!("count={mib}"))
        .status()?;
    if !st.success() {
        bail!("could not write {}", file.display());
    }
    Ok(file)
}

/// Serves `dir` over HTTP from the wire host (10.77.0.254:8080) until `up`
/// goes; returns the server's pid once it listens.
pub(crate) fn serve_http(up: &mut Up<'_>, dir: &Path) -> Result<u32> {
    let dir_s = dir.to_str().context("path")?.to_string();
    let srv = up.spawn(
        "wire",
        &[
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            "10.77.0.254",
            "--directory",
            &dir_s,
        ],
    )?;
    wait_for("the HTTP server to listen", Duration::from_secs(10), || {
        crate::netenv::listening(&toolstack::host::netns_name("wire"), 8080).unwrap_or(false)
    })?;
    Ok(srv)
}

/// Starts guest1's download of `blob` from [`serve_http`]'s server into
/// `got` (curl, with `extra` options); returns curl's pid.
pub(crate) fn start_download(up: &mut Up<'_>, got: &Path, extra: &[&str]) -> Result<u32> {
    let got = got.to_str().context("path")?;
    let mut args = vec!["curl", "-sS", "--fail"];
    args.extend_from_slice(extra);
    args.extend(["-o", got, "http://10.77.0.254:8080/blob"]);
    up.spawn("guest1", &args)
}

/// A download of `http_mib` MiB from the wire host with driver kills.
fn http(opts: &FaultsOptions) -> Result<Http> {
    let dir = opts.run_dir.join("faults-www");
    std::fs::create_dir_all(&dir)?;
    let file = random_file(&dir, opts.http_mib)?;
    let mut up = Up::new(opts)?;
    let srv = serve_http(&mut up, &dir)?;
    // ~10 s for the whole file, so that the kills land in the middle.
    let rate = format!("{}M", (opts.http_mib / 10).max(1));
    let got = opts.run_dir.join("faults-got");
    let t0 = Instant::now();
    let curl = start_download(&mut up, &got, &["--limit-rate", &rate])?;
    let mut ts = up.toolstack()?;
    let step = (opts.http_mib << 20) / (opts.http_kills as u64 + 2);
    let mut kills = 0;
    for k in 0..opts.http_kills {
        let sent = if_bytes(srv, "eth0", true).unwrap_or(0);
        wait_for("the download to progress", Duration::from_secs(30), || {
            if_bytes(srv, "eth0", true).unwrap_or(0) > sent + step
        })?;
        let (_, old) = kill_driver(&mut ts)?;
        wait_for("drv to come back", Duration::from_secs(10), || {
            kills::vif_connected(&mut ts, old)
        })?;
        kills += 1;
        say(
            opts,
            &format!("http: kill {}/{} done", k + 1, opts.http_kills),
        );
    }
    let curl_ok = up.wait_child(curl, Duration::from_secs(120))?;
    let seconds = t0.elapsed().as_secs_f64();
    let sha256_match = curl_ok && sha256(&got)? == sha256(&file)?;
    let _ = std::fs::remove_file(&got);
    let _ = std::fs::remove_dir_all(&dir);
    say(
        opts,
        &format!(
            "http: {} MiB in {seconds:.1} s through {kills} kills, SHA-256 {}",
            opts.http_mib,
            if sha256_match { "matches" } else { "DIFFERS" }
        ),
    );
    Ok(Http {
        mib: opts.http_mib,
        kills,
        seconds,
        sha256_match,
        curl_ok,
    })
}

/// Whether both ends of every vif of the default topology, and the driver
/// domain, have published their counters in the store.
fn counters_published(ts: &mut Toolstack) -> bool {
    let Ok(s) = ts.status() else { return false };
    let Some((b, _)) = domain_pid(&s, "drv") else {
        return false;
    };
    let mut paths = vec![format!("/local/domain/{b}/splitnet/stats")];
    for g in ["guest1", "guest2"] {
        let Some((g, _)) = domain_pid(&s, g) else {
            return false;
        };
        paths.push(format!("{}/stats", abi::xenbus::frontend_path(g, 0)));
        paths.push(format!("{}/stats", abi::xenbus::backend_path(b, g, 0)));
    }
    paths.iter().all(|p| ts.store_read(p).is_ok())
}

/// Warm-up cycles before the "before" reading: the allocator's and the
/// threads' first-use growth is not a leak.
const WARM_UP: usize = 10;

/// `network-attach` / `network-detach` cycles on guest1.
fn hotplug(opts: &FaultsOptions) -> Result<Hotplug> {
    let up = Up::new(opts)?;
    let mut ts = up.toolstack()?;
    let cycle = |ts: &mut Toolstack| -> Result<(f64, f64)> {
        let t0 = Instant::now();
        let h = ts
            .network_attach("guest1", None, None)
            .map_err(|e| anyhow!("network-attach: {e}"))?;
        let t1 = Instant::now();
        ts.network_detach("guest1", h)
            .map_err(|e| anyhow!("network-detach: {e}"))?;
        Ok((
            (t1 - t0).as_secs_f64() * 1e3,
            t1.elapsed().as_secs_f64() * 1e3,
        ))
    };
    for _ in 0..WARM_UP {
        cycle(&mut ts)?;
    }
    // Every end publishes its counters within a second of connecting: the
    // reference point is once they have.
    wait_for("every vif's counters", Duration::from_secs(5), || {
        counters_published(&mut ts)
    })?;
    let before = resources(&mut ts)?;
    let (mut attach, mut detach) = (Vec::new(), Vec::new());
    let every = (opts.cycles / 10).max(1);
    for i in 0..opts.cycles {
        let (a, d) = cycle(&mut ts)?;
        attach.push(a);
        detach.push(d);
        if (i + 1) % every == 0 {
            say(opts, &format!("hotplug: {}/{} cycles", i + 1, opts.cycles));
        }
    }
    // The guest takes the last vif down after detach returns: give what
    // is still in flight time to settle; a leak does not.
    let after = settled(&mut ts, &before)?;
    Ok(Hotplug {
        cycles: opts.cycles,
        before,
        after,
        attach_ms_median: median(&attach),
        detach_ms_median: median(&detach),
    })
}

/// Runs the three experiments.
pub fn run(opts: &FaultsOptions) -> Result<FaultsReport> {
    if let Some(bad) = opts
        .only
        .iter()
        .find(|o| !EXPERIMENTS.contains(&o.as_str()))
    {
        bail!("bench faults has no experiment {bad:?}; it has {EXPERIMENTS:?}");
    }
    let (kills, restart_kills) = kills::both(opts)?;
    // Each experiment when `--workloads` names it, said first.
    let runs = |name: &str, what: String| {
        let wanted = opts.wants(name);
        if wanted {
            say(opts, &what);
        }
        wanted
    };
    let http = runs(
        "http",
        format!(
            "a {} MiB HTTP download through {} kills",
            opts.http_mib, opts.http_kills
        ),
    )
    .then(|| http(opts));
    let hotplug = runs(
        "hotplug",
        format!("{} network-attach/detach cycles", opts.cycles),
    )
    .then(|| hotplug(opts));
    let apply = runs(
        "apply",
        format!(
            "apply: one guest among {} and {} random applies",
            apply::MANY,
            opts.apply_steps
        ),
    )
    .then(|| apply::run(opts));
    let n = opts.upgrades;
    let upgrades = runs(
        "upgrades",
        format!("{n} driver-domain upgrades in place during streams"),
    )
    .then(|| upgrade::run(opts));
    let hv_upgrades = runs(
        "hv-upgrades",
        format!("{n} upgrades of hv in place during streams"),
    )
    .then(|| hv_upgrade::run(opts, hv_upgrade::Event::Upgrade));
    let hv_crashes = runs("hv-crashes", format!("{n} kills of hv during streams"))
        .then(|| hv_upgrade::run(opts, hv_upgrade::Event::Crash));
    let outages: Vec<f64> = kills.iter().map(|k| k.outage_ms).collect();
    let reconnects: Vec<f64> = kills.iter().map(|k| k.reconnect_ms).collect();
    Ok(FaultsReport {
        median_outage_ms: median(&outages),
        median_reconnect_ms: median(&reconnects),
        kills,
        restart_kills,
        http: http.transpose()?,
        hotplug: hotplug.transpose()?,
        apply: apply.transpose()?,
        upgrades: upgrades.transpose()?,
        hv_upgrades: hv_upgrades.transpose()?,
        hv_crashes: hv_crashes.transpose()?,
    })
}

impl FaultsReport {
    /// Whether every target of the suite was met.
    pub fn passed(&self) -> bool {
        self.failed().is_empty()
    }

    /// The targets not met, by name.
    pub fn failed(&self) -> Vec<String> {
        let mut f = Vec::new();
        if !self.kills.is_empty()
            && (self.median_outage_ms >= 1000.0 || !self.kills.iter().all(|k| k.stream_ok))
        {
            f.push("kills: outage or a stream".to_string());
        }
        let restart: Vec<f64> = self.restart_kills.iter().map(|k| k.outage_ms).collect();
        if !self.restart_kills.is_empty()
            && (median(&restart) >= 1000.0 || !self.restart_kills.iter().all(|k| k.stream_ok))
        {
            f.push("kills-restart: outage or a stream".to_string());
        }
        if self
            .http
            .as_ref()
            .is_some_and(|h| !h.sha256_match || h.kills == 0)
        {
            f.push("http: the download".to_string());
        }
        if let Some(leaked) = self
            .hotplug
            .as_ref()
            .map(Hotplug::leaked)
            .filter(|l| !l.is_empty())
        {
            f.push(format!("hotplug leaked {leaked:?}"));
        }
        if let Some(a) = self.apply.as_ref().filter(|a| !a.passed()) {
            let disturbed: Vec<&String> = a
                .streams
                .iter()
                .filter(|d| !d.within_noise())
                .map(|d| &d.guest)
                .collect();
            f.push(format!(
                "apply leaked {:?}, disturbed {disturbed:?}",
                a.before.leaked(&a.after)
            ));
        }
        if self.upgrades.as_ref().is_some_and(|u| !u.passed()) {
            f.push("upgrades: the longest gap or a stream".to_string());
        }
        if self.hv_upgrades.as_ref().is_some_and(|u| !u.passed()) {
            f.push("hv-upgrades: the longest gap, the control plane or a stream".to_string());
        }
        if self.hv_crashes.as_ref().is_some_and(|u| !u.passed()) {
            f.push("hv-crashes: the longest gap or a stream".to_string());
        }
        f
    }

    /// A Markdown summary.
    pub fn table(&self) -> String {
        let mut s = kills::table(
            "Driver-domain kills during an iperf3 stream each way (taken over in place)",
            &self.kills,
        );
        s += &kills::table(
            "Driver-domain kills with takeover off (restarted as a new domain; the guests reconnect)",
            &self.restart_kills,
        );
        if let Some(h) = &self.http {
            s += &format!(
                "### HTTP download through driver-domain kills\n\n{} MiB in {:.1} s through {} kills: SHA-256 {}.\n\n",
                h.mib,
                h.seconds,
                h.kills,
                if h.sha256_match { "matches" } else { "differs" }
            );
        }
        if let Some(p) = &self.hotplug {
            s += &format!(
                "### {} network-attach/detach cycles\n\nMedian attach {:.1} ms, detach {:.1} ms (each returns once both ends are Connected, or Closed).\n\n",
                p.cycles, p.attach_ms_median, p.detach_ms_median
            );
            s += "| hv resource | before | after |\n|---|---|---|\n";
            for (name, b, a) in p.rows() {
                s += &format!("| {name} | {b} | {a} |\n");
            }
        }
        if let Some(a) = &self.apply {
            s += &a.table();
        }
        if let Some(u) = &self.upgrades {
            s += &u.table();
        }
        for u in self.hv_upgrades.iter().chain(&self.hv_crashes) {
            s += &u.table();
        }
        let failed = self.failed();
        s += &format!(
            "\nResult: {}\n",
            if failed.is_empty() {
                "every target met".to_string()
            } else {
                format!("NOT MET ({})", failed.join("; "))
            }
        );
        s
    }

    /// Outage and reconnect time of each kill.
    pub fn svg(&self) -> String {
        let mut bars = Vec::new();
        for (i, k) in self.kills.iter().enumerate() {
            bars.push(Bar {
                label: format!("kill {}: traffic resumes", i + 1),
                value: k.outage_ms,
                range: None,
            });
            bars.push(Bar {
                label: format!("kill {}: vif reconnected", i + 1),
                value: k.reconnect_ms,
                range: None,
            });
        }
        for (i, u) in self.upgrades.iter().flat_map(|u| &u.runs).enumerate() {
            bars.push(Bar {
                label: format!("upgrade {}: longest gap", i + 1),
                value: u.gap_out_ms.max(u.gap_in_ms),
                range: None,
            });
        }
        for (i, u) in self.hv_upgrades.iter().flat_map(|u| &u.runs).enumerate() {
            bars.push(Bar {
                label: format!("hv upgrade {}: longest gap", i + 1),
                value: u.gap_ms(),
                range: None,
            });
        }
        for (i, u) in self.hv_crashes.iter().flat_map(|u| &u.runs).enumerate() {
            bars.push(Bar {
                label: format!("hv kill {}: longest gap", i + 1),
                value: u.gap_ms(),
                range: None,
            });
        }
        plot::hbars(
            "Driver domain killed, it or hv upgraded in place, or hv killed, mid-stream: time until recovery",
            "ms",
            "SIGKILL to the wire host receiving again, and to both vif ends Connected; an upgrade's longest gap in either direction",
            &bars,
        )
    }
}

impl Hotplug {
    fn rows(&self) -> Vec<(&'static str, u64, u64)> {
        self.before.rows(&self.after)
    }

    /// Resources the cycles did not give back (see [`Resources::leaked`]).
    pub fn leaked(&self) -> Vec<&'static str> {
        self.before.leaked(&self.after)
    }
}

/// `splitnet bench faults`: recovery from driver-domain kills, and hotplug.
pub struct FaultsSuite;

impl harness::Suite for FaultsSuite {
    fn name(&self) -> &'static str {
        "faults"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let mut opts = FaultsOptions::new(a.exe.clone(), a.run_dir.clone(), a.quick);
        opts.only = a.workloads.clone();
        let r = run(&opts)?;
        if !r.passed() {
            eprintln!("bench faults: a target was not met (see the table)");
        }
        Output::of(&r, r.table(), r.svg())
    }
}
