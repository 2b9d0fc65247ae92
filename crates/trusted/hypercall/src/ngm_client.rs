//! The new grant mechanism (Ram thesis ch. 4), the domains' side: the
//! guest's grant-track table and the driver domain's view of a guest's pool.

use crate::error::{ErrorKind, HvError, HvResult};
use crate::ngm::{self, NGM_ENTRIES, NGM_REVOKED, NGM_WRITABLE};
use crate::proto::{DomId, NgmGrantOp};
use abi::{Pfn, SharedMemory};
use sys::Mapping;

/// Why the driver domain refused a grant reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NgmRefusal {
    /// Outside the table, or never granted.
    Absent,
    /// The guest revoked it.
    Revoked,
    /// Granted to another domain.
    OtherDomain,
    /// Read-only, and a write was needed.
    ReadOnly,
    /// Names a frame outside the guest's pool.
    BadFrame,
}

impl NgmRefusal {
    /// The counter name.
    pub fn reason(self) -> &'static str {
        match self {
            NgmRefusal::Absent => "grant_absent",
            NgmRefusal::Revoked => "grant_revoked",
            NgmRefusal::OtherDomain => "grant_other_domain",
            NgmRefusal::ReadOnly => "grant_read_only",
            NgmRefusal::BadFrame => "grant_bad_frame",
        }
    }
}

/// The driver domain's view of one guest under the new grant mechanism
/// (thesis 4.5.2): the guest's I/O pool, mapped once at connect, and the
/// pair's grant table. Every access goes through [`NgmView::acquire`],
/// which checks the grant in the translation table hv keeps, with no
/// hypercall.
pub struct NgmView {
    handle: u32,
    guest: DomId,
    me: DomId,
    pool_frames: u32,
    translation: Mapping,
    status: Mapping,
    pool: Mapping,
}

impl NgmView {
    pub(crate) fn new(
        handle: u32,
        guest: DomId,
        me: DomId,
        pool_frames: u32,
        [translation, status, pool]: [Mapping; 3],
    ) -> NgmView {
        NgmView {
            handle,
            guest,
            me,
            pool_frames,
            translation,
            status,
            pool,
        }
    }

    /// The table's handle, as hv named it to the guest.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The guest whose pool this is.
    pub fn guest(&self) -> DomId {
        self.guest
    }

    /// The guest's I/O pool (never its private memory).
    pub fn pool(&self) -> &Mapping {
        &self.pool
    }

    /// Takes a use of grant `gref` for reading (or writing) and returns the
    /// guest frame it names (thesis 4.6.2), checked against the guest's
    /// pool. The use must be ended with [`NgmView::release`]; while it
    /// lasts, hv refuses to revoke the grant.
    pub fn acquire(&self, gref: u32, write: bool) -> Result<Pfn, NgmRefusal> {
        let grantee = Grantee {
            me: self.me,
            pool_frames: self.pool_frames,
        };
        acquire_use(&self.translation, &self.status, grantee, gref, write)
    }

    /// Ends a use taken by [`NgmView::acquire`] (never below zero).
    pub fn release(&self, gref: u32) {
        if gref < NGM_ENTRIES {
            ngm::end_use(&self.status, gref);
        }
    }
}

/// Who takes uses of a guest's grants: the driver domain, and the size of
/// the guest's pool its grants must name frames in.
#[derive(Debug, Clone, Copy)]
pub struct Grantee {
    pub me: DomId,
    pub pool_frames: u32,
}

