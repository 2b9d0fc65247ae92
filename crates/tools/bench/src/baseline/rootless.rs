//! The targets of splitnet without root (`bench baseline --rootless`),
//! computed from the numbers: guest↔guest through rootless splitnet
//! against rootful splitnet's, measured by root in the same invocation,
//! and guest→host through splitnet's pasta uplink against pasta alone
//! from a plain namespace, in the same run.

use super::{BaselineReport, Record, RootlessTarget, Summary, ROOTLESS_FLOOR};
use crate::netenv::Workload;
use crate::stats::median;
use crate::testbed::{Config, Direction};

/// The workload the targets are stated in: bulk TCP.
const WORKLOAD: Workload = Workload::TcpZerocopy;

/// The median Gbit/s of `config` in `dir` among summary rows `rows`.
fn gbps(rows: &[Summary], config: Config, dir: Direction) -> Option<f64> {
    rows.iter()
        .find(|m| m.config == config && m.direction == dir && m.workload == WORKLOAD)
        .map(|m| m.median_gbps)
}

/// Per run, `a`'s Gbit/s over `b`'s in direction `dir`; their median.
fn paired(records: &[Record], a: Config, b: Config, dir: Direction) -> Option<(f64, usize)> {
    let of = |c: Config, run: usize| {
        records
            .iter()
            .find(|r| r.config == c && r.run == run && r.direction == dir && r.workload == WORKLOAD)
            .map(|r| r.gbps)
    };
    let ratios: Vec<f64> = records
        .iter()
        .filter(|r| r.config == a && r.direction == dir && r.workload == WORKLOAD)
        .filter_map(|r| Some(r.gbps / of(b, r.run)?))
        .filter(|x| x.is_finite())
        .collect();
    (!ratios.is_empty()).then(|| (median(&ratios), ratios.len()))
}

/// A target met or missed by `ratio` against [`ROOTLESS_FLOOR`], or not
/// measured, saying why.
fn target(what: &str, ratio: Option<f64>, detail: String, missing: &str) -> RootlessTarget {
    match ratio {
        Some(r) => RootlessTarget {
            what: what.to_string(),
            measured: format!("{r:.3} ({detail})"),
            met: Some(r >= ROOTLESS_FLOOR),
        },
        None => RootlessTarget {
            what: what.to_string(),
            measured: format!("not measured: {missing}"),
            met: None,
        },
    }
}

impl BaselineReport {
    /// The rootless targets, each met or not by the numbers of this run
    /// (and of [`BaselineReport::rootful`], when root measured it).
    pub fn rootless_targets(&self) -> Vec<RootlessTarget> {
        let g2g = Direction::GuestToGuest;
        let rl = gbps(&self.summary, Config::SplitnetDefault, g2g);
        let rf = gbps(&self.rootful, Config::SplitnetDefault, g2g);
        let missing = match (rl, rf) {
            (None, _) => "splitnet-default's guest-to-guest did not run rootless",
            _ => "the rootful reference needs root: run `splitnet bench baseline --rootless --user NAME` as root",
        };
        let first = target(
            "guest↔guest TCP rootless at least 0.9 of rootful splitnet's",
            rl.zip(rf).map(|(a, b)| a / b),
            format!(
                "{:.2} ÷ {:.2} Gbit/s, medians",
                rl.unwrap_or(0.0),
                rf.unwrap_or(0.0)
            ),
            missing,
        );
        let pasta = paired(
            &self.records,
            Config::SplitnetPasta,
            Config::Pasta,
            Direction::Tx,
        );
        let second = target(
            "guest→host TCP through the pasta uplink at least 0.9 of pasta alone",
            pasta.map(|p| p.0),
            format!(
                "splitnet-pasta ÷ pasta, median of {} run(s)",
                pasta.map_or(0, |p| p.1)
            ),
            "splitnet-pasta and pasta did not both run",
        );
        vec![first, second]
    }

