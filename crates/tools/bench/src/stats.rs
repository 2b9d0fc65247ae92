//! Timing helpers: the TSC rate and order statistics.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// TSC ticks per microsecond, measured against the monotonic clock.
pub fn tsc_per_us() -> f64 {
    let t0 = Instant::now();
    let c0 = sys::rdtsc();
    std::thread::sleep(Duration::from_millis(50));
    let c1 = sys::rdtsc();
    let dt = t0.elapsed();
    (c1.wrapping_sub(c0)) as f64 / (dt.as_nanos() as f64 / 1000.0)
}

/// Summary of many samples of one cost, in cycles.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub name: String,
    pub samples: usize,
    pub median_cycles: f64,
    pub p10_cycles: f64,
    pub p90_cycles: f64,
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    /// The median of each run separately, in µs (shows run-to-run spread,
    /// e.g. from where the scheduler placed the two ends).
    pub run_medians_us: Vec<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    quantile(&s, 0.5)
}

/// The `q` quantile of `v`, 0 ≤ q ≤ 1, interpolated (NaN when empty).
pub fn quantile_of(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    quantile(&s, q)
}

/// A median and the range of the runs around it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The median and range of `v`; None when it is empty.
    pub fn of(v: &[f64]) -> Option<Spread> {
        (!v.is_empty()).then(|| Spread {
            median: median(v),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// Values (one per run, or per try) with their median and range.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    pub values: Vec<f64>,
    /// None when there are no values.
    #[serde(flatten)]
    pub spread: Option<Spread>,
}

impl Series {
    pub fn of(values: Vec<f64>) -> Series {
        Series {
            spread: Spread::of(&values),
            values,
        }
    }
}

/// "median (min–max)", two decimals.
impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

impl Summary {
    /// Summarizes cycle samples; `per_us` converts to microseconds.
    pub fn of(name: &str, cycles: &[f64], per_us: f64) -> Summary {
        let mut s = cycles.to_vec();
        s.sort_by(f64::total_cmp);
        let (m, p10, p90) = (quantile(&s, 0.5), quantile(&s, 0.1), quantile(&s, 0.9));
        Summary {
            name: name.to_string(),
            samples: s.len(),
            median_cycles: m,
            p10_cycles: p10,
            p90_cycles: p90,
            median_us: m / per_us,
            p10_us: p10 / per_us,
            p90_us: p90 / per_us,
            run_medians_us: Vec::new(),
        }
    }

    /// Pools several runs' samples; keeps each run's median too.
    pub fn of_runs(name: &str, runs: &[Vec<f64>], per_us: f64) -> Summary {
        let pooled: Vec<f64> = runs.iter().flatten().copied().collect();
        let mut s = Summary::of(name, &pooled, per_us);
        s.run_medians_us = runs.iter().map(|r| median(r) / per_us).collect();
        s
    }
}

/// Reads back a number JSON holds as null (serde_json writes NaN, "not
/// measured", as null) as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let s = Summary::of("x", &[5.0, 1.0, 3.0, 2.0, 4.0], 2.0);
        assert_eq!(s.median_cycles, 3.0);
        assert_eq!(s.median_us, 1.5);
        assert!((s.p10_cycles - 1.4).abs() < 1e-9);
        assert!((s.p90_cycles - 4.6).abs() < 1e-9);
        assert!(median(&[]).is_nan());
        let r = Summary::of_runs("y", &[vec![1.0, 3.0], vec![10.0]], 1.0);
        assert_eq!(r.samples, 3);
        assert_eq!(r.median_cycles, 3.0);
        assert_eq!(r.run_medians_us, vec![2.0, 10.0]);
    }

    #[test]
    fn a_series_carries_its_values_median_and_range() {
        let v = serde_json::to_value(Series::of(vec![3.0, 1.0, 2.0])).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"values": [3.0, 1.0, 2.0], "median": 2.0, "min": 1.0, "max": 3.0})
        );
        assert_eq!(Series::of(vec![]).spread.map(|s| s.to_string()), None);
        assert_eq!(
            Spread::of(&[0.5, 0.7]).unwrap().to_string(),
            "0.60 (0.50–0.70)"
        );
    }
}
