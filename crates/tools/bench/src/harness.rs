//! The harness every suite runs under: the options they share, one
//! ratio-to-reference and grouping path for their summaries, and the
//! [`Suite`] trait through which `splitnet bench` runs any of them.

use crate::seeds::{self, Figure};
use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;

/// The options every suite that drives `splitnet` shares.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `splitnet` executable (to bring topologies up and down).
    pub exe: PathBuf,
    /// Run directory for splitnet's hv.
    pub run_dir: PathBuf,
    /// Fewer samples, for a quick look.
    pub quick: bool,
    /// Independent runs, each from a fresh start.
    pub runs: usize,
    /// Seconds per flow.
    pub secs: u32,
    /// Progress lines on stderr.
    pub progress: bool,
    /// The paper's machine this run stands in for, if any
    /// ([`crate::machine`]); `None` is this host as it is.
    pub paper: Option<crate::machine::PaperMachine>,
    /// The run is rootless: in a user namespace of the user's own, where
    /// no cgroup is writable and the host's namespace is where it runs.
    pub rootless: bool,
}

impl RunOptions {
    /// A progress line on stderr, `bench SUITE: msg`, when asked for.
    pub fn say(&self, suite: &str, msg: &str) {
        if self.progress {
            eprintln!("bench {suite}: {msg}");
        }
    }

    /// A progress status on stderr that the next one overwrites, `SUITE:
    /// what`, when asked for.
    pub fn status(&self, suite: &str, what: &str) {
        if self.progress {
            eprint!("\r{suite}: {what}                              ");
            let _ = std::io::Write::flush(&mut std::io::stderr());
        }
    }

    /// `runs` (at least one) of `secs` seconds per flow, with progress lines.
    pub fn new(exe: PathBuf, run_dir: PathBuf, quick: bool, runs: usize, secs: u32) -> RunOptions {
        RunOptions {
            exe,
            run_dir,
            quick,
            runs: runs.max(1),
            secs,
            progress: true,
            paper: None,
            rootless: false,
        }
    }
}

/// What `splitnet bench` was asked, as every suite reads it: the options
/// they share and the filters a suite may take up.
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// The `splitnet` executable.
    pub exe: PathBuf,
    /// splitnet's run directory (suites bring their topologies up in its
    /// `bench/` folder).
    pub run_dir: PathBuf,
    pub quick: bool,
    /// Independent runs (default 3, or 1 with `quick`).
    pub runs: Option<usize>,
    pub seconds: Option<u32>,
    pub iterations: Option<usize>,
    pub configs: Vec<String>,
    pub workloads: Vec<String>,
    pub sizes: Vec<u32>,
    pub spin_us: Option<u32>,
    /// soak: minutes to run.
    pub minutes: Option<f64>,
    /// soak: the seed its sequence of events is drawn from.
    pub seed: Option<u64>,
    pub profile: bool,
    /// `--machine`: the paper's machine or this host's; `None` is the
    /// suite's default ([`Suite::machines`]).
    pub machine: Option<crate::machine::Machine>,
    /// `--nic`: how the paper's machine rates its NICs; `None` is the
    /// suite's default.
    pub nic: Option<crate::machine::NicRate>,
    /// The folder results go into, if any.
    pub out: Option<PathBuf>,
    /// The run is rootless ([`RunOptions::rootless`]).
    pub rootless: bool,
}

impl Args {
    /// The runs asked for, or the default: 3, or 1 with `quick`.
    pub fn runs(&self) -> usize {
        self.runs.unwrap_or(if self.quick { 1 } else { 3 })
    }

    /// Where suites run their splitnet: `bench/` in the run directory.
    pub fn bench_dir(&self) -> PathBuf {
        self.run_dir.join("bench")
    }

    /// `--seconds`, raised to at least `min`, over a suite's default.
    pub fn seconds_into(&self, common: &mut RunOptions, min: u32) {
        if let Some(s) = self.seconds {
            common.secs = s.max(min);
        }
    }

    /// Each of `names` parsed (`--configs`, `--workloads`).
    pub fn parsed<T>(names: &[String]) -> anyhow::Result<Vec<T>>
    where
        T: std::str::FromStr<Err = anyhow::Error>,
    {
        names.iter().map(|c| c.parse()).collect()
    }
}

/// What a suite produced: its JSON, its table, its main chart, any further
/// charts by file name, and the profile of the whole run when asked for.
pub struct Output {
    pub json: String,
    pub table: String,
    pub chart: String,
    pub charts: Vec<(String, String)>,
    pub profile: Option<prof::Profile>,
    /// Why the run failed its rules, when a suite's rules fail it
    /// (`splitnet bench` writes the files, then exits non-zero).
    pub failed: Option<String>,
}

impl Output {
    /// `report` as pretty JSON with its table and chart; no further charts
    /// and no profile.
    pub fn of(report: &impl Serialize, table: String, chart: String) -> anyhow::Result<Output> {
        Ok(Output {
            json: serde_json::to_string_pretty(report)?,
            table,
            chart,
            charts: Vec::new(),
            profile: None,
            failed: None,
        })
    }

