//! The daemon as the program an upgrade of hv started (`crate::handover`):
//! it adopts the image the old program left instead of building a
//! topology, records the upgrade's outcome, and serves on; or, when it
//! cannot adopt the image, runs the old program again on it.

use super::{accept_loop, cgroup_layout, handover_of, stop, watch_signals, Lifecycle};
use crate::guardian::Guardian;
use crate::handover::{record_outcome, Crash, DaemonImage, Image};
use crate::notify::Notifier;
use crate::supervisor::Supervisor;
use crate::uplink::Uplinks;
use hv::core::Hypervisor;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use sys::signals::Blocked;
use sys::{SeqPacket, SeqPacketListener};

/// What a resumed daemon needs besides the image (hv's arguments as the
/// new program read them).
pub struct ResumeConfig {
    pub run_dir: PathBuf,
    pub exe: PathBuf,
    pub signals: Option<Blocked>,
    pub tuning: crate::tuning::Tuning,
    pub argv: Vec<String>,
}

/// What the new program took over besides hv, not yet served.
struct TakenOver {
    sup: Arc<Supervisor>,
    uplinks: Arc<Uplinks>,
    layout: crate::cgroup::CgroupLayout,
    listener: SeqPacketListener,
    notifier: Option<Notifier>,
}

/// Takes over the hold on the host's shared-memory THP setting that the
/// program which crashed (process `dead`) had, first thing, so that no
/// other hv puts it back under the pools it made (`thp_shmem`).
fn take_over_thp_hold(dead: i32) {
    if crate::rootless::active() {
        return;
    }
    match crate::thp_shmem::adopt(dead) {
        Ok(true) => hv::log!(
            Info,
            "huge pages: took over shmem_enabled's hold of hv pid {dead}"
        ),
        Ok(false) => {}
        Err(e) => hv::log!(Warning, "huge pages: taking over shmem_enabled's hold: {e}"),
    }
}

/// Runs the daemon from the image at `path` that the program this process
/// ran before left: its domains adopted, not built. When hv cannot take
/// them over, the old program is run again on the same image.
pub fn resume(mut cfg: ResumeConfig, path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let image = Image::parse(&text)?;
    let origin = Origin::of(&image);
    if let Some(c) = &origin.crash {
        take_over_thp_hold(c.pid);
    }
    let daemon = image.daemon.clone();
    let t0 = std::time::Instant::now();
    let originals = image.daemon_fds();
    let give_back = |why: &str| roll_back(&text, path, &daemon, why, origin.rollback.is_some());
    let adopted = match Hypervisor::adopt(image.hv) {
        Ok(a) => a,
        Err(e) => return give_back(&e.message),
    };
    // Before the batch threads start (`adopted.start`), which read it.
    let follow = crate::topology::HypercallCpu::follows_caller(&image.sup.topology);
    adopted.hv.set_batches_follow_caller(follow);
    // Every step that may fail comes before the first thread: until then
    // the old program can take everything back.
    let t = match take_over(&cfg, &adopted.hv, image.sup, &daemon, origin.attempt) {
        Ok(t) => t,
        Err(e) => return give_back(&e),
    };
    let (hv, conns) = adopted.start().map_err(|e| e.to_string())?;
    for fd in originals {
        drop(sys::take_inherited_fd(fd));
    }
    let _ = fs::remove_file(path);
    let _ = fs::write(cfg.run_dir.join("hv.pid"), std::process::id().to_string());
    let fact = origin.record(&hv);
    if let (Some(_), Some(n)) = (&origin.crash, &t.notifier) {
        // The service manager's main process is this one now (the unit's
        // `NotifyAccess=all` and `ExitType=cgroup` let it say so).
        if let Err(e) = n.send(&format!("MAINPID={}", std::process::id())) {
            hv::log!(Warning, "telling the service manager hv's new pid: {e}");
        }
    }
    let notify = Arc::new(Lifecycle::new(t.notifier));
    if let Some(sigs) = cfg.signals.take() {
        watch_signals(&hv, &t.sup, sigs, notify.clone())?;
    }
    serve(&hv, &t.sup, t.listener, conns)?;
    if let Err(e) = t.sup.guard() {
        hv::log!(
            Warning,
            "no guardian: a crash of hv would take its domains: {e}"
        );
    }
    t.sup.finish_interrupted();
    notify.built();
    let took = t0.elapsed().as_secs_f64() * 1e3;
    let what = origin.what();
    hv::log!(
        Notice,
        "{what} {fact} (its domains adopted in {took:.1} ms)"
    );
    notify.ready(&format!("{what} {fact}"));
    hv.wait_shutdown();
    t.sup.release_guardian();
    notify.stopping("stopping: its domains are gone");
    t.sup.release_containers();
    let huge = crate::hugepages::Reservation::carried(&cfg.run_dir);
    stop(
        &t.sup.current_topology(),
        &cfg.run_dir,
        &t.uplinks,
        &t.layout,
        huge,
    );
    Ok(())
}

/// How this program came to run, as its image says: an upgrade, an upgrade
/// given back, or a start after hv died.
struct Origin {
    attempt: u64,
    began_ns: u64,
    rollback: Option<String>,
    crash: Option<Crash>,
    from: PathBuf,
    to: PathBuf,
}

