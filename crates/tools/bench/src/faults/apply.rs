//! `bench faults`' apply experiments: what `splitnet apply` does to the
//! guests it does not touch, and what a long random sequence of applies
//! leaves behind.
//!
//! - **one among many**: 32 guests up; three of them stream TCP to the wire
//!   host, each paced below what the machine carries (so a slower bin
//!   means the stream was held up, not that the two cores were shared
//!   with the new guest's start-up); a 33rd guest is added and then
//!   removed by apply. Each stream's throughput in 100 ms bins during each
//!   apply is set against its bins before either: the target is a median
//!   no lower than the quiet bins' 10th percentile, and no empty bin.
//! - **random sequence**: on the default topology, a sequence of applies
//!   chosen from a seed (guests added and removed, a guest's second and
//!   third vifs, guest1's live vif options, guest4's NIC kind changed with
//!   `--restart`: netfront, hosted, HVM or virtio); hv's resources after it
//!   against before, as the hotplug cycles are judged.

use super::{resources, say, wait_for, FaultsOptions, Resources, Up};
use crate::rng::SplitMix;
use crate::stats::{median, quantile_of};
use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Guests up for the "one among many" run, and the streams among them.
pub(super) const MANY: usize = 32;
const STREAMS: usize = 3;
/// Each stream's pace, Mbit/s, and length.
const PACE_MBIT: u32 = 200;
const STREAM_S: u64 = 20;
/// Throughput bins.
const BIN_S: f64 = 0.1;

/// One stream's bins around the applies.
#[derive(Debug, Serialize)]
pub struct StreamDisturbance {
    pub guest: String,
    /// Mbit/s: the quiet bins' median and 10th percentile.
    pub quiet_median: f64,
    pub quiet_p10: f64,
    /// Mbit/s: the median of the bins that overlap an apply.
    pub during_median: f64,
    /// Bins that overlap an apply and carried nothing.
    pub empty_bins: usize,
}

impl StreamDisturbance {
    /// The rule: within the quiet stream's own spread, and never stopped.
    pub fn within_noise(&self) -> bool {
        self.during_median >= self.quiet_p10 && self.empty_bins == 0
    }
}

/// One run of the "one among many" experiment.
#[derive(Debug, Serialize)]
pub struct ManyRun {
    /// How long adding, then removing, the extra guest took (ms).
    pub add_ms: f64,
    pub remove_ms: f64,
    pub streams: Vec<StreamDisturbance>,
}

/// The apply experiments' results.
#[derive(Debug, Serialize)]
pub struct ApplyReport {
    pub guests: usize,
    /// Medians over the runs: adding and removing the extra guest (ms).
    pub add_ms: f64,
    pub remove_ms: f64,
    /// Each stream's figures as medians over the runs (empty bins: their
    /// sum), which the target judges; and each run's own.
    pub streams: Vec<StreamDisturbance>,
    pub runs: Vec<ManyRun>,
    pub steps: usize,
    /// Applies in the random sequence that changed something, by kind.
    pub added_guests: usize,
    pub removed_guests: usize,
    pub vif_changes: usize,
    pub option_changes: usize,
    /// guest4 re-created with another NIC kind.
    pub nic_changes: usize,
    pub step_ms_median: f64,
    /// Steps run before the reference point, and hv's resident memory
    /// (KiB) before them, at the reference, and after each tenth of the
    /// steps measured.
    pub warm_up: usize,
    pub rss_kib: Vec<u64>,
    pub before: Resources,
    pub after: Resources,
}

impl ApplyReport {
    /// Whether both targets were met.
    pub fn passed(&self) -> bool {
        self.streams.iter().all(StreamDisturbance::within_noise)
            && self.before.leaked(&self.after).is_empty()
    }
}