/// [`NgmView::acquire`] over any memory holding the two sub-tables (the
/// model checker's too): takes a use of `gref` ([`ngm::take_use`]), checks
/// the entry, and ends the use again when it refuses.
pub fn acquire_use<T, S>(
    translation: &T,
    status: &S,
    grantee: Grantee,
    gref: u32,
    write: bool,
) -> Result<Pfn, NgmRefusal>
where
    T: SharedMemory + ?Sized,
    S: SharedMemory + ?Sized,
{
    if gref >= NGM_ENTRIES {
        return Err(NgmRefusal::Absent);
    }
    let e = ngm::take_use(translation, status, gref);
    let refusal = if e.flags & NGM_REVOKED != 0 {
        NgmRefusal::Revoked
    } else if !e.valid() {
        NgmRefusal::Absent
    } else if e.grantee != grantee.me {
        NgmRefusal::OtherDomain
    } else if write && e.flags & NGM_WRITABLE == 0 {
        NgmRefusal::ReadOnly
    } else {
        match Pfn::checked(u64::from(e.frame), grantee.pool_frames) {
            Ok(pfn) => return Ok(pfn),
            Err(_) => NgmRefusal::BadFrame,
        }
    };
    ngm::end_use(status, gref);
    Err(refusal)
}

/// The two hypercalls the track table makes, so tests can count them.
pub trait GrantOps {
    fn grant(&mut self, backend: DomId, gref: u32, frame: u32, writable: bool) -> HvResult<()>;
    fn revoke(&mut self, backend: DomId, gref: u32) -> HvResult<()>;
    /// Each of `ops`, as [`GrantOps::grant`]; hv's makes them in one
    /// hypercall, all or none.
    fn grant_many(&mut self, backend: DomId, ops: &[NgmGrantOp]) -> HvResult<()> {
        ops.iter()
            .try_for_each(|o| self.grant(backend, o.gref, o.frame, o.writable))
    }
}

impl GrantOps for crate::HvClient {
    fn grant(&mut self, backend: DomId, gref: u32, frame: u32, writable: bool) -> HvResult<()> {
        self.ngm_grant(backend, gref, frame, writable)
    }
    fn revoke(&mut self, backend: DomId, gref: u32) -> HvResult<()> {
        self.ngm_revoke(backend, gref)
    }
    fn grant_many(&mut self, backend: DomId, ops: &[NgmGrantOp]) -> HvResult<()> {
        self.ngm_grant_many(backend, ops)
    }
}

/// Why the track table could not give a grant.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    /// Every entry of the frame's hash set is in use: the caller falls back
    /// (drops or retries the packet later). Nothing changed.
    #[error("every grant of the frame's hash set is in use")]
    SetFull,
    #[error("hypercall: {0}")]
    Hv(#[from] HvError),
}

/// What the track table has done (thesis 4.8: how many distinct pages
/// served how many packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrackStats {
    /// Grants created (hypercalls): the distinct pages granted, counting re-grants after eviction.
    pub created: u64,
    /// Uses served by an existing grant, with no hypercall.
    pub hits: u64,
    /// Inactive grants revoked to make room.
    pub evictions: u64,
    /// Requests refused because a hash set was full of active grants.
    pub set_full: u64,
    /// Every use: the packets' buffers served.
    pub uses: u64,
}

/// Entries per hash set: one 64-byte cache line of 8-byte entries (thesis 4.4.1).
const SET: usize = 8;

/// An inactive entry granting a frame this track did not grant (frame
/// `u32::MAX - 1`, which no pool has): it matches no lookup.
const UNKNOWN_GRANT: u64 = 0xffff_ffff << 32;

/// The guest's grant-track hash table (thesis 4.4.1), in its private memory.
/// A grant reference is an entry's index: the first half tracks read-only
/// grants, the second half read-write ones. Each entry is one word: the
/// frame plus one in the high half (zero means empty) and the count of
/// active uses in the low half.
pub struct GrantTrack {
    entries: Vec<u64>,
    stats: TrackStats,
    /// The hash sets of each half this track uses: `first..first + sets`.
    first: usize,
    sets: usize,
}

impl Default for GrantTrack {
    fn default() -> Self {
        GrantTrack::new()
    }
}

impl GrantTrack {
    pub fn new() -> GrantTrack {
        GrantTrack::partition(0, 1)
    }

