//! What runs beside the flows for the whole soak: hot-plug churn on
//! guest1 (`network-attach` with an xl vifspec, then `network-detach`)
//! and HTTP downloads with curl from the wire host, each checked against
//! the file's SHA-256. Every operation is recorded with its moment.

use super::Lab;
use crate::faults::sha256;
use crate::rng::SplitMix;
use anyhow::{anyhow, Result};
use serde::Serialize;
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

/// What churn did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Churn {
    pub attached: u64,
    pub detached: u64,
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
        while !stop.load(Ordering::Relaxed) {
            let spec = SPECS[rng.below(SPECS.len())];
            if let Err(e) = self.cycle(spec, rng.between(200, 1000), &mut c) {
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
                Err(e) => d.failures.push(fail(format!("{e:#}"))),
            }
        }
        let _ = std::fs::remove_file(&got);
        d
    }
}
