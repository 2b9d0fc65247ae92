//! Suite `hv`: the cost of the hypervisor primitives the seed papers discuss
//! (Menon 2005 §6, Ram thesis Table 2.1 "hypervisor" and "grant" classes),
//! each also as a multiple of a plain 1514-byte copy, the unit Menon 2006
//! weighs Xen 2.0's maps and page flips against.
//!
//! Two in-process domains talk to a real `Hypervisor` over its real sockets,
//! doorbells and shared memory; no namespaces are needed.

use crate::harness::{self, Args, Output};
use crate::plot::{self, Bar};
use crate::stats::{tsc_per_us, Summary};

use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF};
use abi::SharedMemory;
use anyhow::{anyhow, Result};
use hv::{DomId, DomainSpec, HvClient, Hypervisor, MemorySpec};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// Options for the suite.
#[derive(Debug, Clone)]
pub struct HvBenchOptions {
    /// Samples per primitive in each run.
    pub iterations: usize,
    /// Independent runs, each with a fresh hv and fresh domains.
    pub runs: usize,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// The suite's results.
#[derive(Debug, Clone, Serialize)]
pub struct HvBenchReport {
    pub suite: &'static str,
    pub tsc_mhz: f64,
    pub iterations: usize,
    pub runs: usize,
    pub results: Vec<Summary>,
}

impl HvBenchReport {
    /// A Markdown table.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| primitive | median µs | median cycles | × 1514 B copy | p10–p90 µs | median of each run, µs |\n\
             |---|---:|---:|---:|---:|---|\n",
        );
        let copy = self
            .results
            .iter()
            .find(|r| r.name == COPY_ROW)
            .map(|r| r.median_cycles)
            .filter(|c| *c > 0.0);
        for r in &self.results {
            let runs: Vec<String> = r.run_medians_us.iter().map(|m| format!("{m:.2}")).collect();
            let times = copy.map_or("–".to_string(), |c| format!("{:.0}", r.median_cycles / c));
            s += &format!(
                "| {} | {:.2} | {:.0} | {} | {:.2}–{:.2} | {} |\n",
                r.name,
                r.median_us,
                r.median_cycles,
                times,
                r.p10_us,
                r.p90_us,
                runs.join(", ")
            );
        }
        s += &format!(
            "\nTSC {:.0} MHz; {} runs of {} samples each, pooled. \
             × 1514 B copy: each row's median cycles over the in-process copy's.\n",
            self.tsc_mhz, self.runs, self.iterations
        );
        s
    }

    /// A bar chart of the medians with p10–p90 whiskers.
    pub fn svg(&self) -> String {
        let bars: Vec<Bar> = self
            .results
            .iter()
            .map(|r| Bar {
                label: r.name.clone(),
                value: r.median_us,
                range: Some((r.p10_us, r.p90_us)),
            })
            .collect();
        plot::hbars(
            "splitnet bench hv: cost of hypervisor primitives",
            "µs",
            "bars: median; whiskers: p10–p90",
            &bars,
        )
    }
}

const FRAME_LEN: u16 = 1514;
const BATCH: usize = 64;
/// The unit the papers compare hypervisor primitives against.
const COPY_ROW: &str = "memcpy of 1514 B (in process, one of 64)";

fn timed(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    // Warm up caches and lazily created state first.
    for _ in 0..n.min(50) {
        f()?;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = sys::rdtsc();
        f()?;
        v.push(sys::rdtsc().wrapping_sub(t0) as f64);
    }
    Ok(v)
}

/// Runs the suite.
pub fn run(opts: &HvBenchOptions) -> Result<HvBenchReport> {
    let per_us = tsc_per_us();
    let mut names: Vec<&'static str> = Vec::new();
    let mut samples: Vec<Vec<Vec<f64>>> = Vec::new();
    harness::runs(opts.runs, |i| {
        if opts.progress {
            eprintln!("bench hv: run {}/{}", i + 1, opts.runs.max(1));
        }
        for (k, (name, v)) in run_once(opts)?.into_iter().enumerate() {
            if names.len() <= k {
                names.push(name);
                samples.push(Vec::new());
            }
            samples[k].push(v);
        }
        Ok(())
    })?;
    let results = names
        .iter()
        .zip(&samples)
        .map(|(n, runs)| Summary::of_runs(n, runs, per_us))
        .collect();
    Ok(HvBenchReport {
        suite: "hv",
        tsc_mhz: per_us,
        iterations: opts.iterations,
        runs: opts.runs.max(1),
        results,
    })
}

