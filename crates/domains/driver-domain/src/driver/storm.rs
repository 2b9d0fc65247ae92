//! The driver loop's side of a guest's event storm (Xen XSA-332,
//! [`domain_common::storm`]): a vif whose notifications keep finding no
//! work leaves the event manager for a while, and comes back for a look
//! when its delay is over.

use super::events::Source;
use super::Driver;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

impl Driver {
    /// After the vifs whose doorbells rang this turn were serviced: each
    /// notification's verdict, and the doorbells of a storming vif out of
    /// the event manager.
    pub(super) fn judge_events(&mut self) {
        if self.events.rang.is_empty() {
            return;
        }
        let now = Instant::now();
        let rang = self.events.rang.take();
        for &i in &rang {
            let Some(v) = self.vifs.get_mut(i).filter(|v| v.nb.is_connected()) else {
                continue;
            };
            if v.nb.after_event(now).is_some() {
                for b in &v.bells {
                    let _ = self.events.epoll.remove(b.as_fd());
                }
                self.events.throttled.insert(i);
            }
        }
        self.events.rang.give_back(rang);
    }

    /// Throttled vifs whose delay is over get their doorbells back and a
    /// look; for the others, how long until the first is due.
    pub(super) fn storms_due(&mut self) -> Option<Duration> {
        if self.events.throttled.is_empty() {
            return None;
        }
        let now = Instant::now();
        let (vifs, epoll, ready) = (&mut self.vifs, &self.events.epoll, &mut self.events.ready);
        self.events.throttled.keep_waiting(|i| {
            // A vif gone down, or a new one in its slot, is not throttled.
            let v = vifs.get_mut(i).filter(|v| v.nb.is_connected())?;
            if v.nb.storm.resume_due(now) {
                for b in &v.bells {
                    let _ = epoll.add(b.as_fd(), Source::Vif(i).token());
                }
                ready.insert(i);
                return None;
            }
            v.nb.storm.due().map(|at| at.saturating_duration_since(now))
        })
    }
}
