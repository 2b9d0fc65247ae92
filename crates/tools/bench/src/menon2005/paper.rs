//! The paper's figures and tables beside ours: Markdown for RESULTS and
//! `splitnet bench menon2005`, and one [`Figure`] each for the seeds report.

use super::measures::{self, parts, role_samples, samples_of, tcp_send_samples, watched_of};
use super::{Experiment, Menon2005Report, Point, Profiled, Setup};
use crate::plot::{self, Series, Sweep};
use crate::seeds::{Claim, Figure, Kind, Measure, Seed};
use std::fmt::Write;

/// `figure-3.svg`, `table-1.svg`: where a figure's chart is written.
pub fn file_name(f: &Figure) -> String {
    format!("{}.svg", f.id.to_lowercase().replace(' ', "-"))
}

const SEED: Seed = Seed::Menon2005;

/// What one of the paper's gigabit NICs carried, Mb/s (§5.1).
const PAPER_NIC_MBPS: f64 = 941.0;

/// The setups of the receive and web figures, in the paper's order.
const XEN: [Setup; 4] = [Setup::Linux, Setup::Domain0, Setup::Guest0, Setup::Guest1];

fn fmt_x(e: Experiment, x: f64) -> String {
    match e {
        Experiment::Buffer if x >= 1024.0 => format!("{} KiB", x / 1024.0),
        Experiment::Buffer => format!("{x} B"),
        Experiment::Nics => format!("{x} NIC"),
        Experiment::Tx => "1 NIC".into(),
        Experiment::Web => format!("{x} req/s"),
    }
}

fn cell(p: Option<&Point>, digits: usize) -> String {
    match p {
        None => "-".into(),
        Some(p) => {
            let r = p
                .ratio_to_native
                .filter(|_| p.setup != Setup::Linux)
                .map_or(String::new(), |r| format!(" ({:.2}×)", r.median));
            format!("{:.*}{r}", digits, p.value.median)
        }
    }
}

/// A sweep as a Markdown table: one row per x, one column per setup.
fn sweep_table(r: &Menon2005Report, e: Experiment, setups: &[Setup], unit: &str) -> String {
    let setups: Vec<Setup> = setups
        .iter()
        .copied()
        .filter(|s| !r.series(*s, e).is_empty())
        .collect();
    let mut xs: Vec<f64> = r
        .summary
        .iter()
        .filter(|p| p.experiment == e)
        .map(|p| p.x)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut t = format!("| {} |", e.name());
    for s in &setups {
        let _ = write!(t, " {} {unit} (× Linux) |", s.name());
    }
    t += "\n|---|";
    t += &"---:|".repeat(setups.len());
    t += "\n";
    let digits = if e == Experiment::Web { 0 } else { 2 };
    for x in xs {
        let _ = write!(t, "| {} |", fmt_x(e, x));
        for s in &setups {
            let _ = write!(t, " {} |", cell(r.point(*s, e, x), digits));
        }
        t += "\n";
    }
    t
}

/// A sweep as lines, one per setup, against x.
fn sweep_svg(
    r: &Menon2005Report,
    e: Experiment,
    setups: &[Setup],
    title: &str,
    unit: &str,
) -> String {
    let series: Vec<Series> = setups
        .iter()
        .map(|s| Series {
            name: s.name().to_string(),
            points: r
                .series(*s, e)
                .iter()
                .map(|p| (p.x, p.value.median))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        return String::new();
    }
    plot::lines(&Sweep {
        title: title.to_string(),
        x_label: match e {
            Experiment::Buffer => "receive buffer (bytes)".into(),
            Experiment::Nics => "NICs".into(),
            Experiment::Web => "requests/s".into(),
            Experiment::Tx => String::new(),
        },
        y_label: unit.to_string(),
        log2_x: e == Experiment::Buffer,
        integer_x: e == Experiment::Nics,
        log10_y: false,
        series,
        paper: paper_lines(r, e),
    })
}

/// The paper's Figure 3 points its text gives, in Gbit/s: Linux, the
/// driver domain and a guest with one to three NICs (§5.1). Scaled by our
/// Linux over one NIC against the paper's 941 Mb/s, so that on NICs scaled
/// to this host they stand in our units.
fn paper_lines(r: &Menon2005Report, e: Experiment) -> Vec<Series> {
    if e != Experiment::Nics {
        return Vec::new();
    }
    let scale = r
        .point(Setup::Linux, Experiment::Nics, 1.0)
        .map_or(1.0, |p| p.value.median * 1000.0 / PAPER_NIC_MBPS);
    let line = |name: &str, points: &[(f64, f64)]| Series {
        name: format!("paper, {name}"),
        points: points
            .iter()
            .map(|&(n, mbps)| (n, mbps * scale / 1000.0))
            .collect(),
    };
    vec![
        line("Linux", &[(1.0, PAPER_NIC_MBPS), (3.0, 2462.0)]),
        line("Xen-domain0", &[(1.0, PAPER_NIC_MBPS), (2.0, 1878.0)]),
        line("Xen-guest0", &[(1.0, 849.0)]),
    ]
}

/// The top `n` functions of `role` in a profile, as "function share%".
fn top(p: &Profiled, role: &str, n: usize) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64, u64)> = p
        .domains
        .iter()
        .filter(|d| d.role == role)
        .flat_map(|d| {
            d.top.iter().map(move |h| {
                (
                    h.function.clone(),
                    h.share_pct * d.share_pct / 100.0,
                    h.samples,
                )
            })
        })
        .collect();
    v.sort_by_key(|h| std::cmp::Reverse(h.2));
    v.truncate(n);
    v.into_iter().map(|(f, s, _)| (f, s)).collect()
}

