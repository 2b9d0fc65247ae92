//! The daemon as the program an upgrade of hv started (`crate::handover`):
//! it adopts the image the old program left instead of building a
//! topology, records the upgrade's outcome, and serves on; or, when it
//! cannot adopt the image, runs the old program again on it.

use super::{accept_loop, cgroup_layout, handover_of, stop, watch_signals, Lifecycle};
use crate::handover::{record_outcome, DaemonImage, Image};
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
    layout: crate::host::CgroupLayout,
    topology: Topology,
    listener: SeqPacketListener,
    notifier: Option<Notifier>,
}

/// Runs the daemon from the image at `path` that the program this process
/// ran before left: its domains adopted, not built. When hv cannot take
/// them over, the old program is run again on the same image.
pub fn resume(mut cfg: ResumeConfig, path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let image = Image::parse(&text)?;
    let (attempt, began, rollback) = (image.attempt, image.began_ns, image.rollback.clone());
    let (from, to, daemon) = (image.from.clone(), image.to.clone(), image.daemon.clone());
    let crash = image.crash.clone();
    let t0 = std::time::Instant::now();
    let originals = image.daemon_fds();
    let give_back = |why: &str| roll_back(&text, path, &daemon, why, rollback.is_some());
    let adopted = match Hypervisor::adopt(image.hv) {
        Ok(a) => a,
        Err(e) => return give_back(&e.message),
    };
    // Every step that may fail comes before the first thread: until then
    // the old program can take everything back.
    let t = match take_over(&cfg, &adopted.hv, image.sup, &daemon, attempt) {
        Ok(t) => t,
        Err(e) => return give_back(&e),
    };
    let (hv, conns) = adopted.start().map_err(|e| e.to_string())?;
    for fd in originals {
        drop(sys::take_inherited_fd(fd));
    }
    let _ = fs::remove_file(path);
    let gap_us = crate::handover::now_ns().saturating_sub(began) / 1000;
    let _ = fs::write(cfg.run_dir.join("hv.pid"), std::process::id().to_string());
    let fact = match (rollback, &crash) {
        (_, Some(c)) => {
            hv.count_recovery();
            let age = began.saturating_sub(c.recorded_ns) / 1_000_000;
            let fact = format!(
                "hv pid {} died; its domains adopted {gap_us} us later, as recorded {age} ms before",
                c.pid
            );
            hv.set_info("hv_recovery", &fact);
            fact
        }
        (None, None) => {
            hv.count_upgrade();
            let (to, from) = (to.display(), from.display());
            format!("{attempt} ok {gap_us} us: {to} took over from {from}")
        }
        (Some(why), None) => format!(
            "{attempt} rolled back: {} could not take over: {why}",
            to.display()
        ),
    };
    // Before anyone is served: a request waiting since the old program
    // (another upgrade) must find this outcome recorded.
    if crash.is_none() {
        record_outcome(&hv, attempt, &fact);
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
    notify.built();
    let took = t0.elapsed().as_secs_f64() * 1e3;
    let what = match crash {
        Some(_) => "restart after a crash:",
        None => "upgrade",
    };
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
    stop(&t.topology, &cfg.run_dir, &t.uplinks, &t.layout, huge);
    Ok(())
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
    let topology = image.topology.clone();
    let uplinks = Uplinks::adopt(&cfg.run_dir, &topology, &image.uplinks, keeper);
    let layout = cgroup_layout(hv);
    let dirs = (cfg.run_dir.clone(), cfg.exe.clone());
    let sup = Supervisor::adopt(hv, image, cfg.tuning, dirs, layout.clone(), uplinks.clone())
        .map_err(|e| format!("taking over the domains: {e}"))?;
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
        topology,
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
