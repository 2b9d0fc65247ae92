//! The soak's report and its rules. The run fails (a non-zero exit) on
//! any corrupted byte anywhere, on a lost byte or broken connection of a
//! flow whose ends were not killed, on a failed download or hot-plug that
//! no driver-domain fault explains, and on any leak. Two targets are
//! judged and reported beside: the longest gap of any flow across a
//! driver-domain kill, and the others' throughput while a hostile peer
//! is active against the quiet spells'.

use super::churn::{Churn, Downloads};
use super::events::{Event, Window};
use super::flows::{Kind, Running};
use super::progress::{Failure, Summary};
use super::Lab;
use crate::faults::Resources;
use crate::plot::{self, Bar};
use crate::stats::median;
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Target: the longest gap of a flow across a driver-domain kill, ms.
pub const KILL_GAP_MS: f64 = 100.0;
/// Target: the others' throughput while a hostile peer is active, as a
/// share of their quiet throughput.
pub const HOSTILE_SHARE: f64 = 0.8;
/// A failure this long after the kill of a flow's end is the kill's.
const KILL_SHADOW_S: f64 = 30.0;
/// A quiet spell's first second is the last event's recovery.
const SETTLE_S: f64 = 1.0;

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
}

/// One flow's line of the report.
#[derive(Debug, Serialize)]
pub struct FlowReport {
    pub name: String,
    pub kind: &'static str,
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
    pub longest_gap_ms: f64,
    /// The longest gap that no SIGSTOP (of the driver domain or of one of
    /// its ends) explains.
    pub longest_unstopped_gap_ms: f64,
    /// Its pace, and what it carried in the quiet spells (median), Mbit/s.
    pub pace_mbps: f64,
    pub quiet_mbps: Option<f64>,
    /// Its bytes per 100 ms bin, for the chart.
    #[serde(skip)]
    pub summary: Summary,
}

/// One driver-domain kill: the longest gap any flow saw across it.
#[derive(Debug, Serialize)]
pub struct KillGap {
    pub at_s: f64,
    pub longest_gap_ms: f64,
    pub flow: String,
    pub met: bool,
    /// Each flow's gap across it, ms (0: none of 50 ms or more).
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
    pub hostile: Vec<HostileCost>,
    pub churn: Churn,
    /// Churn failures no driver-domain fault explains.
    pub churn_unexplained: usize,
    pub downloads: Downloads,
    pub before: Resources,
    pub after: Resources,
    /// hv's resident memory after the first round of events, KiB: the
    /// end may exceed it by at most 1 MiB.
    pub rss_reference_kib: u64,
    pub leaked: Vec<String>,
    pub namespaces_before: usize,
    pub namespaces_after: usize,
    /// Every number in `status --json` that moved: (path, before, after).
    pub counters_moved: Vec<(String, f64, f64)>,
}

