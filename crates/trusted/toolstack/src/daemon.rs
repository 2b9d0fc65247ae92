//! The `hv` daemon: builds a topology out of processes, namespaces and
//! cgroups, supervises the domains and serves the toolstack socket.

mod resume;

pub use resume::{resume, ResumeConfig};

use crate::cgroup::{sweep_cgroups, CgroupLayout};
use crate::host;
use crate::notify::Notifier;
use crate::supervisor::Supervisor;
use crate::topology::Topology;
use crate::uplink::Uplinks;
use hv::core::Hypervisor;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use sys::signals::Blocked;
use sys::{SeqPacket, SeqPacketListener};

/// Where hv keeps its socket, pid file and logs by default.
pub const DEFAULT_RUN_DIR: &str = "/run/splitnet";
pub use crate::host::{socket_path, PHYS_PORT, WIRE_IF};
pub use crate::store::{setup_vif, Store};
pub use hypercall::launch::{ENV_HOSTED_FDS, ENV_HVM_DM_FD, ENV_HV_FD, ENV_VMAPP_FDS};

pub use crate::logs::log_tail;

/// What the daemon needs.
pub struct DaemonConfig {
    pub topology: Topology,
    pub run_dir: PathBuf,
    /// The `splitnet-domain` executable, run inside each domain's namespace.
    pub exe: PathBuf,
    /// The service manager to tell when the topology is up and when hv
    /// stops (`$NOTIFY_SOCKET`), if any.
    pub notify: Option<Notifier>,
    /// SIGTERM, SIGINT and SIGHUP, blocked by the caller before any thread
    /// started: the first two stop hv as `splitnet down` does; SIGHUP
    /// applies the topology file again (`splitnet apply`).
    pub signals: Option<Blocked>,
    /// The topology's file and the tuning applied to it, for apply.
    pub source: crate::supervisor::Source,
    /// hv's arguments, for the program an upgrade of hv runs next.
    pub argv: Vec<String>,
}

fn same_netns(pid: i32) -> bool {
    let mine = fs::read_link("/proc/self/ns/net").ok();
    let theirs = fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    mine.is_some() && mine == theirs
}

/// Runs the daemon until a toolstack `Shutdown` request or a signal.
pub fn run(mut cfg: DaemonConfig) -> Result<(), String> {
    let sock = socket_path(&cfg.run_dir);
    fs::create_dir_all(&cfg.run_dir)
        .map_err(|e| format!("creating {}: {e}", cfg.run_dir.display()))?;
    if SeqPacket::connect(&sock).is_ok() {
        return Err(format!("hv is already running ({})", sock.display()));
    }
    let _ = fs::remove_file(&sock);
    check_fd_limit(&cfg.topology)?;
    crate::rootless::prepare(&cfg.topology)?;
    let notify = Arc::new(Lifecycle::new(cfg.notify.take()));
    notify.status(&format!("starting topology {:?}", cfg.topology.name));
    // Before anything else is made: what an earlier hv left is undone, and
    // the keeper watches this one.
    let uplinks = Uplinks::start(&cfg.run_dir, &cfg.topology)?;
    let listener = SeqPacketListener::bind(&sock).map_err(|e| e.to_string())?;
    {
        // Only hv's own user (root, or the rootless user) may connect; the
        // peer check below says the same.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&sock, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", sock.display()))?;
    }
    fs::write(cfg.run_dir.join("hv.pid"), std::process::id().to_string())
        .map_err(|e| e.to_string())?;
    // Last before the domains: an early return above leaves nothing to give
    // back; what a killed hv added is given back by the next one.
    let huge = crate::hugepages::reserve(&cfg.topology, &cfg.run_dir);

    let hv = Hypervisor::new();
    hv.set_verbose(true);
    hv.set_batches_follow_caller(crate::topology::HypercallCpu::follows_caller(&cfg.topology));
    hv.set_info("topology", &cfg.topology.name);
    if crate::rootless::active() {
        hv.set_info("rootless", "in a user namespace of the invoking user");
    }
    let layout = cgroup_layout(&hv);
    let sup = Supervisor::new(
        &hv,
        cfg.topology.clone(),
        cfg.source.clone(),
        cfg.run_dir.clone(),
        cfg.exe.clone(),
        layout.clone(),
        uplinks.clone(),
    );
    sup.set_handover(handover_of(&listener, notify.notifier(), &cfg.argv, 0));
    if let Some(sigs) = cfg.signals.take() {
        watch_signals(&hv, &sup, sigs, notify.clone())?;
    }
    let result = sup.build();
    if let Err(e) = &result {
        hv::log!(Error, "bringing up the topology failed: {e}");
        notify.stopping(&format!("bringing up the topology failed: {e}"));
        hv.shutdown();
    } else {
        serve(&hv, &sup, listener, &cfg, &notify);
        if let Err(e) = sup.guard() {
            hv::log!(
                Warning,
                "no guardian: a crash of hv would take its domains: {e}"
            );
        }
        hv.wait_shutdown();
        sup.release_guardian();
        notify.stopping("stopping: its domains are gone");
        sup.release_containers();
    }
    // Its wire hosts as `apply` left them.
    stop(
        &sup.current_topology(),
        &cfg.run_dir,
        &uplinks,
        &layout,
        huge,
    );
    // A signal that stopped hv during start-up is a clean stop.
    result.or_else(|e| if notify.signalled() { Ok(()) } else { Err(e) })
}

