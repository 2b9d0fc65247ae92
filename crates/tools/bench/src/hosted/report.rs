//! The hosted suite's tables, charts and seed figures (Sugerman 2001's
//! Figures 5 and 6 and Tables 1-3 beside ours).

use super::packets;
use super::{
    Breakdown, Config, HostedReport, Link, Record, Window, CONFIGS, LINKS, PAPER_PATH_US,
    PATH_STAGES,
};
use crate::seeds::Measure;
use crate::stats::Spread;
use crate::{plot, seeds};

fn f1(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "-".into()
    }
}

impl HostedReport {
    fn breakdown(&self, cfg: Config, link: Link) -> Option<&Breakdown> {
        self.breakdowns
            .iter()
            .find(|b| b.config == cfg && b.link == link)
    }

    /// Figure 5 as a table: our µs per stage beside the paper's.
    pub fn figure5_table(&self) -> String {
        let mut s = String::from(
            "### Figure 5: the path of one transmit-triggering OUT (µs)\n\n\
             | stage | paper (PC-733, Workstation 2.0) |",
        );
        let cols: Vec<&Breakdown> = [Config::Unoptimized, Config::PortsInVmm, Config::Optimized]
            .iter()
            .filter_map(|&c| self.breakdown(c, Link::Shaped))
            .filter(|b| b.path_us.is_some())
            .collect();
        for b in &cols {
            s += &format!(" {} |", b.config.name());
        }
        s += &format!(
            " ratio {} / paper |\n|---|---:|",
            cols.first().map_or("-", |b| b.config.name())
        );
        s += &"---:|".repeat(cols.len() + 1);
        s += "\n";
        for (i, stage) in PATH_STAGES.iter().enumerate() {
            s += &format!("| {stage} | {:.2} |", PAPER_PATH_US[i]);
            for b in &cols {
                s += &format!(" {:.2} |", b.path_us.map_or(f64::NAN, |p| p[i]));
            }
            let r = cols
                .first()
                .and_then(|b| b.path_us)
                .map(|p| p[i] / PAPER_PATH_US[i]);
            s += &format!(" {} |\n", r.map_or("-".into(), |r| format!("{r:.2}")));
        }
        let total = |p: &[f64; 5]| p.iter().sum::<f64>();
        s += &format!("| **total** | {:.2} |", total(&PAPER_PATH_US));
        for b in &cols {
            s += &format!(" {:.2} |", b.path_us.as_ref().map_or(f64::NAN, total));
        }
        let r = cols
            .first()
            .and_then(|b| b.path_us)
            .map(|p| total(&p) / total(&PAPER_PATH_US));
        s += &format!(" {} |\n", r.map_or("-".into(), |r| format!("{r:.2}")));
        s += &format!(
            "\nMedians over runs of the means over each flow's window ({} B sends, wire at 100 Mbit/s). \
             The optimized columns' transmitting switch carries frames the VMM's model already \
             took from the ring (a frame switch, not the OUT's emulation).\n",
            self.table_size
        );
        s
    }

