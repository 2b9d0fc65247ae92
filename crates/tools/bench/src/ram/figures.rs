//! The thesis's figures from a run, for `bench seeds`: per figure the
//! thesis's rows beside ours, cycles per frame by domain, and the measures
//! the catalog's key effects name, each a median with its range over runs.

use super::{Case, RamConfig, RamRecord, RamReport};
use crate::netenv::PAYLOAD_PER_FRAME;
use crate::plot;
use crate::seeds::{self, Claim, Measure};
use std::collections::BTreeMap;

/// The thesis's Table 2.1 classes as our profile names them, with the
/// thesis's name (its "Xen" is our hypervisor).
const CLASSES: [(&str, &str); 9] = [
    ("driver", "driver"),
    ("network", "network"),
    ("netback", "netback"),
    ("netfront", "netfront"),
    ("grant", "grant"),
    ("hypervisor", "Xen"),
    ("inter_domain_copy", "inter-domain copy"),
    ("usercopy", "usercopy"),
    ("other", "other"),
];

/// The classes the thesis counts as the grant mechanism's: grant
/// operations and the hypervisor's work on them (Figure 4.4).
const GRANT: [&str; 2] = ["grant", "hypervisor"];

/// The roles the thesis splits cycles into, with its names.
const ROLES: [(&str, &str); 2] = [("driver", "driver domain"), ("guest", "guest")];

pub(super) fn case_label(k: Case) -> &'static str {
    match k {
        Case::Rx => "RX",
        Case::RxGso => "RX GSO",
        Case::Tx => "TX",
        Case::RxTwoGuests => "RX two guests",
        Case::RxSameCore => "RX same core",
        Case::TxSameCore => "TX same core",
        Case::RxSplitCores => "RX split cores",
        Case::TxSplitCores => "TX split cores",
    }
}

/// A measure from one value per run; it keeps each run's value (so two
/// configurations compare within each run) when every one of the report's
/// `runs` gave one.
fn per_run(
    label: String,
    rs: &[&RamRecord],
    runs: usize,
    f: impl Fn(&RamRecord) -> Option<f64>,
) -> Option<Measure> {
    let v = rs.iter().filter_map(|r| Some((r.run, f(r)?))).collect();
    Measure::of_run_values(label, runs, v)
}

/// Every measure of one (configuration, case): total cycles per frame
/// (and over native's), throughput over native's, each role's cycles and
/// CPU use, each class's cycles and the grant mechanism's share.
fn measures_of(r: &RamReport, cfg: RamConfig, case: Case) -> Vec<Measure> {
    let Some(m) = r.row(cfg, case) else {
        return Vec::new();
    };
    let at = format!("{} {}", cfg.name(), case_label(case));
    let rs: Vec<&RamRecord> = r
        .records
        .iter()
        .filter(|x| x.config == cfg && x.case == case)
        .collect();
    let n = r.runs;
    let total = |x: &RamRecord| x.cycles_per_packet.get("total").copied();
    let mut out = vec![per_run(format!("{at} cycles"), &rs, n, total)
        .unwrap_or_else(|| Measure::of(format!("{at} cycles"), &m.cycles_per_packet))];
    let x_native = |x: &RamRecord| x.cycles_x_native;
    out.extend(
        per_run(format!("{at} cycles ÷ native"), &rs, n, x_native).or_else(|| {
            m.cycles_x_native
                .map(|s| Measure::of(format!("{at} cycles ÷ native"), &s))
        }),
    );
    let ratio = |x: &RamRecord| x.ratio_to_native;
    out.extend(
        per_run(format!("{at} ÷ native (Gb/s)"), &rs, n, ratio).or_else(|| {
            m.ratio_to_native
                .map(|s| Measure::of(format!("{at} ÷ native (Gb/s)"), &s))
        }),
    );
    // A domain's share of one CPU: its cycles per frame × frames per second.
    let tsc_hz = r.tsc_mhz * 1e6;
    for (role, name) in ROLES {
        let cycles = |x: &RamRecord| role_cycles(x, role);
        out.extend(per_run(format!("{at} {name}"), &rs, n, cycles));
        let busy =
            |x: &RamRecord| Some(cycles(x)? * x.gbps * 1e9 / 8.0 / PAYLOAD_PER_FRAME / tsc_hz);
        out.extend(per_run(format!("{at} {name} CPU"), &rs, n, busy));
        let share = |x: &RamRecord| grant_share(&classes_of(x, role), role_cycles(x, role)?);
        out.extend(per_run(format!("{at} {name} grant share"), &rs, n, share));
    }
    for (class, name) in CLASSES {
        let of = |x: &RamRecord| x.by_class.get(class).copied();
        out.extend(per_run(format!("{at} class {name}"), &rs, n, of));
        let of_driver = |x: &RamRecord| classes_of(x, "driver").get(class).copied();
        out.extend(per_run(
            format!("{at} driver domain class {name}"),
            &rs,
            n,
            of_driver,
        ));
    }
    let share = |x: &RamRecord| grant_share(&x.by_class, *x.cycles_per_packet.get("total")?);
    out.extend(per_run(format!("{at} grant share"), &rs, n, share));
    out
}

