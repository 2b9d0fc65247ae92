//! A guest that rings its doorbell with nothing behind it (Xen XSA-332):
//! each of its notifications that finds neither ring's requests moved
//! since the last is spurious, and after a run of them the driver loop
//! stops listening to the vif for a growing delay
//! ([`domain_common::storm`], Linux netback's late EOI with the spurious
//! flag). A guest that posts requests and then notifies is never delayed.

use super::Netback;
use std::time::Instant;

impl Netback {
    /// After a notification from the guest woke the loop (and was taken):
    /// whether it brought work (either ring's request producer moved)
    /// decides the storm's course. Returns until when the vif's doorbells
    /// must leave the loop's event manager; None: they stay.
    pub fn after_event(&mut self, now: Instant) -> Option<Instant> {
        let prod = |r: Option<u32>| u64::from(r.unwrap_or(0));
        let mark = prod(self.tx.as_ref().map(|r| r.peek_req_prod())) << 32
            | prod(self.rx.as_ref().map(|r| r.peek_req_prod()));
        let worked = self.storm.moved(mark);
        self.storm.after_event(worked, now, &mut self.counters)
    }
}
