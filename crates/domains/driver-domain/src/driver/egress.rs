//! The bridge ports around the switch as the driver loop keeps them
//! ([`Egress`]): the vifs other than the ingress, the interface ports, the
//! capture taps, and the ingress vif's dedicated queue.

use super::events::SlotSet;
use super::ports::Ports;
use super::vif::Vif;
use crate::capture::Taps;
use crate::port::vmq::Queue;
use crate::switch::vlan::{Attach, Segment};
use crate::switch::{Egress, Member, PortId, PORT_BASE};
use frame::packet::FrameRef;

/// The vifs other than the one whose frame is being forwarded (bridge port
/// `before.len() + 1` is the ingress, when it is a vif).
pub(super) struct Others<'a> {
    pub(super) before: &'a mut [Vif],
    pub(super) after: &'a mut [Vif],
    /// vifs given frames, whose responses the turn then publishes.
    pub(super) dirty: &'a mut SlotSet,
}

impl<'a> Others<'a> {
    /// Every vif (the frame came from the physical port).
    pub(super) fn all(vifs: &'a mut [Vif], dirty: &'a mut SlotSet) -> Others<'a> {
        Others {
            before: vifs,
            after: &mut [],
            dirty,
        }
    }

    pub(super) fn reborrow(&mut self) -> Others<'_> {
        Others {
            before: self.before,
            after: self.after,
            dirty: self.dirty,
        }
    }

    /// The vif of bridge port `port` (vif i is port i + 1), unless it is the ingress.
    pub(super) fn get(&mut self, port: PortId) -> Option<&mut Vif> {
        let i = port.checked_sub(1)?;
        let b = self.before.len();
        if i < b {
            self.before.get_mut(i)
        } else {
            self.after.get_mut(i.checked_sub(b + 1)?)
        }
    }

    /// The connected vifs here, with their bridge ports.
    pub(super) fn connected(&self) -> impl Iterator<Item = (PortId, &Vif)> + '_ {
        let b = self.before.len();
        let before = self.before.iter().enumerate().map(|(i, v)| (i + 1, v));
        let after = self
            .after
            .iter()
            .enumerate()
            .map(move |(i, v)| (b + i + 2, v));
        before.chain(after).filter(|(_, v)| v.nb.is_connected())
    }
}

/// Where the switch's frames from one ingress go.
pub(super) struct Out<'a, 'q> {
    pub(super) vifs: Others<'a>,
    pub(super) ports: &'a mut Ports,
    pub(super) taps: &'a mut Taps,
    /// The ingress vif's dedicated queue and the port it is on: its frames
    /// to that port leave through the queue.
    pub(super) via: &'a mut Option<(PortId, &'q mut Queue)>,
}

impl Egress for Out<'_, '_> {
    fn attach(&mut self, p: PortId) -> Option<Attach> {
        match p >= PORT_BASE {
            true => self.ports.attach_of(p),
            false => self.vifs.get(p).map(|v| v.attach),
        }
    }

    fn members(&self, seg: Segment) -> impl Iterator<Item = Member<'_>> + '_ {
        let ports = self
            .ports
            .members(seg)
            .map(|port| Member { port, filter: None });
        let vifs = self
            .vifs
            .connected()
            .filter(move |(_, v)| v.attach.member(seg))
            .map(|(port, v)| Member {
                port,
                filter: Some(v.nb.multicast_filter()),
            });
        ports.chain(vifs)
    }

    fn deliver(&mut self, p: PortId, f: &FrameRef<'_>) {
        if let Some(v) = self.vifs.get(p) {
            v.nb.deliver(f);
            self.vifs.dirty.insert(p - 1);
        }
    }

    fn send_batch(&mut self, p: PortId, frames: &[&FrameRef<'_>]) {
        match self.via.as_mut().filter(|(port, _)| *port == p) {
            Some((_, q)) => q.send_batch(frames),
            None => {
                if let Some(port) = self.ports.get(p) {
                    port.send_batch(frames);
                }
            }
        }
    }

    fn tapping(&self) -> bool {
        !self.taps.is_empty()
    }

    fn tap(&mut self, p: PortId, out: bool, f: &FrameRef<'_>) {
        self.taps.frame(p, out, f);
    }
}
