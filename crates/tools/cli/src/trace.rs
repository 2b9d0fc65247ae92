//! `splitnet trace`: per-domain event counts and costs in TSC cycles, in the
//! spirit of xentrace (Zhang & Dong §2.3.1, §4.1). Two snapshots of hv's and
//! the domains' trace counters ([`hv::trace`]), and their difference.

use anyhow::{bail, Result};
use hv::trace::{bucket_range, EventRow, RecordedBy, TraceDelta, BUCKETS};
use hv::Toolstack;
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Width of the histogram bars.
const BAR: u64 = 40;

/// One bucket of a histogram.
#[derive(Debug, Serialize)]
struct Bucket {
    /// Costs in [2^bucket, 2^(bucket+1)) cycles.
    bucket: usize,
    from_cycles: u64,
    /// None for the last bucket (no upper end).
    to_cycles: Option<u64>,
    count: u64,
}

/// One event type of one domain over the trace.
#[derive(Debug, Serialize)]
struct Event {
    event: String,
    recorded_by: RecordedBy,
    count: u64,
    per_second: Option<f64>,
    cycles: u64,
    avg_cycles: Option<f64>,
    avg_us: Option<f64>,
    /// The largest cost: exact when `max_exact`, otherwise the top of the
    /// highest non-empty bucket (the running maximum predates the trace).
    max_cycles: Option<u64>,
    max_exact: bool,
    items: u64,
    items_per_event: Option<f64>,
    /// Non-empty buckets, lowest first.
    histogram: Vec<Bucket>,
}

#[derive(Debug, Serialize)]
struct Domain {
    name: String,
    id: u16,
    kind: String,
    /// Created during the trace: its counts start from its creation.
    new: bool,
    events: Vec<Event>,
}

/// What `--json` writes.
#[derive(Debug, Serialize)]
struct Report {
    seconds: f64,
    tsc_hz: Option<f64>,
    command: Option<Vec<String>>,
    command_exit_code: Option<i32>,
    domains: Vec<Domain>,
    /// hv's work for the toolstack (`splitnet` commands, this one included).
    toolstack: Vec<Event>,
    /// Domains destroyed during the trace.
    gone: Vec<String>,
}

fn event(row: &EventRow, seconds: f64, tsc_hz: Option<f64>) -> Event {
    let d = &row.delta;
    let avg = d.avg_cycles();
    let max = d.max_bound();
    Event {
        event: row.event.clone(),
        recorded_by: row.by,
        count: d.count,
        per_second: (seconds > 0.0).then(|| d.count as f64 / seconds),
        cycles: d.cycles,
        avg_cycles: avg,
        avg_us: avg.zip(tsc_hz).map(|(c, hz)| c / hz * 1e6),
        max_cycles: max.map(|m| m.0),
        max_exact: max.is_some_and(|m| m.1),
        items: d.items,
        items_per_event: d.items_per_event(),
        histogram: d
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                let (from, to) = bucket_range(i);
                Bucket {
                    bucket: i,
                    from_cycles: from,
                    to_cycles: to,
                    count: n,
                }
            })
            .collect(),
    }
}

fn report(d: &TraceDelta, command: &[String], code: Option<i32>) -> Report {
    let events = |rows: &[EventRow]| -> Vec<Event> {
        rows.iter().map(|r| event(r, d.seconds, d.tsc_hz)).collect()
    };
    Report {
        seconds: d.seconds,
        tsc_hz: d.tsc_hz,
        command: (!command.is_empty()).then(|| command.to_vec()),
        command_exit_code: code,
        domains: d
            .domains
            .iter()
            .map(|x| Domain {
                name: x.name.clone(),
                id: x.id,
                kind: x.kind.clone(),
                new: x.new,
                events: events(&x.events),
            })
            .collect(),
        toolstack: events(&d.toolstack),
        gone: d.gone.clone(),
    }
}

fn num(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

fn by(b: RecordedBy) -> &'static str {
    match b {
        RecordedBy::Hv => "hv",
        RecordedBy::Domain => "domain",
    }
}

fn table(out: &mut String, events: &[Event]) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "  {:<34} {:<6} {:>9} {:>10} {:>10} {:>9} {:>10} {:>9}",
        "EVENT", "BY", "COUNT", "PER S", "AVG CYC", "AVG µS", "MAX CYC", "ITEMS/EV"
    );
    for e in events {
        let max = match (e.max_cycles, e.max_exact) {
            (Some(m), true) => m.to_string(),
            // The top of a bucket is a power of two (or u64::MAX for the last).
            (Some(m), false) if m.is_power_of_two() => format!("<{}", pow2(m.ilog2() as usize)),
            (Some(_), false) => format!(">={}", pow2(BUCKETS - 1)),
            (None, _) => "-".into(),
        };
        let _ = writeln!(
            out,
            "  {:<34} {:<6} {:>9} {:>10} {:>10} {:>9} {:>10} {:>9}",
            e.event,
            by(e.recorded_by),
            e.count,
            num(e.per_second, 1),
            num(e.avg_cycles, 0),
            num(e.avg_us, 2),
            max,
            num(e.items_per_event, 1),
        );
    }
}

