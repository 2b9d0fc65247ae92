//! `splitnet upgrade --hv`: the steps the running hv takes to hand itself
//! over to a new program (`crate::handover` describes the whole).

use super::Supervisor;
use crate::handover::{record_outcome, DaemonImage, Image};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvError, HvResult};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the daemon gives the supervisor for an upgrade of hv.
pub struct HvHandover {
    pub daemon: DaemonImage,
    /// Upgrades of this instance so far (carried across them).
    pub attempts: AtomicU64,
}

/// How long an upgrade waits for the requests being served to finish (a
/// hot-plug under way waits up to `HANDSHAKE` for its vif).
const PATIENCE: Duration = Duration::from_secs(12);
/// How long the new program may take to read the state.
const CHECK_LIMIT: Duration = Duration::from_secs(10);

/// Opens hv's gate again when dropped armed: whatever ends an upgrade
/// that did not hand over (an error, a panic) leaves hv serving.
struct Reopen(Arc<Hypervisor>, bool);

impl Drop for Reopen {
    fn drop(&mut self) {
        if self.1 {
            self.0.open_gate();
        }
    }
}

/// The path a program runs from, without the " (deleted)" the kernel adds
/// once the file was replaced (a new version installed over it).
fn installed(p: PathBuf) -> PathBuf {
    match p.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(s) => PathBuf::from(s),
        None => p,
    }
}

impl Supervisor {
    /// The daemon's part of an upgrade of hv; without it, one is refused.
    pub fn set_handover(&self, h: HvHandover) {
        let _ = self.handover.set(h);
    }

    /// `splitnet upgrade --hv`: hv's state recorded and read by `exe` (None:
    /// the program installed at hv's own path), then handed over on a
    /// thread of its own once this request is answered. Returns the
    /// upgrade's number; an error leaves hv as it was.
    pub(super) fn upgrade_hv(self: &Arc<Self>, exe: Option<String>) -> HvResult<String> {
        let ctx = (self.handover.get())
            .ok_or_else(|| HvError::new(ErrorKind::Invalid, "this hv does not run as a daemon"))?;
        let _upgrade = (self.upgrading.try_lock())
            .map_err(|_| HvError::new(ErrorKind::InUse, "another upgrade is under way"))?;
        let _apply = self.wait_for_apply(PATIENCE)?;
        let hv = self.hv()?;
        let from = installed(std::env::current_exe().map_err(|e| {
            HvError::new(ErrorKind::Internal, format!("locating hv's program: {e}"))
        })?);
        let to = exe.map_or_else(|| from.clone(), PathBuf::from);
        super::upgrade::check_program(&to)?;
        let began = crate::handover::now_ns();
        hv.close_gate(1, PATIENCE)?;
        let reopen = Reopen(hv.clone(), true);
        let attempt = ctx.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        match self.record(&hv, ctx, (attempt, began), (from, to)) {
            Ok((image, path, exe, (recorded, read))) => {
                hv::log!(
                    Notice,
                    "upgrade {attempt}: handing over to {} (state recorded in {:.1} ms, read by it in {:.1} ms)",
                    image.to.display(),
                    recorded.as_secs_f64() * 1e3,
                    read.as_secs_f64() * 1e3
                );
                hand_over(self.clone(), reopen, image, (path, exe));
                Ok(attempt.to_string())
            }
            Err(e) => {
                hv::log!(Warning, "upgrade {attempt} refused: {}", e.message);
                Err(e)
            }
        }
    }

    /// The apply lock, once an apply under way (a SIGHUP's) is done, as
    /// the gate waits for other long requests; refused after `patience`.
    fn wait_for_apply(&self, patience: Duration) -> HvResult<std::sync::MutexGuard<'_, ()>> {
        let until = Instant::now() + patience;
        loop {
            match self.applying.try_lock() {
                Ok(g) => return Ok(g),
                Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    return Err(HvError::new(
                        ErrorKind::InUse,
                        format!("an apply was still under way after {patience:?}"),
                    ))
                }
            }
        }
    }

    /// With hv's gate closed: the image of upgrade `attempt` (asked at
    /// `began`) from `from` to `to`, written to the run directory and read
    /// by `to`; the old program kept open for a roll-back; how long the
    /// recording and the reading took.
    fn record(
        &self,
        hv: &Hypervisor,
        ctx: &HvHandover,
        (attempt, began_ns): (u64, u64),
        (from, to): (PathBuf, PathBuf),
    ) -> HvResult<(Image, PathBuf, std::fs::File, (Duration, Duration))> {
        let t0 = Instant::now();
        let internal = |e: String| HvError::new(ErrorKind::Internal, e);
        let exe = std::fs::File::open("/proc/self/exe")
            .map_err(|e| internal(format!("opening hv's own program: {e}")))?;
        let mut daemon = ctx.daemon.clone();
        daemon.exe = Some(exe.as_raw_fd());
        daemon.guardian = self.guardian_parts();
        let image = Image {
            format: crate::handover::FORMAT,
            attempt,
            from,
            to,
            began_ns,
            rollback: None,
            crash: None,
            daemon,
            sup: self.image()?,
            hv: hv.export()?,
        };
        let path = image.write(&self.run_dir).map_err(internal)?;
        let t1 = Instant::now();
        check_new_program(&image, &path, &self.run_dir)?;
        Ok((image, path, exe, (t1 - t0, t1.elapsed())))
    }
}

