//! The guest's side of an emulated NIC, shared by the hosted and HVM kinds:
//! the `pcnet32`-like driver and the i8259 interrupt path from
//! [`emul::driver`] serving a TAP `eth0` in the guest's namespace, so the
//! guest kernel's stack and unmodified applications use the NIC.
//!
//! The loop is the guest CPU: it copies frames the guest kernel sends into
//! transmit descriptors, takes interrupts between "instructions" (each
//! frame), writes received frames to the TAP from the interrupt handler,
//! and halts when there is nothing to do. Where a port access goes (served
//! in this process, or a trap to another world) is the [`VmWorld`]'s
//! business.

use emul::driver::{DriverConfig, GuestPic, Pcnet32, TxError, BUF_SIZE};
use emul::{GuestMemory, PortIo, NIC_IO_BASE, NIC_IRQ};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use sys::Tap;

/// Guest-physical address of the driver's rings, init block and buffers.
pub const DRIVER_AREA: u64 = 0x1_0000;
/// Frames taken from the TAP per pass, so interrupts and halts get their turn.
const TX_BUDGET: usize = 32;
/// Interrupts taken per pass at most (a NIC that keeps INTA up cannot hold the loop).
const IRQ_BUDGET: usize = 8;
/// The guest's timer tick: held frames never wait longer (Sugerman §3.3).
pub const TICK: Duration = Duration::from_millis(10);
/// How often the loop reports its counters.
const STATS_EVERY: Duration = Duration::from_secs(1);
/// How long the TX ring may stay full before the driver demands
/// transmission again: a device side that stalled while a demand was made
/// missed it, and would otherwise never send the ring's frames.
const TX_TIMEOUT: Duration = Duration::from_secs(1);

