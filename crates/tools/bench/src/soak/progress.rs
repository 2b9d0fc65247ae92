//! What one soak flow has delivered, and when: bytes checked, per 100 ms
//! bin from the soak's start, the gaps between deliveries, and the errors
//! with their moments. The flow's threads record; the report reads.

use serde::Serialize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A bin of the throughput record.
pub const BIN: Duration = Duration::from_millis(100);

/// A pause between deliveries this long or longer is a gap.
pub const GAP: Duration = Duration::from_millis(50);

/// A pause in a flow's deliveries: from `start_s` (seconds since the
/// soak's start) for `ms`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Gap {
    pub start_s: f64,
    pub ms: f64,
}

/// A failure a flow met: a reset, a stall, a corrupted byte.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub at_s: f64,
    pub what: String,
    /// A corrupted byte rather than a broken connection.
    pub corrupt: bool,
}

#[derive(Default)]
struct Record {
    bins: Vec<u64>,
    verified: u64,
    last: Option<Instant>,
    gaps: Vec<Gap>,
    failures: Vec<Failure>,
}

/// One flow's record, shared by its threads.
pub struct Progress {
    t0: Instant,
    record: Mutex<Record>,
}

/// What a flow's record says at the end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub verified: u64,
    pub bins: Vec<u64>,
    pub gaps: Vec<Gap>,
    pub failures: Vec<Failure>,
}

impl Progress {
    pub fn new(t0: Instant) -> Progress {
        Progress {
            t0,
            record: Mutex::new(Record::default()),
        }
    }

    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `n` bytes delivered and checked now.
    pub fn delivered(&self, n: u64) {
        let now = Instant::now();
        let bin = (now.saturating_duration_since(self.t0).as_millis() / BIN.as_millis()) as usize;
        let mut r = self.lock();
        let gap = r.last.map(|l| (self.secs(l), now - l));
        if r.bins.len() <= bin {
            r.bins.resize(bin + 1, 0);
        }
        r.bins[bin] += n;
        r.verified += n;
        if let Some((s, d)) = gap.filter(|(_, d)| *d >= GAP) {
            r.gaps.push(Gap {
                start_s: s,
                ms: d.as_secs_f64() * 1e3,
            });
        }
        r.last = Some(now);
    }

    /// When it last delivered, if it has.
    pub fn last(&self) -> Option<Instant> {
        self.lock().last
    }

    /// A failure now.
    pub fn failed(&self, what: String, corrupt: bool) {
        let at_s = self.secs(Instant::now());
        self.lock().failures.push(Failure {
            at_s,
            what,
            corrupt,
        });
    }

    /// The record, with the pause since the last delivery counted as a
    /// gap if it is one (a flow that stopped delivering before the end).
    pub fn summary(&self, end: Instant) -> Summary {
        let r = self.lock();
        let mut gaps = r.gaps.clone();
        if let Some(l) = r.last {
            if end.saturating_duration_since(l) >= GAP {
                gaps.push(Gap {
                    start_s: self.secs(l),
                    ms: end.saturating_duration_since(l).as_secs_f64() * 1e3,
                });
            }
        }
        Summary {
            verified: r.verified,
            bins: r.bins.clone(),
            gaps,
            failures: r.failures.clone(),
        }
    }
}

impl Summary {
    /// Bytes per second over the bins wholly inside `from_s..to_s`; `None`
    /// when no whole bin is.
    pub fn rate_in(&self, from_s: f64, to_s: f64) -> Option<f64> {
        let bin_s = BIN.as_secs_f64();
        let first = (from_s / bin_s).ceil() as usize;
        let last = (to_s / bin_s).floor() as usize;
        if last <= first {
            return None;
        }
        let bytes: u64 = (first..last)
            .map(|i| self.bins.get(i).copied().unwrap_or(0))
            .sum();
        Some(bytes as f64 / ((last - first) as f64 * bin_s))
    }

    /// The longest gap that overlaps `at_s..at_s + within_s`, in ms (0
    /// when there is none).
    pub fn gap_near(&self, at_s: f64, within_s: f64) -> f64 {
        self.gaps
            .iter()
            .filter(|g| g.start_s <= at_s + within_s && g.start_s + g.ms / 1e3 >= at_s)
            .map(|g| g.ms)
            .fold(0.0, f64::max)
    }

    /// The longest gap, ms.
    pub fn longest_gap_ms(&self) -> f64 {
        self.gaps.iter().map(|g| g.ms).fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_fill_bins_and_a_pause_is_a_gap_at_its_moment() {
        let t0 = Instant::now() - Duration::from_secs(1);
        let p = Progress::new(t0);
        p.delivered(100);
        std::thread::sleep(GAP + Duration::from_millis(20));
        p.delivered(50);
        let s = p.summary(Instant::now());
        assert_eq!(s.verified, 150);
        assert_eq!(s.bins.iter().sum::<u64>(), 150);
        assert_eq!(s.gaps.len(), 1, "{:?}", s.gaps);
        let g = s.gaps[0];
        assert!(g.ms >= 50.0 && g.start_s >= 1.0, "{g:?}");
        assert!(s.gap_near(g.start_s + 0.01, 0.0) >= 50.0);
        assert_eq!(s.gap_near(g.start_s + 5.0, 1.0), 0.0);
    }

    #[test]
    fn a_rate_counts_whole_bins_only() {
        let s = Summary {
            bins: vec![10, 20, 30, 40],
            ..Summary::default()
        };
        // Bins 1 and 2 are wholly inside 0.05..0.35 s.
        let r = s.rate_in(0.05, 0.35).unwrap();
        assert!((r - 250.0).abs() < 1e-6, "{r}");
        assert!(s.rate_in(0.05, 0.15).is_none());
    }
}
