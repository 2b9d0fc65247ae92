//! `splitnet top`'s tables: a live view of the domains, vifs and ports, in
//! the manner of `xentop`. Rates come from the differences between two
//! samples of the status document (`toolstack::status::collect`); the driver
//! domain publishes its counters every 500 ms, so the default 1 s interval
//! spans two of them. The parent module draws these tables.

use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One sample of the status document.
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    wall: SystemTime,
    st: Value,
}

impl Sample {
    /// Reads hv's status now.
    pub fn take(rd: &Path) -> Result<Sample> {
        let st = toolstack::status::collect_with(rd, false).context("reading hv's status")?;
        Ok(Sample {
            at: Instant::now(),
            wall: SystemTime::now(),
            st,
        })
    }
}

/// A table: column names and rows of cells.
#[derive(Debug, Default, PartialEq)]
pub struct Table {
    pub head: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Widest cell of each column, the header included.
    pub fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        w
    }

    /// Aligned plain text: names left, numbers right, the last column as is.
    pub fn text(&self) -> String {
        let w = self.widths();
        let line = |cells: &[&str]| {
            let last = cells.len().saturating_sub(1);
            let s: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| match i {
                    _ if i == last => c.to_string(),
                    _ if is_numeric(c) => format!("{c:>0$}", w[i]),
                    _ => format!("{c:<0$}", w[i]),
                })
                .collect();
            s.join(" ")
        };
        let mut out = line(&self.head);
        for r in &self.rows {
            out.push('\n');
            out.push_str(&line(&r.iter().map(String::as_str).collect::<Vec<_>>()));
        }
        out
    }
}

fn is_numeric(c: &str) -> bool {
    c == "-"
        || c.parse::<f64>().is_ok()
        || c.strip_suffix(['k', 'M', 'G', 'T'])
            .is_some_and(|n| n.parse::<f64>().is_ok())
}

/// What one frame shows.
#[derive(Debug, PartialEq)]
pub struct View {
    pub header: String,
    pub domains: Table,
    /// Vifs, then ports.
    pub links: Table,
}

const DOMAIN_HEAD: [&str; 10] = [
    "DOMAIN", "ID", "KIND", "CONN", "CPU(s)", "CPU(%)", "MEM(MiB)", "GRANTS", "MAPS", "EVTCHN",
];
const LINK_HEAD: [&str; 12] = [
    "LINK",
    "DOMAIN",
    "STATE",
    "RX_PKT/s",
    "RX_B/s",
    "TX_PKT/s",
    "TX_B/s",
    "TX_RING",
    "RX_POSTED",
    "RX_QUEUED",
    "DROPS",
    "REFUSED",
];

/// Builds a frame from the sample `cur` and, for the rates, the one before.
/// With `human`, rates are in k/M/G; otherwise whole numbers.
pub fn view(prev: Option<&Sample>, cur: &Sample, human: bool) -> View {
    let st = &cur.st;
    let dt = prev.map(|p| cur.at.duration_since(p.at).as_secs_f64());
    let rates = Rates { dt, human };
    let prev_domains = previous(prev, "domains");

    let mut domains = Table {
        head: DOMAIN_HEAD.to_vec(),
        rows: domain_rows(st, &prev_domains, rates),
    };
    let mut links = Table {
        head: LINK_HEAD.to_vec(),
        rows: vif_rows(st, &previous(prev, "vifs"), rates),
    };
    links
        .rows
        .extend(port_rows(st, &previous(prev, "ports"), rates));
    links.rows.extend(hvm_nic_rows(st, &prev_domains, rates));

    // Reasons come from the guests: no control characters or spaces reach
    // the terminal or break a batch line's one token per cell.
    for r in domains.rows.iter_mut().chain(links.rows.iter_mut()) {
        for c in r.iter_mut() {
            if c.chars().any(|ch| ch.is_control() || ch.is_whitespace()) {
                *c = c
                    .chars()
                    .map(|ch| {
                        if ch.is_control() || ch.is_whitespace() {
                            '_'
                        } else {
                            ch
                        }
                    })
                    .collect();
            }
        }
    }
    let header = header(cur, domains.rows.len(), dt);
    View {
        header,
        domains,
        links,
    }
}

