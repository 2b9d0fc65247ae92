//! What the supervisor carries across hv's upgrade in place
//! ([`SupervisorImage`]): the running topology, the vifs, the counts the
//! restart policy and `status` keep, the programs domains run, and the
//! uplinks as built. The new program watches every domain process again
//! by its pid (they are still this process's children) and registers what
//! hv asks the toolstack for on a driver domain's behalf.

use super::{Source, State, Supervisor};
use crate::cgroup::{Cgroup, CgroupLayout};
use crate::topology::{DomainKind, Topology, VifConfig};
use crate::uplink::{Uplinks, UplinksImage};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvError, HvResult};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The supervisor's state, for an upgrade of hv.
#[derive(Debug, Serialize, Deserialize)]
pub struct SupervisorImage {
    pub topology: Topology,
    /// The topology file hv was started with (`apply` reads it again).
    pub source_path: Option<PathBuf>,
    pub vifs: Vec<VifConfig>,
    pub starts: HashMap<String, u64>,
    pub crash_restarts: u64,
    pub macs_given: u32,
    pub reaps: HashMap<String, u64>,
    pub programs: HashMap<String, PathBuf>,
    pub uplinks: UplinksImage,
}

fn refuse<T>(why: impl Into<String>) -> HvResult<T> {
    Err(HvError::new(ErrorKind::InUse, why))
}

impl Supervisor {
    /// The supervisor's state; what an upgrade does not carry yet is
    /// refused by name. Call with hv's gate closed.
    pub fn image(&self) -> HvResult<SupervisorImage> {
        let topology = self.topo().clone();
        if let Some(e) = topology.emulated_nics().first() {
            return refuse(format!(
                "an upgrade of hv does not carry emulated NICs yet (guest {})",
                e.guest
            ));
        }
        let st = self.lock();
        if let Some((name, _)) = st.intents.iter().next() {
            return refuse(format!(
                "domain {name} is being restarted or destroyed; try again"
            ));
        }
        if let Some(v) = st.vhost.first() {
            return refuse(format!(
                "an upgrade of hv does not carry vhost-user vifs yet ({})",
                v.name
            ));
        }
        if let Some(c) = st.containers.first() {
            return refuse(format!(
                "an upgrade of hv does not carry containers yet ({})",
                c.config.name
            ));
        }
        let uplinks = self
            .uplinks
            .image()
            .map_err(|e| HvError::new(ErrorKind::InUse, e))?;
        Ok(SupervisorImage {
            topology,
            source_path: self.source.path.clone(),
            vifs: st.vifs.clone(),
            starts: st.starts.clone(),
            crash_restarts: st.crash_restarts,
            macs_given: st.macs_given,
            reaps: st.reaps.clone(),
            programs: st.programs.clone(),
            uplinks,
        })
    }

    /// The supervisor of an upgraded hv: `image`'s state, and every domain
    /// `hv` adopted watched again (`exe`: the domain program of the new hv).
    pub fn adopt(
        hv: &Arc<Hypervisor>,
        image: SupervisorImage,
        tuning: crate::tuning::Tuning,
        (run_dir, exe): (PathBuf, PathBuf),
        layout: CgroupLayout,
        uplinks: Arc<Uplinks>,
    ) -> Result<Arc<Supervisor>, String> {
        let source = Source {
            path: image.source_path,
            tuning,
        };
        let sup = Supervisor::new(hv, image.topology, source, run_dir, exe, layout, uplinks);
        *sup.lock() = State {
            vifs: image.vifs,
            starts: image.starts,
            crash_restarts: image.crash_restarts,
            macs_given: image.macs_given,
            reaps: image.reaps,
            programs: image.programs,
            ..State::default()
        };
        for (domid, name, pid, ns) in hv.launched() {
            let (Some(pid), Some(ns)) = (pid, ns) else {
                return Err(format!("domain {name} has no process on record"));
            };
            let driver = sup
                .config(&name)
                .is_ok_and(|d| d.kind == DomainKind::Driver);
            if driver {
                sup.port_services(hv, &name, &ns);
            }
            let cg = Cgroup::create(&sup.layout, &name).map_err(|e| e.to_string())?;
            cg.track(pid);
            sup.watch(hv, domid, &name, &ns, cg, pid, move || sys::reap(pid))?;
        }
        Ok(sup)
    }
}

/// What the daemon gives the supervisor for an upgrade of hv.
pub struct HvHandover {
    pub daemon: crate::handover::DaemonImage,
    /// Upgrades of this instance so far (carried across them).
    pub attempts: std::sync::atomic::AtomicU64,
}

/// How long an upgrade waits for the requests being served to finish (a
/// hot-plug under way waits up to `HANDSHAKE` for its vif), and for the
/// new program to read the state.
const PATIENCE: Duration = Duration::from_secs(12);
const CHECK_LIMIT: Duration = Duration::from_secs(10);

impl Supervisor {
    /// The daemon's part of an upgrade of hv; without it, one is refused.
    pub fn set_handover(&self, h: HvHandover) {
        let _ = self.handover.set(h);
    }

