//! The two untrusted ends of the HVM I/O path ([`hypercall::ioreq`]):
//!
//! - [`HvmVcpu`], in the guest's process: a [`PortIo`] whose every access is
//!   an I/O exit to hv (write the exit, ring hv, block until hv resumes us:
//!   Zhang & Dong §4.2's probes 1 and 10 are taken here), and the
//!   interrupts hv injects;
//! - [`DeviceModel`], in the device-model process (qemu-dm's role, §2.1): a
//!   loop that waits on its doorbell and its backend (a TAP), serves each
//!   request with a [`DeviceHandler`], and drives the guest's interrupt
//!   lines, either as wires hv's vPIC samples or through its own 8259A pair
//!   (§5.1). Its backend is event-driven or polled on a timer (§5.3).
//!
//! Nothing is allocated per request.

#![forbid(unsafe_code)]

use abi::ioreq::{
    Ioreq, STATE_IOREQ_INPROCESS, STATE_IOREQ_NONE, STATE_IOREQ_READY, STATE_IORESP_READY,
};
use abi::SharedMemory;
use emul::{DualPic, IoWidth, PortIo};
use hypercall::ioreq::{self, dm, put_u64, vcpu, ExitResult, Placement, RxMode, SEQ24};
pub use hypercall::ioreq::{DmFds, VcpuFds};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use sys::{poll_readable_few, rdtsc, Doorbell, Mapping};
use thiserror::Error;
pub use upcall::DmWake;
use upcall::Upcall;

mod upcall;

/// How long a guest waits for hv to resume it before giving up on an exit.
pub const GUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an exit failed, as the guest sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ExitError {
    #[error("hv refused the I/O request as malformed")]
    Refused,
    #[error("the device model did not answer in time")]
    DmTimeout,
    #[error("the device model is still busy with an earlier request")]
    DmBusy,
    #[error("hv did not resume the vcpu within {0:?}")]
    HvTimeout(Duration),
    #[error("the doorbell to hv failed")]
    Doorbell,
}

/// A guest vcpu's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VcpuStats {
    /// Exits completed (successfully or not).
    pub exits: u64,
    /// Exits that failed.
    pub errors: u64,
    /// Sum of round trips, probe 1 to probe 10, in TSC cycles.
    pub round_trip_cycles: u64,
    /// Interrupts taken.
    pub interrupts: u64,
}

/// A guest vcpu whose port I/O traps to hv.
#[derive(Debug)]
pub struct HvmVcpu {
    page: Mapping,
    kick: Doorbell,
    done: Doorbell,
    irq: Doorbell,
    seq: u32,
    last_done: u64,
    taken: u32,
    timeout: Duration,
    stats: VcpuStats,
    last_error: Option<ExitError>,
}

impl HvmVcpu {
    /// Maps the vcpu page and takes the doorbells.
    pub fn new(fds: VcpuFds) -> io::Result<HvmVcpu> {
        let page = Mapping::new(fds.page.as_fd(), 0, ioreq::PAGE_LEN, true)?;
        // A vcpu (re)starting takes nothing injected before it: it
        // acknowledges it, so hv's next injection is not held back.
        let taken = page.load_u32(vcpu::INJECT) >> 8 & SEQ24;
        page.store_u32(vcpu::INJECT_ACK, taken);
        Ok(HvmVcpu {
            taken,
            page,
            kick: Doorbell::from_fd(fds.kick),
            done: Doorbell::from_fd(fds.done),
            irq: Doorbell::from_fd(fds.irq),
            seq: 0,
            last_done: 0,
            timeout: GUEST_TIMEOUT,
            stats: VcpuStats::default(),
            last_error: None,
        })
    }

    /// How long an exit may take before it fails with
    /// [`ExitError::HvTimeout`].
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Counters so far.
    pub fn stats(&self) -> VcpuStats {
        self.stats
    }

    /// The error of the last failed access made through [`PortIo`] (which
    /// cannot return one), if any.
    pub fn last_error(&self) -> Option<ExitError> {
        self.last_error
    }

