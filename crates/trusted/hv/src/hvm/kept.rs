//! The relay's state kept in a page of hv's own (Zhang & Dong §5.1 put the
//! vPIC in the hypervisor; here hv is a program that can be upgraded or
//! die, and the guest's interrupt controller must outlive it). The relay
//! writes its state there after each exit or interrupt it handled; an
//! upgraded hv, or one its guardian started again, goes on from it.
//!
//! Two copies alternate and a generation names the complete one, so a
//! program that dies while writing leaves the copy before intact.

use abi::SharedMemory;
use sys::Mapping;
use vpic::{DualPic, STATE_LEN};

/// Where the generation is, and the two copies.
const GENERATION: usize = 0;
const COPIES: usize = 64;
const COPY_LEN: usize = 128;

/// What must outlive hv's program: the vPIC and the positions in the two
/// pages' protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept {
    pub pic: [u8; STATE_LEN],
    pub wires: u16,
    pub inject_seq: u32,
    pub dm_vec_taken: u32,
    pub pending_vector: Option<u8>,
    pub dm_seq: u32,
    pub abandoned: bool,
}

const W: usize = STATE_LEN;

impl Kept {
    fn encode(&self) -> [u8; COPY_LEN] {
        let mut b = [0u8; COPY_LEN];
        b[..W].copy_from_slice(&self.pic);
        b[W..W + 2].copy_from_slice(&self.wires.to_le_bytes());
        b[W + 2..W + 6].copy_from_slice(&self.inject_seq.to_le_bytes());
        b[W + 6..W + 10].copy_from_slice(&self.dm_vec_taken.to_le_bytes());
        b[W + 10] = u8::from(self.pending_vector.is_some());
        b[W + 11] = self.pending_vector.unwrap_or(0);
        b[W + 12..W + 16].copy_from_slice(&self.dm_seq.to_le_bytes());
        b[W + 16] = u8::from(self.abandoned);
        b
    }

    fn decode(b: &[u8; COPY_LEN]) -> Result<Kept, String> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let pic: [u8; W] = b[..W].try_into().unwrap_or([0; W]);
        DualPic::restore(&pic).map_err(|e| e.to_string())?;
        if b[W + 10] > 1 || b[W + 16] > 1 {
            return Err("a flag that is neither set nor clear".into());
        }
        Ok(Kept {
            pic,
            wires: u16::from_le_bytes([b[W], b[W + 1]]),
            inject_seq: u32_at(W + 2),
            dm_vec_taken: u32_at(W + 6),
            pending_vector: (b[W + 10] == 1).then_some(b[W + 11]),
            dm_seq: u32_at(W + 12),
            abandoned: b[W + 16] == 1,
        })
    }
}

/// The page, as the relay writes it.
pub(super) struct KeptPage {
    map: Mapping,
    generation: u32,
    last: Option<Kept>,
}

impl KeptPage {
    /// The page `map` maps, as a program before this one left it.
    pub fn new(map: Mapping) -> KeptPage {
        let generation = map.load_u32(GENERATION);
        KeptPage {
            map,
            generation,
            last: None,
        }
    }

    /// The state last written; None on a page never written.
    pub fn load(&self) -> Result<Option<Kept>, String> {
        if self.generation == 0 {
            return Ok(None);
        }
        let mut b = [0u8; COPY_LEN];
        let at = COPIES + (self.generation as usize % 2) * COPY_LEN;
        self.map.read_bytes(at, &mut b);
        Kept::decode(&b).map(Some)
    }

    /// Writes `k` into the copy not in use, then names it complete;
    /// nothing when it is what was written last.
    pub fn store(&mut self, k: &Kept) {
        if self.last.as_ref() == Some(k) {
            return;
        }
        // Past u32::MAX (odd), 2: the other copy, and never 0 ("never
        // written").
        let next = self.generation.checked_add(1).unwrap_or(2);
        let at = COPIES + (next as usize % 2) * COPY_LEN;
        self.map.write_bytes(at, &k.encode());
        // Release: the copy is complete before its generation is seen.
        self.map.store_u32(GENERATION, next);
        (self.generation, self.last) = (next, Some(*k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn page() -> (sys::Memfd, Mapping) {
        let fd = sys::Memfd::create("kept-test", sys::PAGE_SIZE, false).unwrap();
        let map = Mapping::new(fd.as_fd(), 0, sys::PAGE_SIZE, true).unwrap();
        (fd, map)
    }

    fn sample(n: u32) -> Kept {
        let mut pic = DualPic::new();
        pic.write_port(0x20, 0x11);
        Kept {
            pic: pic.save(),
            wires: 0x0800,
            inject_seq: n,
            dm_vec_taken: 7,
            pending_vector: Some(0x3b),
            dm_seq: n * 2,
            abandoned: true,
        }
    }

    #[test]
    fn the_next_program_reads_what_the_last_wrote() {
        let (fd, map) = page();
        let mut p = KeptPage::new(map);
        assert_eq!(p.load().unwrap(), None);
        p.store(&sample(1));
        p.store(&sample(2));
        let again = KeptPage::new(Mapping::new(fd.as_fd(), 0, sys::PAGE_SIZE, true).unwrap());
        assert_eq!(again.load().unwrap(), Some(sample(2)));
    }

    #[test]
    fn a_copy_torn_by_a_death_leaves_the_one_before() {
        let (fd, map) = page();
        let mut p = KeptPage::new(map);
        p.store(&sample(1));
        // A program dies writing the next copy (generation 2's, the
        // first): its generation never moved.
        let other = COPIES;
        p.map.write_bytes(other, &[0xff; 40]);
        let again = KeptPage::new(Mapping::new(fd.as_fd(), 0, sys::PAGE_SIZE, true).unwrap());
        assert_eq!(again.load().unwrap(), Some(sample(1)));
    }

    #[test]
    fn a_state_no_relay_can_be_in_is_refused() {
        let (_fd, map) = page();
        let mut p = KeptPage::new(map);
        p.store(&sample(1));
        let at = COPIES + COPY_LEN + 6; // the master's initialization step
        p.map.write_bytes(at, &[9]);
        let e = p.load().unwrap_err();
        assert!(e.contains("initialization step"), "{e}");
    }
}
