//! The seeds report (`splitnet bench seeds`): every result figure and table
//! of the five seed documents, each with its key effects, the paper's
//! numbers and ours beside them, and a status computed from them.
//!
//! The catalog ([`catalog`]) states each entry's key effects as data (or
//! why it cannot be measured here); a suite's `figures(&Report)` gives the
//! numbers it measured, and one rubric ([`effect`]) turns those into the
//! status. No status is written by hand.

mod catalog;
pub mod effect;
mod render;

use serde::{Deserialize, Serialize};

pub use effect::{Claim, Effect, Holds, Measure, Outcome};
pub use render::{num, render, write, Page};

/// The five seed documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Seed {
    Menon2006,
    Ram,
    Sugerman,
    Menon2005,
    ZhangDong,
}

impl Seed {
    pub const ALL: [Seed; 5] = [
        Seed::Menon2006,
        Seed::Ram,
        Seed::Sugerman,
        Seed::Menon2005,
        Seed::ZhangDong,
    ];

    /// Authors, title and venue.
    pub fn title(self) -> &'static str {
        match self {
            Seed::Menon2006 => "Menon, Cox, Zwaenepoel: Optimizing Network Virtualization in Xen (USENIX ATC 2006)",
            Seed::Ram => "K. K. Ram: Efficient Virtualization of Network Interfaces without Sacrificing Safety and Transparency (thesis)",
            Seed::Sugerman => "Sugerman, Venkitachalam, Lim: Virtualizing I/O Devices on VMware Workstation's Hosted VMM (USENIX 2001)",
            Seed::Menon2005 => "Menon et al.: Diagnosing Performance Overheads in the Xen Virtual Machine Environment (VEE 2005)",
            Seed::ZhangDong => "Zhang, Dong: Optimizing Xen VMM Based on Intel Virtualization Technology",
        }
    }

    /// A short name for file names and tables.
    pub fn short(self) -> &'static str {
        match self {
            Seed::Menon2006 => "menon2006",
            Seed::Ram => "ram",
            Seed::Sugerman => "sugerman2001",
            Seed::Menon2005 => "menon2005",
            Seed::ZhangDong => "zhang-dong",
        }
    }
}

/// How far splitnet reproduces a figure or table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    Reproduced,
    Partly,
    NotReproduced,
    NotMeasurableHere,
    OutOfScope,
    Missing,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Reproduced,
        Status::Partly,
        Status::NotReproduced,
        Status::NotMeasurableHere,
        Status::OutOfScope,
        Status::Missing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::Partly => "partly",
            Status::NotReproduced => "not reproduced",
            Status::NotMeasurableHere => "not measurable here",
            Status::OutOfScope => "out of scope",
            Status::Missing => "missing",
        }
    }
}

/// What can be asked of an entry on this host.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// Its key effects, the main one first, judged on what its suite
    /// measured.
    Effects(&'static [Effect]),
    /// It needs hardware this host lacks, with no software stand-in: why.
    NotMeasurable(&'static str),
    /// It is not network I/O, or needs a guest kernel: why.
    OutOfScope(&'static str),
    /// Out of scope as [`Scope::OutOfScope`] (why), but its suite still
    /// measures it: its effects are judged and shown for the record, and
    /// do not decide its status.
    OutOfScopeMeasured(&'static str, &'static [Effect]),
}

/// One result figure or table of a seed, as the catalog lists it.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub seed: Seed,
    /// "Figure 3", "Table 1", "Figure 2.4".
    pub id: &'static str,
    /// What it shows, in our words.
    pub title: &'static str,
    /// The `splitnet bench` suite that measures it ("" for none).
    pub suite: &'static str,
    pub scope: Scope,
    /// The paper's key numbers: (what, value).
    pub paper: &'static [(&'static str, f64)],
}

impl Entry {
    /// The key effects that set its status: none for an entry out of
    /// scope or not measurable here (an out-of-scope entry's effects shown
    /// for the record set nothing).
    pub fn effects(&self) -> &'static [Effect] {
        match self.scope {
            Scope::Effects(e) => e,
            _ => &[],
        }
    }
}

/// The catalog of all 58 entries.
pub fn catalog() -> &'static [Entry] {
    &catalog::CATALOG
}

/// The catalog's entry for `seed`'s `id`.
pub fn entry(seed: Seed, id: &str) -> Option<&'static Entry> {
    catalog().iter().find(|e| e.seed == seed && e.id == id)
}

/// What the chart of a figure looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Lines against a swept variable.
    Lines,
    /// Grouped bars (ratios per direction or case).
    Grouped,
    /// Stacked bars (cycles by domain or class).
    Stacked,
    /// Plain bars.
    Bars,
    /// A table only.
    Table,
}

/// Labelled numbers: (what, value).
pub type Numbers = Vec<(String, f64)>;