    /// Tables 1 and 2: the VM world's time by category.
    pub fn time_table(&self) -> String {
        let mut s = format!(
            "### Tables 1 and 2: where the VM world's time goes (TCP transmit, {} B sends, % of the window)\n\n\
             | configuration | wire | Mbit/s | guest OS + VMM | world switches | VMApp | host network I/O | idle (halted) |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
            self.table_size
        );
        s += "| paper Table 1 (Workstation 2.0) | 100 Mb/s | 64 | 77.3 (VMM, with the switches) | incl. | ~10 (the rest) | 9.5 (VMNet send 8.7, receive 0.8) | 0 |\n";
        s += "| paper Table 2 (optimized) | 100 Mb/s | ~94 | 71.5 − 21.7 idle (VMM, with the switches) | incl. | ~8 | 20.4 (send 17.9, receive 2.5) | 21.7 |\n";
        for b in self
            .breakdowns
            .iter()
            .filter(|b| b.config != Config::Native)
        {
            let sh = &b.shares;
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                b.config.name(),
                b.link.name(),
                f1(b.mbps),
                f1(sh.guest_and_vmm),
                f1(sh.world_switch),
                f1(sh.vmapp),
                f1(sh.host_network),
                f1(sh.idle)
            );
        }
        s += "\nThe VM world is the guest process's thread (guest driver, VMM, the guest's TAP): \
              its window splits into running (guest OS + VMM), waiting in world switches (the \
              switch itself; the VMApp's service; of that, VMNet reads and writes) and halted. \
              The paper's Tables 1–2 are time-based samples of one CPU.\n\n";
        let mut groups: Vec<&String> = self
            .breakdowns
            .iter()
            .flat_map(|b| b.cpu_percent.keys())
            .collect();
        groups.sort();
        groups.dedup();
        s += "CPU time by process during the same window (% of one CPU; client = iperf3 and the guest's \
              TCP stack, server = the wire host's):\n\n| configuration | wire |";
        for g in &groups {
            s += &format!(" {g} |");
        }
        s += "\n|---|---|";
        s += &"---:|".repeat(groups.len());
        s += "\n";
        for b in &self.breakdowns {
            s += &format!("| {} | {} |", b.config.name(), b.link.name());
            for g in &groups {
                s += &format!(
                    " {} |",
                    b.cpu_percent.get(*g).map_or("-".into(), |v| f1(*v))
                );
            }
            s += "\n";
        }
        s
    }

    /// Table 3 and the per-packet counts.
    pub fn idle_table(&self) -> String {
        let mut s = format!(
            "### Table 3: idle time while transmitting ({} B sends)\n\n\
             | configuration | paper (PC-733) | ours, 100 Mbit/s | ours, unshaped |\n|---|---:|---:|---:|\n",
            self.table_size
        );
        for cfg in CONFIGS {
            let v = |l| {
                self.breakdown(cfg, l)
                    .map_or("-".into(), |b| format!("{}%", f1(b.idle_percent)))
            };
            s += &format!(
                "| {} | {}% | {} | {} |\n",
                cfg.name(),
                cfg.paper_idle(),
                v(Link::Shaped),
                v(Link::Unshaped)
            );
        }
        s += "\nHosted: cycles the guest spent halted over the window's TSC cycles. Native: the part of one \
              CPU the sending namespace (iperf3 and its kernel stack) left unused.\n\n";
        s += &format!("### Counts per packet ({} B sends)\n\n\
              | configuration | wire | NIC port accesses per transmitted packet | per packet (tx+rx) | PIC accesses per IRQ | world switches per packet | frames per transmitting switch | mean switch µs | empty switch µs (min / mean) | VMNet write µs per frame |\n\
              |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n\
              | paper | 100 Mb/s | 12 | - | 5 | ~5 in 2.0 (RAP served in its VMM) | up to 3 | ≥ 16.4 (7.45 in the VMM + 8.90 switch) | 8.90 | 13.8 (2.0), 22.7 (optimized) |\n",
            self.table_size
        );
        for b in self
            .breakdowns
            .iter()
            .filter(|b| b.config != Config::Native)
        {
            s += &format!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} / {:.2} | {:.2} |\n",
                b.config.name(),
                b.link.name(),
                b.nic_accesses_per_tx_packet,
                b.nic_accesses_per_packet,
                b.pic_accesses_per_irq,
                b.switches_per_packet,
                b.frames_per_send,
                b.mean_switch_us,
                b.null_switch_min_us,
                b.null_switch_mean_us,
                b.mean_vmnet_write_us
            );
        }
        s += "\nThe per-transmitted-packet count includes the ACKs' receive work the same interrupts \
              handle; for one packet alone, crates/devices/hosted/tests/switches.rs counts exactly 12 NIC \
              accesses per transmitted packet (10 per received one) and 5 PIC accesses per IRQ. Frames \
              per transmitting switch: frames written to VMNet over requests that wrote any (halts \
              carry frames too).\n";
        s
    }

    /// Figure 6 as a table: Mbit/s per send size, ratios to native.
    pub fn figure6_table(&self) -> String {
        let mut s = String::from(
            "### Figure 6: TCP transmit throughput against send size (Mbit/s, ratio to native)\n\n\
             Paper (PC-733, 100 Mb/s Ethernet): native saturates the link at every size; \
             Workstation 2.0 is CPU bound (64 Mb/s at 4 KB); optimized matches native.\n\n\
             | wire | send size |",
        );
        let cfgs = [Config::Native, Config::Unoptimized, Config::Optimized];
        for c in cfgs {
            s += &format!(" {} |", c.name());
        }
        s += " unoptimized / native | optimized / native |\n|---|---:|---:|---:|---:|---:|---:|\n";
        for link in LINKS {
            for &size in &self.sizes {
                let p = |c: Config| {
                    self.figure6
                        .iter()
                        .find(|p| p.config == c && p.link == link && p.send_size == size)
                };
                s += &format!("| {} | {size} |", link.name());
                for c in cfgs {
                    s += &format!(" {} |", p(c).map_or("-".into(), |p| f1(p.median_mbps)));
                }
                for c in [Config::Unoptimized, Config::Optimized] {
                    s += &format!(
                        " {} |",
                        p(c).and_then(|p| p.median_ratio_to_native)
                            .map_or("-".into(), |r| format!("{r:.3}"))
                    );
                }
                s += "\n";
            }
        }
        s += &format!(
            "\n{} run(s), {} s per flow, TSC {:.0} MHz; medians over runs; the ratio is against native \
             of the same run, wire and size. iperf3 TCP with `-l SIZE`, guest1 → wire.\n",
            self.runs, self.seconds_per_flow, self.tsc_mhz
        );
        s
    }

    /// Everything, as Markdown.
    pub fn table(&self) -> String {
        format!(
            "Machine: {}.\n\n{}\n{}\n{}\n{}",
            self.machine,
            self.figure6_table(),
            self.figure5_table(),
            self.time_table(),
            self.idle_table()
        )
    }

    /// Figure 6 at 100 Mbit/s (the main chart).
    pub fn svg(&self) -> String {
        self.figure6_svg(Link::Shaped)
    }

    /// Figure 6 as the paper draws it: throughput against send size, one
    /// line per configuration.
    fn figure6_svg(&self, link: Link) -> String {
        let mut series: Vec<plot::Series> = Vec::new();
        for p in self.figure6.iter().filter(|p| p.link == link) {
            let name = p.config.name();
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((f64::from(p.send_size), p.median_mbps)),
                None => series.push(plot::Series {
                    name: name.to_string(),
                    points: vec![(f64::from(p.send_size), p.median_mbps)],
                }),
            }
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        plot::lines(&plot::Sweep {
            title: format!("Figure 6: TCP transmit throughput, wire {}", link.name()),
            x_label: "send size (bytes)".into(),
            y_label: "throughput (Mbit/s), median of runs".into(),
            log2_x: true,
            integer_x: false,
            // Unshaped, native runs orders of magnitude above the hosted NIC.
            log10_y: matches!(link, Link::Unshaped),
            series,
            // The one point the paper's text gives: Workstation 2.0's guest
            // at 64 Mb/s, CPU-bound, with 4 KB sends (§4.1).
            paper: match link {
                Link::Shaped => vec![plot::Series {
                    name: "paper, unoptimized".into(),
                    points: vec![(4096.0, 64.0)],
                }],
                _ => Vec::new(),
            },
        })
    }

    /// Figure 5: the paper's microseconds per stage beside ours.
    fn figure5_svg(&self) -> String {
        let ours = self
            .breakdown(Config::Unoptimized, Link::Shaped)
            .and_then(|b| b.path_us);
        let mut series = vec!["paper (733 MHz)".to_string()];
        let mut values = vec![PAPER_PATH_US.iter().map(|&v| Some(v)).collect::<Vec<_>>()];
        if let Some(p) = ours {
            series.push("ours".into());
            values.push(p.iter().map(|&v| Some(v)).collect());
        }
        plot::grouped(&plot::Grouped {
            title: "Figure 5: one transmit-triggering OUT, unoptimized".into(),
            y_label: "µs".into(),
            groups: PATH_STAGES.iter().map(|s| s.to_string()).collect(),
            series,
            values,
            paper: Vec::new(),
            reference: None,
        })
    }

    /// Tables 1 and 2: the VM world's time, stacked by where it went.
    fn tables_svg(&self) -> String {
        let mut st = plot::Stacked {
            title: format!(
                "Tables 1 and 2: the VM world's time, {} B TCP transmit",
                self.table_size
            ),
            y_label: "share of the window's TSC cycles (%)".into(),
            bars: Vec::new(),
            classes: [
                "guest OS + VMM",
                "world switches",
                "VMApp",
                "host network I/O",
                "idle",
            ]
            .map(String::from)
            .to_vec(),
            values: Vec::new(),
            paper: Vec::new(),
        };
        let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
        for b in self
            .breakdowns
            .iter()
            .filter(|b| matches!(b.config, Config::Unoptimized | Config::Optimized))
        {
            let sh = b.shares;
            st.bars
                .push(format!("{} {}", b.config.name(), b.link.name()));
            st.values.push(
                [
                    sh.guest_and_vmm,
                    sh.world_switch,
                    sh.vmapp,
                    sh.host_network,
                    sh.idle,
                ]
                .map(finite)
                .to_vec(),
            );
        }
        plot::stacked(&st)
    }

    /// Table 3: idle time per configuration, the paper's beside ours.
    fn table3_svg(&self) -> String {
        let mut series = vec!["paper".to_string()];
        let mut values = vec![CONFIGS
            .iter()
            .map(|c| Some(c.paper_idle()))
            .collect::<Vec<_>>()];
        for link in LINKS {
            series.push(format!("ours, wire {}", link.name()));
            values.push(
                CONFIGS
                    .iter()
                    .map(|&c| {
                        self.breakdown(c, link)
                            .map(|b| b.idle_percent)
                            .filter(|v| v.is_finite())
                    })
                    .collect(),
            );
        }
        plot::grouped(&plot::Grouped {
            title: format!(
                "Table 3: idle time while transmitting, {} B sends",
                self.table_size
            ),
            y_label: "idle (%)".into(),
            groups: CONFIGS.iter().map(|c| c.name().to_string()).collect(),
            series,
            values,
            paper: Vec::new(),
            reference: None,
        })
    }

    /// The other charts: (file name, SVG).
    pub fn charts(&self) -> Vec<(String, String)> {
        vec![
            (
                "figure6-unshaped.svg".into(),
                self.figure6_svg(Link::Unshaped),
            ),
            ("figure5.svg".into(), self.figure5_svg()),
            ("tables1-2.svg".into(), self.tables_svg()),
            ("table3.svg".into(), self.table3_svg()),
        ]
    }
}

