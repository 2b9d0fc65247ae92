//! `splitnet bench soak --minutes N [--seed S]`: everything at once, for
//! a long time, counting every byte. One topology holds a guest of each
//! NIC kind on one driver domain (netfront, virtio, hosted, HVM), a
//! vhost-user VM socket for a hostile VM, and a DPDK VM (testpmd, [`vm`])
//! that listens on its own socket. For the whole run:
//!
//! - **flows** ([`flows`]) between the guests and the wire host, every
//!   byte checked and every delivery timed, and one between guests of two
//!   hosts of an underlay over VXLAN with BGP EVPN ([`crosshost`]);
//! - **churn** ([`churn`]): hot-plug and unplug on guest1 with vifspecs;
//! - **downloads**: curl from the wire host's HTTP server, SHA-256 checked;
//! - **events** ([`events`]), one at a time between quiet spells, drawn
//!   from the seed: driver-domain and guest kills, a stopped driver
//!   domain, a guest that stalls its RX ring, a hostile VM's attacks, a
//!   VMM killed mid-attack, and a bgpd killed or a BGP session dropped
//!   between the hosts.
//!
//! A real-time probe ([`machine`]) watches the machine itself meanwhile,
//! so that a stall of the host beneath it is told from splitnet's, and a
//! watchdog ([`stalls`]) writes down where the kernel's tasks wait when a
//! flow stops for long. At the end it sets hv's resources, the namespaces
//! and every counter in `status` against the start, and judges by
//! [`report`]'s rules.

mod background;
mod churn;
mod crosshost;
mod events;
mod flows;
mod hv_events;
mod machine;
mod pattern;
mod progress;
mod render;
pub mod report;
mod stalls;
mod status_diff;
mod vcpu;
mod vm;

use crate::faults::{random_file, resources, serve_http, settled, sha256, wait_for, Up};
use crate::harness::{self, Args, Output};
use anyhow::{anyhow, bail, Result};
use events::Plan;
use hv::Toolstack;
use report::SoakReport;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub exe: PathBuf,
    pub run_dir: PathBuf,
    pub minutes: f64,
    pub seed: u64,
    pub progress: bool,
}

/// The HTTP download's size, MiB.
const BLOB_MIB: u64 = 16;

/// The guests on netfront vifs, whose vifs' handshake an event waits for.
const NETFRONT_GUESTS: [&str; 2] = ["guest1", "guest2"];

/// The soak's topology: a guest of every NIC kind, guest2 restarted when
/// killed, a hosted guest without flows whose memory the soak scribbles
/// on, a VM socket for the hostile VM, and testpmd's VM, which listens on
/// `dpdk_socket` itself.
pub fn topology(vm_socket: &Path, dpdk_socket: &Path) -> String {
    let guest = |name: &str, n: u8, extra: &str| {
        format!(
            "[[domain]]\nname = \"{name}\"\nkind = \"guest\"\naddress = \"10.77.0.{n}/24\"\n{extra}\n"
        )
    };
    format!(
        "# bench soak: a guest of every NIC kind, a VM socket, one driver domain.\n\
         name = \"soak\"\n\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n\n\
         {}{}{}{}{}{}\
         [[domain]]\nname = \"{}\"\nkind = \"vm\"\nsocket = \"{}\"\nmac = \"{}\"\n\n\
         [[domain]]\nname = \"{}\"\nkind = \"vm\"\nsocket = \"{}\"\nsocket_server = \"vm\"\nmac = \"{}\"\n\n\
         [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n",
        guest("guest1", 1, ""),
        guest(events::VICTIM, 2, "restart = \"on-crash\""),
        guest(VIRTIO_GUEST, 3, "nic = \"virtio\""),
        guest("guest4", 4, "nic = \"hosted\""),
        guest("guest5", 5, "nic = \"hvm\""),
        guest(events::SCRIBBLER, 7, "nic = \"hosted\""),
        crate::testbed::VM,
        vm_socket.display(),
        crate::testbed::VM_MAC,
        vm::NAME,
        dpdk_socket.display(),
        vm::MAC,
    )
}

/// The guest with `nic = "virtio"` (a vhost-user frontend).
pub const VIRTIO_GUEST: &str = "guest3";

/// The domains whose NIC is a vhost-user connection to the driver domain:
/// it closes when the driver domain's program is replaced in place, and
/// they reconnect as after a crash.
pub const VHOST_USER: [&str; 2] = [VIRTIO_GUEST, vm::NAME];