/// A record's role cycles as the thesis counts them ([`super::thesis_role`]).
fn role_cycles(x: &RamRecord, role: &str) -> Option<f64> {
    super::thesis_role(&x.by_domain, role)
}

/// A role's cycles per frame by class, hv's with the driver domain's as in
/// [`role_cycles`].
fn classes_of(x: &RamRecord, role: &str) -> BTreeMap<String, f64> {
    let mut out = x.role_classes.get(role).cloned().unwrap_or_default();
    if role == "driver" && !out.is_empty() {
        for (c, v) in x.role_classes.get("hv").into_iter().flatten() {
            *out.entry(c.clone()).or_insert(0.0) += v;
        }
    }
    out
}

/// The grant mechanism's share (grant operations and the hypervisor) of
/// `total` cycles split as `classes`; None without classes.
fn grant_share(classes: &BTreeMap<String, f64>, total: f64) -> Option<f64> {
    let grant: f64 = GRANT.iter().filter_map(|c| classes.get(*c)).sum();
    (total > 0.0 && !classes.is_empty()).then(|| grant / total)
}

/// The labels an entry's paper numbers and key effects name.
fn labels(e: &seeds::Entry) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = e.paper.iter().map(|p| p.0).collect();
    for fx in e.effects() {
        match fx.what {
            Claim::Order { hi, lo } => out.extend([hi, lo]),
            Claim::Ratio { num, den, .. } => out.extend([num, den]),
            Claim::Level { of, .. } => out.push(of),
            Claim::Dip { points, .. } => out.extend(points),
        }
    }
    out
}

/// A figure's own name for a measure: Figures 2.4 and 2.5 call Orig's
/// total over native's "total ÷ native".
const ALIASES: [(&str, &str, &str); 2] = [
    ("Figure 2.4", "total ÷ native", "Orig RX cycles ÷ native"),
    ("Figure 2.5", "total ÷ native", "Orig TX cycles ÷ native"),
];

/// The measures `id`'s paper numbers and key effects name, out of all
/// of the run's.
fn ours(all: &[Measure], id: &str) -> Vec<Measure> {
    let Some(e) = seeds::entry(seeds::Seed::Ram, id) else {
        return Vec::new();
    };
    let named = |l: &str| -> Option<Measure> {
        let (.., of) = ALIASES.iter().find(|(f, a, _)| *f == id && *a == l)?;
        let m = all.iter().find(|m| m.label == *of)?;
        Some(Measure {
            label: l.to_string(),
            ..m.clone()
        })
    };
    labels(e)
        .into_iter()
        .filter_map(|l| named(l).or_else(|| all.iter().find(|m| m.label == l).cloned()))
        .fold(Vec::new(), |mut out, m| {
            if !out.iter().any(|o: &Measure| o.label == m.label) {
                out.push(m);
            }
            out
        })
}

/// The (configuration, case)s a figure's chart shows.
type Which = Vec<(RamConfig, Case)>;

