//! What a package links: the tests that keep a binary's dependency tree
//! small (`splitnet-hv`'s, `splitnet-domain`'s) ask Cargo, not a list.

use std::path::Path;
use std::process::Command;

/// Every package in the normal (non-dev, non-build) dependency tree of
/// workspace package `package`, by name, sorted and once each. `workspace`
/// is the workspace's root.
pub fn normal_tree(workspace: &Path, package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace)
        .args(["tree", "--offline", "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
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