fn top_table(title: &str, rows: &[(String, f64)], paper: &[(&str, f64)]) -> String {
    let mut t =
        format!("| {title} | ours % of all samples | paper | paper % |\n|---|---:|---|---:|\n");
    for i in 0..rows.len().max(paper.len()) {
        let ours = rows.get(i).map_or(("-".to_string(), String::new()), |r| {
            (r.0.clone(), format!("{:.2}", r.1))
        });
        let theirs = paper.get(i).map_or(("-".to_string(), String::new()), |r| {
            (r.0.to_string(), format!("{:.2}", r.1))
        });
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} |",
            ours.0, ours.1, theirs.0, theirs.1
        );
    }
    t
}

fn no_profile(what: &str) -> String {
    format!("No profile of {what}: the configuration is not in this build, or the profiler could not start.\n")
}

/// A table-only figure of the suite, judged on `ours`; `note` says where
/// the mechanism differs from the paper's.
fn table_figure(id: &str, title: &str, table: String, note: &str, ours: Vec<Measure>) -> Figure {
    Figure {
        seed: SEED,
        id: id.into(),
        title: title.into(),
        kind: Kind::Table,
        table,
        svg: String::new(),
        note: note.into(),
        paper: Vec::new(),
        ours,
        machine: String::new(),
    }
}

/// Per setup, how many segments its receiving TCP collapsed per MB over
/// the sweep (`TcpExtTCPRcvCollapsed`; the socket's receive buffer fixed
/// at 87,380 bytes), and at which buffer the most: Menon 2005's cause of
/// the dips, where a packet charged a whole page fills the buffer early.
fn collapse_lines(r: &Menon2005Report, setups: &[Setup], table: &mut String) {
    for &s in setups {
        let pts: Vec<(f64, f64)> = r
            .series(s, Experiment::Buffer)
            .iter()
            .filter_map(|p| Some((p.x, p.collapsed_per_mb?)))
            .collect();
        let Some(worst) = pts.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)) else {
            continue;
        };
        if worst.1 <= 0.0 {
            let _ = writeln!(
                table,
                "- {}: TCP collapsed no segment at any of the {} buffer sizes",
                s.name(),
                pts.len()
            );
            continue;
        }
        let least = pts.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let _ = writeln!(
            table,
            "- {}: TCP collapsed {least:.1}–{:.1} segments per MB received (the most at a {} B buffer)",
            s.name(),
            worst.1,
            worst.0
        );
    }
}

/// Figure 1 (Linux against Xen), or 2 (the driver domain with and
/// without page-sized buffers): each point's throughput over the runs.
fn fig_buffers(
    r: &Menon2005Report,
    id: &'static str,
    title: &'static str,
    setups: &[Setup],
    note: &str,
) -> Figure {
    let mut table = sweep_table(r, Experiment::Buffer, setups, "Gbit/s");
    if let Some(a) = &r.anomaly {
        let _ = writeln!(table, "\nAnomaly: {}.", a.verdict);
        let shown = |k: &str| setups.iter().any(|s| s.name() == k);
        for (k, s) in a.spread.iter().filter(|(k, _)| shown(k)) {
            let _ = writeln!(
                table,
                "- {k}: {:.2}–{:.2} Gbit/s over the sweep, coefficient of variation {:.2}",
                s.1, s.2, s.0
            );
        }
    }
    collapse_lines(r, setups, &mut table);
    let ours = r
        .summary
        .iter()
        .filter(|p| p.experiment == Experiment::Buffer && setups.contains(&p.setup))
        .map(|p| {
            let label = format!("{} {}", p.setup.name(), fmt_x(p.experiment, p.x));
            Measure::of(label, &p.value)
        })
        .collect();
    Figure {
        seed: SEED,
        id: id.into(),
        title: title.into(),
        kind: Kind::Lines,
        svg: sweep_svg(
            r,
            Experiment::Buffer,
            setups,
            &format!("menon2005: receive throughput against the receive buffer ({id})"),
            "Gbit/s",
        ),
        table,
        note: note.into(),
        paper: Vec::new(),
        ours,
        machine: String::new(),
    }
}

