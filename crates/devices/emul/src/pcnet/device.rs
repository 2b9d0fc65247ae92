//! The Am79C970A device model: registers, initialization, and the transmit
//! and receive descriptor machinery, over guest memory.
//!
//! Every value the guest writes (registers, the init block, descriptors,
//! buffer addresses and lengths) is hostile. The model never panics on it,
//! never reads or writes outside guest memory (an address outside is CSR0
//! MERR), and bounds all work: one transmit poll examines at most one ring's
//! worth of descriptors, one received frame uses at most one ring's worth.
//! Nothing is allocated per packet: the transmit gather buffer is allocated
//! once.

use super::regs::{bcr20, csr0, csr15, csr3, csr4, desc, frame, init_block, port, CHIP_ID};
use crate::crc;
use crate::mem::GuestMemory;
use crate::pio::IoWidth;
use abi::SharedMemory;

/// Where transmitted frames go: the host side of the NIC (VMNet, a TAP, a
/// test's collector). Frames come without the FCS.
pub trait FrameSink {
    /// Takes one frame. The slice is valid only for the call.
    fn send_frame(&mut self, frame: &[u8]);
}

impl<F: FnMut(&[u8])> FrameSink for F {
    fn send_frame(&mut self, frame: &[u8]) {
        self(frame)
    }
}

/// A sink that keeps every frame, for tests and tools (it allocates per
/// frame, so it is not for the data path).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FrameLog(pub Vec<Vec<u8>>);

impl FrameSink for FrameLog {
    fn send_frame(&mut self, frame: &[u8]) {
        self.0.push(frame.to_vec());
    }
}

/// Static configuration of one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcnetConfig {
    /// The station address in the address PROM.
    pub mac: [u8; 6],
    /// Whether a write of CSR0 TDMD transmits at once (the chip's
    /// behaviour). When false, TDMD only latches and frames wait in the ring
    /// for [`Pcnet::poll`]: the hook for Sugerman §3.3's send combining,
    /// which leaves queued packets in the Lance's transmit ring.
    pub transmit_on_demand: bool,
}

impl Default for PcnetConfig {
    fn default() -> Self {
        PcnetConfig {
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            transmit_on_demand: true,
        }
    }
}

/// What happened to a frame offered to [`Pcnet::receive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxOutcome {
    /// Placed in the guest's buffers using this many descriptors; RINT set.
    Delivered {
        /// Descriptors used (more than one when the frame was chained).
        descriptors: u32,
    },
    /// The address filter rejected it.
    Filtered,
    /// The receiver is off (stopped, or CSR15 DRX).
    NotRunning,
    /// No receive descriptor was owned by the NIC: CSR0 MISS.
    Missed,
    /// Dropped for the stated reason.
    Dropped(RxDrop),
}

/// Why a received frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxDrop {
    /// Shorter than an Ethernet header.
    Runt,
    /// Longer than [`frame::MAX_RX`].
    Oversize,
    /// The buffers ran out mid-frame: the next descriptor was not owned, or
    /// the frame went round the whole ring (RMD1 BUFF).
    Chain,
    /// A descriptor or buffer lies outside guest memory (CSR0 MERR).
    Memory,
}

/// Counters, named for what an operator asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Frames handed to the sink.
    pub tx_frames: u64,
    /// Bytes handed to the sink.
    pub tx_bytes: u64,
    /// CSR0 writes with TDMD.
    pub tx_demands: u64,
    /// Transmit ring scans (on demand or by polling).
    pub tx_polls: u64,
    /// Frames sent with BABL (longer than 1514 bytes before FCS).
    pub tx_babble: u64,
    /// Frames dropped as longer than the gather buffer.
    pub tx_oversize: u64,
    /// Frames dropped for having no bytes.
    pub tx_empty: u64,
    /// Frames dropped for a broken chain: no STP, the next buffer not owned,
    /// or no ENP within the ring.
    pub tx_chain_errors: u64,
    /// Frames placed in guest buffers.
    pub rx_frames: u64,
    /// Bytes placed (without FCS).
    pub rx_bytes: u64,
    /// Frames missed for lack of an owned descriptor (MISS).
    pub rx_missed: u64,
    /// Frames rejected by the address filter.
    pub rx_filtered: u64,
    /// Frames offered while the receiver was off.
    pub rx_not_running: u64,
    /// Frames dropped as runts or oversize.
    pub rx_bad_length: u64,
    /// Frames dropped mid-chain (BUFF).
    pub rx_chain_errors: u64,
    /// Guest-physical addresses outside guest memory (MERR).
    pub mem_errors: u64,
    /// Initializations completed (IDON).
    pub inits: u64,
    /// Initializations refused for an unsupported software style.
    pub init_unsupported_style: u64,
    /// Software resets (reads of the RESET port).
    pub resets: u64,
    /// Register writes ignored: read-only, unknown, or allowed only while
    /// stopped.
    pub ignored_writes: u64,
    /// Port accesses the model does not implement (wrong width, unused
    /// offsets, DWIO, APROM writes).
    pub bad_port_accesses: u64,
}

