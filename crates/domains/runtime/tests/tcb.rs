//! `splitnet-domain`, the binary every domain process runs, links the
//! domains' code only: no hv, toolstack, store, bench, profiler, command
//! line or TUI crate. A jailed guest carries nothing of the hypervisor's.
//!
//! This test is also why `cargo test --workspace` builds `splitnet-domain`
//! into `target/<profile>/` before the CLI's end-to-end tests start
//! domains: Cargo builds a package's binaries for its integration tests.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Every package in `splitnet-domain`'s normal dependency tree, by name.
fn domain_tree() -> Vec<String> {
    testutil::normal_tree(&workspace(), "splitnet-runtime")
}

#[test]
fn the_domain_binary_links_no_hypervisor_toolstack_or_tool_crate() {
    let tree = domain_tree();
    for want in [
        "splitnet-netfront",
        "splitnet-driver-domain",
        "splitnet-frame",
    ] {
        assert!(tree.iter().any(|n| n == want), "{want} missing: {tree:?}");
    }
    let banned = [
        "splitnet-hv",
        "splitnet-hvd",
        "splitnet-toolstack",
        "splitnet-store",
        "splitnet",
        "splitnet-bench",
        "splitnet-prof",
        "clap",
        "ratatui",
        "crossterm",
        "plotters",
    ];
    let found: Vec<&String> = tree
        .iter()
        .filter(|n| banned.contains(&n.as_str()))
        .collect();
    assert!(
        found.is_empty(),
        "splitnet-domain's dependency tree holds {found:?}; a domain must not link them"
    );
    println!(
        "splitnet-domain links {} packages: {}",
        tree.len(),
        tree.join(" ")
    );
}

#[test]
fn the_domain_binary_refuses_a_command_line_it_does_not_know() {
    let out = Command::new(env!("CARGO_BIN_EXE_splitnet-domain"))
        .args(["vmapp", "--guest", "g1", "--bogus", "1"])
        .output()
        .expect("running splitnet-domain");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown option \"--bogus\""), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_splitnet-domain"))
        .env_remove("SPLITNET_HV_FD")
        .output()
        .expect("running splitnet-domain");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("started by hv, not by hand"), "{err}");
}