/// A figure a suite measured: its table and chart, with the paper's
/// numbers beside ours.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figure {
    pub seed: Seed,
    pub id: String,
    pub title: String,
    pub kind: Kind,
    /// Markdown.
    pub table: String,
    /// SVG ("" for none).
    pub svg: String,
    /// What the suite has to say of the numbers: where they differ from
    /// the paper's and why.
    pub note: String,
    pub paper: Numbers,
    /// The numbers the entry's effects are judged on.
    pub ours: Vec<Measure>,
    /// The machine its numbers come from ([`crate::machine`]).
    #[serde(default)]
    pub machine: String,
}

impl Figure {
    /// A figure for the catalog's `seed`/`id`, taking its title and the
    /// paper's numbers from the catalog.
    pub fn new(seed: Seed, id: &str, kind: Kind, table: String, svg: String) -> Figure {
        let e = entry(seed, id);
        Figure {
            seed,
            id: id.to_string(),
            title: e.map_or_else(String::new, |e| e.title.to_string()),
            kind,
            table,
            svg,
            note: String::new(),
            machine: String::new(),
            paper: e.map_or_else(Vec::new, |e| {
                e.paper.iter().map(|&(l, v)| (l.to_string(), v)).collect()
            }),
            ours: Vec::new(),
        }
    }

    /// The figure with the suite's note.
    pub fn noted(mut self, note: impl Into<String>) -> Figure {
        self.note = note.into();
        self
    }
}

/// A suite that did not produce its figures, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub suite: String,
    pub error: String,
}

/// One catalog entry as the report shows it: its figures, each key effect
/// judged on their numbers, and the status the rubric gives.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    pub entry: &'static Entry,
    pub status: Status,
    pub reason: String,
    pub outcomes: Vec<Outcome>,
    pub figures: Vec<&'a Figure>,
}

/// Every catalog entry with the figures measured for it, its effects
/// judged on all their numbers together; an entry whose suite failed says
/// why.
pub fn rows<'a>(figures: &'a [Figure], failures: &[Failure]) -> Vec<Row<'a>> {
    catalog()
        .iter()
        .map(|e| {
            let figs: Vec<&Figure> = figures
                .iter()
                .filter(|f| f.seed == e.seed && f.id == e.id)
                .collect();
            let ours: Vec<Measure> = figs.iter().flat_map(|f| f.ours.iter().cloned()).collect();
            let (status, outcomes) = match e.scope {
                Scope::Effects(effects) => effect::assess(effects, &ours),
                Scope::NotMeasurable(_) => (Status::NotMeasurableHere, Vec::new()),
                Scope::OutOfScope(_) => (Status::OutOfScope, Vec::new()),
                Scope::OutOfScopeMeasured(_, effects) => {
                    (Status::OutOfScope, effect::assess(effects, &ours).1)
                }
            };
            let failed = failures.iter().find(|f| f.suite == e.suite);
            let reason = match (e.scope, failed) {
                (Scope::NotMeasurable(why) | Scope::OutOfScope(why), _) => why.to_string(),
                (Scope::OutOfScopeMeasured(why, _), _) if figs.is_empty() => why.to_string(),
                (Scope::OutOfScopeMeasured(why, _), _) => {
                    format!("{why}. For the record: {}", summary(&outcomes, &figs))
                }
                (_, Some(f)) if figs.is_empty() => {
                    format!("`splitnet bench {}` failed: {}", f.suite, f.error)
                }
                _ if figs.is_empty() => format!("run `splitnet bench {}`", e.suite),
                _ => summary(&outcomes, &figs),
            };
            Row {
                entry: e,
                status,
                reason,
                outcomes,
                figures: figs,
            }
        })
        .collect()
}

/// The reason of a measured entry, from its outcomes: how many key
/// effects hold, the main one's numbers, and the suite's note.
fn summary(outcomes: &[Outcome], figs: &[&Figure]) -> String {
    let held = outcomes.iter().filter(|o| o.holds == Holds::Yes).count();
    let mut s = format!("{held} of {} key effects hold", outcomes.len());
    if let Some(m) = outcomes.first() {
        let num = |v: Option<f64>| v.map_or("-".into(), render::num);
        s += &format!(
            "; main: {} (paper {}, ours {}: {})",
            m.claim,
            m.paper.map_or("the order".into(), render::num),
            num(m.ours),
            m.holds.name()
        );
    }
    for f in figs.iter().filter(|f| !f.note.is_empty()) {
        s += ". ";
        s += &f.note;
    }
    s
}

/// How many rows have each status, in [`Status::ALL`]'s order.
pub fn counts(rows: &[Row]) -> Vec<(Status, usize)> {
    Status::ALL
        .iter()
        .map(|&s| (s, rows.iter().filter(|r| r.status == s).count()))
        .collect()
}

