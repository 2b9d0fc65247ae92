//! NIC, PIC pair and guest memory wired into one port space, in process.

use crate::pcnet::{regs::port, FrameSink, Pcnet, RxOutcome};
use crate::pic::DualPic;
use crate::pio::{IoWidth, PortIo};
use abi::SharedMemory;

/// The NIC's I/O base: a PCI BAR a BIOS could assign.
pub const NIC_IO_BASE: u16 = 0xc000;

/// The NIC's IRQ: a PCI interrupt routed to the slave PIC, as PCI devices
/// usually were on the paper's PCs. On a slave line Linux's interrupt path
/// makes five PIC accesses per IRQ (Sugerman §4.1); on a master line four
/// (Zhang & Dong §5.1).
pub const NIC_IRQ: u8 = 10;

/// A guest's devices without a VMM between them: port accesses call the
/// devices directly, and the NIC's INTA output drives its PIC input after
/// every access. The hosted and HVM worlds put a trap (a cross-process round
/// trip) in front of the same devices; this is their reference.
pub struct Machine<M, S> {
    /// The NIC.
    pub nic: Pcnet<M, S>,
    /// The 8259A pair.
    pub pic: DualPic,
    nic_base: u16,
    nic_irq: u8,
    interrupts: u64,
    unclaimed: u64,
}

impl<M: SharedMemory, S: FrameSink> Machine<M, S> {
    /// Wires `nic` at I/O `nic_base`, its INTA on IRQ `nic_irq` (0..=15).
    pub fn new(nic: Pcnet<M, S>, nic_base: u16, nic_irq: u8) -> Self {
        Machine {
            nic,
            pic: DualPic::new(),
            nic_base,
            nic_irq,
            interrupts: 0,
            unclaimed: 0,
        }
    }

    fn sync_irq(&mut self) {
        self.pic.set_irq(self.nic_irq, self.nic.irq_level());
    }

    fn nic_offset(&self, port: u16) -> Option<u16> {
        let off = port.wrapping_sub(self.nic_base);
        (off < port::SIZE).then_some(off)
    }

    /// A frame arrives from the wire.
    pub fn receive(&mut self, frame: &[u8]) -> RxOutcome {
        let r = self.nic.receive(frame);
        self.sync_irq();
        r
    }

    /// The NIC's transmit poll (its timer).
    pub fn poll(&mut self) {
        self.nic.poll();
        self.sync_irq();
    }

    /// Whether the CPU's INTR line is up.
    pub fn interrupt_pending(&self) -> bool {
        self.pic.int_output()
    }

    /// The CPU takes an interrupt if one is pending: the INTA cycle, which
    /// returns the vector.
    pub fn acknowledge_interrupt(&mut self) -> Option<u8> {
        if !self.pic.int_output() {
            return None;
        }
        self.interrupts += 1;
        Some(self.pic.inta())
    }

    /// Interrupts delivered to the CPU so far.
    pub fn interrupts_delivered(&self) -> u64 {
        self.interrupts
    }

    /// Port accesses that reached no device.
    pub fn unclaimed_accesses(&self) -> u64 {
        self.unclaimed
    }
}

impl<M: SharedMemory, S: FrameSink> PortIo for Machine<M, S> {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        if let Some(off) = self.nic_offset(port) {
            let v = self.nic.io_read(off, width);
            self.sync_irq();
            return v;
        }
        if width == IoWidth::Byte {
            if let Some(v) = self.pic.read_port(port) {
                return u32::from(v);
            }
        }
        self.unclaimed += 1;
        width.all_ones()
    }

    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        if let Some(off) = self.nic_offset(port) {
            self.nic.io_write(off, width, value);
            self.sync_irq();
            return;
        }
        if width == IoWidth::Byte && self.pic.write_port(port, value as u8) {
            return;
        }
        self.unclaimed += 1;
    }
}
