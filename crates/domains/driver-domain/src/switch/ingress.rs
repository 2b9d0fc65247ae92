//! The switch's ingress stage, where a batch of frames from one bridge
//! port enters: each frame is classified into its VLAN segment by the
//! ingress port's attachment (IEEE 802.1Q ingress rules, [`super::vlan`]),
//! admitted or dropped, shown to the captures, and handed on to the bridge.

use super::bridge::Bridge;
use super::egress::{Scratch, Stage};
use super::vlan::{Attach, Ingress, Mode, Segment, TPID, VID_MAX};
use super::{Egress, PortId, PORT_BASE};
use frame::packet::FrameRef;
use frame::wire::{eth, vlan, ETH_HLEN};
use std::time::Instant;

/// Forwards `frames`, arriving on bridge port `ingress` (`from` its
/// attachment), each within its VLAN segment and never back out of
/// `ingress`, through `out`. Capture taps see each frame enter and leave;
/// with none, this costs one branch. Returns how many frames a vif sent
/// tagged (dropped).
pub fn forward<E: Egress>(
    bridge: &mut Bridge,
    scratch: &mut Scratch,
    out: &mut E,
    ingress: PortId,
    from: Attach,
    frames: &[FrameRef<'_>],
) -> u64 {
    let now = Instant::now();
    let mut tagged = 0;
    let tapping = out.tapping();
    let mut eg = Stage::new(out, scratch, frames);
    for (k, f) in frames.iter().enumerate() {
        let Some(inr) = admit(bridge, ingress, from, f, &mut tagged) else {
            continue;
        };
        if tapping {
            eg.out.tap(ingress, false, f);
        }
        bridge.forward(ingress, k, f.head, inr, now, &mut eg);
    }
    bridge.counters.vlan_dropped += eg.finish();
    tagged
}

/// Frame `f`'s place on the ingress's VLAN segment, or None when it may
/// not enter: a runt, or a tag its port may not carry (counted; a vif's
/// tagged frames in `tagged`).
fn admit(
    bridge: &mut Bridge,
    ingress: PortId,
    from: Attach,
    f: &FrameRef<'_>,
    tagged: &mut u64,
) -> Option<Ingress> {
    match from.classify_frame(f) {
        Ok(i) => Some(i),
        Err("runt") => {
            bridge.counters.malformed += 1;
            None
        }
        Err(_) if ingress < PORT_BASE => {
            *tagged += 1;
            None
        }
        Err(_) => {
            bridge.counters.vlan_dropped += 1;
            None
        }
    }
}

/// Classification: the 802.1Q ingress rules of a port's attachment.
impl Attach {
    /// The segment of frame `f` arriving here, by the tag the kernel took
    /// off it (`f.vlan`) or else by its bytes ([`Attach::classify`]).
    pub fn classify_frame(&self, f: &FrameRef<'_>) -> Result<Ingress, &'static str> {
        match f.vlan {
            None => self.classify(f.head),
            Some(_) if f.head.len() < ETH_HLEN => Err("runt"),
            Some(tag) => self.tagged(tag.tci),
        }
    }

    /// The segment of a frame whose first bytes are `head`, arriving here;
    /// the reason it is dropped otherwise: a tagged frame on an access port
    /// (`vlan_tagged`), the reserved VID 4095 (`vlan_reserved`), or a tag
    /// cut short (`runt`).
    pub fn classify(&self, head: &[u8]) -> Result<Ingress, &'static str> {
        let Ok(e) = eth::Packet::new_checked(head) else {
            return Err("runt");
        };
        if e.ethertype() != TPID {
            let vlan = match self.mode {
                Mode::Access(v) => v,
                Mode::Trunk => 0,
            };
            return Ok(Ingress {
                seg: Segment {
                    bridge: self.bridge,
                    vlan,
                },
                tagged: false,
            });
        }
        let Ok(tag) = vlan::Packet::new_checked(e.payload()) else {
            return Err(if self.mode == Mode::Trunk {
                "runt"
            } else {
                "vlan_tagged"
            });
        };
        self.tagged(tag.tci())
    }

    /// The segment of a frame tagged `tci` arriving here.
    fn tagged(&self, tci: u16) -> Result<Ingress, &'static str> {
        if self.mode != Mode::Trunk {
            return Err("vlan_tagged");
        }
        let vlan = tci & 0x0fff;
        if vlan > VID_MAX {
            return Err("vlan_reserved");
        }
        Ok(Ingress {
            seg: Segment {
                bridge: self.bridge,
                vlan,
            },
            tagged: true,
        })
    }
}
