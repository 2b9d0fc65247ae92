//! `bench virtio`'s hostile-VM phase: guest1 (netfront) sends TCP to the
//! wire alone, then again while a hostile VM ([`crate::hostile_vm`], a
//! `kind = "vm"` domain on the same driver domain) attacks, one attack at
//! a time. Per attack: guest1's throughput as a ratio to alone (the target:
//! other vifs keep theirs within 20%), the driver domain's survival (same
//! domain id and process), the backend's counters that moved, and the
//! CPU the attacker and the driver domain spent.

use crate::hostile_vm::{Attack, AttackReport};
use crate::netenv::Workload;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Other vifs keep this share of their throughput under attack.
pub const TARGET: f64 = 0.80;
use crate::testbed::VM;

/// One attack's row.
#[derive(Debug, Clone, Serialize)]
pub struct AttackRow {
    pub attack: &'static str,
    pub gbps: f64,
    pub ratio: f64,
    pub met: bool,
    /// What the attacker reported: attempts, refused ones, its CPU.
    pub attacker: AttackReport,
    /// The backend's counters for this attack, and how far they moved.
    pub counters: BTreeMap<String, u64>,
    pub counted: bool,
    /// The driver domain kept its domain id and process.
    pub drv_survived: bool,
    /// The driver domain's CPU time during the attack, seconds.
    pub drv_cpu_seconds: f64,
}

/// The phase's report.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationReport {
    pub target: f64,
    /// guest1 → wire, TCP, with the hostile VM idle (not connected).
    pub alone_gbps: f64,
    pub rows: Vec<AttackRow>,
}

/// The topology: the default one with a `kind = "vm"` domain for the
/// hostile VM on the same driver domain.
pub fn topology(socket: &Path) -> String {
    crate::testbed::vm_topology("virtio-hostile", "a hostile vhost-user VM", socket)
}

/// Runs the phase on its own topology (brought up and down here).
pub fn run(exe: &Path, run_dir: &Path, secs: u32, attacks: &[Attack]) -> Result<IsolationReport> {
    std::fs::create_dir_all(run_dir)?;
    let socket = run_dir.join(format!("bench-{VM}-hostile.sock"));
    let topo = run_dir.join("bench-virtio-hostile.toml");
    std::fs::write(&topo, topology(&socket))?;
    let t = topo.to_string_lossy().into_owned();
    crate::splitnet(exe, run_dir, &["up", "--config", &t])?;
    let r = measure(exe, run_dir, &socket, secs, attacks);
    let _ = crate::splitnet(exe, run_dir, &["down"]);
    r
}

fn measure(
    exe: &Path,
    rd: &Path,
    socket: &Path,
    secs: u32,
    attacks: &[Attack],
) -> Result<IsolationReport> {
    let alone_gbps = tcp_to_wire(secs)?;
    let mut rows = Vec::new();
    for &a in attacks {
        rows.push(one_attack(exe, rd, socket, secs, a, alone_gbps)?);
    }
    Ok(IsolationReport {
        target: TARGET,
        alone_gbps,
        rows,
    })
}

/// guest1 → wire, iperf3 TCP, for `secs`: Gbit/s.
fn tcp_to_wire(secs: u32) -> Result<f64> {
    Ok(crate::testbed::guest1_to_wire(secs, Workload::TcpZerocopy)?.gbps)
}

/// The driver domain's (id, pid) and the VM vif's status entry.
fn snapshot(exe: &Path, rd: &Path) -> Result<(Value, i32, Value)> {
    let st: Value = serde_json::from_str(&crate::splitnet(exe, rd, &["status", "--json"])?)?;
    let drv = st["domains"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == "drv"))
        .context("status shows no drv")?;
    let pid = drv["pid"].as_i64().context("drv has no pid")? as i32;
    let vif = st["vhost_vifs"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == VM))
        .cloned()
        .context("status shows no vhost-user vif vm1")?;
    Ok((drv["id"].clone(), pid, vif))
}

