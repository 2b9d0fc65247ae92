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

/// What the new program took over, not yet served.
struct TakenOver {
    hv: Arc<Hypervisor>,
    sup: Arc<Supervisor>,
    uplinks: Arc<Uplinks>,
    layout: crate::host::CgroupLayout,
    topology: Topology,
    listener: SeqPacketListener,
    notifier: Option<Notifier>,
    /// Toolstack connections the old program served.
    conns: Vec<SeqPacket>,
}

/// Runs the daemon from the image at `path` that the program this process
/// ran before left: its domains adopted, not built. When hv cannot take
/// them over, the old program is run again on the same image.
pub fn resume(mut cfg: ResumeConfig, path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let image = Image::parse(&text)?;
    let (attempt, began, rollback) = (image.attempt, image.began_ns, image.rollback.clone());
    let (from, to, daemon) = (image.from.clone(), image.to.clone(), image.daemon.clone());
    let t0 = std::time::Instant::now();
    let (hv, conns) = match Hypervisor::adopt(image.hv) {
        Ok(adopted) => adopted,
        Err(e) => return roll_back(&text, path, &from, &daemon, &e.message, rollback.is_some()),
    };
    let _ = fs::remove_file(path);
    let t = take_over(&cfg, hv, conns, image.sup, &daemon, attempt)?;
    let gap_us = crate::handover::now_ns().saturating_sub(began) / 1000;
    let fact = match rollback {
        None => format!(
            "{attempt} ok {gap_us} us: {} took over from {}",
            to.display(),
            from.display()
        ),
        Some(why) => format!(
            "{attempt} rolled back: {} could not take over: {why}",
            to.display()
        ),
    };
    // Before anyone is served: a request waiting since the old program
    // (another upgrade) must find this outcome recorded.
    record_outcome(&t.hv, attempt, &fact);
    let notify = Arc::new(Lifecycle::new(t.notifier));
    if let Some(sigs) = cfg.signals.take() {
        watch_signals(&t.hv, &t.sup, sigs, notify.clone())?;
    }
    serve(&t.hv, &t.sup, t.listener, t.conns)?;
    notify.built();
    hv::log!(
        Notice,
        "upgrade {fact} (its domains adopted in {:.1} ms)",
        t0.elapsed().as_secs_f64() * 1e3
    );
    notify.ready(&format!("upgrade {fact}"));
    t.hv.wait_shutdown();
    notify.stopping("stopping: its domains are gone");
    t.sup.release_containers();
    let huge = crate::hugepages::Reservation::carried(&cfg.run_dir);
    stop(&t.topology, &cfg.run_dir, &t.uplinks, &t.layout, huge);
    Ok(())
}

/// The supervisor, uplinks and listener of the image, around `hv`, which
/// adopted its domains.
fn take_over(
    cfg: &ResumeConfig,
    hv: Arc<Hypervisor>,
    conns: Vec<SeqPacket>,
    image: crate::supervisor::SupervisorImage,
    daemon: &DaemonImage,
    attempt: u64,
) -> Result<TakenOver, String> {
    hv.set_verbose(true);
    let take = |fd| sys::take_inherited_fd(fd).map_err(|e| format!("descriptor {fd}: {e}"));
    let listener = SeqPacketListener::from_fd(take(daemon.listener)?);
    let keeper = image.uplinks.keeper.map(|k| take(k.1)).transpose()?;
    let topology = image.topology.clone();
    let uplinks = Uplinks::adopt(&cfg.run_dir, &topology, &image.uplinks, keeper);
    let layout = cgroup_layout(&hv);
    let dirs = (cfg.run_dir.clone(), cfg.exe.clone());
    let sup = Supervisor::adopt(
        &hv,
        image,
        cfg.tuning,
        dirs,
        layout.clone(),
        uplinks.clone(),
    )
    .map_err(|e| format!("taking over the domains: {e}"))?;
    let notifier = daemon.notify.as_deref().and_then(|v| Notifier::to(v).ok());
    sup.set_handover(handover_of(
        &listener,
        notifier.as_ref(),
        &cfg.argv,
        attempt,
    ));
    Ok(TakenOver {
        hv,
        sup,
        uplinks,
        layout,
        topology,
        listener,
        notifier,
        conns,
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

/// The new program could not take over (`why`): the old one (`from`) runs
/// again on the same image, told why. If this is already the old program
/// taking back, there is nothing left to run.
fn roll_back(
    text: &str,
    path: &Path,
    from: &Path,
    daemon: &DaemonImage,
    why: &str,
    already: bool,
) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    if already {
        return Err(format!("taking back hv's state failed too: {why}"));
    }
    hv::log!(
        Error,
        "cannot take over hv's state ({why}): giving it back to {}",
        from.display()
    );
    let mut v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    v["rollback"] = serde_json::Value::String(why.to_string());
    fs::write(path, v.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    let e = std::process::Command::new(from)
        .args(&daemon.argv)
        .arg(crate::handover::RESUME_ARG)
        .arg(path)
        .exec();
    Err(format!(
        "cannot take over hv's state ({why}), nor run {} again: {e}",
        from.display()
    ))
}