/// One run: a fresh hv with two domains; cycle samples per primitive.
fn run_once(opts: &HvBenchOptions) -> Result<Vec<(&'static str, Vec<f64>)>> {
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
            eprintln!("bench hv:   {what} ({n} samples)");
        }
    };

    say("event-channel notification and wake-up");
    let one_way = evtchn_one_way(&mut guest, &mut drv, gid, did, n)?;
    results.push((
        "event-channel notify + wake-up (one way, half a ping-pong)",
        one_way,
    ));

    say("inter-processor interrupt round trip");
    match ipi_round_trip(n)? {
        Some(v) => results.push((IPI_ROW, v)),
        None => say("inter-processor interrupts: this process may use one core; row left out"),
    }

    say("control hypercall round trip");
    let v = timed(n, || guest.nop().map_err(|e| anyhow!("{e}")))?;
    results.push(("control hypercall round trip (nop)", v));

    say("grant copies");
    let ops = grant_copy_ops(&mut guest, gid, did)?;
    results.extend(grant_copy_rows(&mut drv, &ops, n)?);

    results.extend(map_flip_copy(
        &mut guest,
        &mut drv,
        (gid, did),
        &ops,
        n,
        say,
    )?);

    // Given back after hv's shutdown, once no domain holds the page.
    let huge = HugeReservation::one();
    if huge.is_some() {
        results.extend(huge_mirror_row(&hv, &mut drv, Backing::Hugetlb, n, say)?);
    } else {
        say("pool mirror on hugetlb pages: no 2 MiB page could be reserved; row left out");
    }
    // Put back when the run ends, as hv does when it stops.
    let _thp = allow_thp_shmem();
    results.extend(huge_mirror_row(&hv, &mut drv, Backing::Thp, n, say)?);

    drop(guest);
    drop(drv);
    hv.shutdown();
    Ok(results)
}

/// What backs a pool of huge pages (hv's `huge_backing`).
#[derive(Clone, Copy)]
enum Backing {
    Hugetlb,
    Thp,
}

impl Backing {
    fn name(self) -> &'static str {
        match self {
            Backing::Hugetlb => "hugetlb",
            Backing::Thp => "thp",
        }
    }

    fn row(self) -> &'static str {
        match self {
            Backing::Hugetlb => "grant map + unmap per frame, batch of 64 frames apart, pool mirror on 2 MiB hugetlb pages (one entry per huge page)",
            Backing::Thp => "grant map + unmap per frame, batch of 64 frames apart, pool mirror on 2 MiB transparent huge pages (an entry per frame, as Xen's)",
        }
    }
}

/// Grant map + unmap per frame in batches of 64 frames apart from a guest
/// whose pool is on 2 MiB pages (Menon 2006 §5.3's superpages) of
/// `backing`. A hugetlb pool is mirrored a huge page at a time, so the 64
/// frames share one page-table entry; a pool on transparent huge pages is
/// mirrored a 4 KiB frame at a time, as Xen's grant map mapped one frame
/// of a guest's superpage. Left out where the pool did not get `backing`.
fn huge_mirror_row(
    hv: &Arc<Hypervisor>,
    drv: &mut HvClient,
    backing: Backing,
    n: usize,
    say: impl Fn(&str),
) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let name = format!("bench-huge-{}", backing.name());
    let spec = DomainSpec {
        name: name.clone(),
        kind: "guest".into(),
        memory: MemorySpec {
            pool_frames: 512,
            grant_frames: 1,
            hugepages: true,
        },
    };
    let (hid, sock) = hv.create_domain(spec).map_err(|e| anyhow!("{e}"))?;
    let got = hv
        .status()
        .domains
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.huge_backing.clone())
        .unwrap_or_default();
    if got != backing.name() {
        say(&format!(
            "pool mirror on {} pages: the pool is on {got} here; row left out",
            backing.name()
        ));
        return Ok(Vec::new());
    }
    let huge = HvClient::connect(sock).map_err(|e| anyhow!("{e}"))?;
    let did = drv.domid();
    let grefs = (0..BATCH as u32)
        .map(|i| huge.grants().grant_access(did, 64 + 2 * i, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{e}"))?;
    say(&format!(
        "grant map + unmap, pool on {} pages",
        backing.name()
    ));
    let v = timed(n, || map_unmap_batch(drv, hid, &grefs))?;
    if !drv.maps_by_mirror(hid, false) {
        say("pool mirror on huge pages: not available on this host; row left out");
        return Ok(Vec::new());
    }
    Ok(vec![(
        backing.row(),
        v.iter().map(|c| c / BATCH as f64).collect(),
    )])
}

/// Shared memory allowed transparent huge pages for the run where the
/// host's setting is the kernel's default: held as hv holds it
/// (`toolstack::thp_shmem`), let go when dropped.
fn allow_thp_shmem() -> Option<toolstack::thp_shmem::Hold> {
    toolstack::thp_shmem::hold().ok().flatten().map(|(h, _)| h)
}

/// One more free 2 MiB hugetlb page for the run, given back on drop.
struct HugeReservation(Option<u64>);

impl HugeReservation {
    /// `None` where the page cannot be had (no root, memory fragmented).
    fn one() -> Option<HugeReservation> {
        use sys::huge::{self, HugetlbPool};
        if HugetlbPool::read().ok()?.available() >= 1 {
            return Some(HugeReservation(None));
        }
        let old = huge::nr_hugepages().ok()?;
        huge::set_nr_hugepages(old + 1).ok()?;
        let r = HugeReservation(Some(old));
        (HugetlbPool::read().ok()?.available() >= 1).then_some(r)
    }
}

impl Drop for HugeReservation {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = sys::huge::set_nr_hugepages(old);
        }
    }
}

