//! The processes of an HVM guest's NIC (Zhang & Dong): the guest domain,
//! whose port accesses are I/O exits to hv (`hosted::guest`'s loop over an
//! [`HvmVcpu`]), and the device model hv starts in the driver domain's
//! namespace (qemu-dm's role): the PCnet over the guest's memory and a TAP
//! the driver domain bridges, served by `hvm::DeviceModel`.

use anyhow::{anyhow, Context, Result};
use emul::pcnet::regs::port;
use emul::{GuestMemory, IoWidth, Pcnet, PcnetConfig, PortIo, NIC_IO_BASE, NIC_IRQ};
use hosted::guest::VmWorld;
use hvm::{DeviceModel, DmConfig, DmWake, ExitError, HvmVcpu, NicDevice};
use hypercall::ioreq::RxMode;
use hypercall::{DomId, HvClient};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::{rdtsc, SeqPacket, Tap};

/// How long the device model may leave every exit to the NIC unanswered
/// (each waits hv's `dm_timeout`) before the guest gives up on it. Under
/// Xen a vcpu waits on its device model for as long as it takes (Zhang &
/// Dong §4.2); here a slow one (on a loaded host) is waited out the same
/// way, and only one silent this long counts as gone.
const DM_SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// A silence counts only while it lasts: the latest unanswered exit must
/// be this recent (a guest idle since a short stall is not failing).
const DM_SILENCE_RECENT: Duration = Duration::from_secs(3);
/// The NIC's ports, whose exits only the device model answers.
const NIC_PORTS: std::ops::Range<u16> = NIC_IO_BASE..NIC_IO_BASE + 0x20;
/// How many times the guest asks before the device model first answers
/// (it starts after the guest; each unanswered try takes hv's timeout).
const DM_START_TRIES: u32 = 30;

/// Closes everything the device model did not inherit on purpose.
pub fn close_stray_fds() {
    sys::close_inherited_fds(&crate::hosted::env_fds(hypercall::launch::ENV_HVM_DM_FD));
}

/// The guest CPU's world on an HVM vcpu: every port access is an I/O exit
/// to hv (which serves the PIC there or forwards it, like the NIC's, to the
/// device model); interrupts are what hv injects at resume.
struct HvmWorld {
    cpu: HvmVcpu,
    /// Since when the device model has answered no exit to the NIC (None:
    /// it answered the last NIC exit).
    silent_since: Option<Instant>,
    /// When an exit to the NIC last went unanswered.
    last_unanswered: Instant,
    failure: Option<String>,
    halts: u64,
    halt_cycles: u64,
    failed_exits: u64,
    timer: Option<Timer>,
}

/// The guest kernel's periodic timer interrupt (`hvm_timer_hz`): due every
/// `period`, taken between the guest's other work and while it halts.
struct Timer {
    period: Duration,
    next: Instant,
    /// The guest's driver has set its PIC up (the main loop runs): before
    /// that, as with Linux's interrupts off during `init_8259A`, no tick.
    armed: bool,
    /// Inside the handler: its own port accesses do not take the timer.
    running: bool,
    interrupts: u64,
}

/// The master PIC's command and data (IMR) ports, and a specific EOI for
/// IRQ 0.
const PIC_CMD: u16 = 0x20;
const PIC_IMR: u16 = 0x21;
const EOI_IRQ0: u32 = 0x60;

impl HvmWorld {
    fn new(cpu: HvmVcpu, timer_hz: u32) -> HvmWorld {
        let timer = (timer_hz > 0).then(|| {
            let period = Duration::from_secs(1) / timer_hz;
            Timer {
                period,
                next: Instant::now() + period,
                armed: false,
                running: false,
                interrupts: 0,
            }
        });
        HvmWorld {
            cpu,
            silent_since: None,
            last_unanswered: Instant::now(),
            failure: None,
            halts: 0,
            halt_cycles: 0,
            failed_exits: 0,
            timer,
        }
    }

    /// Runs the timer's handler if a tick is due (one per call: a guest
    /// that fell behind loses the ticks it missed, as a kernel loses
    /// jiffies, and the next comes a period later).
    fn timer_due(&mut self) {
        let Some(t) = &mut self.timer else { return };
        let now = Instant::now();
        if !t.armed || t.running || now < t.next {
            return;
        }
        t.running = true;
        let next = t.next + t.period;
        t.next = if next <= now { now + t.period } else { next };
        let taken = self.timer_handler().is_ok();
        if let Some(t) = &mut self.timer {
            t.running = false;
            t.interrupts += u64::from(taken);
        }
    }

