//! The doorbell flood (Xen XSA-332, event floods): a guest that rings its
//! doorbell 10^6 times a second should cost the driver domain only that
//! vif's work, so another pair of guests keeps at least 80% of its quiet
//! throughput. Measured in process: a real hv, the real driver-domain loop
//! in a thread, two well-behaved frontends (one sends, one receives) and a
//! third whose thread only rings. The flooder rings in bursts of 1,000 and
//! sleeps out the rest of each millisecond, so what it costs the others is
//! what it makes the driver domain do, not a CPU it spins on.

use crate::stats::median;
use crate::testbed::stat_cpu;
use anyhow::{bail, Context, Result};
use frame::packet::Packet;
use hv::proto::{Reply, Request, DOMID_TOOLSTACK};
use hv::{DomId, DomainSpec, HvClient, Hypervisor};
use netfront::Netfront;
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::VifConfig;

/// Rings per second the flooder aims at.
pub const RINGS_PER_SECOND: u64 = 1_000_000;
/// Bytes of each frame the good pair sends.
const FRAME: usize = 1024;

/// What one flood measured.
#[derive(Debug, Clone, Serialize)]
pub struct FloodResult {
    /// Frames a second guest A delivered to guest B, quiet and flooded.
    pub quiet_frames_per_s: f64,
    pub flooded_frames_per_s: f64,
    pub ratio: f64,
    /// Rings the flooder made per second (its `notify` calls).
    pub rings_per_s: f64,
    /// Notifications the driver domain took from the flooder's vif.
    pub flooder_notifications_received: u64,
    /// The driver loop's wake-ups per second, quiet and flooded.
    pub quiet_wakeups_per_s: f64,
    pub flooded_wakeups_per_s: f64,
    /// The flooder's vif was still connected at the end.
    pub flooder_connected: bool,
    /// Share of one CPU each thread used, quiet and flooded: the driver
    /// domain's loop, the good pair (one thread), the flooder.
    pub cpu_quiet: Threads,
    pub cpu_flooded: Threads,
}

/// A share of one CPU per thread.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Threads {
    pub driver: f64,
    pub good_pair: f64,
    pub flooder: f64,
}

/// The calling thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn tid() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// CPU time so far of thread `tid` of this process.
fn thread_cpu(tid: &Option<String>) -> Duration {
    tid.as_ref()
        .and_then(|t| stat_cpu(&format!("/proc/self/task/{t}/stat")))
        .unwrap_or_default()
}

/// CPU of the driver, good-pair and flooder threads at one moment.
#[derive(Clone, Copy)]
struct Cpu([Duration; 3], Instant);

impl Cpu {
    fn now(tids: &[Option<String>; 3]) -> Cpu {
        Cpu(tids.each_ref().map(thread_cpu), Instant::now())
    }

    /// Shares of one CPU from `self` to `later`.
    fn to(self, later: Cpu) -> Threads {
        let dt = later.1.duration_since(self.1).as_secs_f64().max(1e-9);
        let d = |i: usize| later.0[i].saturating_sub(self.0[i]).as_secs_f64() / dt;
        Threads {
            driver: d(0),
            good_pair: d(1),
            flooder: d(2),
        }
    }
}

struct Guest {
    hv: HvClient,
    nf: Netfront,
    mac: [u8; 6],
}

struct World {
    hv: Arc<Hypervisor>,
    drv: DomId,
    ids: Vec<DomId>,
    driver: std::thread::JoinHandle<()>,
    driver_tid: Option<String>,
}

impl World {
    fn read(&self, path: &str) -> Option<Value> {
        let req = Request::StoreRead { path: path.into() };
        match self.hv.handle(DOMID_TOOLSTACK, req).0 {
            Ok(Reply::Value(v)) => serde_json::from_slice(&v).ok(),
            _ => None,
        }
    }

