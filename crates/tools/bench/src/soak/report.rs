//! The soak's report and its rules. The run fails (a non-zero exit) on
//! any corrupted byte anywhere, on a lost byte or broken connection of a
//! flow whose ends were not killed, on a failed download or hot-plug that
//! no driver-domain fault explains, and on any leak. A failure that a
//! stall of the host beneath this machine explains (`machine`: every core
//! stolen for seconds) is the host's, and is counted apart. Two targets are
//! judged and reported beside: the longest gap of any flow across a
//! driver-domain kill, and the others' throughput while a hostile peer
//! is active against the quiet spells'.

use super::churn::{Churn, Downloads};
use super::events::{Event, Window};
use super::flows::{Kind, Running};
use super::machine::MachineRecord;
use super::progress::{Failure, Summary};
use super::stalls::StallDump;
use super::status_diff::moved;
use crate::faults::Resources;
use crate::stats::median;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Target: the longest gap of a flow across a driver-domain kill, ms.
pub const KILL_GAP_MS: f64 = 100.0;
/// The shortest pause in a flow the soak sees ([`KillGap::gaps`]).
pub const PAUSE_SEEN_MS: f64 = super::progress::GAP.as_millis() as f64;
/// Target: the others' throughput while a hostile peer is active, as a
/// share of their quiet throughput.
pub const HOSTILE_SHARE: f64 = 0.8;
/// A failure this long after the kill of a flow's end is the kill's.
const KILL_SHADOW_S: f64 = 30.0;
/// A quiet spell's first second is the last event's recovery.
const SETTLE_S: f64 = 1.0;
/// A failure is seen this long after what caused it, at most: a flow
/// gives up after 20 s without progress, an attach after 10 s, twice.
const NOTICED_WITHIN_S: f64 = 25.0;

/// One flow's record, taken when the soak ends.
pub struct FlowInput {
    pub name: String,
    pub kind: Kind,
    pub client: String,
    pub server: String,
    pub sent: u64,
    pub summary: Summary,
}

impl FlowInput {
    pub fn of(f: &Running, end: Instant) -> FlowInput {
        FlowInput {
            name: f.spec.name.clone(),
            kind: f.spec.kind,
            client: f.spec.client.clone(),
            server: f.spec.server.clone(),
            sent: f.sent.load(Ordering::Relaxed),
            summary: f.progress.summary(end),
        }
    }

    fn touches(&self, domain: &str) -> bool {
        self.client == domain || self.server == domain
    }
}

/// Everything the soak gathered.
pub struct Inputs {
    pub seed: u64,
    pub minutes: f64,
    pub seconds: f64,
    pub flows: Vec<FlowInput>,
    pub windows: Vec<Window>,
    pub quiet: Vec<(f64, f64)>,
    pub churn: Churn,
    pub downloads: Downloads,
    pub before: Resources,
    pub after: Resources,
    pub namespaces_before: Vec<String>,
    pub namespaces_after: Vec<String>,
    pub status_before: Value,
    pub status_after: Value,
    /// What the real-time probe saw of the machine.
    pub machine: MachineRecord,
    /// Where the tasks waited when a flow stopped for long.
    pub stall_dumps: Vec<StallDump>,
}

/// One flow's line of the report.
#[derive(Debug, Serialize)]
pub struct FlowReport {
    pub name: String,
    pub kind: &'static str,
    /// TCP (a lost byte fails the run) rather than UDP (loss is counted).
    pub tcp: bool,
    pub path: String,
    pub sent: u64,
    pub verified: u64,
    /// Sent and never delivered (TCP: bytes of broken connections; UDP:
    /// datagrams lost).
    pub lost: u64,
    pub corrupt: usize,
    pub failures: Vec<Failure>,
    /// Failures inside the shadow of a kill of one of its ends.
    pub excused: usize,
    /// Other failures that a host stall explains.
    pub hosts: usize,
    pub longest_gap_ms: f64,
    /// The longest gap that no SIGSTOP (of the driver domain or of one of
    /// its ends) and no host stall explains, and when it began.
    pub longest_unstopped_gap_ms: f64,
    pub longest_unstopped_gap_at_s: Option<f64>,
    /// Its pace, and what it carried in the quiet spells (median), Mbit/s.
    pub pace_mbps: f64,
    pub quiet_mbps: Option<f64>,
    /// Its bytes per 100 ms bin, for the chart.
    #[serde(skip)]
    pub summary: Summary,
}