    /// The timer interrupt handler's PIC accesses, Linux 2.6's for IRQ 0
    /// (Zhang & Dong §5.1, Table 4): `mask_and_ack_8259A` reads the IMR (a
    /// dummy read), writes it with the line masked and sends a specific
    /// EOI; `end_8259A_irq` writes the IMR again to unmask it. An access
    /// that fails ends the handler, so a read that returned nothing is
    /// never written back as a mask.
    fn timer_handler(&mut self) -> Result<(), ExitError> {
        let imr = self.try_exit(PIC_IMR, IoWidth::Byte, false, 0)?;
        self.try_exit(PIC_IMR, IoWidth::Byte, true, imr | 1)?;
        self.try_exit(PIC_CMD, IoWidth::Byte, true, EOI_IRQ0)?;
        self.try_exit(PIC_IMR, IoWidth::Byte, true, imr)?;
        Ok(())
    }

    /// Arms the timer: the guest's loop runs, its PIC is set up.
    fn arm_timer(&mut self) {
        if let Some(t) = &mut self.timer {
            t.armed = true;
        }
    }

    /// How long a halt may last: until `timeout` or the next tick.
    fn halt_limit(&self, timeout: Duration) -> Duration {
        self.timer.as_ref().map_or(timeout, |t| {
            timeout.min(t.next.saturating_duration_since(Instant::now()))
        })
    }

    /// A port access (after a tick, if one is due); all ones when it failed,
    /// as a bus nobody answers.
    fn exit(&mut self, port: u16, width: IoWidth, write: bool, value: u32) -> u32 {
        self.timer_due();
        self.try_exit(port, width, write, value)
            .unwrap_or_else(|_| width.all_ones())
    }

    /// One I/O exit, its failures counted (a device model that stays silent
    /// fails the guest).
    fn try_exit(
        &mut self,
        port: u16,
        width: IoWidth,
        write: bool,
        value: u32,
    ) -> Result<u32, ExitError> {
        let t0 = Instant::now();
        let nic = NIC_PORTS.contains(&port);
        match self.cpu.exit(port, width, write, value) {
            Ok(v) => {
                if nic {
                    self.silent_since = None;
                }
                Ok(v)
            }
            Err(e) => {
                self.failed_exits += 1;
                match e {
                    // Still busy with an earlier request is as silent.
                    ExitError::DmTimeout | ExitError::DmBusy if nic => self.unanswered(t0),
                    ExitError::DmTimeout | ExitError::DmBusy => {}
                    ExitError::HvTimeout(_) | ExitError::Doorbell => {
                        self.failure = Some(e.to_string());
                    }
                    ExitError::Refused => {}
                }
                Err(e)
            }
        }
    }

    /// An exit to the NIC made at `t0` went unanswered: a silence starts
    /// there unless one is under way (an earlier unanswered exit less than
    /// [`DM_SILENCE_RECENT`] ago, and no answer since).
    fn unanswered(&mut self, t0: Instant) {
        if self.last_unanswered.elapsed() >= DM_SILENCE_RECENT {
            self.silent_since = None;
        }
        self.silent_since.get_or_insert(t0);
        self.last_unanswered = Instant::now();
    }

    /// Waits for the device model to answer a first NIC access (it starts
    /// after the guest), so the driver's probe finds the chip.
    fn wait_device_model(&mut self) -> Result<()> {
        for _ in 0..DM_START_TRIES {
            match self
                .cpu
                .exit(NIC_IO_BASE + port::RAP, IoWidth::Word, false, 0)
            {
                Ok(_) => return Ok(()),
                Err(ExitError::DmTimeout) => {}
                Err(ExitError::DmBusy) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => return Err(anyhow!("the first exit: {e}")),
            }
        }
        Err(anyhow!(
            "the device model did not answer after {DM_START_TRIES} tries"
        ))
    }
}

impl PortIo for HvmWorld {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        self.exit(port, width, false, 0)
    }
    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        self.exit(port, width, true, value);
    }
}

impl VmWorld for HvmWorld {
    fn acknowledge_interrupt(&mut self) -> Option<u8> {
        self.cpu.take_interrupt()
    }

