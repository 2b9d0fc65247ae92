//! Driver-domain upgrades in place (`splitnet upgrade drv`) during an
//! iperf3 stream each way between guest1 and the wire host: the longest
//! gap in each direction's progress around the upgrade, against the
//! longest gap in as long a window just before it (what the sampler and
//! the host's noise alone show), and the time the domain itself reports
//! its vifs went unserved. Target: the longest gap at most 10 ms
//! (a crash restart's outage is the `kills` experiment's).

use super::{if_bytes, say, stream_cell, FaultsOptions, Up};
use crate::stats::median;
use anyhow::{anyhow, Result};
use hv::Toolstack;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest gap an upgrade may leave in a stream.
pub const TARGET_GAP_MS: f64 = 10.0;
/// How long before the upgrade the control window starts, and how long
/// after its answer the measured window ends.
pub(super) const WINDOW: Duration = Duration::from_millis(300);

/// One upgrade during a stream each way.
#[derive(Debug, Serialize)]
pub struct Upgrade {
    /// Longest gap in the wire host's received bytes around the upgrade.
    pub gap_out_ms: f64,
    /// The same for guest1's received bytes.
    pub gap_in_ms: f64,
    /// Longest gap either way in the window before the upgrade.
    pub quiet_gap_ms: f64,
    /// What the driver domain reported: its vifs unserved.
    pub unserved_ms: f64,
    /// From the request to the answer, as `splitnet upgrade` waits.
    pub took_ms: f64,
    pub dropped_frames: u64,
    /// The iperf3 client exited 0.
    pub stream_ok: bool,
}

/// The upgrades, and whether they met the target.
#[derive(Debug, Serialize)]
pub struct Upgrades {
    pub runs: Vec<Upgrade>,
    /// Median over the runs of the longer of the two directions' gaps.
    pub median_gap_ms: f64,
    pub median_quiet_gap_ms: f64,
}

impl Upgrades {
    /// The target met, and every stream ended cleanly.
    pub fn passed(&self) -> bool {
        self.median_gap_ms <= TARGET_GAP_MS && self.runs.iter().all(|u| u.stream_ok)
    }

    /// A Markdown summary.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "### Driver-domain upgrades in place during an iperf3 stream each way\n\n",
        );
        s += "| upgrade | longest gap guest1 → wire (ms) | wire → guest1 (ms) | longest gap just before (ms) | unserved, as drv says (ms) | `upgrade` took (ms) | frames dropped | stream |\n|---|---|---|---|---|---|---|---|\n";
        for (i, u) in self.runs.iter().enumerate() {
            s += &format!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} |\n",
                i + 1,
                u.gap_out_ms,
                u.gap_in_ms,
                u.quiet_gap_ms,
                u.unserved_ms,
                u.took_ms,
                u.dropped_frames,
                stream_cell(u.stream_ok)
            );
        }
        s += &format!(
            "\nMedian longest gap {:.1} ms (target ≤ {TARGET_GAP_MS:.0} ms: {}); {:.1} ms in the same window length without an upgrade.\n\n",
            self.median_gap_ms,
            if self.median_gap_ms <= TARGET_GAP_MS { "met" } else { "NOT met" },
            self.median_quiet_gap_ms
        );
        s
    }
}

/// `opts.upgrades` upgrades, each during its own stream.
pub(super) fn run(opts: &FaultsOptions) -> Result<Upgrades> {
    let (mut up, srv, mut ts) = super::with_iperf3_server(opts)?;
    let mut runs = Vec::new();
    for k in 0..opts.upgrades {
        let u = one(&mut up, &mut ts, srv)?;
        say(
            opts,
            &format!(
                "upgrade {}/{}: longest gap {:.1} ms out, {:.1} ms in ({:.1} ms just before); drv unserved {:.1} ms; stream {}",
                k + 1,
                opts.upgrades,
                u.gap_out_ms,
                u.gap_in_ms,
                u.quiet_gap_ms,
                u.unserved_ms,
                if u.stream_ok { "ended cleanly" } else { "FAILED" }
            ),
        );
        runs.push(u);
    }
    let gaps: Vec<f64> = runs.iter().map(|u| u.gap_out_ms.max(u.gap_in_ms)).collect();
    let quiet: Vec<f64> = runs.iter().map(|u| u.quiet_gap_ms).collect();
    Ok(Upgrades {
        median_gap_ms: median(&gaps),
        median_quiet_gap_ms: median(&quiet),
        runs,
    })
}

