//! A driver domain whose process died, kept for a successor process that
//! takes its vifs over in place (Menon 2006 §3's restartable driver
//! domain, without the reconnect a fresh domain needs).
//!
//! A domain marked [`Hypervisor::keep_on_hangup`] is not destroyed when
//! its control connection closes: it is left *orphaned*, its event
//! channels bound, its store home and backend directories in place, its
//! grant tables and the new grant mechanism's tables kept, so its guests
//! see no backend go. [`Hypervisor::revive`] then drops what died with the
//! process (the grants it mapped or held, its watches, the descriptors it
//! was given) and hands out a new control socket, on which the successor
//! says `Resume` as a program that replaced itself does. Whoever decides
//! against a successor destroys the domain as usual.

use super::reply::os;
use super::state::{domain, State};
use super::Hypervisor;
use crate::error::{err, ErrorKind, HvResult};
use crate::proto::DomId;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::SeqPacket;

/// How long [`Hypervisor::revive`] waits for hv to see the dead process's
/// control connection close (its exit closes it, and a reaper may see
/// the exit first).
const HANGUP_SEEN: Duration = Duration::from_millis(500);

impl Hypervisor {
    /// Whether driver domain `domid` is kept, orphaned, when its control
    /// connection closes (false: destroyed, as any other domain).
    pub fn keep_on_hangup(&self, domid: DomId, keep: bool) {
        let mut st = self.lock();
        if let Ok(d) = domain(&mut st, domid) {
            d.keep_on_hangup = keep && d.kind == "driver";
        }
    }

    /// Called by the serving thread of incarnation `incarnation` of
    /// `domid` once its connection closed: whether the domain stays
    /// (orphaned for a successor, or superseded already) instead of being
    /// destroyed.
    pub(super) fn hung_up(&self, domid: DomId, incarnation: u32) -> bool {
        let mut st = self.lock();
        let Ok(d) = domain(&mut st, domid) else {
            return false;
        };
        if d.incarnation != incarnation {
            return true;
        }
        if !d.keep_on_hangup {
            return false;
        }
        d.orphaned = true;
        // The serving thread also ends on a reply the domain did not take:
        // its process, alive, then finds the connection closed and exits,
        // so that its reaper decides (it would wait on it forever).
        d.control.shutdown();
        let name = d.name.clone();
        drop(st);
        self.log(format_args!(
            "domain {domid} ({name}): its process hung up; kept for a successor"
        ));
        self.done.notify_all();
        true
    }

    /// Gives orphaned driver domain `domid` to a successor process: what
    /// the dead one mapped, held and watched is released, and the new end
    /// of a fresh control socket is returned, on which the successor says
    /// `Resume`. Its channels, store entries and tables stay as they were.
    pub fn revive(self: &Arc<Self>, domid: DomId) -> HvResult<SeqPacket> {
        let deadline = Instant::now() + HANGUP_SEEN;
        let mut st = self.lock();
        loop {
            let d = domain(&mut st, domid)?;
            if !d.keep_on_hangup {
                return err(
                    ErrorKind::Invalid,
                    format!("domain {domid} is not kept when its process dies"),
                );
            }
            if d.orphaned {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return err(
                    ErrorKind::Invalid,
                    format!("domain {domid}'s process has not hung up"),
                );
            }
            st = (self.done.wait_timeout(st, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let (hv_end, dom_end) = os("control socket", SeqPacket::pair())?;
        let control = os("control socket", hv_end.try_clone())?;
        let incarnation = release_process(&mut st, domid, control)?;
        st.counters.op("domains_revived");
        drop(st);
        let hv = self.clone();
        let name = format!("hv-ctl-{domid}");
        self.spawn_guarded(name, Some(domid), move || {
            hv.serve_incarnation(domid, hv_end, incarnation)
        })?;
        self.note_change();
        Ok(dom_end)
    }
}

/// What driver domain `domid`'s dead process held is released, and
/// `control` is its connection now; the new incarnation's number.
fn release_process(st: &mut State, domid: DomId, control: SeqPacket) -> HvResult<u32> {
    let Some(mut d) = st.doms.0.remove(&domid) else {
        return err(
            ErrorKind::BadDomain,
            format!("domain {domid} does not exist"),
        );
    };
    super::lifecycle::release_grants(st, &mut d);
    d.fds_given.clear();
    if let Some(w) = d.watch_tx.take() {
        w.shutdown();
    }
    st.store.drop_connection(domid as u64);
    d.control = control;
    d.orphaned = false;
    d.unclaimed = Some(d.ports.keys().copied().collect());
    d.incarnation = d.incarnation.wrapping_add(1);
    let incarnation = d.incarnation;
    st.doms.0.insert(domid, d);
    Ok(incarnation)
}
