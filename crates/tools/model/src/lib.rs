//! Exhaustive model checks of splitnet's three shared-memory protocols with
//! `loom`: the ring's event indices (`abi::ring`), event-channel pending and
//! mask words (`hypercall::evtchn`), and NGM use counts against revocation
//! (`hypercall::ngm`, Ram thesis 4.4).
//!
//! The checks in `tests/` run the protocols' own code, which is generic over
//! [`abi::SharedMemory`]; [`LoomMemory`] implements that trait with loom's
//! atomics, using the orderings `sys::Mapping` uses, so loom explores every
//! interleaving and every weak-memory outcome those orderings allow. A
//! [`Flavor`] weakens one primitive the way the code was before the fixes,
//! and a test for each protocol expects loom to find the bug then.
//!
//! Run them with `cargo test -p splitnet-model -- --nocapture` (each model
//! prints how many executions it explored); `LOOM_MAX_PREEMPTIONS=N`
//! overrides the bound ([`PREEMPTIONS`]).
//!
//! loom 0.7.3 does not keep a plain store out of the middle of a
//! read-modify-write on the same word (tokio-rs/loom#254), so it reports
//! false bugs there; the protocols write every word that an RMW touches with
//! RMWs only (pending words, use counts), which keeps its verdicts exact.
#![forbid(unsafe_code)]

use abi::SharedMemory;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
// Counts executions from outside the model, so not one of loom's atomics.
use std::sync::{atomic::AtomicUsize, Arc};

/// Preemptions loom explores per execution unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise. At 12 these models are explored in full (each explores
/// as many executions as with a bound of 20) in a few seconds; a larger
/// model may want a smaller bound to stay fast.
pub const PREEMPTIONS: usize = 12;

/// Runs `f` under loom for every interleaving within the preemption bound;
/// how many executions that was (printed too, with `--nocapture`).
pub fn check<F: Fn() + Sync + Send + 'static>(f: F) -> usize {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = b.preemption_bound.or(Some(PREEMPTIONS));
    let runs = Arc::new(AtomicUsize::new(0));
    let count = runs.clone();
    b.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("loom explored {runs} executions");
    runs
}

/// How faithfully [`LoomMemory`] keeps the production orderings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Exactly `sys::Mapping`'s orderings.
    Fixed,
    /// No fence between a store and a later load: release stores and acquire
    /// loads only, as `notify` and `unmask` were before the fix.
    NoFence,
    /// A swap that is a load and then a store, as `take_pending` was.
    SplitSwap,
    /// Both: the event channel's code as it was before the fix.
    BeforeFix,
}

impl Flavor {
    fn fences(self) -> bool {
        matches!(self, Flavor::Fixed | Flavor::SplitSwap)
    }
    fn swaps(self) -> bool {
        matches!(self, Flavor::Fixed | Flavor::NoFence)
    }
}

/// The memory's words: 32-bit ones (rings, event channels, use counts) or
/// 64-bit ones (NGM translation entries). Each is its own atomic location,
/// as in production, so neighbouring words never order each other.
enum Words {
    U32(Vec<AtomicU32>),
    U64(Vec<AtomicU64>),
}

/// Shared memory made of loom atomics. It says it is `len` bytes long (a
/// ring needs a page) but holds only the first `backed` bytes, which is
/// where the models' accesses fall; an access past them is a model bug and
/// panics.
pub struct LoomMemory {
    len: usize,
    words: Words,
    flavor: Flavor,
}

impl LoomMemory {
    /// Zeroed memory of 32-bit words.
    pub fn words(len: usize, backed: usize, flavor: Flavor) -> LoomMemory {
        let words = (0..backed.div_ceil(4)).map(|_| AtomicU32::new(0));
        LoomMemory {
            len,
            words: Words::U32(words.collect()),
            flavor,
        }
    }

