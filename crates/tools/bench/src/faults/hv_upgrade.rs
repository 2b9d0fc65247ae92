//! hv upgraded in place (`splitnet upgrade --hv`), or killed with SIGKILL
//! and started again by its guardian, during an iperf3 stream each way
//! between guest1 and the wire host and a ping every millisecond from the
//! wire host to guest1: the longest gap in each stream's progress and
//! between two ping replies around the event, against the longest gap in
//! as long a window just before it; and how long the control plane did
//! not answer, from the request (or the kill) until `status` reports the
//! new program's outcome. Targets: for an upgrade, the longest gap at most
//! 20 ms and the control plane back within 200 ms; for a kill, the longest
//! gap at most 500 ms.

use super::upgrade::{longest_gap, Progress, WINDOW};
use super::{say, stream_cell, FaultsOptions, Up};
use crate::stats::median;
use anyhow::{anyhow, bail, Result};
use hv::Toolstack;
use serde::Serialize;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The longest gap an upgrade of hv may leave in the data path.
pub const TARGET_GAP_MS: f64 = 20.0;
/// The longest the control plane may not answer across an upgrade.
pub const TARGET_CONTROL_MS: f64 = 200.0;
/// The longest gap a killed hv's restart may leave in the data path.
pub const TARGET_CRASH_GAP_MS: f64 = 500.0;

/// What happens to hv mid-stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// `upgrade --hv`.
    Upgrade,
    /// SIGKILL; its guardian starts it again.
    Crash,
}

impl Event {
    fn noun(self) -> &'static str {
        match self {
            Event::Upgrade => "upgrade",
            Event::Crash => "kill",
        }
    }

    /// (longest gap, control plane back) targets in ms; None: no target.
    fn targets(self) -> (f64, Option<f64>) {
        match self {
            Event::Upgrade => (TARGET_GAP_MS, Some(TARGET_CONTROL_MS)),
            Event::Crash => (TARGET_CRASH_GAP_MS, None),
        }
    }
}

/// One upgrade of hv during the streams and the ping.
#[derive(Debug, Serialize)]
pub struct HvUpgrade {
    /// Longest gap in the wire host's received bytes around the upgrade.
    pub gap_out_ms: f64,
    /// The same for guest1's received bytes.
    pub gap_in_ms: f64,
    /// Longest time between two ping replies around the upgrade.
    pub ping_gap_ms: f64,
    /// Longest of the three in the window before the upgrade.
    pub quiet_gap_ms: f64,
    /// From the request until `status` reported the upgrade's outcome.
    pub control_ms: f64,
    /// What hv reported: from recording its state until the new program
    /// served.
    pub handover_ms: f64,
    /// The iperf3 client exited 0.
    pub stream_ok: bool,
}

impl HvUpgrade {
    /// The longest data-path gap of the three.
    pub fn gap_ms(&self) -> f64 {
        self.gap_out_ms.max(self.gap_in_ms).max(self.ping_gap_ms)
    }
}

/// The upgrades (or kills) of hv, and whether they met the targets.
#[derive(Debug, Serialize)]
pub struct HvUpgrades {
    pub event: Event,
    pub runs: Vec<HvUpgrade>,
    pub median_gap_ms: f64,
    pub median_quiet_gap_ms: f64,
    pub median_control_ms: f64,
}

impl HvUpgrades {
    /// Both targets met, and every stream ended cleanly.
    pub fn passed(&self) -> bool {
        let (gap, control) = self.event.targets();
        self.median_gap_ms <= gap
            && control.is_none_or(|c| self.median_control_ms <= c)
            && self.runs.iter().all(|u| u.stream_ok)
    }

