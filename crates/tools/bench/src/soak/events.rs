//! The soak's faults and hostile peers, one at a time, each a window of
//! the run with its moment and what it did: a driver domain killed
//! (SIGKILL, hv restarts it) or stopped (SIGSTOP) for seconds, a guest
//! killed, a guest whose RX ring stalls (Xen XSA-392: SIGSTOP of its
//! process, so it posts no buffers while traffic for it arrives), a
//! hostile VM's attacks on the driver domain's vhost-user backend
//! (XSA-332/391's event floods among them), a VMM killed mid-attack, and
//! the uplink's link flapping (the driver domain's port down for seconds,
//! the carrier lost at the wire host, as a pulled cable), and a
//! guest whose shared memory is scribbled on while it sends (its emulated
//! NIC's rings and buffers, as a hostile guest kernel would), and, between
//! the underlay's hosts ([`super::crosshost`]), a bgpd killed and a BGP
//! session dropped by nftables; and the driver domain upgraded in place
//! (`splitnet upgrade drv`), which must keep its process and domain; and
//! hv itself upgraded or killed ([`super::hv_events`]).

use super::Lab;
use crate::faults::{domain_pid, kill_domain, rss_kib};
use crate::hostile_vm::Attack;
use crate::netenv::{scribble_driver_area, shared_mapping};
use crate::rng::SplitMix;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The guest that is killed and stalled; the flows through it are marked.
pub const VICTIM: &str = "guest2";
/// The hosted guest, in no flow, whose memory is scribbled on.
pub const SCRIBBLER: &str = "guest7";

/// One fault or hostile peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    KillDriver,
    StopDriver,
    KillGuest,
    StallGuest,
    Attack(Attack),
    KillVmm,
    FlapUplink,
    Scribble,
    KillBgpd,
    DropBgp,
    UpgradeDriver,
    UpgradeHv,
    KillHv,
}

impl Event {
    /// Every event the soak draws from.
    pub fn all() -> Vec<Event> {
        let mut v = vec![
            Event::KillDriver,
            Event::StopDriver,
            Event::KillGuest,
            Event::StallGuest,
            Event::KillVmm,
            Event::FlapUplink,
            Event::Scribble,
            Event::KillBgpd,
            Event::DropBgp,
            Event::UpgradeDriver,
            Event::UpgradeHv,
            Event::KillHv,
        ];
        v.extend(Attack::ALL.iter().map(|&a| Event::Attack(a)));
        v
    }

    pub fn name(self) -> String {
        match self {
            Event::KillDriver => "SIGKILL drv".into(),
            Event::StopDriver => "SIGSTOP drv".into(),
            Event::KillGuest => format!("SIGKILL {VICTIM}"),
            Event::StallGuest => format!("{VICTIM} stalls its RX ring"),
            Event::Attack(a) => format!("hostile VM: {}", a.name()),
            Event::KillVmm => "SIGKILL the VMM mid kick storm".into(),
            Event::FlapUplink => "the uplink's link flaps".into(),
            Event::Scribble => format!("{SCRIBBLER} scribbles on its NIC's memory"),
            Event::KillBgpd => "SIGKILL host a's bgpd".into(),
            Event::DropBgp => "host a's BGP dropped by nftables".into(),
            Event::UpgradeDriver => "drv upgraded in place".into(),
            Event::UpgradeHv => "hv upgraded in place".into(),
            Event::KillHv => "SIGKILL hv".into(),
        }
    }

    /// A hostile peer (as opposed to a fault): the others' throughput in
    /// its window is set against the quiet windows'.
    pub fn hostile(self) -> bool {
        matches!(self, Event::StallGuest | Event::Attack(_) | Event::Scribble)
    }