/// One driver-domain kill, or upgrade: the longest gap any flow saw
/// across it.
#[derive(Debug, Serialize)]
pub struct KillGap {
    pub at_s: f64,
    pub longest_gap_ms: f64,
    pub flow: String,
    pub met: bool,
    /// Each flow's gap across it, ms (0: none of [`PAUSE_SEEN_MS`] or more).
    pub gaps: BTreeMap<String, f64>,
}

/// One hostile peer: each other flow's throughput in its windows over
/// the flow's median quiet throughput.
#[derive(Debug, Serialize)]
pub struct HostileCost {
    pub event: String,
    pub windows: usize,
    pub seconds: f64,
    pub shares: BTreeMap<String, f64>,
    pub lowest: f64,
    pub met: bool,
    /// The machine's idle share over the peer's windows (the quiet
    /// spells': [`SoakReport::quiet_idle`]): a shortfall with nothing idle
    /// is CPU the peer itself burned, not work it made splitnet do.
    pub idle: Option<f64>,
}

/// The soak's report.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub seed: u64,
    pub minutes: f64,
    pub seconds: f64,
    pub flows: Vec<FlowReport>,
    pub events: Vec<Window>,
    pub kill_gaps: Vec<KillGap>,
    /// The same across each driver-domain upgrade in place (met: no flow
    /// paused [`PAUSE_SEEN_MS`] or more, but for the flows through a
    /// vhost-user NIC, which reconnects; their pauses are listed).
    pub upgrade_gaps: Vec<KillGap>,
    pub hostile: Vec<HostileCost>,
    pub churn: Churn,
    /// Churn failures no driver-domain fault or host stall explains.
    pub churn_unexplained: usize,
    /// What the real-time probe saw of the machine.
    pub machine: MachineRecord,
    /// The machine's idle share over the quiet spells (each less its
    /// first second).
    pub quiet_idle: Option<f64>,
    /// Where the tasks waited when a flow stopped for long.
    pub stall_dumps: Vec<StallDump>,
    pub downloads: Downloads,
    pub before: Resources,
    pub after: Resources,
    /// hv's resident memory after the first round of events, KiB: the
    /// end may exceed it by at most 1 MiB (None: no round was whole, and
    /// memory is not judged).
    pub rss_reference_kib: Option<u64>,
    pub leaked: Vec<String>,
    pub namespaces_before: usize,
    pub namespaces_after: usize,
    /// Every number in `status --json` that moved: (path, before, after).
    pub counters_moved: Vec<(String, f64, f64)>,
}

impl SoakReport {
    pub fn new(i: Inputs) -> SoakReport {
        let flows: Vec<FlowReport> = i
            .flows
            .iter()
            .map(|f| flow_report(f, &i.windows, &i.quiet, &i.machine))
            .collect();
        let (rss_reference_kib, leaked) = leaks(&i);
        let churn_unexplained = churn_unexplained(&i);
        SoakReport {
            seed: i.seed,
            minutes: i.minutes,
            seconds: i.seconds,
            kill_gaps: gaps_across(Event::KillDriver, KILL_GAP_MS, &i.windows, &i.flows, |_| {
                true
            }),
            upgrade_gaps: gaps_across(Event::UpgradeDriver, 0.0, &i.windows, &i.flows, |f| {
                !super::VHOST_USER.iter().any(|d| f.touches(d))
            }),
            hostile: hostile_costs(&i.windows, &i.quiet, &i.flows, &i.machine),
            quiet_idle: i.machine.idle_in(&settled_quiet(&i.quiet)),
            flows,
            events: i.windows,
            churn: i.churn,
            churn_unexplained,
            machine: i.machine,
            stall_dumps: i.stall_dumps,
            downloads: i.downloads,
            before: i.before,
            after: i.after,
            rss_reference_kib,
            leaked,
            namespaces_before: i.namespaces_before.len(),
            namespaces_after: i.namespaces_after.len(),
            counters_moved: moved(&i.status_before, &i.status_after),
        }
    }

    /// `Err` with every reason the soak failed; `Ok` when none did.
    pub fn verdict(&self) -> std::result::Result<(), String> {
        let mut why = Vec::new();
        for f in &self.flows {
            if f.corrupt > 0 {
                why.push(format!("{}: {} corrupted", f.name, f.corrupt));
            }
            let judged = f.failures.len() - f.excused - f.hosts - f.corrupt;
            if judged > 0 {
                why.push(format!(
                    "{}: {judged} failures no kill or host stall explains",
                    f.name
                ));
            }
            if f.tcp && f.excused + f.hosts == 0 && f.lost > 0 {
                why.push(format!("{}: {} bytes lost", f.name, f.lost));
            }
        }
        for w in &self.events {
            if let Some(e) = &w.error {
                why.push(format!("{} at {:.1} s failed: {e}", w.name, w.start_s));
            }
        }
        let d = &self.downloads;
        if !d.corrupt.is_empty() || !d.failures.is_empty() {
            let first = d.corrupt.iter().chain(&d.failures).next();
            let first = first.map_or(String::new(), |x| {
                format!(" (the first, started at {:.1} s: {})", x.at_s, x.what)
            });
            why.push(format!(
                "downloads: {} corrupted, {} failed{first}",
                d.corrupt.len(),
                d.failures.len()
            ));
        }
        if self.churn_unexplained > 0 {
            why.push(format!("hot-plug: {} failures", self.churn_unexplained));
        }
        if !self.leaked.is_empty() {
            why.push(format!("leaked: {}", self.leaked.join(", ")));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(format!("bench soak failed: {}", why.join("; ")))
        }
    }
}