/// Each figure: its id, the thesis rows it shows, and its chart's bars.
fn charts() -> [(&'static str, &'static str, Which); 13] {
    use Case::*;
    use RamConfig::*;
    let rx = |cs: &[RamConfig]| cs.iter().map(|&c| (c, Rx)).collect::<Vec<_>>();
    let tx = |cs: &[RamConfig]| cs.iter().map(|&c| (c, Tx)).collect::<Vec<_>>();
    [
        ("2.4", "2.4", rx(&[Native, Orig])),
        ("2.5", "2.5", tx(&[Native, Orig])),
        ("3.4", "3.4", rx(&[Native, Orig, Mq])),
        ("3.5", "3.5", rx(&[Orig, Mq])),
        ("4.4", "4.4", vec![(Orig, Rx), (Orig, Tx), (Mq, Rx)]),
        ("4.10", "4.10", rx(&[Native, Orig, Ngm, MqNgm])),
        ("4.11", "4.11", tx(&[Native, Orig, Ngm])),
        ("4.12", "4.12", rx(&[Orig, Ngm, MqNgm])),
        ("4.13", "4.13", tx(&[Orig, Ngm])),
        ("5.1", "5.1", rx(&[MqNgm, LroGuest, LroDriver, Spf, HalfPg])),
        ("5.2", "5.2", rx(&[MqNgm, LroGuest, LroDriver])),
        (
            "6.1",
            "6.1",
            vec![(Orig, Rx), (All, Rx), (All, RxTwoGuests), (All, RxSameCore)],
        ),
        (
            "6.2",
            "ch. 6",
            vec![
                (Orig, Rx),
                (All, Rx),
                (All, RxSameCore),
                (All, RxSplitCores),
                (All, Tx),
            ],
        ),
    ]
}

/// Multi-queue here (ch. 3).
const MQ: &str = "A veth and macvlan sort frames into the guest's queue in kernel software, where \
                  the thesis's NIC did it in hardware before its DMA; that work, and the packet \
                  socket's copy into the posted buffers, is the \"nic\" line, in no domain. Under \
                  Xen's grants (MQ) the queue still lands frames in the driver domain's staging \
                  buffers and hv's grant copy moves them: a grant map here costs more than the copy \
                  it would save. The bridge the queue bypasses is a table lookup in the driver \
                  domain's loop here, where the thesis's was Linux's bridge.";

/// The driver domain here (Figure 2.4's split).
const DRIVER: &str =
    "The driver domain's cycles include hv's, which here are its hypercalls (grant \
                      copies and maps), as Xen ran them on the driver domain's CPU.";

/// What differs in how a figure is measured here, by figure; Figures 3.4
/// and 3.5 add the run's hypercall counts where it has them.
fn note(r: &RamReport, id: &str) -> String {
    match id {
        "2.4" | "2.5" | "4.10" | "4.11" => DRIVER.into(),
        "3.4" | "3.5" => match r.mq_counts() {
            Some(counts) => format!("{MQ} {counts} {DRIVER}"),
            None => format!("{MQ} {DRIVER}"),
        },
        "4.12" | "4.13" => DRIVER.into(),
        "4.4" => format!(
            "Each domain's grant share is its grant operations and hypervisor work over its \
             cycles, from its own profile samples. {DRIVER}"
        ),
        "6.1" => "The shared-cache case is taken with the guest and the driver domain on one \
                  core, the closest placement this host allows."
            .into(),
        "6.2" => {
            "A domain's CPU use is its cycles per frame × frames per second ÷ the TSC rate.".into()
        }
        _ => String::new(),
    }
}

/// A figure's chart in the thesis's form: 6.1 as throughput, 6.2 as CPU
/// use, the others as cycles per frame by domain.
fn chart(r: &RamReport, fig: &str, which: &[(RamConfig, Case)], all: &[Measure]) -> String {
    let at = |c: RamConfig, k: Case| format!("{} {}", c.name(), case_label(k));
    let get = |l: String| all.iter().find(|m| m.label == l).map(|m| m.median);
    match fig {
        "6.1" => {
            // The thesis's one guest before and after, and two guests (§6.2).
            let thesis = [0.32, 0.85, 1.01];
            plot::grouped(&plot::Grouped {
                title: "Ram thesis Figure 6.1: receive throughput ÷ native".into(),
                y_label: "÷ native (marker: the thesis)".into(),
                groups: which.iter().map(|&(c, k)| at(c, k)).collect(),
                series: vec!["splitnet".into()],
                values: vec![which
                    .iter()
                    .map(|&(c, k)| get(format!("{} ÷ native (Gb/s)", at(c, k))))
                    .collect()],
                paper: thesis.iter().enumerate().map(|(i, &v)| (0, i, v)).collect(),
                reference: Some(1.0),
            })
        }
        "6.2" => plot::grouped(&plot::Grouped {
            title: "Ram thesis Figure 6.2: CPU use by domain".into(),
            y_label: "share of one CPU".into(),
            groups: which.iter().map(|&(c, k)| at(c, k)).collect(),
            series: ROLES.iter().map(|r| r.1.to_string()).collect(),
            values: ROLES
                .iter()
                .map(|(_, name)| {
                    which
                        .iter()
                        .map(|&(c, k)| get(format!("{} {name} CPU", at(c, k))))
                        .collect()
                })
                .collect(),
            paper: Vec::new(),
            reference: Some(1.0),
        }),
        _ => r.stacked_for(
            &format!("Ram thesis Figure {fig}: cycles per frame by domain"),
            which,
        ),
    }
}

