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
use crate::host::{self, Cgroup};
use crate::store::Store;
use crate::topology::DomainConfig;
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use hv::proto::DomId;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;
use sys::SeqPacket;

/// How long a standby has to start and say it is ready.
const READY: Duration = Duration::from_secs(10);

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

    /// Asks driver domain `d` (`id`, process `old`) to hand its vifs over,
    /// and gives the domain to `standby` once it has; its pid. Err: why not, the
    /// standby ended and the domain left to its old process (serving on,
    /// or, dead, to its restart policy).
    pub(super) fn switch_to(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        old: i32,
        standby: Standby,
        answer_within: Duration,
    ) -> HvResult<i32> {
        let ask = abi::xenbus::upgrade_node(id);
        let handed = abi::xenbus::upgrade_handed_node(id);
        let mut ts = Store::new(hv);
        let _ = ts.rm(&handed);
        let _ = ts.rm(&abi::xenbus::upgrade_result_node(id));
        self.lock().handovers.insert(old, Handover::Pending);
        hv.keep_on_hangup(id, true);
        if let Err(e) = ts.write(&ask, abi::xenbus::UPGRADE_HANDOVER) {
            self.abandon(hv, (id, d), old, standby, None);
            return Err(fail(ErrorKind::Internal, e));
        }
        let revived = hv.revive_within(id, answer_within);
        let left = read_node(hv, &handed);
        let (sock, left) = match (revived, left) {
            (Ok(sock), Some(left)) => (sock, left),
            (Ok(sock), None) => {
                self.abandon(hv, (id, d), old, standby, Some(sock));
                return Err(fail(ErrorKind::Internal, format!(
                    "driver domain {} died during its hand-over; its restart policy brings it back on the program it ran before (see its log)",
                    d.name
                )));
            }
            (Err(_), _) => {
                self.abandon(hv, (id, d), old, standby, None);
                return Err(fail(ErrorKind::Internal, format!(
                    "driver domain {} did not hand its vifs over within {} s; the old program serves on (see its log)",
                    d.name,
                    answer_within.as_secs()
                )));
            }
        };
        if let Err(e) = standby.sock.send(left.as_bytes(), &[sock.as_fd()]) {
            self.abandon(hv, (id, d), old, standby, Some(sock));
            return Err(fail(ErrorKind::Internal, format!(
                "the new program ended before it took the domain over ({e}); a new process of the program before takes it over"
            )));
        }
        drop(sock); // the standby holds the only other copy now
        self.take_standby(hv, (id, d), old, standby)
    }

    /// The standby has the domain: it is the domain's process now, and the
    /// old one, which waits to be ended, is ended.
    fn take_standby(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        old: i32,
        standby: Standby,
    ) -> HvResult<i32> {
        self.lock().handovers.insert(old, Handover::Adopted);
        self.changed.notify_all();
        let _ = sys::kill(old, libc::SIGKILL);
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
    /// left to serve on or, if it stopped, to end as a crash does.
    fn abandon(
        &self,
        hv: &Arc<Hypervisor>,
        (id, d): (DomId, &DomainConfig),
        old: i32,
        standby: Standby,
        revived: Option<SeqPacket>,
    ) {
        let ask = abi::xenbus::upgrade_node(id);
        let control = ask.rsplit_once('/').map_or(ask.as_str(), |(dir, _)| dir);
        let _ = Store::new(hv).rm(control);
        standby.discard();
        if revived.is_some() {
            // It hung up: it serves no more, and ends as a crash does.
            let _ = sys::kill(old, libc::SIGKILL);
        }
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
        let limit = 2 * READY;
        let Some(mut st) = self.wait_changed(limit, pending, || false) else {
            return false;
        };
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
    if has("Seccomp: 2") && has("NoNewPrivs: 1") {
        Ok(())
    } else {
        Err("said it was ready without entering its jail (no seccomp filter or no_new_privs): it is not given the domain".into())
    }
}
