//! The driver domain's switch (Menon 2006 §2: the bridge in the driver
//! domain): a MAC-learning bridge segmented by VLAN, each vif's multicast
//! filter, and the forwarding of a batch of frames from one ingress to
//! their egresses.
//!
//! Forwarding is a pipeline, each stage handing a frame on to the next as
//! a switch's ingress, forwarding database and egress do (Linux's bridge:
//! `br_handle_frame` → `br_forward` → `br_dev_queue_push_xmit`):
//! [`ingress`] admits the frame by its VLAN, [`bridge`] learns its source
//! and picks the bridge ports it goes to within its segment, and
//! [`egress`] rewrites its tag where it leaves in another form and hands
//! it to the driver through [`Egress`]: to a guest at once, to a port in
//! one batch per port.

use frame::packet::FrameRef;
use mcast::McastFilter;
use vlan::{Attach, Segment};

pub mod bridge;
pub mod egress;
pub mod ingress;
pub mod mcast;
pub mod vlan;

/// Index of a bridge port: vif i is port i + 1, the driver domain's
/// uplinks and extra ports are [`PORT_BASE`] and up.
pub type PortId = usize;

/// Bridge port of the first uplink or extra port; below it, vifs.
pub const PORT_BASE: PortId = 1 << 20;

/// A bridge port a flooded frame may reach.
#[derive(Clone, Copy)]
pub struct Member<'a> {
    pub port: PortId,
    /// A vif's multicast filter; None for a port, which takes every group.
    pub filter: Option<&'a McastFilter>,
}

impl Member<'_> {
    /// Whether it takes a frame to group `dst`.
    pub fn wants(&self, dst: &[u8; 6]) -> bool {
        self.filter.is_none_or(|f| f.wants(dst))
    }
}

/// The bridge ports around the switch, as the driver domain keeps them:
/// where each is, and how a frame reaches it.
pub trait Egress {
    /// Where bridge port `p` is, when a frame may leave through it (an
    /// open port, or a vif other than the ingress).
    fn attach(&mut self, p: PortId) -> Option<Attach>;
    /// The bridge ports a frame flooded in `seg` may reach: the open
    /// ports that are members, then the connected vifs that are.
    fn members(&self, seg: Segment) -> impl Iterator<Item = Member<'_>> + '_;
    /// Hands `f` to the guest of vif port `p`.
    fn deliver(&mut self, p: PortId, f: &FrameRef<'_>);
    /// Sends `frames` out of port `p`, in order, as one batch.
    fn send_batch(&mut self, p: PortId, frames: &[&FrameRef<'_>]);
    /// Whether any capture is on (with none, tapping costs one branch).
    fn tapping(&self) -> bool;
    /// Shows `f` to the captures of port `p`, entering or leaving (`out`).
    fn tap(&mut self, p: PortId, out: bool, f: &FrameRef<'_>);
}