    /// Zeroed memory of 64-bit words.
    pub fn wide(len: usize, backed: usize, flavor: Flavor) -> LoomMemory {
        let words = (0..backed.div_ceil(8)).map(|_| AtomicU64::new(0));
        LoomMemory {
            len,
            words: Words::U64(words.collect()),
            flavor,
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert_eq!(off % 4, 0, "unaligned 32-bit access at {off}");
        match &self.words {
            Words::U32(w) => w.get(off / 4).expect("access past the backed bytes"),
            Words::U64(_) => panic!("32-bit access to 64-bit model memory"),
        }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert_eq!(off % 8, 0, "unaligned 64-bit access at {off}");
        match &self.words {
            Words::U64(w) => w.get(off / 8).expect("access past the backed bytes"),
            Words::U32(_) => panic!("64-bit access to 32-bit model memory"),
        }
    }

    /// Byte `i`, as a relaxed access to its word (entry contents).
    fn byte(&self, i: usize) -> u8 {
        self.u32_at(i / 4 * 4).load(Ordering::Relaxed).to_ne_bytes()[i % 4]
    }

    /// Writes byte `i`; entries have one writer at a time, so a relaxed load
    /// and store of the word (not a read-modify-write) is what a copy does.
    fn set_byte(&self, i: usize, b: u8) {
        let w = self.u32_at(i / 4 * 4);
        let mut bytes = w.load(Ordering::Relaxed).to_ne_bytes();
        bytes[i % 4] = b;
        w.store(u32::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

impl SharedMemory for LoomMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.byte(off + i);
        }
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        if off.is_multiple_of(4) && src.len().is_multiple_of(4) {
            // Whole words: one relaxed store each, as memcpy's moves are.
            for (k, c) in src.chunks_exact(4).enumerate() {
                let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                self.u32_at(off + 4 * k).store(v, Ordering::Relaxed);
            }
            return;
        }
        for (i, s) in src.iter().enumerate() {
            self.set_byte(off + i, *s);
        }
    }
    fn load_u32(&self, off: usize) -> u32 {
        self.u32_at(off).load(Ordering::Acquire)
    }
    fn store_u32(&self, off: usize, v: u32) {
        self.u32_at(off).store(v, Ordering::Release)
    }
    /// A 16-bit compare-and-swap inside its 32-bit word (SeqCst, as
    /// `Mapping`'s), by a compare-and-swap loop on the whole word.
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        assert_eq!(off % 2, 0, "unaligned 16-bit access at {off}");
        let (word, shift) = (self.u32_at(off & !3), (off % 4) * 8);
        let mut w = word.load(Ordering::SeqCst);
        loop {
            let cur = (w >> shift) as u16;
            if cur != old {
                return Err(cur);
            }
            let next = (w & !(0xffff << shift)) | (u32::from(new) << shift);
            match word.compare_exchange(w, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(old),
                Err(seen) => w = seen,
            }
        }
    }
    fn load_u16(&self, off: usize) -> u16 {
        assert_eq!(off % 2, 0, "unaligned 16-bit access at {off}");
        (self.u32_at(off & !3).load(Ordering::SeqCst) >> ((off % 4) * 8)) as u16
    }
    fn swap_u32(&self, off: usize, v: u32) -> u32 {
        let w = self.u32_at(off);
        if !self.flavor.swaps() {
            let old = w.load(Ordering::Acquire);
            w.store(v, Ordering::Release);
            return old;
        }
        w.swap(v, Ordering::SeqCst)
    }
    fn cmpxchg_u32(&self, off: usize, old: u32, new: u32) -> Result<u32, u32> {
        self.u32_at(off)
            .compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
    }
    fn fetch_add_u32(&self, off: usize, v: u32) -> u32 {
        self.u32_at(off).fetch_add(v, Ordering::SeqCst)
    }
    fn load_u64_seqcst(&self, off: usize) -> u64 {
        self.u64_at(off).load(Ordering::SeqCst)
    }
    fn store_u64_seqcst(&self, off: usize, v: u64) {
        self.u64_at(off).store(v, Ordering::SeqCst)
    }
    fn fence_seqcst(&self) {
        if self.flavor.fences() {
            fence(Ordering::SeqCst)
        }
    }
}

/// A doorbell (`sys::Doorbell`): rings counted, drained by the waiter.
/// Production rings with a datagram; what matters here is only whether a
/// ring is left for a waiter that goes to sleep.
#[derive(Default)]
pub struct Bell(AtomicU32);

impl Bell {
    /// An unrung doorbell.
    pub fn new() -> Bell {
        Bell(AtomicU32::new(0))
    }
    /// Rings it.
    pub fn ring(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }
    /// Takes every ring so far (a waiter that wakes up); how many.
    pub fn drain(&self) -> u32 {
        self.0.swap(0, Ordering::Acquire)
    }
    /// Whether a ring is waiting, so a waiter going to sleep would wake.
    pub fn rung(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}