/// Domains are gone: removes what belongs to the topology as a whole.
fn stop(
    topology: &Topology,
    run_dir: &Path,
    uplinks: &Uplinks,
    layout: &CgroupLayout,
    huge: crate::hugepages::Reservation,
) {
    uplinks.finish();
    for w in &topology.wires {
        host::netns_del(&host::netns_name(&w.name));
    }
    sweep_cgroups(layout);
    huge.release();
    let _ = fs::remove_file(socket_path(run_dir));
    let _ = fs::remove_file(run_dir.join("hv.pid"));
    hv::log!(Notice, "stopped");
}

/// What the supervisor needs for an upgrade of hv: the listener's
/// descriptor, the service manager's socket, hv's arguments, and the
/// upgrades so far.
fn handover_of(
    listener: &SeqPacketListener,
    notifier: Option<&Notifier>,
    argv: &[String],
    attempts: u64,
) -> crate::supervisor::HvHandover {
    use std::os::fd::{AsFd, AsRawFd};
    crate::supervisor::HvHandover {
        daemon: crate::handover::DaemonImage {
            listener: listener.as_fd().as_raw_fd(),
            notify: notifier.map(|n| n.value().to_string()),
            argv: argv.to_vec(),
            exe: None,
            guardian: None,
        },
        attempts: attempts.into(),
    }
}

/// The cgroup hierarchies hv may write; without any, domains are tracked
/// by pid, and hv says so in its log and in `status`.
fn cgroup_layout(hv: &Hypervisor) -> CgroupLayout {
    let (layout, unwritable) = CgroupLayout::detect().writable();
    for why in &unwritable {
        hv::log!(Notice, "no cgroup for the domains in {why}");
    }
    if layout.is_empty() {
        hv::log!(
            Notice,
            "domains are tracked by pid, their CPU time read from /proc (no cgroup hierarchy hv may write; as root, delegate one)"
        );
        hv.set_info("cgroups", "none: domains tracked by pid");
    }
    layout
}

/// The topology is built: hv serves the toolstack, and a service manager
/// is told `READY=1` once every domain and vif is up.
fn serve(
    hv: &Arc<Hypervisor>,
    sup: &Arc<Supervisor>,
    listener: SeqPacketListener,
    cfg: &DaemonConfig,
    notify: &Arc<Lifecycle>,
) {
    hv.set_supervisor(sup.clone());
    notify.built();
    let hv2 = hv.clone();
    let accepting = hv.spawn_guarded("hv-accept".into(), None, move || accept_loop(hv2, listener));
    if let Err(e) = accepting {
        hv::log!(Error, "cannot serve the toolstack: {e}");
    }
    hv::log!(Notice, "topology {:?} is built", cfg.topology.name);
    if notify.wanted() {
        let (hv2, n) = (hv.clone(), notify.clone());
        let (topo, rd) = (cfg.topology.clone(), cfg.run_dir.clone());
        let ready = hv.spawn_guarded("hv-ready".into(), None, move || {
            wait_ready(&hv2, &topo, &rd, &n)
        });
        if let Err(e) = ready {
            hv::log!(Error, "cannot watch for readiness: {e}");
        }
    }
}

