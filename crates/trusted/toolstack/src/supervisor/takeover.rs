//! A crashed driver domain taken over in place by a new process.
//!
//! hv keeps a driver domain whose process died (`Hypervisor::revive`):
//! its id, its vifs' event channels, its store entries, and the sockets
//! hv holds on its ports, where frames arriving meanwhile wait. The new
//! process resumes on a fresh control socket as an upgrade's new process
//! does (`splitnet upgrade drv`), maps the rings again and goes on
//! from the indexes they hold: the guests see their backend pause, not
//! go, and what they queued meanwhile waits in their rings. A restart
//! makes them reconnect instead (fresh rings, the frames in the old ones
//! lost), which is what a crash soon after another gets
//! ([`TAKEOVER_WINDOW`]), so a ring whose contents crash the backend is
//! not served again.

use super::Supervisor;
use crate::cgroup::Cgroup;
use crate::host;
use hv::core::Hypervisor;
use hv::proto::DomId;
use std::sync::Arc;
use std::time::Duration;

/// A driver domain that crashes again this soon after a crash is
/// restarted, not taken over: its successor may have died of what the
/// rings hold.
const TAKEOVER_WINDOW: Duration = Duration::from_secs(2);

impl Supervisor {
    /// Driver domain `name` (`domid`), whose process died unasked, taken
    /// over by a new process; false when it is not to be (not a driver
    /// domain, takeover off, a crash within the window before, hv going
    /// down) or could not be, and it restarts instead.
    pub(super) fn take_over(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        domid: DomId,
        name: &str,
        laps: &mut crate::laps::Laps,
    ) -> bool {
        let Ok(d) = self.config(name) else {
            return false;
        };
        let wanted = d.kind == crate::topology::DomainKind::Driver && d.takeover;
        if !wanted || hv.is_shutting_down() || self.crashed_lately(name) {
            return false;
        }
        match self.start_successor(hv, domid, &d, laps) {
            Ok(pid) => {
                self.crash_loop(name);
                self.lock().crash_restarts += 1;
                hv.set_info("restarts.on-crash", &self.lock().crash_restarts.to_string());
                hv::log!(
                    Notice,
                    dom = name,
                    "taken over in place by pid {pid}, {} ms after its process ended ({laps}); its guests keep their rings",
                    laps.total().as_millis()
                );
                self.changed.notify_all();
                true
            }
            Err(e) => {
                hv::log!(
                    Warning,
                    dom = name,
                    "no takeover in place ({e}): restarting it"
                );
                false
            }
        }
    }

    /// Whether `name`'s process, which ended with `status`, crashed: it
    /// was not asked to end, and its restart policy brings it back.
    pub(super) fn crashed(
        &self,
        name: &str,
        status: &std::io::Result<std::process::ExitStatus>,
    ) -> bool {
        let Ok(d) = self.config(name) else {
            return false;
        };
        !self.lock().intents.contains_key(name) && d.restart_policy().applies_to(status)
    }

    /// Whether `name` crashed within [`TAKEOVER_WINDOW`] before now.
    fn crashed_lately(&self, name: &str) -> bool {
        let st = self.lock();
        (st.crashes.get(name).into_iter().flatten()).any(|t| t.elapsed() < TAKEOVER_WINDOW)
    }

    /// Starts the successor of domain `domid`'s dead process, which
    /// resumes on the control socket hv gives it; its pid.
    fn start_successor(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        domid: DomId,
        d: &crate::topology::DomainConfig,
        laps: &mut crate::laps::Laps,
    ) -> Result<i32, String> {
        let stopped = sys::signals::monotonic_usec();
        let sock = hv.revive(domid).map_err(|e| e.to_string())?;
        laps.mark("revive");
        // Its dedicated queues go, as before a restart: the successor
        // makes again those of the vifs it takes back.
        crate::queues::drop_all(&d.name);
        let ns = host::netns_name(&d.name);
        let logs = self.domain_log(&d.name)?;
        let cg = Cgroup::create(&self.layout, &d.name).map_err(|e| e.to_string())?;
        let resume = format!("{stopped} 0 crash");
        let mut child = self.spawn_domain(
            d,
            &ns,
            logs,
            sock,
            None,
            super::launch::Start::Successor(&resume),
        )?;
        let pid = child.id() as i32;
        laps.mark("spawn");
        super::launch::weighed(d, pid);
        if let Err(e) = cg.add(pid) {
            hv::log!(Warning, dom = d.name, "{e}");
        }
        self.watch(hv, domid, &d.name, &ns, cg, pid, move || child.wait())?;
        *self.lock().starts.entry(d.name.clone()).or_default() += 1;
        Ok(pid)
    }
}
