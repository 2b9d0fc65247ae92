//! The soak's faults of hv itself: hv upgraded in place (`splitnet upgrade
//! --hv`) and hv killed (SIGKILL; its guardian starts it again on its last
//! record). Either must leave every domain its id and its process, and
//! every vif Connected; the flows judge the data path as for any event.
//! Hot-plugging waits while one runs ([`Lab::hv_quiet`]): a request hv
//! read and never answered is what a crash may lose, and the churn's
//! count of what it attached must stay exact.

use super::Lab;
use anyhow::{anyhow, bail, Result};
use hv::Toolstack;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Every domain by name: (id, pid).
fn domains(ts: &mut Toolstack) -> Result<BTreeMap<String, (u16, Option<i32>)>> {
    let s = ts.status().map_err(|e| anyhow!("status: {e}"))?;
    Ok(s.domains
        .iter()
        .map(|d| (d.name.clone(), (d.id, d.pid)))
        .collect())
}

impl Lab {
    /// hv upgraded in place (`kill`: false) or killed; returns once the
    /// hv that took over answers, having kept every domain, and every vif
    /// is Connected again.
    pub(super) fn hv_event(&self, kill: bool) -> Result<String> {
        let _quiet = self.hv_quiet.write().unwrap_or_else(|p| p.into_inner());
        let mut ts = self.toolstack()?;
        let before = domains(&mut ts)?;
        let old = ts.status().map_err(|e| anyhow!("status: {e}"))?.hv_pid;
        let t0 = Instant::now();
        let fact = if kill {
            self.kill_hv(old)?
        } else {
            self.upgrade_hv(&mut ts)?
        };
        let back = t0.elapsed();
        let mut ts = self.toolstack()?;
        let now = domains(&mut ts)?;
        if now != before {
            bail!("the domains were {before:?} (id, pid) before and {now:?} after");
        }
        self.await_connected(&mut ts, &format!("hv took over ({fact})"), |_| Ok(()))?;
        Ok(format!(
            "every domain kept its id and process; hv answered again after {:.0} ms, every vif Connected after {:.0} ms: {fact}",
            back.as_secs_f64() * 1e3,
            t0.elapsed().as_secs_f64() * 1e3
        ))
    }

    /// `upgrade --hv` and its outcome, which must be a success.
    fn upgrade_hv(&self, ts: &mut Toolstack) -> Result<String> {
        let n = ts
            .upgrade_hv(None)
            .map_err(|e| anyhow!("upgrade --hv: {e}"))?;
        let socket = toolstack::daemon::socket_path(&self.run_dir);
        let fact = toolstack::handover::wait_outcome(ts, &socket, &n, Duration::from_secs(30))
            .map_err(|e| anyhow!(e))?;
        if !fact.contains(" ok ") {
            bail!("upgrade {n}: {fact}");
        }
        Ok(fact)
    }

    /// SIGKILL of hv (pid `old`) and the report of the hv its guardian
    /// started.
    fn kill_hv(&self, old: u32) -> Result<String> {
        sys::kill(old as i32, libc::SIGKILL)?;
        let died = format!("hv pid {old} died");
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            let fact = (self.toolstack().ok())
                .and_then(|mut t| t.status().ok()?.info.get("hv_recovery").cloned());
            if let Some(fact) = fact.filter(|f| f.contains(&died)) {
                return Ok(fact);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        bail!("no hv took over within 30 s of killing hv (pid {old})")
    }
}