impl ApplyReport {
    /// The Markdown section.
    pub fn table(&self) -> String {
        let mut s = format!(
            "\n### A guest added and removed among {} while three others stream\n\n\
             apply added it in {:.0} ms and removed it in {:.0} ms (medians of {} runs). Each \
             stream is paced at {PACE_MBIT} Mbit/s, below what the machine carries, and read in \
             {:.0} ms bins (iperf3's intervals). Target, on the medians of the runs: the bins \
             during the applies have a median no lower than the quiet bins' 10th percentile, \
             and no run has an empty one.\n\n\
             | stream | quiet median (Mbit/s) | quiet p10 | during the applies, median | empty bins | within noise |\n|---|---|---|---|---|---|\n",
            self.guests,
            self.add_ms,
            self.remove_ms,
            self.runs.len(),
            BIN_S * 1e3
        );
        for d in &self.streams {
            s += &format!(
                "| {} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
                d.guest,
                d.quiet_median,
                d.quiet_p10,
                d.during_median,
                d.empty_bins,
                if d.within_noise() { "yes" } else { "NO" }
            );
        }
        s += &format!(
            "\n### {} random applies (seeded)\n\n{} guests added, {} removed, {} changes of \
             guest2's vifs, {} changes of guest1's vif options in place, {} changes of \
             guest4's NIC kind (re-created); median {:.0} ms an apply.\n\n\
             | hv resource | before | after |\n|---|---|---|\n",
            self.steps,
            self.added_guests,
            self.removed_guests,
            self.vif_changes,
            self.option_changes,
            self.nic_changes,
            self.step_ms_median
        );
        for (name, b, a) in self.before.rows(&self.after) {
            s += &format!("| {name} | {b} | {a} |\n");
        }
        let series: Vec<String> = self.rss_kib.iter().map(u64::to_string).collect();
        s += &format!(
            "\nThe reference is taken after {} warm-up steps. hv's resident memory (KiB) before \
             them, at the reference, and after each tenth of the steps: {}.\n",
            self.warm_up,
            series.join(", ")
        );
        s
    }
}

/// The many-guests topology with room in the driver domain for `room`
/// guests, so that adding one is not a change of the driver domain.
fn many(guests: usize, room: usize) -> String {
    let text = crate::testbed::many_guests_topology(guests);
    text.replace(
        &format!("memory_frames = {}", 4096 + 512 * guests),
        &format!("memory_frames = {}", 4096 + 512 * room),
    )
}

/// Runs both experiments.
pub(super) fn run(opts: &FaultsOptions) -> Result<ApplyReport> {
    let mut runs = Vec::new();
    for r in 0..opts.apply_runs.max(1) {
        say(
            opts,
            &format!(
                "apply: run {}/{} of one guest among {MANY}",
                r + 1,
                opts.apply_runs.max(1)
            ),
        );
        runs.push(one_among_many(opts)?);
    }
    let (add_ms, remove_ms, streams) = combine(&runs);
    let seq = random_sequence(opts)?;
    Ok(ApplyReport {
        guests: MANY,
        add_ms,
        remove_ms,
        streams,
        runs,
        steps: opts.apply_steps,
        added_guests: seq.counts[0],
        removed_guests: seq.counts[1],
        vif_changes: seq.counts[2],
        option_changes: seq.counts[3],
        nic_changes: seq.counts[4],
        step_ms_median: median(&seq.step_ms),
        warm_up: WARM_UP_STEPS,
        rss_kib: seq.rss_kib,
        before: seq.before,
        after: seq.after,
    })
}

type Windows = Vec<(f64, f64)>;

