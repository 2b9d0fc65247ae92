//! hv's side of the HVM I/O path (Zhang & Dong §2.2, §4.2, §5.1): per HVM
//! guest vcpu, a relay thread that takes the guest's I/O exits, serves the
//! vPIC itself when it is placed in hv, forwards everything else to the
//! device model as an `ioreq_t`, completes the exit when the device model
//! answers (or gives up after [`HvmConfig::dm_timeout`]), and injects the
//! guest's interrupts at resume. Every exit is accounted per reason and
//! forwarded ones per stage, from TSC probes at the stage boundaries
//! (`hypercall::ioreq` has the layouts and the stage definitions).
//!
//! One thread per guest vcpu, like Xen's vcpu: a device model that never
//! answers stalls only its own guest, and only for the timeout.

use crate::error::{ErrorKind, HvError, HvResult};
use crate::proto::DomId;
use abi::SharedMemory;
use hypercall::ioreq::{
    dm, DmFds, ExitReason, HvmCounters, HvmSnapshot, Placement, StageStats, VcpuFds,
};
use hypercall::trace::{bucket_of, EventStats, BUCKETS};
use relay::Relay;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use sys::{Doorbell, Mapping, Memfd};

mod image;
mod kept;
mod relay;

pub use image::HvmImage;

/// How an HVM guest's I/O path is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HvmConfig {
    /// Where the guest's 8259A pair is emulated.
    pub placement: Placement,
    /// The NIC's I/O ports, `nic_base..nic_base + nic_len` (for accounting:
    /// every port but the PIC's goes to the device model).
    pub nic_base: u16,
    pub nic_len: u16,
    /// How long hv waits for the device model's answer before it fails the
    /// exit (the guest reads all ones) and goes on.
    pub dm_timeout: Duration,
    /// The domain that may take the device model's side and the guest's
    /// memory with [`hypercall::proto::Request::HvmDeviceModel`] (the driver
    /// domain; Xen's dom0). None: only hv's own callers, through
    /// [`HvmGuest::dm_fds`].
    pub device_model: Option<DomId>,
}

impl Default for HvmConfig {
    fn default() -> Self {
        HvmConfig {
            placement: Placement::Hv,
            nic_base: NIC_IO_BASE,
            nic_len: NIC_PORTS,
            dm_timeout: Duration::from_secs(1),
            device_model: None,
        }
    }
}

/// The emulated NIC's ports in splitnet's machine (`emul::NIC_IO_BASE` and
/// the PCnet's 32 ports; a test holds them equal), written out so that hv
/// does not link the NIC model.
const NIC_IO_BASE: u16 = 0xc000;
const NIC_PORTS: u16 = 0x20;

/// One reason's cumulative cost.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Slot {
    count: u64,
    cycles: u64,
    max: u64,
    failed: u64,
    hist: [u64; BUCKETS],
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            count: 0,
            cycles: 0,
            max: 0,
            failed: 0,
            hist: [0; BUCKETS],
        }
    }
}

/// Every exit's cost so far, by reason and stage (carried across an
/// upgrade of hv).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Accounts {
    reasons: [Slot; ExitReason::ALL.len()],
    stages: StageStats,
    counters: HvmCounters,
}

impl Accounts {
    fn record(&mut self, reason: ExitReason, cycles: u64, failed: bool) {
        let s = &mut self.reasons[reason as usize];
        s.count += 1;
        s.cycles = s.cycles.wrapping_add(cycles);
        s.max = s.max.max(cycles);
        s.failed += u64::from(failed);
        s.hist[bucket_of(cycles)] += 1;
    }

    fn snapshot(&self, placement: Placement) -> HvmSnapshot {
        let reasons = ExitReason::ALL
            .iter()
            .zip(&self.reasons)
            .filter(|(_, s)| s.count > 0)
            .map(|(r, s)| {
                let buckets = (0..BUCKETS)
                    .filter(|&i| s.hist[i] > 0)
                    .map(|i| (i as u8, s.hist[i]))
                    .collect();
                let stats = EventStats {
                    count: s.count,
                    cycles: s.cycles,
                    max_cycles: s.max,
                    items: s.failed,
                    buckets,
                };
                (r.name().to_string(), stats)
            })
            .collect();
        HvmSnapshot {
            placement,
            reasons,
            stages: self.stages.clone(),
            counters: self.counters.clone(),
        }
    }
}