/// 64 grant copies of a full frame, through the shared-memory batch page
/// and over the control socket, the bytes checked after.
fn grant_copy_rows(
    drv: &mut HvClient,
    ops: &[GrantCopy],
    n: usize,
) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let mut rows = Vec::new();
    let check = |st: Vec<i16>| -> Result<()> {
        if st.iter().all(|s| *s == 0) {
            Ok(())
        } else {
            Err(anyhow!("grant copy failed: {st:?}"))
        }
    };
    let v = timed(n, || {
        check(drv.grant_copy_batch(ops).map_err(|e| anyhow!("{e}"))?)
    })?;
    rows.push(("64 grant copies of 1514 B, shared-memory batch", v));
    let v = timed(n, || {
        check(drv.grant_copy(ops).map_err(|e| anyhow!("{e}"))?)
    })?;
    rows.push(("64 grant copies of 1514 B, control socket", v));
    let mut b = [0u8; 4];
    drv.pool().read_bytes(63 * 4096, &mut b);
    if b != [63; 4] {
        return Err(anyhow!("grant copy moved the wrong bytes"));
    }
    Ok(rows)
}

/// The Xen 2.0 primitives and the copy they are weighed against: grant
/// map + unmap one at a time and in a batch of 64, a page flip, and a
/// plain in-process copy of a 1514-byte frame.
fn map_flip_copy(
    guest: &mut HvClient,
    drv: &mut HvClient,
    (gid, did): (DomId, DomId),
    ops: &[GrantCopy],
    n: usize,
    say: impl Fn(&str),
) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let mut rows = Vec::new();
    say("grant map + unmap");
    let grefs: Vec<u32> = ops
        .iter()
        .filter_map(|op| match op.source {
            CopyPtr::Gref { gref, .. } => Some(gref),
            _ => None,
        })
        .collect();
    let Some(&one) = grefs.first() else {
        return Err(anyhow!("no grants to map"));
    };
    let v = timed(n, || {
        let m = drv.map_grant(gid, one, false).map_err(|e| anyhow!("{e}"))?;
        drv.unmap_grant(m).map_err(|e| anyhow!("{e}"))
    })?;
    rows.push(("grant map + unmap (one 4 KiB frame)", v));
    // Consecutive frames map in one mmap; every other frame, one each.
    let scattered = (0..BATCH as u32)
        .map(|i| guest.grants().grant_access(did, 64 + 2 * i, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{e}"))?;
    rows.extend(batch_map_rows(drv, gid, (&grefs, &scattered), n, &say)?);

    say("page flip");
    rows.push((
        "page flip (GNTTABOP_transfer of one frame)",
        page_flips(guest, drv, (gid, did), n)?,
    ));
    for (name, count) in [
        ("page flip, a batch of one (the batch page)", 1),
        (
            "page flip per frame, batch of 64 (one transfer batch)",
            BATCH,
        ),
    ] {
        let v = flip_batches(guest, drv, (gid, did), count, n)?;
        rows.push((name, v.iter().map(|c| c / count as f64).collect()));
    }

    say("memcpy");
    let mut buf = vec![0u8; BATCH * FRAME_LEN as usize];
    let v = timed(n, || {
        for (i, dst) in buf.chunks_exact_mut(FRAME_LEN as usize).enumerate() {
            guest.pool().read_bytes(i * 4096, dst);
        }
        std::hint::black_box(&mut buf);
        Ok(())
    })?;
    let per_copy = v.iter().map(|c| c / BATCH as f64).collect();
    rows.push((COPY_ROW, per_copy));

    Ok(rows)
}

/// Grant map + unmap per frame in batches of 64: consecutive frames and
/// frames apart through the window and through the pool mirror
/// (left out where the host cannot mirror a pool).
fn batch_map_rows(
    drv: &mut HvClient,
    gid: DomId,
    (grefs, scattered): (&[u32], &[u32]),
    n: usize,
    say: impl Fn(&str),
) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let mut rows = Vec::new();
    // Each mapped frame is read (64 bytes), as netback reads a packet, so
    // a map that defers its page-table entry to a fault pays for it here.
    for (name, grefs, mirror) in [
        (
            "grant map + unmap per frame, batch of 64 consecutive frames, window (one mmap per batch)",
            grefs,
            false,
        ),
        (
            "grant map + unmap per frame, batch of 64 frames apart, window (an mmap per frame)",
            scattered,
            false,
        ),
        (
            "grant map + unmap per frame, batch of 64 frames apart, pool mirror (a page-table entry per frame)",
            scattered,
            true,
        ),
        (
            "grant map + unmap per frame, batch of 64 consecutive frames, pool mirror (one call per run each way)",
            grefs,
            true,
        ),
    ] {
        drv.set_pool_mirrors(mirror);
        let v = timed(n, || map_unmap_batch(drv, gid, grefs))?;
        if drv.maps_by_mirror(gid, false) != mirror {
            say("pool mirror: not available on this host (no userfaultfd minor faults, or swap on); row left out");
            continue;
        }
        rows.push((name, v.iter().map(|c| c / BATCH as f64).collect()));
    }
    drv.set_pool_mirrors(true);
    Ok(rows)
}