/// The runs' medians: the add and remove times, and each stream's figures
/// (its empty bins summed, so one stop in any run fails the target).
fn combine(runs: &[ManyRun]) -> (f64, f64, Vec<StreamDisturbance>) {
    let over = |f: &dyn Fn(&ManyRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let streams = (0..runs.first().map_or(0, |r| r.streams.len()))
        .map(|k| {
            let of = |f: fn(&StreamDisturbance) -> f64| over(&|r: &ManyRun| f(&r.streams[k]));
            StreamDisturbance {
                guest: runs[0].streams[k].guest.clone(),
                quiet_median: of(|d| d.quiet_median),
                quiet_p10: of(|d| d.quiet_p10),
                during_median: of(|d| d.during_median),
                empty_bins: runs.iter().map(|r| r.streams[k].empty_bins).sum(),
            }
        })
        .collect();
    (over(&|r| r.add_ms), over(&|r| r.remove_ms), streams)
}

/// 32 guests, three streams, one guest added and removed mid-stream.
fn one_among_many(opts: &FaultsOptions) -> Result<ManyRun> {
    std::fs::create_dir_all(&opts.run_dir)?;
    let file = |n: usize| -> Result<String> {
        let p = opts.run_dir.join(format!("bench-apply-{n}.toml"));
        std::fs::write(&p, many(n, MANY + 1))
            .with_context(|| format!("writing {}", p.display()))?;
        Ok(p.display().to_string())
    };
    let (small, big) = (file(MANY)?, file(MANY + 1)?);
    say(opts, &format!("apply: {MANY} guests up"));
    let mut up = Up::with(&opts.exe, &opts.run_dir, &["--config", &small])?;
    for k in 1..=STREAMS {
        let port = (5200 + k).to_string();
        up.spawn(
            "wire",
            &["iperf3", "-s", "-1", "-p", &port, "-B", "10.77.0.254"],
        )?;
        wait_for("iperf3 to listen", Duration::from_secs(10), || {
            crate::netenv::listening(&toolstack::host::netns_name("wire"), 5200 + k as u16)
                .unwrap_or(false)
        })?;
    }
    let t0 = Instant::now();
    let (outputs, windows) = std::thread::scope(|s| {
        let clients: Vec<_> = (1..=STREAMS)
            .map(|k| {
                let up = &up;
                s.spawn(move || stream(up, k))
            })
            .collect();
        let windows = applies(opts, &up, t0, &big, &small);
        let outputs: Vec<Result<String>> = clients
            .into_iter()
            .map(|c| {
                c.join()
                    .unwrap_or_else(|_| Err(anyhow!("a client thread panicked")))
            })
            .collect();
        (outputs, windows)
    });
    let windows = windows?;
    let mut streams = Vec::new();
    for (k, out) in outputs.into_iter().enumerate() {
        let bins = bins(&out?)?;
        streams.push(disturbance(&format!("guest{}", k + 1), &bins, &windows));
    }
    let ms = |w: (f64, f64)| (w.1 - w.0) * 1e3;
    Ok(ManyRun {
        add_ms: ms(windows[0]),
        remove_ms: ms(windows[1]),
        streams,
    })
}

/// Guest `k`'s paced stream to the wire host, as iperf3's JSON.
fn stream(up: &Up<'_>, k: usize) -> Result<String> {
    let (port, pace, secs) = (
        (5200 + k).to_string(),
        format!("{PACE_MBIT}M"),
        STREAM_S.to_string(),
    );
    up.output_in(
        &format!("guest{k}"),
        &[
            "iperf3",
            "-c",
            "10.77.0.254",
            "-p",
            &port,
            "-b",
            &pace,
            "-t",
            &secs,
            "-i",
            "0.1",
            "--json",
        ],
    )
}

/// The two applies, at a third and two thirds of the streams: their
/// windows in seconds since `t0`.
fn applies(
    opts: &FaultsOptions,
    up: &Up<'_>,
    t0: Instant,
    big: &str,
    small: &str,
) -> Result<Windows> {
    let mut windows = Vec::new();
    for (i, file) in [big, small].into_iter().enumerate() {
        let at = Duration::from_secs(STREAM_S * (i as u64 + 1) / 3);
        std::thread::sleep(at.saturating_sub(t0.elapsed()));
        let start = t0.elapsed().as_secs_f64();
        let plan = up.cli(&["apply", "--config", file])?;
        windows.push((start, t0.elapsed().as_secs_f64()));
        say(
            opts,
            &format!("apply: {}", plan.lines().next().unwrap_or("")),
        );
    }
    Ok(windows)
}

/// iperf3's interval report as (start s, Mbit/s) bins.
fn bins(json: &str) -> Result<Vec<(f64, f64)>> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3's JSON")?;
    let intervals = v["intervals"]
        .as_array()
        .ok_or_else(|| anyhow!("iperf3 reported no intervals"))?;
    Ok(intervals
        .iter()
        .map(|i| {
            let s = &i["sum"];
            let secs = s["seconds"].as_f64().unwrap_or(BIN_S).max(1e-3);
            let bytes = s["bytes"].as_f64().unwrap_or(0.0);
            (s["start"].as_f64().unwrap_or(0.0), bytes * 8.0 / secs / 1e6)
        })
        .collect())
}

/// One stream's bins during the applies against its quiet bins (after
/// the first second, before the first apply).
fn disturbance(guest: &str, bins: &[(f64, f64)], windows: &Windows) -> StreamDisturbance {
    let first = windows.first().map_or(0.0, |w| w.0);
    let quiet: Vec<f64> = bins
        .iter()
        .filter(|(t, _)| *t >= 1.0 && t + BIN_S <= first)
        .map(|b| b.1)
        .collect();
    let during: Vec<f64> = bins
        .iter()
        .filter(|(t, _)| windows.iter().any(|w| t + BIN_S > w.0 && *t < w.1))
        .map(|b| b.1)
        .collect();
    StreamDisturbance {
        guest: guest.to_string(),
        quiet_median: median(&quiet),
        quiet_p10: quantile_of(&quiet, 0.1),
        during_median: median(&during),
        empty_bins: during.iter().filter(|m| **m <= 0.0).count(),
    }
}

/// The random sequence's resources and step counts.
struct Sequence {
    /// Guests added, guests removed, vifs added or removed, options changed,
    /// guest4 re-created with another NIC.
    counts: [usize; 5],
    step_ms: Vec<f64>,
    rss_kib: Vec<u64>,
    before: Resources,
    after: Resources,
}

