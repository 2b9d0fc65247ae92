//! Aggregation of classified samples into the paper's tables: share per
//! domain, share per cost class, top functions per domain; as JSON, text and
//! an SVG stacked bar chart.

use crate::attribution::{Domain, DomainKind};
use crate::classes::CostClass;
use crate::roles::Mode;
use crate::symbols::Symbol;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// One sample after attribution, symbolization and classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifiedSample {
    /// Who it is charged to.
    pub domain: Domain,
    /// Taken in kernel mode.
    pub kernel: bool,
    /// Function and module.
    pub symbol: Symbol,
    /// Its cost class.
    pub class: CostClass,
    /// Whether its domain takes part actively or passively.
    pub mode: Mode,
    /// The watched routines (`ProfileOptions::watch`) it ran in.
    pub watched: Vec<String>,
}

/// How the samples were taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileMeta {
    /// Wall-clock length of the collection.
    pub duration_s: f64,
    /// `cycles` or `cpu-clock`.
    pub clock: String,
    /// Samples per second per CPU asked for.
    pub frequency_hz: u64,
    /// The CPUs sampled.
    pub cpus: Vec<u32>,
    /// Samples the kernel dropped (ring overflow).
    pub lost_samples: u64,
    /// Samples dropped because their record did not add up.
    #[serde(default)]
    pub malformed_samples: u64,
    /// Samples carried call chains, and were classed by walking them.
    #[serde(default)]
    pub callchains: bool,
    /// Who started the session (`splitnet profile`, `splitnet bench`, ...).
    #[serde(default)]
    pub initiator: String,
}

/// A count and its share. `basis_points` of the siblings in one table add up
/// to exactly 10000 (largest-remainder rounding); `share_pct` is the same
/// number in percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassShare {
    /// The class.
    pub class: CostClass,
    /// Samples in it.
    pub samples: u64,
    /// Percent, to 0.01.
    pub share_pct: f64,
    /// Hundredths of a percent.
    pub basis_points: u32,
}

/// A function's samples within one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionShare {
    /// Demangled name.
    pub function: String,
    /// `kernel`, a kernel module or a file name.
    pub module: String,
    /// Its cost class.
    pub class: CostClass,
    /// Samples.
    pub samples: u64,
    /// Percent of the domain's samples.
    pub share_pct: f64,
}

/// One domain's part of the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainReport {
    /// `hv`, `idle`, `host` or the domain's name.
    pub name: String,
    /// Its kind.
    pub kind: DomainKind,
    /// Active (resolved to functions) or passive (counted only).
    pub mode: Mode,
    /// Samples charged to it.
    pub samples: u64,
    /// Of which in kernel mode.
    pub kernel_samples: u64,
    /// Percent of all samples (siblings add up to 100).
    pub share_pct: f64,
    /// Hundredths of a percent of all samples.
    pub basis_points: u32,
    /// Its samples by class (adding up to 100% of the domain).
    pub classes: Vec<ClassShare>,
    /// Its samples not in the class `idle`: the work.
    #[serde(default)]
    pub work_samples: u64,
    /// Percent of the work samples in the class `other`.
    #[serde(default)]
    pub other_of_work_pct: f64,
    /// Its hottest functions, most samples first.
    pub top_functions: Vec<FunctionShare>,
    /// Per watched routine (`ProfileOptions::watch`), its samples with its
    /// callees', in the context it ran in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched: Vec<WatchedShare>,
    /// Samples in any watched routine (each counted once, however many
    /// of them its chain holds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub watched_samples: u64,
}

/// A watched routine's samples, its callees' included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchedShare {
    pub function: String,
    pub samples: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// How it was taken.
    #[serde(flatten)]
    pub meta: ProfileMeta,
    /// All samples.
    pub total_samples: u64,
    /// Share (0 to 1) of samples charged to a named domain, a domain's
    /// kernel, hv or idle: everything but `host`.
    pub attributed_fraction: f64,
    /// Per domain: hv, the named domains, idle, host.
    pub domains: Vec<DomainReport>,
    /// Per class over all samples (adding up to 100%).
    pub classes: Vec<ClassShare>,
    /// The hardware events counted beside the clock, if any were asked for.
    #[serde(default)]
    pub events: Vec<EventReport>,
}

