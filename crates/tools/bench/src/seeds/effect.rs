//! Key effects as data, and the one rubric that turns measured numbers into
//! a figure's status.
//!
//! A figure's key effects are the claims its paper draws from it, each with
//! the paper's number: an ordering, a ratio, a level or a dip along a
//! sweep. The first effect listed is the main one. A suite measures labelled
//! numbers ([`Measure`]: the median over runs and the range); the rubric
//! judges each effect on them and then the figure:
//! - reproduced: every effect holds in direction and each magnitude is
//!   within [2/3, 3/2] of the paper's;
//! - partly: the main effect holds in direction, but a magnitude is outside
//!   the band or another effect fails;
//! - not reproduced: the main effect is absent or inverted;
//! - missing: the run measured nothing the main effect needs.
//!
//! A direction holds only beyond the run-to-run spread: the ranges compared
//! must not overlap, each widened to at least ±[`FLOOR`] of its median so
//! that a single run's point is not taken for certainty. Where both numbers
//! of a comparison carry their per-run values from the same runs, the
//! comparison is taken within each run first (as every ratio to native
//! is), and its range is that of the per-run quotients: noise that a run
//! shares across its configurations cancels.

use super::Status;
use serde::{Deserialize, Serialize};

/// The least relative half-width a measured range is taken to have.
pub const FLOOR: f64 = 0.02;

/// The band a magnitude must fall in, as a factor of the paper's value.
pub const BAND: (f64, f64) = (2.0 / 3.0, 1.5);

/// One measured number of a figure: its median over runs and its range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    pub label: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The value in each run, in run order, where the suite kept them
    /// (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
}

impl Measure {
    /// A number from one run, or one whose runs were not kept.
    pub fn point(label: impl Into<String>, v: f64) -> Measure {
        Measure {
            label: label.into(),
            median: v,
            min: v,
            max: v,
            runs: Vec::new(),
        }
    }

    /// A number with its median and range over runs.
    pub fn of(label: impl Into<String>, s: &crate::stats::Spread) -> Measure {
        Measure {
            label: label.into(),
            median: s.median,
            min: s.min,
            max: s.max,
            runs: Vec::new(),
        }
    }

    /// A number from its value in each run, in run order; None without runs.
    pub fn of_runs(label: impl Into<String>, runs: Vec<f64>) -> Option<Measure> {
        let s = crate::stats::Spread::of(&runs)?;
        Some(Measure {
            runs,
            ..Measure::of(label, &s)
        })
    }

    /// A number from `(run, value)` pairs of a report of `runs` runs: each
    /// run's value kept when every run gave one, else only the median and
    /// range of those there are; None when there are none.
    pub fn of_run_values(
        label: impl Into<String>,
        runs: usize,
        mut v: Vec<(usize, f64)>,
    ) -> Option<Measure> {
        v.sort_by_key(|&(run, _)| run);
        let every_run = v.iter().map(|&(run, _)| run).eq(0..runs);
        let values: Vec<f64> = v.into_iter().map(|(_, x)| x).collect();
        if every_run {
            return Measure::of_runs(label, values);
        }
        crate::stats::Spread::of(&values).map(|s| Measure::of(label, &s))
    }

    /// The range, widened to at least ±FLOOR of the median.
    fn range(&self) -> (f64, f64) {
        let w = self.median.abs() * FLOOR;
        (self.min.min(self.median - w), self.max.max(self.median + w))
    }
}

/// What a claim compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Claim {
    /// `hi` exceeds `lo`.
    Order { hi: &'static str, lo: &'static str },
    /// `num ÷ den` (or `num` alone when `den` is empty) has the paper's
    /// value: its direction is the paper's side of 1, its magnitude the
    /// value itself.
    Ratio {
        num: &'static str,
        den: &'static str,
        paper: f64,
    },
    /// `of` is present (above zero beyond its spread) at about the paper's
    /// level: a share, a count or a cost.
    Level { of: &'static str, paper: f64 },
    /// Along `points`, in the sweep's order, the value falls from a peak to
    /// a later trough by the paper's fraction.
    Dip {
        points: &'static [&'static str],
        paper: f64,
    },
}