    /// One I/O exit: writes the request, rings hv, waits to be resumed.
    /// Returns what an IN read (0 for an OUT).
    pub fn exit(
        &mut self,
        port: u16,
        width: IoWidth,
        write: bool,
        value: u32,
    ) -> Result<u32, ExitError> {
        let t1 = rdtsc(); // probe 1: before the guest's access
        self.seq = self.seq.wrapping_add(1);
        let a = ioreq::PortAccess {
            port,
            width,
            write,
            value: if write { value & width.all_ones() } else { 0 },
        };
        let p = &self.page;
        p.write_u32(vcpu::SEQ, self.seq);
        put_u64(p, vcpu::T_ISSUE, t1);
        put_u64(p, vcpu::PREV_DONE, self.last_done);
        ioreq::to_ioreq(&a, STATE_IOREQ_READY).store(p, vcpu::SLOT);
        let r = self.wait_completion();
        let t10 = rdtsc(); // probe 10: the access completed
        self.last_done = t10;
        self.stats.exits += 1;
        self.stats.round_trip_cycles += t10.saturating_sub(t1);
        if let Err(e) = r {
            self.stats.errors += 1;
            self.last_error = Some(e);
        }
        r.map(|d| if write { 0 } else { d & width.all_ones() })
    }

    fn wait_completion(&mut self) -> Result<u32, ExitError> {
        self.kick.ring().map_err(|_| ExitError::Doorbell)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let p = &self.page;
            if ioreq::state(p, vcpu::SLOT) == STATE_IORESP_READY
                && p.read_u32(vcpu::RESP_SEQ) == self.seq
            {
                let data = Ioreq::load(p, vcpu::SLOT).data as u32;
                let result = ExitResult::from_code(p.read_u32(vcpu::RESULT));
                ioreq::set_state(p, vcpu::SLOT, STATE_IOREQ_NONE);
                return match result {
                    ExitResult::Ok => Ok(data),
                    ExitResult::Refused => Err(ExitError::Refused),
                    ExitResult::DmTimeout => Err(ExitError::DmTimeout),
                    ExitResult::DmBusy => Err(ExitError::DmBusy),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ExitError::HvTimeout(self.timeout));
            }
            poll_readable_few(&[self.done.as_fd()], Some(left)).map_err(|_| ExitError::Doorbell)?;
            let _ = self.done.drain();
        }
    }

    /// Takes the interrupt hv injected, if there is a new one: the vector
    /// for the guest's interrupt entry. Call with interrupts enabled, between
    /// instructions (after an access, or when woken on [`HvmVcpu::irq_fd`]).
    pub fn take_interrupt(&mut self) -> Option<u8> {
        let w = self.page.load_u32(vcpu::INJECT);
        let seq = w >> 8 & SEQ24;
        if seq == self.taken {
            return None;
        }
        self.taken = seq;
        self.page.store_u32(vcpu::INJECT_ACK, seq);
        self.stats.interrupts += 1;
        Some(w as u8)
    }

    /// Waits up to `timeout` for an injected interrupt and takes it.
    pub fn wait_interrupt(&mut self, timeout: Duration) -> Option<u8> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.take_interrupt() {
                return Some(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            if poll_readable_few(&[self.irq.as_fd()], Some(left)).is_err() {
                return None;
            }
            let _ = self.irq.drain();
        }
    }

    /// Readable when hv injected an interrupt (for the guest's event loop).
    pub fn irq_fd(&self) -> BorrowedFd<'_> {
        self.irq.as_fd()
    }

    /// Clears [`HvmVcpu::irq_fd`]'s readiness once the event loop woke on it
    /// (the interrupt itself stays for [`HvmVcpu::take_interrupt`]).
    pub fn drain_irq(&self) {
        let _ = self.irq.drain();
    }

    /// The vcpu page, for tests that play a hostile guest.
    pub fn raw_page(&self) -> &Mapping {
        &self.page
    }

    /// Rings hv without writing an exit, for tests that play a hostile guest.
    pub fn raw_kick(&self) -> io::Result<()> {
        self.kick.ring()
    }

    /// Waits for hv's next completion ring, for tests that play a hostile guest.
    pub fn raw_wait_done(&self, timeout: Duration) -> io::Result<u64> {
        self.done.wait(Some(timeout))
    }
}

impl PortIo for HvmVcpu {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        // The bus floats high when nothing answered.
        self.exit(port, width, false, 0)
            .unwrap_or_else(|_| width.all_ones())
    }
    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        let _ = self.exit(port, width, true, value);
    }
}

