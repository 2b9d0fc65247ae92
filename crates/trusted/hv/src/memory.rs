//! A domain's memory as hv sees it: the grantable frame pool, the grant table,
//! the hypercall batch page and the trace area, each its own sealed memfd.
//!
//! Only the pool is grantable. A domain's private process memory is never
//! shared with anyone; hv hands a peer the pool alone, read-only unless the
//! grant allows writing (so the kernel enforces read-only maps).

use crate::error::{HvError, HvResult};
use abi::grant::GRANT_ENTRIES_PER_PAGE;
use abi::{MemError, Pfn, SharedMemory};
use std::os::fd::{AsFd, OwnedFd};
use sys::{Mapping, Memfd, PAGE_SIZE};

/// Sizes of a domain's memory.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct MemorySpec {
    /// Frames in the grantable pool.
    pub pool_frames: u32,
    /// Pages of grant table (512 v1 entries each).
    pub grant_frames: u32,
    /// Back the pool with 2 MiB pages (prepares superpages, Menon 2006 §5.3).
    pub hugepages: bool,
}

impl Default for MemorySpec {
    fn default() -> Self {
        MemorySpec {
            pool_frames: 2048,
            grant_frames: 4,
            hugepages: false,
        }
    }
}

/// What backs a domain's pool (Menon 2006 §5.3, superpages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugeBacking {
    /// 2 MiB hugetlb pages, reserved up front: where shared memory may not
    /// take transparent huge pages.
    Hugetlb,
    /// Transparent huge pages, advised (`madvise(MADV_HUGEPAGE)`): the
    /// first choice, where the kernel allows them for shared memory.
    Thp,
    /// 4 KiB pages.
    None,
}

impl HugeBacking {
    /// The name status shows (`huge_backing`).
    pub fn as_str(self) -> &'static str {
        match self {
            HugeBacking::Hugetlb => "hugetlb",
            HugeBacking::Thp => "thp",
            HugeBacking::None => "none",
        }
    }
}

/// Pages in the hypercall batch area.
pub const BATCH_PAGES: u32 = 4;

/// The memory of one domain, owned by hv.
#[derive(Debug)]
pub struct DomainMemory {
    pub spec: MemorySpec,
    /// What backs the pool, and why not transparent huge pages when asked for.
    pub backing: HugeBacking,
    pub backing_note: Option<String>,
    pub pool: Memfd,
    pub pool_map: Mapping,
    pub gnttab: Memfd,
    pub gnttab_map: Mapping,
    pub batch: Memfd,
    pub batch_map: Mapping,
    /// The domain's trace counters ([`crate::trace`]): it writes, hv reads.
    pub trace: Memfd,
    pub trace_map: Mapping,
}

type Made = (Memfd, Mapping);

