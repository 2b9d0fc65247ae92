//! A guest that takes no frames (Xen XSA-392): it posts no RX buffers, or
//! keeps too few posted for the frame at the head of its queue. What it
//! costs the driver domain is bounded by its vif's slab (allocated at
//! connect: [`super::RX_QUEUE`] frames in 4 MiB), and once nothing has
//! reached it for [`RX_DRAIN_TIMEOUT`] its queued frames are dropped and
//! counted (`rx_stalled`), even with a slot free, as Linux netback drains
//! a stalled queue after `rx_drain_timeout`.

use super::{Netback, RX_DRAIN_TIMEOUT};
use std::time::Instant;

/// Progress of a vif's RX queue, as housekeeping last saw it.
#[derive(Debug, Default)]
pub(super) struct Stall {
    /// `rx_packets` then.
    delivered: u64,
    /// Since when frames have waited with none delivered.
    since: Option<Instant>,
}

impl Netback {
    /// Housekeeping's look at the RX queue at `now`: drops and counts the
    /// queued frames if none has reached the guest for
    /// [`RX_DRAIN_TIMEOUT`]; returns how many it dropped.
    pub fn drain_stalled_rx(&mut self, now: Instant) -> usize {
        let delivered = self.counters.rx_packets;
        let moved = std::mem::replace(&mut self.rx_stall.delivered, delivered) != delivered;
        if self.rx_slab.is_empty() || moved {
            self.rx_stall.since = None;
            return 0;
        }
        let since = *self.rx_stall.since.get_or_insert(now);
        if now.duration_since(since) < RX_DRAIN_TIMEOUT {
            return 0;
        }
        let n = self.rx_slab.len();
        self.rx_slab.clear();
        self.counters.drops.add("rx_stalled", n as u64);
        self.rx_stall.since = None;
        eprintln!(
            "driver: vif {}: {n} frame(s) waited {RX_DRAIN_TIMEOUT:?} for RX buffers the guest \
             did not post; dropped (rx_stalled)",
            self.be
        );
        n
    }
}