/// How counters become rates: the interval since the previous sample, if
/// any, and whether rates are printed in k/M/G.
#[derive(Clone, Copy)]
struct Rates {
    dt: Option<f64>,
    human: bool,
}

impl Rates {
    /// The rate of counter `get` between the previous sample's matching item
    /// and this one.
    fn of(
        self,
        before: Option<&Value>,
        now: &Value,
        get: &dyn Fn(&Value) -> Option<f64>,
    ) -> Option<f64> {
        let (b, dt) = (get(before?)?, self.dt?);
        let n = get(now)?;
        (n >= b && dt > 0.0).then(|| (n - b) / dt)
    }

    fn fmt(self, r: Option<f64>) -> String {
        match r {
            None => "-".to_string(),
            Some(r) if self.human => si(r),
            Some(r) => format!("{}", r.round() as u64),
        }
    }
}

/// The previous sample's list `k` (empty without a previous sample).
fn previous(prev: Option<&Sample>, k: &str) -> Vec<Value> {
    prev.map(|p| p.st[k].as_array().cloned().unwrap_or_default())
        .unwrap_or_default()
}

/// Reads counter `k` of an item's `counters`.
fn counter(k: &'static str) -> impl Fn(&Value) -> Option<f64> {
    move |v: &Value| v["counters"][k].as_f64()
}

/// The status document's list `k`, empty if absent.
fn items<'a>(st: &'a Value, k: &str) -> &'a [Value] {
    st[k].as_array().map_or(&[], Vec::as_slice)
}

/// The previous sample's entry for domain `d`: a restarted domain has a new
/// id and a new cgroup, so no rate across.
fn same_domain<'a>(prev_domains: &'a [Value], d: &Value) -> Option<&'a Value> {
    prev_domains
        .iter()
        .find(|p| p["name"] == d["name"] && p["id"] == d["id"])
}

/// A domain's name; a container's guest with its container ID (the first
/// 12 characters) and interface.
fn domain_name(d: &Value) -> String {
    let c = &d["container"];
    match (c["id"].as_str(), c["ifname"].as_str()) {
        (Some(id), Some(ifname)) => {
            format!(
                "{}[{}/{ifname}]",
                text(&d["name"]),
                id.get(..12).unwrap_or(id)
            )
        }
        _ => text(&d["name"]),
    }
}

/// One row per domain.
fn domain_rows(st: &Value, prev_domains: &[Value], rates: Rates) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for d in items(st, "domains") {
        let before = same_domain(prev_domains, d);
        let cpu = rates.of(before, d, &|v| v["cpu_seconds"].as_f64());
        let mem = d["memory_frames"].as_u64().map(|f| f * 4096 / (1 << 20));
        rows.push(vec![
            domain_name(d),
            text(&d["id"]),
            text(&d["kind"]),
            (if d["connected"] == true { "yes" } else { "no" }).into(),
            d["cpu_seconds"]
                .as_f64()
                .map_or("-".into(), |s| format!("{s:.2}")),
            cpu.map_or("-".into(), |c| format!("{:.1}", c * 100.0)),
            mem.map_or("-".into(), |m| m.to_string()),
            text(&d["grant_entries"]),
            text(&d["grant_maps"]),
            text(&d["event_channels"]),
        ]);
    }
    rows
}

/// A vif's nonzero reasons under `k` (`drops`, `rejected`), the backend's
/// then the frontend's (`fe:`), or `-`.
fn reasons(v: &Value, k: &str) -> String {
    let side = |c: &Value, prefix: &str| -> Vec<String> {
        c[k].as_object()
            .into_iter()
            .flatten()
            .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
            .map(|(r, n)| format!("{prefix}{r}={n}"))
            .collect()
    };
    let mut v2 = side(&v["counters"], "");
    v2.extend(side(&v["frontend_counters"], "fe:"));
    if v2.is_empty() {
        "-".to_string()
    } else {
        v2.join(",")
    }
}