/// A pool on huge pages (Menon 2006 §5.3): transparent huge pages when
/// the kernel allows them for shared memory (`thp`, the setting and where
/// it was read) and gives a whole pool of them, else hugetlb when its pool
/// has room, else what there is; the note says why not the first.
///
/// Transparent huge pages come first because they keep Xen's split: the
/// domain maps its own pool 2 MiB at a time (its superpages), while a
/// peer's grant map still maps the one 4 KiB frame granted. A hugetlb page
/// can only be mapped whole, so a peer's mirror of it installs 2 MiB
/// entries, a cheaper grant map than Xen ever had (`sys::PoolMirror`).
fn huge_pool(
    name: &str,
    len: usize,
    thp: (sys::huge::Thp, String),
    mk: &dyn Fn(&str, usize, bool) -> HvResult<Made>,
) -> HvResult<(Memfd, Mapping, HugeBacking, Option<String>)> {
    let (fallback, thp_off) = if thp.0.advised_ranges_get_them() {
        let (fd, map) = mk("pool", len, false)?;
        match thp_pool(&map, len) {
            Ok(()) => return Ok((fd, map, HugeBacking::Thp, None)),
            Err((huge, why)) => {
                let backing = if huge > 0 {
                    HugeBacking::Thp
                } else {
                    HugeBacking::None
                };
                (Some((fd, map, backing)), why)
            }
        }
    } else {
        let why = format!(
            "transparent huge pages for shared memory are off ({})",
            thp.1
        );
        (None, why)
    };
    // A hugetlb mapping reserves its pages when made, so a short pool
    // fails here rather than at a later fault. Its pages are faulted in
    // whole, so a grantee's mirror finds each in the file (sys::PoolMirror).
    let short = match mk("pool", len, true) {
        Ok((fd, map)) => {
            map.populate()
                .map_err(|e| HvError::internal(&format!("faulting in {name}'s pool"), e))?;
            let note = format!("{name}: {thp_off}, so the pool is on hugetlb pages, which a peer's grant map maps 2 MiB at a time");
            return Ok((fd, map, HugeBacking::Hugetlb, Some(note)));
        }
        Err(e) => e,
    };
    let pages = len / sys::huge::HUGE_PAGE;
    let why = format!(
        "{name}: {thp_off}, and {pages} hugetlb 2 MiB pages could not be had ({})",
        short.message
    );
    match fallback {
        // What transparent huge pages the kernel gave, kept.
        Some((fd, map, backing)) => Ok((fd, map, backing, Some(why))),
        None => {
            let (fd, map) = mk("pool", len, false)?;
            let note = format!("{why}, so the pool is on 4 KiB pages");
            Ok((fd, map, HugeBacking::None, Some(note)))
        }
    }
}

/// Puts the fresh pool `map` (`len` bytes) on transparent huge pages and
/// checks that all of it got them; if not, takes the advice back (so that
/// khugepaged never collapses its small pages from under a peer's mirror)
/// and says how much did: (huge bytes, why not all).
fn thp_pool(map: &Mapping, len: usize) -> Result<(), (usize, String)> {
    let r = match map.advise_huge() {
        Err(e) => Err((0, format!("asking for transparent huge pages failed ({e})"))),
        Ok(advised) => {
            let huge = map.huge_mapped().unwrap_or(0);
            if advised == len && huge >= len {
                return Ok(());
            }
            Err((
                huge,
                format!(
                    "transparent huge pages covered {} of its {} MiB",
                    huge >> 20,
                    len >> 20
                ),
            ))
        }
    };
    let _ = map.advise_small();
    r
}

impl DomainMemory {
    /// Allocates zeroed memory for domain `name`.
    pub fn new(name: &str, spec: MemorySpec) -> HvResult<DomainMemory> {
        if spec.pool_frames == 0 || spec.grant_frames == 0 {
            return Err(HvError::new(
                crate::ErrorKind::Invalid,
                "memory sizes must be non-zero",
            ));
        }
        let pool_len = spec.pool_frames as usize * PAGE_SIZE;
        let huge = 2 << 20;
        if spec.hugepages && !pool_len.is_multiple_of(huge) {
            return Err(HvError::new(
                crate::ErrorKind::Invalid,
                format!(
                    "hugepage pools need a multiple of 512 frames (2 MiB), got {}",
                    spec.pool_frames
                ),
            ));
        }
        let mk = |what: &str, len: usize, huge: bool| -> HvResult<(Memfd, Mapping)> {
            let fd = Memfd::create(&format!("splitnet-{name}-{what}"), len, huge)
                .map_err(|e| HvError::internal(&format!("allocating {what} for {name}"), e))?;
            let map = Mapping::new(fd.as_fd(), 0, len, true)
                .map_err(|e| HvError::internal(&format!("mapping {what} for {name}"), e))?;
            Ok((fd, map))
        };
        let pool = if spec.hugepages {
            huge_pool(name, pool_len, sys::huge::thp_shmem(), &mk)?
        } else {
            let (fd, map) = mk("pool", pool_len, false)?;
            (fd, map, HugeBacking::None, None)
        };
        let (pool, pool_map, backing, backing_note) = pool;
        let (gnttab, gnttab_map) = mk("gnttab", spec.grant_frames as usize * PAGE_SIZE, false)?;
        let (batch, batch_map) = mk("batch", BATCH_PAGES as usize * PAGE_SIZE, false)?;
        let trace_len = crate::trace::TRACE_PAGES as usize * PAGE_SIZE;
        let (trace, trace_map) = mk("trace", trace_len, false)?;
        Ok(DomainMemory {
            spec,
            backing,
            backing_note,
            pool,
            pool_map,
            gnttab,
            gnttab_map,
            batch,
            batch_map,
            trace,
            trace_map,
        })
    }