/// The median and range over runs of `f` on `cfg`'s flows at the table
/// size over the 100 Mbit/s wire (the paper's).
fn over_runs(r: &HostedReport, cfg: Config, f: impl Fn(&Record) -> Option<f64>) -> Option<Spread> {
    let v: Vec<f64> = r
        .records
        .iter()
        .filter(|x| x.config == cfg && x.link == Link::Shaped && x.send_size == r.table_size)
        .filter_map(f)
        .filter(|v| v.is_finite())
        .collect();
    Spread::of(&v)
}

/// [`over_runs`] of a function of the NIC's counters.
fn window_runs(r: &HostedReport, cfg: Config, f: impl Fn(&Window) -> f64) -> Option<Spread> {
    over_runs(r, cfg, |x| {
        x.counters.as_ref().filter(|w| w.cycles > 0.0).map(&f)
    })
}

/// Labelled spreads as measures, those measured.
fn measures(ms: Vec<(&str, Option<Spread>)>) -> Vec<Measure> {
    ms.into_iter()
        .filter_map(|(l, s)| s.map(|s| Measure::of(l, &s)))
        .collect()
}

/// Figure 5 per run of the unoptimized NIC: the OUT's stages in µs.
fn figure5_measures(r: &HostedReport) -> Vec<Measure> {
    let us = |f: fn(&[f64; 5]) -> f64| {
        over_runs(r, Config::Unoptimized, move |x| {
            let p = x.counters.as_ref()?.path()?.map(|c| c / r.tsc_mhz);
            Some(f(&p))
        })
    };
    let total = |p: &[f64; 5]| p.iter().sum::<f64>();
    measures(vec![
        (
            "switches and host world, % of the OUT",
            us(|p| 100.0 * (p.iter().sum::<f64>() - p[0]) / p.iter().sum::<f64>()),
        ),
        ("OUT end to end, µs", us(total)),
        (
            "hosted overhead beyond the VMNet write, µs",
            us(|p| p.iter().sum::<f64>() - p[0] - p[3]),
        ),
        ("VMNet write, µs", us(|p| p[3])),
        (
            "world switch, µs",
            window_runs(r, Config::Unoptimized, |w| {
                w.null_switch_mean_cycles / r.tsc_mhz
            }),
        ),
    ])
}