type Shared = Arc<Mutex<Accounts>>;

fn lock(a: &Shared) -> std::sync::MutexGuard<'_, Accounts> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

/// An HVM guest's I/O path in hv: its pages, the doorbells, and the
/// relay thread (stopped and joined on drop).
pub struct HvmGuest {
    name: String,
    cfg: HvmConfig,
    /// The vcpu page, the ioreq page, and the page the relay keeps its
    /// state in ([`kept`]).
    pages: [Memfd; 3],
    /// hv's ends (the relay serves on duplicates), for an upgrade's image.
    mine: Bells,
    /// The guest's and the device model's ends, and the ringer of `stop`.
    ends: Bells,
    acc: Shared,
    /// Asks the relay to pause rather than end when `stop` rings.
    pausing: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The relay while it does not run: before its start, or paused.
    parked: Arc<Mutex<Option<Relay>>>,
}

fn os<T>(what: &str, r: std::io::Result<T>) -> HvResult<T> {
    r.map_err(|e| HvError::internal(what, e))
}

/// Starts a relay thread: hv's guarded spawn, or a plain one.
pub trait Spawn: FnOnce(String, Box<dyn FnOnce() + Send>) -> HvResult<JoinHandle<()>> {}
impl<F: FnOnce(String, Box<dyn FnOnce() + Send>) -> HvResult<JoinHandle<()>>> Spawn for F {}

impl HvmGuest {
    /// Allocates the pages (`splitnet-<name>-vcpu0`, `-ioreq`, `-kept`)
    /// and starts the relay thread with `spawn`.
    pub fn create(name: &str, cfg: HvmConfig, spawn: impl Spawn) -> HvResult<HvmGuest> {
        let page = |what: &str| {
            os(
                &format!("allocating the {what} page of {name}"),
                Memfd::create(&format!("splitnet-{name}-{what}"), sys::PAGE_SIZE, false),
            )
        };
        let pages = [page("vcpu0")?, page("ioreq")?, page("kept")?];
        if cfg.placement == Placement::Dm {
            map(&pages[1], name)?.store_u32(dm::CONFIG, dm::CONFIG_PIC_IN_DM);
        }
        let (mine, ends) = Bells::pairs()?;
        let g = HvmGuest::assemble(name, cfg, pages, (mine, ends), Shared::default())?;
        g.start(spawn)?;
        Ok(g)
    }

    /// The guest with its relay made (from the kept page) and parked.
    fn assemble(
        name: &str,
        cfg: HvmConfig,
        pages: [Memfd; 3],
        (mine, ends): (Bells, Bells),
        acc: Shared,
    ) -> HvResult<HvmGuest> {
        let pausing = Arc::new(AtomicBool::new(false));
        let relay = Relay::new(
            (
                cfg,
                map(&pages[0], name)?,
                map(&pages[1], name)?,
                mine.try_clone()?,
            ),
            kept::KeptPage::new(map(&pages[2], name)?),
            acc.clone(),
            pausing.clone(),
        )
        .map_err(|e| HvError::new(ErrorKind::Invalid, format!("{name}'s kept state: {e}")))?;
        Ok(HvmGuest {
            name: name.to_string(),
            cfg,
            pages,
            mine,
            ends,
            acc,
            pausing,
            thread: Mutex::new(None),
            parked: Arc::new(Mutex::new(Some(relay))),
        })
    }

