//! A driver domain whose process died or handed its vifs over, kept for a
//! successor process that takes them over in place (Menon 2006 §3's
//! restartable driver domain, without the reconnect a fresh domain needs).
//!
//! A domain marked [`Hypervisor::keep_on_hangup`] is not destroyed when
//! its control connection closes: it is left *orphaned*, its event
//! channels bound, its store home and backend directories in place, its
//! grant tables and the new grant mechanism's tables kept, so its guests
//! see no backend go. [`Hypervisor::revive`] then drops what died with the
//! process (the grants it mapped or held, its watches, the descriptors it
//! was given) and hands out a new control socket, on which the successor
//! says `Resume`. Whoever decides
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
        let st = self.orphaned_within(domid, HANGUP_SEEN)?;
        self.revive_locked(st, domid)
    }

    /// Waits up to `limit` for driver domain `domid`'s process to hang up
    /// (one asked to hand its vifs over does so once it has): Ok once the
    /// domain is orphaned.
    pub fn wait_orphaned(&self, domid: DomId, limit: Duration) -> HvResult<()> {
        self.orphaned_within(domid, limit).map(drop)
    }

    /// hv's state once `domid` is orphaned, waiting up to `limit`.
    fn orphaned_within(
        &self,
        domid: DomId,
        limit: Duration,
    ) -> HvResult<std::sync::MutexGuard<'_, State>> {
        let deadline = Instant::now() + limit;
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
                return Ok(st);
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
    }

    /// [`Hypervisor::revive`] of a domain found orphaned under `st`.
    fn revive_locked(
        self: &Arc<Self>,
        mut st: std::sync::MutexGuard<'_, State>,
        domid: DomId,
    ) -> HvResult<SeqPacket> {
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
    super::batches::give_up_pending(&d.mem);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch as page_layout;
    use crate::core::DomainSpec;
    use crate::hold::BatchKind;
    use abi::SharedMemory;
    use std::os::fd::AsFd;

    /// A batch the dead process rang for, taken off the doorbell by hv's
    /// batch thread but not run yet when the successor comes, is given up:
    /// what it would map or hold would belong to no process.
    /// Submits an empty copy batch on `page` and rings `kick`; its number.
    fn submit(page: &dyn SharedMemory, kick: &sys::Doorbell) -> u32 {
        let seq = page.load_u32(page_layout::DONE_OFF).wrapping_add(1);
        page.write_u32(page_layout::COUNT_OFF, 0);
        page.write_u32(page_layout::KIND_OFF, BatchKind::Copy as u32);
        page.store_u32(page_layout::SEQ_OFF, seq);
        kick.ring().unwrap();
        seq
    }

    /// A batch the dead process rang for, taken off the doorbell by hv's
    /// batch thread but not run yet when the successor comes, is given up:
    /// what it would map or hold would belong to no process.
    #[test]
    fn a_batch_rung_before_the_death_is_not_run_after_it() {
        let hv = Hypervisor::new();
        // The batch thread stays where it is: moving to the caller's core
        // after the first batch asks for hv's lock (the domain's cores),
        // which this test holds while it waits for the second doorbell to
        // be taken.
        hv.set_batches_follow_caller(false);
        let (d, _sock) = (hv.create_domain(DomainSpec::new("drv", "driver", 16, 1))).unwrap();
        let (mem, kick, done, hv_kick) = {
            let mut st = hv.lock();
            let dom = domain(&mut st, d).unwrap();
            let kick = dom.kick.try_clone().unwrap();
            let hv_kick = dom.batch.kick.try_clone().unwrap();
            (
                dom.mem.clone(),
                kick,
                dom.done.try_clone().unwrap(),
                hv_kick,
            )
        };
        let page = &mem.batch_map;
        let ran = |hv: &Hypervisor| hv.lock().doms.0[&d].counters.ops_of("batch");
        // A first batch, run: the batch thread is serving.
        let first = submit(page, &kick);
        while page.load_u32(page_layout::DONE_OFF) != first {
            done.wait(Some(Duration::from_secs(5))).unwrap();
        }
        assert_eq!(ran(&hv), 1);
        // The second is rung while hv's lock is held here: the batch thread
        // drains the doorbell, reads the page and waits on the lock.
        let mut st = hv.lock();
        let seq = submit(page, &kick);
        let until = Instant::now() + Duration::from_secs(5);
        while sys::poll_readable(&[hv_kick.as_fd()], Some(Duration::ZERO)).unwrap()[0] {
            assert!(
                Instant::now() < until,
                "hv's batch thread never took the doorbell"
            );
            std::thread::yield_now();
        }
        let (hv_end, _dom_end) = SeqPacket::pair().unwrap();
        release_process(&mut st, d, hv_end).unwrap();
        drop(st);
        assert!(done.wait(Some(Duration::from_secs(5))).unwrap() > 0);
        assert_eq!(page.load_u32(page_layout::DONE_OFF), seq);
        assert_eq!(
            ran(&hv),
            1,
            "the dead process's batch ran for its successor"
        );
    }
}
