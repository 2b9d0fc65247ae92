//! Benchmark suites. Each returns a report that prints as a table and
//! serializes to JSON; timings are medians of many runs, in TSC cycles and
//! microseconds (the machine has no hardware counters; docs/ARCHITECTURE.md,
//! "Rules the code keeps").
#![forbid(unsafe_code)]

pub mod baseline;
pub mod faults;
pub mod flood;
pub mod forwarder;
pub mod hosted;
pub mod hostile_vm;
pub mod hv;
pub mod hvm;
pub mod isolation;
pub mod menon2005;
pub mod menon2006;
pub mod multihost;
pub mod netenv;
pub mod plot;
pub mod ram;
pub mod scale;
pub mod seeds;
pub mod sink;
pub mod stats;
pub mod usernet;
pub mod vifopts;
pub mod virtio;

use anyhow::{bail, Context};
use std::path::Path;

/// The member of `all` whose `name` is `s`, or an error naming them all.
pub fn by_name<T: Copy>(all: &[T], name: fn(T) -> &'static str, s: &str) -> anyhow::Result<T> {
    all.iter().copied().find(|&c| name(c) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&c| name(c)).collect();
        anyhow::anyhow!("no configuration {s:?}; the suite has {}", names.join(", "))
    })
}

/// Runs `exe --run-dir RUN_DIR ARGS` (splitnet itself); its stdout, or an
/// error with its stderr.
pub fn splitnet(exe: &Path, run_dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let o = std::process::Command::new(exe)
        .arg("--run-dir")
        .arg(run_dir)
        .args(args)
        .output()
        .with_context(|| format!("running splitnet {}", args.join(" ")))?;
    if !o.status.success() {
        bail!(
            "splitnet {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