/// Waits until the topology is up (what `splitnet up` waits for), saying
/// what it waits for as the service's status, then tells `READY=1`. A vif
/// its driver domain gave up never connects: hv is up without it, and its
/// status line says so (what a domain writes in the store must not keep
/// hv from starting, nor stop it).
fn wait_ready(hv: &Arc<Hypervisor>, topo: &Topology, rd: &Path, notify: &Lifecycle) {
    let mut said = String::new();
    while !hv.is_shutting_down() {
        // hv answers its own status as it answers the CLI's, with each
        // namespace's interfaces: a guest is up once its vif's is.
        if let Ok(v) = crate::status::collect(rd) {
            let p = crate::readiness::progress(topo, &v);
            if p.waiting.is_empty() {
                let mut line = up_line(topo, &v);
                for e in &p.given_up {
                    hv::log!(Error, "{e}");
                }
                if !p.given_up.is_empty() {
                    line += &format!(", without {}", p.given_up.join("; "));
                }
                hv::log!(Notice, "{line}");
                notify.ready(&line);
                return;
            }
            let now = format!("waiting for {}", p.waiting.join(", "));
            if now != said {
                notify.status(&now);
                said = now;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `topology "t" is up: 3 domains, 2 vifs`.
fn up_line(topo: &Topology, v: &serde_json::Value) -> String {
    let count = |k: &str| v[k].as_array().map_or(0, Vec::len);
    format!(
        "topology {:?} is up: {} domains, {} vifs",
        topo.name,
        count("domains"),
        count("vifs")
    )
}

/// SIGTERM or SIGINT stops hv, as `splitnet down` does; SIGHUP applies
/// its topology file again.
fn watch_signals(
    hv: &Arc<Hypervisor>,
    sup: &Arc<Supervisor>,
    sigs: Blocked,
    notify: Arc<Lifecycle>,
) -> Result<(), String> {
    let (hv2, sup) = (hv.clone(), sup.clone());
    let pending = sigs
        .signal_fd()
        .map_err(|e| format!("waiting for signals: {e}"))?;
    hv.spawn_guarded("hv-signals".into(), None, move || loop {
        // A signal is taken only inside hv's gate: one sent while an
        // upgrade of hv closes it stays pending (blocked) across the
        // `execve`, for the next program to take.
        if let Err(e) = sys::poll_readable(&[std::os::fd::AsFd::as_fd(&pending)], None) {
            hv::log!(Error, "waiting for signals: {e}");
            return;
        }
        let _pass = hv2.enter_gate(hv::core::GateKind::Long);
        match pending.take() {
            Ok(None) => {}
            Ok(Some(libc::SIGHUP)) => reload(&hv2, &sup, &notify),
            Ok(Some(sig)) if sig == libc::SIGTERM || sig == libc::SIGINT => {
                let name = if sig == libc::SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                hv::log!(Notice, "{name}: taking the topology down");
                notify.signal();
                notify.stopping(&format!("{name}: taking the topology down"));
                hv2.shutdown();
                return;
            }
            Ok(Some(_)) => {}
            Err(e) => {
                hv::log!(Error, "waiting for signals: {e}");
                return;
            }
        }
    })
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// SIGHUP: the topology file, applied again (`RELOADING=1` meanwhile, then
/// `READY=1` whether it applied or was refused, which the log says), on a
/// thread of its own so that SIGTERM is taken at once meanwhile.
fn reload(hv: &Arc<Hypervisor>, sup: &Arc<Supervisor>, notify: &Arc<Lifecycle>) {
    if !notify.is_up() {
        hv::log!(
            Warning,
            "SIGHUP before the topology is up: nothing applied; send it again later"
        );
        return;
    }
    let (sup, n, hv2) = (sup.clone(), notify.clone(), hv.clone());
    let started = hv.spawn_guarded("hv-reload".into(), None, move || {
        // Inside hv's gate, as a toolstack request is: no upgrade of hv
        // cuts an apply short.
        let _pass = hv2.enter_gate(hv::core::GateKind::Long);
        n.reloading("SIGHUP: applying the topology file again");
        let status = match sup.apply(None, false, &[]) {
            Ok(plan) => {
                for line in plan.lines() {
                    hv::log!(Notice, "SIGHUP: {line}");
                }
                format!("applied: {}", plan.lines().collect::<Vec<_>>().join("; "))
            }
            Err(e) => {
                hv::log!(Error, "SIGHUP: {e}");
                format!("the topology file was not applied: {}", e.message)
            }
        };
        n.ready(&status);
    });
    if let Err(e) = started {
        hv::log!(Error, "SIGHUP: {e}");
    }
}

/// Serves toolstack connections on `listener`, for root in hv's own
/// network namespace only (the escape tests run it too).
pub fn accept_loop(hv: Arc<Hypervisor>, listener: SeqPacketListener) {
    loop {
        if sys::poll_readable(&[std::os::fd::AsFd::as_fd(&listener)], None).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        // A connection is taken only inside hv's gate, and recorded before
        // the pass goes: an upgrade of hv carries it, or leaves it waiting
        // on the listener for the next program.
        let _pass = hv.enter_gate(hv::core::GateKind::Short);
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        // Only the host's root may act as the toolstack.
        match conn.peer_cred() {
            Ok(c) if c.uid == 0 && same_netns(c.pid) => {
                if let Err(e) = hv.spawn_toolstack(conn) {
                    hv::log!(Warning, "refused a toolstack connection: {e}");
                }
            }
            Ok(c) => hv::log!(
                Warning,
                "refused a toolstack connection from pid {} uid {}",
                c.pid,
                c.uid
            ),
            Err(e) => hv::log!(Warning, "refused a toolstack connection: {e}"),
        }
    }
}

/// Raises hv's descriptor limit to the hard limit and checks that it holds
/// what the topology needs (its domains inherit the same limit).
fn check_fd_limit(t: &Topology) -> Result<(), String> {
    let have = sys::raise_fd_limit().map_err(|e| e.to_string())?;
    let need = t.descriptors_needed();
    if have < need {
        return Err(format!(
            "quota: hv may open {have} descriptors (the hard RLIMIT_NOFILE), and topology {:?} needs about {need}: raise the hard limit (ulimit -Hn {need} as root, or LimitNOFILE= in a service)",
            t.name
        ));
    }
    Ok(())
}

/// What hv tells its service manager, and whether a signal stopped it.
struct Lifecycle {
    notifier: Option<Notifier>,
    stopping: std::sync::atomic::AtomicBool,
    signalled: std::sync::atomic::AtomicBool,
    built: std::sync::atomic::AtomicBool,
    ready: std::sync::atomic::AtomicBool,
}

impl Lifecycle {
    fn new(notifier: Option<Notifier>) -> Lifecycle {
        Lifecycle {
            notifier,
            stopping: Default::default(),
            signalled: Default::default(),
            built: Default::default(),
            ready: Default::default(),
        }
    }

    fn wanted(&self) -> bool {
        self.notifier.is_some()
    }

    fn notifier(&self) -> Option<&Notifier> {
        self.notifier.as_ref()
    }

    fn tell(&self, what: &str, send: impl FnOnce(&Notifier) -> std::io::Result<()>) {
        if let Some(n) = &self.notifier {
            if let Err(e) = send(n) {
                hv::log!(Warning, "telling the service manager {what}: {e}");
            }
        }
    }

    fn status(&self, s: &str) {
        self.tell("STATUS", |n| n.status(s));
    }

    fn ready(&self, s: &str) {
        self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
        self.tell("READY=1", |n| n.ready(s));
    }

    fn reloading(&self, s: &str) {
        self.tell("RELOADING=1", |n| n.reloading(s));
    }

    /// The topology is built: an apply may run.
    fn built(&self) {
        self.built.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Up: built, and `READY=1` sent if a service manager waits for it.
    fn is_up(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.built.load(Ordering::SeqCst) && (!self.wanted() || self.ready.load(Ordering::SeqCst))
    }

    /// `STOPPING=1`, once.
    fn stopping(&self, s: &str) {
        use std::sync::atomic::Ordering;
        if !self.stopping.swap(true, Ordering::SeqCst) {
            self.tell("STOPPING=1", |n| n.stopping(s));
        }
    }

    fn signal(&self) {
        self.signalled
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn signalled(&self) -> bool {
        self.signalled.load(std::sync::atomic::Ordering::SeqCst)
    }
}