    /// A Markdown summary.
    pub fn table(&self) -> String {
        let mut s = match self.event {
            Event::Upgrade => String::from(
                "### hv upgraded in place during an iperf3 stream each way and a 1 ms ping\n\n",
            ),
            Event::Crash => String::from(
                "### hv killed (SIGKILL) and started again by its guardian during an iperf3 stream each way and a 1 ms ping\n\n",
            ),
        };
        let n = self.event.noun();
        s += &format!("| {n} | longest gap guest1 → wire (ms) | wire → guest1 (ms) | between ping replies (ms) | longest gap just before (ms) | control plane back after (ms) | domains adopted after, as hv says (ms) | stream |\n|---|---|---|---|---|---|---|---|\n");
        for (i, u) in self.runs.iter().enumerate() {
            s += &format!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
                i + 1,
                u.gap_out_ms,
                u.gap_in_ms,
                u.ping_gap_ms,
                u.quiet_gap_ms,
                u.control_ms,
                u.handover_ms,
                stream_cell(u.stream_ok)
            );
        }
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        let (gap, control) = self.event.targets();
        s += &format!(
            "\nMedian longest gap {:.1} ms (target ≤ {gap:.0} ms: {}); {:.1} ms in the same window length without {}. Median control plane back after {:.1} ms{}.\n\n",
            self.median_gap_ms,
            met(self.median_gap_ms <= gap),
            self.median_quiet_gap_ms,
            match self.event {
                Event::Upgrade => "an upgrade",
                Event::Crash => "a kill",
            },
            self.median_control_ms,
            match control {
                Some(c) => format!(" (target ≤ {c:.0} ms: {})", met(self.median_control_ms <= c)),
                None => " (no target)".into(),
            },
        );
        s
    }
}

/// `opts.upgrades` upgrades (or kills) of hv, each during its own streams
/// and ping.
pub(super) fn run(opts: &FaultsOptions, event: Event) -> Result<HvUpgrades> {
    let (mut up, srv, mut ts) = super::with_iperf3_server(opts)?;
    let mut runs = Vec::new();
    for k in 0..opts.upgrades {
        let u = one(&mut up, &mut ts, srv, event)?;
        say(
            opts,
            &format!(
                "hv {} {}/{}: longest gap {:.1} ms out, {:.1} ms in, {:.1} ms between pings ({:.1} ms just before); control plane back after {:.1} ms; stream {}",
                event.noun(),
                k + 1,
                opts.upgrades,
                u.gap_out_ms,
                u.gap_in_ms,
                u.ping_gap_ms,
                u.quiet_gap_ms,
                u.control_ms,
                if u.stream_ok { "ended cleanly" } else { "FAILED" }
            ),
        );
        runs.push(u);
    }
    let of = |f: fn(&HvUpgrade) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    Ok(HvUpgrades {
        event,
        median_gap_ms: of(HvUpgrade::gap_ms),
        median_quiet_gap_ms: of(|u| u.quiet_gap_ms),
        median_control_ms: of(|u| u.control_ms),
        runs,
    })
}

