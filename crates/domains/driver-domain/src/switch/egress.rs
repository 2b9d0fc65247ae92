//! The switch's egress stage: each frame the bridge hands on leaves through
//! the ports of its segment it goes to, retagged where it leaves in another
//! form, shown to the captures, and handed to the driver ([`Egress`]): to
//! guests at once, to ports together (one `sendmmsg` per port for a batch).

use super::vlan::{self, Ingress, Retagged, RETAG_HEAD};
use super::{Egress, PortId, PORT_BASE};
use frame::packet::FrameRef;

/// Frames to the ports sent in one batch, at most.
pub const PORT_BATCH: usize = 64;

/// Fixed scratch for the first bytes of frames whose 802.1Q tag is added
/// or removed on the way ([`vlan::retag`]), one slot per frame of a batch,
/// and the frames waiting for ports: allocated once, so forwarding
/// allocates nothing per frame.
pub struct Scratch {
    bufs: Box<[[u8; RETAG_HEAD]]>,
    made: [Retagged; PORT_BATCH],
    /// Frames waiting to be sent to ports, in order.
    queued: [Queued; PORT_BATCH],
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch::new()
    }
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            bufs: vec![[0; RETAG_HEAD]; PORT_BATCH].into_boxed_slice(),
            made: [Retagged::default(); PORT_BATCH],
            queued: [Queued::default(); PORT_BATCH],
        }
    }

    /// Frame `f` as scratch slot `alt` rewrote it, or as it is (a tag the
    /// kernel took off stays off: it leaves untagged).
    fn frame<'a>(&'a self, f: &FrameRef<'a>, alt: Option<usize>) -> FrameRef<'a> {
        match alt {
            Some(s) => self.made[s].frame(f, &self.bufs[s]),
            None => FrameRef { vlan: None, ..*f },
        }
    }
}

/// A frame waiting to be sent to a port: frame `k` of the batch, as
/// scratch slot `alt` rewrote it.
#[derive(Clone, Copy, Default)]
struct Queued {
    port: PortId,
    k: usize,
    alt: Option<usize>,
}

/// How much of the batch's fixed storage is in use: frames queued for
/// ports, and scratch slots holding rewritten first bytes.
#[derive(Default, Clone, Copy)]
struct Filled {
    queued: usize,
    scratch: usize,
}

/// The egress stage over one batch of frames from one ingress.
pub struct Stage<'s, 'f, E> {
    /// The ports around the switch.
    pub out: &'s mut E,
    scratch: &'s mut Scratch,
    frames: &'s [FrameRef<'f>],
    at: Filled,
    tapping: bool,
    /// Frames whose tag could not be added or removed.
    refused: u64,
}

impl<'s, 'f, E: Egress> Stage<'s, 'f, E> {
    pub fn new(out: &'s mut E, scratch: &'s mut Scratch, frames: &'s [FrameRef<'f>]) -> Self {
        let tapping = out.tapping();
        Stage {
            out,
            scratch,
            frames,
            at: Filled::default(),
            tapping,
            refused: 0,
        }
    }

    /// Sends frame `k` of the batch (`inr` as its ingress classified it)
    /// through each of `targets` of its segment: a port off the segment,
    /// or gone, takes nothing. A frame that leaves with a tag it came
    /// without, or without the one it came with, is rewritten into scratch
    /// once, its payload left in place. Captures see it leave.
    pub fn send(&mut self, k: usize, inr: Ingress, targets: &[PortId]) {
        if self.at.queued + targets.len() > PORT_BATCH || self.at.scratch == PORT_BATCH {
            self.flush();
        }
        let frames = self.frames;
        let f = &frames[k];
        // Not rewritten yet (None), rewritten into a slot, or refused.
        let mut alt: Option<Option<usize>> = None;
        for &p in targets {
            let Some(slot) = self.slot(p, f, inr, &mut alt) else {
                continue;
            };
            let g = self.scratch.frame(f, slot);
            if self.tapping {
                self.out.tap(p, true, &g);
            }
            if p >= PORT_BASE {
                self.scratch.queued[self.at.queued] = Queued {
                    port: p,
                    k,
                    alt: slot,
                };
                self.at.queued += 1;
            } else {
                self.out.deliver(p, &g);
            }
        }
    }

    /// Whether `f` leaves through bridge port `p`, and how: `Some(None)` as
    /// it is, `Some(Some(s))` as scratch slot `s` rewrote its tag (once per
    /// frame, `alt`), `None` not at all (`p` is off the frame's segment,
    /// gone, or the rewrite was refused).
    fn slot(
        &mut self,
        p: PortId,
        f: &FrameRef<'_>,
        inr: Ingress,
        alt: &mut Option<Option<usize>>,
    ) -> Option<Option<usize>> {
        let to = self.out.attach(p).filter(|a| a.member(inr.seg))?;
        let Some(tag) = to.rewrite(f, inr) else {
            return Some(None);
        };
        let at = &mut self.at;
        let made = *alt.get_or_insert_with(|| {
            match vlan::retag(f, tag, &mut self.scratch.bufs[at.scratch]) {
                Ok(r) => {
                    self.scratch.made[at.scratch] = r;
                    at.scratch += 1;
                    Some(at.scratch - 1)
                }
                Err(_) => {
                    self.refused += 1;
                    None
                }
            }
        });
        made.map(Some)
    }

    /// Sends what is queued and ends the batch; how many frames' tags
    /// could not be rewritten.
    pub fn finish(mut self) -> u64 {
        self.flush();
        self.refused
    }

    /// Sends the queued frames, one batch per port, each port's in order.
    fn flush(&mut self) {
        let n = self.at.queued;
        self.at = Filled::default();
        if n == 0 {
            return;
        }
        let (queued, frames) = (&self.scratch.queued[..n], self.frames);
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
                    batch[m] = self.scratch.frame(&frames[q.k], q.alt);
                    m += 1;
                    *s = true;
                }
            }
            let refs: [&FrameRef<'_>; PORT_BATCH] = std::array::from_fn(|x| &batch[x]);
            self.out.send_batch(port, &refs[..m]);
        }
    }
}
