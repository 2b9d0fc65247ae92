//! `splitnet profile`: system-wide sampling attributed to domains, functions
//! and cost classes (Menon 2005, Xenoprof).

use anyhow::{anyhow, Context, Result};
use prof::{ProfileOptions, Session};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Profiles for `duration`, or for as long as `cmd` runs when one is given.
pub fn run(
    rd: &Path,
    duration: f64,
    json: Option<&Path>,
    svg: Option<&Path>,
    cmd: &[String],
) -> Result<()> {
    let hv_pid = std::fs::read_to_string(rd.join("hv.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if hv_pid.is_none() {
        eprintln!("splitnet profile: hv is not running; samples go to host processes and idle");
    }
    let opts = ProfileOptions {
        hv_pid,
        ..Default::default()
    };
    let mut session = Session::start(opts).map_err(|e| anyhow!("starting the profiler: {e}"))?;
    eprintln!(
        "splitnet profile: sampling every CPU ({} clock)",
        session.clock()
    );
    let limit = Duration::from_secs_f64(duration.max(0.1));
    let start = Instant::now();
    let mut child = match cmd.split_first() {
        Some((prog, args)) => Some(
            Command::new(prog)
                .args(args)
                .spawn()
                .with_context(|| format!("running {prog}"))?,
        ),
        None => None,
    };
    loop {
        session.poll();
        if let Some(c) = child.as_mut() {
            if c.try_wait()?.is_some() {
                break;
            }
        } else if start.elapsed() >= limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let p = session.finish();
    println!("{}", p.to_text());
    if let Some(path) = json {
        crate::write_file(path, &p.to_json())?;
    }
    if let Some(path) = svg {
        crate::write_file(path, &p.to_svg())?;
    }
    Ok(())
}
