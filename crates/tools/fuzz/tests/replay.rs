//! Replays every checked-in corpus (`fuzz/corpus/<target>/`) through its
//! target, so `cargo test` on the stable toolchain keeps every input the
//! fuzzer ever found interesting passing. A crash found by fuzzing becomes a
//! file here, and so a test.

use std::path::Path;

#[test]
fn every_corpus_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in splitnet_fuzz::TARGETS {
        let dir = root.join(name);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target has a corpus)", dir.display()))
            .flatten()
            .collect();
        assert!(!entries.is_empty(), "{} is empty", dir.display());
        for e in entries {
            let data = std::fs::read(e.path()).unwrap();
            let run = std::panic::AssertUnwindSafe(|| target(&data));
            if std::panic::catch_unwind(run).is_err() {
                panic!("{} fails its target", e.path().display());
            }
            total += 1;
        }
    }
    eprintln!("replayed {total} corpus inputs");
}