/// Tables 1 and 2 per run: the VM world's time by category, the counts per
/// packet, unoptimized and optimized, and a frame's VMNet write.
fn tables_measures(r: &HostedReport) -> Vec<Measure> {
    use Config::{Optimized as O, Unoptimized as U};
    type Of = fn(&Window) -> f64;
    let rows: [(&str, Config, Of); 12] = [
        ("switching I/O %, unoptimized", U, |w| {
            w.shares().world_switch
        }),
        ("switching I/O %, optimized", O, |w| w.shares().world_switch),
        ("VMM world incl. world switches %, unoptimized", U, |w| {
            let s = w.shares();
            s.guest_and_vmm + s.world_switch
        }),
        ("VMApp Lance emulation %, unoptimized", U, |w| {
            w.shares().vmapp
        }),
        ("host network I/O %, unoptimized", U, |w| {
            w.shares().host_network
        }),
        ("host network I/O %, optimized", O, |w| {
            w.shares().host_network
        }),
        ("idle %, optimized", O, |w| w.shares().idle),
        (
            "NIC port accesses per transmitted packet, unoptimized",
            U,
            |w| w.nic_accesses / w.tx_packets.max(1.0),
        ),
        ("virtual IRQs per packet, unoptimized", U, |w| {
            w.irqs / packets(w)
        }),
        ("virtual IRQs per packet, optimized", O, |w| {
            w.irqs / packets(w)
        }),
        ("world switches per packet, unoptimized", U, |w| {
            w.world_switches / packets(w)
        }),
        ("world switches per packet, optimized", O, |w| {
            w.world_switches / packets(w)
        }),
    ];
    let write = |cfg| {
        over_runs(r, cfg, |x| {
            let w = x.counters.as_ref().filter(|w| w.vmnet_frames > 0.0)?;
            Some(w.vmnet_tx_cycles / w.vmnet_frames / r.tsc_mhz)
        })
    };
    let mut ms: Vec<(&str, Option<Spread>)> = rows
        .into_iter()
        .map(|(l, cfg, f)| (l, window_runs(r, cfg, f)))
        .collect();
    ms.push(("VMNet write per frame µs, unoptimized", write(U)));
    ms.push(("VMNet write per frame µs, optimized", write(O)));
    measures(ms)
}