    /// The domain whose process the event kills, if any.
    pub fn kills(self) -> Option<&'static str> {
        match self {
            Event::KillDriver => Some("drv"),
            Event::KillGuest => Some(VICTIM),
            _ => None,
        }
    }

    /// How long it lasts, drawn from `rng` (ms; a kill takes none).
    fn draw_length(self, rng: &mut SplitMix) -> u64 {
        match self {
            Event::KillDriver
            | Event::KillGuest
            | Event::KillBgpd
            | Event::UpgradeDriver
            | Event::UpgradeHv
            | Event::KillHv => 0,
            Event::StopDriver => rng.between(1000, 3000),
            Event::StallGuest => rng.between(2000, 6000),
            Event::Attack(_) => rng.between(3000, 6000),
            Event::KillVmm => rng.between(500, 2000),
            Event::FlapUplink => rng.between(1000, 3000),
            Event::Scribble => rng.between(2000, 4000),
            // Past the sessions' 3 s hold time, so that they go down.
            Event::DropBgp => rng.between(4000, 6000),
        }
    }

    /// The domain the event stops or stalls, if any.
    pub fn stops(self) -> Option<&'static str> {
        match self {
            Event::StopDriver => Some("drv"),
            Event::StallGuest => Some(VICTIM),
            _ => None,
        }
    }
}

/// One step of a soak: a quiet spell, then an event of a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub quiet_ms: u64,
    pub event: Event,
    pub length_ms: u64,
}

/// The soak's sequence of steps, the seed's alone: the events come in
/// rounds, each round every event once in an order the seed shuffles, so
/// that a run of one round has met every fault and peer.
pub struct Plan {
    rng: SplitMix,
    deck: Vec<Event>,
}

impl Plan {
    pub fn new(seed: u64) -> Plan {
        Plan {
            rng: SplitMix(seed),
            deck: Vec::new(),
        }
    }

    pub fn next_step(&mut self) -> Step {
        if self.deck.is_empty() {
            self.deck = Event::all();
            for i in (1..self.deck.len()).rev() {
                let j = self.rng.below(i + 1);
                self.deck.swap(i, j);
            }
        }
        // Short enough that CI's three minutes hold a whole round.
        let quiet_ms = self.rng.between(2000, 4000);
        let event = self.deck.pop().expect("a full deck");
        Step {
            quiet_ms,
            event,
            length_ms: event.draw_length(&mut self.rng),
        }
    }
}

/// One event as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub event: Event,
    pub name: String,
    /// Seconds since the soak's start.
    pub start_s: f64,
    pub end_s: f64,
    /// What it did and what came of it.
    pub detail: String,
    /// The driver domain's resident memory before and at its peak during
    /// the event, KiB (a stalled guest's cost to it).
    pub drv_rss_kib: Option<(u64, u64)>,
    /// hv's resident memory at the window's end, KiB (its course over a
    /// run tells growth that levels off from a leak).
    pub hv_rss_kib: u64,
    /// Why the event failed (a domain that did not come back, a hostile
    /// VM that could not run): the run ends there and fails.
    pub error: Option<String>,
}

impl Lab {
    /// Runs `step`'s event and returns its window, failed or not.
    pub fn run_event(&self, step: &Step) -> Window {
        let (event, ms) = (step.event, step.length_ms);
        let start = Instant::now();
        let mut w = Window {
            event,
            name: event.name(),
            start_s: self.secs(start),
            end_s: 0.0,
            detail: String::new(),
            drv_rss_kib: None,
            hv_rss_kib: 0,
            error: None,
        };
        let done = match event {
            Event::KillDriver => self.kill_domain("drv"),
            Event::KillGuest => self.kill_domain(VICTIM),
            Event::StopDriver => self.stop_for("drv", ms, &mut w),
            Event::StallGuest => self.stop_for(VICTIM, ms, &mut w),
            Event::Attack(a) => self.attack(a, ms as f64 / 1e3, None),
            Event::KillVmm => self.attack(Attack::KickStorm, 30.0, Some(Duration::from_millis(ms))),
            Event::FlapUplink => self.flap_uplink(ms),
            Event::Scribble => self.scribble(ms),
            Event::KillBgpd => self.kill_bgpd(),
            Event::DropBgp => self.drop_bgp(ms),
            Event::UpgradeDriver => self.upgrade_driver(),
            Event::UpgradeHv => self.hv_event(false),
            Event::KillHv => self.hv_event(true),
        };
        match done {
            Ok(detail) => w.detail = detail,
            Err(e) => {
                w.detail = format!("FAILED: {e:#}");
                w.error = Some(format!("{e:#}"));
            }
        }
        w.end_s = self.secs(Instant::now());
        w.hv_rss_kib = self
            .toolstack()
            .and_then(|mut ts| ts.status().map_err(|e| anyhow!("{e}")))
            .ok()
            .and_then(|s| rss_kib(s.hv_pid))
            .unwrap_or(0);
        w
    }

