//! `splitnet store-ls`: the store under a path, one `path = "value"` line
//! per node, depth first (what `xenstore-ls -f` prints).

use anyhow::{anyhow, Result};
use hv::Toolstack;
use std::fmt::Write;
use std::path::Path;

/// Prints every node under `path` of the running instance's store.
pub fn run(rd: &Path, path: &str) -> Result<()> {
    let sock = toolstack::daemon::socket_path(rd);
    let mut ts = Toolstack::connect(&sock).map_err(|e| anyhow!("{e}"))?;
    let nodes = ts
        .store_tree(path)
        .map_err(|e| anyhow!("store-ls {path}: {e}"))?;
    let mut out = String::new();
    for (node, value) in nodes {
        let _ = writeln!(out, "{node} = {value:?}");
    }
    print!("{out}");
    Ok(())
}
