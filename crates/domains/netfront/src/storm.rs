//! A driver domain that rings its guest's doorbell with nothing behind it
//! (Xen XSA-391: frontends must not trust their backends either, and
//! Linux netfront answers a backend's event storm with the late EOI): a
//! notification that finds neither ring's responses moved since the last
//! is spurious, and after a run of them the guest's loop stops listening
//! to the channel for a growing delay ([`domain_common::storm`]). A
//! backend that publishes responses and then notifies is never delayed.

use super::Netfront;
use std::time::Instant;

impl Netfront {
    /// After a notification from the backend woke the loop (and was
    /// taken): whether it brought work (either ring's response producer
    /// moved) decides the storm's course. Returns until when the channel's
    /// doorbells must leave the loop's event manager; None: they stay.
    pub fn after_event(&mut self, now: Instant) -> Option<Instant> {
        let mark = u64::from(self.tx.peek_rsp_prod()) << 32 | u64::from(self.rx.peek_rsp_prod());
        let worked = self.storm.moved(mark);
        self.storm.after_event(worked, now, &mut self.counters)
    }
}
