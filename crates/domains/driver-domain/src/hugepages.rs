//! The driver domain's own packet buffers on huge pages (Menon 2006 §5.3,
//! superpages): netback's RX slabs and the ports' receive buffers, when
//! the topology gives the driver domain `hugepages = true` (the toolstack
//! writes `splitnet/hugepages` in its home). They are private memory, so
//! they take transparent huge pages by `madvise(MADV_HUGEPAGE)`; hv backs
//! the domain's pool itself (THP, else hugetlb).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The key under the domain's `splitnet` home.
pub const KEY: &str = "hugepages";

static ON: AtomicBool = AtomicBool::new(false);
static ADVISED: AtomicU64 = AtomicU64::new(0);

/// Turns huge buffers on for this domain (once, at start), saying what
/// the kernel allows.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
    let (thp, setting) = sys::huge::thp_anon();
    if thp.advised_ranges_get_them() {
        eprintln!("driver: packet buffers on transparent huge pages ({setting})");
    } else {
        eprintln!(
            "driver: hugepages = true, but transparent huge pages are off ({setting}): packet buffers stay on 4 KiB pages"
        );
    }
}

/// Whether this domain's buffers go on huge pages.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Advises `buf` (a buffer just allocated, not yet touched) when huge
/// buffers are on.
pub fn advise(buf: &mut [u8]) {
    if enabled() {
        ADVISED.fetch_add(sys::huge::advise_huge(buf) as u64, Ordering::Relaxed);
    }
}

/// A port's receive batch, on huge pages when they are on.
pub fn batch(mut b: sys::RecvBatch) -> sys::RecvBatch {
    if enabled() {
        ADVISED.fetch_add(b.advise_huge() as u64, Ordering::Relaxed);
    }
    b
}

/// Bytes of buffers advised so far.
pub fn advised_bytes() -> u64 {
    ADVISED.load(Ordering::Relaxed)
}
