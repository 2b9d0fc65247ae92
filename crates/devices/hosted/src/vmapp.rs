//! The VMApp: the host world's half of the hosted NIC (Sugerman §2.1–2.3).
//!
//! It runs in the driver domain's network namespace as a host application,
//! maps the guest's memory (hv hands it the pool read-write, as qemu-dm
//! gets a guest's memory), and serves the VM's world switches. It owns
//! VMNet's host side: a TAP in the driver domain's namespace, which the
//! driver domain bridges like its physical port.
//!
//! Two shapes, by `ports_in_vmm`:
//! - **off** (VMware Workstation 2.0): the Lance model ([`emul::Pcnet`])
//!   lives here; every NIC port access is a request; transmitted frames go
//!   straight from the model to VMNet, received ones into guest memory.
//! - **on** (§3.3): the model lives in the VMM; requests carry frames in
//!   the channel's slots (written to VMNet straight from the slots) and
//!   answers bring received frames back in the other slots.
//!
//! After each request the VMApp looks for VMNet input: a `select()` (a
//! zero-timeout `poll`) every time, or with `irq_bitvector` a load of a bit
//! the VMNet side sets (§3.3, IRQ notification). The VMNet side is a thread
//! standing in for the host kernel driver: it sleeps in `poll` on the TAP,
//! sets the bit, and waits to be re-armed once the VMApp drained the TAP.

use crate::channel::{Answer, AppCounters, Channel, Op, Request, SLOTS};
use abi::SharedMemory;
use emul::{GuestMemory, IoWidth, Pcnet, PcnetConfig};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use sys::{Doorbell, IoPart, IoPartMut, Tap};

/// Frames read from VMNet into the NIC per switch, at most (the guest's
/// receive ring holds 32).
const RX_PER_SWITCH: usize = 8;

/// The VMApp's configuration (hv passes it on the command line).
#[derive(Debug, Clone, Copy)]
pub struct VmAppConfig {
    /// The VMM serves the NIC's ports; only frames come here.
    pub ports_in_vmm: bool,
    /// Learn of VMNet input from the shared bit vector.
    pub irq_bitvector: bool,
    /// The NIC's station address (its PROM), when the model runs here.
    pub mac: [u8; 6],
}

/// Where frames the model transmits go: VMNet.
struct VmNetSink {
    tap: Arc<Tap>,
    sent: u64,
    drops: u64,
    writes: Writes,
}

/// The VMNet writes of the current request, timed (Figure 5's host I/O).
#[derive(Default, Clone, Copy)]
struct Writes {
    frames: u32,
    first_start: u64,
    last_end: u64,
    cycles: u64,
}

impl Writes {
    /// Times one write.
    fn time<T>(&mut self, write: impl FnOnce() -> T) -> T {
        let t0 = sys::rdtsc();
        let r = write();
        let t1 = sys::rdtsc();
        if self.frames == 0 {
            self.first_start = t0;
        }
        self.frames += 1;
        self.last_end = t1;
        self.cycles = self.cycles.wrapping_add(t1.wrapping_sub(t0));
        r
    }
}

impl emul::FrameSink for VmNetSink {
    fn send_frame(&mut self, frame: &[u8]) {
        let tap = &self.tap;
        match self.writes.time(|| tap.send(&[frame])) {
            Ok(_) => self.sent += 1,
            Err(_) => self.drops += 1,
        }
    }
}

/// The bit vector VMNet sets (bit 0: this VM's interface has input).
struct BitVector {
    bits: Arc<AtomicU64>,
    rearm: Doorbell,
    /// The notifier's end, until its thread starts.
    waiter: Option<Doorbell>,
}

/// The VMApp for one VM.
pub struct VmApp<M: SharedMemory> {
    chan: Channel,
    tap: Arc<Tap>,
    nic: Option<Pcnet<M, VmNetSink>>,
    bitvector: Option<BitVector>,
    counters: AppCounters,
    scratch: Box<[u8]>,
    /// The VMNet writes of the current request (frame I/O).
    writes: Writes,
}

impl<M: SharedMemory> VmApp<M> {
    /// A VMApp serving `chan` over guest memory `mem`, with VMNet on `tap`.
    /// No thread yet: [`VmApp::start_vmnet`] comes after the jail.
    pub fn new(chan: Channel, mem: M, tap: Tap, cfg: VmAppConfig) -> io::Result<VmApp<M>> {
        let bitvector = if cfg.irq_bitvector {
            let (waiter, rearm) = Doorbell::pair()?;
            Some(BitVector {
                bits: Arc::new(AtomicU64::new(0)),
                rearm,
                waiter: Some(waiter),
            })
        } else {
            None
        };
        let tap = Arc::new(tap);
        let nic = (!cfg.ports_in_vmm).then(|| {
            let sink = VmNetSink {
                tap: tap.clone(),
                sent: 0,
                drops: 0,
                writes: Writes::default(),
            };
            Pcnet::new(
                GuestMemory::new(mem),
                sink,
                PcnetConfig {
                    mac: cfg.mac,
                    transmit_on_demand: true,
                },
            )
        });
        Ok(VmApp {
            chan,
            tap,
            nic,
            bitvector,
            counters: AppCounters::default(),
            scratch: vec![0u8; crate::channel::MAX_FRAME + 64].into_boxed_slice(),
            writes: Writes::default(),
        })
    }

