//! Whether the machine itself stopped. A real-time probe thread sleeps
//! 5 ms at a time and notes every wake-up that came late. A real-time
//! thread runs ahead of every ordinary task, so a late wake-up is time the
//! machine gave to nobody: the kernel was stuck, or the hypervisor beneath
//! this virtual machine ran someone else. Each core's steal time
//! (`/proc/stat`) over the same span tells the two apart: a stall during
//! which every core was stolen from is the host's, and what it breaks is
//! not splitnet's doing. The same readings give the machine's idle share
//! second by second, so that a flow slowed while the CPUs had nothing left
//! to give is told from one slowed by splitnet.

use super::background::Background;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the probe sleeps between wake-ups.
const TICK: Duration = Duration::from_millis(5);
/// A wake-up this late is a stall of the machine.
const STALL: Duration = Duration::from_millis(250);
/// How often the probe reads the cores' steal time between stalls.
const STEAL_EVERY: Duration = Duration::from_millis(100);
/// `/proc/stat` counts in USER_HZ, 100 a second on every Linux port.
const USER_HZ: f64 = 100.0;
/// A host stall this long can break the soak's shortest protocol timer
/// (BGP's 3 s hold time, kept alive each second), s.
pub const BREAKS_TIMERS_S: f64 = 2.0;

/// A stretch in which the probe did not run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stall {
    /// When the probe last ran before it, s since the soak's start.
    pub start_s: f64,
    pub ms: f64,
    /// The least steal time of any core across it, ms (None: unreadable).
    pub steal_ms: Option<f64>,
}

impl Stall {
    /// The host's: every core was stolen from for at least half of it.
    pub fn hosts(&self) -> bool {
        self.steal_ms.is_some_and(|s| s >= self.ms / 2.0)
    }

    /// Whether this is a host stall long enough to break timers, inside
    /// `from_s..to_s`.
    pub fn breaks_within(&self, from_s: f64, to_s: f64) -> bool {
        self.hosts()
            && self.ms / 1e3 >= BREAKS_TIMERS_S
            && self.start_s <= to_s
            && self.start_s + self.ms / 1e3 >= from_s
    }
}

/// What the probe saw over the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MachineRecord {
    /// It ran as a real-time thread (else its late wake-ups prove less).
    pub realtime: bool,
    pub wakeups: u64,
    /// Its latest wake-up, ms late.
    pub latest_ms: f64,
    /// Steal time over the run, summed over the cores, s.
    pub steal_s: f64,
    pub stalls: Vec<Stall>,
    /// The share of the cores' time that was idle, in each second of the
    /// run from the soak's start (stolen time is not idle).
    #[serde(skip)]
    pub idle: Vec<f32>,
}

impl MachineRecord {
    /// Whether a host stall that breaks timers overlaps `from_s..to_s`.
    pub fn host_stalled(&self, from_s: f64, to_s: f64) -> bool {
        self.stalls.iter().any(|s| s.breaks_within(from_s, to_s))
    }

    /// The idle share over the seconds wholly inside each of `spans`;
    /// None when none is.
    pub fn idle_in(&self, spans: &[(f64, f64)]) -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0usize);
        for &(a, b) in spans {
            let (first, last) = (a.max(0.0).ceil() as usize, b.max(0.0).floor() as usize);
            let bins = self.idle.get(first..last.min(self.idle.len()));
            for v in bins.unwrap_or(&[]).iter().filter(|v| !v.is_nan()) {
                sum += f64::from(*v);
                n += 1;
            }
        }
        (n > 0).then(|| sum / n as f64)
    }
}

/// The running probe.
pub struct Probe(Background<MachineRecord>);

impl Probe {
    /// Starts the probe; times are seconds since `t0`. With `say`, each
    /// stall is told on stderr as it ends.
    pub fn start(t0: Instant, say: bool) -> std::io::Result<Probe> {
        Background::spawn("soak-probe", move |stop| watch(t0, stop, say)).map(Probe)
    }

    /// Stops the probe: what it saw.
    pub fn finish(self) -> MachineRecord {
        self.0.finish()
    }
}

fn watch(t0: Instant, stop: &AtomicBool, say: bool) -> MachineRecord {
    let mut r = MachineRecord {
        realtime: sys::set_thread_realtime(1).is_ok(),
        ..MachineRecord::default()
    };
    let first = stat();
    // The seconds before the probe started are not known.
    r.idle.resize(t0.elapsed().as_secs() as usize, f32::NAN);
    let mut read = (Instant::now(), first.clone());
    let mut second = first.clone();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        std::thread::sleep(TICK);
        let late = t.elapsed().saturating_sub(TICK);
        r.wakeups += 1;
        r.latest_ms = r.latest_ms.max(late.as_secs_f64() * 1e3);
        if late < STALL && read.0.elapsed() < STEAL_EVERY {
            continue;
        }
        let now = stat();
        if late >= STALL {
            let stall = Stall {
                start_s: t.saturating_duration_since(t0).as_secs_f64(),
                ms: late.as_secs_f64() * 1e3,
                steal_ms: least_steal(read.1.as_ref(), now.as_ref()).map(|d| d * 1e3),
            };
            if say {
                eprintln!("bench soak: {}", describe(&stall));
            }
            r.stalls.push(stall);
        }
        let bin = t0.elapsed().as_secs() as usize;
        if bin > r.idle.len() {
            // A stall spans seconds: each gets the share measured across it.
            let share = idle_share(second.as_ref(), now.as_ref()).unwrap_or(f32::NAN);
            r.idle.resize(bin, share);
            second = now.clone();
        }
        read = (Instant::now(), now);
    }
    r.steal_s = match (first.as_ref(), read.1.as_ref()) {
        (Some(a), Some(b)) => {
            let stolen: u64 = a
                .steal
                .iter()
                .zip(&b.steal)
                .map(|(x, y)| y.saturating_sub(*x))
                .sum();
            stolen as f64 / USER_HZ
        }
        _ => 0.0,
    };
    r
}