/// The two descriptor layouts of 32-bit software styles.
/// How gathering a transmit frame ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxEnd {
    /// A descriptor with ENP closed the frame.
    Complete,
    /// The chain broke: no STP first, a descriptor the guest does not own,
    /// or a ring's worth without ENP.
    Chain,
    /// A descriptor or buffer lies outside guest memory.
    Memory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// SWSTYLE 2: word 0 buffer address, word 2 status/count.
    Pci,
    /// SWSTYLE 3: words 0 and 2 swapped.
    PciII,
}

impl Style {
    fn addr_off(self) -> u64 {
        match self {
            Style::Pci => 0,
            Style::PciII => 8,
        }
    }
    fn misc_off(self) -> u64 {
        match self {
            Style::Pci => 8,
            Style::PciII => 0,
        }
    }
}

/// A descriptor ring: base address, length (0 means none) and the index
/// of the next descriptor the NIC will look at (always below `len`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ring {
    /// Guest-physical address of descriptor 0 (16-byte aligned).
    pub base: u32,
    /// Number of descriptors (0..=65535).
    pub len: u32,
    /// The NIC's current descriptor.
    pub idx: u32,
}

impl Ring {
    fn addr(&self, i: u32) -> u64 {
        u64::from(self.base) + u64::from(i % self.len.max(1)) * desc::SIZE
    }
    fn set_len(&mut self, len: u32) {
        self.len = len;
        if self.idx >= len {
            self.idx = 0;
        }
    }
}

/// Largest frame the transmit gather buffer holds; longer frames are
/// dropped (a BCNT is at most 4095, so only chains get here).
pub const TX_BUFFER: usize = 4096;

/// The Am79C970A.
pub struct Pcnet<M, S> {
    mem: GuestMemory<M>,
    sink: S,
    cfg: PcnetConfig,
    prom: [u8; 16],
    rap: u16,
    /// CSR0's stored bits (ERR and INTR are computed).
    csr0: u16,
    intr: bool,
    csr1: u16,
    csr2: u16,
    csr3: u16,
    csr4: u16,
    csr15: u16,
    padr: [u8; 6],
    ladrf: u64,
    missed_count: u16,
    /// CSRs with no modelled behaviour: stored and read back.
    plain: [u16; 128],
    bcr: [u16; 32],
    style: Style,
    rx: Ring,
    tx: Ring,
    tx_buf: Box<[u8]>,
    stats: NicStats,
}

impl<M: SharedMemory, S: FrameSink> Pcnet<M, S> {
    /// A NIC after H_RESET, mastering `mem` and sending into `sink`.
    pub fn new(mem: GuestMemory<M>, sink: S, cfg: PcnetConfig) -> Self {
        let mut prom = [0u8; 16];
        prom[..6].copy_from_slice(&cfg.mac);
        // Bytes 14 and 15 hold 0x57 ('W'), which drivers use as a signature.
        prom[14] = 0x57;
        prom[15] = 0x57;
        let mut nic = Pcnet {
            mem,
            sink,
            cfg,
            prom,
            rap: 0,
            csr0: 0,
            intr: false,
            csr1: 0,
            csr2: 0,
            csr3: 0,
            csr4: 0,
            csr15: 0,
            padr: cfg.mac,
            ladrf: 0,
            missed_count: 0,
            plain: [0; 128],
            bcr: [0; 32],
            style: Style::Pci,
            rx: Ring::default(),
            tx: Ring::default(),
            tx_buf: vec![0u8; TX_BUFFER].into_boxed_slice(),
            stats: NicStats::default(),
        };
        nic.hard_reset();
        nic
    }