/// Random steps before the reference point. Creating and destroying
/// domains grows hv's allocator to a plateau (each thread that served a
/// domain may leave an arena behind; with `MALLOC_ARENA_MAX=1` the growth
/// is half as large and levels off as soon); a leak keeps growing past it.
const WARM_UP_STEPS: usize = 200;

/// A state the random sequence applies: which of guest3 and guest4 run,
/// how many extra vifs guest2 has, guest1's vif options, and guest4's NIC.
#[derive(Clone, Copy, PartialEq, Default)]
struct State {
    guest3: bool,
    guest4: bool,
    extra_vifs: usize,
    options: usize,
    nic4: usize,
}

/// guest4's NIC kinds the sequence picks from.
const NICS: [&str; 4] = ["vif", "hosted", "hvm", "virtio"];

/// guest1's vif options the sequence picks from.
const OPTIONS: [&str; 5] = ["", "rate=100Mb/s", "mtu=9000", "vlan=5", "ip=10.77.0.1"];

impl State {
    /// The topology: the default, with what the state adds. Every added
    /// vif has its own MAC, so guests coming and going move no other's.
    fn text(&self) -> String {
        let base = toolstack::topology::DEFAULT_TOML;
        let g2_vifs: Vec<String> = std::iter::once("\"\"".to_string())
            .chain((0..self.extra_vifs).map(|i| format!("\"mac=00:16:3e:00:20:{:02x}\"", i + 1)))
            .collect();
        let mut t = base
            .replacen(
                "address = \"10.77.0.1/24\"",
                &format!(
                    "address = \"10.77.0.1/24\"\nvif = [\"{}\"]",
                    OPTIONS[self.options]
                ),
                1,
            )
            .replacen(
                "address = \"10.77.0.2/24\"",
                &format!("address = \"10.77.0.2/24\"\nvif = [{}]", g2_vifs.join(", ")),
                1,
            );
        for (on, g) in [(self.guest3, 3), (self.guest4, 4)] {
            if on {
                t += &format!(
                    "\n[[domain]]\nname = \"guest{g}\"\nkind = \"guest\"\naddress = \"10.77.0.{g}/24\"\n"
                );
                // A NIC that is not a vif takes its MAC from the guest.
                t += &match (g, NICS[self.nic4]) {
                    (4, nic @ ("hosted" | "hvm" | "virtio")) => {
                        format!("nic = \"{nic}\"\nmac = \"00:16:3e:00:10:04\"\n")
                    }
                    _ => format!("vif = [\"mac=00:16:3e:00:10:{g:02x}\"]\n"),
                };
            }
        }
        t
    }

    /// The domains the move to `to` may re-create: guest4 when its NIC
    /// changes (`--restart`).
    fn restart(&self, to: &State) -> Vec<String> {
        match self.guest4 && to.guest4 && self.nic4 != to.nic4 {
            true => vec!["guest4".into()],
            false => Vec::new(),
        }
    }

    /// A random neighbour: one thing changed.
    fn next(&self, rng: &mut SplitMix) -> State {
        let mut s = *self;
        match rng.below(5) {
            0 => s.guest3 = !s.guest3,
            1 => s.guest4 = !s.guest4,
            2 => s.extra_vifs = (s.extra_vifs + 1 + rng.below(2)) % 3,
            3 => s.options = (s.options + 1 + rng.below(OPTIONS.len() - 1)) % OPTIONS.len(),
            _ => {
                s.nic4 = (s.nic4 + 1 + rng.below(NICS.len() - 1)) % NICS.len();
                s.guest4 = true;
            }
        }
        s
    }

    /// Which of the five counts the move from `self` to `to` adds to.
    fn count(&self, to: &State, counts: &mut [usize; 5]) {
        let guests = |s: &State| usize::from(s.guest3) + usize::from(s.guest4);
        if guests(to) > guests(self) {
            counts[0] += 1;
        } else if guests(to) < guests(self) {
            counts[1] += 1;
        }
        counts[2] += usize::from(to.extra_vifs != self.extra_vifs);
        counts[3] += usize::from(to.options != self.options);
        counts[4] += usize::from(!self.restart(to).is_empty());
    }
}

