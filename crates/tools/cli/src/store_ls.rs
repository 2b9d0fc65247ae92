//! `splitnet store-ls`: the store under a path, one `path = "value"` line
//! per node, depth first (what `xenstore-ls -f` prints).

use anyhow::{anyhow, Result};
use hv::Toolstack;
use std::path::Path;

/// Prints every node under `path` of the running instance's store.
pub fn run(rd: &Path, path: &str) -> Result<()> {
    let sock = toolstack::daemon::socket_path(rd);
    let mut ts = Toolstack::connect(&sock).map_err(|e| anyhow!("{e}"))?;
    let mut out = String::new();
    walk(&mut ts, path.trim_end_matches('/'), &mut out)?;
    print!("{out}");
    Ok(())
}

/// Appends `node` (unless it is the root) and everything under it.
fn walk(ts: &mut Toolstack, node: &str, out: &mut String) -> Result<()> {
    if !node.is_empty() {
        let value = ts.store_read(node).unwrap_or_default();
        out.push_str(&format!("{node} = {value:?}\n"));
    }
    let at = if node.is_empty() { "/" } else { node };
    let children = ts
        .store_directory(at)
        .map_err(|e| anyhow!("store-ls {at}: {e}"))?;
    for c in children {
        walk(ts, &format!("{node}/{c}"), out)?;
    }
    Ok(())
}
