//! The trusted computing base stays small: `splitnet-hv`'s dependency tree
//! holds no TUI, charting, bench or profiler crate, and no crate but `sys`
//! may hold `unsafe` code.
//!
//! This test is also why `cargo test --workspace` builds the `splitnet-hv`
//! binary into `target/<profile>/` before the CLI's end-to-end tests run:
//! Cargo builds a package's binaries for its integration tests.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Every package in `splitnet-hv`'s normal dependency tree, by name.
fn hv_tree() -> Vec<String> {
    testutil::normal_tree(&workspace(), "splitnet-hvd")
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
        "splitnet-netfront",
        "splitnet-driver-domain",
        "splitnet-frame",
        "splitnet-domain-common",
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

/// The crate roots (`src/lib.rs`, `src/main.rs`) of every package under
/// `crates/`.
fn crate_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for group in std::fs::read_dir(workspace().join("crates")).unwrap() {
        for pkg in std::fs::read_dir(group.unwrap().path()).unwrap() {
            for root in ["src/lib.rs", "src/main.rs"] {
                let p = pkg.as_ref().unwrap().path().join(root);
                if p.is_file() {
                    roots.push(p);
                }
            }
        }
    }
    roots
}

#[test]
fn unsafe_code_only_in_sys() {
    let roots = crate_roots();
    assert!(roots.len() > 15, "{roots:?}");
    for r in roots {
        let text = std::fs::read_to_string(&r).unwrap();
        if r.ends_with("trusted/sys/src/lib.rs") {
            assert!(
                text.contains("#![deny(clippy::undocumented_unsafe_blocks)]"),
                "{}: sys must deny undocumented unsafe blocks",
                r.display()
            );
        } else {
            assert!(
                text.contains("#![forbid(unsafe_code)]"),
                "{}: every crate but sys forbids unsafe code",
                r.display()
            );
        }
    }
}

/// Every Rust file outside `sys`, tests and examples included, must be free
/// of `unsafe` blocks, functions and impls (a test file is a crate of its
/// own, which the crate roots' `forbid` does not cover).
#[test]
fn no_unsafe_outside_sys() {
    let kw = ["unsafe", " {"].concat();
    let kinds = [
        kw.clone(),
        ["unsafe", " fn "].concat(),
        ["unsafe", " impl"].concat(),
    ];
    let mut found = Vec::new();
    let mut stack = vec![workspace().join("crates")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.ends_with("trusted/sys") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("");
                    if kinds.iter().any(|k| code.contains(k.as_str())) {
                        found.push(format!("{}:{}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "unsafe code outside sys: {found:?}");
}
