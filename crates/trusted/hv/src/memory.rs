//! A domain's memory as hv sees it: the grantable frame pool, the grant table,
//! the hypercall batch page and the trace area, each its own sealed memfd.
//!
//! Only the pool is grantable. A domain's private process memory is never
//! shared with anyone; hv hands a peer the pool alone, read-only unless the
//! grant allows writing (so the kernel enforces read-only maps).

use crate::error::{HvError, HvResult};
use abi::grant::GRANT_ENTRIES_PER_PAGE;
use abi::{MemError, Pfn};
use std::os::fd::{AsFd, OwnedFd};
use sys::{Mapping, Memfd, PAGE_SIZE};

/// Sizes of a domain's memory.
#[derive(Debug, Clone, Copy)]
pub struct MemorySpec {
    /// Frames in the grantable pool.
    pub pool_frames: u32,
    /// Pages of grant table (512 v1 entries each).
    pub grant_frames: u32,
    /// Back the pool with 2 MiB hugetlb pages (prepares superpages, Menon 2006 §5.3).
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

/// Pages in the hypercall batch area.
pub const BATCH_PAGES: u32 = 4;

/// The memory of one domain, owned by hv.
#[derive(Debug)]
pub struct DomainMemory {
    pub spec: MemorySpec,
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
        let (pool, pool_map) = mk("pool", pool_len, spec.hugepages)?;
        let (gnttab, gnttab_map) = mk("gnttab", spec.grant_frames as usize * PAGE_SIZE, false)?;
        let (batch, batch_map) = mk("batch", BATCH_PAGES as usize * PAGE_SIZE, false)?;
        let trace_len = crate::trace::TRACE_PAGES as usize * PAGE_SIZE;
        let (trace, trace_map) = mk("trace", trace_len, false)?;
        Ok(DomainMemory {
            spec,
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