    /// A track over part `index` of `count` equal parts of the pair's
    /// table, so that several vifs of one guest towards one driver domain
    /// share its table without sharing entries.
    pub fn partition(index: u32, count: u32) -> GrantTrack {
        let per_half = NGM_ENTRIES as usize / 2 / SET;
        let sets = per_half / count.max(1) as usize;
        GrantTrack {
            entries: vec![0; NGM_ENTRIES as usize],
            stats: TrackStats::default(),
            first: (index as usize * sets).min(per_half - sets),
            sets,
        }
    }

    /// The first entry of `frame`'s hash set in the half for `writable`.
    fn set_of(&self, frame: u32, writable: bool) -> usize {
        let half = NGM_ENTRIES as usize / 2;
        // Consecutive frames land in consecutive sets; a multiplicative mix
        // spreads strided ones.
        let h = (frame as usize ^ (frame as usize >> 7).wrapping_mul(0x9e37)) % self.sets;
        usize::from(writable) * half + (self.first + h) * SET
    }

    /// Gives a grant of `frame` to `backend` for one use: an existing one
    /// (no hypercall), else a new one in a free or inactive entry of the
    /// frame's hash set (thesis 4.6.1).
    pub fn acquire(
        &mut self,
        hv: &mut dyn GrantOps,
        backend: DomId,
        frame: u32,
        writable: bool,
    ) -> Result<u32, TrackError> {
        let base = self.set_of(frame, writable);
        let want = u64::from(frame) + 1;
        if let Some(k) = (base..base + SET).find(|&k| self.entries[k] >> 32 == want) {
            self.entries[k] += 1;
            self.stats.hits += 1;
            self.stats.uses += 1;
            return Ok(k as u32);
        }
        // An entry this track found free may still grant a frame in hv: an
        // earlier track of the same table (a vif detached and attached
        // again) could not revoke it, the driver domain still counting a
        // use. It is kept as an inactive grant, to be revoked once hv
        // lets it go, and the next entry is tried.
        loop {
            let Some(k) = self.room(hv, backend, base)? else {
                self.stats.set_full += 1;
                return Err(TrackError::SetFull);
            };
            match hv.grant(backend, k as u32, frame, writable) {
                Ok(()) => {
                    self.entries[k] = want << 32 | 1;
                    self.stats.created += 1;
                    self.stats.uses += 1;
                    return Ok(k as u32);
                }
                Err(e) if e.kind == ErrorKind::InUse => self.entries[k] = UNKNOWN_GRANT,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Grants each of `frames` (frame, writable) for later uses, all in one
    /// hypercall ([`GrantOps::grant_many`]): a frontend's whole pool at
    /// connect (thesis 4.7). Each grant is left with no use, as an
    /// [`GrantTrack::acquire`] and [`GrantTrack::release`] would leave it;
    /// a frame already tracked is skipped. When a set has no free entry,
    /// or hv refuses the batch (an entry an earlier track of the table
    /// left granted), each frame is acquired on its own instead.
    pub fn warm(
        &mut self,
        hv: &mut dyn GrantOps,
        backend: DomId,
        frames: &[(u32, bool)],
    ) -> Result<(), TrackError> {
        let mut ops = Vec::with_capacity(frames.len());
        let mut full = false;
        for &(frame, writable) in frames {
            let base = self.set_of(frame, writable);
            let want = u64::from(frame) + 1;
            if (base..base + SET).any(|k| self.entries[k] >> 32 == want) {
                continue;
            }
            let Some(k) = (base..base + SET).find(|&k| self.entries[k] == 0) else {
                full = true;
                break;
            };
            self.entries[k] = want << 32;
            let gref = k as u32;
            ops.push(NgmGrantOp {
                gref,
                frame,
                writable,
            });
        }
        if !full && hv.grant_many(backend, &ops).is_ok() {
            self.stats.created += ops.len() as u64;
            return Ok(());
        }
        for op in &ops {
            self.entries[op.gref as usize] = 0;
        }
        for &(frame, writable) in frames {
            let g = self.acquire(hv, backend, frame, writable)?;
            self.release(g);
        }
        Ok(())
    }

    /// A free entry of the set at `base`, else an inactive one revoked to
    /// make room (hv may still refuse to revoke one the driver domain is
    /// using, and the next is tried); None when every one is in use.
    fn room(
        &mut self,
        hv: &mut dyn GrantOps,
        backend: DomId,
        base: usize,
    ) -> Result<Option<usize>, TrackError> {
        if let Some(k) = (base..base + SET).find(|&k| self.entries[k] == 0) {
            return Ok(Some(k));
        }
        for k in base..base + SET {
            if self.entries[k] & 0xffff_ffff != 0 {
                continue;
            }
            match hv.revoke(backend, k as u32) {
                Ok(()) => {
                    self.entries[k] = 0;
                    self.stats.evictions += 1;
                    return Ok(Some(k));
                }
                Err(e) if e.kind == ErrorKind::InUse => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Ends one use of grant `gref`; the grant stays for the next one.
    pub fn release(&mut self, gref: u32) {
        if let Some(e) = self.entries.get_mut(gref as usize) {
            if *e & 0xffff_ffff != 0 {
                *e -= 1;
            }
        }
    }

    /// Revokes every inactive grant (teardown); returns how many stay
    /// because they are still in use.
    pub fn revoke_all(&mut self, hv: &mut dyn GrantOps, backend: DomId) -> usize {
        let mut left = 0;
        for k in 0..self.entries.len() {
            if self.entries[k] == 0 {
                continue;
            }
            if self.entries[k] & 0xffff_ffff != 0 {
                left += 1;
                continue;
            }
            match hv.revoke(backend, k as u32) {
                Ok(()) => self.entries[k] = 0,
                // The pair's table is gone with its backend: nothing is left.
                Err(e) if e.kind == ErrorKind::BadDomain => {
                    self.entries.iter_mut().for_each(|e| *e = 0);
                    return 0;
                }
                Err(_) => left += 1,
            }
        }
        left
    }

    pub fn stats(&self) -> TrackStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts hypercalls; refuses revocations of grefs in `busy`, and
    /// grants of grefs in `taken` (granted before this track).
    #[derive(Default)]
    struct Fake {
        grants: Vec<(u32, u32, bool)>,
        revokes: Vec<u32>,
        busy: Vec<u32>,
        taken: Vec<u32>,
        batches: usize,
    }

    impl GrantOps for Fake {
        fn grant(&mut self, _: DomId, gref: u32, frame: u32, w: bool) -> HvResult<()> {
            if self.taken.contains(&gref) {
                return Err(HvError::new(ErrorKind::InUse, "already granted"));
            }
            self.grants.push((gref, frame, w));
            Ok(())
        }
        fn revoke(&mut self, _: DomId, gref: u32) -> HvResult<()> {
            if self.busy.contains(&gref) {
                return Err(HvError::new(ErrorKind::InUse, "busy"));
            }
            self.revokes.push(gref);
            self.taken.retain(|&g| g != gref);
            Ok(())
        }
        fn grant_many(&mut self, _: DomId, ops: &[NgmGrantOp]) -> HvResult<()> {
            // All or none, as hv's.
            if ops.iter().any(|o| self.taken.contains(&o.gref)) {
                return Err(HvError::new(ErrorKind::InUse, "already granted"));
            }
            self.batches += 1;
            self.grants
                .extend(ops.iter().map(|o| (o.gref, o.frame, o.writable)));
            Ok(())
        }
    }

    #[test]
    fn a_translation_for_another_domain_or_outside_the_pool_is_refused() {
        use crate::ngm::{NgmEntry, NGM_ENTRY_SIZE, NGM_STATUS_SIZE, NGM_VALID};
        let t = abi::HeapMemory::new(NGM_ENTRIES as usize * NGM_ENTRY_SIZE);
        let s = abi::HeapMemory::new(NGM_ENTRIES as usize * NGM_STATUS_SIZE);
        let me = Grantee {
            me: 2,
            pool_frames: 16,
        };
        for (gref, frame) in [(1, 15), (2, 16), (3, u32::MAX)] {
            let e = NgmEntry {
                frame,
                flags: NGM_VALID,
                grantee: 2,
            };
            t.store_u64_seqcst(gref as usize * NGM_ENTRY_SIZE, e.encode());
        }
        assert_eq!(acquire_use(&t, &s, me, 1, false), Ok(Pfn::new(15)));
        assert_eq!(acquire_use(&t, &s, me, 2, false), Err(NgmRefusal::BadFrame));
        assert_eq!(acquire_use(&t, &s, me, 3, false), Err(NgmRefusal::BadFrame));
        // hv writes each pair's table for its own driver domain only; a word
        // naming another is refused all the same.
        let theirs = NgmEntry {
            frame: 1,
            flags: NGM_VALID,
            grantee: 3,
        };
        t.store_u64_seqcst(4 * NGM_ENTRY_SIZE, theirs.encode());
        assert_eq!(
            acquire_use(&t, &s, me, 4, false),
            Err(NgmRefusal::OtherDomain)
        );
        // A refusal leaves no use behind; the good one holds one.
        let uses = |g: usize| s.load_u32(g * NGM_STATUS_SIZE);
        assert_eq!((uses(1), uses(2), uses(3), uses(4)), (1, 0, 0, 0));
    }

    #[test]
    fn hits_need_no_hypercall_and_halves_split_by_access() {
        let (mut t, mut hv) = (GrantTrack::new(), Fake::default());
        let g = t.acquire(&mut hv, 1, 100, false).unwrap();
        assert!(g < NGM_ENTRIES / 2, "read-only half");
        t.release(g);
        for _ in 0..1000 {
            let again = t.acquire(&mut hv, 1, 100, false).unwrap();
            assert_eq!(again, g);
            t.release(again);
        }
        assert_eq!(hv.grants.len(), 1, "one hypercall for 1001 uses");
        let w = t.acquire(&mut hv, 1, 100, true).unwrap();
        assert!(w >= NGM_ENTRIES / 2, "read-write half");
        let s = t.stats();
        assert_eq!((s.created, s.hits, s.uses), (2, 1000, 1002));
    }

    #[test]
    fn partitions_of_one_table_never_share_an_entry() {
        // A guest's 8 most vifs, each granting its 256 TX buffers read-only
        // and 256 RX buffers writable (netfront's pool layout: vif h at
        // frame h * 514), all fit at once, in entries of their own.
        let mut hv = Fake::default();
        let mut seen = std::collections::HashSet::new();
        for vif in 0..8u32 {
            let mut t = GrantTrack::partition(vif, 8);
            for f in 0..256 {
                let base = vif * 514;
                assert!(seen.insert(t.acquire(&mut hv, 1, base + 2 + f, false).unwrap()));
                assert!(seen.insert(t.acquire(&mut hv, 1, base + 258 + f, true).unwrap()));
            }
            assert_eq!(t.stats().set_full, 0);
        }
    }

    #[test]
    fn a_flood_evicts_inactive_entries_and_a_full_set_refuses() {
        let (mut t, mut hv) = (GrantTrack::new(), Fake::default());
        // Frames that share frame 0's hash set.
        let base = t.set_of(0, false);
        let same: Vec<u32> = (0..200_000u32)
            .filter(|&f| t.set_of(f, false) == base)
            .take(3 * SET)
            .collect();
        assert_eq!(same.len(), 3 * SET);
        // Fill the set with active grants: the next one is refused, no hypercall.
        let held: Vec<u32> = same[..SET]
            .iter()
            .map(|&f| t.acquire(&mut hv, 1, f, false).unwrap())
            .collect();
        let calls = hv.grants.len();
        assert!(matches!(
            t.acquire(&mut hv, 1, same[SET], false),
            Err(TrackError::SetFull)
        ));
        assert_eq!(hv.grants.len(), calls);
        assert_eq!(t.stats().set_full, 1);
        // Release them: new frames evict the inactive ones.
        for g in &held {
            t.release(*g);
        }
        // One is still used by the driver domain: hv refuses, the next goes.
        hv.busy.push(held[0]);
        for &f in &same[SET..2 * SET] {
            let g = t.acquire(&mut hv, 1, f, false).unwrap();
            t.release(g);
        }
        assert_eq!(t.stats().evictions, SET as u64);
        assert!(!hv.revokes.contains(&held[0]), "the busy grant survived");
        assert_eq!(t.revoke_all(&mut hv, 1), 1, "only the busy one stays");
    }

    #[test]
    fn entries_an_earlier_track_left_granted_are_skipped_then_reclaimed() {
        // A vif attached again: its new track finds entries hv still holds
        // from the last one, two of them still used by the driver domain.
        let (mut t, mut hv) = (GrantTrack::new(), Fake::default());
        let base = t.set_of(0, true) as u32;
        hv.taken = (base..base + 3).collect();
        hv.busy = vec![base, base + 1];
        let g = t.acquire(&mut hv, 1, 0, true).unwrap();
        assert_eq!(g, base + 3, "the first free entry hv agrees is free");
        t.release(g);
        assert_eq!(t.revoke_all(&mut hv, 1), 2, "the busy ones stay");
        assert!(hv.revokes.contains(&(base + 2)), "the idle one is revoked");
        // Once the driver domain lets go they are reclaimed like any other.
        hv.busy.clear();
        assert_eq!(t.revoke_all(&mut hv, 1), 0);
    }

    #[test]
    fn a_pool_is_granted_in_one_call_and_its_uses_then_hit() {
        // netfront's vif 1: 256 TX buffers read-only, 256 RX writable.
        let (mut t, mut hv) = (GrantTrack::partition(1, 8), Fake::default());
        let frames: Vec<(u32, bool)> = (0..256)
            .flat_map(|f| [(514 + 2 + f, false), (514 + 258 + f, true)])
            .collect();
        t.warm(&mut hv, 1, &frames).unwrap();
        assert_eq!((hv.batches, hv.grants.len()), (1, 512));
        let grefs: std::collections::HashSet<u32> = hv.grants.iter().map(|g| g.0).collect();
        assert_eq!(grefs.len(), 512, "an entry each");
        for &(f, w) in &frames {
            let g = t.acquire(&mut hv, 1, f, w).unwrap();
            assert!(hv.grants.contains(&(g, f, w)));
            t.release(g);
        }
        assert_eq!(hv.grants.len(), 512, "no hypercall for a warmed frame");
        let s = t.stats();
        assert_eq!((s.created, s.hits, s.uses), (512, 512, 512));
        // Warming again grants nothing new.
        t.warm(&mut hv, 1, &frames).unwrap();
        assert_eq!(hv.grants.len(), 512);
    }

    #[test]
    fn a_refused_warm_up_falls_back_to_one_grant_each() {
        // Entries an earlier track of the table left granted: hv refuses
        // the batch, and each frame finds an entry of its own.
        let (mut t, mut hv) = (GrantTrack::new(), Fake::default());
        let base = t.set_of(0, true) as u32;
        hv.taken = vec![base];
        let frames: Vec<(u32, bool)> = (0..64).map(|f| (f, true)).collect();
        t.warm(&mut hv, 1, &frames).unwrap();
        assert_eq!(hv.batches, 0);
        assert_eq!(hv.grants.len(), 64);
        assert!(hv.grants.iter().all(|g| g.0 != base));
        for &(f, w) in &frames {
            let g = t.acquire(&mut hv, 1, f, w).unwrap();
            t.release(g);
        }
        assert_eq!(hv.grants.len(), 64);
    }
}
