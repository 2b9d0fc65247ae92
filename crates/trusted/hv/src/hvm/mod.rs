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

use crate::error::{HvError, HvResult};
use crate::proto::DomId;
use abi::ioreq::IoWidth;
use abi::ioreq::{
    self as xen, Ioreq, STATE_IOREQ_INPROCESS, STATE_IOREQ_NONE, STATE_IOREQ_READY,
    STATE_IORESP_READY,
};
use abi::SharedMemory;
use hypercall::ioreq::{
    dm, get_u64, put_u64, set_state, state, to_ioreq, validate, vcpu, DmFds, ExitReason,
    ExitResult, HvmCounters, HvmSnapshot, Placement, StageStats, VcpuFds, SEQ24,
};
use hypercall::trace::{bucket_of, EventStats, BUCKETS};
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use sys::{poll_readable_few, rdtsc, Doorbell, Mapping, Memfd};
use vpic::DualPic;

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
#[derive(Debug, Clone, Copy)]
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

#[derive(Debug, Default)]
struct Accounts {
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

/// `v` forced into `[lo, max(lo, hi)]`: probes from another party, or from
/// another CPU's TSC, kept in order without ever panicking.
fn between(v: u64, lo: u64, hi: u64) -> u64 {
    v.max(lo).min(hi.max(lo))
}

fn lock(a: &Shared) -> std::sync::MutexGuard<'_, Accounts> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

/// The probes of one forwarded exit, clamped into order (§4.2's numbering).
#[derive(Debug, Clone, Copy)]
struct Probes {
    t1: u64,
    t2: u64,
    t3: u64,
    t6: u64,
    t7: u64,
    t8: u64,
    t9: u64,
}

/// An HVM guest's I/O path in hv: its two pages, the doorbells, and the
/// relay thread (stopped and joined on drop).
pub struct HvmGuest {
    cfg: HvmConfig,
    vcpu_page: Memfd,
    dm_page: Memfd,
    /// The guest's and the device model's ends, and the ringer of `stop`.
    ends: Bells,
    acc: Shared,
    thread: Option<JoinHandle<()>>,
}

fn os<T>(what: &str, r: std::io::Result<T>) -> HvResult<T> {
    r.map_err(|e| HvError::internal(what, e))
}

impl HvmGuest {
    /// Allocates the pages (`splitnet-<name>-vcpu0`, `splitnet-<name>-ioreq`)
    /// and starts the relay thread.
    /// `spawn` starts the relay thread (hv's guarded spawn, or a plain one).
    pub fn create(
        name: &str,
        cfg: HvmConfig,
        spawn: impl FnOnce(String, Box<dyn FnOnce() + Send>) -> HvResult<JoinHandle<()>>,
    ) -> HvResult<HvmGuest> {
        let page = |what: &str| -> HvResult<(Memfd, Mapping)> {
            let fd = os(
                &format!("allocating the {what} page of {name}"),
                Memfd::create(&format!("splitnet-{name}-{what}"), sys::PAGE_SIZE, false),
            )?;
            let map = os(
                &format!("mapping the {what} page of {name}"),
                Mapping::new(fd.as_fd(), 0, sys::PAGE_SIZE, true),
            )?;
            Ok((fd, map))
        };
        let (vcpu_page, vcpu_map) = page("vcpu0")?;
        let (dm_page, dm_map) = page("ioreq")?;
        if cfg.placement == Placement::Dm {
            dm_map.store_u32(dm::CONFIG, dm::CONFIG_PIC_IN_DM);
        }
        let (hv_ends, ends) = Bells::pairs()?;
        let acc = Shared::default();
        let relay = Relay {
            cfg,
            vcpu: vcpu_map,
            dm: dm_map,
            b: hv_ends,
            pic: DualPic::new(),
            wires: 0,
            inject_seq: 0,
            dm_vec_taken: 0,
            pending_vector: None,
            dm_seq: 0,
            abandoned: false,
            last_resume: 0,
            prev: None,
            acc: acc.clone(),
        };
        let thread = spawn(format!("hv-hvm-{name}"), Box::new(move || relay.run()))?;
        Ok(HvmGuest {
            cfg,
            vcpu_page,
            dm_page,
            ends,
            acc,
            thread: Some(thread),
        })
    }

    /// The configuration it was created with.
    pub fn config(&self) -> HvmConfig {
        self.cfg
    }