/// Why the receive buffer matters less to today's kernel (Figure 1).
const NO_ANOMALY: &str = super::anomaly::NO_ANOMALY;

/// How Figure 2's lines stand for the paper's.
const PAGE_NOTE: &str = "Xen-domain0-page receives into 4 KiB pages (`port_buffer = \"page\"`), \
    the paper's cause; Xen-domain0 into MTU-sized buffers, which removes the cause where the \
    paper's fixed line lowered tcp_adv_window_scale";

/// Where Tables 1 and 2 differ from the paper's profiles.
const POINTS_NOTE: &str = "clock samples by domain stand for Xenoprof's; points A and B are the \
    best and worst of the guest's (Xen-guest1) sweep, whose kernel is the host's";

/// Tables 1 and 2: points A and B of the guest's sweep.
fn tab_points(r: &Menon2005Report) -> (Figure, Figure) {
    let (a, b) = (
        r.profile(Setup::Guest1, "buffer A"),
        r.profile(Setup::Guest1, "buffer B"),
    );
    let (t1, mut t2, ours1) = match (a, b) {
        (Some(a), Some(b)) => {
            let (t1, ours1) = domain_shares(a, b);
            (t1, top_functions(a, b), ours1)
        }
        _ => {
            let t1 = no_profile("points A and B");
            (t1.clone(), t1, Vec::new())
        }
    };
    t2 += &page_buffers(r);
    let title = "Profile at points A and B";
    (
        table_figure(
            "Table 1",
            &format!("{title}: share per domain"),
            t1,
            POINTS_NOTE,
            ours1,
        ),
        table_figure(
            "Table 2",
            &format!("{title}: top functions"),
            t2,
            POINTS_NOTE,
            measures::compaction(r),
        ),
    )
}

/// Table 1's text and our values: each part's share of the samples at
/// points A and B beside the paper's, and the two points' buffers and
/// throughputs.
fn domain_shares(a: &Profiled, b: &Profiled) -> (String, Vec<Measure>) {
    let mut t1 =
        String::from("| part | ours A | ours B | paper A | paper B |\n|---|---:|---:|---:|---:|\n");
    let mut ours1 = Vec::new();
    let rows = [
        ("application's domain", "XenoLinux kernel", "kernel", 60, 84),
        ("driver domain", "network driver", "driver", 10, 5),
        ("hv", "xen", "xen", 30, 11),
    ];
    for ((va, vb), (name, pn, label, x, y)) in parts(a).into_iter().zip(parts(b)).zip(rows) {
        let _ = writeln!(
            t1,
            "| {name} (paper: {pn}) | {va:.1} | {vb:.1} | {x} | {y} |"
        );
        ours1.push(Measure::point(format!("{label} (A)"), va));
        ours1.push(Measure::point(format!("{label} (B)"), vb));
    }
    let _ = writeln!(
        t1,
        "\nA: {} B buffer, {:.2} Gbit/s; B: {} B buffer, {:.2} Gbit/s (Xen-guest1, profiled runs).",
        a.x, a.gbps, b.x, b.gbps
    );
    (t1, ours1)
}

/// Table 2's text: the guest's top functions at points A and B beside the
/// paper's, and the samples of the two it names.
fn top_functions(a: &Profiled, b: &Profiled) -> String {
    let mut t = top_table(
        &format!("guest at A ({} B)", a.x),
        &top(a, "guest", 8),
        &[("skb_copy_bits", 0.15), ("tcp_collapse", 0.05)],
    );
    t += "\n";
    t += &top_table(
        &format!("guest at B ({} B)", b.x),
        &top(b, "guest", 8),
        &[
            ("skb_copy_bits", 28.0),
            ("skbuff_ctor", 9.0),
            ("tcp_collapse", 3.0),
        ],
    );
    let _ = writeln!(
        t,
        "\ntcp_collapse samples: A {}, B {}; skb_copy_bits: A {}, B {}.",
        samples_of(a, "guest", "tcp_collapse"),
        samples_of(b, "guest", "tcp_collapse"),
        samples_of(a, "guest", "skb_copy_bits"),
        samples_of(b, "guest", "skb_copy_bits")
    );
    t
}

