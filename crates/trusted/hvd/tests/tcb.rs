//! The trusted computing base stays small: `splitnet-hv`'s dependency tree
//! holds no TUI, charting, bench or profiler crate.
//!
//! This test is also why `cargo test --workspace` builds the `splitnet-hv`
//! binary into `target/<profile>/` before the CLI's end-to-end tests run:
//! Cargo builds a package's binaries for its integration tests.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Every package in the normal (non-dev, non-build) dependency tree of the
/// `splitnet-hv` binary, by name.
fn hv_tree() -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args(["tree", "--offline", "-p", "splitnet-hvd", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn hv_links_no_tui_charting_bench_or_profiler() {
    let tree = hv_tree();
    assert!(tree.iter().any(|n| n == "splitnet-hv"), "{tree:?}");
    let banned: Vec<&String> = tree
        .iter()
        .filter(|n| {
            ["tui", "plot", "bench", "prof"]
                .iter()
                .any(|w| n.contains(w))
        })
        .collect();
    assert!(
        banned.is_empty(),
        "splitnet-hv's dependency tree holds {banned:?}; the trusted binary must not link them"
    );
    // Nor the domains' code or the device models.
    for n in [
        "splitnet-net",
        "splitnet-runtime",
        "splitnet-emul",
        "splitnet-hosted",
        "splitnet-hvm",
    ] {
        assert!(!tree.iter().any(|t| t == n), "splitnet-hv links {n}");
    }
    println!(
        "splitnet-hv links {} packages: {}",
        tree.len(),
        tree.join(" ")
    );
}