/// What did not come back: hv's counts against the start, exactly; its
/// resident memory against its size after the first round of events
/// (memory grows on each event's first use, a leak keeps growing), not
/// judged when no round was whole; the namespaces. Returns the memory
/// reference and the leaks.
fn leaks(i: &Inputs) -> (Option<u64>, Vec<String>) {
    let rss_reference = i
        .windows
        .get(Event::all().len() - 1)
        .map(|w| w.hv_rss_kib.max(i.before.hv_rss_kib));
    let reference = Resources {
        hv_rss_kib: rss_reference.unwrap_or(u64::MAX - (1 << 20)),
        ..i.before.clone()
    };
    let mut leaked: Vec<String> = reference
        .leaked(&i.after)
        .into_iter()
        .map(|name| match name {
            "store nodes" => format!("store nodes ({})", reference.store_change(&i.after)),
            _ => name.to_string(),
        })
        .collect();
    if i.namespaces_before != i.namespaces_after {
        leaked.push(format!(
            "namespaces: {:?} before, {:?} after",
            i.namespaces_before, i.namespaces_after
        ));
    }
    (rss_reference, leaked)
}

/// Hot-plug failures outside a driver-domain kill or stop (from 2 s
/// before it to 25 s after: an attach waits up to 10 s, twice) and
/// outside a host stall.
fn churn_unexplained(i: &Inputs) -> usize {
    let drv: Vec<f64> = windows_where(&i.windows, |e| {
        e.kills() == Some("drv") || e.stops() == Some("drv")
    })
    .map(|w| w.start_s)
    .collect();
    i.churn
        .failures
        .iter()
        .filter(|f| !drv.iter().any(|&t| (t - 2.0..t + 25.0).contains(&f.at_s)))
        .filter(|f| !i.machine.host_stalled(f.at_s - NOTICED_WITHIN_S, f.at_s))
        .count()
}

/// When `hit` events happened: their windows.
fn windows_where<'a>(
    windows: &'a [Window],
    hit: impl Fn(&Event) -> bool + 'a,
) -> impl Iterator<Item = &'a Window> {
    windows.iter().filter(move |w| hit(&w.event))
}

/// The quiet spells, each less its first second.
fn settled_quiet(quiet: &[(f64, f64)]) -> Vec<(f64, f64)> {
    quiet.iter().map(|&(a, b)| (a + SETTLE_S, b)).collect()
}

/// A flow's median rate over the quiet spells (each less its first
/// second), bytes a second.
fn quiet_rate(f: &FlowInput, quiet: &[(f64, f64)]) -> Option<f64> {
    let rates: Vec<f64> = quiet
        .iter()
        .filter_map(|&(a, b)| f.summary.rate_in(a + SETTLE_S, b))
        .collect();
    (!rates.is_empty()).then(|| median(&rates))
}