/// A key effect: the paper's claim in our words, and what it compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effect {
    pub claim: &'static str,
    pub what: Claim,
}

/// How one effect fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Holds {
    /// In direction and magnitude.
    Yes,
    /// In direction; the magnitude is outside the band.
    Direction,
    /// Absent (within the spread) or inverted.
    No,
    /// A number it needs was not measured.
    Unmeasured,
}

impl Holds {
    pub fn name(self) -> &'static str {
        match self {
            Holds::Yes => "holds",
            Holds::Direction => "direction only",
            Holds::No => "absent or inverted",
            Holds::Unmeasured => "not measured",
        }
    }
}

/// One effect judged: the paper's value, ours and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub claim: String,
    /// The paper's value of what is compared; none for an ordering, whose
    /// claim is the order itself.
    pub paper: Option<f64>,
    /// Ours, where measured: the ratio, level or dip; for an ordering, hi
    /// over lo.
    pub ours: Option<f64>,
    pub holds: Holds,
}

fn find<'a>(ms: &'a [Measure], label: &str) -> Option<&'a Measure> {
    ms.iter().find(|m| m.label == label)
}

fn in_band(ours: f64, paper: f64) -> bool {
    let r = ours / paper;
    paper != 0.0 && r >= BAND.0 && r <= BAND.1
}

/// `num ÷ den` as a measure: within each run where both kept the same
/// runs (the median and range of the per-run quotients), else the
/// medians' ratio and the ranges' extremes.
fn quotient(num: &Measure, den: &Measure) -> Option<Measure> {
    let paired = num.runs.len() == den.runs.len() && num.runs.len() > 1;
    if paired && den.runs.iter().all(|d| *d > 0.0) {
        let q = num.runs.iter().zip(&den.runs).map(|(n, d)| n / d).collect();
        return Measure::of_runs(String::new(), q);
    }
    let (n, d) = (num.range(), den.range());
    (d.0 > 0.0).then(|| Measure {
        label: String::new(),
        median: num.median / den.median,
        min: n.0 / d.1,
        max: n.1 / d.0,
        runs: Vec::new(),
    })
}

/// Judges one effect on the measured numbers.
pub fn judge(e: &Effect, ms: &[Measure]) -> Outcome {
    let (paper, ours, holds) = match e.what {
        Claim::Order { hi, lo } => order(find(ms, hi), find(ms, lo)),
        Claim::Ratio { num, den, paper } => {
            let q = match den {
                "" => find(ms, num).cloned(),
                _ => find(ms, num)
                    .zip(find(ms, den))
                    .and_then(|(n, d)| quotient(n, d)),
            };
            ratio(q, paper)
        }
        Claim::Level { of, paper } => level(find(ms, of), paper),
        Claim::Dip { points, paper } => {
            let pts: Option<Vec<&Measure>> = points.iter().map(|p| find(ms, p)).collect();
            dip(pts, paper)
        }
    };
    Outcome {
        claim: e.claim.to_string(),
        paper: (!matches!(e.what, Claim::Order { .. })).then_some(paper),
        ours,
        holds,
    }
}

fn order(hi: Option<&Measure>, lo: Option<&Measure>) -> (f64, Option<f64>, Holds) {
    let (Some(hi), Some(lo)) = (hi, lo) else {
        return (1.0, None, Holds::Unmeasured);
    };
    let ours = (lo.median != 0.0).then(|| hi.median / lo.median);
    // Within each run when both kept their runs: every run's quotient above 1.
    let above = match quotient(hi, lo).filter(|q| !q.runs.is_empty()) {
        Some(q) => q.range().0 > 1.0,
        None => hi.range().0 > lo.range().1,
    };
    let holds = if above { Holds::Yes } else { Holds::No };
    (1.0, ours, holds)
}

