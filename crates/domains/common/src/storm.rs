//! Event storms: a peer that keeps notifying a channel with no work behind
//! the notifications. Xen's answer (XSA-332 for backends, XSA-391 for
//! frontends) is the "late EOI": an event handler says when an event found
//! nothing to do, and after a run of such spurious events the event
//! channel is not re-armed at once but after a delay that grows while the
//! storm lasts. A peer with real work is never delayed, since any event
//! that finds work ends the run.
//!
//! Here a channel is re-armed by putting its doorbells back in the loop's
//! event manager. While they are out, the peer's notifications only set
//! the pending word (a send that finds it set rings nothing), so the storm
//! costs the flooded domain one look per delay, and the flooder its own
//! CPU.

use crate::counters::VifCounters;
use std::time::{Duration, Instant};

/// Spurious events in a row that a channel may raise before it is
/// throttled. High enough that a real peer never reaches it (an event
/// whose work an earlier poll already took is spurious, but soon followed
/// by one with work).
pub const THRESHOLD: u32 = 64;
/// The first delay of a throttled channel; each further spurious event
/// of the same storm doubles it, up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(1);
/// The longest a channel stays out of the event manager: the most a peer
/// that stops storming and starts working waits for its first look.
pub const MAX_DELAY: Duration = Duration::from_millis(100);

/// What one event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It found work: any storm is over.
    Worked,
    /// It found none.
    Spurious,
    /// It found none, once too often: the channel is out until then.
    Throttle(Instant),
}

/// One channel's storm state: the current run of spurious events, and
/// when a throttled channel is due back.
#[derive(Debug, Clone, Default)]
pub struct Storm {
    /// The peer's producer indices at its last event ([`Storm::moved`]).
    mark: u64,
    run: u32,
    /// Throttles since the last event with work (the delay's exponent).
    level: u32,
    until: Option<Instant>,
}

impl Storm {
    /// After an event on the channel (its doorbell woke the loop) was
    /// handled: `worked` says whether it found work. Returns when the
    /// channel may wake the loop again if it must leave the event manager
    /// until then; None: it stays. The vif's `counters` count spurious
    /// events and throttles.
    pub fn after_event(
        &mut self,
        worked: bool,
        now: Instant,
        counters: &mut VifCounters,
    ) -> Option<Instant> {
        let v = self.judge(worked, now);
        counters.spurious_events += u64::from(v != Verdict::Worked);
        match v {
            Verdict::Throttle(until) => {
                counters.event_throttles += 1;
                Some(until)
            }
            _ => None,
        }
    }

    /// Whether `mark`, the producer indices the peer owns as they read
    /// now, moved since its last event: a peer publishes before it
    /// notifies, so an event whose producers did not move found no work.
    pub fn moved(&mut self, mark: u64) -> bool {
        std::mem::replace(&mut self.mark, mark) != mark
    }

    /// [`Storm::after_event`] for a channel whose counters are its own.
    pub fn judge(&mut self, worked: bool, now: Instant) -> Verdict {
        if worked {
            (self.run, self.level) = (0, 0);
            return Verdict::Worked;
        }
        self.run = self.run.saturating_add(1);
        if self.run <= THRESHOLD {
            return Verdict::Spurious;
        }
        let delay = FIRST_DELAY
            .saturating_mul(1 << self.level.min(16))
            .min(MAX_DELAY);
        self.level += 1;
        let until = now + delay;
        self.until = Some(until);
        Verdict::Throttle(until)
    }

    /// When the throttled channel is due back in the event manager; None
    /// when it is not throttled.
    pub fn due(&self) -> Option<Instant> {
        self.until
    }

    /// Whether a throttled channel's delay is over at `now`: it goes back
    /// in the event manager and is looked at once (the run goes on, so a
    /// storm that continues is throttled again at its next empty event).
    pub fn resume_due(&mut self, now: Instant) -> bool {
        match self.until {
            Some(t) if t <= now => {
                self.until = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_with_work_is_never_throttled() {
        let (mut s, now, mut c) = (Storm::default(), Instant::now(), VifCounters::default());
        for i in 0..10_000 {
            // Even many empty events, as long as work comes between runs.
            assert_eq!(s.after_event(i % THRESHOLD == 0, now, &mut c), None);
        }
        assert_eq!((c.event_throttles, s.due()), (0, None));
    }

    #[test]
    fn an_event_works_when_the_producers_moved_since_the_last() {
        let mut s = Storm::default();
        assert!(s.moved(1 << 32 | 5));
        assert!(!s.moved(1 << 32 | 5));
        assert!(s.moved(2 << 32 | 5));
    }

    #[test]
    fn a_storm_is_throttled_after_the_threshold_with_a_growing_delay() {
        let (mut s, t0, mut c) = (Storm::default(), Instant::now(), VifCounters::default());
        for _ in 0..THRESHOLD {
            assert_eq!(s.after_event(false, t0, &mut c), None);
        }
        assert_eq!(s.after_event(false, t0, &mut c), Some(t0 + FIRST_DELAY));
        assert!(!s.resume_due(t0));
        assert!(s.resume_due(t0 + FIRST_DELAY));
        assert_eq!(s.due(), None);
        // The storm goes on: throttled again at once, twice as long.
        assert_eq!(s.after_event(false, t0, &mut c), Some(t0 + 2 * FIRST_DELAY));
        for _ in 0..20 {
            s.resume_due(t0 + MAX_DELAY * 2);
            let until = s.after_event(false, t0, &mut c).expect("throttled");
            assert!(until - t0 <= MAX_DELAY);
        }
        assert_eq!(s.after_event(false, t0, &mut c), Some(t0 + MAX_DELAY));
        assert_eq!(c.spurious_events, u64::from(THRESHOLD) + 23);
        assert_eq!(c.event_throttles, 23);
        // One event with work ends it.
        assert_eq!(s.after_event(true, t0, &mut c), None);
        for _ in 0..THRESHOLD {
            assert_eq!(s.after_event(false, t0, &mut c), None);
        }
        assert_eq!(s.after_event(false, t0, &mut c), Some(t0 + FIRST_DELAY));
    }
}
