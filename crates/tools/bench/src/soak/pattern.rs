//! The bytes a soak flow carries: a stream that is a function of its seed
//! and offset, so that the receiver checks every byte it gets without a
//! copy of what was sent, and names the first one that differs.

use crate::rng::mix;

/// The 8 bytes of the stream `seed` at word `word` (offsets `8*word..`).
fn word(seed: u64, word: u64) -> [u8; 8] {
    mix(seed ^ word.wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes()
}

/// Fills `buf` with the stream `seed` from byte `offset`.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut rest = buf;
    while !rest.is_empty() {
        let w = word(seed, pos / 8);
        let at = (pos % 8) as usize;
        let n = (8 - at).min(rest.len());
        rest[..n].copy_from_slice(&w[at..at + n]);
        rest = &mut rest[n..];
        pos += n as u64;
    }
}

/// The index of the first byte of `buf` that is not the stream `seed`
/// from byte `offset`, if any.
pub fn first_mismatch(seed: u64, offset: u64, buf: &[u8]) -> Option<usize> {
    let mut pos = offset;
    let mut done = 0;
    while done < buf.len() {
        let w = word(seed, pos / 8);
        let at = (pos % 8) as usize;
        let n = (8 - at).min(buf.len() - done);
        if buf[done..done + n] != w[at..at + n] {
            let k = (0..n).find(|&k| buf[done + k] != w[at + k]).unwrap_or(0);
            return Some(done + k);
        }
        done += n;
        pos += n as u64;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_read_in_any_pieces_matches_and_a_flipped_byte_is_named() {
        let mut whole = vec![0u8; 1000];
        fill(9, 0, &mut whole);
        // The same bytes written from odd offsets in odd pieces.
        let mut pieces = vec![0u8; 1000];
        let mut at = 0;
        for len in [3usize, 8, 13, 1, 600, 375] {
            fill(9, at as u64, &mut pieces[at..at + len]);
            at += len;
        }
        assert_eq!(whole, pieces);
        assert_eq!(first_mismatch(9, 0, &whole), None);
        assert_eq!(first_mismatch(9, 5, &whole[5..]), None);
        let mut bad = whole.clone();
        bad[777] ^= 1;
        assert_eq!(first_mismatch(9, 0, &bad), Some(777));
        assert_eq!(first_mismatch(9, 700, &bad[700..]), Some(77));
        // Another seed, or the right bytes at the wrong offset, differ.
        assert!(first_mismatch(10, 0, &whole).is_some());
        assert!(first_mismatch(9, 1, &whole[..64]).is_some());
    }
}