fn ratio(q: Option<Measure>, paper: f64) -> (f64, Option<f64>, Holds) {
    let Some(q) = q else {
        return (paper, None, Holds::Unmeasured);
    };
    let (lo, hi) = q.range();
    let direction = if paper > 1.0 {
        lo > 1.0
    } else if paper < 1.0 {
        hi < 1.0
    } else {
        lo <= 1.0 && hi >= 1.0
    };
    let holds = match (direction, in_band(q.median, paper)) {
        (false, _) => Holds::No,
        (true, true) => Holds::Yes,
        (true, false) => Holds::Direction,
    };
    (paper, Some(q.median), holds)
}

fn level(m: Option<&Measure>, paper: f64) -> (f64, Option<f64>, Holds) {
    let Some(m) = m else {
        return (paper, None, Holds::Unmeasured);
    };
    let present = m.range().0 > 0.0 && m.median > 0.0;
    let holds = match (present, in_band(m.median, paper)) {
        (false, _) => Holds::No,
        (true, true) => Holds::Yes,
        (true, false) => Holds::Direction,
    };
    (paper, Some(m.median), holds)
}

/// The deepest fall from a running peak to a later point, as a fraction of
/// the peak; it holds in direction when the trough's range lies below the
/// peak's.
fn dip(pts: Option<Vec<&Measure>>, paper: f64) -> (f64, Option<f64>, Holds) {
    let Some(pts) = pts.filter(|p| p.len() >= 2) else {
        return (paper, None, Holds::Unmeasured);
    };
    let (mut peak, mut best) = (pts[0], (0.0, false));
    for &p in &pts[1..] {
        if p.median > peak.median {
            peak = p;
            continue;
        }
        let fall = (peak.median - p.median) / peak.median.abs().max(f64::MIN_POSITIVE);
        if fall > best.0 {
            best = (fall, p.range().1 < peak.range().0);
        }
    }
    let holds = match best {
        (_, false) => Holds::No,
        (f, true) if in_band(f, paper) => Holds::Yes,
        _ => Holds::Direction,
    };
    (paper, Some(best.0), holds)
}

/// The rubric: a figure's status from its effects' outcomes (the first is
/// the main effect). No effects means nothing to reproduce: missing.
pub fn verdict(outcomes: &[Outcome]) -> Status {
    let Some(main) = outcomes.first() else {
        return Status::Missing;
    };
    match main.holds {
        Holds::Unmeasured => Status::Missing,
        Holds::No => Status::NotReproduced,
        _ if outcomes.iter().all(|o| o.holds == Holds::Yes) => Status::Reproduced,
        _ => Status::Partly,
    }
}