    /// H_RESET (PCI RST#): every register to its power-on value.
    pub fn hard_reset(&mut self) {
        // BCR defaults after H_RESET (datasheet, "BCR" register descriptions).
        self.bcr = [0; 32];
        self.bcr[0] = 0x0005; // MSRDA
        self.bcr[1] = 0x0005; // MSWRA
        self.bcr[2] = 0x0002; // MC: ASEL
        self.bcr[4] = 0x00c0; // LNKST
        self.bcr[5] = 0x0084; // LED1
        self.bcr[6] = 0x0088; // LED2
        self.bcr[7] = 0x0090; // LED3
        self.bcr[18] = 0x9001; // BSBC
        self.bcr[19] = 0x0002; // EECAS
        self.bcr[20] = bcr20::CSRPCNET; // SWSTYLE 0
        self.bcr[22] = 0xff06; // PCI latency
        self.plain = [0; 128];
        self.padr = self.cfg.mac;
        self.ladrf = 0;
        self.csr1 = 0;
        self.csr2 = 0;
        self.rx = Ring::default();
        self.tx = Ring::default();
        self.style = Style::Pci;
        self.soft_reset();
    }

    /// S_RESET (a read of the RESET port): CSR0 = STOP, CSR3 and CSR4 to
    /// their reset values, RAP to 0. Ring registers and BCRs are kept.
    pub fn soft_reset(&mut self) {
        self.rap = 0;
        self.csr0 = csr0::STOP;
        self.csr3 = 0;
        self.csr4 = csr4::RESET;
        self.csr15 = 0;
        self.missed_count = 0;
        self.plain[5] = 0;
        self.update_irq();
    }

    /// The INTA output: IENA and an unmasked interrupt source
    /// (datasheet, CSR0 bit 7 INTR and bit 6 IENA).
    pub fn irq_level(&self) -> bool {
        self.intr && self.csr0 & csr0::INEA != 0
    }

    /// Counters.
    pub fn stats(&self) -> NicStats {
        self.stats
    }

    /// The frame sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The frame sink, mutably.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// The guest memory the NIC masters.
    pub fn memory(&self) -> &GuestMemory<M> {
        &self.mem
    }

    /// The receive ring as initialized.
    pub fn rx_ring(&self) -> Ring {
        self.rx
    }

    /// The transmit ring as initialized.
    pub fn tx_ring(&self) -> Ring {
        self.tx
    }

    /// The register address port's value.
    pub fn rap(&self) -> u16 {
        self.rap
    }

    fn stopped(&self) -> bool {
        self.csr0 & csr0::STOP != 0
    }

    fn update_irq(&mut self) {
        let c0 = self.csr0
            & !self.csr3
            & (csr0::BABL | csr0::MISS | csr0::MERR | csr0::RINT | csr0::TINT | csr0::IDON);
        let c4 = self.csr4;
        let masked = |bit: u16, mask: u16| c4 & bit != 0 && c4 & mask == 0;
        self.intr = c0 != 0
            || c4 & csr4::UINT != 0
            || masked(csr4::MFCO, csr4::MFCOM)
            || masked(csr4::RCVCCO, csr4::RCVCCOM)
            || masked(csr4::TXSTRT, csr4::TXSTRTM)
            || masked(csr4::JAB, csr4::JABM);
    }

    fn csr0_value(&self) -> u16 {
        let mut v = self.csr0;
        if v & (csr0::BABL | csr0::CERR | csr0::MISS | csr0::MERR) != 0 {
            v |= csr0::ERR;
        }
        if self.intr {
            v |= csr0::INTR;
        }
        v
    }

    // ---- port I/O ----------------------------------------------------------

    /// An IN at `offset` from the I/O base (word I/O mode).
    pub fn io_read(&mut self, offset: u16, width: IoWidth) -> u32 {
        match (offset, width) {
            (o, w) if o < port::RDP => {
                let mut v = 0u32;
                for i in 0..w.bytes() {
                    let b = self.prom.get(usize::from(o) + i).copied().unwrap_or(0xff);
                    v |= u32::from(b) << (8 * i);
                }
                v
            }
            (port::RDP, IoWidth::Word) => u32::from(self.read_csr(self.rap)),
            (port::RAP, IoWidth::Word) => u32::from(self.rap),
            (port::RESET, IoWidth::Word) => {
                self.stats.resets += 1;
                self.soft_reset();
                0
            }
            (port::BDP, IoWidth::Word) => u32::from(self.read_bcr(self.rap)),
            _ => {
                self.stats.bad_port_accesses += 1;
                width.all_ones()
            }
        }
    }

    /// An OUT at `offset` from the I/O base (word I/O mode).
    pub fn io_write(&mut self, offset: u16, width: IoWidth, value: u32) {
        let v = value as u16;
        match (offset, width) {
            (port::RDP, IoWidth::Word) => self.write_csr(self.rap, v),
            // RAP bits 7:0 select the register; the rest are reserved.
            (port::RAP, IoWidth::Word) => self.rap = v & 0x00ff,
            // Writes to the reset port have no effect.
            (port::RESET, IoWidth::Word) => {}
            (port::BDP, IoWidth::Word) => self.write_bcr(self.rap, v),
            // Includes a DWORD write to RDP, which would switch a real chip
            // to DWIO mode: not modelled (pcnet32 uses word I/O on this chip).
            _ => self.stats.bad_port_accesses += 1,
        }
    }

