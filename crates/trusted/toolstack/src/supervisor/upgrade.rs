//! `splitnet upgrade DRIVER`: a driver domain's program replaced in
//! place, its vifs, ports and queues kept (the domain's side is
//! `driver_domain::driver::upgrade`).
//!
//! The new program starts as a standby (`standby`); the toolstack then
//! asks the old one to hand over at the domain's `control/upgrade`, as it
//! asks a Xen domain to shut down at `control/shutdown`, and waits for the
//! new one's answer at `control/upgrade-result`. Unlike a restart, the
//! domain keeps its id, memory, grants and event channels, and its guests
//! run no handshake. A new program that dies after taking over is a
//! crash: the restart policy brings the domain back on the program before,
//! and the upgrade is reported failed.

use super::{fail, read_node, wait_until, Supervisor};
use crate::topology::DomainKind;
use hv::error::{ErrorKind, HvError, HvResult};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the domain has to answer.
const ANSWER: Duration = Duration::from_secs(10);

/// What `splitnet upgrade` reports, as JSON.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct UpgradeReport {
    pub domain: String,
    pub program: String,
    /// The domain's new process.
    pub pid: i32,
    /// From the old program's last turn to the new one serving every vif.
    pub unserved_us: u64,
    /// Frames queued for guests that had no buffer for them at hand-over.
    pub dropped_frames: u64,
    /// From the request to the answer.
    pub took_ms: u64,
}

impl Supervisor {
    /// The program domain `name` runs.
    pub(super) fn program_of(&self, name: &str) -> PathBuf {
        let given = self.lock().programs.get(name).cloned();
        given.unwrap_or_else(|| self.exe.clone())
    }

    /// Replaces driver domain `name`'s program with `exe` (None: the one
    /// it runs, as found on disk now) in place; one upgrade at a time.
    pub(super) fn upgrade(self: &Arc<Self>, name: &str, exe: Option<String>) -> HvResult<String> {
        let _one = match self.upgrading.try_lock() {
            Ok(g) => g,
            // An upgrade whose thread panicked is over.
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(fail(
                    ErrorKind::Invalid,
                    "another upgrade is under way; try again when it ends",
                ))
            }
        };
        if self.config(name)?.kind != DomainKind::Driver {
            return Err(fail(
                ErrorKind::Invalid,
                format!("{name} is not a driver domain: only driver domains are upgraded in place"),
            ));
        }
        let program = match exe {
            Some(p) => PathBuf::from(p),
            None => self.program_of(name),
        };
        check_program(&program)?;
        let (answer, took_ms, pid) = self.hand_over(name, &program)?;
        let done = |unserved_us, dropped_frames| UpgradeReport {
            domain: name.to_string(),
            program: program.display().to_string(),
            pid,
            unserved_us,
            dropped_frames,
            took_ms,
        };
        let report = match answer {
            Answer::Ok(us, dropped) => done(us, dropped),
            Answer::Partial(_, _, why) => {
                // The new program runs, short of the vifs it closed.
                self.lock()
                    .programs
                    .insert(name.to_string(), program.clone());
                return Err(fail(
                    ErrorKind::Internal,
                    format!("{name} now runs {}, but {why}", program.display()),
                ));
            }
            Answer::Failed(why) => {
                return Err(fail(
                    ErrorKind::Internal,
                    format!("the upgrade failed: {why}"),
                ))
            }
        };
        self.lock().programs.insert(name.to_string(), program);
        hv::log!(
            Notice,
            "driver domain {name} upgraded in place to {}: its vifs unserved {} µs",
            report.program,
            report.unserved_us
        );
        serde_json::to_string(&report).map_err(|e| HvError::internal("upgrade report", e))
    }

    /// Starts `program` as driver domain `name`'s standby, hands the domain
    /// over to it (`standby`) and waits for its answer; with the time from
    /// the question to the answer, in ms, and the new process.
    fn hand_over(self: &Arc<Self>, name: &str, program: &Path) -> HvResult<(Answer, u64, i32)> {
        let hv = self.hv()?;
        let id = Self::domid(&hv, name)?;
        let d = self.config(name)?;
        let standby = self.start_standby(&d, program).map_err(|e| {
            fail(
                ErrorKind::Internal,
                format!("{e}; the old program serves on"),
            )
        })?;
        let t0 = Instant::now();
        let switched = self.switch_to(&hv, (id, &d), standby, ANSWER);
        let answer = abi::xenbus::upgrade_result_node(id);
        let same = || Self::domid(&hv, name).ok() == Some(id);
        let answered =
            switched.is_ok() && wait_until(ANSWER, || !same() || read_node(&hv, &answer).is_some());
        let took_ms = t0.elapsed().as_millis() as u64;
        let text = read_node(&hv, &answer);
        // The question goes with the answer, whatever the outcome (the soak
        // counts store nodes).
        super::standby::remove_question(&hv, id);
        let pid = switched?;
        let why = match (answered, same(), text) {
            (true, true, Some(t)) => return Ok((Answer::parse(&t), took_ms, pid)),
            (_, false, _) => format!(
                "driver domain {name} died during its upgrade to {}; its restart policy brings it back on the program it ran before (see its log)",
                program.display()
            ),
            (false, true, _) => format!(
                "{} took driver domain {name} over but did not answer within {} s (see its log)",
                program.display(),
                ANSWER.as_secs()
            ),
            (true, true, None) => "the answer vanished".to_string(),
        };
        Err(fail(ErrorKind::Internal, why))
    }
}