/// One hardware event's counts (Xenoprof's instructions, cache and TLB
/// misses), or why this machine has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventReport {
    /// `instructions`, `l2-misses`, `dtlb-misses` or `itlb-misses`.
    pub event: String,
    /// Events per sample.
    pub period: u64,
    /// perf_event_open offered it here.
    pub measurable: bool,
    /// How many samples, or "not measurable here" and why.
    pub note: String,
    /// Estimated events in all (samples times their period).
    pub total: u64,
    /// Estimated events per domain.
    pub per_domain: BTreeMap<String, u64>,
}

/// A profile in a few numbers, to attach to a benchmark record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    /// All samples.
    pub samples: u64,
    /// As in [`Profile::attributed_fraction`].
    pub attributed_fraction: f64,
    /// Percent of samples per domain.
    pub domains: BTreeMap<String, f64>,
    /// Percent of samples per cost class.
    pub classes: BTreeMap<String, f64>,
}

/// Splits 10000 basis points among `counts` in proportion, by largest
/// remainder, so the parts add up to exactly 10000 (all zero if no counts).
pub fn apportion(counts: &[u64]) -> Vec<u32> {
    const UNITS: u128 = 10_000;
    let total: u128 = counts.iter().map(|&c| c as u128).sum();
    if total == 0 {
        return vec![0; counts.len()];
    }
    let mut parts: Vec<u32> = counts
        .iter()
        .map(|&c| (c as u128 * UNITS / total) as u32)
        .collect();
    let given: u128 = parts.iter().map(|&p| p as u128).sum();
    let mut order: Vec<usize> = (0..counts.len()).collect();
    // Largest remainder first; ties to the larger count, then the earlier entry.
    order.sort_by(|&a, &b| {
        let ra = counts[a] as u128 * UNITS % total;
        let rb = counts[b] as u128 * UNITS % total;
        rb.cmp(&ra).then(counts[b].cmp(&counts[a])).then(a.cmp(&b))
    });
    for &i in order.iter().take((UNITS - given) as usize) {
        parts[i] += 1;
    }
    parts
}

fn pct(bp: u32) -> f64 {
    bp as f64 / 100.0
}

fn class_table(counts: &BTreeMap<CostClass, u64>) -> Vec<ClassShare> {
    let c: Vec<u64> = CostClass::ALL
        .iter()
        .map(|k| counts.get(k).copied().unwrap_or(0))
        .collect();
    let bp = apportion(&c);
    CostClass::ALL
        .iter()
        .zip(c.iter().zip(bp))
        .map(|(&class, (&samples, bp))| ClassShare {
            class,
            samples,
            share_pct: pct(bp),
            basis_points: bp,
        })
        .collect()
}

/// One domain's samples as they are counted.
struct DomainAcc {
    mode: Mode,
    samples: u64,
    kernel: u64,
    classes: BTreeMap<CostClass, u64>,
    funcs: HashMap<(String, String, CostClass), u64>,
    watched: BTreeMap<String, u64>,
    watched_samples: u64,
}

impl DomainAcc {
    fn new(mode: Mode) -> DomainAcc {
        DomainAcc {
            mode,
            samples: 0,
            kernel: 0,
            classes: BTreeMap::new(),
            funcs: HashMap::new(),
            watched: BTreeMap::new(),
            watched_samples: 0,
        }
    }

    fn add(&mut self, s: &ClassifiedSample) {
        self.samples += 1;
        self.kernel += s.kernel as u64;
        *self.classes.entry(s.class).or_default() += 1;
        *self
            .funcs
            .entry((s.symbol.function.clone(), s.symbol.module.clone(), s.class))
            .or_default() += 1;
        for w in &s.watched {
            *self.watched.entry(w.clone()).or_default() += 1;
        }
        self.watched_samples += !s.watched.is_empty() as u64;
    }