/// The flows: each guest kind to and from the wire host, guest to guest,
/// request-response and UDP through the victim, guest1 of underlay host a
/// to guest1 of host b (at `cross_ip`), and, with `dpdk_vm`, the wire
/// host's datagrams reflected by testpmd's VM.
pub fn flow_specs(seed: u64, cross_ip: Ipv4Addr, dpdk_vm: bool) -> Vec<flows::Spec> {
    use flows::Kind::*;
    let wire = Ipv4Addr::new(10, 77, 0, 254);
    let g = |n: u8| Ipv4Addr::new(10, 77, 0, n);
    let (ca, cb) = (
        crosshost::remote("a", "guest1"),
        crosshost::remote("b", "guest1"),
    );
    let list: [(&str, flows::Kind, &str, &str, Ipv4Addr); 10] = [
        ("guest1-tx", Stream { mbps: 200 }, "guest1", "wire", wire),
        ("guest1-rx", Stream { mbps: 200 }, "wire", "guest1", g(1)),
        (
            "guest1-guest3",
            Stream { mbps: 50 },
            "guest1",
            "guest3",
            g(3),
        ),
        ("guest3-tx", Stream { mbps: 100 }, "guest3", "wire", wire),
        ("guest4-tx", Stream { mbps: 10 }, "guest4", "wire", wire),
        ("guest5-tx", Stream { mbps: 2 }, "guest5", "wire", wire),
        ("guest2-rr", Rr { per_s: 500 }, "guest2", "wire", wire),
        (
            "wire-guest2-udp",
            Datagrams { mbps: 20 },
            "wire",
            "guest2",
            g(2),
        ),
        ("a-guest1-b-guest1", Stream { mbps: 50 }, &ca, &cb, cross_ip),
        ("wire-vm2", Reflected { mbps: 20 }, "wire", vm::NAME, vm::IP),
    ];
    let n = if dpdk_vm { list.len() } else { list.len() - 1 };
    list[..n]
        .iter()
        .enumerate()
        .map(|(i, &(name, kind, client, server, ip))| flows::Spec {
            name: name.into(),
            kind,
            client: client.into(),
            server: server.into(),
            server_ip: ip,
            port: 7100 + i as u16,
            seed: seed ^ (i as u64 + 1).wrapping_mul(0x51_7cc1_b727_220a),
        })
        .collect()
}

/// The soak's world: where splitnet runs, the VM socket, and the moment
/// the soak started (every time in the report is seconds since it).
pub struct Lab {
    pub exe: PathBuf,
    pub run_dir: PathBuf,
    pub vm_socket: PathBuf,
    pub cross: crosshost::CrossHost,
    /// testpmd's VM runs (its flow is in the soak).
    pub dpdk_vm: bool,
    pub t0: Instant,
    /// Held by a hot-plug cycle for its length, and by an event of hv's
    /// alone ([`hv_events`]).
    hv_quiet: std::sync::RwLock<()>,
}

impl Lab {
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn toolstack(&self) -> Result<Toolstack> {
        let p = toolstack::daemon::socket_path(&self.run_dir);
        Toolstack::connect(&p).map_err(|e| anyhow!("{e}"))
    }

    /// `splitnet exec domain -- cmd`, its output.
    fn exec(&self, domain: &str, cmd: &[&str]) -> Result<String> {
        let mut args = vec!["exec", domain, "--"];
        args.extend_from_slice(cmd);
        crate::splitnet(&self.exe, &self.run_dir, &args)
    }

    /// Whether both ends of every netfront guest's vif 0 are Connected.
    fn all_connected(&self, ts: &mut Toolstack, s: &hv::status::SystemStatus) -> bool {
        NETFRONT_GUESTS
            .iter()
            .all(|g| crate::faults::vif_connected_in(ts, s, g, "drv"))
    }