    /// Descriptors for the guest's process (its `splitnet_hvm::HvmVcpu`).
    pub fn vcpu_fds(&self) -> HvResult<VcpuFds> {
        Ok(VcpuFds {
            page: os("vcpu page", self.vcpu_page.dup())?,
            kick: os("dup", self.ends.g_kick.as_fd().try_clone_to_owned())?,
            done: os("dup", self.ends.g_done.as_fd().try_clone_to_owned())?,
            irq: os("dup", self.ends.g_irq.as_fd().try_clone_to_owned())?,
        })
    }

    /// Descriptors for the device model's process (its
    /// `splitnet_hvm::DeviceModel`).
    pub fn dm_fds(&self) -> HvResult<DmFds> {
        Ok(DmFds {
            page: os("ioreq page", self.dm_page.dup())?,
            kick: os("dup", self.ends.d_kick.as_fd().try_clone_to_owned())?,
            done: os("dup", self.ends.d_done.as_fd().try_clone_to_owned())?,
        })
    }

    /// Stops the relay thread: later exits time out in the guest. Dropping
    /// the last handle stops it too.
    pub fn stop(&self) {
        let _ = self.ends.stop.ring();
    }

    /// The accounting so far.
    pub fn snapshot(&self) -> HvmSnapshot {
        lock(&self.acc).snapshot(self.cfg.placement)
    }
}

impl Drop for HvmGuest {
    fn drop(&mut self) {
        let _ = self.ends.stop.ring();
        if let Some(t) = self.thread.take() {
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

/// The relay thread's state.
struct Relay {
    cfg: HvmConfig,
    vcpu: Mapping,
    dm: Mapping,
    b: Bells,
    /// The vPIC (used with [`Placement::Hv`]).
    pic: DualPic,
    /// The wires as last sampled.
    wires: u16,
    /// Seq of the last injection posted to the guest.
    inject_seq: u32,
    /// Seq of the last vector taken from the device model's PIC.
    dm_vec_taken: u32,
    /// A vector taken from the device model, not injected yet.
    pending_vector: Option<u8>,
    dm_seq: u32,
    /// hv gave up on the request in the device model's slot.
    abandoned: bool,
    /// When the guest was last resumed (its next probe 1 cannot be earlier).
    last_resume: u64,
    /// The last forwarded exit, waiting for the guest's probe 10.
    prev: Option<Probes>,
    acc: Shared,
}

impl Relay {
    fn run(mut self) {
        loop {
            let fds = [
                self.b.g_kick.as_fd(),
                self.b.d_done.as_fd(),
                self.b.stop.as_fd(),
            ];
            let Ok(ready) = poll_readable_few(&fds, None) else {
                return;
            };
            if ready & 0b100 != 0 {
                return;
            }
            if ready & 0b010 != 0 {
                let t0 = rdtsc();
                let _ = self.b.d_done.drain();
                self.dm_rang(t0);
            }
            if ready & 0b001 != 0 {
                let t2 = rdtsc(); // probe 2: hv's exit handler runs
                let _ = self.b.g_kick.drain();
                self.exit(t2);
            }
        }
    }

    /// The device model rang with no request outstanding: an answer hv gave
    /// up on or never asked for, or interrupt changes.
    fn dm_rang(&mut self, t0: u64) {
        self.reap_stale();
        let sampled = self.sample_interrupts();
        let injected = self.try_inject();
        if sampled || injected {
            let cycles = rdtsc().saturating_sub(t0);
            lock(&self.acc).record(ExitReason::Interrupt, cycles, false);
        }
    }

    /// Consumes an answer sitting in the device model's slot outside a
    /// request.
    fn reap_stale(&mut self) {
        if state(&self.dm, dm::SLOT) != STATE_IORESP_READY {
            return;
        }
        set_state(&self.dm, dm::SLOT, STATE_IOREQ_NONE);
        let mut a = lock(&self.acc);
        if std::mem::take(&mut self.abandoned) {
            a.counters.late_responses += 1;
        } else {
            a.counters.unsolicited_responses += 1;
        }
    }

    /// One I/O exit.
    fn exit(&mut self, t2: u64) {
        let p = &self.vcpu;
        let req = Ioreq::load(p, vcpu::SLOT);
        if req.state != STATE_IOREQ_READY {
            lock(&self.acc).counters.spurious_kicks += 1;
            return;
        }
        // Taken: another ring while we work is spurious.
        set_state(p, vcpu::SLOT, STATE_IOREQ_INPROCESS);
        let seq = p.read_u32(vcpu::SEQ);
        let t1 = between(get_u64(p, vcpu::T_ISSUE), self.last_resume.min(t2), t2);
        let prev_done = get_u64(p, vcpu::PREV_DONE);
        self.account_prev(prev_done, t2);
        lock(&self.acc).counters.exits += 1;

        let access = match validate(&req) {
            Ok(a) => a,
            Err(_) => {
                lock(&self.acc).counters.refused += 1;
                self.complete(
                    seq,
                    ExitResult::Refused,
                    u32::MAX,
                    ExitReason::IoRefused,
                    t2,
                );
                return;
            }
        };
        if DualPic::claims(access.port) && self.cfg.placement == Placement::Hv {
            // §5.1: the PIC in hv, no device model round trip.
            let data = match (access.width, access.write) {
                (IoWidth::Byte, true) => {
                    self.pic.write_port(access.port, access.value as u8);
                    0
                }
                (IoWidth::Byte, false) => {
                    u32::from(self.pic.read_port(access.port).unwrap_or(0xff))
                }
                _ => access.width.all_ones(),
            };
            self.complete(seq, ExitResult::Ok, data, ExitReason::IoPicHv, t2);
            return;
        }
        let reason = if DualPic::claims(access.port) {
            ExitReason::IoPicDm
        } else if access.port.wrapping_sub(self.cfg.nic_base) < self.cfg.nic_len {
            ExitReason::IoNic
        } else {
            ExitReason::IoOther
        };
        match self.forward(&access, t1, t2) {
            Ok((data, probes)) => {
                self.complete(seq, ExitResult::Ok, data, reason, t2);
                self.prev = Some(probes);
            }
            Err(r) => self.complete(seq, r, access.width.all_ones(), reason, t2),
        }
    }

    /// Hands the access to the device model and waits for its answer, at
    /// most `dm_timeout`.
    fn forward(
        &mut self,
        a: &hypercall::ioreq::PortAccess,
        t1: u64,
        t2: u64,
    ) -> Result<(u32, Probes), ExitResult> {
        self.reap_stale();
        if state(&self.dm, dm::SLOT) != STATE_IOREQ_NONE {
            lock(&self.acc).counters.dm_busy += 1;
            return Err(ExitResult::DmBusy);
        }
        self.dm_seq = self.dm_seq.wrapping_add(1);
        self.dm.write_u32(dm::SEQ, self.dm_seq);
        to_ioreq(a, STATE_IOREQ_READY).store(&self.dm, dm::SLOT);
        let t3 = rdtsc().max(t2); // probe 3: the guest is "scheduled out"
        let _ = self.b.d_kick.ring();
        lock(&self.acc).counters.forwarded += 1;
        let deadline = Instant::now() + self.cfg.dm_timeout;
        loop {
            if state(&self.dm, dm::SLOT) == STATE_IORESP_READY {
                let t9 = rdtsc(); // probe 9: hv has the answer
                let d = &self.dm;
                let data = Ioreq::load(d, dm::SLOT).data as u32;
                // The device model's probes, forced into order inside ours.
                let t9 = t9.max(t3);
                let t5 = between(get_u64(d, dm::T_WOKEN), t3, t9);
                let t6 = between(get_u64(d, dm::T_DRAINED), t5, t9);
                let t7 = between(get_u64(d, dm::T_HANDLER), t6, t9);
                let t8 = between(get_u64(d, dm::T_DONE), t7, t9);
                set_state(d, dm::SLOT, STATE_IOREQ_NONE);
                // Wires are published before the answer (§5.1.1).
                self.sample_interrupts();
                let data = if a.write {
                    0
                } else {
                    data & a.width.all_ones()
                };
                let probes = Probes {
                    t1,
                    t2,
                    t3,
                    t6,
                    t7,
                    t8,
                    t9,
                };
                return Ok((data, probes));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let fds = [self.b.d_done.as_fd(), self.b.stop.as_fd()];
            let stopping = left.is_zero()
                || poll_readable_few(&fds, Some(left)).map_or(true, |r| r & 0b10 != 0);
            if stopping {
                if !self.retract() {
                    self.abandoned = true;
                }
                lock(&self.acc).counters.dm_timeouts += 1;
                return Err(ExitResult::DmTimeout);
            }
            let _ = self.b.d_done.drain();
        }
    }

    /// Takes back a request the device model has not started (READY →
    /// NONE, atomically on the state byte). False when it had.
    fn retract(&self) -> bool {
        let word = |st: u8| -> u16 {
            let mut r = Ioreq::default();
            r.set_ctrl_word(self.dm.load_u32(dm::SLOT + xen::CTRL_WORD));
            r.state = st;
            (r.ctrl_word() >> 16) as u16
        };
        self.dm
            .cmpxchg_u16(
                dm::SLOT + xen::FLAGS_BYTE,
                word(STATE_IOREQ_READY),
                word(STATE_IOREQ_NONE),
            )
            .is_ok()
    }

    /// Writes the completion, injects a pending interrupt (at "VM entry"),
    /// resumes the guest, and accounts the exit.
    fn complete(&mut self, seq: u32, r: ExitResult, data: u32, reason: ExitReason, t2: u64) {
        // Accounted before the response is published: a guest that sees
        // its slot ready may run on without waiting for the doorbell, and
        // what it reads next must include this exit.
        let t = rdtsc();
        lock(&self.acc).record(reason, t.saturating_sub(t2), r != ExitResult::Ok);
        let p = &self.vcpu;
        p.write_u32(vcpu::RESULT, r as u32);
        p.write_u32(vcpu::RESP_SEQ, seq);
        put_u64(p, vcpu::SLOT + xen::DATA, u64::from(data));
        set_state(p, vcpu::SLOT, STATE_IORESP_READY);
        self.try_inject();
        let _ = self.b.g_done.ring();
        self.last_resume = t;
    }

    /// Accounts the previous forwarded exit now that the guest reported its
    /// probe 10 (kept in order between hv's probe 9 and this exit).
    fn account_prev(&mut self, prev_done: u64, now: u64) {
        let Some(p) = self.prev.take() else { return };
        let t10 = between(prev_done, p.t9, now);
        let stages = [
            (p.t3 - p.t1) + (t10 - p.t9),
            p.t6 - p.t3,
            p.t7 - p.t6,
            p.t8 - p.t7,
            p.t9 - p.t8,
        ];
        let mut a = lock(&self.acc);
        let s = &mut a.stages;
        s.count += 1;
        for (i, c) in stages.iter().enumerate() {
            s.cycles[i] = s.cycles[i].wrapping_add(*c);
            s.max_cycles[i] = s.max_cycles[i].max(*c);
        }
        s.round_trip = s.round_trip.wrapping_add(t10 - p.t1);
        s.exit_entry = s.exit_entry.wrapping_add(p.t2 - p.t1);
        s.resume = s.resume.wrapping_add(t10 - p.t9);
    }

    /// Takes interrupt changes from the device model: wires into the vPIC,
    /// or a vector its PIC raised. Returns whether there were any.
    fn sample_interrupts(&mut self) -> bool {
        match self.cfg.placement {
            Placement::Hv => {
                let w = self.dm.load_u32(dm::WIRES) as u16;
                let changed = w ^ self.wires;
                if changed == 0 {
                    return false;
                }
                for irq in 0..16u8 {
                    if changed & (1 << irq) != 0 {
                        self.pic.set_irq(irq, w & (1 << irq) != 0);
                    }
                }
                self.wires = w;
                lock(&self.acc).counters.wire_changes += u64::from(changed.count_ones());
                true
            }
            Placement::Dm => {
                let w = self.dm.load_u32(dm::VECTOR);
                let seq = w >> 8 & SEQ24;
                if seq == self.dm_vec_taken || self.pending_vector.is_some() {
                    return false;
                }
                self.dm_vec_taken = seq;
                self.pending_vector = Some(w as u8);
                self.dm.store_u32(dm::VECTOR_ACK, seq);
                lock(&self.acc).counters.dm_vectors += 1;
                true
            }
        }
    }

    /// Posts an interrupt to the guest if one is ready and the guest took
    /// the previous one. Returns whether it posted.
    fn try_inject(&mut self) -> bool {
        let ready = match self.cfg.placement {
            Placement::Hv => self.pic.int_output(),
            Placement::Dm => self.pending_vector.is_some(),
        };
        if !ready {
            return false;
        }
        if self.vcpu.load_u32(vcpu::INJECT_ACK) & SEQ24 != self.inject_seq {
            lock(&self.acc).counters.window_closed += 1;
            return false;
        }
        let vector = match self.cfg.placement {
            Placement::Hv => self.pic.inta(),
            Placement::Dm => self.pending_vector.take().unwrap_or(0),
        };
        self.inject_seq = (self.inject_seq + 1) & SEQ24;
        self.vcpu
            .store_u32(vcpu::INJECT, self.inject_seq << 8 | u32::from(vector));
        let _ = self.b.g_irq.ring();
        lock(&self.acc).counters.injections += 1;
        true
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

    /// Every guest's accounting.
    pub(crate) fn snapshots(&self) -> BTreeMap<DomId, HvmSnapshot> {
        self.map()
            .iter()
            .map(|(id, g)| (*id, g.snapshot()))
            .collect()
    }
}
