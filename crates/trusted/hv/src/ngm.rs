//! The new grant mechanism (Ram thesis ch. 4), hv's side.
//!
//! hv keeps one grant table per (guest, driver domain) pair, in two parts
//! (thesis 4.4.2): a translation sub-table that only hv writes and the driver
//! domain maps read-only, and a status sub-table of use counts that the
//! driver domain writes. A guest's grant is validated once, when the guest
//! creates it (thesis 4.6.1); the driver domain then translates grant
//! references itself, with no hypercall per packet (4.6.2). A revocation is
//! refused while the driver domain holds a use (4.6.3).

use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::{DomId, NgmGrantOp};
use abi::SharedMemory;
use std::os::fd::{AsFd, OwnedFd};
use sys::{Mapping, Memfd, PAGE_SIZE};

pub use hypercall::ngm::*;

/// One (guest, driver domain) pair's table.
pub struct NgmTable {
    pub handle: u32,
    pub guest: DomId,
    pub backend: DomId,
    translation: Memfd,
    trans_map: Mapping,
    status: Memfd,
    status_map: Mapping,
    /// Grants created, revoked, and revocations refused (in use).
    pub created: u64,
    pub revoked: u64,
    pub refused: u64,
}

fn memory(name: &str, pages: usize) -> HvResult<(Memfd, Mapping)> {
    let len = pages * PAGE_SIZE;
    let fd = Memfd::create(name, len, false).map_err(|e| HvError::internal(name, e))?;
    let map = Mapping::new(fd.as_fd(), 0, len, true).map_err(|e| HvError::internal(name, e))?;
    Ok((fd, map))
}

impl NgmTable {
    /// A table with every entry invalid (thesis 4.5.1).
    pub fn new(handle: u32, guest: DomId, backend: DomId) -> HvResult<NgmTable> {
        let tag = format!("splitnet-ngm-{guest}-{backend}");
        let (translation, trans_map) = memory(&format!("{tag}-translation"), TRANSLATION_PAGES)?;
        let (status, status_map) = memory(&format!("{tag}-status"), STATUS_PAGES)?;
        Ok(NgmTable {
            handle,
            guest,
            backend,
            translation,
            trans_map,
            status,
            status_map,
            created: 0,
            revoked: 0,
            refused: 0,
        })
    }

    /// The table's memory, (translation, status), for an upgrade of hv.
    pub fn memfds(&self) -> (&Memfd, &Memfd) {
        (&self.translation, &self.status)
    }

    /// A table carried across hv's upgrade in place: its two memfds, mapped
    /// again, and its counts.
    pub fn adopt(
        (handle, guest, backend): (u32, DomId, DomId),
        translation: Memfd,
        status: Memfd,
        (created, revoked, refused): (u64, u64, u64),
    ) -> HvResult<NgmTable> {
        let map = |fd: &Memfd, pages: usize, what: &str| {
            if fd.len() != pages * PAGE_SIZE {
                return err(
                    ErrorKind::Invalid,
                    format!("NGM {what} memory is {} bytes", fd.len()),
                );
            }
            Mapping::new(fd.as_fd(), 0, fd.len(), true).map_err(|e| HvError::internal(what, e))
        };
        Ok(NgmTable {
            handle,
            guest,
            backend,
            trans_map: map(&translation, TRANSLATION_PAGES, "translation")?,
            translation,
            status_map: map(&status, STATUS_PAGES, "status")?,
            status,
            created,
            revoked,
            refused,
        })
    }

    fn check_ref(&self, gref: u32) -> HvResult<usize> {
        if gref >= NGM_ENTRIES {
            return err(
                ErrorKind::BadGntref,
                format!("grant reference {gref} is out of range (the table holds {NGM_ENTRIES})"),
            );
        }
        Ok(gref as usize)
    }

    fn entry(&self, i: usize) -> NgmEntry {
        NgmEntry::decode(self.trans_map.load_u64_seqcst(i * NGM_ENTRY_SIZE))
    }