    /// Waits up to 20 s, looking every 10 ms, for every vif to be
    /// Connected again; `check` judges each status first, and its error
    /// ends the wait. `after` names what the 20 s count from.
    fn await_connected(
        &self,
        ts: &mut Toolstack,
        after: &str,
        mut check: impl FnMut(&hv::status::SystemStatus) -> Result<()>,
    ) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = ts.status().map_err(|e| anyhow!("status: {e}"))?;
            check(&s)?;
            if self.all_connected(ts, &s) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not every vif was Connected 20 s after {after}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn say(opts: &SoakOptions, msg: &str) {
    if opts.progress {
        eprintln!("bench soak: {msg}");
    }
}

/// Brings the topology up, runs the soak and brings it down.
pub fn run(opts: &SoakOptions) -> Result<SoakReport> {
    // Ctrl-C (or SIGTERM) ends the run early, everything taken down and
    // the report written for the time it ran.
    sys::catch_interrupts().map_err(|e| anyhow!("catching Ctrl-C: {e}"))?;
    std::fs::create_dir_all(&opts.run_dir)?;
    let vm_socket = opts.run_dir.join("soak-vm1.sock");
    let dpdk_socket = opts.run_dir.join("soak-vm2.sock");
    let topo = opts.run_dir.join("soak.toml");
    std::fs::write(&topo, topology(&vm_socket, &dpdk_socket))?;
    let mut up = Up::with(
        &opts.exe,
        &opts.run_dir,
        &["--config", &topo.to_string_lossy()],
    )?;
    let www = opts.run_dir.join("soak-www");
    std::fs::create_dir_all(&www)?;
    let blob = random_file(&www, BLOB_MIB)?;
    let want = sha256(&blob)?;
    serve_http(&mut up, &www)?;
    for g in ["guest1", "guest2", "guest3", "guest4", "guest5"] {
        crate::netenv::wait_reachable(
            &toolstack::host::netns_name(g),
            "10.77.0.254",
            Duration::from_secs(30),
        )
        .map_err(|e| anyhow!("{e}\n{}", guest_state(opts, g)))?;
    }
    let dpdk = dpdk_vm(opts, &dpdk_socket)?;
    say(opts, "underlay hosts a and b up, BGP EVPN between them");
    let cross = crosshost::CrossHost::up(&opts.exe, &opts.run_dir)?;
    let lab = Lab {
        exe: opts.exe.clone(),
        run_dir: opts.run_dir.clone(),
        vm_socket,
        cross,
        dpdk_vm: dpdk.is_some(),
        t0: Instant::now(),
        hv_quiet: Default::default(),
    };
    let r = soak(opts, &lab, &want);
    let _ = std::fs::remove_dir_all(&www);
    r
}

/// testpmd as the DPDK VM, listening on `socket`, once the driver domain
/// has dialed it and the wire host knows its MAC; None (its flow left out,
/// and said) where DPDK is not installed.
fn dpdk_vm(opts: &SoakOptions, socket: &Path) -> Result<Option<vm::ReflectingVm>> {
    let Some(bin) = crate::virtio::testpmd_binary() else {
        say(
            opts,
            "dpdk-testpmd is not installed (Debian package dpdk): no DPDK VM, no wire-vm2 flow",
        );
        return Ok(None);
    };
    let mut v = vm::ReflectingVm::start(&bin, socket)?;
    vm::pin_neighbor(&toolstack::host::netns_name("wire"))?;
    let mut exited = None;
    let what = format!("the driver domain to dial {}'s testpmd", vm::NAME);
    wait_for(&what, Duration::from_secs(60), || {
        if let Err(e) = v.check_running() {
            exited = Some(e);
            return true;
        }
        let st = crate::splitnet(&opts.exe, &opts.run_dir, &["status", "--json"])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        st.is_some_and(|st| {
            st["vhost_vifs"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|x| x["name"] == vm::NAME && x["connected"] == true)
            })
        })
    })?;
    if let Some(e) = exited {
        return Err(e);
    }
    say(
        opts,
        &format!(
            "{} (testpmd, 5tswap) connected; its CPU: {}",
            vm::NAME,
            v.limit()
        ),
    );
    Ok(Some(v))
}

/// hv's resources once a few hot-plug cycles have grown what grows on
/// first use and its counts have held still for a second (every vif's
/// counters published, the last detach let go of by its guest), or
/// after 10 s.
fn reference(lab: &Lab) -> Result<crate::faults::Resources> {
    let mut ts = lab.toolstack()?;
    for _ in 0..5 {
        let h = ts
            .network_attach("guest1", None, None)
            .map_err(|e| anyhow!("{e}"))?;
        ts.network_detach("guest1", h).map_err(|e| anyhow!("{e}"))?;
    }
    let mut last = resources(&mut ts)?;
    let mut still_since = Instant::now();
    let _ = wait_for("hv's counts to hold still", Duration::from_secs(10), || {
        let Ok(now) = resources(&mut ts) else {
            return false;
        };
        if !last.counts_back(&now) || last.store_paths != now.store_paths {
            (last, still_since) = (now, Instant::now());
        }
        still_since.elapsed() >= Duration::from_secs(1)
    });
    Ok(last)
}