/// Figure 6: each configuration's throughput over native's at 100 Mbit/s,
/// per run, at 4 KB and at the size where the optimized NIC falls furthest.
fn figure6_measures(r: &HostedReport) -> Vec<Measure> {
    let at = |cfg: Config, size: u32| {
        let v: Vec<f64> = r
            .records
            .iter()
            .filter(|x| x.config == cfg && x.link == Link::Shaped && x.send_size == size)
            .filter_map(|x| x.ratio_to_native)
            .collect();
        Spread::of(&v)
    };
    let lowest = r
        .sizes
        .iter()
        .filter_map(|&s| at(Config::Optimized, s))
        .min_by(|a, b| a.median.total_cmp(&b.median));
    measures(vec![
        ("unoptimized ÷ native, 4 KB", at(Config::Unoptimized, 4096)),
        ("optimized ÷ native, 4 KB", at(Config::Optimized, 4096)),
        ("optimized ÷ native, lowest over sizes", lowest),
    ])
}

/// Table 3 per run: idle time per configuration (native: the part of one
/// CPU the sender left unused).
fn table3_measures(r: &HostedReport) -> Vec<Measure> {
    let idle = |cfg| window_runs(r, cfg, |w| w.shares().idle);
    let native = over_runs(r, Config::Native, |x| {
        x.cpu_percent.get("client").map(|c| (100.0 - c).max(0.0))
    });
    measures(vec![
        ("native idle %", native),
        ("Version 2.0 idle %", idle(Config::Unoptimized)),
        ("ports in the VMM idle %", idle(Config::PortsInVmm)),
        ("+ send combining idle %", idle(Config::NoIrqNotification)),
        ("+ IRQ notification idle %", idle(Config::Optimized)),
    ])
}

/// Sugerman 2001's figures and tables from a run, for `bench seeds`.
pub fn figures(r: &HostedReport) -> Vec<seeds::Figure> {
    use seeds::{Figure, Kind, Seed::Sugerman};
    let mut fig5 = Figure::new(
        Sugerman,
        "Figure 5",
        Kind::Grouped,
        r.figure5_table(),
        r.figure5_svg(),
    );
    fig5.ours = figure5_measures(r);
    let tables = |id| {
        let mut f = Figure::new(Sugerman, id, Kind::Stacked, r.time_table(), r.tables_svg());
        f.ours = tables_measures(r);
        f
    };
    let mut fig6 = Figure::new(
        Sugerman,
        "Figure 6",
        Kind::Lines,
        r.figure6_table(),
        r.svg(),
    );
    fig6.ours = figure6_measures(r);
    let mut t3 = Figure::new(
        Sugerman,
        "Table 3",
        Kind::Grouped,
        r.idle_table(),
        r.table3_svg(),
    );
    t3.ours = table3_measures(r);
    // The same sweep on the unshaped link, where the CPU and not the
    // 100 Mbit/s line bounds every configuration: its own panel, its
    // numbers already in the table.
    let fig6_unshaped = Figure::new(
        Sugerman,
        "Figure 6",
        Kind::Lines,
        String::new(),
        r.figure6_svg(Link::Unshaped),
    );
    vec![
        fig5,
        tables("Table 1"),
        tables("Table 2"),
        fig6,
        fig6_unshaped,
        t3,
    ]
}