/// A world the guest's port accesses and interrupts come from.
pub trait VmWorld: PortIo {
    /// The CPU's INTA cycle: the vector of a pending interrupt, if any.
    fn acknowledge_interrupt(&mut self) -> Option<u8>;
    /// The guest is idle: give the CPU away until the device side has
    /// something for the guest, one of `fds` is readable, or `timeout`.
    fn halt(&mut self, fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()>;
    /// The guest's transmit ring filled: send whatever is held back.
    fn flush(&mut self);
    /// A timer tick.
    fn tick(&mut self);
    /// Why the device side can no longer be reached, if it cannot.
    fn failure(&self) -> Option<String>;
    /// Counters, for status.
    fn stats(&self) -> serde_json::Value;
}

/// Why the guest loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("the guest driver: {0}")]
    Driver(#[from] emul::driver::DriverError),
    #[error("the device side: {0}")]
    World(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Host(String),
}

/// Counters of the guest's side.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GuestCounters {
    /// Frames the guest kernel sent (read from the TAP).
    pub tap_tx: u64,
    /// Frames delivered to the guest kernel (written to the TAP).
    pub tap_rx: u64,
    /// Frames the TAP refused.
    pub tap_rx_dropped: u64,
    /// Interrupts taken.
    pub irqs: u64,
    /// Halts.
    pub halts: u64,
}

fn driver_json(d: &emul::driver::DriverStats) -> serde_json::Value {
    serde_json::json!({
        "tx_packets": d.tx_packets, "tx_errors": d.tx_errors,
        "rx_packets": d.rx_packets, "rx_errors": d.rx_errors,
        "missed": d.missed, "mem_errors": d.mem_errors, "interrupts": d.interrupts,
    })
}

/// Runs the guest over `world` with its memory `mem` and its TAP: probe and
/// open the NIC, then serve the TAP until the world fails or `host`
/// returns an error. `host` is called at least once a second and whenever
/// `watch` is readable (the caller's own events), with the counters.
pub fn run<W: VmWorld, M: abi::SharedMemory>(
    world: &mut W,
    mem: &GuestMemory<M>,
    tap: &Tap,
    watch: BorrowedFd<'_>,
    host: &mut dyn FnMut(&serde_json::Value) -> Result<(), String>,
) -> Result<(), GuestError> {
    let (mut pic, mut drv) = bring_up(world, mem)?;
    let mut c = GuestCounters::default();
    let mut buf = vec![0u8; BUF_SIZE].into_boxed_slice();
    let mut pending: Option<usize> = None;
    let mut full_since: Option<Instant> = None;
    let mut last_tick = Instant::now();
    let mut last_stats = Instant::now();
    loop {
        if let Some(e) = world.failure() {
            return Err(GuestError::World(e));
        }
        let mut worked = false;
        for _ in 0..TX_BUDGET {
            let n = match pending {
                Some(n) => n,
                None => match tap.recv(&mut buf)? {
                    Some(n) => {
                        c.tap_tx += 1;
                        n
                    }
                    None => break,
                },
            };
            match drv.transmit(world, mem, &buf[..n]) {
                Ok(()) => (pending, full_since) = (None, None),
                Err(TxError::RingFull) => {
                    pending = Some(n);
                    tx_watchdog(world, &drv, &mut full_since);
                    world.flush();
                    take_interrupts(world, &mut pic, &mut drv, mem, tap, &mut c);
                    break;
                }
                Err(TxError::BadLength(_)) => pending = None,
                Err(TxError::Memory(e)) => return Err(GuestError::World(e.to_string())),
            }
            worked = true;
            take_interrupts(world, &mut pic, &mut drv, mem, tap, &mut c);
        }
        worked |= take_interrupts(world, &mut pic, &mut drv, mem, tap, &mut c);
        if last_tick.elapsed() >= TICK {
            last_tick = Instant::now();
            world.tick();
        }
        let idle = !worked && pending.is_none();
        if idle {
            c.halts += 1;
            world.halt(&[tap.as_fd(), watch], STATS_EVERY)?;
        }
        let watch_fired = idle && sys::poll_readable_few(&[watch], Some(Duration::ZERO))? != 0;
        if watch_fired || last_stats.elapsed() >= STATS_EVERY {
            last_stats = Instant::now();
            let doc = serde_json::json!({
                "guest": c,
                "driver": driver_json(&drv.stats()),
                "world": world.stats(),
            });
            host(&doc).map_err(GuestError::Host)?;
        }
    }
}

/// The ring is full: once it has stayed full for [`TX_TIMEOUT`], the
/// driver demands transmission again.
fn tx_watchdog<W: VmWorld>(world: &mut W, drv: &Pcnet32, full_since: &mut Option<Instant>) {
    let since = *full_since.get_or_insert_with(Instant::now);
    if since.elapsed() >= TX_TIMEOUT {
        drv.demand_transmit(world);
        *full_since = Some(Instant::now());
    }
}

/// Boots the guest's NIC: the i8259 pair, then the NIC probed and opened
/// (promiscuous) at [`NIC_IO_BASE`] with its line [`NIC_IRQ`] unmasked.
fn bring_up<W: VmWorld, M: abi::SharedMemory>(
    world: &mut W,
    mem: &GuestMemory<M>,
) -> Result<(GuestPic, Pcnet32), GuestError> {
    let mut pic = GuestPic::init(world);
    let probe = Pcnet32::probe(world, NIC_IO_BASE)?;
    let cfg = DriverConfig {
        // The guest's IPv6 multicast (neighbour discovery) needs no LADRF.
        promiscuous: true,
        ..DriverConfig::new(NIC_IO_BASE, DRIVER_AREA)
    };
    let drv = Pcnet32::open(world, mem, probe.mac, cfg)?;
    pic.enable_irq(world, NIC_IRQ);
    eprintln!(
        "guest: pcnet32 up at I/O {NIC_IO_BASE:#x}, IRQ {NIC_IRQ}, chip {:#010x}, MAC {}",
        probe.chip_id,
        probe
            .mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    );
    Ok((pic, drv))
}

/// Takes pending interrupts through the guest's i8259 path, running the
/// NIC driver's handler for the NIC's line. Whether any was taken.
fn take_interrupts<W: VmWorld, M: abi::SharedMemory>(
    world: &mut W,
    pic: &mut GuestPic,
    drv: &mut Pcnet32,
    mem: &GuestMemory<M>,
    tap: &Tap,
    c: &mut GuestCounters,
) -> bool {
    let mut taken = false;
    for _ in 0..IRQ_BUDGET {
        let Some(vector) = world.acknowledge_interrupt() else {
            break;
        };
        taken = true;
        c.irqs += 1;
        let (rx, dropped) = (&mut c.tap_rx, &mut c.tap_rx_dropped);
        pic.do_irq(world, vector, |io, irq| {
            if irq == NIC_IRQ {
                drv.interrupt(io, mem, &mut |f| match tap.send(&[f]) {
                    Ok(_) => *rx += 1,
                    Err(_) => *dropped += 1,
                });
            }
        });
    }
    taken
}
