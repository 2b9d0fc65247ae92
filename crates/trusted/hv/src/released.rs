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

    /// Gives every run up ([`DomainMemory::give_up`]), one call a run, and
    /// forgets them; the first failure is returned after all were tried.
    pub fn give_up(&mut self, m: &DomainMemory) -> Result<(), MemError> {
        let mut r = Ok(());
        for (off, len) in self.runs.drain(..) {
            r = r.and(m.give_up(off, len));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
