//! A VM that kicks its TX ring with nothing posted (a kick storm; Xen's
//! answer to event floods, XSA-332, is the late EOI): a kick after which
//! the TX pass takes no chain, or only frames the port refused (a flood
//! of malformed GSO or of spoofed sources, say), is spurious, and after a
//! run of them the kick descriptor leaves the backend's event manager for
//! a delay that grows while the storm lasts ([`domain_common::storm`]). A
//! VM that posts and then kicks is never delayed, and frames it posts
//! meanwhile still go at the next look (every poll makes a TX pass). The storm belongs to the
//! vif, not the connection: a VM cannot shed it by connecting again.

use super::{lock, Backend, KICK};
use domain_common::storm::Verdict;
use std::os::fd::AsFd;
use std::time::Instant;

impl Backend {
    /// After a poll that a kick woke: `took` says whether the TX pass
    /// took a chain whose frame went on.
    pub(super) fn judge_kick(&mut self, took: bool) {
        let v = self.storm.judge(took, Instant::now());
        let mut d = lock(&self.dev);
        d.counters.spurious_kicks += u64::from(v != Verdict::Worked);
        if let Verdict::Throttle(_) = v {
            d.counters.kick_throttles += 1;
            drop(d);
            if let Some(k) = self.kick.as_ref() {
                let _ = self.epoll.remove(k.as_fd());
            }
        }
    }

    /// When a throttled kick is due back in the event manager; None: it
    /// is not throttled.
    pub fn storm_due(&self) -> Option<Instant> {
        self.storm.due()
    }

    /// If the kick's delay is over at `now`, it goes back in the event
    /// manager and the backend becomes readable for one look; whether so.
    pub fn resume_due(&mut self, now: Instant) -> bool {
        if !self.storm.resume_due(now) {
            return false;
        }
        if let Some(k) = self.kick.as_ref() {
            let _ = self.epoll.add_edge(k.as_fd(), KICK);
        }
        let _ = self.wake_tx.ring();
        true
    }
}