    /// Takes `len` bytes at `off` of the pool away from this domain once a
    /// page flip has moved them (Menon 2006 §4.2: the page leaves the
    /// driver domain, which gets a fresh one in its place). With `free`, on
    /// 4 KiB pages, the page is freed, a hole punched in the pool, which
    /// unmaps it from every address space that held it, so the domain's
    /// next touch allocates and maps a zeroed page. Only a pool no peer
    /// mirrors may be freed: a mirror (`sys::PoolMirror`) faults on a page
    /// that left and came back. Otherwise, and on huge pages, which cannot
    /// give up 4 KiB, the bytes are zeroed. Returns whether pages were freed.
    pub fn give_up(&self, off: usize, len: usize, free: bool) -> Result<bool, MemError> {
        self.pool_map.check_store(off, len)?;
        let small = matches!(self.backing, HugeBacking::None);
        if free && small && sys::punch_hole(self.pool.as_fd(), off as u64, len as u64).is_ok() {
            return Ok(true);
        }
        self.pool_map.try_fill(off, len, 0).map(|()| false)
    }

    /// A domain's memory carried across hv's upgrade in place: the four
    /// memfds ([`DomainMemory::memfds`]' order), each checked against
    /// `spec` and mapped again.
    pub fn adopt(
        spec: MemorySpec,
        backing: &str,
        [pool, gnttab, batch, trace]: [Memfd; 4],
    ) -> HvResult<DomainMemory> {
        let backing = match backing {
            "hugetlb" => HugeBacking::Hugetlb,
            "thp" => HugeBacking::Thp,
            "none" => HugeBacking::None,
            other => {
                return Err(HvError::new(
                    crate::ErrorKind::Invalid,
                    format!("unknown pool backing {other:?}"),
                ))
            }
        };
        let trace_len = crate::trace::TRACE_PAGES as usize * PAGE_SIZE;
        let map = |fd: &Memfd, len: usize, what: &str| -> HvResult<Mapping> {
            if fd.len() != len {
                return Err(HvError::new(
                    crate::ErrorKind::Invalid,
                    format!("{what} memory is {} bytes, not {len}", fd.len()),
                ));
            }
            Mapping::new(fd.as_fd(), 0, len, true)
                .map_err(|e| HvError::internal(&format!("mapping {what} again"), e))
        };
        // A live pool: mapped as it is, nothing advised or touched (its
        // huge pages are mapped whole wherever they are).
        let pool_map = map(&pool, spec.pool_frames as usize * PAGE_SIZE, "pool")?;
        Ok(DomainMemory {
            spec,
            backing,
            backing_note: None,
            pool_map,
            pool,
            gnttab_map: map(
                &gnttab,
                spec.grant_frames as usize * PAGE_SIZE,
                "grant table",
            )?,
            gnttab,
            batch_map: map(&batch, BATCH_PAGES as usize * PAGE_SIZE, "batch")?,
            batch,
            trace_map: map(&trace, trace_len, "trace")?,
            trace,
        })
    }