    /// `splitnet upgrade --hv`: hv's state recorded and read by `exe` (None:
    /// the program at hv's own path), then handed over on a thread of its
    /// own once this request is answered. Returns the upgrade's number; an
    /// error leaves hv as it was.
    pub(super) fn upgrade_hv(self: &Arc<Self>, exe: Option<String>) -> HvResult<String> {
        use std::sync::atomic::Ordering;
        let ctx = (self.handover.get())
            .ok_or_else(|| HvError::new(ErrorKind::Invalid, "this hv does not run as a daemon"))?;
        let _upgrade = (self.upgrading.try_lock())
            .map_err(|_| HvError::new(ErrorKind::InUse, "another upgrade is under way"))?;
        let _apply = (self.applying.try_lock())
            .map_err(|_| HvError::new(ErrorKind::InUse, "an apply is under way"))?;
        let hv = self.hv()?;
        let from = std::env::current_exe().map_err(|e| {
            HvError::new(ErrorKind::Internal, format!("locating hv's program: {e}"))
        })?;
        let to = exe.map_or_else(|| from.clone(), PathBuf::from);
        super::upgrade::check_program(&to)?;
        hv.close_gate(1, PATIENCE)?;
        let attempt = ctx.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let image = self.record(&hv, ctx, attempt, (from, to));
        match image {
            Ok((image, path, (recorded, read))) => {
                hv::log!(
                    Notice,
                    "upgrade {attempt}: handing over to {} (state recorded in {:.1} ms, read by it in {:.1} ms)",
                    image.to.display(),
                    recorded.as_secs_f64() * 1e3,
                    read.as_secs_f64() * 1e3
                );
                hand_over(&hv, image, path);
                Ok(attempt.to_string())
            }
            Err(e) => {
                hv.open_gate();
                hv::log!(Warning, "upgrade {attempt} refused: {}", e.message);
                Err(e)
            }
        }
    }
}

type Recorded = (crate::handover::Image, PathBuf, (Duration, Duration));

impl Supervisor {
    /// With hv's gate closed: the image of upgrade `attempt` from `from`
    /// to `to`, written to the run directory and read by `to`; how long
    /// each took.
    fn record(
        &self,
        hv: &Hypervisor,
        ctx: &HvHandover,
        attempt: u64,
        (from, to): (PathBuf, PathBuf),
    ) -> HvResult<Recorded> {
        let t0 = Instant::now();
        let image = crate::handover::Image {
            format: crate::handover::FORMAT,
            attempt,
            from,
            to,
            began_ns: crate::handover::now_ns(),
            rollback: None,
            daemon: ctx.daemon.clone(),
            sup: self.image()?,
            hv: hv.export()?,
        };
        let path = image
            .write(&self.run_dir)
            .map_err(|e| HvError::new(ErrorKind::Internal, e))?;
        let t1 = Instant::now();
        check_new_program(&image.to, &path)?;
        Ok((image, path, (t1 - t0, t1.elapsed())))
    }
}

/// Runs `to --handover-check` on the image at `path`: the new program
/// must read it, and exit, within [`CHECK_LIMIT`].
fn check_new_program(to: &std::path::Path, path: &std::path::Path) -> HvResult<()> {
    use std::process::{Command, Stdio};
    use sys::signals::SpawnUnblocked;
    let refused = |why: String| {
        HvError::new(
            ErrorKind::Invalid,
            format!("{} cannot take over: {why}", to.display()),
        )
    };
    let input = std::fs::File::open(path).map_err(|e| refused(e.to_string()))?;
    let mut child = {
        let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        Command::new(to)
            .arg(crate::handover::CHECK_ARG)
            .stdin(input)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_unblocked()
            .map_err(|e| refused(e.to_string()))?
    };
    let until = Instant::now() + CHECK_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < until => {
                // hv serves no one meanwhile: look often.
                std::thread::sleep(Duration::from_micros(100))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(refused(format!("it did not answer within {CHECK_LIMIT:?}")));
            }
            Err(e) => return Err(refused(e.to_string())),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut said = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut said);
    }
    let said = said.trim();
    Err(refused(if said.is_empty() {
        format!("it exited with {status}")
    } else {
        format!("{said} ({status})")
    }))
}

/// Once the request that asked is answered (hv's gate empty): the named
/// descriptors survive an `execve` of the new program with the image. If
/// the `execve` fails, hv goes on as it was and says why in `status`.
fn hand_over(hv: &Arc<Hypervisor>, image: crate::handover::Image, path: PathBuf) {
    let (hv2, n) = (hv.clone(), image.attempt);
    let started = hv.spawn_guarded("hv-upgrade".into(), None, move || {
        let why = if hv2.wait_gate_empty(PATIENCE) {
            exec_new_program(&image, &path)
        } else {
            "a request was still being served".to_string()
        };
        for fd in image.fds() {
            let _ = sys::set_inheritable_raw(fd, false);
        }
        let _ = std::fs::remove_file(&path);
        hv::log!(Error, "upgrade {n} failed: {why}");
        crate::handover::record_outcome(&hv2, n, &format!("{n} failed: {why}"));
        hv2.open_gate();
    });
    if let Err(e) = started {
        crate::handover::record_outcome(hv, n, &format!("{n} failed: {e}"));
        hv.open_gate();
    }
}

/// `execve`s the image's new program; returns only on failure, saying why.
fn exec_new_program(image: &crate::handover::Image, path: &std::path::Path) -> String {
    use std::os::unix::process::CommandExt;
    // No domain is being spawned meanwhile: its descriptors are briefly
    // inheritable then.
    let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    for fd in image.fds() {
        if let Err(e) = sys::set_inheritable_raw(fd, true) {
            return format!("descriptor {fd} of the state: {e}");
        }
    }
    let e = std::process::Command::new(&image.to)
        .args(&image.daemon.argv)
        .arg(crate::handover::RESUME_ARG)
        .arg(path)
        .exec();
    format!("starting {}: {e}", image.to.display())
}
