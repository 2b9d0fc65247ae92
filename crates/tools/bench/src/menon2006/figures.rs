//! The paper's figures and tables as seed figures: each throughput figure's
//! bars beside the paper's, and the breakdowns by domain and cost class.

use super::{bar_label, Case, M6Config, M6Summary, Menon2006Report, PaperFigure, FIGURES};
use crate::plot;
use crate::seeds;

/// A paper figure's chart: one bar per configuration (ours ÷ native),
/// the paper's ratio as a marker.
fn figure_chart(r: &Menon2006Report, f: &PaperFigure) -> String {
    let groups: Vec<String> = f
        .bars
        .iter()
        .map(|b| bar_label(f.id, b.0).to_string())
        .collect();
    let values = vec![f.bars.iter().map(|b| r.ours(b.0, b.1)).collect()];
    let paper = f
        .bars
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((0, i, b.2? / f.linux_mbps)))
        .collect();
    plot::grouped(&plot::Grouped {
        title: format!("Menon 2006 {}: throughput ÷ native", f.id),
        y_label: "÷ native (marker: the paper)".into(),
        groups,
        series: vec!["splitnet".into()],
        values,
        paper,
        reference: Some(1.0),
    })
}

/// Figures 6 and 8's chart: cycles per frame by domain, stacked.
fn breakdown_chart(r: &Menon2006Report, id: &str, cfgs: &[M6Config]) -> String {
    let classes = ["guest", "driver", "hv", "wire"];
    let rows: Vec<&M6Summary> = cfgs.iter().filter_map(|&c| r.row(c, Case::Tx)).collect();
    plot::stacked(&plot::Stacked {
        title: format!("Menon 2006 {id}: transmit cycles per frame by domain"),
        y_label: "cycles per 1514-byte frame".into(),
        bars: rows.iter().map(|m| m.config.name().to_string()).collect(),
        classes: classes.iter().map(|c| c.to_string()).collect(),
        values: rows
            .iter()
            .map(|m| {
                classes
                    .iter()
                    .map(|c| m.by_domain.get(*c).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect(),
    })
}

/// A throughput figure for `bench seeds`, with its status: reproduced when
/// every bar was measured, partly when some were.
fn throughput_figure(r: &Menon2006Report, f: &PaperFigure) -> seeds::Figure {
    let measured = f.bars.iter().filter(|b| r.ours(b.0, b.1).is_some()).count();
    let mut fig = seeds::Figure::new(
        seeds::Seed::Menon2006,
        f.id,
        seeds::Kind::Grouped,
        r.figure_table(f),
        figure_chart(r, f),
    )
    .missing_if(measured == 0);
    fig.ours = f
        .bars
        .iter()
        .filter_map(|b| {
            Some((
                format!("{} ÷ native", bar_label(f.id, b.0)),
                r.ours(b.0, b.1)?,
            ))
        })
        .collect();
    if measured > 0 {
        fig.status = if measured == f.bars.len() {
            seeds::Status::Reproduced
        } else {
            seeds::Status::Partly
        };
        fig.reason = if measured == f.bars.len() {
            f.note.to_string()
        } else {
            format!("{measured} of {} bars measured; {}", f.bars.len(), f.note)
        };
    }
    fig
}

/// The paper's figures and tables from a run, for `bench seeds`.
pub fn figures(r: &Menon2006Report) -> Vec<seeds::Figure> {
    use seeds::{Figure, Kind, Seed, Status};
    let mut out = Vec::new();
    let t1 = [M6Config::XenDriver, M6Config::GuestNone]
        .iter()
        .any(|&c| r.row(c, Case::Tx).is_some());
    let mut table1 = Figure::new(
        Seed::Menon2006,
        "Table 1",
        Kind::Table,
        r.table1(),
        String::new(),
    )
    .missing_if(!t1);
    if t1 {
        table1.status = Status::Reproduced;
        table1.reason =
            "Linux, the driver domain as endpoint and the Xen 2.0 guest, both directions".into();
        table1.ours = [
            (M6Config::XenDriver, "driver"),
            (M6Config::GuestNone, "guest"),
        ]
        .iter()
        .flat_map(|&(c, n)| {
            [(Case::Rx, "RX"), (Case::Tx, "TX")]
                .into_iter()
                .filter_map(move |(k, d)| Some((format!("{n} {d} ÷ native"), r.ours(c, k)?)))
        })
        .collect();
    }
    out.push(table1);
    out.extend(FIGURES.iter().map(|f| throughput_figure(r, f)));
    for (id, cfgs) in [
        ("Figure 6", &[M6Config::GuestNone, M6Config::GuestHigh][..]),
        (
            "Figure 8",
            &[M6Config::GuestHigh, M6Config::GuestHighIoc][..],
        ),
    ] {
        let measured = cfgs.iter().all(|&c| r.row(c, Case::Tx).is_some());
        let mut f = Figure::new(
            Seed::Menon2006,
            id,
            Kind::Stacked,
            r.breakdown_table(),
            breakdown_chart(r, id, cfgs),
        )
        .missing_if(!measured);
        if measured {
            f.status = Status::Reproduced;
            f.reason = if id == "Figure 6" {
                r.high_level_factors()
            } else {
                r.ioc_cut()
            };
        }
        out.push(f);
    }
    for id in ["Figure 9", "Figure 12"] {
        let mut f = Figure::new(
            Seed::Menon2006,
            id,
            Kind::Table,
            String::new(),
            String::new(),
        );
        f.status = Status::NotMeasurableHere;
        f.reason = "TLB misses need a hardware PMU; this machine has none (`splitnet profile --events` says so)".into();
        out.push(f);
    }
    out
}