/// A device's registers, as the device model serves them.
pub trait DeviceHandler {
    /// An IN.
    fn io_read(&mut self, port: u16, width: IoWidth) -> u32;
    /// An OUT.
    fn io_write(&mut self, port: u16, width: IoWidth, value: u32);
    /// The interrupt lines' levels, bit per IRQ (0–15).
    fn irq_lines(&self) -> u16;
    /// The backend has input (event-driven), or a poll tick came: take what
    /// is there without blocking. Returns false when the backend is gone (it
    /// is not watched any more).
    fn backend(&mut self) -> bool {
        true
    }
}

/// Where a device model's NIC gets frames from the outside: a TAP (without
/// vnet headers), or anything else that reads one frame without blocking.
pub trait FrameSource {
    /// One frame into `buf`; `Ok(None)` when nothing is queued.
    fn recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
}

impl FrameSource for sys::Tap {
    fn recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.recv(buf)
    }
}

impl FrameSource for std::sync::Arc<sys::Tap> {
    fn recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.recv(buf)
    }
}

impl FrameSource for std::os::unix::net::UnixDatagram {
    /// The socket must be non-blocking.
    fn recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.recv(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Frames one backend wake-up takes at most, so a flooding wire cannot keep
/// the device model from its requests.
pub const BACKEND_BATCH: usize = 64;

/// The PCnet as a device model serves it: `emul::Pcnet` at I/O `base`, its
/// INTA output on line `irq`, frames from `source` (transmitted frames go
/// to the NIC's own sink).
pub struct NicDevice<M, S, R> {
    pub nic: emul::Pcnet<M, S>,
    base: u16,
    irq: u8,
    source: R,
    buf: Box<[u8]>,
}

impl<M: SharedMemory, S: emul::FrameSink, R: FrameSource> NicDevice<M, S, R> {
    /// Wires `nic` at `base` on IRQ `irq` (0..=15), fed by `source`.
    pub fn new(nic: emul::Pcnet<M, S>, base: u16, irq: u8, source: R) -> Self {
        NicDevice {
            nic,
            base,
            irq: irq & 15,
            source,
            buf: vec![0u8; 2048].into_boxed_slice(),
        }
    }

    fn offset(&self, port: u16) -> Option<u16> {
        let off = port.wrapping_sub(self.base);
        (off < emul::pcnet::regs::port::SIZE).then_some(off)
    }
}

impl<M: SharedMemory, S: emul::FrameSink, R: FrameSource> DeviceHandler for NicDevice<M, S, R> {
    fn io_read(&mut self, port: u16, width: IoWidth) -> u32 {
        match self.offset(port) {
            Some(o) => self.nic.io_read(o, width),
            None => width.all_ones(), // nothing there: the bus floats high
        }
    }
    fn io_write(&mut self, port: u16, width: IoWidth, value: u32) {
        if let Some(o) = self.offset(port) {
            self.nic.io_write(o, width, value);
        }
    }
    fn irq_lines(&self) -> u16 {
        u16::from(self.nic.irq_level()) << self.irq
    }
    fn backend(&mut self) -> bool {
        for _ in 0..BACKEND_BATCH {
            match self.source.recv_frame(&mut self.buf) {
                Ok(Some(n)) => {
                    self.nic.receive(&self.buf[..n.min(self.buf.len())]);
                }
                Ok(None) => break,
                Err(_) => return false,
            }
        }
        true
    }
}

/// How the device model runs. Where the PIC pair lives is hv's choice,
/// read from the ioreq page: with [`Placement::Dm`] this device model
/// emulates it and raises vectors; with [`Placement::Hv`] it only drives
/// wires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmConfig {
    /// How the backend is watched.
    pub rx: RxMode,
    /// How hv's notifications reach the device model.
    pub wake: DmWake,
}

/// A device model's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmStats {
    /// Requests served.
    pub requests: u64,
    /// Of those, PIC accesses served by this device model's PIC.
    pub pic_requests: u64,
    /// Notifications with no READY request (or a malformed one).
    pub spurious: u64,
    /// Backend wake-ups (event-driven) that found it readable.
    pub backend_events: u64,
    /// Poll ticks (polling).
    pub ticks: u64,
    /// Wire changes published (vPIC in hv).
    pub wire_changes: u64,
    /// Vectors raised to hv (vPIC in the device model).
    pub vectors: u64,
    /// Requests that reached it through dom0's upcall handler
    /// ([`DmWake::Upcall`]).
    pub upcalls: u64,
}

