//! The heap's figures follow what the process allocates and frees. No test
//! harness: one thread, so nothing else allocates between two readings.

use splitnet_sys::{heap_use, trim_heap};
use std::hint::black_box;

fn main() {
    let before = heap_use();
    // Below glibc's threshold for mapping a block on its own, so it comes
    // from the arena.
    let block = black_box(vec![7u8; 100 << 10]);
    let live = heap_use();
    assert!(
        live.in_use >= before.in_use + (100 << 10),
        "{before:?} then {live:?}"
    );
    // A smaller block after it keeps it from being the heap's top.
    let after_it = black_box(Box::new([1u8; 64]));
    drop(block);
    let freed = heap_use();
    assert!(freed.free >= 100 << 10, "{freed:?}");
    assert!(
        freed.in_use + (100 << 10) <= live.in_use + 4096,
        "{freed:?}"
    );
    // Trimming gives pages back, not blocks: what lives is untouched.
    trim_heap();
    assert_eq!(heap_use().in_use, freed.in_use);
    assert_eq!(black_box(&after_it)[63], 1);
    println!("heap: a live block counted in use, then free; a trim left what lives");
}
