//! The seeds report (`splitnet bench seeds`): every result figure and table
//! of the five seed documents, each with a status, a one-line reason, the
//! paper's numbers and, where a suite measured it, ours beside them.
//!
//! The catalog ([`catalog`]) gives each entry its default status; a suite's
//! `figures(&Report)` replaces it with what the run measured.

mod catalog;
mod render;

use serde::{Deserialize, Serialize};

pub use render::{render, write, Page};

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
    NotMeasurableHere,
    OutOfScope,
    Missing,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Reproduced,
        Status::Partly,
        Status::NotMeasurableHere,
        Status::OutOfScope,
        Status::Missing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::Partly => "partly",
            Status::NotMeasurableHere => "not measurable here",
            Status::OutOfScope => "out of scope",
            Status::Missing => "missing",
        }
    }
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
    pub status: Status,
    pub reason: &'static str,
    /// The paper's key numbers: (what, value).
    pub paper: &'static [(&'static str, f64)],
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
    pub status: Status,
    pub reason: String,
    pub paper: Numbers,
    pub ours: Numbers,
}

impl Figure {
    /// A figure for the catalog's `seed`/`id`, taking its title, status,
    /// reason and the paper's numbers from the catalog (unknown ids get
    /// status Partly and no paper numbers).
    pub fn new(seed: Seed, id: &str, kind: Kind, table: String, svg: String) -> Figure {
        let e = entry(seed, id);
        Figure {
            seed,
            id: id.to_string(),
            title: e.map_or_else(String::new, |e| e.title.to_string()),
            kind,
            table,
            svg,
            status: e.map_or(Status::Partly, |e| e.status),
            reason: e.map_or_else(String::new, |e| e.reason.to_string()),
            paper: e.map_or_else(Vec::new, |e| {
                e.paper.iter().map(|&(l, v)| (l.to_string(), v)).collect()
            }),
            ours: Vec::new(),
        }
    }

    /// Marks the figure missing when the run measured nothing for it
    /// (`empty`), saying so.
    pub fn missing_if(mut self, empty: bool) -> Figure {
        if empty {
            self.status = Status::Missing;
            self.reason =
                "the run measured nothing for it (a configuration or case left out?)".into();
        }
        self
    }
}

/// A suite that did not produce its figures, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub suite: String,
    pub error: String,
}

/// One catalog entry as the report shows it: the catalog's defaults, or
/// the figures a suite measured for it.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    pub entry: &'static Entry,
    pub status: Status,
    pub reason: String,
    pub figures: Vec<&'a Figure>,
}

/// Every catalog entry with the figures measured for it. The best status
/// among an entry's figures wins; an entry whose suite failed says why.
pub fn rows<'a>(figures: &'a [Figure], failures: &[Failure]) -> Vec<Row<'a>> {
    catalog()
        .iter()
        .map(|e| {
            let mut figs: Vec<&Figure> = figures
                .iter()
                .filter(|f| f.seed == e.seed && f.id == e.id)
                .collect();
            figs.sort_by_key(|f| f.status);
            let best = figs.iter().min_by_key(|f| f.status);
            let failed = failures.iter().find(|f| f.suite == e.suite);
            let (status, reason) = match (best, failed) {
                (Some(f), _) => (f.status, f.reason.clone()),
                (None, Some(f)) => (
                    Status::Missing,
                    format!("`splitnet bench {}` failed: {}", f.suite, f.error),
                ),
                (None, None) => (e.status, e.reason.to_string()),
            };
            Row {
                entry: e,
                status,
                reason,
                figures: figs,
            }
        })
        .collect()
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
            assert!(!a.reason.is_empty() && !a.title.is_empty(), "{}", a.id);
            assert!(
                c[i + 1..].iter().all(|b| (b.seed, b.id) != (a.seed, a.id)),
                "{:?} {} twice",
                a.seed,
                a.id
            );
        }
    }

    #[test]
    fn a_measured_figure_replaces_the_default_and_a_failure_says_why() {
        let mut f = Figure::new(
            Seed::Menon2006,
            "Figure 5",
            Kind::Grouped,
            "|a|\n".into(),
            String::new(),
        );
        f.status = Status::Partly;
        f.reason = "measured".into();
        let failures = [Failure {
            suite: "menon2005".into(),
            error: "no namespaces".into(),
        }];
        let binding = [f];
        let rows = rows(&binding, &failures);
        let row = |seed, id| {
            rows.iter()
                .find(|r| r.entry.seed == seed && r.entry.id == id)
                .unwrap()
        };
        let fig5 = row(Seed::Menon2006, "Figure 5");
        assert_eq!(
            (fig5.status, fig5.reason.as_str()),
            (Status::Partly, "measured")
        );
        assert_eq!(row(Seed::Menon2006, "Figure 3").status, Status::Missing);
        let m05 = row(Seed::Menon2005, "Figure 1");
        assert!(m05.reason.contains("no namespaces"), "{}", m05.reason);
        let total: usize = counts(&rows).iter().map(|c| c.1).sum();
        assert_eq!(total, 58);
    }
}