/// A ping every millisecond from the wire host to guest1 for `secs`, its
/// replies stamped (`-D`).
fn start_ping(up: &Up<'_>, secs: u32) -> Result<Child> {
    let count = (secs * 1000).to_string();
    let cmd = ["ping", "-D", "-n", "-i", "0.001", "-c", &count, "10.77.0.1"];
    Ok(up
        .exec_cmd("wire", &cmd)?
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

/// The moments of `ping -D`'s replies, as instants of this clock: the
/// stamps are wall-clock seconds, mapped through one (instant, wall
/// time) pair.
fn ping_replies(text: &str, at: (Instant, SystemTime)) -> Vec<Instant> {
    let wall0 =
        at.1.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.contains("bytes from")) {
        let stamp = line
            .strip_prefix('[')
            .and_then(|l| l.split(']').next())
            .and_then(|s| s.parse::<f64>().ok());
        if let Some(s) = stamp {
            let d = Duration::from_secs_f64(s);
            out.push(match d.checked_sub(wall0) {
                Some(after) => at.0 + after,
                None => at.0 - (wall0 - d),
            });
        }
    }
    out
}

/// Asks for an upgrade of hv and waits until `status` reports its
/// outcome: (the outcome, when it was seen).
fn upgrade_hv(up: &Up<'_>, ts: &mut Toolstack) -> Result<(String, Instant)> {
    let n = ts
        .upgrade_hv(None)
        .map_err(|e| anyhow!("upgrade --hv: {e}"))?;
    let socket = up.socket();
    let fact = toolstack::handover::wait_outcome(ts, &socket, &n, Duration::from_secs(30))
        .map_err(|e| anyhow!(e))?;
    Ok((fact, Instant::now()))
}

/// Kills hv and waits until the hv its guardian started reports that it
/// adopted the domains: (its report, when it was seen). `ts` is then a
/// connection to the new hv.
fn kill_hv(up: &Up<'_>, ts: &mut Toolstack) -> Result<(String, Instant)> {
    let pid = ts.status().map_err(|e| anyhow!("status: {e}"))?.hv_pid;
    sys::kill(pid as i32, libc::SIGKILL)?;
    let died = format!("hv pid {pid} died");
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let fact = (up.toolstack().ok())
            .and_then(|mut t| Some((t.status().ok()?.info.get("hv_recovery")?.clone(), t)));
        if let Some((fact, t)) = fact.filter(|(f, _)| f.contains(&died)) {
            *ts = t;
            return Ok((fact, Instant::now()));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    bail!("no hv took over within 30 s of killing hv (pid {pid})")
}

/// The time hv took to take over, from its outcome: `<n> ok <µs> us: …`
/// after an upgrade, `… adopted <µs> us later …` after a kill.
fn handover_ms(fact: &str) -> Result<f64> {
    let w: Vec<&str> = fact.split_whitespace().collect();
    let us = match w.as_slice() {
        [_, "ok", us, "us:", ..] => Some(*us),
        _ => w
            .windows(3)
            .find(|x| x[0] == "adopted" && x[2] == "us")
            .map(|x| x[1]),
    };
    match us {
        Some(us) => Ok(us.parse::<f64>()? / 1e3),
        None => bail!("hv: {fact}"),
    }
}

/// One upgrade (or kill) in the middle of a `--bidir` stream and a ping.
fn one(up: &mut Up<'_>, ts: &mut Toolstack, srv: u32, event: Event) -> Result<HvUpgrade> {
    let (g1, client) = super::start_bidir(up, ts, srv, "3")?;
    let clock = (Instant::now(), SystemTime::now());
    let ping = start_ping(up, 2)?;
    let stop = Arc::new(AtomicBool::new(false));
    let t_sample = Instant::now();
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || Progress::sample(srv, g1, &stop))
    };
    std::thread::sleep(2 * WINDOW);
    let t0 = Instant::now();
    let answer = match event {
        Event::Upgrade => upgrade_hv(up, ts),
        Event::Crash => kill_hv(up, ts),
    };
    let t1 = Instant::now();
    std::thread::sleep(WINDOW);
    stop.store(true, Ordering::Relaxed);
    let p = sampler
        .join()
        .map_err(|_| anyhow!("the sampler panicked"))?;
    let out = ping.wait_with_output()?;
    let (fact, seen) = answer?;
    let replies = ping_replies(&String::from_utf8_lossy(&out.stdout), clock);
    let stream_ok = up.wait_child(client, Duration::from_secs(60))?;
    let (from, to) = (t0, t1 + WINDOW);
    let quiet = (t0 - (to - from)).max(t_sample);
    let quiet_gap = [&p.out, &p.inn, &replies]
        .iter()
        .map(|s| longest_gap(s, quiet, t0))
        .fold(0.0, f64::max);
    Ok(HvUpgrade {
        gap_out_ms: longest_gap(&p.out, from, to),
        gap_in_ms: longest_gap(&p.inn, from, to),
        ping_gap_ms: longest_gap(&replies, from, to),
        quiet_gap_ms: quiet_gap,
        control_ms: (seen - t0).as_secs_f64() * 1e3,
        handover_ms: handover_ms(&fact)?,
        stream_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_stamps_become_instants_and_the_outcome_is_read() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let now = Instant::now();
        let text = "PING 10.77.0.1 56(84) bytes of data.\n[1000.250000] 64 bytes from 10.77.0.1: icmp_seq=1 ttl=64 time=0.1 ms\n[999.5] 64 bytes from 10.77.0.1: icmp_seq=2 ttl=64 time=0.1 ms\n";
        let r = ping_replies(text, (now, wall));
        assert_eq!(
            r,
            vec![
                now + Duration::from_millis(250),
                now - Duration::from_millis(500)
            ]
        );
        assert!((handover_ms("3 ok 21500 us: /a took over from /b").unwrap() - 21.5).abs() < 1e-9);
        let crash = "hv pid 12 died; its domains adopted 10554 us later, as recorded 426 ms before";
        assert!((handover_ms(crash).unwrap() - 10.554).abs() < 1e-9);
        let e = handover_ms("3 rolled back: x").unwrap_err().to_string();
        assert!(e.contains("rolled back"), "{e}");
    }
}