    /// The domain's report: `bp` basis points of all samples, its classes,
    /// and its `top_n` functions by samples (ties by name).
    fn report(self, kind: DomainKind, name: String, bp: u32, top_n: usize) -> DomainReport {
        let mut funcs: Vec<_> = self.funcs.into_iter().collect();
        funcs.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        let top_functions = funcs
            .into_iter()
            .take(top_n)
            .map(|((function, module, class), n)| FunctionShare {
                function,
                module,
                class,
                samples: n,
                share_pct: n as f64 * 100.0 / self.samples as f64,
            })
            .collect();
        let of = |c| self.classes.get(&c).copied().unwrap_or(0);
        let work = self.samples - of(CostClass::Idle);
        DomainReport {
            name,
            kind,
            mode: self.mode,
            samples: self.samples,
            kernel_samples: self.kernel,
            share_pct: pct(bp),
            basis_points: bp,
            classes: class_table(&self.classes),
            work_samples: work,
            other_of_work_pct: match work {
                0 => 0.0,
                w => of(CostClass::Other) as f64 * 100.0 / w as f64,
            },
            top_functions,
            watched: self
                .watched
                .into_iter()
                .map(|(function, samples)| WatchedShare { function, samples })
                .collect(),
            watched_samples: self.watched_samples,
        }
    }
}

impl Profile {
    /// Aggregates classified samples, keeping `top_n` functions per domain.
    pub fn from_samples(meta: ProfileMeta, samples: &[ClassifiedSample], top_n: usize) -> Profile {
        let mut per: BTreeMap<(DomainKind, String), DomainAcc> = BTreeMap::new();
        let mut classes: BTreeMap<CostClass, u64> = BTreeMap::new();
        let mut attributed = 0u64;
        for s in samples {
            per.entry((s.domain.kind, s.domain.name.clone()))
                .or_insert_with(|| DomainAcc::new(s.mode))
                .add(s);
            *classes.entry(s.class).or_default() += 1;
            attributed += s.domain.is_attributed() as u64;
        }
        let total = samples.len() as u64;
        let counts: Vec<u64> = per.values().map(|a| a.samples).collect();
        let bps = apportion(&counts);
        let domains = per
            .into_iter()
            .zip(bps)
            .map(|(((kind, name), a), bp)| a.report(kind, name, bp, top_n))
            .collect();
        Profile {
            meta,
            total_samples: total,
            attributed_fraction: if total == 0 {
                0.0
            } else {
                attributed as f64 / total as f64
            },
            domains,
            classes: class_table(&classes),
            events: Vec::new(),
        }
    }

