//! The layout of the new grant mechanism's tables (Ram thesis 4.4.2): one
//! translation word per grant reference, written only by hv, and one use
//! count per reference, written by the driver domain. hv's side (creating,
//! validating and revoking grants) is `splitnet-hv`'s `ngm` module.
//!
//! The use-count handshake (thesis 4.4: a revocation is refused while a use
//! is in flight) is here, generic over [`SharedMemory`] so that the model
//! checker (`crates/model`) runs this very code: the driver domain raises
//! the count and then reads the entry ([`take_use`]); hv withdraws the entry
//! and then reads the count ([`withdraw`]). Each puts a full fence between
//! its store and its load, so at least one of them sees the other.

use crate::proto::DomId;
use abi::SharedMemory;
use sys::PAGE_SIZE;

/// Entries per table (a grant reference is an index below this). The guest's
/// track table has the same size: its first half read-only, the rest read-write.
/// A guest's vifs towards one driver domain share the pair's table, each its
/// own part (`GrantTrack::partition`): 8192 entries leave each of a guest's
/// 8 most vifs 512 per half for its 256 TX and 256 RX buffers. The table
/// costs 80 KiB per pair (64 KiB of translation, 16 KiB of status).
pub const NGM_ENTRIES: u32 = 8192;
/// Bytes of one translation entry: a single word, published atomically.
pub const NGM_ENTRY_SIZE: usize = 8;
/// Bytes of one status entry: a use count.
pub const NGM_STATUS_SIZE: usize = 4;
/// The entry grants access.
pub const NGM_VALID: u16 = 1;
/// The access includes writes.
pub const NGM_WRITABLE: u16 = 2;
/// The guest revoked the entry (kept apart from "never granted" for counters).
pub const NGM_REVOKED: u16 = 4;

/// Pages of the translation sub-table.
pub const TRANSLATION_PAGES: usize = (NGM_ENTRIES as usize * NGM_ENTRY_SIZE).div_ceil(PAGE_SIZE);
/// Pages of the status sub-table.
pub const STATUS_PAGES: usize = (NGM_ENTRIES as usize * NGM_STATUS_SIZE).div_ceil(PAGE_SIZE);

/// One translation entry, decoded: the guest frame it names, its flags, and
/// the domain it was granted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgmEntry {
    pub frame: u32,
    pub flags: u16,
    pub grantee: DomId,
}

impl NgmEntry {
    /// The word's layout: bits 0..32 frame, 32..48 flags, 48..64 grantee.
    pub fn encode(&self) -> u64 {
        u64::from(self.frame) | u64::from(self.flags) << 32 | u64::from(self.grantee) << 48
    }

    pub fn decode(w: u64) -> NgmEntry {
        NgmEntry {
            frame: w as u32,
            flags: (w >> 32) as u16,
            grantee: (w >> 48) as u16,
        }
    }

    pub fn valid(&self) -> bool {
        self.flags & NGM_VALID != 0
    }
}

/// The driver domain's half (thesis 4.6.2): takes a use of `gref` (below
/// [`NGM_ENTRIES`]), then reads its translation entry. The use must be ended
/// with [`end_use`] whatever the entry says.
pub fn take_use<T, S>(translation: &T, status: &S, gref: u32) -> NgmEntry
where
    T: SharedMemory + ?Sized,
    S: SharedMemory + ?Sized,
{
    let i = gref as usize;
    status.fetch_add_u32(i * NGM_STATUS_SIZE, 1);
    status.fence_seqcst();
    NgmEntry::decode(translation.load_u64_seqcst(i * NGM_ENTRY_SIZE))
}

/// Ends a use taken by [`take_use`]. A compare-and-swap loop, so the count
/// never goes below zero, not even for a moment: a count that wrapped would
/// let a concurrent [`take_use`] bring it back to zero and [`withdraw`]
/// succeed under that use. False if there was no use to end.
pub fn end_use<S: SharedMemory + ?Sized>(status: &S, gref: u32) -> bool {
    let off = gref as usize * NGM_STATUS_SIZE;
    let mut uses = status.load_u32(off);
    while uses != 0 {
        match status.cmpxchg_u32(off, uses, uses - 1) {
            Ok(_) => return true,
            Err(now) => uses = now,
        }
    }
    false
}

/// hv's half (thesis 4.6.3): withdraws `gref`'s entry `old` (marks it
/// revoked), then reads the use count. If a use is in flight, puts `old`
/// back and returns the count; otherwise the revocation stands.
pub fn withdraw<T, S>(translation: &T, status: &S, gref: u32, old: NgmEntry) -> Result<(), u32>
where
    T: SharedMemory + ?Sized,
    S: SharedMemory + ?Sized,
{
    let i = gref as usize;
    let revoked = NgmEntry {
        flags: NGM_REVOKED,
        ..old
    };
    translation.store_u64_seqcst(i * NGM_ENTRY_SIZE, revoked.encode());
    translation.fence_seqcst();
    let uses = status.load_u32(i * NGM_STATUS_SIZE);
    if uses != 0 {
        translation.store_u64_seqcst(i * NGM_ENTRY_SIZE, old.encode());
        return Err(uses);
    }
    Ok(())
}