    /// Starts the VMNet side's notification thread (with `irq_bitvector`).
    pub fn start_vmnet(&mut self) -> io::Result<()> {
        let Some(bv) = self.bitvector.as_mut() else {
            return Ok(());
        };
        let Some(wait) = bv.waiter.take() else {
            return Ok(());
        };
        let (tap, b) = (self.tap.clone(), bv.bits.clone());
        std::thread::Builder::new()
            .name("vmnet".into())
            .spawn(move || loop {
                // Sleep until the TAP has input, set the bit, and wait for
                // the VMApp to drain it and re-arm us.
                match sys::poll_readable(&[tap.as_fd()], None) {
                    Ok(_) => {}
                    Err(_) => return,
                }
                b.fetch_or(1, Ordering::Release);
                if wait.wait(None).is_err() {
                    return;
                }
            })?;
        Ok(())
    }

    /// Counters so far (with what the model sent to VMNet).
    pub fn counters(&self) -> AppCounters {
        let mut c = self.counters;
        if let Some(s) = self.nic.as_ref().map(|n| n.sink()) {
            c.vmnet_tx += s.sent;
            c.drops += s.drops;
        }
        c
    }

    /// Serves the VM until it goes away.
    pub fn run(&mut self) -> io::Result<()> {
        while let Some(req) = self.chan.next_request()? {
            let t0 = sys::rdtsc();
            self.counters.requests += 1;
            let rx_before = self.counters.vmnet_rx_cycles;
            let mut a = self.serve(req);
            let w = self.take_writes();
            let rx = self.counters.vmnet_rx_cycles.wrapping_sub(rx_before);
            if req.op == Some(Op::Halt) {
                self.counters.halts += 1;
                if !self.halt(req, &mut a)? {
                    return Ok(());
                }
            } else {
                self.counters.service_cycles += sys::rdtsc().wrapping_sub(t0);
                self.counters.service_vmnet_cycles = self
                    .counters
                    .service_vmnet_cycles
                    .wrapping_add(w.cycles.wrapping_add(rx));
                self.count_tx_path(t0, w);
            }
            self.chan.set_answer_tx(w.frames);
            self.chan.publish(&self.counters());
            self.chan.answer(a)?;
        }
        Ok(())
    }

    /// The current request's VMNet writes, from either path; resets them.
    fn take_writes(&mut self) -> Writes {
        let mut w = std::mem::take(&mut self.writes);
        if let Some(s) = self.nic.as_mut().map(|n| n.sink_mut()) {
            let m = std::mem::take(&mut s.writes);
            if w.frames == 0 {
                w = m;
            }
        }
        self.counters.vmnet_tx_cycles = self.counters.vmnet_tx_cycles.wrapping_add(w.cycles);
        w
    }

    /// Times the path of a request that transmitted (Figure 5): the VM's
    /// ring stamp is its own claim, so an implausible one is left out.
    fn count_tx_path(&mut self, arrived: u64, w: Writes) {
        if w.frames == 0 {
            return;
        }
        let c = &mut self.counters;
        c.tx_requests += 1;
        let arrive = arrived.wrapping_sub(self.chan.request_stamp());
        if arrive < 1 << 32 {
            c.tx_arrive_cycles = c.tx_arrive_cycles.wrapping_add(arrive);
        }
        c.tx_emulate_cycles = c
            .tx_emulate_cycles
            .wrapping_add(w.first_start.wrapping_sub(arrived));
        c.tx_write_cycles = c
            .tx_write_cycles
            .wrapping_add(w.last_end.wrapping_sub(w.first_start));
        c.tx_finish_cycles = c
            .tx_finish_cycles
            .wrapping_add(sys::rdtsc().wrapping_sub(w.last_end));
    }

    /// Serves one request and looks for VMNet input.
    fn serve(&mut self, req: Request) -> Answer {
        let mut a = Answer::default();
        match req.op {
            Some(Op::In | Op::Out) => self.port_access(req, &mut a),
            Some(Op::Frames | Op::Halt | Op::Sync) => self.send_slots(req),
            None => self.counters.bad_requests += 1,
        }
        if self.input_ready() {
            self.receive(req.rx_room, &mut a);
        }
        a.irq = self.nic.as_ref().is_some_and(|n| n.irq_level());
        a
    }