    /// Runs the parked relay on a thread of `spawn`'s.
    pub fn start(&self, spawn: impl Spawn) -> HvResult<()> {
        let Some(relay) = relock(&self.parked).take() else {
            return Ok(());
        };
        self.pausing.store(false, Ordering::SeqCst);
        let parked = self.parked.clone();
        let body = move || {
            if let Some(r) = relay.run() {
                *relock(&parked) = Some(r);
            }
        };
        let t = spawn(format!("hv-hvm-{}", self.name), Box::new(body))?;
        *relock(&self.thread) = Some(t);
        Ok(())
    }

    /// Stops the relay between two exits, its state kept (an upgrade's
    /// `execve` follows; [`HvmGuest::start`] undoes it).
    pub fn pause(&self) {
        self.pausing.store(true, Ordering::SeqCst);
        let _ = self.ends.stop.ring();
        if let Some(t) = relock(&self.thread).take() {
            let _ = t.join();
        }
    }

    /// The configuration it was created with.
    pub fn config(&self) -> HvmConfig {
        self.cfg
    }

    /// Descriptors for the guest's process (its `splitnet_hvm::HvmVcpu`).
    pub fn vcpu_fds(&self) -> HvResult<VcpuFds> {
        Ok(VcpuFds {
            page: os("vcpu page", self.pages[0].dup())?,
            kick: os("dup", self.ends.g_kick.as_fd().try_clone_to_owned())?,
            done: os("dup", self.ends.g_done.as_fd().try_clone_to_owned())?,
            irq: os("dup", self.ends.g_irq.as_fd().try_clone_to_owned())?,
        })
    }

    /// Descriptors for the device model's process (its
    /// `splitnet_hvm::DeviceModel`).
    pub fn dm_fds(&self) -> HvResult<DmFds> {
        Ok(DmFds {
            page: os("ioreq page", self.pages[1].dup())?,
            kick: os("dup", self.ends.d_kick.as_fd().try_clone_to_owned())?,
            done: os("dup", self.ends.d_done.as_fd().try_clone_to_owned())?,
        })
    }

    /// Stops the relay thread: later exits time out in the guest. Dropping
    /// the last handle stops it too.
    pub fn stop(&self) {
        self.pausing.store(false, Ordering::SeqCst);
        let _ = self.ends.stop.ring();
    }

    /// The accounting so far.
    pub fn snapshot(&self) -> HvmSnapshot {
        lock(&self.acc).snapshot(self.cfg.placement)
    }
}