fn pow2(i: usize) -> String {
    format!("2^{i}")
}

/// One histogram: every bucket from the lowest to the highest non-empty
/// one, with a bar scaled to the fullest.
fn histogram(out: &mut String, title: &str, e: &Event) {
    use std::fmt::Write;
    let (Some(lo), Some(hi)) = (e.histogram.first(), e.histogram.last()) else {
        return;
    };
    let top = e
        .histogram
        .iter()
        .map(|b| b.count)
        .max()
        .unwrap_or(0)
        .max(1);
    let total = e
        .histogram
        .iter()
        .fold(0u64, |a, b| a.saturating_add(b.count));
    let _ = writeln!(out, "  {title}: {total} events");
    for i in lo.bucket..=hi.bucket {
        let n = e
            .histogram
            .iter()
            .find(|b| b.bucket == i)
            .map_or(0, |b| b.count);
        let range = if i + 1 < BUCKETS {
            format!("[{}..{})", pow2(i), pow2(i + 1))
        } else {
            format!("[{}..)", pow2(i))
        };
        let bar = (u128::from(n) * u128::from(BAR)).div_ceil(u128::from(top)) as usize;
        let line = format!("    {range:<14} {n:>10}  {}", "#".repeat(bar));
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

fn to_text(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let hz = r
        .tsc_hz
        .map_or_else(|| "unknown".into(), |h| format!("{:.2} GHz", h / 1e9));
    let _ = writeln!(out, "splitnet trace: {:.2} s, TSC {hz}", r.seconds);
    let _ = writeln!(
        out,
        "ITEMS/EV: ops per grant batch, packets per ring batch, doorbells rung per notify; \
         BY domain: as that domain reports it"
    );
    let named: Vec<(String, &[Event])> = r
        .domains
        .iter()
        .map(|d| {
            let new = if d.new {
                ", created during the trace"
            } else {
                ""
            };
            (
                format!("{} ({}, id {}{new})", d.name, d.kind, d.id),
                d.events.as_slice(),
            )
        })
        .chain(std::iter::once((
            "toolstack (hv's work for splitnet commands)".to_string(),
            r.toolstack.as_slice(),
        )))
        .collect();
    for (title, events) in &named {
        let _ = writeln!(out, "\n{title}");
        if events.is_empty() {
            let _ = writeln!(out, "  no events");
        } else {
            table(&mut out, events);
        }
    }
    if !r.gone.is_empty() {
        let _ = writeln!(out, "\ndestroyed during the trace: {}", r.gone.join(", "));
    }
    let _ = writeln!(
        out,
        "\nHISTOGRAMS: events per cost bucket, [2^i..2^(i+1)) TSC cycles"
    );
    for d in &r.domains {
        for e in &d.events {
            let title = format!("{} {} ({})", d.name, e.event, by(e.recorded_by));
            histogram(&mut out, &title, e);
        }
    }
    out
}

/// Connects to hv as the toolstack, or says how to start a system.
fn connect(rd: &Path) -> Result<Toolstack> {
    let path = toolstack::daemon::socket_path(rd);
    match sys::SeqPacket::connect(&path) {
        Ok(s) => Ok(Toolstack::from_socket(s)),
        Err(e) => bail!(
            "no splitnet system is running (cannot reach hv: {e}); start one with `splitnet up`"
        ),
    }
}

fn snapshot(ts: &mut Toolstack) -> Result<hv::trace::TraceSnapshot> {
    ts.trace().map_err(|e| {
        anyhow::anyhow!(
            "reading the trace counters from hv: {e} (hv serves only root in its own network namespace)"
        )
    })
}

/// Shows how long the trace has run, on one terminal line.
struct Progress {
    tty: bool,
    start: Instant,
}

impl Progress {
    fn tick(&self, what: &str) {
        if self.tty {
            eprint!(
                "\rsplitnet trace: {what}, {:.1} s ",
                self.start.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    }
    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// Traces for `duration` seconds, or while `cmd` runs, and reports.
pub fn run(rd: &Path, duration: Option<f64>, json: Option<&Path>, cmd: &[String]) -> Result<()> {
    let secs = duration.unwrap_or(5.0);
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        bail!("--duration must be a number of seconds above 0 (and at most a day), got {secs}");
    }
    if duration.is_some() && !cmd.is_empty() {
        eprintln!("splitnet trace: tracing while the command runs; --duration is ignored");
    }
    let mut ts = connect(rd)?;
    let before = snapshot(&mut ts)?;
    let p = Progress {
        tty: std::io::stderr().is_terminal(),
        start: Instant::now(),
    };
    if cmd.is_empty() {
        eprintln!("splitnet trace: tracing for {secs} s");
    } else {
        eprintln!("splitnet trace: tracing while `{}` runs", cmd.join(" "));
    }
    let code = crate::run_or_wait(
        cmd,
        Duration::from_secs_f64(secs),
        Duration::from_millis(200),
        |what| p.tick(what),
    )?;
    p.done();
    let after = snapshot(&mut ts)?;
    let r = report(&after.since(&before), cmd, code.and_then(|s| s.code()));
    print!("{}", to_text(&r));
    if let Some(path) = json {
        crate::write_file(path, &serde_json::to_string_pretty(&r)?)?;
    }
    match code {
        Some(s) if !s.success() => bail!("the traced command failed ({s})"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hv::trace::{DomainDelta, EventDelta};

    fn delta(count: u64, cycles: u64, buckets: &[(usize, u64)], max: Option<u64>) -> EventDelta {
        let mut b = vec![0; BUCKETS];
        for &(i, n) in buckets {
            b[i] = n;
        }
        EventDelta {
            count,
            cycles,
            items: count.saturating_mul(3),
            max_cycles: max,
            buckets: b,
        }
    }

    fn sample() -> TraceDelta {
        TraceDelta {
            seconds: 2.0,
            tsc_hz: Some(2e9),
            toolstack: vec![],
            domains: vec![DomainDelta {
                id: 1,
                name: "drv".into(),
                kind: "driver".into(),
                new: false,
                events: vec![
                    EventRow {
                        event: "batch".into(),
                        by: RecordedBy::Hv,
                        delta: delta(10, 40_000, &[(11, 4), (13, 6)], Some(9000)),
                    },
                    EventRow {
                        event: "notify".into(),
                        by: RecordedBy::Domain,
                        delta: delta(u64::MAX, u64::MAX, &[(31, u64::MAX), (0, 1)], None),
                    },
                ],
            }],
            gone: vec!["old".into()],
        }
    }

    #[test]
    fn report_computes_rates_averages_and_histograms() {
        let r = report(&sample(), &[], None);
        let e = &r.domains[0].events[0];
        assert_eq!(e.per_second, Some(5.0));
        assert_eq!(e.avg_cycles, Some(4000.0));
        assert_eq!(e.avg_us, Some(2.0));
        assert_eq!((e.max_cycles, e.max_exact), (Some(9000), true));
        assert_eq!(e.items_per_event, Some(3.0));
        assert_eq!(e.histogram.len(), 2);
        assert_eq!(
            (e.histogram[0].from_cycles, e.histogram[0].to_cycles),
            (2048, Some(4096))
        );
        // Without an exact maximum, the top of the highest bucket (none for the last).
        let n = &r.domains[0].events[1];
        assert_eq!((n.max_cycles, n.max_exact), (Some(u64::MAX), false));
        let text = to_text(&r);
        assert!(text.contains("drv (driver, id 1)"), "{text}");
        assert!(text.contains("[2^11..2^12)"), "{text}");
        assert!(text.contains("[2^12..2^13)"), "{text}"); // the empty bucket in between
        assert!(text.contains("[2^31..)"), "{text}");
        assert!(
            text.contains(&format!("{}  {}", 6, "#".repeat(BAR as usize))),
            "{text}"
        );
        assert!(text.contains("destroyed during the trace: old"), "{text}");
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(json["domains"][0]["events"][0]["recorded_by"], "hv");
        assert_eq!(json["domains"][0]["events"][1]["recorded_by"], "domain");
    }

    #[test]
    fn an_empty_interval_reports_without_dividing_by_zero() {
        let mut d = sample();
        d.seconds = 0.0;
        d.tsc_hz = None;
        d.domains[0].events[0].delta = EventDelta::default();
        let r = report(&d, &["true".into()], Some(0));
        let e = &r.domains[0].events[0];
        assert_eq!((e.per_second, e.avg_cycles, e.avg_us), (None, None, None));
        assert!(e.histogram.is_empty());
        let _ = to_text(&r);
    }
}
