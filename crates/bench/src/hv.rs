//! Suite `hv`: the cost of the hypervisor primitives the seed papers discuss
//! (Menon 2005 §4, Ram thesis Table 2.1 "hypervisor" and "grant" classes).
//!
//! Two in-process domains talk to a real `Hypervisor` over its real sockets,
//! eventfds and shared memory; no namespaces are needed.

use crate::stats::{tsc_per_us, Summary};
use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::SharedMemory;
use anyhow::{anyhow, Result};
use hv::{DomainSpec, HvClient, Hypervisor, MemorySpec};
use serde::Serialize;
use std::time::Duration;

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct HvBenchOptions {
    /// Samples per primitive.
    pub iterations: usize,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// The suite's results.
#[derive(Debug, Clone, Serialize)]
pub struct HvBenchReport {
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub iterations: usize,
    pub results: Vec<Summary>,
}

impl HvBenchReport {
    /// A Markdown table.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| primitive | median µs | median cycles | p10–p90 µs |\n|---|---:|---:|---:|\n",
        );
        for r in &self.results {
            s += &format!(
                "| {} | {:.2} | {:.0} | {:.2}–{:.2} |\n",
                r.name, r.median_us, r.median_cycles, r.p10_us, r.p90_us
            );
        }
        s += &format!(
            "\nTSC {:.0} MHz, {} samples each.\n",
            self.tsc_mhz, self.iterations
        );
        s
    }
}

const FRAME_LEN: u16 = 1514;
const BATCH: usize = 64;

fn timed(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    // Warm up caches and lazily created state first.
    for _ in 0..n.min(50) {
        f()?;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = shm::rdtsc();
        f()?;
        v.push(shm::rdtsc().wrapping_sub(t0) as f64);
    }
    Ok(v)
}

/// Runs the suite.
pub fn run(opts: &HvBenchOptions) -> Result<HvBenchReport> {
    let per_us = tsc_per_us();
    let hv = Hypervisor::new();
    let mem = MemorySpec {
        pool_frames: 256,
        grant_frames: 1,
        hugepages: false,
    };
    let spec = |name: &str, kind: &str| DomainSpec {
        name: name.into(),
        kind: kind.into(),
        memory: mem,
    };
    let (gid, gsock) = hv
        .create_domain(spec("bench-gst", "guest"))
        .map_err(|e| anyhow!("{e}"))?;
    let (did, dsock) = hv
        .create_domain(spec("bench-drv", "driver"))
        .map_err(|e| anyhow!("{e}"))?;
    let mut guest = HvClient::connect(gsock).map_err(|e| anyhow!("{e}"))?;
    let mut drv = HvClient::connect(dsock).map_err(|e| anyhow!("{e}"))?;
    let n = opts.iterations;
    let mut results = Vec::new();
    let say = |what: &str| {
        if opts.progress {
            eprintln!("bench hv: {what} ({n} samples)");
        }
    };

    say("event-channel notification and wake-up");
    let ch_g = guest
        .evtchn_alloc_unbound(did)
        .map_err(|e| anyhow!("{e}"))?;
    let ch_d = drv
        .evtchn_bind(gid, ch_g.port)
        .map_err(|e| anyhow!("{e}"))?;
    let echo = std::thread::spawn(move || -> Result<()> {
        loop {
            if !ch_d
                .wait(Some(Duration::from_secs(5)))
                .map_err(|e| anyhow!("{e}"))?
            {
                return Ok(());
            }
            if ch_d.is_closed() {
                return Ok(());
            }
            ch_d.notify().map_err(|e| anyhow!("{e}"))?;
        }
    });
    let rtt = timed(n, || {
        ch_g.notify().map_err(|e| anyhow!("{e}"))?;
        if !ch_g
            .wait(Some(Duration::from_secs(5)))
            .map_err(|e| anyhow!("{e}"))?
        {
            return Err(anyhow!("event channel echo timed out"));
        }
        Ok(())
    })?;
    let one_way: Vec<f64> = rtt.iter().map(|c| c / 2.0).collect();
    results.push(Summary::of(
        "event-channel notify + wake-up (one way, half a ping-pong)",
        &one_way,
        per_us,
    ));
    guest.evtchn_close(ch_g).map_err(|e| anyhow!("{e}"))?;
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;

    say("control hypercall round trip");
    let v = timed(n, || guest.nop().map_err(|e| anyhow!("{e}")))?;
    results.push(Summary::of(
        "control hypercall round trip (nop)",
        &v,
        per_us,
    ));

    say("grant copies");
    let mut ops = Vec::with_capacity(BATCH);
    for i in 0..BATCH as u32 {
        guest
            .pool()
            .fill(i as usize * 4096, FRAME_LEN as usize, i as u8);
        let gref = guest
            .grants()
            .grant_access(did, i, true)
            .map_err(|e| anyhow!("{e}"))?;
        ops.push(GrantCopy {
            source: CopyPtr::Gref {
                domid: gid,
                gref,
                offset: 0,
            },
            dest: CopyPtr::Frame {
                domid: DOMID_SELF,
                gmfn: i as u64,
                offset: 0,
            },
            len: FRAME_LEN,
            status: 0,
        });
    }
    let check = |st: Vec<i16>| -> Result<()> {
        if st.iter().all(|s| *s == 0) {
            Ok(())
        } else {
            Err(anyhow!("grant copy failed: {st:?}"))
        }
    };
    let v = timed(n, || {
        check(drv.grant_copy_batch(&ops).map_err(|e| anyhow!("{e}"))?)
    })?;
    results.push(Summary::of(
        "64 grant copies of 1514 B, shared-memory batch",
        &v,
        per_us,
    ));
    let v = timed(n, || {
        check(drv.grant_copy(&ops).map_err(|e| anyhow!("{e}"))?)
    })?;
    results.push(Summary::of(
        "64 grant copies of 1514 B, control socket",
        &v,
        per_us,
    ));
    let mut b = [0u8; 4];
    drv.pool().read_bytes(63 * 4096, &mut b);
    if b != [63; 4] {
        return Err(anyhow!("grant copy moved the wrong bytes"));
    }

    say("grant map + unmap");
    let gref = match ops[0].source {
        CopyPtr::Gref { gref, .. } => gref,
        _ => unreachable!("built above"),
    };
    let v = timed(n, || {
        let m = drv
            .map_grant(gid, gref, false)
            .map_err(|e| anyhow!("{e}"))?;
        drv.unmap_grant(m).map_err(|e| anyhow!("{e}"))
    })?;
    results.push(Summary::of(
        "grant map + unmap (one 4 KiB frame)",
        &v,
        per_us,
    ));

    drop(guest);
    drop(drv);
    hv.shutdown();
    Ok(HvBenchReport {
        suite: "hv",
        tsc_mhz: per_us,
        iterations: n,
        results,
    })
}
