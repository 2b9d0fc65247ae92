//! A control connection's loop, and [`Hypervisor::handle`]: one hypercall,
//! checked for privilege, served without hv's lock when it is the
//! toolstack's (or an HVM or vhost-user one), otherwise under the lock by
//! `dispatch`.

use super::dispatch::dispatch;
use super::gate::Kind;
use super::reply::{done_with, fail, ok, os, Outcome};
use super::Hypervisor;
use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{self, DomId, Reply, Request, Response, DOMID_TOOLSTACK};
use crate::trace;
use std::os::fd::AsFd;
use std::sync::Arc;
use sys::SeqPacket;

/// What a control connection holds next.
enum Next {
    /// A request this long.
    Request(usize),
    /// A message that was refused (and answered so).
    Refused,
    /// The connection ended.
    End,
}

/// How long hv waits to hand a domain a reply before it closes the
/// domain's connection (a domain that sends requests and never reads the
/// replies would otherwise hold its serving thread for good).
const REPLY_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Hypervisor {
    /// Serves the toolstack (the `splitnet` CLI) on `sock` until it hangs up.
    pub fn serve_toolstack(self: &Arc<Self>, sock: SeqPacket) {
        self.serve_requests(DOMID_TOOLSTACK, &sock, |_| true);
    }

    /// Serves toolstack connection `sock` on a thread of its own, recorded
    /// from now until it hangs up, so that an upgrade of hv carries it: a
    /// request waiting in it is answered by the next program. Call inside
    /// hv's gate (as the daemon's accept loop does).
    pub fn spawn_toolstack(self: &Arc<Self>, sock: SeqPacket) -> HvResult<()> {
        use std::os::fd::AsRawFd;
        let fd = sock.as_fd().as_raw_fd();
        self.toolstack_conns().insert(fd);
        let hv = self.clone();
        let served = self.spawn_guarded("hv-toolstack".into(), None, move || {
            hv.serve_requests(DOMID_TOOLSTACK, &sock, |_| true);
            // Forgotten and closed inside the gate: an upgrade of hv never
            // carries a number closed under it.
            let _pass = hv.gate.enter(Kind::Short);
            hv.toolstack_conns().remove(&fd);
            drop(sock);
        });
        if served.is_err() {
            self.toolstack_conns().remove(&fd);
        }
        served.map(drop)
    }

    pub(super) fn serve(self: &Arc<Self>, caller: DomId, sock: SeqPacket) {
        let incarnation = {
            let mut st = self.lock();
            super::state::domain(&mut st, caller).map_or(0, |d| d.incarnation)
        };
        self.serve_incarnation(caller, sock, incarnation)
    }

    /// Serves incarnation `incarnation` of domain `caller` (its process;
    /// a driver domain revived after a crash has a new one, `revive`) on
    /// `sock` until it hangs up; the domain is then destroyed, unless it
    /// is kept for a successor or has one already.
    pub(super) fn serve_incarnation(
        self: &Arc<Self>,
        caller: DomId,
        sock: SeqPacket,
        incarnation: u32,
    ) {
        // A domain that does not take its replies must not hold this
        // thread (and hv's gate) forever: its connection is closed.
        let _ = sock.set_write_timeout(Some(REPLY_LIMIT));
        self.serve_requests(caller, &sock, |_| true);
        // Inside the gate: an upgrade of hv either carries the domain whole
        // (the next program sees the hang-up again) or never sees it.
        let _pass = self.gate.enter(Kind::Short);
        if self.hung_up(caller, incarnation) {
            return;
        }
        self.destroy_domain(
            caller,
            "its control connection closed, or a reply waited too long",
        );
    }

    /// A second control connection of domain `dm` for a device-model
    /// process it hosts (an HVM guest's qemu-dm): it may only take the
    /// device-model side of the HVM guests `dm` serves
    /// ([`Request::HvmDeviceModel`], checked as for `dm` itself), and its
    /// closing leaves the domain alone.
    pub fn device_model_connection(self: &Arc<Self>, dm: DomId) -> HvResult<SeqPacket> {
        if self.domain_name(dm).is_none() {
            return err(ErrorKind::BadDomain, format!("domain {dm} does not exist"));
        }
        let (hv_end, dm_end) = os("control socket", SeqPacket::pair())?;
        self.serve_device_model(dm, hv_end)?;
        Ok(dm_end)
    }

    /// Serves device model connection `sock` of driver domain `dm` until
    /// it hangs up (an upgrade of hv carries it meanwhile).
    pub(super) fn serve_device_model(self: &Arc<Self>, dm: DomId, sock: SeqPacket) -> HvResult<()> {
        use std::os::fd::AsRawFd;
        let key = (dm, sock.as_fd().as_raw_fd());
        self.device_model_conns().insert(key);
        let hv = self.clone();
        let served = self.spawn_guarded(format!("hv-dm-{dm}"), Some(dm), move || {
            hv.serve_requests(dm, &sock, |r| {
                matches!(r, Request::HvmDeviceModel { .. } | Request::Nop)
            });
            // As a toolstack connection's: closed inside the gate, and
            // under hv's lock, which hv's record for its guardian holds
            // while it duplicates the descriptors it names.
            let _pass = hv.gate.enter(Kind::Short);
            let _st = hv.lock();
            hv.device_model_conns().remove(&key);
            drop(sock);
        });
        if served.is_err() {
            self.device_model_conns().remove(&key);
        }
        served.map(drop)
    }

    pub(super) fn device_model_conns(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<(DomId, std::os::fd::RawFd)>> {
        self.device_models.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answers `caller`'s requests on `sock` until it hangs up; those
    /// `allowed` refuses are answered `NotPrivileged`.
    fn serve_requests(
        self: &Arc<Self>,
        caller: DomId,
        sock: &SeqPacket,
        allowed: impl Fn(&Request) -> bool,
    ) {
        let mut buf = vec![0u8; proto::MAX_MESSAGE];
        let tr = if caller == DOMID_TOOLSTACK {
            self.toolstack_trace.clone()
        } else {
            let t = self.lock().doms.0.get(&caller).map(|d| d.trace.clone());
            t.unwrap_or_default()
        };
        loop {
            // The request is taken only inside the gate: one that comes
            // while an upgrade of hv closes it stays in the socket for the
            // program that replaces this one.
            if sys::poll_readable_few(&[sock.as_fd()], None).is_err() {
                break;
            }
            let kind = if caller == DOMID_TOOLSTACK {
                Kind::Long
            } else {
                Kind::Short
            };
            let _pass = self.gate.enter(kind);
            // A domain's request is taken off its socket only once it is
            // served: one hv dies serving is served by the hv its guardian
            // starts (the toolstack's connections end with hv).
            let keep = caller != DOMID_TOOLSTACK;
            let n = match self.next_request(caller, sock, &mut buf, keep) {
                Next::Request(n) => n,
                Next::Refused => continue,
                Next::End => break,
            };
            let t0 = trace::now();
            let (reply, fds) = match proto::decode::<Request>(&buf[..n]) {
                Ok(req) if !allowed(&req) => (
                    Err(HvError::new(
                        ErrorKind::NotPrivileged,
                        format!("a device model's connection may not use {req:?}"),
                    )),
                    Vec::new(),
                ),
                Ok(req) => {
                    let kind = req.index();
                    let record = caller == DOMID_TOOLSTACK
                        && may_change(&req)
                        && !matches!(req, Request::UpgradeHv { .. } | Request::Shutdown);
                    let r = self.handle(caller, req);
                    tr.hypercall(kind, t0);
                    self.served_toolstack(record);
                    r
                }
                Err(e) => (Err(e), Vec::new()),
            };
            self.count_errors(caller, &reply);
            let bytes = match proto::encode(&reply) {
                Ok(b) => b,
                Err(_) => break,
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            // Taken before the answer: a death between the two leaves the
            // domain waiting, never answered twice.
            if keep && sock.discard().is_err() {
                break;
            }
            if sock.send(&bytes, &borrowed).is_err() {
                break;
            }
        }
    }

    /// The next request's length in `buf`, read (or, to `keep` it queued
    /// until it is answered, peeked); a message too large for it is
    /// refused and dropped.
    fn next_request(&self, caller: DomId, sock: &SeqPacket, buf: &mut [u8], keep: bool) -> Next {
        let taken = if keep { sock.peek(buf) } else { sock.recv(buf) };
        match taken {
            Ok((0, _)) => Next::End,
            Ok((n, _fds)) => Next::Request(n),
            Err(e) => {
                if keep && sock.discard().is_err() {
                    return Next::End;
                }
                if e.kind() != std::io::ErrorKind::InvalidData {
                    return Next::End;
                }
                self.count_error(caller, ErrorKind::Invalid);
                let reply: Response = Err(HvError::new(ErrorKind::Invalid, e.to_string()));
                if let Ok(b) = proto::encode(&reply) {
                    let _ = sock.send(&b, &[]);
                }
                Next::Refused
            }
        }
    }

    /// Counts a refused request, or each refused read of a gather, as
    /// the reads one by one would have been counted.
    fn count_errors(&self, caller: DomId, reply: &Response) {
        match reply {
            Err(e) => self.count_error(caller, e.kind),
            Ok(Reply::Values(vs)) => {
                for e in vs.iter().filter_map(|v| v.as_ref().err()) {
                    self.count_error(caller, e.kind);
                }
            }
            Ok(_) => {}
        }
    }

    pub(super) fn count_error(&self, caller: DomId, kind: ErrorKind) {
        let mut st = self.lock();
        st.counters.error(kind);
        if let Some(d) = st.doms.0.get_mut(&caller) {
            d.counters.error(kind);
        }
    }

    /// Runs one hypercall for `caller`.
    pub fn handle(self: &Arc<Self>, caller: DomId, req: Request) -> Outcome {
        if req.privileged() && caller != DOMID_TOOLSTACK {
            return fail(HvError::new(
                ErrorKind::NotPrivileged,
                format!("domain {caller} may not use {req:?}"),
            ));
        }
        let changes = may_change(&req);
        let outcome = match self.handle_unlocked(caller, req) {
            Ok(outcome) => outcome,
            Err(req) => self.handle_locked(caller, req),
        };
        if changes {
            self.note_change();
        }
        outcome
    }

    /// A request from a toolstack connection was served: has the
    /// supervisor record hv's state before the answer goes
    /// ([`super::Supervisor::served`]). Not for hv's own requests (the
    /// supervisor's store writes, made with its locks held), nor for an
    /// upgrade of hv or a shutdown, which hand over or let go of hv's
    /// guardian themselves: a record taken as they begin would be taken
    /// for the state they end.
    fn served_toolstack(&self, to_record: bool) {
        if to_record && !self.is_shutting_down() {
            if let Some(sup) = self.supervisor() {
                sup.served();
            }
        }
    }

    /// Serves the requests that run without hv's lock: the toolstack's, and
    /// the HVM and vhost-user ones (their registries have locks of their
    /// own). Any other request is given back.
    fn handle_unlocked(self: &Arc<Self>, caller: DomId, req: Request) -> Result<Outcome, Request> {
        Ok(match req {
            Request::Status => ok(Reply::Status(Box::new(self.status()))),
            Request::Trace => ok(Reply::Trace(Box::new(self.trace()))),
            Request::Shutdown => {
                // Set now, inside the gate: an upgrade of hv that has not
                // recorded hv's state yet refuses.
                self.lock().shutting_down = true;
                let hv = self.clone();
                // Reply first; tear down from another thread.
                match self.spawn_guarded("hv-shutdown".into(), None, move || hv.shutdown()) {
                    Ok(_) => ok(Reply::Done),
                    Err(e) => fail(e),
                }
            }
            Request::RestartDomain { .. }
            | Request::NetworkAttach { .. }
            | Request::NetworkDetach { .. }
            | Request::ContainerAdd(_)
            | Request::ContainerDel { .. }
            | Request::ContainerList
            | Request::Apply { .. }
            | Request::UpgradeDomain { .. }
            | Request::UpgradeHv { .. } => self.ask_supervisor(req),
            Request::CaptureOpen { domain, spec } => match self.capture_open(&domain, &spec) {
                Ok((reply, fd)) => (Ok(reply), vec![fd]),
                Err(e) => fail(e),
            },
            Request::HvmVcpu | Request::HvmDeviceModel { .. } => {
                done_with(self.hvm_fds(caller, &req))
            }
            Request::VhostListener { name } => {
                done_with(self.vhost_listener(caller, &name).map(|fd| vec![fd]))
            }
            Request::VhostDial { name } => {
                done_with(self.vhost_dial(caller, &name).map(|fd| vec![fd]))
            }
            Request::VhostConnect => done_with(self.vhost_connect(caller).map(|fd| vec![fd])),
            Request::PortSocket { name } => {
                done_with(self.port_socket(caller, &name).map(|fd| vec![fd]))
            }
            Request::QueueOpen {
                port,
                owner,
                mac,
                rcvbuf,
            } => done_with(
                self.queue_open(caller, &port, (owner, mac), rcvbuf)
                    .map(|fd| vec![fd]),
            ),
            Request::QueueClose { port, owner } => {
                done_with(self.queue_close(caller, &port, owner).map(|()| vec![]))
            }
            Request::DestroyDomain { name } => self.destroy_by_name(&name),
            req => return Err(req),
        })
    }

    /// Hands a request that needs processes and the topology (restart, vif
    /// hotplug) to the daemon's supervisor.
    fn ask_supervisor(&self, req: Request) -> Outcome {
        let Some(sup) = self.supervisor() else {
            return fail(HvError::new(
                ErrorKind::Invalid,
                "this hv runs no supervisor (not started by `splitnet up`)",
            ));
        };
        match sup.toolstack(req) {
            Ok(r) => ok(r),
            Err(e) => fail(e),
        }
    }

    /// `DestroyDomain`: tells the supervisor not to bring domain `name`
    /// back, then destroys it.
    fn destroy_by_name(&self, name: &str) -> Outcome {
        let Some(id) = self.domid_of(name) else {
            return fail(HvError::new(
                ErrorKind::BadDomain,
                format!("no domain named {name:?}"),
            ));
        };
        if let Some(sup) = self.supervisor() {
            sup.destroying(name);
        }
        self.destroy_domain(id, "destroyed by the toolstack");
        ok(Reply::Done)
    }

    /// Serves a domain's request under hv's lock, counted for hv and for
    /// the caller; a caller being destroyed is refused.
    fn handle_locked(&self, caller: DomId, req: Request) -> Outcome {
        let mut st = self.lock();
        let st = &mut *st;
        if caller != DOMID_TOOLSTACK && !st.doms.0.contains_key(&caller) {
            return fail(HvError::new(
                ErrorKind::BadDomain,
                "domain is being destroyed",
            ));
        }
        let name = req.name();
        st.counters.op(name);
        if let Some(d) = st.doms.0.get_mut(&caller) {
            d.counters.op(name);
        }
        dispatch(st, caller, req).unwrap_or_else(fail)
    }
}

/// Whether serving `req` may change what hv's guardian records: not a read,
/// a data-path request (an event, a grant copy), nor a statistics node
/// a domain publishes every half second.
fn may_change(req: &Request) -> bool {
    match req {
        Request::Nop
        | Request::StoreRead { .. }
        | Request::StoreGather { .. }
        | Request::StoreDirectory { .. }
        | Request::StoreGetPerms { .. }
        | Request::EvtchnSend { .. }
        | Request::GrantCopy { .. }
        | Request::GrantTableView { .. }
        | Request::Status
        | Request::Trace
        | Request::ContainerList => false,
        Request::StoreWrite { path, .. } => !path.ends_with("/stats"),
        _ => true,
    }
}
