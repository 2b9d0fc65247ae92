//! A guest vif as the driver loop keeps it: its netback, where it is
//! bridged, its dedicated queue if any.

use crate::netback::Netback;
use crate::port::vmq::{Queue, QueueId};
use crate::switch::vlan::Attach;
use std::os::fd::OwnedFd;

pub(super) struct Vif {
    pub(super) nb: Netback,
    pub(super) stats_written: String,
    /// The bridge has dropped this vif's MACs (after it disconnected).
    pub(super) forgotten: bool,
    /// Its backend directory is gone (the guest died or the vif was
    /// detached): the slot, and its bridge port, may be reused.
    pub(super) gone: bool,
    /// The loop's own handles on the vif's doorbells, registered with the
    /// event manager while it is connected (see [`Events::watch_vif`]).
    pub(super) bells: Vec<OwnedFd>,
    /// Its bridge and access VLAN (backend nodes `bridge`, `splitnet-vlan`).
    pub(super) attach: Attach,
    /// Its index (`splitnet-index`): names its queue.
    pub(super) index: u32,
    /// Its dedicated queue, when it asked for one (`splitnet-pdev`).
    pub(super) queue: VifQueue,
}

/// A vif's dedicated queue (Ram thesis ch. 3): asked for with
/// `splitnet-pdev`, dedicated when its uplink gave it one, shared (through
/// the bridge, with the reason) otherwise.
#[derive(Default)]
pub(super) struct VifQueue {
    /// The uplink it asked for a queue on.
    pub(super) pdev: Option<String>,
    /// The uplink's port slot, the queue there, and the queue itself.
    pub(super) at: Option<(usize, QueueId, Queue)>,
    /// Whether the loop listens to the queue (off while the guest has
    /// posted too few buffers).
    pub(super) interest: bool,
    /// Why it shares the default queue, when it asked and does.
    pub(super) why: Option<String>,
    pub(super) kernel_drops: u64,
}

/// Frames one queue takes per turn, so a flooded queue cannot starve
/// another's (the rest wait for the next turn).
pub(super) const QUEUE_BUDGET: usize = 64;