/// The paper's cause of the anomaly: the driver domain receiving into
/// page-sized buffers, against MTU-sized ones at the same buffer.
fn page_buffers(r: &Menon2005Report) -> String {
    let (Some(mtu), Some(page)) = (
        r.profile(Setup::Domain0, "rx, 1 NIC"),
        r.profile(Setup::Domain0Page, "rx, 1 NIC"),
    ) else {
        return String::new();
    };
    let mut t = format!(
        "\nThe driver domain receiving with a 64 KiB buffer, into MTU-sized buffers ({:.2} Gbit/s) \
         and into 4 KiB pages (`port_buffer = \"page\"`, {:.2} Gbit/s):\n\n",
        mtu.gbps, page.gbps
    );
    t += &top_table("Xen-domain0, MTU buffers", &top(mtu, "driver", 8), &[]);
    t += "\n";
    t += &top_table("Xen-domain0, page buffers", &top(page, "driver", 8), &[]);
    let _ = writeln!(
        t,
        "\ntcp_collapse samples: MTU {}, page {}; skb_copy_bits: MTU {}, page {}.",
        samples_of(mtu, "driver", "tcp_collapse"),
        samples_of(page, "driver", "tcp_collapse"),
        samples_of(mtu, "driver", "skb_copy_bits"),
        samples_of(page, "driver", "skb_copy_bits")
    );
    t
}

/// Figure 3.
fn fig_nics(r: &Menon2005Report) -> Figure {
    let table = sweep_table(r, Experiment::Nics, &XEN, "Gbit/s")
        + "\nPaper (Mb/s): Linux 2462 with 3 NICs, Xen-domain0 1878 with 2 NICs (0.75 of Linux's best), \
           Xen-guest0 849 with 1 NIC; Xen-domain0 and Xen-guest1 941 with 1 NIC.\n";
    let mut ours: Vec<Measure> = r
        .summary
        .iter()
        .filter(|p| p.experiment == Experiment::Nics)
        .map(|p| {
            let label = format!("{} {}", p.setup.name(), fmt_x(p.experiment, p.x));
            let mbps = |v: f64| v * 1000.0;
            Measure {
                label,
                median: mbps(p.value.median),
                min: mbps(p.value.min),
                max: mbps(p.value.max),
                runs: Vec::new(),
            }
        })
        .collect();
    ours.extend(measures::nics(r));
    Figure {
        seed: SEED,
        id: "Figure 3".into(),
        title: "Receive throughput with one to three NICs".into(),
        kind: Kind::Lines,
        svg: sweep_svg(
            r,
            Experiment::Nics,
            &XEN,
            "menon2005: receive throughput with 1-3 NICs (Figure 3)",
            "Gbit/s",
        ),
        table,
        note: if crate::machine::is_paper(&r.machine) {
            "each NIC is a veth pair shaped to the machine's line rate in both directions (a \
             scaled rate puts our Mb/s in this host's units: compare the ratios); Xen-guest1 \
             had a second CPU in the paper, which leaves the clients none of their own here"
        } else {
            "each NIC is a veth pair with no line rate of its own, so one NIC does not bound \
             throughput as the paper's gigabit NICs did; the host has two cores"
        }
        .into(),
        paper: Vec::new(),
        ours,
        machine: String::new(),
    }
}

/// Total cycles per packet of a 1-NIC receive (or the transmit) over
/// Xen-domain0's.
fn cost_ratio(r: &Menon2005Report, s: Setup, e: Experiment) -> Option<f64> {
    let c = |s| {
        r.point(s, e, 1.0)
            .and_then(|p| p.cycles_per_packet.get("total").copied())
    };
    let (a, b) = (c(s)?, c(Setup::Domain0)?);
    (b > 0.0).then(|| a / b)
}

/// Why cycles stand for the paper's hardware events.
const COST_NOTE: &str = "TSC cycles per packet (each domain's CPU time, both ends of the stream: \
    over veth the sender's CPU runs part of the receive path) stand for instruction cost; L2 and \
    TLB misses need a PMU this host does not expose";

/// The measures among `ms` that `id`'s key effects name.
fn named(id: &str, ms: &[Measure]) -> Vec<Measure> {
    let effects = crate::seeds::entry(SEED, id).map_or(&[][..], |e| e.effects());
    let names = |l: &str| {
        effects.iter().any(|fx| match fx.what {
            Claim::Order { hi, lo } => hi == l || lo == l,
            Claim::Ratio { num, den, .. } => num == l || den == l,
            Claim::Level { of, .. } => of == l,
            Claim::Dip { points, .. } => points.contains(&l),
        })
    };
    ms.iter().filter(|m| names(&m.label)).cloned().collect()
}