    // ---- registers ---------------------------------------------------------

    /// Reads CSR `n` (no side effects).
    pub fn read_csr(&self, n: u16) -> u16 {
        let lo = |x: u32| x as u16;
        let hi = |x: u32| (x >> 16) as u16;
        match n {
            0 => self.csr0_value(),
            1 => self.csr1,
            2 => self.csr2,
            3 => self.csr3,
            4 => self.csr4,
            8..=11 => (self.ladrf >> (16 * (n - 8))) as u16,
            12..=14 => {
                let i = usize::from(n - 12) * 2;
                u16::from_le_bytes([self.padr[i], self.padr[i + 1]])
            }
            15 => self.csr15,
            24 => lo(self.rx.base),
            25 => hi(self.rx.base),
            30 => lo(self.tx.base),
            31 => hi(self.tx.base),
            58 => self.read_bcr(20),
            // Ring counters count down to 1 at the last descriptor.
            72 => (self.rx.len - self.rx.idx) as u16,
            74 => (self.tx.len - self.tx.idx) as u16,
            76 => (self.rx.len as u16).wrapping_neg(),
            78 => (self.tx.len as u16).wrapping_neg(),
            88 => lo(CHIP_ID),
            89 => hi(CHIP_ID),
            112 => self.missed_count,
            n if usize::from(n) < self.plain.len() => self.plain[usize::from(n)],
            _ => 0,
        }
    }

    /// Writes CSR `n` with the register's semantics.
    pub fn write_csr(&mut self, n: u16, v: u16) {
        let stopped = self.stopped();
        match n {
            0 => self.write_csr0(v),
            3 => {
                self.csr3 = v & csr3::WRITABLE;
                self.update_irq();
            }
            4 => self.write_csr4(v),
            58 => self.write_bcr(20, v),
            // Read-only: the chip ID and ring counters (not modelled as
            // writable).
            72 | 74 | 88 | 89 => self.stats.ignored_writes += 1,
            // The rest of the modelled registers are writable only while
            // stopped (datasheet: "Read/Write accessible only when either
            // the STOP or the SPND bit is set"; SPND is not modelled).
            1 | 2 | 8..=15 | 24 | 25 | 30 | 31 | 76 | 78 | 112 if !stopped => {
                self.stats.ignored_writes += 1
            }
            1 => self.csr1 = v,
            2 => self.csr2 = v,
            8..=11 => {
                let sh = 16 * u32::from(n - 8);
                self.ladrf = (self.ladrf & !(0xffff << sh)) | (u64::from(v) << sh);
            }
            12..=14 => {
                let i = usize::from(n - 12) * 2;
                self.padr[i..i + 2].copy_from_slice(&v.to_le_bytes());
            }
            15 => self.csr15 = v,
            24 => self.rx.base = (self.rx.base & 0xffff_0000) | u32::from(v & 0xfff0),
            25 => self.rx.base = (self.rx.base & 0xffff) | (u32::from(v) << 16),
            30 => self.tx.base = (self.tx.base & 0xffff_0000) | u32::from(v & 0xfff0),
            31 => self.tx.base = (self.tx.base & 0xffff) | (u32::from(v) << 16),
            76 => self.rx.set_len(u32::from(v.wrapping_neg())),
            78 => self.tx.set_len(u32::from(v.wrapping_neg())),
            112 => self.missed_count = v,
            n if usize::from(n) < self.plain.len() => self.plain[usize::from(n)] = v,
            _ => self.stats.ignored_writes += 1,
        }
    }

    /// Reads BCR `n`.
    pub fn read_bcr(&self, n: u16) -> u16 {
        self.bcr.get(usize::from(n)).copied().unwrap_or(0)
    }

    /// Writes BCR `n`.
    pub fn write_bcr(&mut self, n: u16, v: u16) {
        match n {
            0 | 1 => self.stats.ignored_writes += 1,
            20 => {
                // SSIZE32 and CSRPCNET follow the style (datasheet, BCR20):
                // style 0 is 16-bit, style 1 (ILACC) is not PCnet-style.
                let style = v & bcr20::SWSTYLE;
                if style > 3 {
                    self.stats.ignored_writes += 1;
                    return;
                }
                let mut r = style;
                if style != 0 {
                    r |= bcr20::SSIZE32;
                }
                if style != 1 {
                    r |= bcr20::CSRPCNET;
                }
                self.bcr[20] = r;
            }
            n if usize::from(n) < self.bcr.len() => self.bcr[usize::from(n)] = v,
            _ => self.stats.ignored_writes += 1,
        }
    }

