//! hv's write-ahead journal of store changes: what a crash of hv would
//! otherwise lose between two records of its state for its guardian.
//!
//! hv records its whole state for the guardian at most every 100 ms, and
//! before it answers a toolstack request; a domain's store change (a
//! frontend's `state`, a watch a backend registers or drops) is answered
//! at once. So each change to the store that hv answers is first appended
//! here, under hv's lock, numbered. The journal is a file in memory that
//! hv's image names like any other descriptor, so the guardian holds it
//! with the record; the record names the last number it includes, and an
//! hv started on that record applies the entries after it, in order, before
//! it serves anyone: a store change is deterministic given the store it
//! applies to. Once the guardian holds a record, the journal's bytes that
//! record includes are freed (a hole punched in the file, which the
//! guardian's duplicate shares), so it takes memory for what came after
//! the last record only. (Not in the papers: they do not survive a crash of Xen.)

use crate::error::{HvError, HvResult};
use crate::proto::{DomId, Request};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// One store change hv answered: its number, who asked, what.
#[derive(Deserialize)]
struct Entry {
    seq: u64,
    caller: DomId,
    req: Request,
}

/// [`Entry`] as it is written, borrowing its request.
#[derive(Serialize)]
struct Written<'a> {
    seq: u64,
    caller: DomId,
    req: &'a Request,
}

/// Where an image's journal is and what of it the image includes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JournalImage {
    /// Its descriptor.
    pub fd: RawFd,
    /// The last entry the image's store includes.
    pub seq: u64,
    /// Where its entries start (the bytes before were freed).
    #[serde(default)]
    pub start: u64,
    /// Where the entries the image includes end.
    #[serde(default)]
    pub end: u64,
}

pub(super) struct StoreJournal {
    file: File,
    /// The last entry written.
    seq: u64,
    /// Bytes written.
    len: u64,
    /// Bytes freed from the start, a multiple of the page size.
    freed: u64,
}

impl StoreJournal {
    /// An empty journal whose next entry is numbered `seq + 1`.
    pub(super) fn new(seq: u64) -> HvResult<StoreJournal> {
        let file = sys::memory_file("splitnet-store-journal")
            .map_err(|e| HvError::internal("the store's journal", e))?;
        Ok(StoreJournal {
            file,
            seq,
            len: 0,
            freed: 0,
        })
    }

    /// Whether `req` is a store change the journal keeps: one that changes
    /// the store, but for the statistics the domains publish every half
    /// second (they publish them again after a crash).
    pub(super) fn keeps(req: &Request) -> bool {
        match req {
            Request::StoreWrite { path, .. } => !path.ends_with("/stats"),
            Request::StoreMkdir { .. }
            | Request::StoreRm { .. }
            | Request::StoreSetPerms { .. }
            | Request::Watch { .. }
            | Request::Unwatch { .. } => true,
            _ => false,
        }
    }

    /// Appends `caller`'s change `req`, applied and about to be answered.
    /// The write is done before this returns; a failed write is said (the
    /// change then lives only until hv's next record).
    pub(super) fn append(&mut self, caller: DomId, req: &Request) {
        let entry = Written {
            seq: self.seq + 1,
            caller,
            req,
        };
        let Ok(mut line) = serde_json::to_vec(&entry) else {
            return;
        };
        line.push(b'\n');
        match self.file.write_all(&line) {
            Ok(()) => {
                self.seq += 1;
                self.len += line.len() as u64;
            }
            Err(e) => crate::log!(
                Warning,
                "the store's journal: {e}; a crash of hv before its next record loses this change"
            ),
        }
    }

    /// What an image taken now names.
    pub(super) fn image(&self) -> JournalImage {
        JournalImage {
            fd: self.file.as_fd().as_raw_fd(),
            seq: self.seq,
            start: self.freed,
            end: self.len,
        }
    }

    /// The guardian holds a record whose image named `recorded`: the whole
    /// pages of this journal that record's store includes are freed.
    pub(super) fn recorded(&mut self, recorded: JournalImage) {
        if recorded.fd != self.file.as_fd().as_raw_fd() || recorded.end > self.len {
            return;
        }
        let upto = recorded.end / sys::PAGE_SIZE as u64 * sys::PAGE_SIZE as u64;
        if upto > self.freed
            && sys::punch_hole(self.file.as_fd(), self.freed, upto - self.freed).is_ok()
        {
            self.freed = upto;
        }
    }

