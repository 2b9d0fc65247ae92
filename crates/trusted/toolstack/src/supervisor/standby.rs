//! A driver domain's next program started before the old one stops
//! (`splitnet upgrade DRIVER`).
//!
//! The standby is spawned, loaded and jailed in the domain's namespaces
//! and cgroup like any domain process, and says it is ready on a socket of
//! the toolstack's. Only then is the old program asked to hand its vifs
//! over (`driver_domain::driver::upgrade`): it leaves when it stopped at
//! `control/handed` and hangs up, hv keeps the domain for a successor
//! (`Hypervisor::revive`), and the toolstack passes the fresh control
//! socket to the standby, which resumes on it. The vifs wait only for the
//! hand-over and the take-back, never for a program's start-up; a program
//! that cannot start costs the guests nothing. The old process, which
//! waits to be ended, is then ended; its exit is no crash.

use super::launch::Start;
use super::{fail, read_node, Supervisor};
use crate::cgroup::Cgroup;
use crate::host;
use crate::store::Store;
use crate::topology::DomainConfig;
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use hv::proto::DomId;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;
use sys::SeqPacket;

/// How long a standby has to start and say it is ready.
const READY: Duration = Duration::from_secs(10);
/// How long the old process, killed once it hung up, has to end.
const ENDED: Duration = Duration::from_secs(2);
/// How long the reaper of an old process waits for the hand-over's
/// verdict: longer than any hand-over takes.
const VERDICT: Duration = Duration::from_secs(30);

/// The old process of a domain under a hand-over: its exit waits for the
/// verdict, and is no crash once the standby adopted the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Handover {
    Pending,
    Adopted,
}

/// A started standby, ready.
pub(super) struct Standby {
    pid: i32,
    child: Child,
    sock: SeqPacket,
    cg: Cgroup,
}

impl Standby {
    /// Ends a standby that will not be used.
    fn discard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it ended (or closed its socket) since it said it was ready.
    fn ended(&mut self) -> bool {
        self.sock.peer_closed() || !matches!(self.child.try_wait(), Ok(None))
    }
}

/// Removes the upgrade's question from domain `id`'s home, and with it the
/// `control` directory it made, which holds nothing else (the answer and
/// `control/handed` too), so that the home ends as it was.
pub(super) fn remove_question(hv: &Arc<Hypervisor>, id: DomId) {
    let ask = abi::xenbus::upgrade_node(id);
    let control = ask.rsplit_once('/').map_or(ask.as_str(), |(dir, _)| dir);
    let _ = Store::new(hv).rm(control);
}

/// What the old program left at `control/handed` (`STOPPED DROPPED
/// HANDED`, three numbers), as the toolstack passes it on; None if it is
/// anything else.
fn handed_text(raw: &str) -> Option<String> {
    let n: Vec<u64> = raw
        .split(' ')
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    match n[..] {
        [stopped, dropped, handed] if stopped <= handed => {
            Some(format!("{stopped} {dropped} {handed}"))
        }
        _ => None,
    }
}