/// When each direction's received bytes were seen to grow.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) out: Vec<Instant>,
    pub(super) inn: Vec<Instant>,
}

impl Progress {
    /// Samples the two receivers' byte counters as fast as they can be
    /// read, until `stop` is set.
    pub(super) fn sample(srv: u32, g1: u32, stop: &AtomicBool) -> Progress {
        let mut p = Progress::default();
        let (mut out, mut inn) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let o = if_bytes(srv, "eth0", false).unwrap_or(0);
            let i = if_bytes(g1, "eth0", false).unwrap_or(0);
            if o > out {
                p.out.push(now);
                out = o;
            }
            if i > inn {
                p.inn.push(now);
                inn = i;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        p
    }
}

/// The longest time between two moments of progress (or the window's
/// edges) within `[from, to]`.
pub(super) fn longest_gap(seen: &[Instant], from: Instant, to: Instant) -> f64 {
    let mut last = from;
    let mut gap = Duration::ZERO;
    for &t in seen.iter().filter(|&&t| t > from && t <= to) {
        gap = gap.max(t - last);
        last = t;
    }
    gap = gap.max(to.saturating_duration_since(last));
    gap.as_secs_f64() * 1e3
}

/// One upgrade in the middle of a `--bidir` stream.
fn one(up: &mut Up<'_>, ts: &mut Toolstack, srv: u32) -> Result<Upgrade> {
    let (g1, client) = super::start_bidir(up, ts, srv, "3")?;
    let stop = Arc::new(AtomicBool::new(false));
    let t_sample = Instant::now();
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || Progress::sample(srv, g1, &stop))
    };
    std::thread::sleep(2 * WINDOW);
    let t0 = Instant::now();
    let answer = ts.upgrade("drv", None);
    let t1 = Instant::now();
    std::thread::sleep(WINDOW);
    stop.store(true, Ordering::Relaxed);
    let p = sampler
        .join()
        .map_err(|_| anyhow!("the sampler panicked"))?;
    let text = answer.map_err(|e| anyhow!("upgrade: {e}"))?;
    let r: toolstack::supervisor::UpgradeReport =
        serde_json::from_str(&text).map_err(|e| anyhow!("upgrade report {text:?}: {e}"))?;
    let stream_ok = up.wait_child(client, Duration::from_secs(60))?;
    let (from, to) = (t0, t1 + WINDOW);
    let quiet_from = t0 - (to - from);
    Ok(Upgrade {
        gap_out_ms: longest_gap(&p.out, from, to),
        gap_in_ms: longest_gap(&p.inn, from, to),
        quiet_gap_ms: longest_gap(&p.out, quiet_from.max(t_sample), t0).max(longest_gap(
            &p.inn,
            quiet_from.max(t_sample),
            t0,
        )),
        unserved_ms: r.unserved_us as f64 / 1e3,
        took_ms: (t1 - t0).as_secs_f64() * 1e3,
        dropped_frames: r.dropped_frames,
        stream_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_counts_the_window_edges() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let seen = [ms(1), ms(3), ms(9), ms(10)];
        assert!((longest_gap(&seen, t, ms(12)) - 6.0).abs() < 1e-6);
        // Nothing seen at all: the whole window is one gap.
        assert!((longest_gap(&[], t, ms(7)) - 7.0).abs() < 1e-6);
        // Progress only before the window: the gap runs to its end.
        assert!((longest_gap(&seen, ms(10), ms(15)) - 5.0).abs() < 1e-6);
    }
}