/// The seeded random applies on the default topology.
fn random_sequence(opts: &FaultsOptions) -> Result<Sequence> {
    let up = Up::new(opts)?;
    let mut ts = up.toolstack()?;
    // Warm-up: every kind of step once, so first-use growth (and the
    // option count guest1's vif keeps) is in the reference, then random
    // steps up to the allocator's plateau.
    let start = State::default();
    let everything = State {
        guest3: true,
        guest4: true,
        extra_vifs: 2,
        options: 1,
        nic4: 0,
    };
    let mut rng = SplitMix(opts.apply_seed);
    let mut rss_kib = vec![resources(&mut ts)?.hv_rss_kib];
    let mut warm = everything;
    let mut was = State::default();
    for _ in 0..WARM_UP_STEPS {
        ts.apply(Some(warm.text()), false, was.restart(&warm))
            .map_err(|e| anyhow!("apply (warm-up): {e}"))?;
        (was, warm) = (warm, warm.next(&mut rng));
    }
    ts.apply(Some(start.text()), false, was.restart(&start))
        .map_err(|e| anyhow!("apply: {e}"))?;
    wait_for("every vif's counters", Duration::from_secs(5), || {
        super::counters_published(&mut ts)
    })?;
    let before = resources(&mut ts)?;
    rss_kib.push(before.hv_rss_kib);
    let (mut state, mut counts, mut step_ms) = (start, [0; 5], Vec::new());
    let every = (opts.apply_steps / 10).max(1);
    for i in 0..opts.apply_steps {
        let to = state.next(&mut rng);
        let t = Instant::now();
        ts.apply(Some(to.text()), false, state.restart(&to))
            .map_err(|e| anyhow!("apply step {}: {e}", i + 1))?;
        step_ms.push(t.elapsed().as_secs_f64() * 1e3);
        state.count(&to, &mut counts);
        state = to;
        if (i + 1) % every == 0 {
            say(
                opts,
                &format!("apply: {}/{} random steps", i + 1, opts.apply_steps),
            );
            rss_kib.push(resources(&mut ts)?.hv_rss_kib);
        }
    }
    ts.apply(Some(start.text()), false, state.restart(&start))
        .map_err(|e| anyhow!("apply back: {e}"))?;
    let after = super::settled(&mut ts, &before)?;
    Ok(Sequence {
        counts,
        step_ms,
        rss_kib,
        before,
        after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_of_the_sequence_is_a_valid_topology_and_every_step_applies() {
        use toolstack::topology::Topology;
        let mut rng = SplitMix(7);
        let (mut s, mut counts) = (State::default(), [0; 5]);
        for _ in 0..400 {
            let t = Topology::parse(&s.text(), "t");
            assert!(t.is_ok(), "{}\n{:?}", s.text(), t.err());
            let to = s.next(&mut rng);
            let new = Topology::parse(&to.text(), "t").unwrap();
            let p = toolstack::apply::plan(&t.unwrap(), &new, &s.restart(&to));
            assert!(p.refused.is_empty(), "{:?}\n{}", p.refused, to.text());
            s.count(&to, &mut counts);
            s = to;
        }
        assert!(
            counts.iter().all(|&c| c > 0),
            "a kind of step never came: {counts:?}"
        );
    }

    #[test]
    fn the_runs_are_judged_by_their_medians_and_any_stop() {
        let run = |during: f64, empty: usize| ManyRun {
            add_ms: 50.0,
            remove_ms: 60.0,
            streams: vec![StreamDisturbance {
                guest: "g".into(),
                quiet_median: 200.0,
                quiet_p10: 199.0,
                during_median: during,
                empty_bins: empty,
            }],
        };
        let (_, _, s) = combine(&[run(198.0, 0), run(199.5, 0), run(199.4, 0)]);
        assert!(s[0].within_noise(), "one low run of three: {s:?}");
        let (_, _, s) = combine(&[run(199.5, 0), run(199.5, 1), run(199.4, 0)]);
        assert!(!s[0].within_noise(), "a stop in one run: {s:?}");
    }

    #[test]
    fn a_stopped_stream_is_not_within_noise() {
        let quiet: Vec<(f64, f64)> = (10..60)
            .map(|i| (i as f64 / 10.0, if i % 2 == 0 { 190.0 } else { 210.0 }))
            .collect();
        let mut bins = quiet.clone();
        bins.extend((60..70).map(|i| (i as f64 / 10.0, 0.0)));
        let d = disturbance("g", &bins, &vec![(6.0, 7.0)]);
        assert!(!d.within_noise(), "{d:?}");
        bins.truncate(quiet.len());
        bins.extend((60..70).map(|i| (i as f64 / 10.0, 199.0)));
        let d = disturbance("g", &bins, &vec![(6.0, 7.0)]);
        assert!(d.within_noise(), "{d:?}");
    }
}
