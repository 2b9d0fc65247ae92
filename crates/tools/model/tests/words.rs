//! The model memory's 16-bit words (the ring's and grant entries' width)
//! sit inside its 32-bit words: each half reads and swaps on its own.

use abi::SharedMemory;
use splitnet_model::{check, Flavor, LoomMemory};

#[test]
fn sixteen_bit_words_share_a_32_bit_word_without_touching_each_other() {
    check(|| {
        let m = LoomMemory::words(8, 8, Flavor::Fixed);
        m.store_u32(4, 0x2222_1111);
        assert_eq!((m.load_u16(4), m.load_u16(6)), (0x1111, 0x2222));
        assert_eq!(m.cmpxchg_u16(6, 0x2222, 0x3333), Ok(0x2222));
        assert_eq!(m.cmpxchg_u16(4, 0x9999, 0x4444), Err(0x1111));
        assert_eq!(m.load_u32(4), 0x3333_1111);
    });
}
