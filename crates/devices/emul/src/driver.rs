//! The guest's side: a `pcnet32`-like driver for the Am79C970A and the guest
//! kernel's i8259 interrupt path, both over [`PortIo`].
//!
//! They make the port accesses Linux makes, in the same order, because the
//! counts are the point (Sugerman §3.2: "each packet transmission actually
//! involves a series of 11 other IN/OUT instructions"; §4.1: "for each IRQ,
//! the Linux guest IRQ handler issues five accesses to the virtual PIC";
//! Zhang & Dong §5.1: IMR read and written in mask_and_ack, EOI, IMR written
//! again at the end). The sequences are those of Linux 2.2–2.6's non-NAPI
//! `pcnet32` (word I/O accessors: a CSR access is a RAP write then an RDP
//! access) and `i8259.c`:
//!
//! - transmit: fill the descriptor, give it to the NIC (OWN), then
//!   CSR0 = IENA | TDMD: **2** accesses;
//! - interrupt handler: save RAP; read CSR0; while it shows ERR, RINT,
//!   TINT or IDON: write the set bits back to acknowledge them (with IENA clear),
//!   receive, reap, read CSR0 again; write CSR0 = BABL | CERR | MISS | MERR
//!   | IDON | IENA; restore RAP: **10** accesses for one pass;
//! - IRQ path: mask_and_ack (read IMR, write IMR, specific EOI to the slave
//!   and to the master's cascade input), handler, unmask (write IMR):
//!   **5** PIC accesses on a slave line, 4 on a master line.

use crate::mem::{GuestMemory, OutOfRange};
use crate::pcnet::regs::{bcr20, csr0, csr4, desc, init_block, port, CHIP_ID};
use crate::pio::PortIo;
use abi::SharedMemory;
use thiserror::Error;

/// Receive buffer size, as `pcnet32`'s PKT_BUF_SZ.
pub const BUF_SIZE: usize = 1536;
/// `pcnet32`'s default log2 of the transmit ring length.
pub const TX_LOG2: u8 = 4;
/// `pcnet32`'s default log2 of the receive ring length.
pub const RX_LOG2: u8 = 5;
/// Reads of CSR0 the driver makes waiting for IDON after INIT.
pub const INIT_POLLS: u32 = 100;
/// Passes of the interrupt handler's loop before it gives up (`pcnet32`'s
/// "boguscnt"): a NIC that keeps raising status cannot hold the guest.
pub const MAX_HANDLER_PASSES: u32 = 20;

/// Why the driver could not bring the NIC up.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DriverError {
    /// Nothing answered like a PCnet after a reset.
    #[error("no PCnet at I/O base {base:#x}: CSR0 reads {csr0:#06x} after reset, expected 0x0004 (STOP)")]
    NotFound {
        /// The I/O base probed.
        base: u16,
        /// What CSR0 read.
        csr0: u16,
    },
    /// RAP did not read back what was written (the word I/O check).
    #[error("no PCnet at I/O base {base:#x}: RAP did not latch 88 (read {read})")]
    RapCheck {
        /// The I/O base probed.
        base: u16,
        /// What RAP read.
        read: u16,
    },
    /// The chip is not the Am79C970A.
    #[error("chip ID {0:#010x} is not an Am79C970A (part 0x2621 from AMD)")]
    UnsupportedChip(u32),
    /// IDON never came.
    #[error("the NIC did not set IDON within {0} reads of CSR0 after INIT")]
    InitTimeout(u32),
    /// The driver's structures do not fit the guest memory it was given.
    #[error("driver structures: {0}")]
    Memory(#[from] OutOfRange),
}

/// Why a frame was not queued.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TxError {
    /// Every transmit descriptor is with the NIC.
    #[error("transmit ring full")]
    RingFull,
    /// Empty, or longer than a buffer.
    #[error("frame of {0} bytes: must be 1..={BUF_SIZE}")]
    BadLength(usize),
    /// The driver's own structures lie outside guest memory.
    #[error("guest memory: {0}")]
    Memory(#[from] OutOfRange),
}