impl Supervisor {
    /// Starts `program` as the standby of driver domain `d`; returns once
    /// it said it is ready, or why it did not.
    pub(super) fn start_standby(
        &self,
        d: &DomainConfig,
        program: &Path,
    ) -> Result<Standby, String> {
        let (ours, theirs) = SeqPacket::pair().map_err(|e| format!("a socket for it: {e}"))?;
        let ns = host::netns_name(&d.name);
        let logs = self.domain_log(&d.name)?;
        let mut child = self.spawn_domain(d, &ns, logs, theirs, None, Start::Standby(program))?;
        let pid = child.id() as i32;
        super::launch::weighed(d, pid);
        let cg = Cgroup::create(&self.layout, &d.name).map_err(|e| e.to_string());
        let cg = match cg.and_then(|cg| cg.add(pid).map(|_| cg).map_err(|e| e.to_string())) {
            Ok(cg) => cg,
            Err(e) => {
                let _ = (child.kill(), child.wait());
                return Err(format!("its cgroup: {e}"));
            }
        };
        let _ = ours.set_read_timeout(Some(READY));
        let mut buf = [0u8; 16];
        let said = ours.recv(&mut buf);
        let ready = matches!(&said, Ok((n, _)) if &buf[..*n] == hypercall::launch::STANDBY_READY);
        if ready {
            // Started by root, it must have confined itself before it is
            // given a domain.
            if let Err(why) = jailed(pid) {
                let _ = (child.kill(), child.wait());
                return Err(format!("{} {why}", program.display()));
            }
            return Ok(Standby {
                pid,
                child,
                sock: ours,
                cg,
            });
        }
        let _ = child.kill();
        let how = match child.wait() {
            Ok(s) if s.code().is_some() => format!("exited with status {}", s.code().unwrap_or(0)),
            Ok(_) if said.is_err() => format!("was not ready within {} s", READY.as_secs()),
            Ok(s) => format!("ended ({s})"),
            Err(e) => format!("could not be waited for: {e}"),
        };
        Err(format!(
            "{} {how} before it was ready to take over (see the domain's log)",
            program.display()
        ))
    }

    /// Asks driver domain `d` (`id`) to hand its vifs over, and gives the
    /// domain to `standby` once it has; the standby's pid. Err: why not,
    /// the standby ended and the domain left to its old process (serving
    /// on, or, ended, to its restart policy).
    pub(super) fn switch_to(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        mut standby: Standby,
        answer_within: Duration,
    ) -> HvResult<i32> {
        let internal = |why: String| fail(ErrorKind::Internal, why);
        let (old, old_fd) = match self.claim_old(hv, id, &mut standby) {
            Ok(claimed) => claimed,
            Err(why) => {
                standby.discard();
                return Err(internal(why));
            }
        };
        let mut ts = Store::new(hv);
        let handed = abi::xenbus::upgrade_handed_node(id);
        let _ = ts.rm(&handed);
        let _ = ts.rm(&abi::xenbus::upgrade_result_node(id));
        hv.keep_on_hangup(id, true);
        let asked = ts.write(
            &abi::xenbus::upgrade_node(id),
            abi::xenbus::UPGRADE_HANDOVER,
        );
        if let Err(e) = asked {
            self.abandon(hv, (id, d), old, standby, None);
            return Err(internal(e.to_string()));
        }
        if hv.wait_orphaned(id, answer_within).is_err() {
            self.abandon(hv, (id, d), old, standby, None);
            return Err(internal(format!(
                "driver domain {} did not hand its vifs over within {} s; the old program serves on (see its log)",
                d.name,
                answer_within.as_secs()
            )));
        }
        // It hung up: it is ended before hv releases what it held, so that
        // no page a guest takes back is still mapped by it. Its reaper
        // waits for the verdict, so the pid stays its own meanwhile.
        let _ = sys::kill(old, libc::SIGKILL);
        let _ = old_fd.wait_ended(Some(ENDED));
        let sock = match hv.revive(id) {
            Ok(sock) => sock,
            Err(e) => {
                self.abandon(hv, (id, d), old, standby, None);
                return Err(internal(format!("driver domain {}: {e}", d.name)));
            }
        };
        let Some(left) = read_node(hv, &handed).and_then(|t| handed_text(&t)) else {
            self.abandon(hv, (id, d), old, standby, Some(sock));
            return Err(internal(format!(
                "driver domain {} died during its hand-over; its restart policy brings it back on the program it ran before (see its log)",
                d.name
            )));
        };
        if let Err(e) = standby.sock.send(left.as_bytes(), &[sock.as_fd()]) {
            self.abandon(hv, (id, d), old, standby, Some(sock));
            return Err(internal(format!(
                "the new program ended before it took the domain over ({e}); its restart policy brings the domain back on the program it ran before"
            )));
        }
        drop(sock); // the standby holds the only other copy now
        self.take_standby(hv, (id, d), old, standby)
    }