    /// The shares per domain and class, without the functions.
    pub fn summary(&self) -> ProfileSummary {
        ProfileSummary {
            samples: self.total_samples,
            attributed_fraction: self.attributed_fraction,
            domains: self
                .domains
                .iter()
                .map(|d| (d.name.clone(), d.share_pct))
                .collect(),
            classes: self
                .classes
                .iter()
                .map(|c| (c.class.name().to_string(), c.share_pct))
                .collect(),
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serializes")
    }

    /// The table of domains: samples, share, kernel share, the share of its
    /// work (non-idle) samples in `other`, and one column per hardware event
    /// ("n/a" where not measurable, with the reason below the table).
    fn write_domains(&self, o: &mut String) {
        let _ = write!(
            o,
            "{:<20} {:>9} {:>8} {:>8} {:>8}",
            "Domain", "Samples", "Share", "Kernel", "Other/w"
        );
        for e in &self.events {
            let _ = write!(o, " {:>14}", e.event);
        }
        o.push_str("  Mode\n");
        for d in &self.domains {
            let k = if d.samples == 0 {
                0.0
            } else {
                d.kernel_samples as f64 * 100.0 / d.samples as f64
            };
            let _ = write!(
                o,
                "{:<20} {:>9} {:>7.2}% {:>7.1}% {:>7.1}%",
                d.name, d.samples, d.share_pct, k, d.other_of_work_pct
            );
            for e in &self.events {
                match (e.measurable, e.per_domain.get(&d.name)) {
                    (false, _) => {
                        let _ = write!(o, " {:>14}", "n/a");
                    }
                    (true, n) => {
                        let _ = write!(o, " {:>14}", n.copied().unwrap_or(0));
                    }
                }
            }
            let mode = match d.mode {
                Mode::Active => "active",
                Mode::Passive => "passive",
            };
            let _ = writeln!(o, "  {mode}");
        }
        for e in &self.events {
            let _ = writeln!(
                o,
                "  {}: {} (one sample every {})",
                e.event, e.note, e.period
            );
        }
    }

    /// The paper-style tables as text.
    pub fn to_text(&self) -> String {
        let m = &self.meta;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "splitnet profile: {:.2} s, {} at {} Hz on {} CPU(s), {} samples ({} lost), {:.1}% attributed, {}\n",
            m.duration_s,
            m.clock,
            m.frequency_hz,
            m.cpus.len(),
            self.total_samples,
            m.lost_samples,
            self.attributed_fraction * 100.0,
            if m.callchains { "classed by call chain" } else { "classed by leaf function" }
        );
        if m.callchains && !crate::frame_pointers() {
            let _ = writeln!(o, "warning: {}\n", crate::NO_FRAME_POINTERS);
        }
        self.write_domains(&mut o);
        let _ = writeln!(o, "\n{:<20} {:>9} {:>8}", "Cost class", "Samples", "Share");
        for c in &self.classes {
            let _ = writeln!(
                o,
                "{:<20} {:>9} {:>7.2}%",
                c.class.name(),
                c.samples,
                c.share_pct
            );
        }
        let sum: u32 = self.classes.iter().map(|c| c.basis_points).sum();
        let _ = writeln!(
            o,
            "{:<20} {:>9} {:>7.2}%",
            "total",
            self.total_samples,
            pct(sum)
        );

        let _ = write!(o, "\nClass share within each domain (%)\n{:<14}", "domain");
        for c in CostClass::ALL {
            let _ = write!(o, " {:>8}", c.short());
        }
        o.push('\n');
        for d in &self.domains {
            let _ = write!(o, "{:<14}", d.name);
            for c in &d.classes {
                let _ = write!(o, " {:>8.2}", c.share_pct);
            }
            o.push('\n');
        }
        for d in &self.domains {
            let _ = writeln!(o, "\nTop functions in {} ({} samples)", d.name, d.samples);
            let _ = writeln!(
                o,
                "  {:>7} {:>8}  {:<48} {:<18} Class",
                "Share", "Samples", "Function", "Module"
            );
            for f in &d.top_functions {
                let _ = writeln!(
                    o,
                    "  {:>6.2}% {:>8}  {:<48} {:<18} {}",
                    f.share_pct,
                    f.samples,
                    truncate(&f.function, 48),
                    truncate(&f.module, 18),
                    f.class.name()
                );
            }
        }
        o
    }

