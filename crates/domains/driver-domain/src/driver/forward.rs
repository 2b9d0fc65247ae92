//! Forwarding a batch of frames from one ingress: the bridge decides each
//! frame's egresses within its VLAN segment, frames are retagged where they
//! leave with another tag, handed to guests at once and to ports in one
//! batch per port.

use super::events::SlotSet;
use super::ports::{Ports, PORT_BASE};
use super::vif::Vif;
use crate::capture::Taps;
use crate::port::vmq::Queue;
use crate::port::Port;
use crate::switch::bridge::{Bridge, PortId, Route};
use crate::switch::vlan::{self, Attach, Retagged, Segment, RETAG_HEAD};
use frame::packet::FrameRef;
use std::time::Instant;

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

/// Frames to the ports sent in one batch, at most.
pub(super) const PORT_BATCH: usize = 64;

/// Fixed scratch for the first bytes of frames whose 802.1Q tag is added
/// or removed on the way ([`vlan::retag`]), one slot per frame of a batch:
/// allocated once, so retagging allocates nothing per frame.
pub(super) struct Scratch {
    pub(super) bufs: Box<[[u8; RETAG_HEAD]]>,
    pub(super) made: [Retagged; PORT_BATCH],
    /// Frames waiting to be sent to ports, in order.
    pub(super) queued: [Queued; PORT_BATCH],
}

impl Scratch {
    pub(super) fn new() -> Scratch {
        Scratch {
            bufs: vec![[0; RETAG_HEAD]; PORT_BATCH].into_boxed_slice(),
            made: [Retagged::default(); PORT_BATCH],
            queued: [Queued::default(); PORT_BATCH],
        }
    }

    /// Frame `f` as scratch slot `alt` rewrote it, or as it is (a tag the
    /// kernel took off stays off: it leaves untagged).
    pub(super) fn frame<'a>(&'a self, f: &FrameRef<'a>, alt: Option<usize>) -> FrameRef<'a> {
        match alt {
            Some(s) => self.made[s].frame(f, &self.bufs[s]),
            None => FrameRef { vlan: None, ..*f },
        }
    }
}

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