/// Where the driver keeps its structures in guest memory: from
/// [`DriverConfig::area`], the init block, the receive ring, the transmit
/// ring, then the receive and transmit buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The init block.
    pub init: u64,
    /// Receive descriptor ring.
    pub rx_ring: u64,
    /// Transmit descriptor ring.
    pub tx_ring: u64,
    /// First receive buffer.
    pub rx_bufs: u64,
    /// First transmit buffer.
    pub tx_bufs: u64,
    /// End of the area.
    pub end: u64,
}

/// Driver parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// The NIC's I/O base.
    pub io_base: u16,
    /// Guest-physical address of the driver's memory (16-byte aligned).
    pub area: u64,
    /// log2 of the receive ring length (0..=9).
    pub rx_log2: u8,
    /// log2 of the transmit ring length (0..=9).
    pub tx_log2: u8,
    /// Receive every frame (CSR15 PROM).
    pub promiscuous: bool,
}

impl DriverConfig {
    /// `pcnet32`'s defaults at `io_base`, structures at `area`.
    pub fn new(io_base: u16, area: u64) -> Self {
        DriverConfig {
            io_base,
            area,
            rx_log2: RX_LOG2,
            tx_log2: TX_LOG2,
            promiscuous: false,
        }
    }

    /// Where the structures go.
    pub fn layout(&self) -> Layout {
        let rx = 1u64 << self.rx_log2.min(9);
        let tx = 1u64 << self.tx_log2.min(9);
        let init = self.area;
        let rx_ring = init + 32;
        let tx_ring = rx_ring + rx * desc::SIZE;
        let rx_bufs = tx_ring + tx * desc::SIZE;
        let tx_bufs = rx_bufs + rx * BUF_SIZE as u64;
        Layout {
            init,
            rx_ring,
            tx_ring,
            rx_bufs,
            tx_bufs,
            end: tx_bufs + tx * BUF_SIZE as u64,
        }
    }
}

/// What probing found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeInfo {
    /// CSR89:CSR88.
    pub chip_id: u32,
    /// The station address from the address PROM.
    pub mac: [u8; 6],
}

/// The driver's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Frames the NIC reported sent.
    pub tx_packets: u64,
    /// Transmit descriptors returned with ERR.
    pub tx_errors: u64,
    /// Frames received.
    pub rx_packets: u64,
    /// Receive descriptors with ERR, chained, or a bad length.
    pub rx_errors: u64,
    /// CSR0 MISS seen.
    pub missed: u64,
    /// CSR0 MERR seen.
    pub mem_errors: u64,
    /// Interrupt handler invocations.
    pub interrupts: u64,
}

/// What one run of the interrupt handler did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IrqWork {
    /// Passes of the acknowledge loop.
    pub passes: u32,
    /// Frames received.
    pub rx: u32,
    /// Transmit descriptors reaped.
    pub tx: u32,
}

/// A register read through RAP and a data port (RDP for CSRs, BDP for BCRs),
/// as `pcnet32`'s word I/O accessors: two port accesses.
fn read_reg<P: PortIo>(io: &mut P, base: u16, data_port: u16, n: u16) -> u16 {
    io.outw(base + port::RAP, n);
    io.inw(base + data_port)
}

/// A register write through RAP and a data port: two port accesses.
fn write_reg<P: PortIo>(io: &mut P, base: u16, data_port: u16, n: u16, v: u16) {
    io.outw(base + port::RAP, n);
    io.outw(base + data_port, v);
}

fn read_csr<P: PortIo>(io: &mut P, base: u16, n: u16) -> u16 {
    read_reg(io, base, port::RDP, n)
}

fn write_csr<P: PortIo>(io: &mut P, base: u16, n: u16, v: u16) {
    write_reg(io, base, port::RDP, n, v)
}

/// A `pcnet32`-like driver instance.
#[derive(Debug)]
pub struct Pcnet32 {
    cfg: DriverConfig,
    layout: Layout,
    mac: [u8; 6],
    rx_count: u32,
    tx_count: u32,
    cur_tx: u32,
    dirty_tx: u32,
    cur_rx: u32,
    scratch: Box<[u8]>,
    stats: DriverStats,
}

