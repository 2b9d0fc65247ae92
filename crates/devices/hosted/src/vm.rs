//! The VM world of the hosted architecture: the VMM's trap handling for the
//! guest's port accesses (Sugerman §2.1–2.3, §3.3).
//!
//! The virtual PIC is always the VMM's (it is independent of the real one,
//! §4.1), so its accesses never leave this process. The NIC's accesses
//! depend on `ports_in_vmm`:
//! - **off**: every access is a world switch to the VMApp, which holds the
//!   Lance model; its answer carries the value and the NIC's IRQ level.
//! - **on**: the VMM holds the model, so RAP's memory semantics, CSR0 status
//!   reads and every access that needs no host I/O are served here; the
//!   model's transmissions become frame I/O, one switch carrying the
//!   frames in the channel's slots, and received frames come back in the
//!   answer. With `send_combining` the model leaves frames in the Lance's
//!   ring (TDMD only latches) until [`HOSTED_COMBINE`] wait, the ring
//!   fills, the guest halts or a timer tick passes.
//!
//! Every switch is timed with the TSC and counted.

use crate::channel::{Answer, Channel, Op, SLOTS};
use crate::guest::VmWorld;
use abi::SharedMemory;
use emul::pcnet::regs::{csr0, port};
use emul::{DualPic, GuestMemory, IoWidth, Pcnet, PcnetConfig, PortIo, NIC_IO_BASE, NIC_IRQ};
use hypercall::trace::{DomainEvent, Tracer};
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Most frames send combining holds back (Sugerman §3.3).
pub const HOSTED_COMBINE: u32 = 3;

/// The VM's configuration.
#[derive(Debug, Clone, Copy)]
pub struct VmConfig {
    pub ports_in_vmm: bool,
    pub send_combining: bool,
    /// The NIC's station address (its PROM), when the model runs here.
    pub mac: [u8; 6],
}

/// Port accesses by port.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PortCounts {
    pub aprom: u64,
    pub rdp: u64,
    pub rap: u64,
    pub reset: u64,
    pub bdp: u64,
    pub pic_master: u64,
    pub pic_slave: u64,
    pub other: u64,
}

/// The VM's counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct VmCounters {
    /// World switches to the VMApp and back (halts not included).
    pub world_switches: u64,
    /// TSC cycles spent in them, in total.
    pub switch_cycles: u64,
    /// Of the switches, those for a port access.
    pub port_switches: u64,
    /// Of the switches, those carrying frames.
    pub frame_switches: u64,
    /// Halts (the guest idle; the VMApp waits on VMNet).
    pub halts: u64,
    /// TSC cycles the guest spent halted (idle time, Sugerman Table 3).
    pub halt_cycles: u64,
    /// NIC port accesses served in the VMM.
    pub nic_in_vmm: u64,
    /// NIC port accesses that switched.
    pub nic_switched: u64,
    /// Port accesses by port.
    pub ports: PortCounts,
    /// Accesses to the virtual PIC (always in the VMM).
    pub pic_accesses: u64,
    /// Virtual interrupts delivered to the guest.
    pub irqs: u64,
    /// Frames sent to the VMApp.
    pub frames_out: u64,
    /// Frames received from the VMApp.
    pub frames_in: u64,
    /// The cheapest and mean round trip of an empty request (a sync with
    /// nothing to send and no room for input), measured at start-up.
    pub null_switch_min_cycles: u64,
    pub null_switch_mean_cycles: u64,
    /// Switches that carried more than one frame (send combining).
    pub combined_sends: u64,
    /// Frames sent in those.
    pub combined_frames: u64,
    /// Switches whose request wrote frames to VMNet, their round trips,
    /// and the way back (the VMApp's answer until the VM runs again), in
    /// TSC cycles (Sugerman Figure 5).
    pub tx_switches: u64,
    pub tx_switch_cycles: u64,
    pub tx_back_cycles: u64,
    /// OUTs during which such a switch happened, from the trap to the
    /// guest's next access (Figure 5's whole path).
    pub tx_outs: u64,
    pub tx_out_cycles: u64,
}

/// The channel with its clock: every switch is timed, and recorded in the
/// domain's trace area (`splitnet trace`).
struct Switch {
    chan: Channel,
    failed: Option<String>,
    tracer: Tracer,
}