/// The device-model end of the ioreq page.
#[derive(Debug)]
pub struct DeviceModel {
    page: Mapping,
    kick: Doorbell,
    done: Doorbell,
    cfg: DmConfig,
    placement: Placement,
    pic: DualPic,
    lines: u16,
    vec_seq: u32,
    stats: DmStats,
    /// dom0's upcall handler ([`DmWake::Upcall`]).
    upcall: Option<Upcall>,
}

impl DeviceModel {
    /// Maps the ioreq page and takes the doorbells.
    pub fn new(fds: DmFds, cfg: DmConfig) -> io::Result<DeviceModel> {
        let page = Mapping::new(fds.page.as_fd(), 0, ioreq::PAGE_LEN, true)?;
        let placement = if page.load_u32(dm::CONFIG) & dm::CONFIG_PIC_IN_DM != 0 {
            Placement::Dm
        } else {
            Placement::Hv
        };
        let kick = Doorbell::from_fd(fds.kick);
        let upcall = match cfg.wake {
            DmWake::Direct => None,
            DmWake::Upcall => Some(Upcall::new(kick.try_clone()?)?),
        };
        Ok(DeviceModel {
            placement,
            vec_seq: page.load_u32(dm::VECTOR) >> 8 & SEQ24,
            page,
            kick,
            upcall,
            done: Doorbell::from_fd(fds.done),
            cfg,
            pic: DualPic::new(),
            lines: 0,
            stats: DmStats::default(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> DmStats {
        self.stats
    }

    /// Where hv placed the PIC pair.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The PIC pair (meaningful with [`Placement::Dm`]).
    pub fn pic(&self) -> &DualPic {
        &self.pic
    }

    /// The ioreq page, for tests that play a hostile device model.
    pub fn raw_page(&self) -> &Mapping {
        &self.page
    }

    /// Rings hv, for tests that play a hostile device model.
    pub fn raw_ring(&self) -> io::Result<()> {
        self.done.ring()
    }

    /// Serves the request in the slot if one is READY: probes 5 (`woken`)
    /// and 6 (`drained`) were taken by the caller, and 7 too when given
    /// (`ran`: the device model woke after dom0's upcall handler), otherwise
    /// here at the handler's start; 8 here. Publishes interrupt changes
    /// before the answer, so hv sees them when it resumes the guest
    /// (§5.1.1), then rings hv. Returns whether a request was served.
    pub fn serve<H: DeviceHandler>(
        &mut self,
        h: &mut H,
        woken: u64,
        drained: u64,
        ran: Option<u64>,
    ) -> bool {
        let p = &self.page;
        let r = Ioreq::load(p, dm::SLOT);
        let access = match (r.state, ioreq::validate(&r)) {
            (STATE_IOREQ_READY, Ok(a)) => a,
            _ => {
                self.stats.spurious += 1;
                return false;
            }
        };
        ioreq::set_state(p, dm::SLOT, STATE_IOREQ_INPROCESS);
        let t7 = ran.unwrap_or_else(rdtsc); // probe 7: the device model runs
        let pic_port = self.placement == Placement::Dm
            && access.width == IoWidth::Byte
            && DualPic::claims(access.port);
        let mut data = 0;
        if pic_port {
            self.stats.pic_requests += 1;
            if access.write {
                self.pic.write_port(access.port, access.value as u8);
            } else {
                data = u32::from(self.pic.read_port(access.port).unwrap_or(0xff));
            }
        } else if access.write {
            h.io_write(access.port, access.width, access.value);
        } else {
            data = h.io_read(access.port, access.width) & access.width.all_ones();
        }
        self.stats.requests += 1;
        self.sync_irq(h);
        let t8 = rdtsc(); // probe 8: emulation done
        let p = &self.page;
        put_u64(p, dm::T_WOKEN, woken);
        put_u64(p, dm::T_DRAINED, drained);
        put_u64(p, dm::T_HANDLER, t7);
        put_u64(p, dm::T_DONE, t8);
        let answer = Ioreq {
            data: u64::from(data),
            ..ioreq::to_ioreq(&access, STATE_IORESP_READY)
        };
        answer.store(p, dm::SLOT);
        let _ = self.done.ring();
        true
    }

    /// Takes a notification and serves the request: woken directly by hv,
    /// the wake-up is probe 5 and taking it probe 6; woken by dom0's upcall
    /// handler, those are the handler's, and the wake-up is probe 7.
    fn notified<H: DeviceHandler>(&mut self, h: &mut H, woken: u64) -> io::Result<()> {
        match &self.upcall {
            Some(u) => {
                let (t5, t6) = u.take()?;
                if self.serve(h, t5, t6, Some(woken)) {
                    self.stats.upcalls += 1;
                }
            }
            None => {
                let _ = self.kick.drain();
                let drained = rdtsc(); // probe 6: the notification is taken
                self.serve(h, woken, drained, None);
            }
        }
        Ok(())
    }

    /// Propagates the handler's interrupt lines: as wires for hv's vPIC, or
    /// into this device model's PIC, raising a vector when its INT output is
    /// up and hv took the previous one. Returns whether hv must be told.
    pub fn sync_irq<H: DeviceHandler>(&mut self, h: &H) -> bool {
        let lines = h.irq_lines();
        let changed = lines ^ self.lines;
        self.lines = lines;
        match self.placement {
            Placement::Hv => {
                if changed != 0 {
                    self.page.store_u32(dm::WIRES, u32::from(lines));
                    self.stats.wire_changes += 1;
                }
                changed != 0
            }
            Placement::Dm => {
                for irq in 0..16u8 {
                    if changed & (1 << irq) != 0 {
                        self.pic.set_irq(irq, lines & (1 << irq) != 0);
                    }
                }
                let hv_took = self.page.load_u32(dm::VECTOR_ACK) & SEQ24 == self.vec_seq;
                if self.pic.int_output() && hv_took {
                    let v = self.pic.inta();
                    self.vec_seq = (self.vec_seq + 1) & SEQ24;
                    self.page
                        .store_u32(dm::VECTOR, self.vec_seq << 8 | u32::from(v));
                    self.stats.vectors += 1;
                    return true;
                }
                false
            }
        }
    }

    /// Serves requests as they come and the backend per [`DmConfig::rx`]
    /// until `stop` is readable (returns `Ok(true)`) or `max_wakeups`
    /// wake-ups passed (`Ok(false)`). Without a backend only requests wake
    /// it (and ticks, when polling).
    pub fn run<H: DeviceHandler>(
        &mut self,
        h: &mut H,
        backend: Option<BorrowedFd<'_>>,
        stop: BorrowedFd<'_>,
        max_wakeups: u64,
    ) -> io::Result<bool> {
        let period = match self.cfg.rx {
            RxMode::EventDriven => None,
            RxMode::Polling { period_us } => Some(Duration::from_micros(period_us.max(1))),
        };
        if let Some(u) = &mut self.upcall {
            u.start()?;
        }
        let mut backend = backend;
        let mut next_tick = period.map(|p| Instant::now() + p);
        for _ in 0..max_wakeups {
            let timeout = next_tick.map(|t| t.saturating_duration_since(Instant::now()));
            // Polling: the backend is looked at on ticks only, never watched.
            let watched = backend.filter(|_| period.is_none());
            let n = if watched.is_some() { 3 } else { 2 };
            let notify = match &self.upcall {
                Some(u) => u.fd(),
                None => self.kick.as_fd(),
            };
            let fds = [notify, stop, watched.unwrap_or(stop)];
            let ready = poll_readable_few(&fds[..n], timeout)?;
            let woken = rdtsc(); // the device model runs again
            if ready & 0b010 != 0 {
                return Ok(true);
            }
            let mut tell_hv = false;
            if ready & 0b001 != 0 {
                self.notified(h, woken)?;
            }
            if ready & 0b100 != 0 {
                self.stats.backend_events += 1;
                if !h.backend() {
                    backend = None;
                }
                tell_hv |= self.sync_irq(h);
            }
            if let (Some(p), Some(t)) = (period, next_tick) {
                let now = Instant::now();
                if now >= t {
                    self.stats.ticks += 1;
                    h.backend();
                    tell_hv |= self.sync_irq(h);
                    // A late tick does not make the next ones come faster.
                    let next = t + p;
                    next_tick = Some(if next <= now { now + p } else { next });
                }
            }
            if tell_hv {
                let _ = self.done.ring();
            }
        }
        Ok(false)
    }
}