impl Pcnet32 {
    /// Probes for an Am79C970A at `base` the way `pcnet32` does in word I/O
    /// mode: reset, CSR0 must read STOP, RAP must latch, chip ID from
    /// CSR88/89, station address from the PROM.
    pub fn probe<P: PortIo>(io: &mut P, base: u16) -> Result<ProbeInfo, DriverError> {
        io.inw(base + port::RESET);
        let c0 = read_csr(io, base, 0);
        if c0 != csr0::STOP {
            return Err(DriverError::NotFound { base, csr0: c0 });
        }
        io.outw(base + port::RAP, 88);
        let read = io.inw(base + port::RAP);
        if read != 88 {
            return Err(DriverError::RapCheck { base, read });
        }
        let chip_id = u32::from(read_csr(io, base, 88)) | (u32::from(read_csr(io, base, 89)) << 16);
        if chip_id & 0xfff != CHIP_ID & 0xfff || (chip_id >> 12) & 0xffff != CHIP_ID >> 12 {
            return Err(DriverError::UnsupportedChip(chip_id));
        }
        let mut mac = [0u8; 6];
        for (i, b) in mac.iter_mut().enumerate() {
            *b = io.inb(base + port::APROM + i as u16);
        }
        Ok(ProbeInfo { chip_id, mac })
    }

    /// Brings the NIC up as `pcnet32_open` does: reset, SWSTYLE 2, BCR2
    /// ASEL, the init block and rings in guest memory, CSR1/CSR2, CSR4,
    /// INIT, wait for IDON, then STRT | IENA. IDON stays set (pcnet32 does not
    /// clear it), so the first interrupt follows at once.
    pub fn open<P: PortIo, M: SharedMemory>(
        io: &mut P,
        mem: &GuestMemory<M>,
        mac: [u8; 6],
        cfg: DriverConfig,
    ) -> Result<Self, DriverError> {
        let layout = cfg.layout();
        let b = cfg.io_base;
        if !mem.contains(layout.init, (layout.end - layout.init) as usize)
            || layout.end > u64::from(u32::MAX)
        {
            return Err(OutOfRange {
                gpa: layout.init,
                len: (layout.end - layout.init) as usize,
                size: mem.size(),
            }
            .into());
        }
        let rx_count = 1u32 << cfg.rx_log2.min(9);
        let tx_count = 1u32 << cfg.tx_log2.min(9);
        io.inw(b + port::RESET);
        write_reg(io, b, port::BDP, 20, bcr20::STYLE_PCNET_PCI);
        let mc = read_reg(io, b, port::BDP, 2) | 0x0002; // ASEL: automatic port selection
        write_reg(io, b, port::BDP, 2, mc);

        // Init block (SSIZE32 layout).
        let mut blk = [0u8; init_block::SIZE];
        let mode: u16 = if cfg.promiscuous { 0x8000 } else { 0 };
        blk[0..2].copy_from_slice(&mode.to_le_bytes());
        blk[init_block::RLEN as usize] = cfg.rx_log2.min(9) << 4;
        blk[init_block::TLEN as usize] = cfg.tx_log2.min(9) << 4;
        blk[4..10].copy_from_slice(&mac);
        blk[20..24].copy_from_slice(&(layout.rx_ring as u32).to_le_bytes());
        blk[24..28].copy_from_slice(&(layout.tx_ring as u32).to_le_bytes());
        mem.write(layout.init, &blk)?;
        for i in 0..u64::from(rx_count) {
            let d = layout.rx_ring + i * desc::SIZE;
            mem.write_u32(d, (layout.rx_bufs + i * BUF_SIZE as u64) as u32)?;
            mem.write_u32(d + 8, 0)?;
            mem.write_u32(d + 12, 0)?;
            mem.write_u32(d + desc::FLAGS, desc::OWN | desc::bcnt_field(BUF_SIZE))?;
        }
        for i in 0..u64::from(tx_count) {
            let d = layout.tx_ring + i * desc::SIZE;
            mem.write(d, &[0u8; 16])?;
        }

        write_csr(io, b, 1, layout.init as u16);
        write_csr(io, b, 2, (layout.init >> 16) as u16);
        write_csr(io, b, 4, csr4::APAD_XMT | csr4::RESET);
        write_csr(io, b, 0, csr0::INIT);
        if !(0..INIT_POLLS).any(|_| read_csr(io, b, 0) & csr0::IDON != 0) {
            return Err(DriverError::InitTimeout(INIT_POLLS));
        }
        write_csr(io, b, 0, csr0::STRT | csr0::INEA);
        Ok(Pcnet32 {
            cfg,
            layout,
            mac,
            rx_count,
            tx_count,
            cur_tx: 0,
            dirty_tx: 0,
            cur_rx: 0,
            scratch: vec![0u8; BUF_SIZE].into_boxed_slice(),
            stats: DriverStats::default(),
        })
    }