fn soak(opts: &SoakOptions, lab: &Lab, want: &str) -> Result<SoakReport> {
    let before = reference(lab)?;
    let namespaces_before = status_diff::namespaces()?;
    let status_before = status_diff::status_json(lab)?;
    let probe = machine::Probe::start(lab.t0, opts.progress)?;
    let mut flows = Flows::start(opts.seed, lab.cross.server_ip, lab.dpdk_vm, lab.t0)?;
    say(
        opts,
        &format!("{} flows running; seed {}", flows.running.len(), opts.seed),
    );
    // Not the victim's flows (stopped for up to 6 s on purpose), nor the
    // cross-host one (a dropped BGP session stops it for about 7 s).
    let watched = flows
        .running
        .iter()
        .filter(|f| ![&f.spec.client, &f.spec.server].contains(&&events::VICTIM.to_string()))
        .filter(|f| !f.spec.client.contains('/'))
        .map(|f| stalls::Watched {
            name: f.spec.name.clone(),
            netns: [&f.spec.client, &f.spec.server].map(|d| crosshost::netns_of(d)),
            progress: f.progress.clone(),
        })
        .collect();
    let watchdog = stalls::Watchdog::start(lab.t0, watched, opts.run_dir.clone(), opts.progress)?;
    let stop_side = AtomicBool::new(false);
    let (windows, quiet, churn, downloads) = std::thread::scope(|s| -> Result<_> {
        let churn = s.spawn(|| lab.churn(opts.seed ^ 0xc4, &stop_side));
        let downloads = s.spawn(|| lab.downloads(BLOB_MIB, want, &stop_side));
        let (windows, quiet) = events_loop(opts, lab);
        stop_side.store(true, Ordering::Relaxed);
        let churn = churn.join().map_err(|_| anyhow!("churn panicked"))?;
        let downloads = downloads
            .join()
            .map_err(|_| anyhow!("downloads panicked"))?;
        Ok((windows, quiet, churn, downloads))
    })?;
    let end = Instant::now();
    let machine = probe.finish();
    let stall_dumps = watchdog.finish();
    flows.stop();
    let running = std::mem::take(&mut flows.running);
    say(opts, "traffic stopped; reading what is left");
    let mut ts = lab.toolstack()?;
    let after = settled(&mut ts, &before)?;
    Ok(SoakReport::new(report::Inputs {
        seed: opts.seed,
        minutes: opts.minutes,
        seconds: lab.secs(end),
        flows: running
            .iter()
            .map(|f| report::FlowInput::of(f, end))
            .collect(),
        windows,
        quiet,
        churn,
        downloads,
        before,
        after,
        namespaces_before,
        namespaces_after: status_diff::namespaces()?,
        status_before,
        status_after: status_diff::status_json(lab)?,
        machine,
        stall_dumps,
    }))
}

/// Spans of the run, (start, end) in seconds since its start.
type Spans = Vec<(f64, f64)>;

/// Quiet spells and events, in turn, until the soak's time is up (a step
/// starts only if its quiet spell and event fit before the end); the
/// events' windows and the quiet spells. An event that fails ends the
/// run early, its window holding the error for the report to judge.
fn events_loop(opts: &SoakOptions, lab: &Lab) -> (Vec<events::Window>, Spans) {
    let mut plan = Plan::new(opts.seed);
    let deadline = lab.t0 + Duration::from_secs_f64(opts.minutes * 60.0);
    let (mut windows, mut quiet) = (Vec::new(), Vec::new());
    loop {
        let step = plan.next_step();
        let needs = Duration::from_millis(step.quiet_ms + step.length_ms + 3000);
        if Instant::now() + needs > deadline || sys::interrupted() {
            break;
        }
        let from = lab.secs(Instant::now());
        nap(Duration::from_millis(step.quiet_ms));
        quiet.push((from, lab.secs(Instant::now())));
        if sys::interrupted() {
            break;
        }
        let w = lab.run_event(&step);
        say(
            opts,
            &format!("{:>6.1} s  {}: {}", w.start_s, w.name, w.detail),
        );
        let failed = w.error.is_some();
        windows.push(w);
        if failed {
            return (windows, quiet);
        }
    }
    let from = lab.secs(Instant::now());
    if let Some(rest) = deadline.checked_duration_since(Instant::now()) {
        nap(rest);
    }
    quiet.push((from, lab.secs(Instant::now())));
    if sys::interrupted() {
        say(opts, "interrupted: stopping early");
    }
    (windows, quiet)
}