impl Switch {
    fn call(&mut self, c: &mut VmCounters) -> Option<Answer> {
        if self.failed.is_some() {
            return None;
        }
        let t0 = sys::rdtsc();
        let r = self.chan.call();
        let t1 = sys::rdtsc();
        c.switch_cycles += t1.wrapping_sub(t0);
        c.world_switches += 1;
        match r {
            Ok(a) => {
                let (frames, answered) = self.chan.answer_tx();
                self.tracer
                    .record(DomainEvent::WorldSwitch, t0, u64::from(frames));
                let back = t1.wrapping_sub(answered);
                if frames > 0 && back < 1 << 32 {
                    c.tx_switches += 1;
                    c.tx_switch_cycles += t1.wrapping_sub(t0);
                    c.tx_back_cycles += back;
                }
                Some(a)
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                None
            }
        }
    }
}

/// The model's transmissions, staged in the channel's TX slots.
struct Uplink {
    sw: Switch,
    staged: usize,
    /// Frames in the RX slots not yet given to the model.
    rx_waiting: usize,
    counters: VmCounters,
}

impl Uplink {
    fn rx_room(&self) -> usize {
        if self.rx_waiting > 0 {
            0
        } else {
            SLOTS
        }
    }

    /// One switch carrying the staged frames.
    fn flush(&mut self) {
        self.sw
            .chan
            .set_request(Op::Frames, 0, 0, 0, self.staged, self.rx_room());
        self.note_sent();
        self.counters.frame_switches += 1;
        if let Some(a) = self.sw.call(&mut self.counters) {
            self.rx_waiting = a.rx_count;
        }
    }

    fn note_sent(&mut self) {
        let n = self.staged as u64;
        self.counters.frames_out += n;
        if n > 1 {
            self.counters.combined_sends += 1;
            self.counters.combined_frames += n;
        }
        self.staged = 0;
    }
}

impl emul::FrameSink for Uplink {
    fn send_frame(&mut self, frame: &[u8]) {
        if self.staged == SLOTS {
            self.flush();
        }
        self.sw.chan.put_tx(self.staged, frame);
        self.staged += 1;
    }
}

enum Nic<M: SharedMemory> {
    /// The model is the VMApp's: every access switches.
    Remote(Box<Switch>, Box<VmCounters>),
    /// The model is here.
    Local(Box<Pcnet<M, Uplink>>),
}

/// The VMM: the guest's port space, the virtual PIC, and the NIC model or
/// the way to it.
pub struct Vmm<M: SharedMemory> {
    pic: DualPic,
    nic: Nic<M>,
    send_combining: bool,
    /// TDMDs latched since the last transmission (send combining).
    held: u32,
    scratch: Box<[u8]>,
    /// Counters kept outside the switch owner.
    ports: PortCounts,
    pic_accesses: u64,
    irqs: u64,
    nic_in_vmm: u64,
}

impl<M: SharedMemory> Vmm<M> {
    /// Records every world switch and halt in the domain's trace area.
    pub fn set_tracer(&mut self, tracer: Tracer) {
        match &mut self.nic {
            Nic::Local(nic) => nic.sink_mut().sw.tracer = tracer,
            Nic::Remote(sw, _) => sw.tracer = tracer,
        }
    }

    /// The VMM over guest memory `mem` and the channel to its VMApp.
    pub fn new(chan: Channel, mem: GuestMemory<M>, cfg: VmConfig) -> Vmm<M> {
        let sw = Switch {
            chan,
            failed: None,
            tracer: Tracer::disabled(),
        };
        let nic = if cfg.ports_in_vmm {
            let up = Uplink {
                sw,
                staged: 0,
                rx_waiting: 0,
                counters: VmCounters::default(),
            };
            Nic::Local(Box::new(Pcnet::new(
                mem,
                up,
                PcnetConfig {
                    mac: cfg.mac,
                    transmit_on_demand: !cfg.send_combining,
                },
            )))
        } else {
            Nic::Remote(Box::new(sw), Box::default())
        };
        Vmm {
            pic: DualPic::new(),
            nic,
            send_combining: cfg.ports_in_vmm && cfg.send_combining,
            held: 0,
            scratch: vec![0u8; crate::channel::SLOT_SIZE].into_boxed_slice(),
            ports: PortCounts::default(),
            pic_accesses: 0,
            irqs: 0,
            nic_in_vmm: 0,
        }
    }