    /// Stops the NIC (CSR0 STOP).
    pub fn close<P: PortIo>(&mut self, io: &mut P) {
        write_csr(io, self.cfg.io_base, 0, csr0::STOP);
    }

    /// The station address the driver programmed.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Where the structures are.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Counters.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// Frames queued and not yet reaped.
    pub fn tx_in_flight(&self) -> u32 {
        self.cur_tx.wrapping_sub(self.dirty_tx)
    }

    /// Queues `frame` and demands transmission, as `pcnet32_start_xmit`:
    /// the descriptor's address and length, then its ownership, then
    /// CSR0 = IENA | TDMD.
    pub fn transmit<P: PortIo, M: SharedMemory>(
        &mut self,
        io: &mut P,
        mem: &GuestMemory<M>,
        frame: &[u8],
    ) -> Result<(), TxError> {
        if frame.is_empty() || frame.len() > BUF_SIZE {
            return Err(TxError::BadLength(frame.len()));
        }
        if self.tx_in_flight() >= self.tx_count {
            return Err(TxError::RingFull);
        }
        let entry = u64::from(self.cur_tx % self.tx_count);
        let buf = self.layout.tx_bufs + entry * BUF_SIZE as u64;
        let d = self.layout.tx_ring + entry * desc::SIZE;
        mem.write(buf, frame)?;
        mem.write_u32(d, buf as u32)?;
        mem.write_u32(d + 8, 0)?;
        mem.write_u32(
            d + desc::FLAGS,
            desc::OWN | desc::STP | desc::ENP | desc::bcnt_field(frame.len()),
        )?;
        self.cur_tx = self.cur_tx.wrapping_add(1);
        write_csr(io, self.cfg.io_base, 0, csr0::INEA | csr0::TDMD);
        Ok(())
    }

    /// Demands transmission of the frames queued again (CSR0 = IENA |
    /// TDMD), for a chip that missed the earlier demand.
    pub fn demand_transmit<P: PortIo>(&self, io: &mut P) {
        write_csr(io, self.cfg.io_base, 0, csr0::INEA | csr0::TDMD);
    }

    /// The interrupt handler (`pcnet32_interrupt`, non-NAPI): acknowledges
    /// every source, receives into `on_rx`, reaps transmitted descriptors,
    /// and re-enables interrupts.
    pub fn interrupt<P: PortIo, M: SharedMemory>(
        &mut self,
        io: &mut P,
        mem: &GuestMemory<M>,
        on_rx: &mut dyn FnMut(&[u8]),
    ) -> IrqWork {
        let b = self.cfg.io_base;
        self.stats.interrupts += 1;
        let mut work = IrqWork::default();
        let rap = io.inw(b + port::RAP);
        let mut c0 = read_csr(io, b, 0);
        // Every cause, IDON's too (Linux's pcnet32 loops on 0x8f00): the
        // loop ends on a read that shows none, so the line has fallen and the
        // next cause makes a new edge for the edge-triggered 8259. Left out,
        // a frame landing while IDON was handled kept RINT, and the line,
        // up for good.
        while c0 & (csr0::ERR | csr0::RINT | csr0::TINT | csr0::IDON) != 0
            && work.passes < MAX_HANDLER_PASSES
        {
            work.passes += 1;
            // Acknowledge what is set, leaving IENA and the commands out.
            write_csr(
                io,
                b,
                0,
                c0 & !(csr0::INEA | csr0::TDMD | csr0::STOP | csr0::STRT | csr0::INIT),
            );
            if c0 & csr0::RINT != 0 {
                work.rx += self.receive(mem, on_rx);
            }
            if c0 & csr0::TINT != 0 {
                work.tx += self.reap(mem);
            }
            if c0 & csr0::MISS != 0 {
                self.stats.missed += 1;
            }
            if c0 & csr0::MERR != 0 {
                self.stats.mem_errors += 1;
            }
            c0 = read_csr(io, b, 0);
        }
        // Clear any other interrupt and set the enable again.
        write_csr(
            io,
            b,
            0,
            csr0::BABL | csr0::CERR | csr0::MISS | csr0::MERR | csr0::IDON | csr0::INEA,
        );
        io.outw(b + port::RAP, rap);
        work
    }