/// A counter of the vif's entry: `refused.<reason>` or a top-level key.
fn counter(vif: &Value, key: &str) -> u64 {
    match key.split_once('.') {
        Some((a, b)) => vif[a][b].as_u64().unwrap_or(0),
        None => vif[key].as_u64().unwrap_or(0),
    }
}

fn one_attack(
    exe: &Path,
    rd: &Path,
    socket: &Path,
    secs: u32,
    a: Attack,
    alone: f64,
) -> Result<AttackRow> {
    let (id0, pid0, vif0) = snapshot(exe, rd)?;
    let cpu0 = crate::testbed::proc_cpu(pid0).unwrap_or_default();
    // The attack outlasts the flow, iperf3's start included.
    let child = Command::new(exe)
        .arg("--run-dir")
        .arg(rd)
        .arg("hostile-vm")
        .arg("--socket")
        .arg(socket)
        .args(["--attack", a.name(), "--secs", &format!("{}", secs + 1)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the hostile VM")?;
    wait_attacking(exe, rd, a, &vif0)?;
    let gbps = tcp_to_wire(secs);
    let out = child.wait_with_output()?;
    let gbps = gbps?;
    if !out.status.success() {
        bail!(
            "hostile-vm {}: {}",
            a.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let attacker: AttackReport = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("hostile-vm {}'s report", a.name()))?;
    let (id1, pid1, vif1) = snapshot(exe, rd)?;
    let cpu1 = crate::testbed::proc_cpu(pid1).unwrap_or_default();
    let counters: BTreeMap<String, u64> = a
        .counters()
        .iter()
        .map(|k| (k.to_string(), counter(&vif1, k) - counter(&vif0, k)))
        .collect();
    let moved: u64 = counters.values().sum();
    let ratio = if alone > 0.0 { gbps / alone } else { 0.0 };
    Ok(AttackRow {
        attack: a.name(),
        gbps,
        ratio,
        met: ratio >= TARGET,
        counted: moved > 0 && (a == Attack::KickStorm || moved + 1 >= attacker.attempts),
        attacker,
        counters,
        drv_survived: id0 == id1 && pid0 == pid1,
        drv_cpu_seconds: cpu1.saturating_sub(cpu0).as_secs_f64(),
    })
}

/// Waits until the backend sees the attack (a connection, or one of its
/// counters moving), so the flow runs under it.
fn wait_attacking(exe: &Path, rd: &Path, a: Attack, before: &Value) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let (_, _, v) = snapshot(exe, rd)?;
        let moved = a
            .counters()
            .iter()
            .any(|k| counter(&v, k) > counter(before, k));
        if v["connected"] == true || moved {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the driver domain saw no sign of the {} attack", a.name())
}

impl IsolationReport {
    /// Markdown: one row per attack.
    pub fn table(&self) -> String {
        let mut s = format!(
            "### guest1 (netfront) → wire TCP while a hostile VM attacks the same driver domain\n\n\
             Alone: {:.2} Gbit/s. Target: each ratio ≥ {:.2}.\n\n\
             | attack | Gbit/s | ÷ alone | met | attempts | closed by backend | counters moved | drv survived | attacker CPU s | drv CPU s |\n\
             |---|---:|---:|---|---:|---:|---|---|---:|---:|\n",
            self.alone_gbps, self.target
        );
        for r in &self.rows {
            let c: Vec<String> = r
                .counters
                .iter()
                .map(|(k, v)| format!("{k} +{v}"))
                .collect();
            s += &format!(
                "| {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.2} | {:.2} |\n",
                r.attack,
                r.gbps,
                r.ratio,
                if r.met { "yes" } else { "no" },
                r.attacker.attempts,
                r.attacker.closed,
                c.join(", "),
                if r.drv_survived { "yes" } else { "NO" },
                r.attacker.cpu_seconds,
                r.drv_cpu_seconds,
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hostile_vm_topology_parses_with_a_vm_on_the_driver_domain() {
        let t = toolstack::topology::Topology::parse(
            &super::topology(std::path::Path::new("/tmp/vm1-hostile.sock")),
            "bench",
        )
        .unwrap();
        let text = format!("{t:?}");
        assert!(text.contains("vm1") && text.contains("guest1"), "{text}");
    }
}