/// Maps `grefs` of `granter` in one map batch and unmaps them in one
/// unmap batch, as netback's Xen 2.0 transmit path does per ring batch.
fn map_unmap_batch(drv: &mut HvClient, granter: DomId, grefs: &[u32]) -> Result<()> {
    let maps = drv
        .map_batch(granter, grefs, false)
        .map_err(|e| anyhow!("{e}"))?;
    let handles = maps
        .iter()
        .map(|m| m.as_ref().map(|m| m.handle))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("grant map failed: {e}"))?;
    let mut head = [0u8; 64];
    for &h in &handles {
        drv.read_mapped(h, 0, &mut head)
            .map_err(|e| anyhow!("reading a mapped grant: {e}"))?;
    }
    let st = drv.unmap_batch(&handles).map_err(|e| anyhow!("{e}"))?;
    if st.iter().any(|s| *s != 0) {
        return Err(anyhow!("grant unmap failed: {st:?}"));
    }
    Ok(())
}

/// Page flips (GNTTABOP_transfer, the Xen 2.0 receive path, Menon 2006
/// §2): the guest posts an accept-transfer grant, the driver domain gives
/// it one of its frames, and the guest ends the grant.
fn page_flips(
    guest: &HvClient,
    drv: &mut HvClient,
    (gid, did): (DomId, DomId),
    n: usize,
) -> Result<Vec<f64>> {
    const FROM: u32 = 200;
    const INTO: u32 = 201;
    timed(n, || {
        let g = guest.grants();
        let gref = g.accept_transfer(did, INTO).map_err(|e| anyhow!("{e}"))?;
        drv.transfer(FROM, gid, gref).map_err(|e| anyhow!("{e}"))?;
        g.end_transfer(gref).map_err(|e| anyhow!("{e}"))?;
        Ok(())
    })
}

/// Page flips `count` at a time through the batch page, as netback flips
/// a receive batch: the guest posts `count` accept-transfer grants, the
/// driver domain gives it that many frames in one transfer batch, and the
/// guest ends the grants.
fn flip_batches(
    guest: &HvClient,
    drv: &mut HvClient,
    (gid, did): (DomId, DomId),
    count: usize,
    n: usize,
) -> Result<Vec<f64>> {
    // The last quarter of each 256-frame pool, used by no other row.
    const FROM: u32 = 192;
    const INTO: u32 = 192;
    let mut flips = Vec::with_capacity(count);
    let mut st = Vec::with_capacity(count);
    timed(n, || {
        let g = guest.grants();
        flips.clear();
        for i in 0..count as u32 {
            let gref = g
                .accept_transfer(did, INTO + i)
                .map_err(|e| anyhow!("{e}"))?;
            flips.push(hv::client::Flip {
                frame: FROM + i,
                gref,
            });
        }
        drv.transfer_batch(gid, &flips, &mut st)
            .map_err(|e| anyhow!("{e}"))?;
        if st.iter().any(|s| *s != 0) {
            return Err(anyhow!("page flip failed: {st:?}"));
        }
        for f in &flips {
            g.end_transfer(f.gref).map_err(|e| anyhow!("{e}"))?;
        }
        Ok(())
    })
}