    fn port_access(&mut self, req: Request, a: &mut Answer) {
        let width = match req.width {
            1 => IoWidth::Byte,
            2 => IoWidth::Word,
            4 => IoWidth::Dword,
            _ => {
                self.counters.bad_requests += 1;
                a.value = u32::MAX;
                return;
            }
        };
        let off = req.port.wrapping_sub(u32::from(emul::NIC_IO_BASE));
        let (Some(nic), true) = (
            self.nic.as_mut(),
            off < u32::from(emul::pcnet::regs::port::SIZE),
        ) else {
            // Ports handled in the VMM leave nothing here to access; a port
            // outside the NIC is the guest's mistake.
            self.counters.bad_requests += 1;
            a.value = width.all_ones();
            return;
        };
        self.counters.port_accesses += 1;
        if req.op == Some(Op::In) {
            a.value = nic.io_read(off as u16, width);
        } else {
            nic.io_write(off as u16, width, req.value);
        }
    }

    /// Writes the TX slots' frames to VMNet, straight from the channel.
    fn send_slots(&mut self, req: Request) {
        if req.tx_count > SLOTS {
            self.counters.bad_requests += 1;
            return;
        }
        for i in 0..req.tx_count {
            let Some((off, len)) = self.chan.tx_frame(i) else {
                self.counters.bad_requests += 1;
                continue;
            };
            let part = IoPart::Shared {
                map: self.chan.region(),
                off,
                len,
            };
            let tap = &self.tap;
            match self.writes.time(|| tap.writev(&[part])) {
                Ok(_) => self.counters.vmnet_tx += 1,
                Err(_) => self.counters.drops += 1,
            }
        }
    }

    /// Whether VMNet has input: the bit vector, or a `select()`.
    fn input_ready(&mut self) -> bool {
        if let Some(b) = &self.bitvector {
            self.counters.bitvector_checks += 1;
            let hit = b.bits.load(Ordering::Acquire) & 1 != 0;
            self.counters.bitvector_hits += u64::from(hit);
            return hit;
        }
        self.counters.selects += 1;
        sys::poll_readable_few(&[self.tap.as_fd()], Some(Duration::ZERO)).is_ok_and(|r| r & 1 != 0)
    }

    /// Reads VMNet input: into the model (guest memory) when it runs here,
    /// else into at most `room` RX slots. Re-arms the bit vector once the
    /// TAP is drained.
    fn receive(&mut self, room: usize, a: &mut Answer) {
        let t0 = sys::rdtsc();
        self.receive_untimed(room, a);
        self.counters.vmnet_rx_cycles = self
            .counters
            .vmnet_rx_cycles
            .wrapping_add(sys::rdtsc().wrapping_sub(t0));
    }

    fn receive_untimed(&mut self, room: usize, a: &mut Answer) {
        let mut drained = false;
        if let Some(nic) = self.nic.as_mut() {
            for _ in 0..RX_PER_SWITCH {
                match self.tap.recv(&mut self.scratch) {
                    Ok(Some(n)) => {
                        self.counters.vmnet_rx += 1;
                        if !matches!(
                            nic.receive(&self.scratch[..n]),
                            emul::RxOutcome::Delivered { .. }
                        ) {
                            self.counters.drops += 1;
                        }
                    }
                    _ => {
                        drained = true;
                        break;
                    }
                }
            }
        } else {
            let mut n = 0;
            while n < room {
                let mut part = [IoPartMut::Shared {
                    map: self.chan.region(),
                    off: self.chan.rx_slot_offset(n),
                    len: crate::channel::SLOT_SIZE,
                }];
                match self.tap.readv(&mut part) {
                    Ok(Some(len)) => {
                        self.chan.set_rx_len(n, len);
                        self.counters.vmnet_rx += 1;
                        n += 1;
                    }
                    _ => {
                        drained = true;
                        break;
                    }
                }
            }
            a.rx_count = n;
        }
        if drained {
            if let Some(b) = &self.bitvector {
                b.bits.fetch_and(!1, Ordering::AcqRel);
                let _ = b.rearm.ring();
            }
        }
    }

    /// The guest is idle: block until VMNet input gives the VM something to
    /// do, or the VM wakes us. Returns false when the VM has gone.
    fn halt(&mut self, req: Request, a: &mut Answer) -> io::Result<bool> {
        loop {
            if a.irq || a.rx_count > 0 {
                return Ok(true);
            }
            self.counters.selects += 1;
            // With no room for frames, VMNet input cannot end the halt:
            // wait for the VM alone rather than spin on a readable TAP.
            let room = self.nic.is_some() || req.rx_room > 0;
            let fds = [self.chan.fd(), self.tap.as_fd()];
            let r = sys::poll_readable_few(&fds[..if room { 2 } else { 1 }], None)?;
            if room && r & 2 != 0 {
                self.receive(req.rx_room, a);
                a.irq = self.nic.as_ref().is_some_and(|n| n.irq_level());
            }
            if r & 1 != 0 {
                return Ok(self.chan.take_wake()?.is_some());
            }
        }
    }
}