fn flow_report(
    f: &FlowInput,
    windows: &[Window],
    quiet: &[(f64, f64)],
    machine: &MachineRecord,
) -> FlowReport {
    let s = &f.summary;
    let end = |d: &str| d != "drv" && d != "wire" && f.touches(d);
    let kills: Vec<f64> = windows_where(windows, |e| e.kills().is_some_and(end))
        .map(|w| w.start_s)
        .collect();
    let killed = |x: &&Failure| {
        kills
            .iter()
            .any(|&t| (t - 1.0..t + KILL_SHADOW_S).contains(&x.at_s))
    };
    let excused = s
        .failures
        .iter()
        .filter(|x| !x.corrupt)
        .filter(killed)
        .count();
    let hosts = s
        .failures
        .iter()
        .filter(|x| !x.corrupt && !killed(x))
        .filter(|x| machine.host_stalled(x.at_s - NOTICED_WITHIN_S, x.at_s))
        .count();
    let stops: Vec<&Window> =
        windows_where(windows, |e| e.stops().is_some_and(|d| d == "drv" || end(d))).collect();
    let unstopped = s
        .gaps
        .iter()
        .filter(|g| {
            !stops
                .iter()
                .any(|w| g.start_s <= w.end_s + SETTLE_S && g.start_s + g.ms / 1e3 >= w.start_s)
        })
        .filter(|g| !machine.host_stalled(g.start_s, g.start_s + g.ms / 1e3))
        .max_by(|a, b| a.ms.total_cmp(&b.ms));
    FlowReport {
        name: f.name.clone(),
        kind: f.kind.name(),
        tcp: !f.kind.udp(),
        path: format!("{} → {}", f.client, f.server),
        sent: f.sent,
        verified: s.verified,
        lost: f.sent.saturating_sub(s.verified),
        corrupt: s.failures.iter().filter(|x| x.corrupt).count(),
        failures: s.failures.clone(),
        excused,
        hosts,
        longest_gap_ms: s.longest_gap_ms(),
        longest_unstopped_gap_ms: unstopped.map_or(0.0, |g| g.ms),
        longest_unstopped_gap_at_s: unstopped.map(|g| g.start_s),
        pace_mbps: f.kind.mbps(),
        quiet_mbps: quiet_rate(f, quiet).map(|r| r * 8.0 / 1e6),
        summary: s.clone(),
    }
}

/// The longest gap of any flow across each `event` (a driver-domain kill
/// or upgrade), met when at most `limit_ms`; only the flows `judged` count
/// toward it, every flow is listed.
fn gaps_across(
    event: Event,
    limit_ms: f64,
    windows: &[Window],
    flows: &[FlowInput],
    judged: impl Fn(&FlowInput) -> bool,
) -> Vec<KillGap> {
    windows
        .iter()
        .filter(|w| w.event == event)
        .map(|w| {
            let gap = |f: &FlowInput| f.summary.gap_near(w.start_s, w.end_s - w.start_s);
            let gaps: BTreeMap<String, f64> =
                flows.iter().map(|f| (f.name.clone(), gap(f))).collect();
            let (flow, gap) = flows
                .iter()
                .filter(|f| judged(f))
                .map(|f| (f.name.clone(), gap(f)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((String::new(), 0.0));
            KillGap {
                at_s: w.start_s,
                longest_gap_ms: gap,
                flow,
                met: gap <= limit_ms,
                gaps,
            }
        })
        .collect()
}

/// `f`'s rate over the windows `ws` (those with a whole bin, weighted by
/// their lengths) over its median quiet rate.
fn share(f: &FlowInput, ws: &[&Window], quiet: &[(f64, f64)]) -> Option<f64> {
    let q = quiet_rate(f, quiet).filter(|q| *q > 0.0)?;
    let (mut bytes, mut secs) = (0.0, 0.0);
    for w in ws {
        if let Some(r) = f.summary.rate_in(w.start_s, w.end_s) {
            bytes += r * (w.end_s - w.start_s);
            secs += w.end_s - w.start_s;
        }
    }
    (secs > 0.0).then(|| bytes / secs / q)
}

/// Each hostile peer's cost to the flows that do not touch it: a flow's
/// rate over all the peer's windows (weighted by their lengths) over its
/// median quiet rate.
fn hostile_costs(
    windows: &[Window],
    quiet: &[(f64, f64)],
    flows: &[FlowInput],
    machine: &MachineRecord,
) -> Vec<HostileCost> {
    let mut by_peer: BTreeMap<&str, Vec<&Window>> = BTreeMap::new();
    for w in windows.iter().filter(|w| w.event.hostile()) {
        by_peer.entry(w.name.as_str()).or_default().push(w);
    }
    by_peer
        .into_iter()
        .map(|(name, ws)| {
            let peer = ws[0].event.stops().unwrap_or(crate::testbed::VM);
            let seconds: f64 = ws.iter().map(|w| w.end_s - w.start_s).sum();
            let shares: BTreeMap<String, f64> = flows
                .iter()
                .filter(|f| !f.touches(peer))
                .filter_map(|f| Some((f.name.clone(), share(f, &ws, quiet)?)))
                .collect();
            let lowest = shares.values().copied().fold(f64::INFINITY, f64::min);
            let spans: Vec<(f64, f64)> = ws.iter().map(|w| (w.start_s, w.end_s)).collect();
            HostileCost {
                idle: machine.idle_in(&spans),
                event: name.to_string(),
                windows: ws.len(),
                seconds,
                lowest: if lowest.is_finite() { lowest } else { 0.0 },
                met: lowest.is_finite() && lowest >= HOSTILE_SHARE,
                shares,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