    fn set(&self, i: usize, e: NgmEntry) {
        self.trans_map
            .store_u64_seqcst(i * NGM_ENTRY_SIZE, e.encode());
    }

    /// GRANT_map (thesis 4.6.1): validates the guest's frame once and
    /// publishes the translation in one atomic store.
    pub fn grant(
        &mut self,
        gref: u32,
        frame: u32,
        writable: bool,
        pool_frames: u32,
    ) -> HvResult<()> {
        let (i, e) = self.check_grant(gref, frame, writable, pool_frames)?;
        self.set(i, e);
        self.created += 1;
        Ok(())
    }

    /// [`NgmTable::grant`] for each of `ops`, every one checked (and no
    /// reference named twice) before any is published: a refusal changes
    /// nothing.
    pub fn grant_many(&mut self, ops: &[NgmGrantOp], pool_frames: u32) -> HvResult<()> {
        if ops.len() > NGM_ENTRIES as usize {
            return err(
                ErrorKind::Invalid,
                format!(
                    "{} grants in one call; the table holds {NGM_ENTRIES}",
                    ops.len()
                ),
            );
        }
        let mut named = vec![false; NGM_ENTRIES as usize];
        let mut checked = Vec::with_capacity(ops.len());
        for (k, op) in ops.iter().enumerate() {
            let at = |e: HvError| {
                HvError::new(e.kind, format!("grant {k} of {}: {}", ops.len(), e.message))
            };
            let (i, e) = self
                .check_grant(op.gref, op.frame, op.writable, pool_frames)
                .map_err(at)?;
            if std::mem::replace(&mut named[i], true) {
                return Err(at(HvError::new(
                    ErrorKind::Invalid,
                    format!("grant reference {} is named twice", op.gref),
                )));
            }
            checked.push((i, e));
        }
        for (i, e) in checked {
            self.set(i, e);
        }
        self.created += ops.len() as u64;
        Ok(())
    }

    /// The entry granting `frame` under `gref` would be, if both are valid
    /// and `gref` grants nothing yet.
    fn check_grant(
        &self,
        gref: u32,
        frame: u32,
        writable: bool,
        pool_frames: u32,
    ) -> HvResult<(usize, NgmEntry)> {
        let i = self.check_ref(gref)?;
        let frame = abi::Pfn::checked(u64::from(frame), pool_frames)
            .map_err(|e| HvError::memory("the guest's grant", e))?;
        if self.entry(i).valid() {
            return err(
                ErrorKind::InUse,
                format!("grant reference {gref} already grants a frame; revoke it first"),
            );
        }
        let flags = NGM_VALID | if writable { NGM_WRITABLE } else { 0 };
        let e = NgmEntry {
            frame: frame.raw(),
            flags,
            grantee: self.backend,
        };
        Ok((i, e))
    }

    /// GRANT_unmap (thesis 4.6.3), race-free against the driver domain's
    /// use ([`withdraw`]): the driver raises the use count and then reads the
    /// entry; hv withdraws the entry and then reads the count, each with a
    /// full fence in between. Either hv sees the use and restores the entry,
    /// or the driver sees the entry gone and refuses; never both miss.
    pub fn revoke(&mut self, gref: u32) -> HvResult<()> {
        let i = self.check_ref(gref)?;
        let old = self.entry(i);
        if !old.valid() {
            return err(
                ErrorKind::BadGntref,
                format!("grant reference {gref} grants nothing"),
            );
        }
        if let Err(uses) = withdraw(&self.trans_map, &self.status_map, gref, old) {
            self.refused += 1;
            return err(
                ErrorKind::InUse,
                format!(
                    "grant {gref} is in use by driver domain {} ({uses} uses)",
                    self.backend
                ),
            );
        }
        self.revoked += 1;
        Ok(())
    }

    /// The guest is gone: every entry becomes invalid at once, so an
    /// attached driver domain refuses all of them.
    pub fn invalidate_all(&self) {
        for i in 0..NGM_ENTRIES as usize {
            self.trans_map.store_u64_seqcst(i * NGM_ENTRY_SIZE, 0);
        }
    }