    /// SIGKILL of `name`'s process; returns once hv has it running again,
    /// a new process taking the domain over in place or a new domain,
    /// with its vifs Connected.
    fn kill_domain(&self, name: &str) -> Result<String> {
        let mut ts = self.toolstack()?;
        let (t0, (old, pid)) = kill_domain(&mut ts, name)?;
        // Looked at every 10 ms: hv is restarting a domain meanwhile.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.running_again(&mut ts, name, pid) {
            if Instant::now() > deadline {
                bail!("{name} was not running again, connected, 20 s after its kill");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = t0.elapsed().as_secs_f64() * 1e3;
        let now = ts.status().ok().and_then(|s| domain_pid(&s, name));
        let how = match now {
            Some((id, _)) if id == old => "taken over in place by a new process".to_string(),
            Some((id, _)) => format!("running again as domain {id}"),
            None => "running again".to_string(),
        };
        Ok(format!(
            "domain {old} killed; {how}, its vifs Connected, after {took:.0} ms"
        ))
    }

    /// `splitnet upgrade drv`: the same domain goes on with the program
    /// run again in the new process the report names; returns once every
    /// vif is Connected (a VM's vhost-user connection comes back as after
    /// a crash).
    fn upgrade_driver(&self) -> Result<String> {
        let mut ts = self.toolstack()?;
        let s = ts.status().map_err(|e| anyhow!("{e}"))?;
        let before = domain_pid(&s, "drv").ok_or_else(|| anyhow!("drv is not running"))?;
        let t0 = Instant::now();
        let text = ts.upgrade("drv", None).map_err(|e| anyhow!("{e}"))?;
        let r: toolstack::supervisor::UpgradeReport =
            serde_json::from_str(&text).map_err(|e| anyhow!("upgrade report {text:?}: {e}"))?;
        let after = (before.0, r.pid);
        self.await_connected(&mut ts, "drv's upgrade", |s| {
            let now = domain_pid(s, "drv");
            if now != Some(after) {
                bail!("drv's upgrade reported (domain, pid) {after:?}, but status says {now:?}");
            }
            Ok(())
        })?;
        Ok(format!(
            "same domain {}, process {} after {}: vifs unserved {:.1} ms, {} frames dropped; every vif Connected after {:.0} ms",
            before.0,
            r.pid,
            before.1,
            r.unserved_us as f64 / 1e3,
            r.dropped_frames,
            t0.elapsed().as_secs_f64() * 1e3
        ))
    }

    /// Whether `name` runs under an id other than `old` and every vif of
    /// the topology is Connected at both ends.
    fn running_again(&self, ts: &mut hv::Toolstack, name: &str, old_pid: i32) -> bool {
        let Ok(s) = ts.status() else { return false };
        let renewed = domain_pid(&s, name).is_some_and(|(_, p)| p != old_pid);
        renewed && self.all_connected(ts, &s)
    }

    /// SIGSTOP of `name` for `ms`, then SIGCONT; samples the driver
    /// domain's resident memory meanwhile.
    fn stop_for(&self, name: &str, ms: u64, w: &mut Window) -> Result<String> {
        let mut ts = self.toolstack()?;
        let s = ts.status().map_err(|e| anyhow!("{e}"))?;
        let (_, pid) = domain_pid(&s, name).ok_or_else(|| anyhow!("{name} is not running"))?;
        let (_, drv) = domain_pid(&s, "drv").ok_or_else(|| anyhow!("drv is not running"))?;
        let before = rss_kib(drv as u32).unwrap_or(0);
        let mut peak = before;
        signal("STOP", pid)?;
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            peak = peak.max(rss_kib(drv as u32).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(100));
        }
        signal("CONT", pid)?;
        w.drv_rss_kib = Some((before, peak));
        Ok(format!(
            "stopped for {ms} ms; drv's resident memory {before} KiB before, {peak} KiB at most"
        ))
    }