    /// The rootless targets and the rootful reference, as Markdown.
    pub fn rootless_table(&self) -> String {
        let mut s = String::from(
            "### Without root\n\nEvery configuration above ran as the user, in a user namespace of the user's own. \
             With no cgroup of the user's, a domain's CPU time is its process's, and applications' own is not counted.\n\n\
             | target | measured | |\n|---|---|---|\n",
        );
        for t in &self.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "missed",
                None => "not measured",
            };
            s += &format!("| {} | {} | {verdict} |\n", t.what, t.measured);
        }
        if !self.rootful.is_empty() {
            s += "\nThe rootful reference, measured by root in the same invocation:\n\n\
                  | config | direction | workload | Gbit/s (median) | ratio to native |\n|---|---|---|---:|---:|\n";
            for m in &self.rootful {
                let r = m
                    .median_ratio_to_native
                    .map_or("-".into(), |r| format!("{r:.3}"));
                s += &format!(
                    "| {} | {} | {} | {:.2} | {r} |\n",
                    m.config.name(),
                    m.direction.name(),
                    m.workload.name(),
                    m.median_gbps
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record(config: Config, dir: Direction, run: usize, gbps: f64) -> Record {
        Record {
            config,
            direction: dir,
            workload: WORKLOAD,
            run,
            gbps,
            ratio_to_native: None,
            ratio_to_forwarder: None,
            cpu_seconds: BTreeMap::new(),
            cycles_per_packet: BTreeMap::new(),
            packets: 0.0,
            latency: None,
            profile: None,
        }
    }

    fn summary(config: Config, dir: Direction, gbps: f64) -> Summary {
        Summary {
            config,
            direction: dir,
            workload: WORKLOAD,
            runs: 1,
            median_gbps: gbps,
            min_gbps: gbps,
            max_gbps: gbps,
            median_ratio_to_native: None,
            median_ratio_to_forwarder: None,
            median_cycles_per_packet: 0.0,
            latency: None,
        }
    }

    fn report(
        records: Vec<Record>,
        summary: Vec<Summary>,
        rootful: Vec<Summary>,
    ) -> BaselineReport {
        BaselineReport {
            suite: "baseline",
            tsc_mhz: 1.0,
            runs: 1,
            seconds_per_flow: 1,
            spin_us: None,
            records,
            summary,
            skipped: Vec::new(),
            loops: Vec::new(),
            rootless: true,
            rootful,
            targets: Vec::new(),
        }
    }

    #[test]
    fn each_verdict_follows_from_the_ratio_and_a_missing_reference_is_said() {
        let (g2g, tx) = (Direction::GuestToGuest, Direction::Tx);
        let sd = Config::SplitnetDefault;
        let records = vec![
            record(Config::Pasta, tx, 0, 2.0),
            record(Config::SplitnetPasta, tx, 0, 1.7),
            record(Config::Pasta, tx, 1, 1.0),
            record(Config::SplitnetPasta, tx, 1, 1.0),
            record(Config::Pasta, tx, 2, 4.0),
            record(Config::SplitnetPasta, tx, 2, 3.0),
        ];
        let r = report(
            records.clone(),
            vec![summary(sd, g2g, 8.9)],
            vec![summary(sd, g2g, 10.0)],
        );
        let t = r.rootless_targets();
        assert_eq!(t[0].met, Some(false), "{:?}", t[0]);
        assert!(t[0].measured.starts_with("0.890"), "{:?}", t[0]);
        // Per run 0.85, 1.0, 0.75: the median is 0.85, under 0.9.
        assert_eq!(t[1].met, Some(false), "{:?}", t[1]);
        assert!(t[1].measured.starts_with("0.850"), "{:?}", t[1]);
        let r = report(records, vec![summary(sd, g2g, 9.0)], Vec::new());
        let t = r.rootless_targets();
        assert_eq!(t[0].met, None);
        assert!(
            t[0].measured.contains("--rootless --user NAME"),
            "{:?}",
            t[0]
        );
        let r = report(Vec::new(), Vec::new(), vec![summary(sd, g2g, 9.0)]);
        let t = r.rootless_targets();
        assert_eq!((t[0].met, t[1].met), (None, None));
        assert!(t[0].measured.contains("did not run rootless"));
    }
}
