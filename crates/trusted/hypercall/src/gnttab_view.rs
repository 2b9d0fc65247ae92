//! A backend's read-only view of a guest's grant table: Xen's I/O channel
//! on TX (Menon 2006 §4.1), where the driver domain learns from the header
//! channel where a packet's fragments are and sends them by address, with
//! no hypercall. Here the fragments are named by grant references, so
//! netback reads each entry itself instead of asking hv to pin it.
//!
//! Nothing pins what it reads: a guest that ends a grant while its frame
//! is being sent can spoil only that frame's payload, in its own pool. The
//! entry is read field by field, once, and every value is checked before
//! it is used.

use crate::proto::DomId;
use abi::grant::layout::grant_entry_v1 as entry;
use abi::grant::{check_entry, EntryRefusal};
use abi::SharedMemory;
use sys::Mapping;

/// One guest's grant table as its backend sees it: read-only, mapped once.
pub struct GrantTableView {
    granter: DomId,
    me: DomId,
    entries: u32,
    table: Mapping,
}

impl GrantTableView {
    pub(crate) fn new(granter: DomId, me: DomId, entries: u32, table: Mapping) -> GrantTableView {
        // Never more entries than the mapping holds, whatever hv said.
        let fits = (table.len() / entry::SIZEOF) as u32;
        GrantTableView {
            granter,
            me,
            entries: entries.min(fits),
            table,
        }
    }

    /// The domain whose table this is.
    pub fn granter(&self) -> DomId {
        self.granter
    }

    /// The frame grant `gref` lets this domain read, or why not, under the
    /// counter names hv's refusals have: `bad_grant_ref` (outside the
    /// table, never granted, revoked) or `grant_permission_denied` (granted
    /// to another domain). The frame is still to be checked against the
    /// guest's pool.
    pub fn readable(&self, gref: u32) -> Result<u32, &'static str> {
        if gref >= self.entries {
            return Err("bad_grant_ref");
        }
        let off = gref as usize * entry::SIZEOF;
        let flags = self.table.load_u16(off + entry::FLAGS);
        let domid = self.table.read_u16(off + entry::DOMID);
        match check_entry(flags, domid, self.me, false) {
            Ok(()) => Ok(self.table.read_u32(off + entry::FRAME)),
            Err(EntryRefusal::NotGranted) => Err("bad_grant_ref"),
            Err(_) => Err("grant_permission_denied"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::grant::{GTF_PERMIT_ACCESS, GTF_READONLY};
    use std::os::fd::AsFd;
    use sys::{Memfd, PAGE_SIZE};

    fn view(me: DomId) -> (Mapping, GrantTableView) {
        let fd = Memfd::create("t-gnttab", PAGE_SIZE, false).unwrap();
        let rw = Mapping::new(fd.as_fd(), 0, PAGE_SIZE, true).unwrap();
        let ro = Mapping::new(fd.as_fd(), 0, PAGE_SIZE, false).unwrap();
        (rw, GrantTableView::new(3, me, 1 << 20, ro))
    }

    fn grant(t: &Mapping, gref: u32, flags: u16, domid: DomId, frame: u32) {
        let off = gref as usize * entry::SIZEOF;
        t.write_u32(off + entry::FRAME, frame);
        t.write_u16(off + entry::DOMID, domid);
        t.write_u16(off + entry::FLAGS, flags);
    }

    #[test]
    fn reads_only_what_was_granted_to_it() {
        let (t, v) = view(7);
        grant(&t, 10, GTF_PERMIT_ACCESS | GTF_READONLY, 7, 590);
        grant(&t, 11, GTF_PERMIT_ACCESS, 8, 591);
        grant(&t, 12, 0, 7, 592);
        assert_eq!(v.readable(10), Ok(590));
        assert_eq!(v.readable(11), Err("grant_permission_denied"));
        assert_eq!(v.readable(12), Err("bad_grant_ref"), "revoked");
        assert_eq!(v.readable(13), Err("bad_grant_ref"), "never granted");
        // Past the mapping, whatever hv said the table holds.
        assert_eq!(v.readable(512), Err("bad_grant_ref"));
        assert_eq!(v.readable(u32::MAX), Err("bad_grant_ref"));
        assert_eq!(v.granter(), 3);
    }
}
