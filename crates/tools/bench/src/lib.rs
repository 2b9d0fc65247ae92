//! Benchmark suites. Each returns a report that prints as a table and
//! serializes to JSON; timings are medians of many runs, in TSC cycles and
//! microseconds (the machine has no hardware counters; docs/ARCHITECTURE.md,
//! "Rules the code keeps"). [`harness`] runs any suite [`suites`] lists;
//! [`testbed`] is what the throughput suites measure on.
#![forbid(unsafe_code)]

pub mod baseline;
pub mod cni;
pub mod faults;
pub mod flood;
pub mod forwarder;
pub mod harness;
pub mod hosted;
pub mod hostile_vm;
pub mod hv;
pub mod hvm;
pub mod isolation;
pub mod machine;
pub mod menon2005;
pub mod menon2006;
pub mod multihost;
pub mod netenv;
pub mod nstat;
pub mod opcount;
pub mod plot;
pub mod ram;
pub mod rng;
pub mod scale;
pub mod seeds;
pub mod sink;
pub mod soak;
pub mod stats;
pub mod suites;
pub mod testbed;
pub mod usernet;
pub mod vifopts;
pub mod virtio;

use anyhow::{bail, Context};
use std::path::Path;

/// A suite's progress lines on stderr, each stamped with the seconds
/// since the suite started: `[suite   12.3 s] what`.
pub(crate) struct Progress {
    suite: &'static str,
    on: bool,
    started: std::time::Instant,
}

impl Progress {
    /// Starts the clock; with `on` false, `say` prints nothing.
    pub(crate) fn start(suite: &'static str, on: bool) -> Progress {
        Progress {
            suite,
            on,
            started: std::time::Instant::now(),
        }
    }

    pub(crate) fn say(&self, what: &str) {
        if self.on {
            eprintln!("[{} {:>5.1} s] {what}", self.suite, self.seconds());
        }
    }

    /// Seconds since the suite started.
    pub(crate) fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

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
    splitnet_on(exe, run_dir, args, None)
}

/// What `splitnet status --json` says of the instance in `run_dir`; an
/// empty document where it says nothing (hv is gone, or its answer does
/// not parse).
pub(crate) fn status_json(exe: &Path, run_dir: &Path) -> serde_json::Value {
    splitnet(exe, run_dir, &["status", "--json"])
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// [`splitnet`] pinned to core `cpu` when given: every process it starts
/// (hv, and the domains hv starts) inherits the core.
pub fn splitnet_on(
    exe: &Path,
    run_dir: &Path,
    args: &[&str],
    cpu: Option<usize>,
) -> anyhow::Result<String> {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--run-dir").arg(run_dir).args(args);
    if let Some(c) = cpu {
        sys::pin_on_exec(&mut cmd, c).with_context(|| format!("pinning splitnet to core {c}"))?;
    }
    stdout_of(&mut cmd, &format!("splitnet {}", args.join(" ")))
}

/// What `cmd` printed; fails, naming it `what` and with its error output,
/// unless it exits 0.
pub(crate) fn stdout_of(cmd: &mut std::process::Command, what: &str) -> anyhow::Result<String> {
    let o = cmd.output().with_context(|| format!("running {what}"))?;
    if !o.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