impl Origin {
    fn of(image: &Image) -> Origin {
        Origin {
            attempt: image.attempt,
            began_ns: image.began_ns,
            rollback: image.rollback.clone(),
            crash: image.crash.clone(),
            from: image.from.clone(),
            to: image.to.clone(),
        }
    }

    fn what(&self) -> &'static str {
        match self.crash {
            Some(_) => "restart after a crash:",
            None => "upgrade",
        }
    }

    /// Records the outcome in `status` (its facts and counters), before
    /// anyone is served: a request waiting since the old program (another
    /// upgrade) must find it. Returns the fact.
    fn record(&self, hv: &Hypervisor) -> String {
        let gap_us = crate::handover::now_ns().saturating_sub(self.began_ns) / 1000;
        let (n, to) = (self.attempt, self.to.display());
        if let Some(c) = &self.crash {
            hv.count_recovery();
            let age = self.began_ns.saturating_sub(c.recorded_ns) / 1_000_000;
            let fact = format!(
                "hv pid {} died; its domains adopted {gap_us} us later, as recorded {age} ms before",
                c.pid
            );
            hv.set_info("hv_recovery", &fact);
            if let Some((n, to)) = &c.upgrade {
                let why = format!(
                    "{n} failed: {} died before it took over; hv started again on its last record, every domain kept",
                    to.display()
                );
                record_outcome(hv, *n, &why);
            }
            return fact;
        }
        let fact = match &self.rollback {
            None => {
                hv.count_upgrade();
                format!(
                    "{n} ok {gap_us} us: {to} took over from {}",
                    self.from.display()
                )
            }
            Some(why) => format!("{n} rolled back: {to} could not take over: {why}"),
        };
        record_outcome(hv, n, &fact);
        fact
    }
}

/// The supervisor, uplinks and listener of the image around `hv`, which
/// adopted its domains; the supervisor watches every domain process again.
/// Takes duplicates only: the originals stay for a roll-back.
fn take_over(
    cfg: &ResumeConfig,
    hv: &Arc<Hypervisor>,
    image: crate::supervisor::SupervisorImage,
    daemon: &DaemonImage,
    attempt: u64,
) -> Result<TakenOver, String> {
    hv.set_verbose(true);
    let dup = |fd: i32| sys::dup_fd(&fd).map_err(|e| format!("descriptor {fd}: {e}"));
    let listener = SeqPacketListener::from_fd(dup(daemon.listener)?);
    let keeper = image.uplinks.keeper.map(|k| dup(k.1)).transpose()?;
    let guardian = (daemon.guardian)
        .map(|(pid, fd)| dup(fd).map(|c| Guardian::adopt(&cfg.run_dir, pid, c)))
        .transpose()?;
    let topology = image.topology.clone();
    let uplinks = Uplinks::adopt(&cfg.run_dir, &topology, &image.uplinks, keeper);
    let layout = cgroup_layout(hv);
    let dirs = (cfg.run_dir.clone(), cfg.exe.clone());
    let sup = Supervisor::adopt(hv, image, cfg.tuning, dirs, layout.clone(), uplinks.clone())
        .map_err(|e| format!("taking over the domains: {e}"))?;
    if let Some(g) = guardian {
        sup.adopt_guardian(g);
    }
    let notifier = daemon.notify.as_deref().and_then(|v| Notifier::to(v).ok());
    sup.set_handover(handover_of(
        &listener,
        notifier.as_ref(),
        &cfg.argv,
        attempt,
    ));
    Ok(TakenOver {
        sup,
        uplinks,
        layout,
        listener,
        notifier,
    })
}

/// Serves the toolstack again: the connections the old program served,
/// then new ones.
fn serve(
    hv: &Arc<Hypervisor>,
    sup: &Arc<Supervisor>,
    listener: SeqPacketListener,
    conns: Vec<SeqPacket>,
) -> Result<(), String> {
    hv.set_supervisor(sup.clone());
    for conn in conns {
        hv.spawn_toolstack(conn)
            .map_err(|e| format!("serving a toolstack connection: {e}"))?;
    }
    let hv2 = hv.clone();
    hv.spawn_guarded("hv-accept".into(), None, move || accept_loop(hv2, listener))
        .map(drop)
        .map_err(|e| format!("cannot serve the toolstack: {e}"))
}

/// The new program could not take over (`why`): the old one runs again,
/// through the descriptor the image keeps for it, on the same image told
/// why. If this is already the old program taking back, there is nothing
/// left to run.
fn roll_back(
    text: &str,
    path: &Path,
    daemon: &DaemonImage,
    why: &str,
    already: bool,
) -> Result<(), String> {
    if already {
        return Err(format!("taking back hv's state failed too: {why}"));
    }
    let Some(exe) = daemon.exe else {
        return Err(format!(
            "cannot take over hv's state ({why}), and the state names no old program"
        ));
    };
    hv::log!(
        Error,
        "cannot take over hv's state ({why}): giving it back to the program before"
    );
    fs::write(path, crate::handover::with_rollback(text, why)?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut args: Vec<std::ffi::OsString> = daemon.argv.iter().map(Into::into).collect();
    args.push(crate::handover::RESUME_ARG.into());
    args.push(path.into());
    let program = PathBuf::from(format!("/proc/self/fd/{exe}"));
    let e = sys::signals::exec(&program, &args);
    Err(format!(
        "cannot take over hv's state ({why}), nor run the program before again: {e}"
    ))
}
