//! `splitnet profile`: system-wide sampling attributed to domains, functions
//! and cost classes (Menon 2005, Xenoprof). This command is the session's
//! initiator; the domains it names take part as active or passive.

use anyhow::{anyhow, bail, Result};
use hv::Toolstack;
use prof::{HwEvent, ProfileOptions, Roles};
use std::path::Path;
use std::time::Duration;
use toolstack::daemon::socket_path;

/// What `splitnet profile` was asked for.
pub struct ProfileArgs<'a> {
    pub duration: f64,
    pub json: Option<&'a Path>,
    pub svg: Option<&'a Path>,
    /// Only these domains are active (resolved to functions).
    pub active: &'a [String],
    /// These domains are passive (counted in aggregate only).
    pub passive: &'a [String],
    pub sampling: Sampling<'a>,
    pub cmd: &'a [String],
}

/// How `splitnet profile` samples.
pub struct Sampling<'a> {
    /// Clock samples per second per CPU.
    pub frequency: u64,
    /// Hardware events by name.
    pub events: &'a [String],
    /// Events per sample.
    pub event_period: u64,
    /// Walk call chains.
    pub callchains: bool,
}

/// The hardware events named on the command line.
fn events(names: &[String]) -> Result<Vec<HwEvent>> {
    names
        .iter()
        .map(|n| {
            HwEvent::parse(n).ok_or_else(|| {
                let known: Vec<&str> = HwEvent::ALL.iter().map(|e| e.name()).collect();
                anyhow!("no event named {n:?}; the events are {}", known.join(", "))
            })
        })
        .collect()
}

/// The running system's hv pid and domain names, if one is up.
fn running_system(rd: &Path) -> Option<(i32, Vec<String>)> {
    let mut ts = Toolstack::connect(&socket_path(rd)).ok()?;
    let s = ts.status().ok()?;
    let names = s.domains.iter().map(|d| d.name.clone()).collect();
    Some((s.hv_pid as i32, names))
}

/// Checks the participants against the running domains.
fn roles(args: &ProfileArgs<'_>, domains: Option<&[String]>) -> Result<Roles> {
    let roles = Roles {
        active: (!args.active.is_empty()).then(|| args.active.iter().cloned().collect()),
        passive: args.passive.iter().cloned().collect(),
    };
    roles.validate().map_err(|e| anyhow!(e))?;
    let named: Vec<&String> = roles.named().collect();
    if named.is_empty() {
        return Ok(roles);
    }
    let Some(domains) = domains else {
        bail!("--active and --passive name domains, but no splitnet system is running (start one with `splitnet up`)");
    };
    for n in named {
        if !domains.contains(n) {
            bail!(
                "no domain named {n:?}; the running domains are {}",
                domains.join(", ")
            );
        }
    }
    Ok(roles)
}

/// Profiles for `duration`, or for as long as `cmd` runs when one is given.
pub fn run(rd: &Path, args: &ProfileArgs<'_>) -> Result<()> {
    let system = running_system(rd);
    if system.is_none() {
        eprintln!("splitnet profile: hv is not running; samples go to host processes and idle");
    }
    let roles = roles(args, system.as_ref().map(|s| s.1.as_slice()))?;
    let s = &args.sampling;
    if s.frequency == 0 || s.event_period == 0 {
        bail!("--frequency and --event-period must be at least 1");
    }
    let opts = ProfileOptions {
        hv_pid: system.as_ref().map(|s| s.0),
        netns_prefix: toolstack::host::prefix(),
        roles,
        initiator: "splitnet profile".into(),
        frequency_hz: s.frequency,
        events: events(s.events)?,
        event_period: s.event_period,
        callchains: s.callchains,
        ..Default::default()
    };
    eprintln!("splitnet profile: sampling every CPU");
    let limit = Duration::from_secs_f64(args.duration.max(0.1));
    let (ran, p) = prof::profile_while(opts, || {
        crate::run_or_wait(args.cmd, limit, Duration::from_millis(50), |_| {})
    })
    .map_err(|e| anyhow!("starting the profiler: {e}"))?;
    ran?;
    println!("{}", p.to_text());
    if let Some(path) = args.json {
        crate::write_file(path, &p.to_json())?;
    }
    if let Some(path) = args.svg {
        crate::write_file(path, &p.to_svg())?;
    }
    Ok(())
}