/// Figures 4, 5 and 6 and Table 3: hardware events; the cycle cost as
/// the measurable part.
fn fig_events(r: &Menon2005Report) -> Vec<Figure> {
    let note = if r.events_note.is_empty() {
        "counted".to_string()
    } else {
        format!("not measurable here: {}", r.events_note)
    };
    let mut t = receive_costs(r);
    let tx = cost_ratio(r, Setup::Guest0, Experiment::Tx);
    let _ = writeln!(t, "\nTransmit, Xen-guest0 over Xen-domain0 cycles per packet: {} (paper: instruction cost 8.15×).", tx.map_or("-".into(), |x| format!("{x:.2}×")));
    let _ = writeln!(t, "\nHardware events (instructions, L2, D-TLB, I-TLB misses): {note}. Cycles per 1448-byte packet are each domain's CPU time × the TSC rate, summed.");
    let costs = measures::costs(r);
    let mk = |id: &str, title: &str, note: &str| Figure {
        seed: SEED,
        id: id.into(),
        title: title.into(),
        kind: Kind::Bars,
        table: t.clone(),
        svg: String::new(),
        note: note.into(),
        paper: Vec::new(),
        ours: named(id, &costs),
        machine: String::new(),
    };
    vec![
        mk(
            "Figure 4",
            "Relative hardware event counts, Xen-domain0 and Linux, receive (3 NICs)",
            COST_NOTE,
        ),
        mk(
            "Figure 5",
            "Relative hardware event counts, Xen-domain0, Xen-guest0, Xen-guest1, receive",
            COST_NOTE,
        ),
        mk(
            "Figure 6",
            "Relative hardware event counts, Xen-domain0 and Xen-guest0, send",
            COST_NOTE,
        ),
        mk(
            "Table 3",
            "Data TLB miss distribution in Xen-domain0 (3 NICs)",
            "D-TLB misses need a PMU this host does not expose",
        ),
    ]
}

/// Figure 8: the server's cycles per reply at the paper's 5000 requests/s,
/// where every configuration serves every request.
fn fig_web_costs(r: &Menon2005Report) -> Figure {
    let ours = measures::web_costs(r);
    let mut t =
        String::from("| configuration | cycles per reply | × Xen-domain0 |\n|---|---:|---:|\n");
    let d0 = ours.iter().find(|m| m.label.starts_with("driver domain"));
    for m in &ours {
        let x = d0.filter(|d| d.median > 0.0).map(|d| m.median / d.median);
        let _ = writeln!(
            t,
            "| {} | {:.0} ({:.0}–{:.0}) | {} |",
            m.label.trim_end_matches(" cost per request"),
            m.median,
            m.min,
            m.max,
            x.map_or("-".into(), |x| format!("{x:.2}"))
        );
    }
    let _ = writeln!(
        t,
        "\nAt {} requests/s; the server's domains' CPU time (hv, the driver domain, the guest, \
         native's receiver; not httperf's, which spins) over the replies, as TSC cycles; the \
         paper: instructions, L2 and TLB misses relative to Linux.",
        measures::WEB_COST_RATE
    );
    Figure {
        seed: SEED,
        id: "Figure 8".into(),
        title: "Relative hardware event counts, web server at 5000 requests/s".into(),
        kind: Kind::Bars,
        table: t,
        svg: String::new(),
        note: "TSC cycles per reply (the server's domains' CPU time) stand for instruction cost; \
               L2 and TLB misses need a PMU this host does not expose"
            .into(),
        paper: Vec::new(),
        ours,
        machine: String::new(),
    }
}

/// The receive cost table of Figures 4, 5 and 6 and Table 3: each
/// configuration's cycles per packet with 1 NIC and its ratio to
/// Xen-domain0's beside the paper's instruction-cost ratio.
fn receive_costs(r: &Menon2005Report) -> String {
    let mut t = String::from("| configuration | rx cycles/packet | × Xen-domain0 | paper: instruction cost × Xen-domain0 |\n|---|---:|---:|---:|\n");
    for (s, paper) in [
        (Setup::Linux, "0.90"),
        (Setup::Domain0, "1.00"),
        (Setup::Guest0, "2.25"),
        (Setup::Guest1, "2.52"),
    ] {
        let c = r
            .point(s, Experiment::Nics, 1.0)
            .and_then(|p| p.cycles_per_packet.get("total").copied());
        let x = cost_ratio(r, s, Experiment::Nics);
        let _ = writeln!(
            t,
            "| {} | {} | {} | {paper} |",
            s.name(),
            c.map_or("-".into(), |c| format!("{c:.0}")),
            x.map_or("-".into(), |x| format!("{x:.2}"))
        );
    }
    t
}