    /// A stacked bar chart: one bar per domain, its height the domain's share
    /// of all samples, its segments the cost classes.
    pub fn to_svg(&self) -> String {
        let (w, h) = (120 + 90 * self.domains.len().max(1) + 190, 420);
        let (left, top, plot_h) = (60.0, 40.0, 320.0);
        let max_share = self
            .domains
            .iter()
            .map(|d| d.share_pct)
            .fold(0.0f64, f64::max);
        let scale_top = ((max_share / 10.0).ceil() * 10.0).clamp(10.0, 100.0);
        let mut o = String::new();
        let _ = writeln!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            o,
            r#"<text x="{left}" y="22" font-size="14">Samples by domain and cost class ({} samples, {})</text>"#,
            self.total_samples,
            xml(&self.meta.clock)
        );
        // Y axis with gridlines every 10%.
        let mut g = 0.0;
        while g <= scale_top + 1e-9 {
            let y = top + plot_h - g / scale_top * plot_h;
            let _ = writeln!(
                o,
                r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{g:.0}%</text>"##,
                left + 90.0 * self.domains.len().max(1) as f64 + 20.0,
                left - 6.0,
                y + 4.0
            );
            g += 10.0;
        }
        for (i, d) in self.domains.iter().enumerate() {
            let x = left + 20.0 + 90.0 * i as f64;
            let mut y = top + plot_h;
            for c in &d.classes {
                if c.samples == 0 || self.total_samples == 0 {
                    continue;
                }
                let seg = c.samples as f64 * 100.0 / self.total_samples as f64 / scale_top * plot_h;
                y -= seg;
                let _ = writeln!(
                    o,
                    r#"<rect x="{x:.1}" y="{y:.2}" width="60" height="{seg:.2}" fill="{}"><title>{}: {} {} ({:.2}% of domain)</title></rect>"#,
                    c.class.color(),
                    xml(&d.name),
                    c.class.name(),
                    c.samples,
                    c.share_pct
                );
            }
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{:.1}%</text>"#,
                x + 30.0,
                top + plot_h + 16.0,
                xml(&d.name),
                x + 30.0,
                y - 4.0,
                d.share_pct
            );
        }
        let lx = left + 90.0 * self.domains.len().max(1) as f64 + 40.0;
        for (i, c) in CostClass::ALL.iter().enumerate() {
            let ly = top + 20.0 * i as f64;
            let _ = writeln!(
                o,
                r#"<rect x="{lx:.1}" y="{ly:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                c.color(),
                lx + 18.0,
                ly + 11.0,
                c.name()
            );
        }
        o.push_str("</svg>\n");
        o
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(domain: Domain, kernel: bool, f: &str, m: &str, class: CostClass) -> ClassifiedSample {
        ClassifiedSample {
            domain,
            kernel,
            symbol: Symbol {
                function: f.into(),
                module: m.into(),
            },
            class,
            mode: Mode::Active,
            watched: Vec::new(),
        }
    }

    fn recorded() -> Vec<ClassifiedSample> {
        let mut v = Vec::new();
        let g = Domain::named("guest1");
        let d = Domain::named("drv0");
        for _ in 0..30 {
            v.push(s(
                g.clone(),
                true,
                "tcp_sendmsg_locked",
                "kernel",
                CostClass::Network,
            ));
        }
        for _ in 0..10 {
            v.push(s(
                g.clone(),
                false,
                "splitnet_netfront::Netfront::tx",
                "splitnet",
                CostClass::Netfront,
            ));
        }
        for _ in 0..20 {
            v.push(s(
                d.clone(),
                false,
                "splitnet_driver_domain::netback::Netback::rx",
                "splitnet",
                CostClass::Netback,
            ));
        }
        for _ in 0..10 {
            v.push(s(
                d.clone(),
                true,
                "packet_sendmsg",
                "kernel",
                CostClass::Driver,
            ));
        }
        for _ in 0..15 {
            v.push(s(
                Domain::hv(),
                false,
                "splitnet_hv::grant::copy_batch",
                "splitnet",
                CostClass::InterDomainCopy,
            ));
        }
        for _ in 0..5 {
            v.push(s(
                Domain::hv(),
                false,
                "splitnet_hv::grant::acquire",
                "splitnet",
                CostClass::Grant,
            ));
        }
        for _ in 0..7 {
            v.push(s(
                Domain::idle(),
                true,
                "default_idle",
                "kernel",
                CostClass::Other,
            ));
        }
        for _ in 0..3 {
            v.push(s(
                Domain::host(),
                false,
                "[unknown]",
                "sshd",
                CostClass::Other,
            ));
        }
        v
    }

    fn meta() -> ProfileMeta {
        ProfileMeta {
            duration_s: 1.0,
            clock: "cpu-clock".into(),
            frequency_hz: 997,
            cpus: vec![0, 1],
            lost_samples: 0,
            malformed_samples: 0,
            callchains: true,
            initiator: "test".into(),
        }
    }

    #[test]
    fn shares_from_recorded_samples() {
        let p = Profile::from_samples(meta(), &recorded(), 5);
        assert_eq!(p.total_samples, 100);
        assert!((p.attributed_fraction - 0.97).abs() < 1e-12);
        let names: Vec<_> = p.domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["hv", "drv0", "guest1", "idle", "host"]);
        let g = &p.domains[2];
        assert_eq!(
            (g.samples, g.kernel_samples, g.basis_points),
            (40, 30, 4000)
        );
        assert_eq!(g.top_functions[0].function, "tcp_sendmsg_locked");
        assert!((g.top_functions[0].share_pct - 75.0).abs() < 1e-9);
        let class = |c: CostClass| p.classes.iter().find(|x| x.class == c).unwrap().share_pct;
        assert_eq!(class(CostClass::Network), 30.0);
        assert_eq!(class(CostClass::InterDomainCopy), 15.0);
        assert_eq!(class(CostClass::Other), 10.0);
        assert_eq!(
            p.classes.iter().map(|c| c.basis_points).sum::<u32>(),
            10_000
        );
        assert_eq!(
            p.domains.iter().map(|d| d.basis_points).sum::<u32>(),
            10_000
        );
        for d in &p.domains {
            assert_eq!(
                d.classes.iter().map(|c| c.basis_points).sum::<u32>(),
                10_000,
                "{}",
                d.name
            );
        }
    }

    #[test]
    fn classes_add_up_to_100_with_awkward_counts() {
        // Three equal thirds and a sliver: rounding must still give 100.00%.
        let mut v = Vec::new();
        let classes = [CostClass::Network, CostClass::Driver, CostClass::Usercopy];
        for (i, c) in classes.iter().enumerate() {
            for _ in 0..(333 + i) {
                v.push(s(Domain::named("g"), true, "f", "kernel", *c));
            }
        }
        v.push(s(Domain::hv(), false, "x", "y", CostClass::Hypervisor));
        let p = Profile::from_samples(meta(), &v, 3);
        assert_eq!(
            p.classes.iter().map(|c| c.basis_points).sum::<u32>(),
            10_000
        );
        let total: f64 = p.classes.iter().map(|c| c.share_pct).sum();
        assert!((total - 100.0).abs() < 1e-9, "{total}");
        assert_eq!(apportion(&[1, 1, 1]), vec![3334, 3333, 3333]);
        assert_eq!(apportion(&[0, 0]), vec![0, 0]);
    }

    #[test]
    fn idle_is_not_work_and_events_get_columns() {
        let mut v = recorded();
        for _ in 0..10 {
            v.push(s(
                Domain::named("drv0"),
                true,
                "pv_native_safe_halt",
                "kernel",
                CostClass::Idle,
            ));
            v.push(s(
                Domain::named("drv0"),
                false,
                "main",
                "x",
                CostClass::Other,
            ));
        }
        let mut p = Profile::from_samples(meta(), &v, 3);
        let drv = p.domains.iter().find(|d| d.name == "drv0").unwrap();
        // 30 recorded + 20 new; 10 idle, 10 other of 40 work.
        assert_eq!((drv.samples, drv.work_samples), (50, 40));
        assert!((drv.other_of_work_pct - 25.0).abs() < 1e-9);
        p.events = vec![
            EventReport {
                event: "instructions".into(),
                period: 1000,
                measurable: true,
                note: "3 samples, 0 lost".into(),
                total: 3000,
                per_domain: [("drv0".to_string(), 2000), ("hv".to_string(), 1000)].into(),
            },
            EventReport {
                event: "dtlb-misses".into(),
                period: 1000,
                measurable: false,
                note: "not measurable here (No such file or directory (os error 2))".into(),
                total: 0,
                per_domain: BTreeMap::new(),
            },
        ];
        let t = p.to_text();
        let row = t.lines().find(|l| l.starts_with("drv0 ")).unwrap();
        assert!(row.contains(" 2000 ") && row.contains(" n/a "), "{row}");
        assert!(t.contains("dtlb-misses: not measurable here"), "{t}");
        let back: Profile = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn renders_json_text_and_svg() {
        let p = Profile::from_samples(meta(), &recorded(), 3);
        let j: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(j["attributed_fraction"], 0.97);
        assert_eq!(j["clock"], "cpu-clock");
        assert_eq!(j["classes"][1]["class"], "inter_domain_copy");
        let back: Profile = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(back, p);
        let t = p.to_text();
        assert!(
            t.contains("guest1") && t.contains("tcp_sendmsg_locked") && t.contains("100.00%"),
            "{t}"
        );
        let svg = p.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<title>").count(), 8);
    }
}
