//! Forwarding a batch of frames from one ingress: the driver hands it to
//! the switch ([`switch::ingress::forward`]) with its view of the bridge
//! ports ([`Out`]); the switch does the rest. A port's frames are read
//! here, where a macvlan group's member is sorted out.

use super::egress::{Others, Out};
use super::events::SlotSet;
use super::ports::Ports;
use super::vif::Vif;
use crate::capture::Taps;
use crate::port::vmq::Queue;
use crate::port::Port;
use crate::switch::bridge::Bridge;
use crate::switch::egress::Scratch;
use crate::switch::vlan::Attach;
use crate::switch::{self, PortId};
use frame::packet::FrameRef;

/// What forwarding a batch of frames touches besides the vifs.
pub(super) struct Fwd<'a> {
    pub(super) bridge: &'a mut Bridge,
    pub(super) ports: &'a mut Ports,
    pub(super) taps: &'a mut Taps,
    pub(super) scratch: &'a mut Scratch,
    /// The ingress vif's dedicated queue and the port it is on: its frames
    /// to that port leave through the queue.
    pub(super) via: Option<(PortId, &'a mut Queue)>,
}

/// Reads port slot `j`'s queued frames (its port `p` is out of the slot)
/// into the bridge. A member of a macvlan group enters as its primary's
/// bridge port, and only with unicast: the kernel's macvlan gave it the
/// frames for its guest's MAC, and a copy of every wire broadcast and
/// multicast, which the primary also got. Those copies, and whatever a
/// member reads while its primary is closed, are dropped and counted.
pub(super) fn read_port(
    fx: &mut Fwd<'_>,
    p: &mut dyn Port,
    j: usize,
    vifs: &mut [Vif],
    dirty: &mut SlotSet,
) -> std::io::Result<()> {
    let (ingress, from, member) = match fx.ports.ingress_of(j) {
        Some((i, a, m)) => (Some(i), a, m),
        None => (None, fx.ports.list[j].attach, true),
    };
    let mut dropped = 0;
    let r = p.recv_batch(&mut |batch| {
        let Some(ingress) = ingress else {
            dropped += batch.len() as u64;
            return;
        };
        // A group member forwards its unicast frames only (its primary
        // takes the group's broadcast): each run between two group
        // frames goes on at once.
        let group = |f: &FrameRef<'_>| member && f.head.first().is_some_and(|b| b & 1 != 0);
        for run in batch.split(group) {
            if !run.is_empty() {
                forward(fx, ingress, from, run, Others::all(vifs, dirty));
            }
        }
        dropped += batch.iter().filter(|f| group(f)).count() as u64;
    });
    fx.ports.list[j].group_dropped += dropped;
    r
}

/// Hands `frames`, arriving on bridge port `ingress` (`from` classifies
/// them), to the switch, which sends each where the bridge says: to the
/// vifs among `vifs` at once, to ports together at the end. Returns how
/// many frames a vif sent tagged (dropped).
pub(super) fn forward(
    fx: &mut Fwd<'_>,
    ingress: PortId,
    from: Attach,
    frames: &[FrameRef<'_>],
    vifs: Others<'_>,
) -> u64 {
    let mut out = Out {
        vifs,
        ports: fx.ports,
        taps: fx.taps,
        via: &mut fx.via,
    };
    switch::ingress::forward(fx.bridge, fx.scratch, &mut out, ingress, from, frames)
}
