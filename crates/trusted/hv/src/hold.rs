//! Held grants: the I/O-channel optimization under hv-copy (Menon 2006 §4).
//!
//! A driver domain sends a guest's frame by reference without the new grant
//! mechanism: one batch per TX ring batch asks hv to copy each packet's
//! header into the driver domain and to keep the guest's grants pinned
//! (GTF_reading set, so the guest cannot revoke them); the driver reads the
//! payload through a read-only window on the guest's pool and, once the
//! frames are sent, a second batch releases the pins. hv counts each
//! caller's holds itself, so a domain releases only what it holds.

use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::grant::{self, Memories, Pins};
use crate::proto::DomId;
use abi::grant::{CopyPtr, GrantCopy, GrantCopyView};
use std::collections::HashMap;

pub use hypercall::batch::{BatchKind, HELD_FRAME_IN_OP};

/// Most grants one domain may hold at once: a few ring batches' worth
/// (a driver domain serving many vifs holds one batch per vif at most).
pub const MAX_HOLDS: u32 = 8192;

/// One domain's holds: how many of each (granter, grant) it holds.
#[derive(Debug, Default)]
pub struct Holds {
    by_grant: HashMap<(DomId, u32), u32>,
    total: u32,
}

impl Holds {
    /// Grants held, counting each hold.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Every hold as (granter, grant reference, count): what an upgrade of
    /// hv carries ([`Holds::from_list`]).
    pub fn list(&self) -> Vec<(DomId, u32, u32)> {
        self.by_grant
            .iter()
            .map(|(&(d, g), &n)| (d, g, n))
            .collect()
    }

    /// The holds of [`Holds::list`], taken back.
    pub fn from_list(list: &[(DomId, u32, u32)]) -> Holds {
        let by_grant: HashMap<(DomId, u32), u32> =
            list.iter().map(|&(d, g, n)| ((d, g), n)).collect();
        let total = by_grant.values().sum();
        Holds { by_grant, total }
    }

    /// Ends every hold (the holder is gone).
    pub fn release_all(&mut self, pins: &mut Pins, doms: &dyn Memories) {
        for ((granter, gref), n) in self.by_grant.drain() {
            for _ in 0..n {
                grant::release(pins, doms.memory(granter), granter, gref, false);
            }
        }
        self.total = 0;
    }

    /// Forgets the holds of grants of `granter` (it is gone; its pins went with it).
    pub fn forget_granter(&mut self, granter: DomId) {
        self.by_grant.retain(|&(g, _), n| {
            if g == granter {
                self.total -= *n;
            }
            g != granter
        });
    }

    fn hold(
        &mut self,
        pins: &mut Pins,
        doms: &dyn Memories,
        caller: DomId,
        op: &GrantCopy,
    ) -> HvResult<u32> {
        if self.total >= MAX_HOLDS {
            return err(
                ErrorKind::Quota,
                format!("domain {caller} already holds {MAX_HOLDS} grants; release some first"),
            );
        }
        let (granter, gref, pfn) = grant::hold_one(pins, doms, caller, op)?;
        *self.by_grant.entry((granter, gref)).or_default() += 1;
        self.total += 1;
        Ok(pfn.raw())
    }

    fn release(
        &mut self,
        pins: &mut Pins,
        doms: &dyn Memories,
        caller: DomId,
        op: &GrantCopy,
    ) -> HvResult<()> {
        let CopyPtr::Gref { domid, gref, .. } = op.source else {
            return err(
                ErrorKind::BadCopyArg,
                "a release names a held grant reference",
            );
        };
        let Some(n) = self.by_grant.get_mut(&(domid, gref)) else {
            return err(
                ErrorKind::BadGntref,
                format!("domain {caller} holds no grant {gref} of domain {domid}"),
            );
        };
        *n -= 1;
        if *n == 0 {
            self.by_grant.remove(&(domid, gref));
        }
        self.total -= 1;
        grant::release(pins, doms.memory(domid), domid, gref, false);
        Ok(())
    }