/// Sleeps `d`, or less if Ctrl-C comes.
fn nap(d: Duration) {
    let end = Instant::now() + d;
    while !sys::interrupted() {
        let Some(left) = end.checked_duration_since(Instant::now()) else {
            return;
        };
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// The flows under way; stopped and joined when dropped, so that no
/// error path leaves their threads running.
struct Flows {
    stop: Arc<AtomicBool>,
    running: Vec<flows::Running>,
}

impl Flows {
    /// Starts every flow and waits until each has delivered bytes.
    fn start(seed: u64, cross_ip: Ipv4Addr, dpdk_vm: bool, t0: Instant) -> Result<Flows> {
        let mut f = Flows {
            stop: Arc::new(AtomicBool::new(false)),
            running: Vec::new(),
        };
        for spec in flow_specs(seed, cross_ip, dpdk_vm) {
            f.running.push(flows::start(spec, t0, f.stop.clone())?);
        }
        for r in &f.running {
            let what = format!("flow {} to deliver its first bytes", r.spec.name);
            wait_for(&what, Duration::from_secs(30), || {
                r.progress.summary(Instant::now()).verified > 0
            })?;
        }
        Ok(f)
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for r in &mut self.running {
            r.join();
        }
    }
}

impl Drop for Flows {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `splitnet bench soak`.
pub struct SoakSuite;

impl harness::Suite for SoakSuite {
    fn name(&self) -> &'static str {
        "soak"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let seed = a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
        let minutes = a.minutes.unwrap_or(if a.quick { 3.0 } else { 10.0 });
        if !(minutes.is_finite() && minutes > 0.0) {
            anyhow::bail!("bench soak: --minutes must be a positive number, not {minutes}");
        }
        let opts = SoakOptions {
            exe: a.exe.clone(),
            run_dir: a.bench_dir(),
            minutes,
            seed,
            progress: true,
        };
        let r = run(&opts)?;
        let mut out = Output::of(&r, r.table(), r.svg())?;
        // A failed soak carries the ends of hv's and the driver domain's
        // logs, so that a run in CI can be read from its report alone.
        out.failed = r
            .verdict()
            .err()
            .map(|e| format!("{e}\n{}", log_tails(&opts.run_dir)));
        Ok(out)
    }
}

/// The last `n` lines of log `name` in run directory `rd`, headed.
fn log_tail(rd: &std::path::Path, name: &str, n: usize) -> String {
    let t = toolstack::daemon::log_tail(&rd.join(name), n);
    let count = if t.is_empty() {
        0
    } else {
        t.split('\n').count()
    };
    format!("{name}, its last {count} lines:\n{t}")
}

/// The last lines of hv's and drv's logs in run directory `rd`.
fn log_tails(rd: &std::path::Path) -> String {
    format!(
        "{}\n{}",
        log_tail(rd, "hv.log", 40),
        log_tail(rd, "drv.log", 20)
    )
}

/// What a user would read of guest `g` that does not reach the wire host:
/// its logs (and its device model's, for an emulated NIC), hv's and the
/// driver domain's, and `splitnet status` (its NIC's and vif's counters).
fn guest_state(opts: &SoakOptions, g: &str) -> String {
    let rd = &opts.run_dir;
    let status = crate::splitnet(&opts.exe, rd, &["status"])
        .unwrap_or_else(|e| format!("splitnet status failed: {e}"));
    // An emulated NIC's device side: an HVM guest's device model, or a
    // hosted guest's VMApp.
    let device: Vec<String> = ["dm", "vmapp"]
        .iter()
        .map(|side| format!("{g}-{side}.log"))
        .filter(|name| rd.join(name).exists())
        .map(|name| log_tail(rd, &name, 20))
        .collect();
    format!(
        "{}\n{}\n{}\nsplitnet status:\n{status}",
        log_tail(rd, &format!("{g}.log"), 20),
        device.join("\n"),
        log_tails(rd)
    )
}