    /// Takes the driver domain's end of the wire link (its port) down for
    /// `ms`, then up, and waits until guest1 answers the wire host's ping
    /// again. The wire host sees its carrier lost, as a pulled cable, and
    /// keeps its routes and neighbours; the driver domain must open its
    /// port again. (Taking the wire host's end down instead would be its
    /// admin's act: that flushes its routes, and a handshake it is
    /// answering then fails for good.)
    fn flap_uplink(&self, ms: u64) -> Result<String> {
        let port = toolstack::uplink::config::wire_ifname(0);
        self.exec("drv", &["ip", "link", "set", "dev", &port, "down"])?;
        std::thread::sleep(Duration::from_millis(ms));
        self.exec("drv", &["ip", "link", "set", "dev", &port, "up"])?;
        let up = Instant::now();
        let deadline = up + Duration::from_secs(10);
        let ping = ["ping", "-c", "1", "-W", "1", "10.77.0.1"];
        while self.exec("wire", &ping).is_err() {
            if Instant::now() > deadline {
                bail!("guest1 did not answer the wire host 10 s after {port} came up");
            }
        }
        Ok(format!(
            "drv's {port} down for {ms} ms; guest1 answered again {:.0} ms after it came up",
            up.elapsed().as_secs_f64() * 1e3
        ))
    }