    /// Times `n` empty world switches (a sync with nothing to send and no
    /// room for input): the round trip with the least host-world work.
    pub fn calibrate(&mut self, n: u32) {
        let (sw, c) = match &mut self.nic {
            Nic::Remote(sw, c) => (&mut **sw, &mut **c),
            Nic::Local(nic) => {
                let up = nic.sink_mut();
                (&mut up.sw, &mut up.counters)
            }
        };
        let mut probe = VmCounters::default();
        let mut min = u64::MAX;
        for _ in 0..n {
            let before = probe.switch_cycles;
            sw.chan.set_request(Op::Sync, 0, 0, 0, 0, 0);
            if sw.call(&mut probe).is_none() {
                return;
            }
            min = min.min(probe.switch_cycles - before);
        }
        c.null_switch_min_cycles = min;
        c.null_switch_mean_cycles = probe.switch_cycles / u64::from(n.max(1));
    }

    /// The counters so far.
    pub fn counters(&self) -> VmCounters {
        let mut c = match &self.nic {
            Nic::Remote(_, c) => **c,
            Nic::Local(n) => n.sink().counters,
        };
        c.ports = self.ports;
        c.pic_accesses = self.pic_accesses;
        c.irqs = self.irqs;
        c.nic_in_vmm = self.nic_in_vmm;
        c
    }

    fn channel(&self) -> &Channel {
        match &self.nic {
            Nic::Remote(sw, _) => &sw.chan,
            Nic::Local(n) => &n.sink().sw.chan,
        }
    }

    fn count(&mut self, port: u16) -> Option<u16> {
        let off = port.wrapping_sub(NIC_IO_BASE);
        let p = &mut self.ports;
        if off < port::SIZE {
            match off {
                port::RDP => p.rdp += 1,
                port::RAP => p.rap += 1,
                port::RESET => p.reset += 1,
                port::BDP => p.bdp += 1,
                o if o < port::RDP => p.aprom += 1,
                _ => p.other += 1,
            }
            return Some(off);
        }
        match port {
            0x20 | 0x21 => p.pic_master += 1,
            0xa0 | 0xa1 => p.pic_slave += 1,
            _ => p.other += 1,
        }
        None
    }

    /// Hands received frames to the model, and its INTA to the PIC.
    fn after_local(&mut self) {
        let Nic::Local(nic) = &mut self.nic else {
            return;
        };
        let waiting = nic.sink().rx_waiting;
        for i in 0..waiting {
            let len = nic.sink().sw.chan.take_rx(i, &mut self.scratch);
            nic.receive(&self.scratch[..len]);
        }
        if waiting > 0 {
            let up = nic.sink_mut();
            up.counters.frames_in += waiting as u64;
            up.rx_waiting = 0;
        }
        self.pic.set_irq(NIC_IRQ, nic.irq_level());
    }

    /// Sends held frames: the model polls its ring, one switch carries them.
    fn send_held(&mut self) {
        if let Nic::Local(nic) = &mut self.nic {
            if self.held > 0 {
                nic.poll();
                self.held = 0;
            }
            if nic.sink().staged > 0 {
                nic.sink_mut().flush();
            }
        }
        self.after_local();
    }

    fn remote(&mut self, op: Op, port: u16, width: IoWidth, value: u32) -> u32 {
        let Nic::Remote(sw, c) = &mut self.nic else {
            return width.all_ones();
        };
        c.nic_switched += 1;
        c.port_switches += 1;
        sw.chan.set_request(op, port, width.bytes(), value, 0, 0);
        match sw.call(c) {
            Some(a) => {
                self.pic.set_irq(NIC_IRQ, a.irq);
                a.value & width.all_ones()
            }
            None => width.all_ones(),
        }
    }
}

impl<M: SharedMemory> PortIo for Vmm<M> {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        let Some(off) = self.count(port) else {
            if width == IoWidth::Byte {
                if let Some(v) = self.pic.read_port(port) {
                    self.pic_accesses += 1;
                    return u32::from(v);
                }
            }
            return width.all_ones();
        };
        match &mut self.nic {
            Nic::Remote(..) => self.remote(Op::In, port, width, 0),
            Nic::Local(nic) => {
                self.nic_in_vmm += 1;
                let v = nic.io_read(off, width);
                self.after_local();
                v
            }
        }
    }

    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        let t0 = sys::rdtsc();
        let before = self.tx_switches();
        self.port_out_untimed(port, width, value);
        if self.tx_switches() != before {
            let c = self.switch_counters();
            c.tx_outs += 1;
            c.tx_out_cycles += sys::rdtsc().wrapping_sub(t0);
        }
    }
}

impl<M: SharedMemory> Vmm<M> {
    fn tx_switches(&self) -> u64 {
        match &self.nic {
            Nic::Remote(_, c) => c.tx_switches,
            Nic::Local(n) => n.sink().counters.tx_switches,
        }
    }