    /// HLT: the vcpu sleeps until hv injects an interrupt or the guest
    /// kernel has a frame (`fds`).
    fn halt(&mut self, fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()> {
        self.arm_timer();
        let irq = self.cpu.irq_fd();
        let mut all = [irq; 8];
        let n = fds.len().min(all.len() - 1);
        all[1..=n].copy_from_slice(&fds[..n]);
        let t0 = rdtsc();
        let ready = sys::poll_readable_few(&all[..=n], Some(self.halt_limit(timeout)))?;
        self.halts += 1;
        self.halt_cycles += rdtsc().saturating_sub(t0);
        if ready & 1 != 0 {
            self.cpu.drain_irq();
        }
        self.timer_due();
        Ok(())
    }

    /// Nothing is held back: TDMD transmits in the device model at once.
    fn flush(&mut self) {}

    /// The loop's tick: the guest runs, so its timer may fire.
    fn tick(&mut self) {
        self.arm_timer();
        self.timer_due();
    }

    /// hv or the doorbell failed, or the device model has been silent for
    /// [`DM_SILENCE_LIMIT`] and still is (checked here, not only at an
    /// exit, so a guest that waits on a full ring notices too).
    fn failure(&self) -> Option<String> {
        let silent = self
            .silent_since
            .map(|t| t.elapsed())
            .filter(|d| *d >= DM_SILENCE_LIMIT)
            .filter(|_| self.last_unanswered.elapsed() < DM_SILENCE_RECENT);
        self.failure.clone().or_else(|| {
            silent.map(|d| format!("the device model answered no exit for {} s", d.as_secs()))
        })
    }

    fn stats(&self) -> serde_json::Value {
        let s = self.cpu.stats();
        serde_json::json!({
            "vcpu": {
                "exits": s.exits,
                "failed_exits": self.failed_exits,
                "round_trip_mean_cycles": s.round_trip_cycles.checked_div(s.exits).unwrap_or(0),
                "interrupts": s.interrupts,
                "halts": self.halts,
                "halt_cycles": self.halt_cycles,
                "timer_interrupts": self.timer.as_ref().map_or(0, |t| t.interrupts),
            }
        })
    }
}

/// A guest with an HVM NIC: the pcnet32-like driver on a vcpu whose port
/// accesses exit to hv, serving TAP `eth0`, until hv or the device model
/// goes away.
pub fn guest(hv: &mut HvClient, home: &str) -> Result<()> {
    let fds = hv.hvm_vcpu().map_err(|e| anyhow!("HvmVcpu: {e}"))?;
    let cpu = HvmVcpu::new(fds).context("mapping the vcpu page")?;
    let (tap, _mac) = crate::hosted::guest_eth0(hv, home)?;
    let mem = GuestMemory::new(hv.pool_shared());
    let timer_hz = match hv.store_read_str(&format!("{home}/splitnet/hvm-timer-hz")) {
        Ok(s) => s
            .parse()
            .with_context(|| format!("hvm-timer-hz in the store: {s:?}"))?,
        Err(_) => 0,
    };
    let mut world = HvmWorld::new(cpu, timer_hz);
    world.wait_device_model()?;
    eprintln!("hvm: vcpu up, the device model answers");
    crate::hosted::run_guest(hv, home, &mut world, &mem, &tap).map_err(|e| anyhow!("HVM NIC: {e}"))
}

/// The device model of HVM guest `guest` (domain `guest_id`): takes the
/// ioreq page and the guest's memory from hv on the connection it
/// inherited, creates its TAP here (the driver domain's namespace), drops
/// its privileges, and serves the guest's I/O requests until hv hangs up.
/// `poll_us` 0: event-driven receive; otherwise the polling period.
pub fn device_model(
    guest: &str,
    guest_id: DomId,
    tap: &str,
    mac: &str,
    poll_us: u32,
    wake: DmWake,
) -> Result<()> {
    let fd = crate::hosted::take_fds(hypercall::launch::ENV_HVM_DM_FD, 1)?
        .pop()
        .expect("one");
    let mut chan = hypercall::client::Channel::new(SeqPacket::from_fd(fd));
    let (fds, mem) = chan
        .hvm_device_model(guest_id)
        .map_err(|e| anyhow!("HvmDeviceModel for {guest}: {e}"))?;
    let mac = abi::xenbus::parse_mac(mac).map_err(|e| anyhow!("--mac: {e}"))?;
    let tap_dev = Arc::new(Tap::create(tap, false)?);
    crate::hosted::run_ip(&["link", "set", tap, "mtu", "1500", "up"])?;
    let out = tap_dev.clone();
    let nic = Pcnet::new(
        GuestMemory::new(mem),
        move |f: &[u8]| {
            // A full TAP drops the frame, as a wire would.
            let _ = out.send(&[f]);
        },
        PcnetConfig {
            mac,
            transmit_on_demand: true,
        },
    );
    let mut dev = NicDevice::new(nic, NIC_IO_BASE, NIC_IRQ, tap_dev.clone());
    let rx = match poll_us {
        0 => RxMode::EventDriven,
        us => RxMode::Polling {
            period_us: u64::from(us),
        },
    };
    let mut dm = DeviceModel::new(fds, DmConfig { rx, wake }).context("mapping the ioreq page")?;
    // Confined before reading a byte from the guest.
    jail::enter(jail::Role::VmApp).map_err(|e| anyhow!("device model of {guest}: {e}"))?;
    eprintln!(
        "device model {guest}: serving on {tap} (PIC in {:?}, receive {rx:?}, woken {wake:?})",
        dm.placement()
    );
    let stop = chan.socket().as_fd();
    // Bounded runs; hv hanging up (or the guest's cgroup going) ends it.
    while !dm.run(&mut dev, Some(tap_dev.as_fd()), stop, 1 << 20)? {}
    eprintln!(
        "device model {guest}: hv hung up; counters {:?}",
        dm.stats()
    );
    Ok(())
}