/// Tables 4, 6 and 7's text: top functions of some roles in one profile,
/// beside the paper's.
fn top_text(
    r: &Menon2005Report,
    id: &str,
    s: Setup,
    what: &str,
    roles: &[&str],
    paper: &[(&str, f64)],
) -> String {
    let Some(p) = r.profile(s, what) else {
        return no_profile(&format!("{} {what}", s.name()));
    };
    let rows: Vec<(String, f64)> = roles.iter().flat_map(|role| top(p, role, 8)).collect();
    let mut t = top_table(
        &format!("{} {what}: {}", s.name(), roles.join(" + ")),
        &rows,
        paper,
    );
    let hv = p
        .domains
        .iter()
        .filter(|d| d.role == "hv")
        .fold(0.0, |a, d| a + d.share_pct);
    let paper = if id == "Table 4" {
        "; the paper: Xen 14% of cycles"
    } else {
        ""
    };
    let _ = writeln!(
        t,
        "\nhv: {hv:.1}% of all samples ({} clock{paper}).",
        p.clock
    );
    t
}

/// Where Tables 4, 6 and 7 differ from the paper's profiles.
const TOP_NOTE: &str = "clock samples of splitnet's hv, driver domain and the host kernel's \
    paths stand for Xen's and XenoLinux's functions";

/// Tables 4, 6 and 7, each judged on the shares its effects name.
fn tab_tops(r: &Menon2005Report) -> Vec<Figure> {
    let t4 = top_text(
        r,
        "Table 4",
        Setup::Domain0,
        "rx, 3 NICs",
        &["driver", "hv"],
        &[
            ("skbuff_ctor", 9.15),
            ("mask_and_ack_irq", 6.01),
            ("unmask_irq", 2.81),
        ],
    );
    let t6 = top_text(
        r,
        "Table 6",
        Setup::Guest0,
        "rx, 1 NIC",
        &["hv"],
        &[
            ("_copy_from_user_ll", 3.94),
            ("do_mmu_update", 3.02),
            ("_copy_to_user_ll", 2.59),
            ("mod_l1_entry", 2.50),
            ("alloc_domheap_pages", 1.67),
            ("do_extended_command", 1.47),
            ("free_domheap_pages", 1.43),
        ],
    );
    let t7 = top_text(
        r,
        "Table 7",
        Setup::Guest0,
        "rx, 1 NIC",
        &["driver"],
        &[
            ("nf_hook_slow", 5.14),
            ("nf_iterate", 3.59),
            ("br_nf_pre_routing", 1.76),
            ("net_rx_action", 1.17),
            ("fdb_insert", 1.31),
            ("br_handle_frame", 1.00),
        ],
    );
    let work = measures::guest0_work(r);
    vec![
        table_figure(
            "Table 4",
            "Expensive routines in Xen-domain0 (3 NICs)",
            t4,
            &format!("{TOP_NOTE}; the driver domain reads its NIC without hv, so no physical interrupt passes through it"),
            measures::domain0_routines(r),
        ),
        table_figure(
            "Table 6",
            "hv functions, Xen-guest0 receive",
            t6,
            &format!("{TOP_NOTE}; hv's grant and inter-domain copy work stands for Xen's page remap and transfer"),
            named("Table 6", &work),
        ),
        table_figure(
            "Table 7",
            "Driver-domain functions, Xen-guest0 receive",
            t7,
            &format!("{TOP_NOTE}; the driver domain's network class (splitnet's switch and anti-spoofing, by call chain) stands for Linux's bridge and netfilter, over its samples with the NIC's apart"),
            named("Table 7", &work),
        ),
    ]
}

/// Table 5.
fn tab_samples(r: &Menon2005Report) -> Figure {
    let paper = [
        ("Guest domain", [None, Some(16453.0), Some(20145.0)]),
        (
            "Driver domain",
            [Some(19104.0), Some(15327.0), Some(18845.0)],
        ),
        ("Xen / hv", [Some(1939.0), Some(11733.0), Some(14975.0)]),
    ];
    let setups = [Setup::Domain0, Setup::Guest0, Setup::Guest1];
    let mut t = String::from("| domain | Xen-domain0 ours (paper) | Xen-guest0 ours (paper) | Xen-guest1 ours (paper) |\n|---|---:|---:|---:|\n");
    for (i, (name, pv)) in paper.iter().enumerate() {
        let _ = write!(t, "| {name} |");
        for (s, p) in setups.iter().zip(pv) {
            let o = r.profile(*s, "rx, 1 NIC").map(|pr| part_samples(pr, i));
            let _ = write!(
                t,
                " {} ({}) |",
                o.flatten().map_or("-".into(), |o| format!("{o:.0}")),
                p.map_or("N/A".into(), |p| format!("{p:.0}"))
            );
        }
        t += "\n";
    }
    t += "\nOurs: clock samples (the profiler's cpu-clock or cycles) over one stream, the NIC's apart; the paper's: instruction samples. Xen's are hv's plus each domain's hypervisor class (its kernel's work for its hypercalls), as Xenoprof counted time in Xen.\n";
    for s in setups {
        if let Some(p) = r.profile(s, "rx, 1 NIC") {
            let _ = writeln!(
                t,
                "- {}: {:.2} Gbit/s while profiled; work classes: {}",
                s.name(),
                p.gbps,
                classes_line(p)
            );
        }
    }
    table_figure(
        "Table 5",
        "Samples per domain, receive",
        t,
        "clock samples stand for instruction samples; Xen's are hv's and each domain's hypervisor class (its kernel's work for its hypercalls), as Xenoprof counted time in Xen",
        measures::shares(r),
    )
}