    /// Runs a batch of holds or releases (raw `gnttab_copy` records), writing
    /// each status back and, for a hold, the frame pinned into the upper
    /// half of the source's `u` field, which a grant reference leaves
    /// unused. Returns the statuses and each failed op's error.
    pub fn run_batch(
        &mut self,
        kind: BatchKind,
        pins: &mut Pins,
        doms: &dyn Memories,
        caller: DomId,
        raw: &mut [u8],
    ) -> (Vec<i16>, Vec<HvError>) {
        let mut statuses = Vec::with_capacity(raw.len() / GrantCopy::SIZE);
        let mut errors = Vec::new();
        for chunk in raw.chunks_exact_mut(GrantCopy::SIZE) {
            let op = GrantCopyView::new_checked(&*chunk)
                .and_then(|v| GrantCopy::parse(&v))
                .map_err(|e| {
                    HvError::new(ErrorKind::BadCopyArg, format!("malformed gnttab_copy: {e}"))
                });
            let r = op.and_then(|op| match kind {
                BatchKind::Hold => self.hold(pins, doms, caller, &op),
                BatchKind::Release => self.release(pins, doms, caller, &op).map(|()| 0),
                _ => err(ErrorKind::Invalid, "not a hold or release batch"),
            });
            let status = match r {
                Ok(frame) => {
                    if kind == BatchKind::Hold {
                        chunk[HELD_FRAME_IN_OP..HELD_FRAME_IN_OP + 4]
                            .copy_from_slice(&frame.to_ne_bytes());
                    }
                    0
                }
                Err(e) => {
                    let s = e.kind.gntst();
                    errors.push(e);
                    s
                }
            };
            if let Ok(mut v) = GrantCopyView::new_checked(&mut *chunk) {
                v.set_status(status);
            }
            statuses.push(status);
        }
        (statuses, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::grant::{DOMID_SELF, GTF_PERMIT_ACCESS, GTF_READING};
    use abi::SharedMemory;
    use sys::PAGE_SIZE;

    // Domain 1 (a guest) and 2 (a driver), 4 frames each.
    use crate::grant::tests::{two, Two};

    /// Guest 1 grants frame `frame` to domain 2 read-only as `gref`.
    fn grant(d: &Two, gref: usize, frame: u32) {
        let t = &d.0[0].gnttab_map;
        t.write_u16(gref * 8 + 2, 2);
        t.write_u32(gref * 8 + 4, frame);
        t.store_u16(gref * 8, GTF_PERMIT_ACCESS | abi::grant::GTF_READONLY);
    }

    fn op(gref: u32, len: u16) -> Vec<u8> {
        let mut raw = vec![0u8; GrantCopy::SIZE];
        GrantCopy {
            source: CopyPtr::Gref {
                domid: 1,
                gref,
                offset: 0,
            },
            dest: CopyPtr::Frame {
                domid: DOMID_SELF,
                gmfn: 0,
                offset: 0,
            },
            len,
            status: 0,
        }
        .emit(&mut GrantCopyView::new_checked(&mut raw[..]).unwrap());
        raw
    }

    #[test]
    fn a_hold_copies_the_head_pins_until_released_and_names_the_frame() {
        let d = two();
        let mut pins = Pins::default();
        let mut h = Holds::default();
        grant(&d, 5, 3);
        d.0[0]
            .pool_map
            .write_bytes(3 * PAGE_SIZE, b"header!payload");
        let mut raw = op(5, 7);
        let (st, errs) = h.run_batch(BatchKind::Hold, &mut pins, &d, 2, &mut raw);
        assert_eq!((st, errs.len()), (vec![0], 0));
        let frame = u32::from_ne_bytes(
            raw[HELD_FRAME_IN_OP..HELD_FRAME_IN_OP + 4]
                .try_into()
                .unwrap(),
        );
        assert_eq!(frame, 3);
        let mut head = [0u8; 7];
        d.0[1].pool_map.read_bytes(0, &mut head);
        assert_eq!(&head, b"header!");
        let flags = || d.0[0].gnttab_map.load_u16(5 * 8);
        assert_ne!(flags() & GTF_READING, 0, "pinned while held");
        assert_eq!(h.total(), 1);
        let mut rel = op(5, 0);
        let (st, _) = h.run_batch(BatchKind::Release, &mut pins, &d, 2, &mut rel);
        assert_eq!(st, vec![0]);
        assert_eq!(flags() & GTF_READING, 0, "unpinned once released");
        // A second release of the same grant is refused: it holds none.
        let (st, errs) = h.run_batch(BatchKind::Release, &mut pins, &d, 2, &mut rel);
        assert_eq!(
            (st[0], errs[0].kind),
            (ErrorKind::BadGntref.gntst(), ErrorKind::BadGntref)
        );
    }

    #[test]
    fn forged_revoked_and_foreign_grants_are_refused_and_nothing_stays_pinned() {
        let d = two();
        let mut pins = Pins::default();
        let mut h = Holds::default();
        // Never granted, out of range, then granted to another domain.
        for gref in [6, 4096, u32::MAX] {
            let (st, _) = h.run_batch(BatchKind::Hold, &mut pins, &d, 2, &mut op(gref, 8));
            assert_eq!(st[0], ErrorKind::BadGntref.gntst(), "gref {gref}");
        }
        grant(&d, 7, 1);
        d.0[0].gnttab_map.write_u16(7 * 8 + 2, 9);
        let (st, _) = h.run_batch(BatchKind::Hold, &mut pins, &d, 2, &mut op(7, 8));
        assert_eq!(st[0], ErrorKind::PermissionDenied.gntst());
        // A grant naming a frame outside the guest's pool.
        grant(&d, 8, 4);
        let (st, _) = h.run_batch(BatchKind::Hold, &mut pins, &d, 2, &mut op(8, 8));
        assert_eq!(st[0], ErrorKind::BadPage.gntst());
        // A header part that leaves its page pins nothing either.
        grant(&d, 9, 2);
        let (st, _) = h.run_batch(
            BatchKind::Hold,
            &mut pins,
            &d,
            2,
            &mut op(9, PAGE_SIZE as u16 + 1),
        );
        assert_eq!(st[0], ErrorKind::BadCopyArg.gntst());
        assert!(pins.is_empty() && h.total() == 0);
        // The holder dies holding one: its pin goes.
        let _ = h.run_batch(BatchKind::Hold, &mut pins, &d, 2, &mut op(9, 8));
        assert_eq!(h.total(), 1);
        h.release_all(&mut pins, &d);
        assert!(pins.is_empty());
        assert_eq!(d.0[0].gnttab_map.load_u16(9 * 8) & GTF_READING, 0);
    }
}
