//! What runs beside the flows for the whole soak: hot-plug churn on
//! guest1 (`network-attach` with an xl vifspec, then `network-detach`),
//! now and then a guest applied in and out (`splitnet apply` with the
//! topology and a sixth guest, then without it) or a container added and
//! deleted (splitnet's CNI plugin, as a runtime calls it), and HTTP downloads with
//! curl from the wire host, each checked against the file's SHA-256.
//! Every operation is recorded with its moment.

use super::Lab;
use crate::faults::sha256;
use crate::rng::SplitMix;
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The vifspecs churn attaches with, in turn of the seed.
const SPECS: [&str; 4] = ["", "rate=50Mb/s", "ip=10.77.9.9", "mtu=9000"];

/// An operation that failed, and when.
#[derive(Debug, Clone, Serialize)]
pub struct OpFailure {
    pub at_s: f64,
    pub what: String,
}

/// One churn cycle in this many is an apply cycle, and one a container's.
const APPLY_EVERY: usize = 8;

/// The guest apply cycles add and remove.
const APPLIED_GUEST: &str = "guest6";

/// What churn did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Churn {
    pub attached: u64,
    pub detached: u64,
    /// `apply` runs that added, and that removed, the sixth guest.
    pub applied_in: u64,
    pub applied_out: u64,
    /// Containers added (CNI ADD, then reaching the wire host) and deleted.
    pub containers_added: u64,
    pub containers_deleted: u64,
    /// Why containers were not churned, if they were not.
    pub containers_skipped: Option<String>,
    pub failures: Vec<OpFailure>,
}

/// What the downloads did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Downloads {
    pub mib_each: u64,
    pub matched: u64,
    /// Downloads whose bytes arrived but differ from the file.
    pub corrupt: Vec<OpFailure>,
    /// Downloads curl could not finish.
    pub failures: Vec<OpFailure>,
}