    /// The four memfds, in the order [`DomainMemory::adopt`] takes them.
    pub fn memfds(&self) -> [&Memfd; 4] {
        [&self.pool, &self.gnttab, &self.batch, &self.trace]
    }

    /// Grant references this domain's table holds.
    pub fn grant_entries(&self) -> u32 {
        self.spec.grant_frames * GRANT_ENTRIES_PER_PAGE as u32
    }

    /// Frame `raw` of the pool, as a peer named it (a grant entry, a copy
    /// op, a transfer): refused unless the pool holds it.
    pub fn frame(&self, raw: u64) -> Result<Pfn, MemError> {
        Pfn::checked(raw, self.spec.pool_frames)
    }

    /// A descriptor for a peer: read-only unless `writable`.
    pub fn pool_fd_for_peer(&self, writable: bool) -> HvResult<OwnedFd> {
        let r = if writable {
            self.pool.dup()
        } else {
            self.pool.reopen_readonly()
        };
        r.map_err(|e| HvError::internal("sharing pool", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::SharedMemory;
    use sys::huge::{thp_shmem, Thp, HUGE_PAGE};

    /// A maker of pool memory that refuses hugetlb, as a short pool does.
    fn no_hugetlb(what: &str, len: usize, huge: bool) -> HvResult<Made> {
        if huge {
            return Err(HvError::internal(
                "allocating pool",
                std::io::Error::from_raw_os_error(libc::ENOMEM),
            ));
        }
        let fd = Memfd::create(&format!("splitnet-t-huge-{what}"), len, false)
            .map_err(|e| HvError::internal("allocating", e))?;
        let map =
            Mapping::new(fd.as_fd(), 0, len, true).map_err(|e| HvError::internal("mapping", e))?;
        Ok((fd, map))
    }

    #[test]
    fn thp_comes_first_and_every_fallback_says_why() {
        let never = (Thp::Never, "shmem_enabled = never".to_string());
        // Transparent huge pages off, hugetlb refused: 4 KiB pages, with a
        // note naming both reasons.
        let (_fd, map, backing, note) =
            huge_pool("t-huge", 2 * HUGE_PAGE, never, &no_hugetlb).unwrap();
        let note = note.unwrap();
        assert_eq!(backing, HugeBacking::None, "{note}");
        assert!(note.contains("shmem_enabled = never"), "{note}");
        assert!(note.contains("hugetlb") && note.contains("4 KiB"), "{note}");
        // The pool works all the same.
        map.write_bytes(PAGE_SIZE, b"still a pool");
        let mut b = [0u8; 12];
        map.read_bytes(PAGE_SIZE, &mut b);
        assert_eq!(&b, b"still a pool");
        // Allowed where advised: transparent huge pages when the kernel
        // gives the whole pool, else what it gave, saying how much.
        let (thp, setting) = thp_shmem();
        let advise = (Thp::Madvise, setting);
        let (_fd, map, backing, note) =
            huge_pool("t-huge", 2 * HUGE_PAGE, advise, &no_hugetlb).unwrap();
        if thp.advised_ranges_get_them() && note.is_none() {
            assert_eq!(backing, HugeBacking::Thp);
            assert_eq!(map.huge_mapped().unwrap(), 2 * HUGE_PAGE);
        } else if thp.advised_ranges_get_them() {
            // Memory too fragmented for a whole pool: said so.
            let note = note.unwrap();
            assert!(note.contains("covered"), "{note}");
        } else {
            // This host gives none: said so, and not called huge.
            let note = note.unwrap();
            assert!(note.contains("covered 0 of its 4 MiB"), "{note}");
            assert_eq!(backing, HugeBacking::None, "{note}");
        }
    }

    #[test]
    fn a_pool_without_hugepages_says_none() {
        let m = DomainMemory::new("t-small", MemorySpec::default()).unwrap();
        assert_eq!(
            (m.backing, m.backing_note.is_none()),
            (HugeBacking::None, true)
        );
    }
}