/// One row per vif.
fn vif_rows(st: &Value, prev_vifs: &[Value], rates: Rates) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for v in items(st, "vifs") {
        let before = prev_vifs
            .iter()
            .find(|p| p["vif"] == v["vif"] && p["guest"] == v["guest"]);
        let state = match (text(&v["frontend_state"]), text(&v["backend_state"])) {
            (f, b) if f == b => f,
            (f, b) => format!("{f}/{b}"),
        };
        let ring = &v["ring"];
        let tx_ring = match (ring["tx_outstanding"].as_u64(), ring["size"].as_u64()) {
            (Some(n), Some(size)) => format!("{n}/{size}"),
            _ => "-".into(),
        };
        rows.push(vec![
            text(&v["vif"]),
            text(&v["guest"]),
            state,
            rates.fmt(rates.of(before, v, &counter("rx_packets"))),
            rates.fmt(rates.of(before, v, &counter("rx_bytes"))),
            rates.fmt(rates.of(before, v, &counter("tx_packets"))),
            rates.fmt(rates.of(before, v, &counter("tx_bytes"))),
            tx_ring,
            text(&ring["rx_posted"]),
            text(&ring["rx_queued"]),
            reasons(v, "drops"),
            reasons(v, "rejected"),
        ]);
    }
    rows
}

/// One row per port of a driver domain's network stack.
fn port_rows(st: &Value, prev_ports: &[Value], rates: Rates) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for p in items(st, "ports") {
        let before = prev_ports
            .iter()
            .find(|q| q["domain"] == p["domain"] && q["name"] == p["name"]);
        let c = &p["counters"];
        let drops: Vec<String> = ["tx_dropped", "rx_errors"]
            .iter()
            .filter_map(|k| Some(format!("{k}={}", c[*k].as_u64().filter(|&n| n > 0)?)))
            .collect();
        rows.push(vec![
            text(&p["name"]),
            text(&p["domain"]),
            (if c.is_object() { "up" } else { "-" }).into(),
            rates.fmt(rates.of(before, p, &counter("rx_packets"))),
            rates.fmt(rates.of(before, p, &counter("rx_bytes"))),
            rates.fmt(rates.of(before, p, &counter("tx_packets"))),
            rates.fmt(rates.of(before, p, &counter("tx_bytes"))),
            "-".into(),
            "-".into(),
            "-".into(),
            if drops.is_empty() {
                "-".into()
            } else {
                drops.join(",")
            },
            "-".into(),
        ]);
    }
    rows
}

/// An HVM guest's NIC: its packet rates, exits per second and where its
/// vPIC lives (hv's accounting, from `status`).
fn hvm_nic_rows(st: &Value, prev_domains: &[Value], rates: Rates) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for d in items(st, "domains") {
        let h = &d["emulated_nic"];
        if h["kind"] != "hvm" {
            continue;
        }
        let before = same_domain(prev_domains, d);
        let nic = |k: &'static str| move |v: &Value| v["emulated_nic"][k].as_f64();
        let exits = rates.of(before, d, &nic("exits"));
        rows.push(vec![
            format!("hvm:{}", text(&d["name"])),
            text(&d["name"]),
            format!("pic={},exits/s={}", text(&h["pic"]), rates.fmt(exits)),
            rates.fmt(rates.of(before, d, &nic("rx_packets"))),
            "-".into(),
            rates.fmt(rates.of(before, d, &nic("tx_packets"))),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }
    rows
}

/// The frame's first line: the time, the topology, hv's pid, the counts and
/// the interval.
fn header(cur: &Sample, n_domains: usize, dt: Option<f64>) -> String {
    let st = &cur.st;
    let secs = cur
        .wall
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "splitnet top - {:02}:{:02}:{:02} UTC  topology {}  hv pid {}  {}, {}, {}{}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        st["topology"].as_str().unwrap_or("?"),
        st["hv_pid"],
        count(n_domains, "domain"),
        count(st["vifs"].as_array().map_or(0, Vec::len), "vif"),
        count(st["ports"].as_array().map_or(0, Vec::len), "port"),
        dt.map(|d| format!("  interval {d:.2} s"))
            .unwrap_or_default(),
    )
}