/// `the machine ran nothing of ours for 12.3 s at 1915.0 s (every core stolen 11.9 s: the host's)`.
pub fn describe(s: &Stall) -> String {
    let steal = match s.steal_ms {
        Some(st) if s.hosts() => format!("every core stolen {:.1} s: the host's", st / 1e3),
        Some(st) => format!("steal {:.2} s: not the host's", st / 1e3),
        None => "steal unreadable".into(),
    };
    format!(
        "the machine ran nothing of ours for {:.2} s at {:.1} s ({steal})",
        s.ms / 1e3,
        s.start_s
    )
}

/// What `/proc/stat` says, in USER_HZ ticks: each core's steal time, and
/// all cores' idle time and total time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    steal: Vec<u64>,
    idle: u64,
    total: u64,
}

/// `/proc/stat` now; None when it cannot be read.
fn stat() -> Option<Stat> {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .map(|t| parse_stat(&t))
}

/// The fields of a `cpu` line: user, nice, system, idle, iowait, irq,
/// softirq, steal (guest time is inside user's).
fn fields(line: &str) -> Vec<u64> {
    line.split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().unwrap_or(0))
        .collect()
}

fn parse_stat(text: &str) -> Stat {
    let mut s = Stat {
        steal: Vec::new(),
        idle: 0,
        total: 0,
    };
    for l in text.lines().filter(|l| l.starts_with("cpu")) {
        let f = fields(l);
        if l.as_bytes().get(3).is_some_and(u8::is_ascii_digit) {
            s.steal.push(f.get(7).copied().unwrap_or(0));
        } else {
            s.idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
            s.total = f.iter().sum();
        }
    }
    s
}

/// The least steal growth of any core between two readings, s.
fn least_steal(a: Option<&Stat>, b: Option<&Stat>) -> Option<f64> {
    let (a, b) = (&a?.steal, &b?.steal);
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let least = a.iter().zip(b).map(|(x, y)| y.saturating_sub(*x)).min()?;
    Some(least as f64 / USER_HZ)
}

/// The idle share of the cores' time between two readings.
fn idle_share(a: Option<&Stat>, b: Option<&Stat>) -> Option<f32> {
    let (a, b) = (a?, b?);
    let total = b.total.checked_sub(a.total).filter(|t| *t > 0)?;
    Some(b.idle.saturating_sub(a.idle) as f32 / total as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  4552795 74071 2176735 6283136 36324 0 324423 25630 0 0\n\
                        cpu0 2194082 37015 1078530 3245345 10435 0 162681 12844 0 0\n\
                        cpu1 2358725 37055 1098226 3042104 25889 0 161743 12790 0 0\n\
                        intr 1 2 3\n";

    #[test]
    fn steal_and_idle_are_read() {
        let a = parse_stat(STAT);
        assert_eq!(a.steal, vec![12844, 12790]);
        assert_eq!(a.idle, 6283136 + 36324);
        let later = STAT
            .replace("12844", &(12844 + 1190).to_string())
            .replace("12790", &(12790 + 1200).to_string())
            .replace(
                "cpu  4552795 74071 2176735 6283136",
                "cpu  4552895 74071 2176735 6283436",
            );
        let b = parse_stat(&later);
        assert_eq!(least_steal(Some(&a), Some(&b)), Some(11.9));
        assert_eq!(idle_share(Some(&a), Some(&b)), Some(0.75));
        let one = Stat {
            steal: vec![1],
            ..a.clone()
        };
        assert_eq!(least_steal(Some(&one), Some(&b)), None);
        let r = MachineRecord {
            idle: vec![0.5, 0.1, 0.3, 0.9],
            ..MachineRecord::default()
        };
        let got = r.idle_in(&[(0.5, 3.0), (3.0, 9.0)]).unwrap();
        assert!((got - (0.1 + 0.3 + 0.9) / 3.0).abs() < 1e-6, "{got}");
        assert_eq!(r.idle_in(&[(0.2, 0.9)]), None);
    }

    #[test]
    fn a_stall_is_the_hosts_only_when_every_core_was_stolen_from() {
        let s = |ms: f64, steal_ms| Stall {
            start_s: 100.0,
            ms,
            steal_ms,
        };
        assert!(s(12_000.0, Some(11_900.0)).hosts());
        assert!(!s(12_000.0, Some(300.0)).hosts());
        assert!(!s(12_000.0, None).hosts());
        let r = MachineRecord {
            stalls: vec![s(12_000.0, Some(11_900.0)), s(1_000.0, Some(1_000.0))],
            ..MachineRecord::default()
        };
        assert!(r.host_stalled(105.0, 130.0));
        assert!(!r.host_stalled(113.0, 130.0), "after the stall ended");
        let short = MachineRecord {
            stalls: vec![s(1_000.0, Some(1_000.0))],
            ..MachineRecord::default()
        };
        assert!(
            !short.host_stalled(90.0, 130.0),
            "too short to break a timer"
        );
    }

    #[test]
    fn the_probe_runs_and_stops() {
        let p = Probe::start(Instant::now(), false).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let r = p.finish();
        assert!(r.wakeups >= 1, "{r:?}");
        assert!(r.steal_s >= 0.0);
    }
}