    fn write_csr0(&mut self, v: u16) {
        let before = self.csr0;
        self.csr0 &= !(v & csr0::W1C);
        if v & csr0::STOP != 0 {
            // STOP overrides INIT and STRT and clears every other bit.
            self.csr0 = csr0::STOP;
            self.csr4 &= !(csr4::W1C | csr4::UINTCMD);
            self.update_irq();
            return;
        }
        self.csr0 = (self.csr0 & !csr0::INEA) | (v & csr0::INEA);
        // INIT and STRT act when written as one while clear; with both,
        // initialization comes first.
        if v & csr0::INIT != 0 && before & csr0::INIT == 0 {
            self.initialize();
        }
        if v & csr0::STRT != 0 && self.csr0 & csr0::STRT == 0 {
            self.csr0 = (self.csr0 | csr0::STRT) & !csr0::STOP;
            if self.csr15 & csr15::DTX == 0 {
                self.csr0 |= csr0::TXON;
            }
            if self.csr15 & csr15::DRX == 0 {
                self.csr0 |= csr0::RXON;
            }
        }
        if v & csr0::TDMD != 0 && self.csr0 & csr0::TXON != 0 {
            self.stats.tx_demands += 1;
            self.csr0 |= csr0::TDMD;
            if self.cfg.transmit_on_demand {
                self.transmit();
            }
        }
        self.update_irq();
    }

    fn write_csr4(&mut self, v: u16) {
        const RW: u16 = 0xfd15;
        let status = self.csr4 & csr4::W1C & !(v & csr4::W1C);
        self.csr4 = (v & RW) | status;
        if v & csr4::UINTCMD != 0 {
            self.csr4 |= csr4::UINT;
        }
        self.update_irq();
    }

    fn mem_error(&mut self) {
        self.stats.mem_errors += 1;
        self.csr0 |= csr0::MERR;
    }

    /// Reads the init block (datasheet, "Initialization Block", SSIZE32 = 1)
    /// at CSR2:CSR1 and loads it; sets IDON.
    fn initialize(&mut self) {
        let style = match self.bcr[20] & bcr20::SWSTYLE {
            bcr20::STYLE_PCNET_PCI => Style::Pci,
            bcr20::STYLE_PCNET_PCI_II => Style::PciII,
            _ => {
                // 16-bit structures (style 0) and ILACC (style 1) are not
                // modelled: no IDON, the guest's wait times out.
                self.stats.init_unsupported_style += 1;
                return;
            }
        };
        let iadr = u64::from(self.csr1) | (u64::from(self.csr2) << 16);
        let mut b = [0u8; init_block::SIZE];
        if self.mem.read(iadr, &mut b).is_err() {
            self.mem_error();
            return;
        }
        let at = |o: u64| o as usize;
        let u32_at =
            |o: u64| u32::from_le_bytes([b[at(o)], b[at(o) + 1], b[at(o) + 2], b[at(o) + 3]]);
        let log2_len = |byte: u8| 1u32 << (byte >> 4).min(init_block::MAX_LOG2_LEN);
        self.csr15 = u16::from_le_bytes([b[0], b[1]]);
        self.rx.set_len(log2_len(b[at(init_block::RLEN)]));
        self.tx.set_len(log2_len(b[at(init_block::TLEN)]));
        self.padr
            .copy_from_slice(&b[at(init_block::PADR)..at(init_block::PADR) + 6]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&b[at(init_block::LADRF)..at(init_block::LADRF) + 8]);
        self.ladrf = u64::from_le_bytes(l);
        // Descriptors are 16-byte aligned in 32-bit styles; the low bits of
        // RDRA and TDRA are ignored.
        self.rx.base = u32_at(init_block::RDRA) & !0xf;
        self.tx.base = u32_at(init_block::TDRA) & !0xf;
        self.rx.idx = 0;
        self.tx.idx = 0;
        self.style = style;
        self.stats.inits += 1;
        self.csr0 = (self.csr0 | csr0::INIT | csr0::IDON) & !csr0::STOP;
    }

    // ---- transmit ----------------------------------------------------------