    /// The changes after the image's store in the journal an image named:
    /// (who asked, what), in order, and the last one's number. The next
    /// program never writes to that journal (the guardian's record may
    /// still name it); it starts one of its own.
    pub(super) fn read_after(
        fd: OwnedFd,
        image: JournalImage,
    ) -> HvResult<(u64, Vec<(DomId, Request)>)> {
        let mut file = File::from(fd);
        let mut bytes = Vec::new();
        (file.seek(SeekFrom::Start(image.start)))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|e| HvError::internal("reading the store's journal", e))?;
        let mut after = Vec::new();
        let mut seq = image.seq;
        // A line cut short by a crash (the last) is not an entry, nor are
        // the zeros of freed bytes, nor one out of sequence.
        for line in bytes.split(|&b| b == b'\n') {
            let Ok(e) = serde_json::from_slice::<Entry>(line) else {
                continue;
            };
            if e.seq == seq + 1 && StoreJournal::keeps(&e.req) {
                seq = e.seq;
                after.push((e.caller, e.req));
            }
        }
        Ok((seq, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &str, value: &str) -> Request {
        Request::StoreWrite {
            path: path.into(),
            value: value.into(),
        }
    }

    fn reopened(j: &StoreJournal) -> OwnedFd {
        j.file.as_fd().try_clone_to_owned().unwrap()
    }

    #[test]
    fn the_changes_after_an_images_store_come_back_in_order() {
        let mut j = StoreJournal::new(0).unwrap();
        assert!(!StoreJournal::keeps(&write("/a/stats", "1")));
        assert!(!StoreJournal::keeps(&Request::StoreRead {
            path: "/a".into()
        }));
        j.append(3, &write("/a", "1"));
        let image = j.image();
        j.append(4, &write("/b", "2"));
        j.append(3, &Request::StoreRm { path: "/a".into() });
        let (last, after) = StoreJournal::read_after(reopened(&j), image).unwrap();
        assert_eq!(last, 3);
        let got: Vec<_> = after.iter().map(|(d, r)| (*d, format!("{r:?}"))).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 4);
        assert!(got[0].1.contains("\"/b\""), "{got:?}");
        assert!(got[1].1.contains("StoreRm"), "{got:?}");
    }

    #[test]
    fn a_line_cut_short_by_a_crash_is_not_an_entry() {
        let mut j = StoreJournal::new(0).unwrap();
        let image = j.image();
        j.append(3, &write("/a", "1"));
        j.file
            .write_all(b"{\"seq\":2,\"caller\":3,\"req\":{\"StoreWr")
            .unwrap();
        let (last, after) = StoreJournal::read_after(reopened(&j), image).unwrap();
        assert_eq!((last, after.len()), (1, 1));
    }

    #[test]
    fn what_a_record_holds_is_freed_and_what_came_after_is_kept() {
        use std::os::unix::fs::MetadataExt;
        let mut j = StoreJournal::new(0).unwrap();
        let big = "x".repeat(16 * 1024);
        for _ in 0..8 {
            j.append(3, &write("/a", &big));
        }
        let blocks = |j: &StoreJournal| j.file.metadata().unwrap().blocks();
        let (held, before) = (j.image(), blocks(&j));
        j.append(3, &write("/a", "after"));
        j.recorded(held);
        assert!(blocks(&j) < before / 4, "{} of {before} blocks", blocks(&j));
        let next = j.image();
        assert_eq!(next.start, held.end / 4096 * 4096);
        let (last, after) = StoreJournal::read_after(reopened(&j), held).unwrap();
        assert_eq!((last, after.len()), (9, 1));
        let (last, after) = StoreJournal::read_after(reopened(&j), next).unwrap();
        assert_eq!((last, after.len()), (9, 0));
        // Another journal's record frees nothing of this one.
        j.recorded(JournalImage { fd: -1, ..next });
        assert_eq!(j.image().start, next.start);
    }
}