/// The driver domain's answer (`abi::xenbus::upgrade_result_node`).
#[derive(Debug, PartialEq)]
enum Answer {
    /// `ok <unserved µs> <dropped frames>`.
    Ok(u64, u64),
    /// `partial <unserved µs> <dropped frames> <why>`: the new program
    /// runs, but closed the vifs it could not take back.
    Partial(u64, u64, String),
    /// `failed: <why>`, or an answer that says nothing known.
    Failed(String),
}

impl Answer {
    fn parse(text: &str) -> Answer {
        if let Some(why) = text.strip_prefix("failed: ") {
            return Answer::Failed(why.to_string());
        }
        let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
        let mut f = rest.splitn(3, ' ');
        let num = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
        match (kind, num(f.next()), num(f.next()), f.next()) {
            ("ok", Some(us), Some(n), None) => Answer::Ok(us, n),
            ("partial", Some(us), Some(n), Some(why)) => Answer::Partial(us, n, why.to_string()),
            _ => Answer::Failed(format!("the driver domain answered {text:?}")),
        }
    }
}

/// A program a domain can run: an absolute path to an executable file.
pub(super) fn check_program(p: &Path) -> HvResult<()> {
    let bad = |why: String| Err(fail(ErrorKind::Invalid, format!("{}: {why}", p.display())));
    if !p.is_absolute() {
        return bad("the program must be given by an absolute path".into());
    }
    match std::fs::metadata(p) {
        Ok(m) if !m.is_file() => bad("not a file".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => bad("not executable".into()),
        Ok(_) => Ok(()),
        Err(e) => bad(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_or_refused_by_name() {
        assert_eq!(Answer::parse("ok 1234 2"), Answer::Ok(1234, 2));
        assert_eq!(
            Answer::parse("partial 10 0 the new program could not take back vif2.0: x"),
            Answer::Partial(
                10,
                0,
                "the new program could not take back vif2.0: x".into()
            )
        );
        assert_eq!(
            Answer::parse("failed: could not run /x: No such file"),
            Answer::Failed("could not run /x: No such file".into())
        );
        for junk in ["ok x", "ok 1 2 3", "partial 1 2", "", "done"] {
            let Answer::Failed(e) = Answer::parse(junk) else {
                panic!("{junk:?} was read as an answer")
            };
            assert!(e.contains("answered"), "{e}");
        }
    }

    #[test]
    fn a_program_must_be_an_absolute_executable_file() {
        let e = check_program(Path::new("splitnet-domain")).unwrap_err();
        assert!(e.to_string().contains("absolute path"), "{e}");
        let e = check_program(Path::new("/nonexistent/splitnet-domain")).unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e}");
        let plain = std::env::temp_dir().join(format!("splitnet-plain-{}", std::process::id()));
        std::fs::write(&plain, "not a program").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_program(&plain).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(e.to_string().contains("not executable"), "{e}");
        let e = check_program(&std::env::temp_dir()).unwrap_err();
        assert!(e.to_string().contains("not a file"), "{e}");
        check_program(Path::new("/bin/sh")).unwrap();
    }
}