    /// A poll of the transmit ring, as the chip's poll timer does every
    /// 1.6 ms unless CSR4 DPOLL is set, or as a latched TDMD asks. The
    /// device model calls it on its timer (or to flush frames held back by
    /// `transmit_on_demand = false`).
    pub fn poll(&mut self) {
        if self.csr0 & csr0::TDMD != 0 || self.csr4 & csr4::DPOLL == 0 {
            self.transmit();
        }
        self.update_irq();
    }

    /// Whether frames may be waiting: a TDMD latched but not yet served.
    pub fn transmit_pending(&self) -> bool {
        self.csr0 & csr0::TDMD != 0
    }

    /// Sends every complete frame the guest has handed over, examining at
    /// most one ring's worth of descriptors.
    fn transmit(&mut self) {
        self.csr0 &= !csr0::TDMD;
        if self.csr0 & csr0::TXON == 0 || self.tx.len == 0 {
            return;
        }
        self.stats.tx_polls += 1;
        let mut budget = self.tx.len;
        while budget > 0 && self.transmit_frame(&mut budget) {}
    }

    /// Gathers and sends the frame at the ring's current descriptor.
    /// Returns whether to go on with the next one.
    fn transmit_frame(&mut self, budget: &mut u32) -> bool {
        let ring = self.tx;
        let first = ring.idx;
        let Ok(flags) = self.mem.read_u32(ring.addr(first) + desc::FLAGS) else {
            self.mem_error();
            return false;
        };
        if flags & desc::OWN == 0 {
            return false;
        }
        let (end, n, len) = self.gather_tx(first, flags, budget);
        let bad = match end {
            TxEnd::Complete => !self.send_tx(len),
            TxEnd::Memory => {
                self.mem_error();
                true
            }
            TxEnd::Chain => {
                self.stats.tx_chain_errors += 1;
                true
            }
        };
        self.give_back_tx(first, n, bad, end);
        self.tx.idx = (first + n) % ring.len;
        self.csr0 |= csr0::TINT;
        end == TxEnd::Complete
    }

    /// Copies the chain of owned descriptors starting at `first` (whose
    /// flags are `flags`) into `tx_buf`, one descriptor of `budget` each.
    /// Returns how the chain ended, the descriptors it took and the frame's
    /// length, which may exceed `tx_buf` (the excess is not copied).
    fn gather_tx(&mut self, first: u32, mut flags: u32, budget: &mut u32) -> (TxEnd, u32, usize) {
        let ring = self.tx;
        let style = self.style;
        let mut n = 0u32;
        let mut len = 0usize;
        let end = loop {
            let d = ring.addr(first + n);
            n += 1;
            *budget -= 1;
            if n == 1 && flags & desc::STP == 0 {
                break TxEnd::Chain;
            }
            let Ok(addr) = self.mem.read_u32(d + style.addr_off()) else {
                break TxEnd::Memory;
            };
            let blen = desc::bcnt_len(flags);
            if len + blen <= self.tx_buf.len()
                && self
                    .mem
                    .read(u64::from(addr), &mut self.tx_buf[len..len + blen])
                    .is_err()
            {
                break TxEnd::Memory;
            }
            len = len.saturating_add(blen);
            if flags & desc::ENP != 0 {
                break TxEnd::Complete;
            }
            if *budget == 0 || n >= ring.len {
                break TxEnd::Chain;
            }
            match self.mem.read_u32(ring.addr(first + n) + desc::FLAGS) {
                Ok(f) if f & desc::OWN != 0 => flags = f,
                Ok(_) => break TxEnd::Chain,
                Err(_) => break TxEnd::Memory,
            }
        };
        (end, n, len)
    }