    fn switch_counters(&mut self) -> &mut VmCounters {
        match &mut self.nic {
            Nic::Remote(_, c) => c,
            Nic::Local(n) => &mut n.sink_mut().counters,
        }
    }

    fn port_out_untimed(&mut self, port: u16, width: IoWidth, value: u32) {
        let Some(off) = self.count(port) else {
            if width == IoWidth::Byte && self.pic.write_port(port, value as u8) {
                self.pic_accesses += 1;
            }
            return;
        };
        let Nic::Local(nic) = &mut self.nic else {
            self.remote(Op::Out, port, width, value);
            return;
        };
        self.nic_in_vmm += 1;
        let tdmd = off == port::RDP && nic.rap() == 0 && value as u16 & csr0::TDMD != 0;
        nic.io_write(off, width, value);
        if self.send_combining {
            if tdmd {
                self.held += 1;
            }
            if self.held >= HOSTED_COMBINE {
                self.send_held();
                return;
            }
        } else if nic.sink().staged > 0 {
            nic.sink_mut().flush();
        }
        self.after_local();
    }
}

impl<M: SharedMemory> VmWorld for Vmm<M> {
    fn acknowledge_interrupt(&mut self) -> Option<u8> {
        if !self.pic.int_output() {
            return None;
        }
        self.irqs += 1;
        Some(self.pic.inta())
    }

    fn halt(&mut self, fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<()> {
        // Held frames leave with the halt (its switch is due anyway).
        let (chan, staged, room) = match &mut self.nic {
            Nic::Local(nic) => {
                if self.held > 0 {
                    nic.poll();
                    self.held = 0;
                }
                let up = nic.sink_mut();
                let staged = up.staged;
                let room = up.rx_room();
                up.note_sent();
                up.counters.halts += 1;
                (&up.sw, staged, room)
            }
            Nic::Remote(sw, c) => {
                c.halts += 1;
                (&**sw, 0, 0)
            }
        };
        if chan.failed.is_some() {
            return Ok(());
        }
        let ch = &chan.chan;
        let t0 = sys::rdtsc();
        ch.set_request(Op::Halt, 0, 0, 0, staged, room);
        let answer = (|| {
            ch.post()?;
            let mut all = [ch.fd(); sys::POLL_FEW];
            let n = 1 + fds.len().min(sys::POLL_FEW - 1);
            all[1..n].copy_from_slice(&fds[..n - 1]);
            let r = sys::poll_readable_few(&all[..n], Some(timeout))?;
            if r & 1 != 0 {
                ch.wait_answer()
            } else {
                ch.wake()
            }
        })();
        let idle = sys::rdtsc().wrapping_sub(t0);
        chan.tracer.record(DomainEvent::Halt, t0, 0);
        match &mut self.nic {
            Nic::Local(nic) => nic.sink_mut().counters.halt_cycles += idle,
            Nic::Remote(_, c) => c.halt_cycles += idle,
        }
        let a = match answer {
            Ok(a) => a,
            Err(e) => {
                match &mut self.nic {
                    Nic::Local(nic) => nic.sink_mut().sw.failed = Some(e.to_string()),
                    Nic::Remote(sw, _) => sw.failed = Some(e.to_string()),
                }
                return Ok(());
            }
        };
        match &mut self.nic {
            Nic::Local(nic) => nic.sink_mut().rx_waiting = a.rx_count,
            Nic::Remote(..) => self.pic.set_irq(NIC_IRQ, a.irq),
        }
        self.after_local();
        Ok(())
    }

    fn flush(&mut self) {
        self.send_held();
    }

    fn tick(&mut self) {
        if self.held > 0 {
            self.send_held();
        }
    }

    fn failure(&self) -> Option<String> {
        match &self.nic {
            Nic::Remote(sw, _) => sw.failed.clone(),
            Nic::Local(n) => n.sink().sw.failed.clone(),
        }
    }

    fn stats(&self) -> serde_json::Value {
        let c = self.counters();
        let app = self.channel().app_counters();
        let mean = c.switch_cycles.checked_div(c.world_switches).unwrap_or(0);
        // The VMApp's requests include the calibration's and the halts.
        let served = app.requests.saturating_sub(app.halts).max(1);
        let service = app.service_cycles / served;
        serde_json::json!({
            "vm": c,
            "switch_mean_cycles": mean,
            "service_mean_cycles": service,
            "switch_overhead_mean_cycles": mean.saturating_sub(service),
            // When these counters were read (spans between two readings).
            "tsc": sys::rdtsc(),
            "vmapp": app,
        })
    }
}
