//! The relay's state kept in a page of hv's own (Zhang & Dong §5.1 put the
//! vPIC in the hypervisor; here hv is a program that can be upgraded or
//! die, and the guest's interrupt controller must outlive it). The relay
//! writes its state there *ahead* of what the guest or the device model
//! sees: an exit's completion and an injection are kept before they are
//! published, so a program that dies between the two leaves the next one
//! enough to publish them again rather than serve the exit twice. An
//! upgraded hv, or one its guardian started again, goes on from it.
//!
//! Two copies alternate and a generation names the complete one, so a
//! program that dies while writing leaves the copy before intact.

use abi::SharedMemory;
use hypercall::ioreq::ExitResult;
use sys::Mapping;
use vpic::{DualPic, STATE_LEN};

/// Where the generation is, and the two copies.
const GENERATION: usize = 0;
const COPIES: usize = 64;
const COPY_LEN: usize = 128;

/// The last exit's completion, kept before the guest may see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Done {
    /// The guest's sequence number of the exit.
    pub seq: u32,
    pub result: ExitResult,
    pub data: u32,
    /// The device model answered it: its slot holds the answer until the
    /// completion is published.
    pub answered: bool,
}

/// What must outlive hv's program: the vPIC, the positions in the two
/// pages' protocols, the last completion and the last injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept {
    pub pic: [u8; STATE_LEN],
    pub wires: u16,
    pub inject_seq: u32,
    pub dm_vec_taken: u32,
    pub pending_vector: Option<u8>,
    pub dm_seq: u32,
    pub abandoned: bool,
    pub done: Option<Done>,
    /// The vector of injection `inject_seq`.
    pub last_vector: u8,
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
        if let Some(d) = self.done {
            b[W + 17] = 1 | u8::from(d.answered) << 1;
            b[W + 18..W + 22].copy_from_slice(&d.seq.to_le_bytes());
            b[W + 22..W + 26].copy_from_slice(&(d.result as u32).to_le_bytes());
            b[W + 26..W + 30].copy_from_slice(&d.data.to_le_bytes());
        }
        b[W + 30] = self.last_vector;
        b
    }

    fn decode_done(b: &[u8; COPY_LEN]) -> Result<Option<Done>, String> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let flags = b[W + 17];
        if flags == 0 {
            return Ok(None);
        }
        let code = u32_at(W + 22);
        let result = ExitResult::from_code(code);
        if flags > 3 || result as u32 != code {
            return Err(format!(
                "a completion that cannot be: flags {flags:#x}, result {code}"
            ));
        }
        Ok(Some(Done {
            seq: u32_at(W + 18),
            result,
            data: u32_at(W + 26),
            answered: flags & 2 != 0,
        }))
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
            done: Kept::decode_done(b)?,
            last_vector: b[W + 30],
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
            done: Some(Done {
                seq: n + 5,
                result: ExitResult::DmTimeout,
                data: 0xffff,
                answered: n.is_multiple_of(2),
            }),
            last_vector: 0x3b,
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

    #[test]
    fn a_completion_that_cannot_be_is_refused() {
        let (_fd, map) = page();
        let mut p = KeptPage::new(map);
        p.store(&sample(1));
        // The current copy is generation 1's (the second); its result
        // code becomes one no exit ends with.
        p.map.write_bytes(COPIES + COPY_LEN + W + 22, &[7]);
        let e = p.load().unwrap_err();
        assert!(e.contains("result 7"), "{e}");
        p.map.write_bytes(COPIES + COPY_LEN + W + 22, &[2]);
        p.map.write_bytes(COPIES + COPY_LEN + W + 17, &[4]);
        let e = p.load().unwrap_err();
        assert!(e.contains("flags 0x4"), "{e}");
    }
}