    /// For `ms`, the scribbling guest floods the wire host with pings while
    /// its own memory's NIC area (init block, rings, buffers) takes 4,096 words
    /// of garbage about every millisecond: descriptors handed to the device
    /// with lengths, addresses outside its memory, noise. The VMApp that
    /// holds its NIC model must survive it.
    fn scribble(&self, ms: u64) -> Result<String> {
        let st: serde_json::Value = serde_json::from_str(&crate::splitnet(
            &self.exe,
            &self.run_dir,
            &["status", "--json"],
        )?)?;
        let d = st["domains"]
            .as_array()
            .and_then(|ds| ds.iter().find(|d| d["name"] == SCRIBBLER))
            .ok_or_else(|| anyhow!("{SCRIBBLER} is not in status"))?;
        let (guest, vmapp) = d["pid"]
            .as_u64()
            .zip(d["emulated_nic"]["vmapp_pid"].as_u64())
            .ok_or_else(|| anyhow!("{SCRIBBLER} has no process or no VMApp in status"))?;
        let secs = (ms / 1000 + 2).to_string();
        let flood = ["ping", "-f", "-w", &secs, "10.77.0.254"];
        let mut args = vec!["exec", SCRIBBLER, "--"];
        args.extend_from_slice(&flood);
        let mut ping = Command::new(&self.exe)
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // The guest's memory, as the guest's own process maps it.
        let pool = match shared_mapping(guest, &format!("splitnet-{SCRIBBLER}-pool")) {
            Ok(m) => m,
            Err(e) => {
                let _ = ping.kill();
                return Err(e);
            }
        };
        let mut rng = SplitMix(ms);
        let (end, mut words) = (Instant::now() + Duration::from_millis(ms), 0u64);
        while Instant::now() < end {
            scribble_driver_area(&pool, || rng.next_u64());
            words += 4096;
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = ping.wait();
        if !std::path::Path::new(&format!("/proc/{vmapp}")).exists() {
            bail!("{SCRIBBLER}'s VMApp (pid {vmapp}) died of the garbage");
        }
        let own = if std::path::Path::new(&format!("/proc/{guest}")).exists() {
            "lives"
        } else {
            "ended"
        };
        Ok(format!(
            "{words} words of garbage in {ms} ms; the VMApp lives; the guest's own process {own}"
        ))
    }

    /// The hostile VM runs `attack` for `secs` (or is killed with SIGKILL
    /// after `kill_after`); the driver domain must keep serving.
    fn attack(&self, attack: Attack, secs: f64, kill_after: Option<Duration>) -> Result<String> {
        let mut child = Command::new(&self.exe)
            .arg("--run-dir")
            .arg(&self.run_dir)
            .arg("hostile-vm")
            .arg("--socket")
            .arg(&self.vm_socket)
            .args(["--attack", attack.name(), "--secs", &format!("{secs}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the hostile VM")?;
        // Its vCPU's budget, as the other VM's: what it spins on beyond
        // that is not the driver domain's to answer for.
        let cgroup = format!("splitnet-soak-hostile-{}", child.id());
        let members = super::vcpu::Members::Process(child.id());
        let _budget = match super::vcpu::VcpuBudget::hold(&cgroup, members) {
            Ok(b) => b,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context("the hostile VM's vCPU budget"));
            }
        };
        if let Some(after) = kill_after {
            std::thread::sleep(after);
            child.kill()?;
            child.wait()?;
            return Ok(format!(
                "{} for {} ms, then SIGKILL",
                attack.name(),
                after.as_millis()
            ));
        }
        // It ends on its own after `secs`; one that hangs is stopped.
        let deadline = Instant::now() + Duration::from_secs_f64(secs + 15.0);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                child.kill()?;
                child.wait()?;
                bail!(
                    "the hostile VM ({}) did not end after {secs} s",
                    attack.name()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "the hostile VM ({}) failed: {}",
                attack.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// `kill -SIG pid`.
pub(super) fn signal(sig: &str, pid: i32) -> Result<()> {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_a_name_and_only_peers_are_hostile() {
        let all = Event::all();
        assert_eq!(all.len(), 12 + Attack::ALL.len());
        let names: std::collections::BTreeSet<String> = all.iter().map(|e| e.name()).collect();
        assert_eq!(names.len(), all.len());
        assert!(!Event::KillDriver.hostile() && Event::StallGuest.hostile());
        assert_eq!(Event::KillGuest.kills(), Some(VICTIM));
        assert_eq!(Event::StopDriver.stops(), Some("drv"));
        // A BGP fault kills or stops no domain of the soak's instance, nor
        // does an upgrade in place.
        // hv's own faults neither: every domain must outlive them.
        for e in [
            Event::KillBgpd,
            Event::DropBgp,
            Event::UpgradeDriver,
            Event::UpgradeHv,
            Event::KillHv,
        ] {
            assert!(!e.hostile() && e.kills().is_none() && e.stops().is_none());
        }
    }

    #[test]
    fn a_seed_gives_one_sequence_and_each_round_has_every_event_once() {
        let n = Event::all().len();
        let steps = |seed| {
            let mut plan = Plan::new(seed);
            (0..4 * n).map(|_| plan.next_step()).collect::<Vec<_>>()
        };
        assert_eq!(steps(1), steps(1));
        assert_ne!(steps(1), steps(2));
        // Each round holds every event once.
        for round in steps(1).chunks(n) {
            for e in Event::all() {
                assert_eq!(round.iter().filter(|s| s.event == e).count(), 1, "{e:?}");
            }
        }
        for s in steps(1) {
            assert!((2000..=4000).contains(&s.quiet_ms));
            assert!(s.length_ms <= 6000);
        }
    }
}