    /// The same output with further charts.
    pub fn with_charts(mut self, charts: Vec<(String, String)>) -> Output {
        self.charts = charts;
        self
    }
    /// The files `--out DIR` holds, by name: results.json, results.md,
    /// chart.svg, the further charts, and the profile as JSON and SVG.
    pub fn files(&self) -> Vec<(String, String)> {
        let mut files = vec![
            ("results.json".to_string(), self.json.clone()),
            ("results.md".to_string(), self.table.clone()),
            ("chart.svg".to_string(), self.chart.clone()),
        ];
        files.extend(self.charts.iter().cloned());
        if let Some(p) = &self.profile {
            files.push(("profile.json".into(), p.to_json()));
            files.push(("profile.svg".into(), p.to_svg()));
        }
        files
    }
}

/// A benchmark suite: what `splitnet bench NAME` runs. The harness owns
/// the options, the output files and the seeds report; a suite says what
/// to run and which seed figures its report holds.
pub trait Suite: Sync {
    /// The name `splitnet bench` knows it by.
    fn name(&self) -> &'static str;

    /// Runs the suite as `args` ask.
    fn run(&self, args: &Args) -> anyhow::Result<Output>;

    /// How to read the seed figures out of the suite's saved report;
    /// `None` for a suite that measures no seed figure.
    fn seeds(&self) -> Option<seeds::Reader> {
        None
    }

    /// The machines it can measure on ([`crate::machine`]), its default
    /// first.
    fn machines(&self) -> &'static [crate::machine::Machine] {
        &[crate::machine::Machine::Modern]
    }

    /// Whether it rates the paper's NICs as `--nic` says.
    fn takes_nic(&self) -> bool {
        false
    }
}

/// Refuses a `--nic` that `suite` would not read, or that `--machine
/// modern` makes moot.
pub fn check_nic(suite: &dyn Suite, args: &Args) -> anyhow::Result<()> {
    if args.nic.is_none() {
        return Ok(());
    }
    if !suite.takes_nic() {
        anyhow::bail!(
            "bench {} does not take --nic; only menon2006 and menon2005 rate the paper's NICs by it",
            suite.name()
        );
    }
    if args.machine == Some(crate::machine::Machine::Modern) {
        anyhow::bail!("--nic rates the paper's NICs; --machine modern has none");
    }
    Ok(())
}

/// Refuses a `--machine` that `suite` cannot measure on, naming those it can.
pub fn check_machine(suite: &dyn Suite, args: &Args) -> anyhow::Result<()> {
    let Some(m) = args.machine else {
        return Ok(());
    };
    let can = suite.machines();
    if can.contains(&m) {
        return Ok(());
    }
    let names: Vec<&str> = can.iter().map(|m| m.name()).collect();
    anyhow::bail!(
        "bench {} cannot run on the {} machine; it runs on: {}",
        suite.name(),
        m.name(),
        names.join(", ")
    )
}

/// The run loop every suite takes: `runs` independent runs (at least one),
/// each measuring every case, so drift on a noisy machine spreads over all
/// cases alike rather than landing on one (medians over runs, Menon 2006
/// §6). Odd runs take the cases in reverse order: a case that always ran
/// right after another would inherit its after-effects (a warm or busy
/// host), and two cases compared in one run would always meet in the same
/// order. A step's error says which run and case it came from.
pub fn each_run<C>(
    runs: usize,
    cases: &[C],
    name: impl Fn(&C) -> String,
    mut step: impl FnMut(usize, &C) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let runs = runs.max(1);
    for run in 0..runs {
        let order: Box<dyn Iterator<Item = &C>> = match run % 2 {
            0 => Box::new(cases.iter()),
            _ => Box::new(cases.iter().rev()),
        };
        for c in order {
            step(run, c).with_context(|| match name(c) {
                n if n.is_empty() => format!("run {}/{runs}", run + 1),
                n => format!("run {}/{runs}, {n}", run + 1),
            })?;
        }
    }
    Ok(())
}

/// [`each_run`] for a suite whose run is one step.
pub fn runs(runs: usize, mut step: impl FnMut(usize) -> anyhow::Result<()>) -> anyhow::Result<()> {
    each_run(runs, &[()], |_| String::new(), |run, _| step(run))
}

/// The seed figures `figures` finds in a report read back from `json`.
pub fn figures_of<R: DeserializeOwned>(
    suite: &str,
    json: &str,
    figures: fn(&R) -> Vec<Figure>,
) -> anyhow::Result<Vec<Figure>> {
    let r =
        serde_json::from_str(json).with_context(|| format!("reading bench {suite}'s report"))?;
    // The machine the report names, or the modern one for a report that
    // names none.
    let v: serde_json::Value = serde_json::from_str(json)?;
    let machine = v["machine"]
        .as_str()
        .map_or_else(crate::machine::modern_note, str::to_string);
    let mut figs = figures(&r);
    for f in &mut figs {
        f.machine.clone_from(&machine);
    }
    Ok(figs)
}