/// Runs `to --handover-check -- ARGS` on the image at `path`: the new
/// program must accept hv's arguments and read the image, and exit,
/// within [`CHECK_LIMIT`]. What it says goes to a file in the run
/// directory, named in the error.
fn check_new_program(image: &Image, path: &Path, run_dir: &Path) -> HvResult<()> {
    use std::process::{Command, Stdio};
    use sys::signals::SpawnUnblocked;
    let to = &image.to;
    let refused = |why: String| {
        let msg = format!("{} cannot take over: {why}", to.display());
        HvError::new(ErrorKind::Invalid, msg)
    };
    let said = run_dir.join("hv-handover-check.log");
    let input = std::fs::File::open(path).map_err(|e| refused(e.to_string()))?;
    let output = std::fs::File::create(&said).map_err(|e| refused(e.to_string()))?;
    let mut child = {
        let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        Command::new(to)
            .arg(crate::handover::CHECK_ARG)
            .arg("--")
            .args(&image.daemon.argv)
            .stdin(input)
            .stdout(Stdio::null())
            .stderr(output)
            .spawn_unblocked()
            .map_err(|e| refused(e.to_string()))?
    };
    let until = Instant::now() + CHECK_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            // hv serves no one meanwhile: look often.
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_micros(100)),
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
    let text = std::fs::read_to_string(&said).unwrap_or_default();
    let text = text.trim();
    Err(refused(if text.is_empty() {
        format!("it exited with {status}")
    } else {
        format!("{text} ({status})")
    }))
}

/// Once the request that asked is answered (hv's gate empty): the named
/// descriptors survive an `execve` of the new program with the image. If
/// the `execve` does not happen, hv serves on as it was (the gate opens
/// when `reopen` drops, whatever ends this) and says why in `status`.
fn hand_over(sup: Arc<Supervisor>, reopen: Reopen, image: Image, files: (PathBuf, std::fs::File)) {
    let (hv, n) = (reopen.0.clone(), image.attempt);
    let started = hv.spawn_guarded("hv-upgrade".into(), None, move || {
        let (reopen, (path, exe)) = (reopen, files);
        let why = if reopen.0.wait_gate_empty(PATIENCE) {
            exec_new_program(&sup, &reopen.0, &image, &path)
        } else {
            "a request was still being served".to_string()
        };
        drop(exe);
        for fd in image.fds() {
            let _ = sys::set_inheritable_raw(fd, false);
        }
        let _ = std::fs::remove_file(&path);
        hv::log!(Error, "upgrade {n} failed: {why}");
        record_outcome(&reopen.0, n, &format!("{n} failed: {why}"));
    });
    if let Err(e) = started {
        record_outcome(&hv, n, &format!("{n} failed: {e}"));
    }
}

/// `execve`s the image's new program, the signal mask kept (the signals hv
/// waits for stay blocked and pending); returns only on failure, saying
/// why. Not after a shutdown began: its domains are going.
fn exec_new_program(sup: &Supervisor, hv: &Arc<Hypervisor>, image: &Image, path: &Path) -> String {
    if hv.is_shutting_down() {
        return "hv began shutting down".into();
    }
    // No record is being handed to the guardian across the `execve`.
    let mut guardian = sup.guardian_quiet();
    // Nor is one it may be taking still: its duplicates close at `execve`.
    if guardian.as_mut().is_some_and(|g| g.owes_answer()) {
        return "hv's guardian has not answered hv's last record: try again".into();
    }
    // No domain is being spawned meanwhile: its descriptors are briefly
    // inheritable then.
    let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    // HVM guests' relays stop between two exits, their vPIC kept for the
    // new program; they run again here if the `execve` fails.
    let _hvm = hv.pause_hvm();
    for fd in image.fds() {
        if let Err(e) = sys::set_inheritable_raw(fd, true) {
            return format!("descriptor {fd} of the state: {e}");
        }
    }
    let mut args: Vec<std::ffi::OsString> = image.daemon.argv.iter().map(Into::into).collect();
    args.push(crate::handover::RESUME_ARG.into());
    args.push(path.into());
    let e = sys::signals::exec(&image.to, &args);
    format!("starting {}: {e}", image.to.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_program_is_named_by_its_installed_path() {
        let p = installed("/usr/local/bin/splitnet-hv (deleted)".into());
        assert_eq!(p, Path::new("/usr/local/bin/splitnet-hv"));
        let p = installed("/usr/local/bin/splitnet-hv".into());
        assert_eq!(p, Path::new("/usr/local/bin/splitnet-hv"));
    }
}