    /// The driver loop's wake-ups so far (published twice a second).
    fn wakeups(&self) -> f64 {
        let st = self.read(&format!("/local/domain/{}/splitnet/stats", self.drv));
        st.and_then(|v| v["loop"]["wakeups"].as_f64())
            .unwrap_or(0.0)
    }

    /// Guest `g`'s vif counters and whether it is connected (state 4).
    fn vif(&self, g: DomId) -> (Value, bool) {
        let be = format!("/local/domain/{}/backend/vif/{g}/0", self.drv);
        let state = self.read(&format!("{be}/state"));
        let stats = self.read(&format!("{be}/stats")).unwrap_or(Value::Null);
        (stats, state.and_then(|s| s.as_u64()) == Some(4))
    }
}

/// A driver domain and three connected guests: sender, receiver, flooder.
fn world() -> Result<(World, Vec<Guest>)> {
    let hv = Hypervisor::new();
    let dom = |name: &str, kind: &str, frames: u32| -> Result<(DomId, HvClient)> {
        let (id, sock) = hv.create_domain(DomainSpec::new(name, kind, frames, 2))?;
        Ok((id, HvClient::connect(sock)?))
    };
    let (drv, mut drv_client) = dom("drv", "driver", 2048 + 512 * 3)?;
    let mut ts = Store::new(&hv);
    let mut clients = Vec::new();
    for (i, name) in ["sender", "receiver", "flooder"].into_iter().enumerate() {
        let (id, c) = dom(name, "guest", 600)?;
        let v = VifConfig::fast_path(name, "drv", i);
        setup_vif(&mut ts, &v, id, drv).map_err(anyhow::Error::msg)?;
        clients.push((id, c));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let driver = std::thread::spawn(move || {
        let _ = tx.send(tid());
        let _ = driver_domain::driver::run(&mut drv_client, None);
    });
    let driver_tid = rx.recv().ok().flatten();
    let ids = clients.iter().map(|(id, _)| *id).collect();
    let mut guests = Vec::new();
    for (i, (id, mut c)) in clients.into_iter().enumerate() {
        let dev = format!("/local/domain/{id}/device/vif/0");
        let nf = Netfront::connect(&mut c, &dev, Duration::from_secs(20))
            .map_err(|e| anyhow::anyhow!("frontend {i} did not connect: {e}"))?;
        let mac = [0, 0x16, 0x3e, 0, 0, i as u8 + 1];
        guests.push(Guest { hv: c, nf, mac });
    }
    Ok((
        World {
            hv,
            drv,
            ids,
            driver,
            driver_tid,
        },
        guests,
    ))
}

fn frame(dst: [u8; 6], src: [u8; 6]) -> Packet {
    let mut d = dst.to_vec();
    d.extend_from_slice(&src);
    d.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    d.resize(FRAME, 0x5a);
    Packet::new(d)
}

/// `a` sends to `b` for `secs`; the frames from `a` that `b` received.
fn pump(a: &mut Guest, b: &mut Guest, secs: f64) -> Result<u64> {
    let (mut got, mut rx, mut acks) = (0u64, Vec::new(), Vec::new());
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        while a.nf.can_send() {
            a.nf.send(&mut a.hv, frame(b.mac, a.mac))?;
        }
        a.nf.flush()?;
        a.nf.poll(&mut a.hv, &mut acks)?;
        acks.clear();
        b.nf.poll(&mut b.hv, &mut rx)?;
        got += rx
            .drain(..)
            .filter(|p| p.data.get(6..12) == Some(&a.mac))
            .count() as u64;
        // Like a guest between interrupts: it does not spin on its rings.
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(got)
}

/// Rings `f`'s doorbell at [`RINGS_PER_SECOND`] until `stop`; the rings made.
fn flood(
    f: Guest,
    stop: Arc<AtomicBool>,
    me: std::sync::mpsc::Sender<Option<String>>,
) -> (u64, Guest) {
    let _ = me.send(tid());
    let (t0, mut rings) = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            let _ = f.nf.tx_channel().notify();
        }
        rings += 1000;
        let due = Duration::from_secs_f64(rings as f64 / RINGS_PER_SECOND as f64);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    (rings, f)
}