/// A page of the guest's mapped for hv.
fn map(page: &Memfd, name: &str) -> HvResult<Mapping> {
    os(
        &format!("mapping a page of {name}'s I/O path"),
        Mapping::new(page.as_fd(), 0, sys::PAGE_SIZE, true),
    )
}

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for HvmGuest {
    fn drop(&mut self) {
        self.stop();
        if let Some(t) = relock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

/// One end of each doorbell of an HVM guest's I/O path: guest → hv `g_kick`,
/// hv → guest `g_done` and `g_irq`, hv → device model `d_kick`, device model
/// → hv `d_done`, and `stop` (to end the relay thread).
struct Bells {
    g_kick: Doorbell,
    g_done: Doorbell,
    g_irq: Doorbell,
    d_kick: Doorbell,
    d_done: Doorbell,
    stop: Doorbell,
}

impl Bells {
    fn all(&self) -> [&Doorbell; 6] {
        [
            &self.g_kick,
            &self.g_done,
            &self.g_irq,
            &self.d_kick,
            &self.d_done,
            &self.stop,
        ]
    }

    fn from_all([g_kick, g_done, g_irq, d_kick, d_done, stop]: [Doorbell; 6]) -> Bells {
        Bells {
            g_kick,
            g_done,
            g_irq,
            d_kick,
            d_done,
            stop,
        }
    }

    fn try_clone(&self) -> HvResult<Bells> {
        let c = |b: &Doorbell| os("doorbell", b.try_clone());
        let [a, b, c2, d, e, f] = self.all();
        Ok(Bells::from_all([c(a)?, c(b)?, c(c2)?, c(d)?, c(e)?, c(f)?]))
    }

    /// hv's ends and the others'.
    fn pairs() -> HvResult<(Bells, Bells)> {
        let bell = || os("doorbell", Doorbell::pair());
        // (waiter, ringer)
        let (hv_gk, gk) = bell()?;
        let (gd, hv_gd) = bell()?;
        let (gi, hv_gi) = bell()?;
        let (dk, hv_dk) = bell()?;
        let (hv_dd, dd) = bell()?;
        let (hv_stop, stop) = bell()?;
        let hv = Bells {
            g_kick: hv_gk,
            g_done: hv_gd,
            g_irq: hv_gi,
            d_kick: hv_dk,
            d_done: hv_dd,
            stop: hv_stop,
        };
        let others = Bells {
            g_kick: gk,
            g_done: gd,
            g_irq: gi,
            d_kick: dk,
            d_done: dd,
            stop,
        };
        Ok((hv, others))
    }
}

/// An HVM guest's rows in hv's trace of it: `hvm:<reason>` per exit reason,
/// and `hvm_stage<N>:<name>` per stage of forwarded exits (count and
/// cycles; no histogram).
pub(crate) fn trace_rows(s: &HvmSnapshot, rows: &mut BTreeMap<String, EventStats>) {
    for (reason, stats) in &s.reasons {
        rows.insert(format!("hvm:{reason}"), stats.clone());
    }
    let st = &s.stages;
    for (i, name) in hypercall::ioreq::STAGES.iter().enumerate() {
        if st.count == 0 {
            break;
        }
        let stats = EventStats {
            count: st.count,
            cycles: st.cycles[i],
            max_cycles: st.max_cycles[i],
            items: 0,
            buckets: Vec::new(),
        };
        rows.insert(
            format!("hvm_stage{}:{}", i + 1, name.replace(' ', "_")),
            stats,
        );
    }
}

/// HVM guests registered with a [`Hypervisor`](crate::Hypervisor), by domain.
#[derive(Default)]
pub struct HvmGuests(Mutex<BTreeMap<DomId, Arc<HvmGuest>>>);

impl HvmGuests {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<DomId, Arc<HvmGuest>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Domain `domid`'s I/O path, if it is an HVM guest.
    pub(crate) fn get(&self, domid: DomId) -> Option<Arc<HvmGuest>> {
        self.map().get(&domid).cloned()
    }

    /// Whether domain `domid` is an HVM guest.
    pub(crate) fn contains(&self, domid: DomId) -> bool {
        self.map().contains_key(&domid)
    }

    /// Registers `g` as domain `domid`'s I/O path.
    pub(crate) fn insert(&self, domid: DomId, g: Arc<HvmGuest>) {
        self.map().insert(domid, g);
    }

    /// Removes (and, once unused, stops) a domain's I/O path.
    pub(crate) fn detach(&self, domid: DomId) {
        let g = self.map().remove(&domid); // the map's lock ends here
        if let Some(g) = g {
            g.stop(); // even while someone else still holds a handle
        }
    }

    /// Every guest's image, by domain.
    pub(crate) fn images(&self) -> Vec<HvmImage> {
        self.map().iter().map(|(&id, g)| g.image(id)).collect()
    }

    /// Pauses every guest's relay, its state kept, until
    /// [`HvmGuests::start_all`] (an upgrade's `execve` comes between).
    pub(crate) fn pause_all(&self) {
        for g in self.map().values() {
            g.pause();
        }
    }

    /// Runs every parked relay, each on a thread `spawn` gives for its
    /// domain.
    pub(crate) fn start_all(
        &self,
        spawn: impl Fn(DomId, String, Box<dyn FnOnce() + Send>) -> HvResult<JoinHandle<()>>,
    ) -> HvResult<()> {
        for (&id, g) in self.map().iter() {
            g.start(|name, body| spawn(id, name, body))?;
        }
        Ok(())
    }

    /// Every guest's accounting.
    pub(crate) fn snapshots(&self) -> BTreeMap<DomId, HvmSnapshot> {
        self.map()
            .iter()
            .map(|(id, g)| (*id, g.snapshot()))
            .collect()
    }
}