impl SoakReport {
    pub fn new(i: Inputs) -> SoakReport {
        let at = |hit: &dyn Fn(&Event) -> bool| -> Vec<f64> {
            i.windows
                .iter()
                .filter(|w| hit(&w.event))
                .map(|w| w.start_s)
                .collect()
        };
        let flows: Vec<FlowReport> = i
            .flows
            .iter()
            .map(|f| flow_report(f, &i.windows, &i.quiet))
            .collect();
        // hv's resident memory grows on first use (each event's first
        // time); a leak keeps growing: the reference is after the first
        // round, when every event has run once.
        let rss_reference_kib = i
            .windows
            .get(Event::all().len() - 1)
            .map_or(0, |w| w.hv_rss_kib)
            .max(i.before.hv_rss_kib);
        let reference = Resources {
            hv_rss_kib: rss_reference_kib,
            ..i.before.clone()
        };
        let mut leaked: Vec<String> = reference
            .leaked(&i.after)
            .into_iter()
            .map(str::to_string)
            .collect();
        if i.namespaces_before != i.namespaces_after {
            leaked.push(format!(
                "namespaces: {:?} before, {:?} after",
                i.namespaces_before, i.namespaces_after
            ));
        }
        let drv_faults = at(&|e: &Event| e.kills() == Some("drv") || e.stops() == Some("drv"));
        let churn_unexplained = i
            .churn
            .failures
            .iter()
            .filter(|f| {
                !drv_faults
                    .iter()
                    .any(|&t| (t - 2.0..t + 25.0).contains(&f.at_s))
            })
            .count();
        SoakReport {
            seed: i.seed,
            minutes: i.minutes,
            seconds: i.seconds,
            kill_gaps: kill_gaps(&i.windows, &i.flows),
            hostile: hostile_costs(&i.windows, &i.quiet, &i.flows),
            flows,
            events: i.windows,
            churn: i.churn,
            churn_unexplained,
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
            let judged = f.failures.len() - f.excused - f.corrupt;
            if judged > 0 {
                why.push(format!("{}: {judged} failures no kill explains", f.name));
            }
            let tcp = !matches!(f.kind, "udp");
            if tcp && f.excused == 0 && f.lost > 0 {
                why.push(format!("{}: {} bytes lost", f.name, f.lost));
            }
        }
        let d = &self.downloads;
        if !d.corrupt.is_empty() || !d.failures.is_empty() {
            why.push(format!(
                "downloads: {} corrupted, {} failed",
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

/// When `hit` events happened: their windows.
fn windows_where<'a>(
    windows: &'a [Window],
    hit: impl Fn(&Event) -> bool + 'a,
) -> impl Iterator<Item = &'a Window> {
    windows.iter().filter(move |w| hit(&w.event))
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

fn flow_report(f: &FlowInput, windows: &[Window], quiet: &[(f64, f64)]) -> FlowReport {
    let s = &f.summary;
    let end = |d: &str| d != "drv" && d != "wire" && f.touches(d);
    let kills: Vec<f64> = windows_where(windows, |e| e.kills().is_some_and(end))
        .map(|w| w.start_s)
        .collect();
    let excused = s
        .failures
        .iter()
        .filter(|x| !x.corrupt)
        .filter(|x| {
            kills
                .iter()
                .any(|&t| (t - 1.0..t + KILL_SHADOW_S).contains(&x.at_s))
        })
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
        .map(|g| g.ms)
        .fold(0.0, f64::max);
    FlowReport {
        name: f.name.clone(),
        kind: f.kind.name(),
        path: format!("{} → {}", f.client, f.server),
        sent: f.sent,
        verified: s.verified,
        lost: f.sent.saturating_sub(s.verified),
        corrupt: s.failures.iter().filter(|x| x.corrupt).count(),
        failures: s.failures.clone(),
        excused,
        longest_gap_ms: s.longest_gap_ms(),
        longest_unstopped_gap_ms: unstopped,
        pace_mbps: f.kind.mbps(),
        quiet_mbps: quiet_rate(f, quiet).map(|r| r * 8.0 / 1e6),
        summary: s.clone(),
    }
}

/// The longest gap of any flow across each driver-domain kill.
fn kill_gaps(windows: &[Window], flows: &[FlowInput]) -> Vec<KillGap> {
    windows
        .iter()
        .filter(|w| w.event == Event::KillDriver)
        .map(|w| {
            let gaps: BTreeMap<String, f64> = flows
                .iter()
                .map(|f| {
                    let g = f.summary.gap_near(w.start_s, w.end_s - w.start_s);
                    (f.name.clone(), g)
                })
                .collect();
            let (flow, gap) = gaps
                .iter()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or((String::new(), 0.0), |(n, g)| (n.clone(), *g));
            KillGap {
                at_s: w.start_s,
                longest_gap_ms: gap,
                flow,
                met: gap <= KILL_GAP_MS,
                gaps,
            }
        })
        .collect()
}

/// Each hostile peer's cost to the flows that do not touch it: a flow's
/// rate over all the peer's windows (weighted by their lengths) over its
/// median quiet rate.
fn hostile_costs(
    windows: &[Window],
    quiet: &[(f64, f64)],
    flows: &[FlowInput],
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
                .filter_map(|f| {
                    let q = quiet_rate(f, quiet).filter(|q| *q > 0.0)?;
                    let bytes: f64 = ws
                        .iter()
                        .filter_map(|w| {
                            Some(f.summary.rate_in(w.start_s, w.end_s)? * (w.end_s - w.start_s))
                        })
                        .sum();
                    Some((f.name.clone(), bytes / seconds / q))
                })
                .collect();
            let lowest = shares.values().copied().fold(f64::INFINITY, f64::min);
            HostileCost {
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

/// The `splitnet-*` network namespaces that exist.
pub fn namespaces() -> Result<Vec<String>> {
    let prefix = toolstack::host::prefix();
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    Ok(v)
}

/// `splitnet status --json`.
pub fn status_json(lab: &Lab) -> Result<Value> {
    let mut c = std::process::Command::new(&lab.exe);
    c.arg("--run-dir")
        .arg(&lab.run_dir)
        .args(["status", "--json"]);
    Ok(serde_json::from_str(&crate::stdout_of(
        &mut c,
        "splitnet status --json",
    )?)?)
}

/// Every number of `v` by path, array elements by their `name` (a vif
/// by its guest and handle).
fn flatten(v: &Value, path: String, out: &mut BTreeMap<String, f64>) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.insert(path, x);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                flatten(x, format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let key = match (&x["name"], &x["guest"]) {
                    (Value::String(n), _) => n.clone(),
                    (_, Value::String(g)) => format!("{g}/{}", x["handle"]),
                    _ => i.to_string(),
                };
                flatten(x, format!("{path}[{key}]"), out);
            }
        }
        _ => {}
    }
}

/// Identities, not counters: ids, process ids and moments.
fn identity(path: &str) -> bool {
    let last = path.rsplit('.').next().unwrap_or(path);
    matches!(
        last,
        "id" | "pid" | "hv_pid" | "backend" | "guest" | "domid"
    ) || last.ends_with("_id")
        || last.contains("uptime")
        || last.contains("since")
}

/// Every counter that moved between two `status --json`.
fn moved(a: &Value, b: &Value) -> Vec<(String, f64, f64)> {
    let (mut x, mut y) = (BTreeMap::new(), BTreeMap::new());
    flatten(a, String::new(), &mut x);
    flatten(b, String::new(), &mut y);
    y.iter()
        .filter(|(k, _)| !identity(k))
        .filter_map(|(k, &after)| {
            let before = x.get(k).copied().unwrap_or(0.0);
            (before != after).then(|| (k.trim_start_matches('.').to_string(), before, after))
        })
        .collect()
}

/// A Markdown table under `title`: the `head` columns, then one column
/// per flow (the first row's keys), values with `digits` decimals.
fn matrix(
    title: &str,
    head: &[&str],
    rows: &[(Vec<String>, &BTreeMap<String, f64>)],
    digits: usize,
) -> String {
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    let mut s = format!(
        "\n{title}\n\n| {} | {} |\n|{}{}\n",
        head.join(" | "),
        names.join(" | "),
        "---|".repeat(head.len()),
        "---:|".repeat(names.len())
    );
    for (cells, values) in rows {
        let v: Vec<String> = names
            .iter()
            .map(|n| {
                values
                    .get(*n)
                    .map_or("-".into(), |x| format!("{x:.digits$}"))
            })
            .collect();
        s += &format!("| {} | {} |\n", cells.join(" | "), v.join(" | "));
    }
    s
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

impl SoakReport {
    /// A Markdown report.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### Soak: {:.1} minutes, seed {} ({} events)\n\n",
            self.seconds / 60.0,
            self.seed,
            self.events.len()
        );
        s += &self.flows_table();
        s += &self.events_table();
        s += &self.targets_table();
        s += &self.kill_table();
        s += &self.hostile_table();
        s += &self.resources_table();
        s += &format!(
            "\nResult: {}\n",
            match self.verdict() {
                Ok(()) => "no byte lost or corrupted, nothing leaked".to_string(),
                Err(e) => format!("FAILED ({e})"),
            }
        );
        s += &self.counters_table();
        s
    }

    fn flows_table(&self) -> String {
        let mut s = String::from(
            "| flow | kind | path | pace Mbit/s | quiet Mbit/s | sent MiB | checked MiB | lost | corrupt | failures (a kill's) | longest gap ms | longest gap no SIGSTOP explains, ms |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n",
        );
        for f in &self.flows {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {:.0} | {:.0} |\n",
                f.name,
                f.kind,
                f.path,
                plot::num(f.pace_mbps),
                f.quiet_mbps.map_or("-".into(), plot::num),
                mib(f.sent),
                mib(f.verified),
                f.lost,
                f.corrupt,
                f.failures.len(),
                f.excused,
                f.longest_gap_ms,
                f.longest_unstopped_gap_ms
            );
        }
        for f in self.flows.iter().filter(|f| !f.failures.is_empty()) {
            for x in f.failures.iter().take(5) {
                s += &format!("\n- {} at {:.1} s: {}", f.name, x.at_s, x.what);
            }
        }
        let d = &self.downloads;
        s += &format!(
            "\n\nDownloads of {} MiB into guest1: {} matched their SHA-256, {} corrupted, {} failed. \
             Hot-plug on guest1: {} attached, {} detached, {} failures ({} outside a driver-domain fault).\n\n",
            d.mib_each,
            d.matched,
            d.corrupt.len(),
            d.failures.len(),
            self.churn.attached,
            self.churn.detached,
            self.churn.failures.len(),
            self.churn_unexplained
        );
        s
    }

    fn events_table(&self) -> String {
        let mut s = String::from(
            "| at s | event | what came of it | hv resident KiB after |\n|---:|---|---|---:|\n",
        );
        for w in &self.events {
            s += &format!(
                "| {:.1} | {} | {} | {} |\n",
                w.start_s,
                w.name,
                w.detail.replace('|', "/"),
                w.hv_rss_kib
            );
        }
        s
    }

    fn targets_table(&self) -> String {
        let yes = |m: bool| if m { "met" } else { "NOT MET" };
        let mut s = format!(
            "\n| target | result |\n|---|---|\n| longest gap across a driver-domain kill ≤ {KILL_GAP_MS:.0} ms | "
        );
        let worst = self
            .kill_gaps
            .iter()
            .max_by(|a, b| a.longest_gap_ms.total_cmp(&b.longest_gap_ms));
        s += &match worst {
            Some(k) => format!(
                "{}: {} kills, worst {:.0} ms ({}), median {:.0} ms |\n",
                yes(self.kill_gaps.iter().all(|k| k.met)),
                self.kill_gaps.len(),
                k.longest_gap_ms,
                k.flow,
                median(
                    &self
                        .kill_gaps
                        .iter()
                        .map(|k| k.longest_gap_ms)
                        .collect::<Vec<_>>()
                )
            ),
            None => "no kill in this run |\n".into(),
        };
        s +=
            &format!("| others keep ≥ {HOSTILE_SHARE} of quiet throughput under a hostile peer | ");
        let worst = self
            .hostile
            .iter()
            .min_by(|a, b| a.lowest.total_cmp(&b.lowest));
        s += &match worst {
            Some(h) => format!(
                "{}: {} peers, lowest {:.2} ({}) |\n",
                yes(self.hostile.iter().all(|h| h.met)),
                self.hostile.len(),
                h.lowest,
                h.event
            ),
            None => "no hostile peer in this run |\n".into(),
        };
        s
    }

    fn kill_table(&self) -> String {
        let rows: Vec<(Vec<String>, &BTreeMap<String, f64>)> = self
            .kill_gaps
            .iter()
            .map(|k| (vec![format!("{:.1}", k.at_s)], &k.gaps))
            .collect();
        let title = "Each flow's pause in delivery across each driver-domain kill, ms:";
        matrix(title, &["kill at s"], &rows, 0)
    }

    fn hostile_table(&self) -> String {
        let rows: Vec<(Vec<String>, &BTreeMap<String, f64>)> = self
            .hostile
            .iter()
            .map(|h| {
                let head = vec![
                    h.event.clone(),
                    h.windows.to_string(),
                    format!("{:.0}", h.seconds),
                    format!("{:.2}", h.lowest),
                ];
                (head, &h.shares)
            })
            .collect();
        let title = "What each hostile peer cost the flows that do not pass through it \
                     (throughput in its windows ÷ quiet):";
        matrix(title, &["peer", "windows", "s", "lowest"], &rows, 2)
    }

    fn resources_table(&self) -> String {
        let mut s = String::from("\n| leak check | start | end |\n|---|---:|---:|\n");
        for (name, b, a) in self.before.rows(&self.after) {
            s += &format!("| hv {name} | {b} | {a} |\n");
        }
        s += &format!(
            "| splitnet namespaces | {} | {} |\n\nCounts must come back exactly; hv's resident memory may end at most 1 MiB above \
             its size after the first round of events ({} KiB), when every event had run once.\n",
            self.namespaces_before, self.namespaces_after, self.rss_reference_kib
        );
        s
    }

    fn counters_table(&self) -> String {
        let mut s = format!(
            "\n<details><summary>{} counters moved (status --json)</summary>\n\n| counter | start | end |\n|---|---:|---:|\n",
            self.counters_moved.len()
        );
        for (k, a, b) in &self.counters_moved {
            s += &format!("| {k} | {a} | {b} |\n");
        }
        s + "\n</details>\n"
    }

    /// Each flow's longest gap.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .flows
            .iter()
            .map(|f| Bar {
                label: format!("{} ({})", f.name, f.kind),
                value: f.longest_gap_ms,
                range: None,
            })
            .collect();
        plot::hbars(
            "Soak: each flow's longest pause in delivery",
            "ms",
            "SIGSTOP of the driver domain or a stalled guest pauses flows for seconds by design",
            &bars,
        )
    }
}

#[cfg(test)]
mod tests;