    fn receive<M: SharedMemory>(
        &mut self,
        mem: &GuestMemory<M>,
        on_rx: &mut dyn FnMut(&[u8]),
    ) -> u32 {
        let mut n = 0;
        for _ in 0..self.rx_count {
            let entry = u64::from(self.cur_rx % self.rx_count);
            let d = self.layout.rx_ring + entry * desc::SIZE;
            let Ok(flags) = mem.read_u32(d + desc::FLAGS) else {
                break;
            };
            if flags & desc::OWN != 0 {
                break;
            }
            let whole = desc::STP | desc::ENP;
            let mcnt = mem.read_u32(d + 8).map(|m| (m & desc::rx::MCNT) as usize);
            match mcnt {
                Ok(m) if flags & (whole | desc::ERR) == whole && (4..=BUF_SIZE).contains(&m) => {
                    let len = m - 4; // the FCS
                    let buf = self.layout.rx_bufs + entry * BUF_SIZE as u64;
                    if mem.read(buf, &mut self.scratch[..len]).is_ok() {
                        self.stats.rx_packets += 1;
                        n += 1;
                        on_rx(&self.scratch[..len]);
                    }
                }
                _ => self.stats.rx_errors += 1,
            }
            // Re-arm: the length, then ownership.
            let _ = mem.write_u32(d + 8, 0);
            let _ = mem.write_u32(d + desc::FLAGS, desc::OWN | desc::bcnt_field(BUF_SIZE));
            self.cur_rx = self.cur_rx.wrapping_add(1);
        }
        n
    }

    fn reap<M: SharedMemory>(&mut self, mem: &GuestMemory<M>) -> u32 {
        let mut n = 0;
        while self.dirty_tx != self.cur_tx {
            let entry = u64::from(self.dirty_tx % self.tx_count);
            let d = self.layout.tx_ring + entry * desc::SIZE;
            let Ok(flags) = mem.read_u32(d + desc::FLAGS) else {
                break;
            };
            if flags & desc::OWN != 0 {
                break;
            }
            if flags & desc::ERR != 0 {
                self.stats.tx_errors += 1;
            } else {
                self.stats.tx_packets += 1;
            }
            let _ = mem.write_u32(d + desc::FLAGS, 0);
            self.dirty_tx = self.dirty_tx.wrapping_add(1);
            n += 1;
        }
        n
    }
}

/// IRQ vector of the master's IR0, as Linux programs ICW2.
pub const MASTER_VECTOR: u8 = 0x20;
/// IRQ vector of the slave's IR0 (IRQ 8).
pub const SLAVE_VECTOR: u8 = 0x28;

/// The guest kernel's view of the 8259A pair (Linux `i8259.c`): a cached
/// mask, the initialization sequence, and the per-IRQ mask-and-ack and
/// unmask that every interrupt pays for.
#[derive(Debug, Clone)]
pub struct GuestPic {
    /// Bit per IRQ, set when masked (Linux's cached_irq_mask).
    cached_mask: u16,
    spurious: u64,
    handled: u64,
}