/// The figures of a set of runs, and the suites that failed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Saved {
    pub figures: Vec<Figure>,
    pub failures: Vec<Failure>,
}

/// Reads the seed figures out of a suite's report, saved as JSON.
pub type Reader = fn(&str) -> anyhow::Result<Vec<Figure>>;

/// The figures of the reports saved in `dir`: each suite's `<suite>.json`
/// (as `bench seeds` writes them) or `<suite>/results.json` (as `bench
/// <suite> --out` does), and `failures.json`. A suite with neither, or
/// whose report does not read, is a failure that says so. `suites` are
/// the seed suites by name, each with the reader of its report.
pub fn load(dir: &std::path::Path, suites: &[(&str, Reader)]) -> anyhow::Result<Saved> {
    let mut saved = Saved::default();
    let failures = dir.join("failures.json");
    if failures.exists() {
        saved.failures = serde_json::from_str(&std::fs::read_to_string(&failures)?)?;
    }
    for &(suite, read) in suites {
        if saved.failures.iter().any(|f| f.suite == suite) {
            continue;
        }
        let paths = [
            dir.join(format!("{suite}.json")),
            dir.join(suite).join("results.json"),
        ];
        let found = paths.iter().find(|p| p.is_file());
        let res = match found {
            Some(p) => std::fs::read_to_string(p)
                .map_err(anyhow::Error::from)
                .and_then(|json| read(&json)),
            None => Err(anyhow::anyhow!("no saved report in {}", dir.display())),
        };
        match res {
            Ok(figs) => saved.figures.extend(figs),
            Err(e) => saved.failures.push(Failure {
                suite: suite.to_string(),
                error: format!("{e:#}"),
            }),
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_lists_58_entries_each_once() {
        let c = catalog();
        assert_eq!(c.len(), 58);
        let per = |s: Seed| c.iter().filter(|e| e.seed == s).count();
        assert_eq!(
            Seed::ALL.map(per),
            [12, 13, 5, 16, 12],
            "Menon 2006, Ram, Sugerman, Menon 2005, Zhang & Dong"
        );
        for (i, a) in c.iter().enumerate() {
            assert!(!a.title.is_empty(), "{}", a.id);
            assert!(
                c[i + 1..].iter().all(|b| (b.seed, b.id) != (a.seed, a.id)),
                "{:?} {} twice",
                a.seed,
                a.id
            );
        }
    }

    #[test]
    fn every_entry_in_scope_states_its_key_effects() {
        for e in catalog() {
            if let Scope::Effects(fx) = e.scope {
                assert!(!fx.is_empty(), "{:?} {} states no key effect", e.seed, e.id);
                assert!(!e.suite.is_empty(), "{:?} {} names no suite", e.seed, e.id);
            }
        }
    }

    /// Numbers on which `e`'s effects hold as the paper says: the paper's
    /// own where the catalog gives them, made up from each claim elsewhere.
    fn as_the_paper_says(e: &Entry) -> Vec<Measure> {
        let mut ms: Vec<Measure> = e.paper.iter().map(|&(l, v)| Measure::point(l, v)).collect();
        let set = |ms: &mut Vec<Measure>, l: &str, v: f64| {
            if !l.is_empty() && !ms.iter().any(|m| m.label == l) {
                ms.push(Measure::point(l, v));
            }
        };
        let get = |ms: &[Measure], l: &str| ms.iter().find(|m| m.label == l).map(|m| m.median);
        for fx in e.effects() {
            match fx.what {
                Claim::Order { hi, lo } => {
                    let l = get(&ms, hi).map_or(1.0, |h| h / 2.0);
                    set(&mut ms, lo, l);
                    let v = get(&ms, lo).unwrap() * 2.0;
                    set(&mut ms, hi, v);
                }
                Claim::Ratio { num, den, paper } => {
                    let d = get(&ms, num).map_or(1.0, |n| n / paper);
                    set(&mut ms, den, d);
                    let d = if den.is_empty() {
                        1.0
                    } else {
                        get(&ms, den).unwrap()
                    };
                    set(&mut ms, num, d * paper);
                }
                Claim::Level { of, paper } => set(&mut ms, of, paper),
                Claim::Dip { points, paper } => {
                    for (i, p) in points.iter().enumerate() {
                        set(&mut ms, p, if i == 2 { 1.0 - paper } else { 1.0 });
                    }
                }
            }
        }
        ms
    }

    /// `ms` with the main effect of `e` turned the other way.
    fn inverted(e: &Entry, mut ms: Vec<Measure>) -> Vec<Measure> {
        let get = |ms: &[Measure], l: &str| ms.iter().find(|m| m.label == l).unwrap().median;
        let put = |ms: &mut Vec<Measure>, l: &str, v: f64| {
            ms.retain(|m| m.label != l);
            ms.push(Measure::point(l, v));
        };
        match e.effects()[0].what {
            Claim::Order { hi, lo } => {
                let v = get(&ms, lo) * 0.5;
                put(&mut ms, hi, v);
            }
            Claim::Ratio { num, den, paper } => {
                let d = if den.is_empty() { 1.0 } else { get(&ms, den) };
                let inv = if paper == 1.0 { 2.0 } else { 1.0 / paper };
                put(&mut ms, num, d * inv);
            }
            Claim::Level { of, .. } => put(&mut ms, of, 0.0),
            Claim::Dip { points, .. } => {
                for p in points {
                    put(&mut ms, p, 1.0);
                }
            }
        }
        ms
    }

    #[test]
    fn every_entry_reproduces_on_the_papers_numbers_and_falls_when_its_main_effect_inverts() {
        for e in catalog().iter().filter(|e| !e.effects().is_empty()) {
            let paper = as_the_paper_says(e);
            let (status, outcomes) = effect::assess(e.effects(), &paper);
            assert_eq!(
                status,
                Status::Reproduced,
                "{:?} {}: {outcomes:#?}",
                e.seed,
                e.id
            );
            let (status, outcomes) = effect::assess(e.effects(), &inverted(e, paper));
            assert_eq!(
                status,
                Status::NotReproduced,
                "{:?} {}: {outcomes:#?}",
                e.seed,
                e.id
            );
        }
    }

    #[test]
    fn an_entry_out_of_scope_but_measured_shows_its_effects_and_keeps_its_status() {
        let mut f = Figure::new(
            Seed::Menon2005,
            "Figure 1",
            Kind::Grouped,
            "|a|\n".into(),
            String::new(),
        );
        // A dip as deep as the paper's, and a flat Linux: every effect holds.
        let sizes = ["512 B", "4 KiB", "32 KiB", "256 KiB"];
        for (k, size) in sizes.iter().enumerate() {
            let v = if k == 2 { 0.6 } else { 1.0 };
            f.ours
                .push(Measure::point(format!("Xen-domain0 {size}"), v));
            f.ours.push(Measure::point(format!("Linux {size}"), 1.0));
        }
        let figs = [f];
        let rows = rows(&figs, &[]);
        let r = rows
            .iter()
            .find(|r| r.entry.seed == Seed::Menon2005 && r.entry.id == "Figure 1")
            .unwrap();
        assert_eq!(r.status, Status::OutOfScope);
        assert_eq!(r.outcomes.len(), 2);
        assert!(
            r.outcomes.iter().all(|o| o.holds == Holds::Yes),
            "{:#?}",
            r.outcomes
        );
        assert!(
            r.reason.contains("For the record: 2 of 2 key effects hold"),
            "{}",
            r.reason
        );
    }

    #[test]
    fn a_status_follows_from_the_numbers_and_a_failure_says_why() {
        let mut f = Figure::new(
            Seed::Menon2006,
            "Figure 13",
            Kind::Grouped,
            "|a|\n".into(),
            String::new(),
        );
        let point = |l: &str, v| Measure::point(l, v);
        f.ours = vec![
            point("Guest-none ÷ native", 0.33),
            point("Guest-copy ÷ native", 0.39),
            point("Guest-copy-SP ÷ native", 0.39),
        ];
        let failures = [Failure {
            suite: "menon2005".into(),
            error: "no namespaces".into(),
        }];
        let mut figs = vec![f];
        let row = |figs: &[Figure], seed, id| {
            let rows = rows(figs, &failures);
            let r = rows
                .iter()
                .find(|r| r.entry.seed == seed && r.entry.id == id)
                .unwrap();
            (r.status, r.reason.clone())
        };
        assert_eq!(
            row(&figs, Seed::Menon2006, "Figure 13").0,
            Status::Reproduced
        );
        figs[0].ours[1] = point("Guest-copy ÷ native", 0.2);
        let (st, why) = row(&figs, Seed::Menon2006, "Figure 13");
        assert_eq!(st, Status::NotReproduced, "copy slower than flip: {why}");
        assert!(why.contains("absent or inverted"), "{why}");
        assert_eq!(row(&figs, Seed::Menon2006, "Figure 3").0, Status::Missing);
        let (st, why) = row(&figs, Seed::Menon2005, "Figure 3");
        assert_eq!(st, Status::Missing);
        assert!(why.contains("no namespaces"), "{why}");
        let (st, why) = row(&figs, Seed::Menon2005, "Figure 1");
        assert_eq!(st, Status::OutOfScope, "{why}");
        assert!(why.contains("needs a guest kernel"), "{why}");
        let rows = rows(&figs, &failures);
        let total: usize = counts(&rows).iter().map(|c| c.1).sum();
        assert_eq!(total, 58);
    }
}