/// A frame waiting to be sent to a port: frame `k` of the batch, as
/// scratch slot `alt` rewrote it.
#[derive(Clone, Copy, Default)]
pub(super) struct Queued {
    pub(super) port: PortId,
    pub(super) k: usize,
    pub(super) alt: Option<usize>,
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

/// Sends each frame where the bridge says, within its segment and never
/// back out of its ingress port (`from` classifies it): to guests at once,
/// to ports together at the end (one `sendmmsg` per port for a TX batch).
/// A frame that leaves with a tag it came without, or without the one it
/// came with, is rewritten into scratch once, its payload left in place.
/// The bridge decides on each frame's first bytes (netback's header copy).
/// Capture taps see each frame enter and leave; with none, this costs one
/// branch. Returns how many frames a vif sent tagged (dropped).
pub(super) fn forward(
    fx: &mut Fwd<'_>,
    ingress: PortId,
    from: Attach,
    frames: &[FrameRef<'_>],
    mut vifs: Others<'_>,
) -> u64 {
    let now = Instant::now();
    let (mut n, mut used, mut tagged) = (0, 0, 0);
    let tapping = !fx.taps.is_empty();
    for (k, f) in frames.iter().enumerate() {
        let inr = match from.classify_frame(f) {
            Ok(i) => i,
            Err("runt") => {
                fx.bridge.counters.malformed += 1;
                continue;
            }
            Err(_) if ingress < PORT_BASE => {
                tagged += 1;
                continue;
            }
            Err(_) => {
                fx.bridge.counters.vlan_dropped += 1;
                continue;
            }
        };
        if tapping {
            fx.taps.frame(ingress, false, f);
        }
        let (targets, t) = route(fx.bridge, ingress, inr.seg, f, now, &vifs, fx.ports);
        if n + t > PORT_BATCH || used == PORT_BATCH {
            flush(fx.ports, fx.scratch, &mut fx.via, frames, n);
            (n, used) = (0, 0);
        }
        // Not rewritten yet (None), rewritten into a slot, or refused.
        let mut alt: Option<Option<usize>> = None;
        for &p in &targets[..t] {
            let to = match p >= PORT_BASE {
                true => fx.ports.attach_of(p),
                false => vifs.get(p).map(|v| v.attach),
            };
            let Some(to) = to.filter(|a| a.member(inr.seg)) else {
                continue;
            };
            let slot = match to.rewrite(f, inr) {
                None => None,
                Some(tag) => {
                    let made = *alt.get_or_insert_with(|| {
                        match vlan::retag(f, tag, &mut fx.scratch.bufs[used]) {
                            Ok(r) => {
                                fx.scratch.made[used] = r;
                                used += 1;
                                Some(used - 1)
                            }
                            Err(_) => {
                                fx.bridge.counters.vlan_dropped += 1;
                                None
                            }
                        }
                    });
                    match made {
                        Some(s) => Some(s),
                        None => continue,
                    }
                }
            };
            let g = fx.scratch.frame(f, slot);
            if tapping {
                fx.taps.frame(p, true, &g);
            }
            if p >= PORT_BASE {
                fx.scratch.queued[n] = Queued {
                    port: p,
                    k,
                    alt: slot,
                };
                n += 1;
            } else if let Some(v) = vifs.get(p) {
                v.nb.deliver(&g);
                vifs.dirty.insert(p - 1);
            }
        }
    }
    flush(fx.ports, fx.scratch, &mut fx.via, frames, n);
    tagged
}

/// Sends the first `n` queued frames, one batch per port, each port's in
/// order (through `via`'s queue for its port).
pub(super) fn flush(
    ports: &mut Ports,
    scratch: &Scratch,
    via: &mut Option<(PortId, &mut Queue)>,
    frames: &[FrameRef<'_>],
    n: usize,
) {
    if n == 0 {
        return;
    }
    let queued = &scratch.queued[..n];
    let mut sent = [false; PORT_BATCH];
    let none = FrameRef::private(&[], frame::packet::Csum::Unknown, None);
    let mut batch = [none; PORT_BATCH];
    for i in 0..queued.len() {
        if sent[i] {
            continue;
        }
        let port = queued[i].port;
        let mut m = 0;
        for (q, s) in queued.iter().zip(sent.iter_mut()).skip(i) {
            if q.port == port {
                batch[m] = scratch.frame(&frames[q.k], q.alt);
                m += 1;
                *s = true;
            }
        }
        let refs: [&FrameRef<'_>; PORT_BATCH] = std::array::from_fn(|x| &batch[x]);
        match via.as_mut().filter(|(p, _)| *p == port) {
            Some((_, q)) => q.send_batch(&refs[..m]),
            None => {
                if let Some(p) = ports.get(port) {
                    p.send_batch(&refs[..m]);
                }
            }
        }
    }
}

/// The bridge ports `f` (of segment `seg`) goes to, never its ingress: a
/// fixed array, nothing allocated. Unknown and broadcast destinations
/// flood the segment only.
pub(super) fn route(
    bridge: &mut Bridge,
    ingress: PortId,
    seg: Segment,
    f: &FrameRef<'_>,
    now: Instant,
    vifs: &Others<'_>,
    ports: &Ports,
) -> ([PortId; 64], usize) {
    let mut targets = [0 as PortId; 64];
    let mut n = 0;
    match bridge.route(ingress, seg, f.head, now) {
        Route::Drop => {}
        Route::Port(p) if p != ingress => {
            targets[0] = p;
            n = 1;
        }
        Route::Port(_) => {}
        Route::Flood => {
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&f.head[..6]);
            let multicast = dst[0] & 1 != 0;
            let vifs = vifs
                .connected()
                .filter(|(_, v)| v.attach.member(seg))
                // Multicast goes only to the vifs that asked for it.
                .filter(|(_, v)| !multicast || v.nb.wants_multicast(&dst))
                .map(|(p, _)| p);
            for p in ports.members(seg).chain(vifs) {
                if p != ingress && n < targets.len() {
                    targets[n] = p;
                    n += 1;
                }
            }
        }
    }
    (targets, n)
}
