//! The soak's report as Markdown and as a chart.

use super::report::{SoakReport, HOSTILE_SHARE, KILL_GAP_MS, PAUSE_SEEN_MS};
use crate::plot::{self, Bar};
use crate::stats::median;
use std::collections::BTreeMap;

/// A Markdown table under `title`: the `head` columns, then one column
/// per flow (the first row's keys), values with `digits` decimals.
fn matrix(
    title: &str,
    head: &[&str],
    rows: &[(Vec<String>, &BTreeMap<String, f64>)],
    digits: usize,
) -> String {
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    let mut s = format!(
        "\n{title}\n\n| {} | {} |\n|{}{}\n",
        head.join(" | "),
        names.join(" | "),
        "---|".repeat(head.len()),
        "---:|".repeat(names.len())
    );
    for (cells, values) in rows {
        let v: Vec<String> = names
            .iter()
            .map(|n| {
                values
                    .get(*n)
                    .map_or("-".into(), |x| format!("{x:.digits$}"))
            })
            .collect();
        s += &format!("| {} | {} |\n", cells.join(" | "), v.join(" | "));
    }
    s
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

impl SoakReport {
    /// A Markdown report.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### Soak: {:.1} minutes, seed {} ({} events)\n\n",
            self.seconds / 60.0,
            self.seed,
            self.events.len()
        );
        s += &self.flows_table();
        s += &self.machine_lines();
        s += &self.events_table();
        s += &self.targets_table();
        s += &self.kill_table();
        s += &self.upgrade_table();
        s += &self.hostile_table();
        s += &self.resources_table();
        s += &format!(
            "\nResult: {}\n",
            match self.verdict() {
                Ok(()) => "no byte lost or corrupted, nothing leaked".to_string(),
                Err(e) => format!("FAILED ({e})"),
            }
        );
        s += &self.counters_table();
        s
    }

    fn flows_table(&self) -> String {
        let mut s = String::from(
            "| flow | kind | path | pace Mbit/s | quiet Mbit/s | sent MiB | checked MiB | lost | corrupt | failures (a kill's, the host's) | longest gap ms | longest gap no SIGSTOP or host stall explains, ms (from s) |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n",
        );
        for f in &self.flows {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}, {}) | {:.0} | {:.0}{} |\n",
                f.name,
                f.kind,
                f.path,
                plot::num(f.pace_mbps),
                f.quiet_mbps.map_or("-".into(), plot::num),
                mib(f.sent),
                mib(f.verified),
                f.lost,
                f.corrupt,
                f.failures.len(),
                f.excused,
                f.hosts,
                f.longest_gap_ms,
                f.longest_unstopped_gap_ms,
                f.longest_unstopped_gap_at_s
                    .map_or(String::new(), |t| format!(" ({t:.1})"))
            );
        }
        for f in self.flows.iter().filter(|f| !f.failures.is_empty()) {
            for x in f.failures.iter().take(5) {
                s += &format!("\n- {} at {:.1} s: {}", f.name, x.at_s, x.what);
            }
        }
        let d = &self.downloads;
        s += &format!(
            "\n\nDownloads of {} MiB into guest1: {} matched their SHA-256, {} corrupted, {} failed. \
             Hot-plug on guest1: {} attached, {} detached; a guest applied in {} and out {} times; \
             containers added {} and deleted {}{}; {} failures ({} outside a driver-domain fault).\n\n",
            d.mib_each,
            d.matched,
            d.corrupt.len(),
            d.failures.len(),
            self.churn.attached,
            self.churn.detached,
            self.churn.applied_in,
            self.churn.applied_out,
            self.churn.containers_added,
            self.churn.containers_deleted,
            self.churn
                .containers_skipped
                .as_ref()
                .map_or(String::new(), |w| format!(" (not run: {w})")),
            self.churn.failures.len(),
            self.churn_unexplained
        );
        for x in self.churn.failures.iter().take(5) {
            s += &format!("- churn at {:.1} s: {}\n", x.at_s, x.what);
        }
        let downloads = d.corrupt.iter().chain(&d.failures);
        for x in downloads.take(5) {
            s += &format!("- download started at {:.1} s: {}\n", x.at_s, x.what);
        }
        s
    }

    /// What the real-time probe saw of the machine, and where the tasks
    /// waited when a flow stopped for long.
    fn machine_lines(&self) -> String {
        let m = &self.machine;
        let mut s =
            format!(
            "The machine: a {}probe woke {} times, at worst {:.0} ms late; the host stole {:.1} s \
             of the cores' time over the run; {} stalls of 250 ms or more{}\n",
            if m.realtime { "real-time " } else { "(not real-time) " },
            m.wakeups,
            m.latest_ms,
            m.steal_s,
            m.stalls.len(),
            if m.stalls.is_empty() { "." } else { ":" }
        );
        for st in m.stalls.iter().take(20) {
            s += &format!("- {}\n", super::machine::describe(st));
        }
        for d in &self.stall_dumps {
            let waits: Vec<String> = d.waits.iter().map(|(w, n)| format!("{w} ×{n}")).collect();
            s += &format!(
                "- at {:.1} s {} had delivered nothing for {} s: {} tasks blocked in the kernel{}{} ({})\n",
                d.at_s,
                d.flows.join(", "),
                super::stalls::STALLED.as_secs(),
                d.blocked,
                if waits.is_empty() { "" } else { ", waiting in " },
                waits.join(", "),
                d.file.display()
            );
        }
        s + "\n"
    }

    fn events_table(&self) -> String {
        let mut s = String::from(
            "| at s | event | what came of it | hv resident KiB after |\n|---:|---|---|---:|\n",
        );
        for w in &self.events {
            s += &format!(
                "| {:.1} | {} | {} | {} |\n",
                w.start_s,
                w.name,
                w.detail.replace('|', "/"),
                w.hv_rss_kib
            );
        }
        s
    }

    fn targets_table(&self) -> String {
        let yes = |m: bool| if m { "met" } else { "NOT MET" };
        let mut s = format!(
            "\n| target | result |\n|---|---|\n| longest gap across a driver-domain kill ≤ {KILL_GAP_MS:.0} ms | "
        );
        let worst = self
            .kill_gaps
            .iter()
            .max_by(|a, b| a.longest_gap_ms.total_cmp(&b.longest_gap_ms));
        s += &match worst {
            Some(k) => format!(
                "{}: {} kills, worst {:.0} ms ({}), median {:.0} ms |\n",
                yes(self.kill_gaps.iter().all(|k| k.met)),
                self.kill_gaps.len(),
                k.longest_gap_ms,
                k.flow,
                median(
                    &self
                        .kill_gaps
                        .iter()
                        .map(|k| k.longest_gap_ms)
                        .collect::<Vec<_>>()
                )
            ),
            None => "no kill in this run |\n".into(),
        };
        s += &format!(
            "| no flow pauses {PAUSE_SEEN_MS:.0} ms or more across a driver-domain upgrade in place (vhost-user NICs reconnect: not judged) | {} |\n",
            match self.upgrade_gaps.iter().find(|u| !u.met) {
                _ if self.upgrade_gaps.is_empty() => "no upgrade in this run".to_string(),
                None => format!("met: {} upgrades", self.upgrade_gaps.len()),
                Some(u) => format!(
                    "NOT MET: {:.0} ms ({}) at {:.1} s",
                    u.longest_gap_ms, u.flow, u.at_s
                ),
            }
        );
        s +=
            &format!("| others keep ≥ {HOSTILE_SHARE} of quiet throughput under a hostile peer | ");
        let worst = self
            .hostile
            .iter()
            .min_by(|a, b| a.lowest.total_cmp(&b.lowest));
        s += &match worst {
            Some(h) => format!(
                "{}: {} peers, lowest {:.2} ({}) |\n",
                yes(self.hostile.iter().all(|h| h.met)),
                self.hostile.len(),
                h.lowest,
                h.event
            ),
            None => "no hostile peer in this run |\n".into(),
        };
        s
    }

    fn kill_table(&self) -> String {
        gaps_table("kill", &self.kill_gaps)
    }

    fn upgrade_table(&self) -> String {
        if self.upgrade_gaps.is_empty() {
            return String::new();
        }
        gaps_table("upgrade in place", &self.upgrade_gaps)
    }

    fn hostile_table(&self) -> String {
        let rows: Vec<(Vec<String>, &BTreeMap<String, f64>)> = self
            .hostile
            .iter()
            .map(|h| {
                let head = vec![
                    h.event.clone(),
                    h.windows.to_string(),
                    format!("{:.0}", h.seconds),
                    h.idle.map_or("-".into(), |i| format!("{:.0}%", i * 100.0)),
                    format!("{:.2}", h.lowest),
                ];
                (head, &h.shares)
            })
            .collect();
        let title = format!(
            "What each hostile peer cost the flows that do not pass through it \
             (throughput in its windows ÷ quiet), beside the machine's idle share in its windows \
             (quiet spells: {}); each VM, the hostile one too, has a vCPU's budget of {} µs of CPU \
             every {} µs:",
            self.quiet_idle
                .map_or("-".into(), |i| format!("{:.0}%", i * 100.0)),
            super::vcpu::QUOTA_US,
            super::vcpu::PERIOD_US,
        );
        matrix(
            &title,
            &["peer", "windows", "s", "machine idle", "lowest"],
            &rows,
            2,
        )
    }

    fn resources_table(&self) -> String {
        let mut s = String::from("\n| leak check | start | end |\n|---|---:|---:|\n");
        for (name, b, a) in self.before.rows(&self.after) {
            s += &format!("| hv {name} | {b} | {a} |\n");
        }
        s += &format!(
            "| splitnet namespaces | {} | {} |\n\nCounts must come back exactly. ",
            self.namespaces_before, self.namespaces_after
        );
        s + &match self.rss_reference_kib {
            Some(r) => format!(
                "hv's resident memory may end at most 1 MiB above its size after the first round \
                 of events ({r} KiB), when every event had run once.\n"
            ),
            None => "hv's resident memory is not judged: no round of events was whole.\n".into(),
        }
    }

    fn counters_table(&self) -> String {
        let mut s = format!(
            "\n<details><summary>{} counters moved (status --json)</summary>\n\n| counter | start | end |\n|---|---:|---:|\n",
            self.counters_moved.len()
        );
        for (k, a, b) in &self.counters_moved {
            s += &format!("| {k} | {a} | {b} |\n");
        }
        s + "\n</details>\n"
    }

    /// Each flow's longest gap.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .flows
            .iter()
            .map(|f| Bar {
                label: format!("{} ({})", f.name, f.kind),
                value: f.longest_gap_ms,
                range: None,
            })
            .collect();
        plot::hbars(
            "Soak: each flow's longest pause in delivery",
            "ms",
            "SIGSTOP of the driver domain or a stalled guest pauses flows for seconds by design",
            &bars,
        )
    }
}

/// Each flow's pause across each driver-domain `what` (kill, upgrade).
fn gaps_table(what: &str, gaps: &[super::report::KillGap]) -> String {
    let rows: Vec<(Vec<String>, &BTreeMap<String, f64>)> = gaps
        .iter()
        .map(|k| (vec![format!("{:.1}", k.at_s)], &k.gaps))
        .collect();
    let title = format!("Each flow's pause in delivery across each driver-domain {what}, ms:");
    let head = format!("{} at s", what.split(' ').next().unwrap_or(what));
    matrix(&title, &[head.as_str()], &rows, 0)
}