/// Every effect judged, and the status they give.
pub fn assess(effects: &[Effect], ms: &[Measure]) -> (Status, Vec<Outcome>) {
    let outcomes: Vec<Outcome> = effects.iter().map(|e| judge(e, ms)).collect();
    (verdict(&outcomes), outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(label: &str, median: f64, min: f64, max: f64) -> Measure {
        Measure {
            runs: Vec::new(),
            label: label.into(),
            median,
            min,
            max,
        }
    }

    const ORDER: Effect = Effect {
        claim: "a beats b",
        what: Claim::Order { hi: "a", lo: "b" },
    };

    #[test]
    fn an_ordering_holds_only_beyond_the_spread() {
        let clear = [m("a", 2.0, 1.9, 2.1), m("b", 1.0, 0.9, 1.1)];
        assert_eq!(judge(&ORDER, &clear).holds, Holds::Yes);
        let overlapping = [m("a", 2.0, 1.0, 2.1), m("b", 1.0, 0.9, 1.5)];
        assert_eq!(judge(&ORDER, &overlapping).holds, Holds::No);
        let near = [Measure::point("a", 1.01), Measure::point("b", 1.0)];
        assert_eq!(judge(&ORDER, &near).holds, Holds::No, "within the floor");
        assert_eq!(judge(&ORDER, &near[..1]).holds, Holds::Unmeasured);
    }

    /// Two configurations measured in the same runs compare run by run: a
    /// machine slower in one run slows both, and that does not hide an
    /// order every run shows; one run against it breaks it.
    #[test]
    fn measures_with_runs_compare_within_each_run() {
        let runs = |l: &str, v: &[f64]| Measure::of_runs(l, v.to_vec()).unwrap();
        let drifting = [runs("a", &[1.2, 1.6, 2.0]), runs("b", &[1.0, 1.3, 1.6])];
        assert_eq!(judge(&ORDER, &drifting).holds, Holds::Yes);
        let apart = [m("a", 1.6, 1.2, 2.0), m("b", 1.3, 1.0, 1.6)];
        assert_eq!(judge(&ORDER, &apart).holds, Holds::No, "ranges overlap");
        let one_against = [runs("a", &[1.2, 1.6, 1.5]), runs("b", &[1.0, 1.3, 1.6])];
        assert_eq!(judge(&ORDER, &one_against).holds, Holds::No);
        let ratio = Effect {
            claim: "a is 1.25 b",
            what: Claim::Ratio {
                num: "a",
                den: "b",
                paper: 1.25,
            },
        };
        let o = judge(&ratio, &drifting);
        assert_eq!(o.holds, Holds::Yes);
        assert!((o.ours.unwrap() - 1.2307).abs() < 1e-3, "{:?}", o.ours);
        // Runs that do not pair (a different count) fall back to the ranges.
        let unpaired = [runs("a", &[1.2, 1.6]), runs("b", &[1.0, 1.3, 1.6])];
        assert_eq!(judge(&ORDER, &unpaired).holds, Holds::No);
    }

    #[test]
    fn a_ratio_needs_the_papers_side_of_one_and_the_band_for_magnitude() {
        let e = Effect {
            claim: "x cuts y by 38%",
            what: Claim::Ratio {
                num: "x",
                den: "y",
                paper: 0.62,
            },
        };
        let at = |x: f64| judge(&e, &[Measure::point("x", x), Measure::point("y", 1.0)]);
        assert_eq!(at(0.6).holds, Holds::Yes);
        assert_eq!(at(0.05).holds, Holds::Direction, "95% cut, far past 38%");
        assert_eq!(at(1.0).holds, Holds::No);
        assert_eq!(at(1.3).holds, Holds::No);
        assert_eq!(at(0.6).ours, Some(0.6));
    }

    #[test]
    fn a_dip_is_a_fall_from_a_peak_to_a_later_point() {
        const PTS: &[&str] = &["4k", "8k", "16k", "32k"];
        let e = Effect {
            claim: "dips",
            what: Claim::Dip {
                points: PTS,
                paper: 0.5,
            },
        };
        let sweep = |v: [f64; 4]| -> Vec<Measure> {
            PTS.iter()
                .zip(v)
                .map(|(l, v)| Measure::point(*l, v))
                .collect()
        };
        let o = judge(&e, &sweep([1.0, 2.0, 1.1, 2.0]));
        assert_eq!(o.holds, Holds::Yes);
        assert!((o.ours.unwrap() - 0.45).abs() < 1e-9);
        assert_eq!(judge(&e, &sweep([1.0, 1.5, 2.0, 2.5])).holds, Holds::No);
        assert_eq!(
            judge(&e, &sweep([2.0, 1.9, 2.0, 2.0])).holds,
            Holds::Direction
        );
    }

    #[test]
    fn the_main_effect_decides_between_reproduced_partly_and_not() {
        let o = |h| Outcome {
            claim: String::new(),
            paper: None,
            ours: None,
            holds: h,
        };
        use Holds::*;
        assert_eq!(verdict(&[o(Yes), o(Yes)]), Status::Reproduced);
        assert_eq!(verdict(&[o(Yes), o(Direction)]), Status::Partly);
        assert_eq!(verdict(&[o(Direction), o(Yes)]), Status::Partly);
        assert_eq!(verdict(&[o(Yes), o(No)]), Status::Partly);
        assert_eq!(verdict(&[o(No), o(Yes)]), Status::NotReproduced);
        assert_eq!(verdict(&[o(Unmeasured), o(Yes)]), Status::Missing);
        assert_eq!(verdict(&[]), Status::Missing);
    }
}