impl GuestPic {
    /// `init_8259A`: mask all, ICW1–ICW4 to both (vectors 0x20 and 0x28,
    /// slave on IR2, 8086 mode, normal EOI), then the cached masks with the
    /// cascade input open.
    pub fn init<P: PortIo>(io: &mut P) -> Self {
        io.outb(0x21, 0xff);
        io.outb(0xa1, 0xff);
        io.outb(0x20, 0x11);
        io.outb(0x21, MASTER_VECTOR);
        io.outb(0x21, 0x04);
        io.outb(0x21, 0x01);
        io.outb(0xa0, 0x11);
        io.outb(0xa1, SLAVE_VECTOR);
        io.outb(0xa1, 0x02);
        io.outb(0xa1, 0x01);
        let pic = GuestPic {
            cached_mask: !(1 << 2),
            spurious: 0,
            handled: 0,
        };
        io.outb(0x21, pic.cached_mask as u8);
        io.outb(0xa1, (pic.cached_mask >> 8) as u8);
        pic
    }

    fn write_mask<P: PortIo>(&self, io: &mut P, irq: u8) {
        if irq & 8 != 0 {
            io.outb(0xa1, (self.cached_mask >> 8) as u8);
        } else {
            io.outb(0x21, self.cached_mask as u8);
        }
    }

    /// `enable_8259A_irq`: one IMR write.
    pub fn enable_irq<P: PortIo>(&mut self, io: &mut P, irq: u8) {
        self.cached_mask &= !(1 << (irq & 15));
        self.write_mask(io, irq & 15);
    }

    /// `disable_8259A_irq`: one IMR write.
    pub fn disable_irq<P: PortIo>(&mut self, io: &mut P, irq: u8) {
        self.cached_mask |= 1 << (irq & 15);
        self.write_mask(io, irq & 15);
    }

    /// Interrupts handled and spurious ones seen.
    pub fn counts(&self) -> (u64, u64) {
        (self.handled, self.spurious)
    }

    /// Whether `irq` is really in service (`i8259A_irq_real`): OCW3 to read
    /// the ISR, the read, OCW3 back to the IRR.
    fn irq_real<P: PortIo>(&self, io: &mut P, irq: u8) -> bool {
        let (cmd, bit) = if irq & 8 != 0 {
            (0xa0, irq - 8)
        } else {
            (0x20, irq)
        };
        io.outb(cmd, 0x0b);
        let isr = io.inb(cmd);
        io.outb(cmd, 0x0a);
        isr & (1 << bit) != 0
    }

    /// `mask_and_ack_8259A`: mask the line, read the IMR first (a dummy
    /// read Linux keeps), then specific EOIs. Returns false for a spurious
    /// interrupt (the line was already masked and is not in service).
    fn mask_and_ack<P: PortIo>(&mut self, io: &mut P, irq: u8) -> bool {
        let bit = 1u16 << irq;
        if self.cached_mask & bit != 0 && !self.irq_real(io, irq) {
            self.spurious += 1;
            if irq & 8 != 0 {
                // The master saw the cascade input; end that.
                io.outb(0x20, 0x60 + 2);
            }
            return false;
        }
        self.cached_mask |= bit;
        if irq & 8 != 0 {
            io.inb(0xa1);
            io.outb(0xa1, (self.cached_mask >> 8) as u8);
            io.outb(0xa0, 0x60 + (irq & 7));
            io.outb(0x20, 0x60 + 2);
        } else {
            io.inb(0x21);
            io.outb(0x21, self.cached_mask as u8);
            io.outb(0x20, 0x60 + irq);
        }
        true
    }

    /// `do_IRQ` for an 8259A vector: mask and acknowledge, run `handler`
    /// with the IRQ number, unmask. Returns whether the handler ran.
    pub fn do_irq<P: PortIo>(
        &mut self,
        io: &mut P,
        vector: u8,
        handler: impl FnOnce(&mut P, u8),
    ) -> bool {
        let Some(irq) = vector.checked_sub(MASTER_VECTOR).filter(|&i| i < 16) else {
            self.spurious += 1;
            return false;
        };
        if !self.mask_and_ack(io, irq) {
            return false;
        }
        self.handled += 1;
        handler(io, irq);
        self.enable_irq(io, irq);
        true
    }
}
