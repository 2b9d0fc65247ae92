//! Replays the `nic_ports` fuzz corpus (`fuzz/corpus/nic_ports/`) on the
//! stable toolchain, so every input the fuzzer kept stays a passing test.

use std::path::Path;

#[test]
fn every_nic_ports_corpus_input_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../fuzz/corpus/nic_ports");
    let mut total = splitnet_emul::NicStats::default();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let run = std::panic::AssertUnwindSafe(|| splitnet_emul::fuzz::run(&data));
        let s = std::panic::catch_unwind(run)
            .unwrap_or_else(|_| panic!("{} fails nic_ports", path.display()));
        total.tx_frames += s.tx_frames;
        total.rx_frames += s.rx_frames;
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
    // The seeds bring the NIC up and move frames both ways.
    assert!(total.tx_frames > 0 && total.rx_frames > 0, "{total:?}");
}