/// Row `i` of Table 5 (guest, driver domain, Xen) of a profile, in
/// samples; None for a guest in a configuration without one.
fn part_samples(p: &Profiled, i: usize) -> Option<f64> {
    let [app, drv, xen] = measures::three(p);
    let (guest, driver) = if p.setup.in_driver() {
        (None, app)
    } else {
        (Some(app), drv)
    };
    [guest, Some(driver), Some(xen)][i]
}

fn classes_line(p: &Profiled) -> String {
    let mut v: Vec<(&String, &f64)> = p.classes.iter().filter(|(_, s)| **s >= 1.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter()
        .map(|(k, s)| format!("{k} {s:.0}%"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Table 8 and the transmit throughput of §6.2.
fn tab_tx(r: &Menon2005Report) -> Figure {
    let (g, d) = (
        r.profile(Setup::Guest0, "tx"),
        r.profile(Setup::Domain0, "tx"),
    );
    let mut t = String::from("| function | Xen-guest0 guest ours (paper) | Xen-domain0 ours (paper) |\n|---|---:|---:|\n");
    for (f, pg, pd) in [
        ("tcp_write_xmit", 212, 72),
        ("tcp_transmit_skb", 512, 92),
        ("__tcp_transmit_skb", 512, 92),
        ("ip_queue_xmit", 577, 114),
        ("__ip_queue_xmit", 577, 114),
    ] {
        let og = g.map(|p| watched_of(p, "guest", f));
        let od = d.map(|p| watched_of(p, "driver", f));
        let o = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let _ = writeln!(t, "| {f} | {} ({pg}) | {} ({pd}) |", o(og), o(od));
    }
    let og = g.map(|p| tcp_send_samples(p, "guest"));
    let od = d.map(|p| tcp_send_samples(p, "driver"));
    let o = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    let _ = writeln!(
        t,
        "| any of them (each sample once) | {} (1301) | {} (278) |",
        o(og),
        o(od)
    );
    let rate = |s| {
        r.point(s, Experiment::Tx, 1.0).map_or("-".into(), |p| {
            format!("{:.0} Mb/s", p.value.median * 1000.0)
        })
    };
    let _ = writeln!(t, "\nTransmit over one NIC: Xen-guest0 {}, Xen-domain0 {}, Linux {} (paper: 706, 3764, 3764 Mb/s). \
        Ours are each routine's samples with its callees' (today's kernel splits these routines, leaving them almost no samples of their own, and names two with `__`), in the sender's own context (its system calls and the sends its ACKs clock out): not the receiver's stack, which over a veth runs in the sender's softirqs where the paper's ran on another machine, nor its pure ACKs; the paper's are the routines' own. The guest has no offloads (`offload = false`), as the paper's.",
        rate(Setup::Guest0), rate(Setup::Domain0), rate(Setup::Linux));
    if let (Some(g), Some(d)) = (g, d) {
        let per = |p: &Profiled, role| role_samples(p, role) as f64 / p.gbps.max(1e-9);
        let (pg, pd) = (per(g, "guest"), per(d, "driver"));
        let _ = writeln!(
            t,
            "\nThe sending domain's samples per Gbit/s sent: guest {pg:.0}, driver domain {pd:.0}: \
             {:.1}× (paper: the two domains' instruction counts differ by 2.8×, about 3.8× per byte).",
            pg / pd.max(1e-9)
        );
    }
    for (n, p) in [
        ("Xen-guest0 guest", g.map(|p| (p, "guest"))),
        ("Xen-domain0 driver", d.map(|p| (p, "driver"))),
    ] {
        if let Some((p, role)) = p {
            let _ = writeln!(
                t,
                "- {n}: {} samples in all; top: {}",
                role_samples(p, role),
                top(p, role, 5)
                    .iter()
                    .map(|(f, s)| format!("{f} {s:.1}%"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    table_figure(
        "Table 8",
        "TCP send functions: guest (Xen-guest0) against the driver domain",
        t,
        "clock samples per Gbit/s sent stand for instructions per byte, and the TCP send \
         routines' samples are theirs with their callees' in the sender's own context (today's \
         kernel leaves them almost none of their own); the guest's virtual NIC offers no TSO or \
         checksum offload (`offload = false`), as the paper's",
        measures::sending(r),
    )
}

/// Figure 7.
fn fig_web(r: &Menon2005Report) -> Figure {
    let mut table = sweep_table(r, Experiment::Web, &XEN, "replies/s");
    let peak = |s| {
        r.series(s, Experiment::Web)
            .iter()
            .map(|p| p.value.median)
            .fold(0.0, f64::max)
    };
    let linux = peak(Setup::Linux);
    let _ = write!(table, "\nPeak replies/s over Linux's:");
    for s in XEN {
        if linux > 0.0 && !r.series(s, Experiment::Web).is_empty() {
            let _ = write!(table, " {} {:.2};", s.name(), peak(s) / linux);
        }
    }
    table += " (paper: Xen-domain0 and Xen-guest1 under 0.80, Xen-guest0 about 0.34).\n";
    Figure {
        seed: SEED,
        id: "Figure 7".into(),
        title: "Web server throughput under httperf".into(),
        kind: Kind::Lines,
        svg: sweep_svg(
            r,
            Experiment::Web,
            &XEN,
            "menon2005: nginx replies/s against httperf's request rate (Figure 7)",
            "replies/s",
        ),
        table,
        note: web_note(r),
        paper: Vec::new(),
        ours: measures::web(r),
        machine: String::new(),
    }
}

/// Figure 7's note: the stand-ins, and what sets each peak here, the
/// server's cycles per reply at it (hv, the domains, native's server), so
/// a peak above or below Linux's says which costs more per reply.
fn web_note(r: &Menon2005Report) -> String {
    let mut note = "nginx with one worker stands for knot; httperf as in the paper".to_string();
    let at_peak = |s| {
        r.series(s, Experiment::Web)
            .into_iter()
            .max_by(|a, b| a.value.median.total_cmp(&b.value.median))
            .map(|p| (p.value.median, super::server_cycles(&p.cycles_per_packet)))
            .filter(|&(_, c)| c > 0.0)
    };
    let peaks: Vec<String> = XEN
        .iter()
        .filter_map(|&s| at_peak(s).map(|(v, c)| format!("{} {c:.0} ({v:.0} replies/s)", s.name())))
        .collect();
    if !peaks.is_empty() {
        let _ = write!(
            note,
            ". The server's cycles per reply at each peak: {}. Native's receive and \
             Xen-domain0's run on the server's core (steered there, each batch an \
             inter-processor interrupt); a guest's driver domain reads its port on the \
             clients' core, as a NIC's DMA would be. The paper's dom0 paid Xen for its \
             interrupts and its page-table updates (Table 4: Xen 14% of its receive, 9% \
             masking and unmasking the NIC's interrupt); the driver domain's kernel here is \
             the host's, which pays neither",
            peaks.join(", ")
        );
    }
    note
}

/// Every figure and table of the paper as this report has it.
pub fn figures(r: &Menon2005Report) -> Vec<Figure> {
    let (t1, t2) = tab_points(r);
    let mut v = vec![
        fig_buffers(r, "Figure 1", "Receive throughput against the application's receive buffer", &[Setup::Linux, Setup::Domain0, Setup::Guest1], NO_ANOMALY),
        fig_buffers(r, "Figure 2", "Receive throughput against the receive buffer in the driver domain, with page-sized receive buffers (the anomaly's cause)", &[Setup::Linux, Setup::Domain0, Setup::Domain0Page], PAGE_NOTE),
    ];
    v.push(fig_nics(r));
    v.push(fig_web(r));
    v.push(fig_web_costs(r));
    v.extend([t1, t2]);
    v.extend(fig_events(r));
    v.extend(tab_tops(r));
    v.push(tab_samples(r));
    v.push(tab_tx(r));
    v
}

/// Every figure's section, in the paper's order.
pub fn tables(r: &Menon2005Report) -> String {
    let mut f = figures(r);
    let order = |id: &str| -> (u8, u32) {
        let (kind, n) = id.split_once(' ').unwrap_or((id, "0"));
        (u8::from(kind == "Table"), n.parse().unwrap_or(0))
    };
    f.sort_by_key(|x| order(&x.id));
    let mut s = String::new();
    let mut seen: Vec<(&str, String)> = Vec::new();
    for x in &f {
        let body = match seen.iter().find(|(_, t)| *t == x.table) {
            Some((id, _)) => format!("As {id}: {}.\n", x.note),
            None => x.table.clone(),
        };
        seen.push((&x.id, x.table.clone()));
        let _ = write!(s, "### {}: {}\n\n{body}\n", x.id, x.title);
    }
    s
}