/// Each record's value over its reference's, the one path every suite's
/// ratios take (against native or Linux of the same run and case, Menon
/// 2006 §6): `reference` gives a reference record's key, `wants` the key a
/// record's reference has; `None` where there is none, or where either
/// value is missing or the reference's is not positive.
pub fn ratios<R, K: PartialEq>(
    records: &[R],
    reference: impl Fn(&R) -> Option<K>,
    wants: impl Fn(&R) -> K,
    value: impl Fn(&R) -> Option<f64>,
) -> Vec<Option<f64>> {
    let refs: Vec<(K, Option<f64>)> = records
        .iter()
        .filter_map(|r| Some((reference(r)?, value(r))))
        .collect();
    records
        .iter()
        .map(|r| {
            let want = wants(r);
            let n = refs.iter().find(|(k, _)| *k == want)?.1?;
            (n > 0.0).then_some(value(r)? / n)
        })
        .collect()
}

/// The records of each key in `keys`, in that order, leaving out keys
/// with none: the rows a summary takes medians over.
pub fn groups<R, K: PartialEq + Copy>(
    records: &[R],
    keys: impl IntoIterator<Item = K>,
    key: impl Fn(&R) -> K,
) -> Vec<(K, Vec<&R>)> {
    keys.into_iter()
        .map(|k| (k, records.iter().filter(|r| key(r) == k).collect()))
        .filter(|(_, rs): &(K, Vec<&R>)| !rs.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_is_refused_where_no_paper_nic_reads_it() {
        use crate::machine::{Machine, NicRate};
        let suite = |n| crate::suites::by_name(n).unwrap();
        let scaled = Args {
            nic: Some(NicRate::Scaled),
            ..Args::default()
        };
        assert!(check_nic(suite("menon2006"), &scaled).is_ok());
        assert!(check_nic(suite("menon2005"), &scaled).is_ok());
        assert!(check_nic(suite("baseline"), &Args::default()).is_ok());
        let e = check_nic(suite("baseline"), &scaled).unwrap_err();
        assert!(
            e.to_string().contains("only menon2006 and menon2005"),
            "{e}"
        );
        let modern = Args {
            machine: Some(Machine::Modern),
            ..scaled
        };
        let e = check_nic(suite("menon2006"), &modern).unwrap_err();
        assert!(e.to_string().contains("--machine modern"), "{e}");
    }

    #[test]
    fn a_ratio_is_over_the_reference_of_the_same_key_and_none_without_one() {
        // (is native, run, Gbit/s)
        let rs = [
            (true, 0, 2.0),
            (false, 0, 1.0),
            (false, 1, 1.0),
            (true, 2, 0.0),
            (false, 2, 1.0),
        ];
        let native = |r: &(bool, usize, f64)| r.0.then_some(r.1);
        let x = ratios(&rs, native, |r| r.1, |r| Some(r.2));
        assert_eq!(x, [Some(1.0), Some(0.5), None, None, None]);
    }

    #[test]
    fn each_run_measures_every_case_per_run_alternating_order_and_names_a_failing_step() {
        let mut seen = Vec::new();
        each_run(
            2,
            &['a', 'b'],
            |c| c.to_string(),
            |r, &c| {
                seen.push((r, c));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, [(0, 'a'), (0, 'b'), (1, 'b'), (1, 'a')]);
        let e = each_run(
            3,
            &['a', 'b'],
            |c| format!("case {c}"),
            |r, &c| {
                anyhow::ensure!(!(r == 1 && c == 'b'), "iperf3 refused");
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(format!("{e:#}"), "run 2/3, case b: iperf3 refused");
        let mut n = 0;
        runs(0, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1, "zero runs still runs once");
        let e = runs(2, |r| {
            anyhow::ensure!(r == 0, "no route");
            Ok(())
        })
        .unwrap_err();
        assert_eq!(format!("{e:#}"), "run 2/2: no route");
    }

    #[test]
    fn groups_follow_the_keys_order_and_leave_out_empty_ones() {
        let rs = [(2, 'a'), (1, 'b'), (2, 'c')];
        let g = groups(&rs, [1, 3, 2], |r| r.0);
        let got: Vec<(i32, String)> = g
            .into_iter()
            .map(|(k, v)| (k, v.iter().map(|r| r.1).collect()))
            .collect();
        assert_eq!(got, [(1, "b".to_string()), (2, "ac".to_string())]);
    }

    #[test]
    fn out_holds_the_results_the_table_and_every_chart() {
        let o = Output::of(
            &serde_json::json!({"suite": "x"}),
            "| t |".into(),
            "<svg/>".into(),
        )
        .unwrap()
        .with_charts(vec![("stages.svg".into(), "<svg/>".into())]);
        let names: Vec<String> = o.files().into_iter().map(|f| f.0).collect();
        assert_eq!(
            names,
            ["results.json", "results.md", "chart.svg", "stages.svg"]
        );
        assert_eq!(o.files()[1].1, "| t |");
    }
}