    /// The domain's process now, marked under a hand-over (its exit waits
    /// for the verdict from here on), with its descriptor; or why not.
    fn claim_old(
        &self,
        hv: &Hypervisor,
        id: DomId,
        standby: &mut Standby,
    ) -> Result<(i32, sys::PidFd), String> {
        let pid = (hv.launched().into_iter())
            .find_map(|(i, _, pid, _)| (i == id).then_some(pid).flatten());
        let fd = pid.map(|p| (p, sys::PidFd::open(p)));
        let mut st = self.lock();
        // Checked under the lock its reaper reads the mark under.
        let alive = |fd: &sys::PidFd| !fd.wait_ended(Some(Duration::ZERO)).unwrap_or(true);
        let (pid, fd) = match fd {
            Some((pid, Ok(fd))) if alive(&fd) => (pid, fd),
            _ => return Err("the domain's process is ending; try again once it is back".into()),
        };
        if standby.ended() {
            return Err("the new program ended after it said it was ready; the old program serves on (see the domain's log)".into());
        }
        st.handovers.insert(pid, Handover::Pending);
        Ok((pid, fd))
    }

    /// The standby has the domain: it is the domain's process now, and the
    /// old one's exit is no crash.
    fn take_standby(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        old: i32,
        standby: Standby,
    ) -> HvResult<i32> {
        self.lock().handovers.insert(old, Handover::Adopted);
        self.changed.notify_all();
        hv.keep_on_hangup(id, d.takeover);
        let Standby {
            pid, mut child, cg, ..
        } = standby;
        let ns = host::netns_name(&d.name);
        self.watch(hv, id, &d.name, &ns, cg, pid, move || child.wait())
            .map_err(|e| fail(ErrorKind::Internal, e))?;
        Ok(pid)
    }

    /// The hand-over will not happen: the question goes (so that no
    /// successor answers it), the standby ends, and the old process is
    /// left to serve on or, if it ended, to its restart policy.
    fn abandon(
        &self,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        old: i32,
        standby: Standby,
        revived: Option<SeqPacket>,
    ) {
        remove_question(hv, id);
        standby.discard();
        // A revived domain is orphaned again when its socket closes.
        drop(revived);
        hv.keep_on_hangup(id, d.takeover);
        self.lock().handovers.remove(&old);
        self.changed.notify_all();
    }

    /// For the reaper of process `pid`, which ended: whether it ended
    /// after handing its domain to a standby (no crash), waiting while a
    /// hand-over of it is undecided.
    pub(super) fn handed_over(&self, pid: i32) -> bool {
        let pending = |st: &super::State| st.handovers.get(&pid) == Some(&Handover::Pending);
        let verdict = self.wait_changed(VERDICT, pending, || false);
        let mut st = verdict.unwrap_or_else(|| self.lock());
        st.handovers.remove(&pid) == Some(Handover::Adopted)
    }
}

/// Whether process `pid` is jailed as a domain process is: a seccomp
/// filter and `no_new_privs` (`jail::enter`).
fn jailed(pid: i32) -> Result<(), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("could not be checked: /proc/{pid}/status: {e}"))?;
    let has = |line: &str| {
        status
            .lines()
            .any(|l| l.split_whitespace().eq(line.split(' ')))
    };
    let userns = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    let own_userns = match (
        userns(&format!("/proc/{pid}/ns/user")),
        userns("/proc/self/ns/user"),
    ) {
        (Some(its), Some(ours)) => its != ours,
        _ => false,
    };
    if has("Seccomp: 2") && has("NoNewPrivs: 1") && own_userns {
        Ok(())
    } else {
        Err("said it was ready without entering its jail (a seccomp filter, no_new_privs and the domain's user namespace): it is not given the domain".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_old_program_left_is_passed_on_only_as_three_numbers() {
        assert_eq!(handed_text("100 2 150").as_deref(), Some("100 2 150"));
        for bad in [
            "",
            "100 2",
            "100 2 150 7",
            "100 0 crash",
            "150 0 100",
            "1 2 x",
            " 1 2 3",
        ] {
            assert_eq!(handed_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_process_is_not_jailed() {
        let e = jailed(std::process::id() as i32).unwrap_err();
        assert!(e.contains("without entering its jail"), "{e}");
    }
}