impl Lab {
    /// Attach/detach cycles on guest1 until `stop`, at a pace the seed
    /// draws (a cycle every 0.2 to 1 s).
    pub fn churn(&self, seed: u64, stop: &AtomicBool) -> Churn {
        let mut rng = SplitMix(seed);
        let mut c = Churn::default();
        let plugin = crate::cni::Plugin::at(&self.exe, &self.run_dir)
            .map_err(|e| c.containers_skipped = Some(format!("{e:#}")))
            .ok();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let spec = SPECS[rng.below(SPECS.len())];
            let hold = rng.between(200, 1000);
            let _quiet = self.hv_quiet.read().unwrap_or_else(|p| p.into_inner());
            let done = match (rng.below(APPLY_EVERY), &plugin) {
                (0, _) => self.apply_cycle(hold, &mut c),
                (1, Some(p)) => {
                    n += 1;
                    self.container_cycle(p, n, hold, &mut c)
                }
                _ => self.cycle(spec, hold, &mut c),
            };
            if let Err(e) = done {
                c.failures.push(OpFailure {
                    at_s: self.secs(Instant::now()),
                    what: format!("{e:#}"),
                });
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        c
    }

    fn cycle(&self, spec: &str, hold_ms: u64, c: &mut Churn) -> Result<()> {
        let mut ts = self.toolstack()?;
        let spec = (!spec.is_empty()).then_some(spec);
        let h = ts
            .network_attach_spec("guest1", None, None, spec)
            .map_err(|e| anyhow!("network-attach guest1 {}: {e}", spec.unwrap_or("")))?;
        c.attached += 1;
        std::thread::sleep(Duration::from_millis(hold_ms));
        ts.network_detach("guest1", h)
            .map_err(|e| anyhow!("network-detach guest1 {h}: {e}"))?;
        c.detached += 1;
        Ok(())
    }

    /// Applies the soak's topology with a sixth guest, waits until that
    /// guest reaches the wire host, holds it `hold_ms`, and applies the
    /// topology without it again. The removal is retried (a driver-domain
    /// kill may refuse it for a while) so that no guest outlives the soak.
    fn apply_cycle(&self, hold_ms: u64, c: &mut Churn) -> Result<()> {
        let base = self.run_dir.join("soak.toml");
        let grown = self.run_dir.join("soak-grown.toml");
        let text = std::fs::read_to_string(&base)?;
        let extra = format!(
            "\n[[domain]]\nname = \"{APPLIED_GUEST}\"\nkind = \"guest\"\naddress = \"10.77.0.6/24\"\n"
        );
        std::fs::write(&grown, text + &extra)?;
        let apply = |f: &PathBuf| {
            crate::splitnet(
                &self.exe,
                &self.run_dir,
                &["apply", "--config", &f.to_string_lossy()],
            )
        };
        apply(&grown).map_err(|e| anyhow!("apply adding {APPLIED_GUEST}: {e:#}"))?;
        c.applied_in += 1;
        let reached = crate::netenv::wait_reachable(
            &toolstack::host::netns_name(APPLIED_GUEST),
            "10.77.0.254",
            Duration::from_secs(10),
        );
        std::thread::sleep(Duration::from_millis(hold_ms));
        until_done(&format!("apply removing {APPLIED_GUEST}"), || apply(&base))?;
        c.applied_out += 1;
        reached.map_err(|e| anyhow!("{APPLIED_GUEST}, applied in: {e:#}"))
    }

    /// A container's namespace, CNI ADD through splitnet's plugin, the
    /// container reaching the wire host, `hold_ms`, then CNI DEL (retried
    /// until it succeeds, so no vif outlives the soak) and the namespace gone.
    fn container_cycle(
        &self,
        p: &crate::cni::Plugin,
        n: u64,
        hold_ms: u64,
        c: &mut Churn,
    ) -> Result<()> {
        // A runtime's name: the plugin refuses splitnet's own namespaces.
        let ns = crate::cni::Netns::new("sncni-soak".into())?;
        let id = format!("soak{n}");
        p.call("ADD", &id, &ns.0)?;
        c.containers_added += 1;
        let reached = crate::netenv::wait_reachable(&ns.0, "10.77.0.254", Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(hold_ms));
        until_done(&format!("CNI DEL {id}"), || p.call("DEL", &id, &ns.0))?;
        c.containers_deleted += 1;
        reached.map_err(|e| anyhow!("container {id}: {e:#}"))
    }

    /// Downloads of `blob` (its SHA-256 `want`) into guest1 from the wire
    /// host's HTTP server, one after another, until `stop`.
    pub fn downloads(&self, blob_mib: u64, want: &str, stop: &AtomicBool) -> Downloads {
        let mut d = Downloads {
            mib_each: blob_mib,
            ..Downloads::default()
        };
        let got: PathBuf = self.run_dir.join("soak-got");
        while !stop.load(Ordering::Relaxed) {
            let at_s = self.secs(Instant::now());
            let _ = std::fs::remove_file(&got);
            let before = [self.resets("guest1"), self.resets("wire")];
            let r = self.exec(
                "guest1",
                &[
                    "curl",
                    "-sS",
                    "--fail",
                    "--max-time",
                    "120",
                    "--limit-rate",
                    "20M",
                    "-o",
                    &got.to_string_lossy(),
                    "http://10.77.0.254:8080/blob",
                ],
            );
            let fail = |what: String| OpFailure { at_s, what };
            match r.and_then(|_| sha256(&got)) {
                Ok(sum) if sum == want => d.matched += 1,
                Ok(sum) => d.corrupt.push(fail(format!("SHA-256 {sum}, not {want}"))),
                Err(e) => {
                    let after = [self.resets("guest1"), self.resets("wire")];
                    let why = format!(
                        "{e:#}; TCP counters that moved meanwhile: guest1 {}; the wire host {}",
                        moved(&before[0], &after[0]),
                        moved(&before[1], &after[1])
                    );
                    d.failures.push(fail(why));
                }
            }
        }
        let _ = std::fs::remove_file(&got);
        d
    }

    /// The TCP counters of `domain`'s namespace whose names tell of a
    /// reset, an abort or a refused connection (nstat's absolute values);
    /// none when nstat cannot run there.
    fn resets(&self, domain: &str) -> BTreeMap<String, u64> {
        const TELLING: [&str; 5] = ["Rst", "Abort", "EstabResets", "Listen", "AttemptFails"];
        crate::nstat::matching(&toolstack::host::netns_name(domain), &TELLING).unwrap_or_default()
    }
}

/// The counters that rose from `before` to `after`, as "name +n", or
/// "none".
fn moved(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> String {
    let up: Vec<String> = after
        .iter()
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| format!("{k} +{d}"))
        })
        .collect();
    match up.is_empty() {
        true => "none".into(),
        false => up.join(", "),
    }
}

/// Runs `op` until it succeeds, a second apart, 30 times at most: an undo
/// that a driver-domain kill refuses for a while must still happen, so
/// that nothing churn made outlives the soak.
fn until_done<T>(what: &str, mut op: impl FnMut() -> Result<T>) -> Result<()> {
    let mut tries = 0;
    while let Err(e) = op() {
        tries += 1;
        if tries == 30 {
            return Err(anyhow!("{what}, 30 times: {e:#}"));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_download_names_the_reset_counters_that_moved() {
        let counters = |v: [(&str, u64); 4]| -> BTreeMap<String, u64> {
            v.map(|(k, n)| (k.to_string(), n)).into()
        };
        let before = counters([
            ("TcpEstabResets", 1),
            ("TcpOutRsts", 4),
            ("TcpExtTCPAbortOnData", 0),
            ("TcpExtListenOverflows", 0),
        ]);
        let after = counters([
            ("TcpEstabResets", 2),
            ("TcpOutRsts", 4),
            ("TcpExtTCPAbortOnData", 3),
            ("TcpExtListenOverflows", 0),
        ]);
        assert_eq!(
            moved(&before, &after),
            "TcpEstabResets +1, TcpExtTCPAbortOnData +3"
        );
        assert_eq!(moved(&after, &after), "none");
        assert_eq!(moved(&BTreeMap::new(), &BTreeMap::new()), "none");
    }
}