const IPI_ROW: &str = "inter-processor interrupt round trip (to a thread spinning on another core)";

/// An inter-processor interrupt's round trip: this thread, on one core,
/// interrupts a thread of its own spinning on another and waits until that
/// core has taken the interrupt (`sys::interrupt_own_cores`). The papers'
/// uniprocessors sent none; here one is sent for each wake-up of a task
/// on another core, each burst of frames steered to another core's receive
/// and each TLB flush of an address space live on two cores. None when
/// this process may use only one core.
fn ipi_round_trip(n: usize) -> Result<Option<Vec<f64>>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let cpus = sys::allowed_cpus()?;
    let (Some(&here), Some(&there)) = (cpus.first(), cpus.get(1)) else {
        return Ok(None);
    };
    if let Err(e) = sys::register_core_interrupts() {
        eprintln!("bench hv: no inter-processor interrupt row: {e}");
        return Ok(None);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (s, r) = (Arc::clone(&stop), Arc::clone(&ready));
    let spinner = std::thread::spawn(move || -> std::io::Result<()> {
        sys::set_thread_cpus(&[there])?;
        r.store(true, Ordering::Release);
        while !s.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        Ok(())
    });
    let timing = sys::set_thread_cpus(&[here])
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            while !ready.load(Ordering::Acquire) && !spinner.is_finished() {
                std::hint::spin_loop();
            }
            timed(n, || {
                sys::interrupt_own_cores().map_err(anyhow::Error::from)
            })
        });
    stop.store(true, Ordering::Relaxed);
    let spun = spinner
        .join()
        .map_err(|_| anyhow!("the spinning thread panicked"))?;
    sys::set_thread_cpus(&cpus)?;
    spun?;
    timing.map(Some)
}

/// Event-channel notification and wake-up, one way: the guest pings a
/// channel the driver domain echoes from a thread; half of each round trip.
fn evtchn_one_way(
    guest: &mut HvClient,
    drv: &mut HvClient,
    gid: DomId,
    did: DomId,
    n: usize,
) -> Result<Vec<f64>> {
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
    guest.evtchn_close(ch_g).map_err(|e| anyhow!("{e}"))?;
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;
    Ok(one_way)
}

/// A batch of `BATCH` grant copies of a full frame each, from frames the
/// guest fills and grants to the driver domain into the driver's own.
fn grant_copy_ops(guest: &mut HvClient, gid: DomId, did: DomId) -> Result<Vec<GrantCopy>> {
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
    Ok(ops)
}

/// `splitnet bench hv`: hv's primitives, run inside this process, under
/// the profiler when `--profile` asks.
pub struct HvSuite;

impl harness::Suite for HvSuite {
    fn name(&self) -> &'static str {
        "hv"
    }

    fn run(&self, a: &Args) -> Result<Output> {
        let opts = HvBenchOptions {
            iterations: a.iterations.unwrap_or(if a.quick { 200 } else { 2000 }),
            runs: a.runs(),
            progress: true,
        };
        if !a.profile {
            let r = run(&opts)?;
            return Output::of(&r, r.table(), r.svg());
        }
        // hv runs inside this process here.
        let popts = prof::ProfileOptions {
            hv_pid: Some(std::process::id() as i32),
            initiator: "splitnet bench hv".into(),
            ..Default::default()
        };
        let (r, p) = prof::profile_while(popts, || run(&opts))
            .map_err(|e| anyhow::anyhow!("starting the profiler: {e}"))?;
        let r = r?;
        let mut out = Output::of(&r, r.table(), r.svg())?;
        out.profile = Some(p);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipi_round_trip_is_timed_on_two_cores_and_the_thread_gets_its_cores_back() {
        let cpus = sys::allowed_cpus().unwrap();
        let v = ipi_round_trip(20).unwrap();
        match cpus.len() {
            1 => assert!(v.is_none()),
            _ => {
                let v = v.expect("two cores: a row");
                assert_eq!(v.len(), 20);
                assert!(v.iter().all(|c| *c > 0.0), "{v:?}");
            }
        }
        assert_eq!(sys::allowed_cpus().unwrap(), cpus);
    }
}