/// The thesis's figures from a run, for `bench seeds`.
pub fn figures(r: &RamReport) -> Vec<seeds::Figure> {
    let all: Vec<Measure> = RamConfig::ALL
        .into_iter()
        .flat_map(|c| Case::ALL.map(|k| (c, k)))
        .flat_map(|(c, k)| measures_of(r, c, k))
        .collect();
    charts()
        .into_iter()
        .map(|(fig, rows, which)| {
            let id = format!("Figure {fig}");
            let svg = chart(r, fig, &which, &all);
            let mut f = seeds::Figure::new(
                seeds::Seed::Ram,
                &id,
                seeds::Kind::Stacked,
                r.thesis_rows(|t| t.figure.split(", ").any(|f| f == rows)),
                svg,
            )
            .noted(note(r, fig));
            f.ours = ours(&all, &id);
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{add_ratios, summarize, TWO_GUESTS};
    use super::*;
    use std::collections::BTreeMap;

    /// A run of every configuration and case, each with roles and classes.
    fn full_run() -> RamReport {
        let mut rs = Vec::new();
        for cfg in RamConfig::ALL {
            for case in Case::ALL {
                let split = |ks: &[&str]| -> BTreeMap<String, f64> {
                    ks.iter().map(|k| (k.to_string(), 100.0)).collect()
                };
                rs.push(RamRecord {
                    config: cfg,
                    case,
                    run: 0,
                    gbps: 5.0,
                    ratio_to_native: None,
                    cycles_per_packet: [("total".to_string(), 1000.0)].into(),
                    cycles_x_native: None,
                    by_domain: split(&["driver", "guest"]),
                    by_class: split(&CLASSES.map(|c| c.0)),
                    role_classes: ["driver", "guest", "hv"]
                        .map(|r| (r.to_string(), split(&CLASSES.map(|c| c.0))))
                        .into(),
                    locality: None,
                    ops_per_frame: BTreeMap::new(),
                });
            }
        }
        add_ratios(&mut rs);
        RamReport {
            suite: "ram",
            tsc_mhz: 1000.0,
            runs: 1,
            seconds_per_flow: 1,
            wall_seconds: 1.0,
            summary: summarize(&rs),
            records: rs,
            unavailable: Vec::new(),
            chapter6_config: Some(RamConfig::All),
            two_guests: TWO_GUESTS,
            profiled: true,
        }
    }

    #[test]
    fn every_number_a_key_effect_names_is_measured() {
        let figs = figures(&full_run());
        assert_eq!(figs.len(), 13);
        for f in &figs {
            let e = seeds::entry(seeds::Seed::Ram, &f.id).expect("a catalog entry");
            for l in labels(e).into_iter().filter(|l| !l.is_empty()) {
                assert!(f.ours.iter().any(|m| m.label == l), "{}: {l}", f.id);
            }
        }
    }

    #[test]
    fn the_driver_domain_counts_hvs_cycles_and_classes_with_its_own() {
        let figs = figures(&full_run());
        let f = figs.iter().find(|f| f.id == "Figure 4.4").unwrap();
        let of = |l: &str| f.ours.iter().find(|m| m.label == l).unwrap().median;
        // Nine classes of 100 cycles in each of drv, hv and the guest, two of
        // them the grant mechanism's; the driver domain's 100 cycles and the
        // guest's 100 (this run measured no hv cycles).
        assert!((of("Orig RX driver domain grant share") - 400.0 / 100.0).abs() < 1e-9);
        assert!((of("Orig RX guest grant share") - 200.0 / 100.0).abs() < 1e-9);
    }

    #[test]
    fn cpu_use_is_cycles_per_frame_times_frames_per_second() {
        let figs = figures(&full_run());
        let f = figs.iter().find(|f| f.id == "Figure 6.2").unwrap();
        let cpu = f
            .ours
            .iter()
            .find(|m| m.label == "Orig RX driver domain CPU")
            .unwrap();
        // 100 cycles × 5 Gb/s ÷ (8 × 1448 bytes) ÷ 1 GHz.
        assert!((cpu.median - 100.0 * 5e9 / 8.0 / 1448.0 / 1e9).abs() < 1e-9);
    }
}