    /// The descriptors the driver domain maps (thesis 4.5.2): the
    /// translation sub-table read-only, the status sub-table read-write.
    pub fn backend_fds(&self) -> HvResult<[OwnedFd; 2]> {
        let t = self
            .translation
            .reopen_readonly()
            .map_err(|e| HvError::internal("sharing the translation table", e))?;
        let s = self
            .status
            .dup()
            .map_err(|e| HvError::internal("sharing the status table", e))?;
        Ok([t, s])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::SharedMemory;

    #[test]
    fn an_entry_is_one_word() {
        let e = NgmEntry {
            frame: 0xdead_beef,
            flags: NGM_VALID | NGM_WRITABLE,
            grantee: 0x7fef,
        };
        assert_eq!(NgmEntry::decode(e.encode()), e);
        assert_eq!(e.encode() >> 48, 0x7fef);
        assert!(!NgmEntry::decode(0).valid());
    }

    #[test]
    fn grant_revoke_and_in_use() {
        let mut t = NgmTable::new(1, 5, 2).unwrap();
        assert_eq!(
            t.grant(NGM_ENTRIES, 3, false, 10).unwrap_err().kind,
            ErrorKind::BadGntref
        );
        assert_eq!(
            t.grant(4, 10, false, 10).unwrap_err().kind,
            ErrorKind::BadPage
        );
        t.grant(4, 3, true, 10).unwrap();
        assert_eq!(t.grant(4, 5, true, 10).unwrap_err().kind, ErrorKind::InUse);
        let e = t.entry(4);
        assert_eq!(
            (e.frame, e.flags, e.grantee),
            (3, NGM_VALID | NGM_WRITABLE, 2)
        );
        // A use held by the driver domain blocks the revocation.
        t.status_map.store_u32(4 * NGM_STATUS_SIZE, 1);
        assert_eq!(t.revoke(4).unwrap_err().kind, ErrorKind::InUse);
        assert!(t.entry(4).valid(), "restored after the refusal");
        t.status_map.store_u32(4 * NGM_STATUS_SIZE, 0);
        t.revoke(4).unwrap();
        assert_eq!(t.entry(4).flags, NGM_REVOKED);
        assert_eq!(t.revoke(4).unwrap_err().kind, ErrorKind::BadGntref);
        t.grant(4, 7, false, 10).unwrap();
        assert_eq!((t.created, t.revoked, t.refused), (2, 1, 1));
        t.invalidate_all();
        assert!(!t.entry(4).valid());
    }

    #[test]
    fn many_grants_are_made_all_or_none() {
        let mut t = NgmTable::new(1, 5, 2).unwrap();
        let op = |gref, frame| NgmGrantOp {
            gref,
            frame,
            writable: true,
        };
        t.grant(9, 1, false, 10).unwrap();
        for (bad, why) in [
            (vec![op(1, 1), op(2, 10)], ErrorKind::BadPage),
            (vec![op(1, 1), op(1, 2)], ErrorKind::Invalid),
            (vec![op(1, 1), op(9, 2)], ErrorKind::InUse),
            (vec![op(1, 1), op(NGM_ENTRIES, 2)], ErrorKind::BadGntref),
        ] {
            let e = t.grant_many(&bad, 10).unwrap_err();
            assert_eq!(e.kind, why, "{e}");
            assert!(e.message.starts_with("grant 1 of 2:"), "{e}");
            assert!(!t.entry(1).valid(), "nothing made: {e}");
        }
        let too_many = vec![op(0, 0); NGM_ENTRIES as usize + 1];
        assert_eq!(
            t.grant_many(&too_many, 10).unwrap_err().kind,
            ErrorKind::Invalid
        );
        t.grant_many(&[op(1, 1), op(2, 2), op(3, 3)], 10).unwrap();
        assert_eq!(t.entry(3).frame, 3);
        assert_eq!(t.created, 4);
    }
}
