//! Software prefetch (Ram thesis 5.2): a hint that the cache line holding
//! an address will be read soon, so that the next packet's header is in the
//! cache by the time the current one is done. A hint only: it reads
//! nothing the program sees, and on architectures without the x86
//! instruction it does nothing.

/// Asks the CPU to bring the cache line at `p` into all cache levels.
#[inline(always)]
pub(crate) fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and changes no architectural state,
    // whatever the address; callers pass addresses inside memory they hold
    // anyway. SSE, which it needs, is part of the x86_64 baseline.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the first cache line of `bytes` (a frame's header in
/// private memory); nothing for an empty slice.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    if !bytes.is_empty() {
        prefetch_ptr(bytes.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetching_changes_nothing_and_checks_bounds() {
        let v = vec![7u8; 100];
        super::prefetch(&v);
        super::prefetch(&[]);
        let fd = crate::Memfd::create("t-prefetch", 4096, false).unwrap();
        let m = crate::Mapping::new(std::os::fd::AsFd::as_fd(&fd), 0, 4096, true).unwrap();
        m.prefetch(0);
        m.prefetch(4095);
        m.prefetch(4096); // outside: ignored
        m.prefetch(usize::MAX);
        assert_eq!(v, vec![7u8; 100]);
    }
}