/// The good pair's throughput quiet, then with the third guest flooding.
pub fn run(secs: f64) -> Result<FloodResult> {
    let (w, mut guests) = world()?;
    let flooder = guests.pop().context("three guests")?;
    let (a, b) = match guests.as_mut_slice() {
        [a, b] => (a, b),
        _ => bail!("two good guests"),
    };
    // The receiver speaks first, so the bridge learns it and the sender's
    // frames go to it alone (not flooded to the flooder's vif).
    pump(b, a, 0.05)?;
    pump(a, b, 0.2)?; // warm-up
    let wake = |w: &World| (w.wakeups(), Instant::now());
    let (w0, t0) = wake(&w);
    let mut tids = [w.driver_tid.clone(), tid(), None];
    let c0 = Cpu::now(&tids);
    let quiet = pump(a, b, secs)? as f64 / secs;
    let cpu_quiet = c0.to(Cpu::now(&tids));
    std::thread::sleep(Duration::from_millis(600)); // counters published
    let (w1, t1) = wake(&w);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let (me, its) = std::sync::mpsc::channel();
    let ft = std::thread::spawn(move || flood(flooder, flag, me));
    tids[2] = its.recv().ok().flatten();
    let (started, c1) = (Instant::now(), Cpu::now(&tids));
    let flooded = pump(a, b, secs)? as f64 / secs;
    let cpu_flooded = c1.to(Cpu::now(&tids));
    stop.store(true, Ordering::Relaxed);
    let (rings, _flooder) = ft.join().map_err(|_| anyhow::anyhow!("flooder panicked"))?;
    let flood_secs = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(600));
    let (w2, t2) = wake(&w);
    let (stats, connected) = w.vif(w.ids[2]);
    w.hv.shutdown();
    let _ = w.driver.join();
    let rate = |a: f64, b: f64, t: Duration| (b - a) / t.as_secs_f64().max(1e-9);
    Ok(FloodResult {
        quiet_frames_per_s: quiet,
        flooded_frames_per_s: flooded,
        ratio: flooded / quiet.max(1e-9),
        rings_per_s: rings as f64 / flood_secs,
        flooder_notifications_received: stats["notifications_received"].as_u64().unwrap_or(0),
        quiet_wakeups_per_s: rate(w0, w1, t1 - t0),
        flooded_wakeups_per_s: rate(w1, w2, t2 - t1),
        flooder_connected: connected,
        cpu_quiet,
        cpu_flooded,
    })
}

/// The median ratio of flooded to quiet throughput over runs.
pub fn median_ratio(rs: &[FloodResult]) -> Option<f64> {
    (!rs.is_empty()).then(|| median(&rs.iter().map(|r| r.ratio).collect::<Vec<_>>()))
}

/// One row per run.
pub fn table(rs: &[FloodResult]) -> String {
    if rs.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nDoorbell flood (in process: one guest rings its doorbell while another pair exchanges 1 KiB frames):\n\n\
         | run | quiet frames/s | flooded frames/s | ratio | rings/s | notifications taken | drv wake-ups/s quiet | flooded | CPU quiet: drv / pair | flooded: drv / pair / flooder | flooder connected |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (i, r) in rs.iter().enumerate() {
        s += &format!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.0} | {} | {:.0} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} / {:.2} | {} |\n",
            i + 1,
            r.quiet_frames_per_s,
            r.flooded_frames_per_s,
            r.ratio,
            r.rings_per_s,
            r.flooder_notifications_received,
            r.quiet_wakeups_per_s,
            r.flooded_wakeups_per_s,
            r.cpu_quiet.driver,
            r.cpu_quiet.good_pair,
            r.cpu_flooded.driver,
            r.cpu_flooded.good_pair,
            r.cpu_flooded.flooder,
            if r.flooder_connected { "yes" } else { "no" }
        );
    }
    s
}