    /// Sends the complete frame of `len` bytes gathered in `tx_buf`, padded
    /// to the minimum when CSR4 APAD_XMT asks; a frame longer than the
    /// Ethernet maximum goes out with BABL. Returns false when it is
    /// refused: larger than `tx_buf`, or empty.
    fn send_tx(&mut self, mut len: usize) -> bool {
        if len > self.tx_buf.len() {
            self.stats.tx_oversize += 1;
            return false;
        }
        if self.csr4 & csr4::APAD_XMT != 0 && len < frame::MIN {
            self.tx_buf[len..frame::MIN].fill(0);
            len = frame::MIN;
        }
        if len == 0 {
            self.stats.tx_empty += 1;
            return false;
        }
        if len > frame::MAX {
            self.stats.tx_babble += 1;
            self.csr0 |= csr0::BABL;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += len as u64;
        self.csr4 |= csr4::TXSTRT;
        self.sink.send_frame(&self.tx_buf[..len]);
        true
    }

    /// Hands the `n` descriptors from `first` back to the guest: errors
    /// (when `bad`) on the last one, the STP descriptor's ownership last of
    /// all.
    fn give_back_tx(&mut self, first: u32, n: u32, bad: bool, end: TxEnd) {
        let ring = self.tx;
        let style = self.style;
        for k in (1..n).chain(std::iter::once(0)) {
            let d = ring.addr(first + k);
            let last = k + 1 == n;
            let Ok(f) = self.mem.read_u32(d + desc::FLAGS) else {
                continue;
            };
            let mut f = f & !desc::OWN;
            if bad && last {
                f |= desc::ERR;
                let misc = if end == TxEnd::Chain {
                    desc::tx::BUFF | desc::tx::UFLO
                } else {
                    0
                };
                let _ = self.mem.write_u32(d + style.misc_off(), misc);
            } else {
                let _ = self.mem.write_u32(d + style.misc_off(), 0);
            }
            let _ = self.mem.write_u32(d + desc::FLAGS, f);
        }
    }

    // ---- receive -----------------------------------------------------------

    /// The address-match bits for `dst`, or None if the filter rejects it
    /// (datasheet, "Receive Address Match").
    fn address_match(&self, dst: &[u8; 6]) -> Option<u32> {
        let mut bits = 0;
        if self.csr15 & csr15::DRCVPA == 0 && *dst == self.padr {
            bits |= desc::rx::PAM;
        }
        let broadcast = *dst == [0xff; 6];
        if broadcast && self.csr15 & csr15::DRCVBC == 0 {
            bits |= desc::rx::BAM;
        }
        if !broadcast && dst[0] & 1 != 0 && self.ladrf & (1u64 << crc::ladrf_index(dst)) != 0 {
            bits |= desc::rx::LAFM;
        }
        (bits != 0 || self.csr15 & csr15::PROM != 0).then_some(bits)
    }

    /// A frame from the wire (without FCS): filtered, then placed in the
    /// guest's owned receive buffers, chaining across descriptors, with the
    /// FCS appended as the chip stores it; RINT on delivery, MISS when no
    /// buffer is owned. Uses at most one ring's worth of descriptors.
    pub fn receive(&mut self, data: &[u8]) -> RxOutcome {
        let out = self.receive_inner(data);
        self.update_irq();
        out
    }

    fn receive_inner(&mut self, data: &[u8]) -> RxOutcome {
        let match_bits = match self.accept_rx(data) {
            Ok(bits) => bits,
            Err(out) => return out,
        };
        let flags = match self.first_rx_flags() {
            Ok(f) => f,
            Err(out) => return out,
        };
        let first = self.rx.idx;
        let (fault, n) = self.scatter_rx(first, flags, data);
        let total = data.len() + frame::FCS;
        self.give_back_rx(first, n, fault, match_bits, total);
        self.rx.idx = (first + n) % self.rx.len;
        self.csr0 |= csr0::RINT;
        self.count_rx(fault, n, data.len())
    }

    /// Whether the receiver takes `data` at all: it runs, the length is an
    /// Ethernet frame's, and the address filter passes it. Ok with the
    /// address-match bits, or the outcome of a frame it does not take.
    fn accept_rx(&mut self, data: &[u8]) -> Result<u32, RxOutcome> {
        if self.csr0 & csr0::RXON == 0 {
            self.stats.rx_not_running += 1;
            return Err(RxOutcome::NotRunning);
        }
        if data.len() < 14 || data.len() > frame::MAX_RX {
            self.stats.rx_bad_length += 1;
            return Err(RxOutcome::Dropped(if data.len() < 14 {
                RxDrop::Runt
            } else {
                RxDrop::Oversize
            }));
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&data[..6]);
        let Some(match_bits) = self.address_match(&dst) else {
            self.stats.rx_filtered += 1;
            return Err(RxOutcome::Filtered);
        };
        Ok(match_bits)
    }

    /// The flags of the ring's current descriptor when the guest owns it;
    /// otherwise the frame is missed (MISS, and the missed-frame count,
    /// MFCO when it wraps), or dropped when the ring is not readable.
    fn first_rx_flags(&mut self) -> Result<u32, RxOutcome> {
        let ring = self.rx;
        match (
            ring.len,
            self.mem.read_u32(ring.addr(ring.idx) + desc::FLAGS),
        ) {
            (0, _) | (_, Ok(0..=0x7fff_ffff)) => {
                self.stats.rx_missed += 1;
                self.csr0 |= csr0::MISS;
                let (c, wrapped) = self.missed_count.overflowing_add(1);
                self.missed_count = c;
                if wrapped {
                    self.csr4 |= csr4::MFCO;
                }
                Err(RxOutcome::Missed)
            }
            (_, Ok(f)) => Ok(f),
            (_, Err(_)) => {
                self.mem_error();
                Err(RxOutcome::Dropped(RxDrop::Memory))
            }
        }
    }

    /// Writes `data` and its FCS across the owned descriptors from `first`
    /// (whose flags are `flags`), at most one ring's worth. Returns why it
    /// stopped short (None: all written) and the descriptors it took.
    fn scatter_rx(&mut self, first: u32, mut flags: u32, data: &[u8]) -> (Option<RxDrop>, u32) {
        let ring = self.rx;
        let style = self.style;
        let fcs = crc::fcs(data);
        let total = data.len() + frame::FCS;
        let mut written = 0usize;
        let mut n = 0u32;
        let fault = loop {
            let d = ring.addr(first + n);
            if n > 0 {
                match self.mem.read_u32(d + desc::FLAGS) {
                    Ok(f) if f & desc::OWN != 0 => flags = f,
                    Ok(_) => break Some(RxDrop::Chain),
                    Err(_) => break Some(RxDrop::Memory),
                }
            }
            n += 1;
            let Ok(addr) = self.mem.read_u32(d + style.addr_off()) else {
                break Some(RxDrop::Memory);
            };
            let take = desc::bcnt_len(flags).min(total - written);
            if write_frame_part(&self.mem, u64::from(addr), data, &fcs, written, take).is_err() {
                break Some(RxDrop::Memory);
            }
            written += take;
            if written == total {
                break None;
            }
            if n >= ring.len {
                break Some(RxDrop::Chain);
            }
        };
        (fault, n)
    }

    /// Hands the `n` descriptors from `first` back to the guest, the STP
    /// one last so the guest never sees a partial frame; the last one
    /// carries ENP, the match bits and the length (`total`, FCS included),
    /// or the error.
    fn give_back_rx(
        &mut self,
        first: u32,
        n: u32,
        fault: Option<RxDrop>,
        match_bits: u32,
        total: usize,
    ) {
        let ring = self.rx;
        let style = self.style;
        for k in (1..n).chain(std::iter::once(0)) {
            let d = ring.addr(first + k);
            let Ok(f) = self.mem.read_u32(d + desc::FLAGS) else {
                continue;
            };
            let mut f = f & (desc::BCNT | desc::ONES);
            if k == 0 {
                f |= desc::STP;
            }
            if k + 1 == n {
                match fault {
                    None => {
                        f |= desc::ENP | match_bits;
                        let mcnt = total as u32 & desc::rx::MCNT;
                        let _ = self.mem.write_u32(d + style.misc_off(), mcnt);
                    }
                    Some(RxDrop::Chain) => f |= desc::ERR | desc::rx::BUFF,
                    Some(_) => f |= desc::ERR,
                }
            }
            let _ = self.mem.write_u32(d + desc::FLAGS, f);
        }
    }

    /// Counts a frame of `len` bytes that took `n` descriptors, delivered
    /// or dropped for `fault`, and says which.
    fn count_rx(&mut self, fault: Option<RxDrop>, n: u32, len: usize) -> RxOutcome {
        match fault {
            None => {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += len as u64;
                RxOutcome::Delivered { descriptors: n }
            }
            Some(RxDrop::Memory) => {
                self.mem_error();
                RxOutcome::Dropped(RxDrop::Memory)
            }
            Some(why) => {
                self.stats.rx_chain_errors += 1;
                RxOutcome::Dropped(why)
            }
        }
    }
}

/// Writes `len` bytes of the stream `data ++ fcs`, starting at stream
/// offset `from`, to guest memory at `gpa`.
fn write_frame_part<M: SharedMemory>(
    mem: &GuestMemory<M>,
    gpa: u64,
    data: &[u8],
    fcs: &[u8; 4],
    from: usize,
    len: usize,
) -> Result<(), crate::mem::OutOfRange> {
    // Check the whole range first so a failed write leaves nothing.
    if !mem.contains(gpa, len) {
        return Err(crate::mem::OutOfRange {
            gpa,
            len,
            size: mem.size(),
        });
    }
    let end = from + len;
    let d_end = end.min(data.len());
    let mut at = gpa;
    if from < d_end {
        mem.write(at, &data[from..d_end])?;
        at += (d_end - from) as u64;
    }
    let f_from = from.max(data.len()) - data.len();
    let f_to = end - data.len().min(end);
    if f_from < f_to {
        mem.write(at, &fcs[f_from..f_to])?;
    }
    Ok(())
}