/// `1 port`, `2 ports`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// A JSON value as a cell: strings bare, null as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// A rate with an SI suffix: 950, 12.3k, 1.05G.
fn si(r: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    match UNITS.iter().find(|(u, _)| r >= *u) {
        Some((u, s)) if r / u >= 100.0 => format!("{:.0}{s}", r / u),
        Some((u, s)) => format!("{:.2}{s}", r / u),
        None => format!("{:.0}", r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn sample(at: Instant, tx_bytes: u64, cpu: f64, drops: u64) -> Sample {
        Sample {
            at,
            wall: UNIX_EPOCH + Duration::from_secs(3600 + 2 * 60 + 3),
            st: json!({
                "topology": "default", "hv_pid": 7,
                "domains": [{"id": 1, "name": "drv", "kind": "driver", "connected": true,
                             "cpu_seconds": cpu, "memory_frames": 4096, "grant_entries": 2048,
                             "grant_maps": 4, "event_channels": 4}],
                "vifs": [{"vif": "vif2.0", "guest": "guest1", "frontend_state": "Connected",
                          "backend_state": "Connected",
                          "counters": {"tx_packets": tx_bytes / 1000, "tx_bytes": tx_bytes,
                                       "rx_packets": 5, "rx_bytes": 500, "drops": {"rx_queue_full": drops},
                                       "rejected": {}},
                          "frontend_counters": {"drops": {"a b\u{1b}[2J": 1}, "rejected": {"bad_ref": 1}},
                          "ring": {"size": 256, "tx_outstanding": 3, "rx_posted": 250, "rx_queued": 0}}],
                "ports": [{"domain": "drv", "name": "peth0", "counters":
                    {"tx_packets": 1, "tx_bytes": 100, "rx_packets": 0, "rx_bytes": 0,
                     "tx_dropped": 0, "rx_errors": 2}}]
            }),
        }
    }

    fn cell<'a>(t: &'a Table, row: usize, col: &str) -> &'a str {
        let i = t.head.iter().position(|h| *h == col).unwrap();
        &t.rows[row][i]
    }

    #[test]
    fn rates_come_from_the_difference_between_two_samples() {
        let t0 = Instant::now();
        let a = sample(t0, 1_000_000, 1.0, 0);
        let b = sample(t0 + Duration::from_secs(2), 5_000_000, 1.5, 3);
        let first = view(None, &a, false);
        assert_eq!(
            cell(&first.links, 0, "TX_B/s"),
            "-",
            "no rate without a previous sample"
        );
        let v = view(Some(&a), &b, false);
        assert_eq!(cell(&v.links, 0, "TX_B/s"), "2000000");
        assert_eq!(cell(&v.links, 0, "TX_PKT/s"), "2000");
        assert_eq!(cell(&v.links, 0, "RX_B/s"), "0");
        assert_eq!(cell(&v.links, 0, "TX_RING"), "3/256");
        assert_eq!(cell(&v.links, 0, "RX_POSTED"), "250");
        assert_eq!(cell(&v.links, 0, "DROPS"), "rx_queue_full=3,fe:a_b_[2J=1");
        assert_eq!(cell(&v.links, 0, "REFUSED"), "fe:bad_ref=1");
        assert_eq!(cell(&v.links, 1, "LINK"), "peth0");
        assert_eq!(cell(&v.links, 1, "DROPS"), "rx_errors=2");
        assert_eq!(cell(&v.domains, 0, "CPU(%)"), "25.0");
        assert_eq!(cell(&v.domains, 0, "MEM(MiB)"), "16");
        assert!(
            v.header.starts_with("splitnet top - 01:02:03 UTC"),
            "{}",
            v.header
        );
        let h = view(Some(&a), &b, true);
        assert_eq!(cell(&h.links, 0, "TX_B/s"), "2.00M");
    }

    #[test]
    fn a_counter_that_went_back_has_no_rate() {
        let t0 = Instant::now();
        let a = sample(t0, 5_000_000, 1.0, 0);
        let b = sample(t0 + Duration::from_secs(1), 1_000, 0.5, 0);
        let v = view(Some(&a), &b, false);
        assert_eq!(cell(&v.links, 0, "TX_B/s"), "-");
        assert_eq!(cell(&v.domains, 0, "CPU(%)"), "-");
    }

    #[test]
    fn plain_text_is_aligned_with_one_token_per_cell() {
        let t0 = Instant::now();
        let v = view(None, &sample(t0, 1, 0.0, 0), false);
        let text = v.links.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for l in &lines {
            assert_eq!(l.split_whitespace().count(), LINK_HEAD.len(), "{l}");
        }
        assert_eq!(si(950.0), "950");
        assert_eq!(si(12_345.0), "12.35k");
        assert_eq!(si(123_456_789.0), "123M");
    }
}
