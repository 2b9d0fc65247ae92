//! The layout of the new grant mechanism's tables (Ram thesis 4.4.2): one
//! translation word per grant reference, written only by hv, and one use
//! count per reference, written by the driver domain. hv's side (creating,
//! validating and revoking grants) is `splitnet-hv`'s `ngm` module.

use crate::proto::DomId;
use sys::PAGE_SIZE;

/// Entries per table (a grant reference is an index below this). The guest's
/// track table has the same size: its first half read-only, the rest read-write.
pub const NGM_ENTRIES: u32 = 2048;
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
