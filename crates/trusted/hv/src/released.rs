//! The pages page flips moved out of a domain in one batch, given up
//! together when the batch ends (Menon 2006 §2: Xen 2.0's netback unmapped
//! a receive batch's pages in one multicall, with one TLB flush).

use crate::memory::DomainMemory;
use abi::MemError;
use sys::PAGE_SIZE;

/// The pool byte ranges flipped out of one domain, as runs of adjacent
/// frames in the order the flips came.
#[derive(Debug, Default)]
pub struct Released {
    /// `(offset, length)` in the pool, whole frames.
    runs: Vec<(usize, usize)>,
}

impl Released {
    /// Whether the frame at pool offset `off` was flipped out already: its
    /// page is gone, and a second flip of it is refused.
    pub fn holds(&self, off: usize) -> bool {
        self.runs.iter().any(|&(o, n)| off >= o && off - o < n)
    }

    /// Notes the frame at pool offset `off` as flipped out.
    pub fn add(&mut self, off: usize) {
        if let Some((o, n)) = self.runs.last_mut() {
            if *o + *n == off {
                *n += PAGE_SIZE;
                return;
            }
        }
        self.runs.push((off, PAGE_SIZE));
    }

    /// Gives every run up ([`DomainMemory::give_up`], freeing the pages
    /// with `free`), adjacent runs in one call whatever order the flips
    /// came in, and forgets them; the first failure is returned after all
    /// were tried.
    pub fn give_up(&mut self, m: &DomainMemory, free: bool) -> Result<(), MemError> {
        self.runs.sort_unstable();
        let mut r = Ok(());
        let mut cur: Option<(usize, usize)> = None;
        for (off, len) in self.runs.drain(..) {
            cur = match cur {
                Some((o, n)) if o + n == off => Some((o, n + len)),
                Some((o, n)) => {
                    r = r.and(m.give_up(o, n, free).map(drop));
                    Some((off, len))
                }
                None => Some((off, len)),
            };
        }
        if let Some((o, n)) = cur {
            r = r.and(m.give_up(o, n, free).map(drop));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::tests::pool_blocks as blocks;
    use abi::SharedMemory;

    #[test]
    fn adjacent_frames_make_one_run_and_a_flipped_frame_is_known() {
        let mut r = Released::default();
        for f in [3, 4, 5, 9] {
            r.add(f * PAGE_SIZE);
        }
        assert_eq!(
            r.runs,
            vec![(3 * PAGE_SIZE, 3 * PAGE_SIZE), (9 * PAGE_SIZE, PAGE_SIZE)]
        );
        assert!(r.holds(4 * PAGE_SIZE) && r.holds(9 * PAGE_SIZE));
        assert!(!r.holds(6 * PAGE_SIZE) && !r.holds(2 * PAGE_SIZE));
    }

    #[test]
    fn pages_are_freed_only_when_asked_and_zeroed_either_way() {
        let spec = crate::memory::MemorySpec {
            pool_frames: 8,
            grant_frames: 1,
            hugepages: false,
        };
        let m = DomainMemory::new("t-released", spec).unwrap();
        m.pool_map.try_fill(0, 8 * PAGE_SIZE, 0x5a).unwrap();
        let full = blocks(&m);
        let mut r = Released::default();
        // Descending, as a hostile caller might order them: one run still.
        for f in [3, 2, 1] {
            r.add(f * PAGE_SIZE);
        }
        r.give_up(&m, false).unwrap();
        assert_eq!(blocks(&m), full, "zeroed, not freed");
        let mut b = [0xffu8; 4];
        m.pool_map.try_read_bytes(2 * PAGE_SIZE, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
        for f in [6, 5] {
            r.add(f * PAGE_SIZE);
        }
        r.give_up(&m, true).unwrap();
        assert!(blocks(&m) < full, "frames 5 and 6 freed");
        m.pool_map.try_read_bytes(5 * PAGE_SIZE, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
        m.pool_map.try_read_bytes(4 * PAGE_SIZE, &mut b).unwrap();
        assert_eq!(b, [0x5a; 4], "its neighbour kept");
    }
}
