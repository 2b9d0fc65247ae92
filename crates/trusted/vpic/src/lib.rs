//! A virtual Intel 8259A programmable interrupt controller, and the PC's
//! master/slave pair.
//!
//! The guest's interrupt path runs through it: every guest IRQ costs accesses
//! to its ports (five per IRQ for Linux on a slave line, Sugerman §4.1; four
//! on a master line, Zhang & Dong §5.1), which is why both papers optimize
//! the vPIC (inlined in the VMM; moved from qemu-dm into the hypervisor).
//!
//! Modelled from the 8259A datasheet: the ICW1–ICW4 initialization sequence;
//! OCW1 (IMR), OCW2 (non-specific, specific and rotating EOI, set priority,
//! rotate in automatic EOI), OCW3 (read IRR or ISR, poll, special mask mode);
//! priority resolution with rotation; edge- and level-triggered inputs;
//! INTA returning the vector; the spurious IR7 when a request vanishes
//! before it is acknowledged; automatic EOI; cascade through IR2.
//! Not modelled: 8080/8085 call sequences (the vector is always the 8086 one),
//! buffered mode, special fully nested mode.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The ICW1 bit that starts initialization (written to the command port).
pub const ICW1: u8 = 0x10;
/// ICW1: ICW4 will follow.
pub const ICW1_IC4: u8 = 0x01;
/// ICW1: single controller (no ICW3).
pub const ICW1_SNGL: u8 = 0x02;
/// ICW1: level-triggered inputs.
pub const ICW1_LTIM: u8 = 0x08;
/// ICW4: 8086/8088 mode.
pub const ICW4_8086: u8 = 0x01;
/// ICW4: automatic end of interrupt.
pub const ICW4_AEOI: u8 = 0x02;
/// OCW2: non-specific EOI.
pub const OCW2_EOI: u8 = 0x20;
/// OCW2: specific EOI (OR the level into bits 2:0).
pub const OCW2_SEOI: u8 = 0x60;
/// OCW3: the marker bits (D4 = 0, D3 = 1).
pub const OCW3: u8 = 0x08;
/// OCW3: read register (with RIS selecting which).
pub const OCW3_RR: u8 = 0x02;
/// OCW3: with RR, read the ISR instead of the IRR.
pub const OCW3_RIS: u8 = 0x01;
/// OCW3: poll command.
pub const OCW3_POLL: u8 = 0x04;
/// OCW3: enable special mask mode changes.
pub const OCW3_ESMM: u8 = 0x40;
/// OCW3: with ESMM, set (1) or reset (0) special mask mode.
pub const OCW3_SMM: u8 = 0x20;

mod state;
pub use state::{BadState, STATE_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InitStep {
    Ready,
    Icw2,
    Icw3,
    Icw4,
}

/// Event counts of one 8259A.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PicStats {
    /// Interrupts acknowledged (INTA cycles and poll reads that found one).
    pub acks: u64,
    /// INTA cycles with no request to deliver (the spurious IR7).
    pub spurious: u64,
    /// EOI commands (specific, non-specific and rotating).
    pub eois: u64,
    /// Initialization sequences started (ICW1).
    pub inits: u64,
}

/// One 8259A.
#[derive(Debug, Clone)]
pub struct I8259 {
    irr: u8,
    isr: u8,
    imr: u8,
    /// Current level of each IR input.
    lines: u8,
    /// The IR with the lowest priority (7 after initialization).
    lowest: u8,
    vector_base: u8,
    step: InitStep,
    needs_icw4: bool,
    single: bool,
    level_triggered: bool,
    icw3: u8,
    auto_eoi: bool,
    rotate_on_aeoi: bool,
    read_isr: bool,
    poll: bool,
    special_mask: bool,
    stats: PicStats,
}

impl Default for I8259 {
    fn default() -> Self {
        Self::new()
    }
}

impl I8259 {
    /// A controller as at power-on, before the guest programs it: every input
    /// masked, so nothing is delivered until the guest initializes it.
    pub fn new() -> Self {
        I8259 {
            irr: 0,
            isr: 0,
            imr: 0xff,
            lines: 0,
            lowest: 7,
            vector_base: 0,
            step: InitStep::Ready,
            needs_icw4: false,
            single: true,
            level_triggered: false,
            icw3: 0,
            auto_eoi: false,
            rotate_on_aeoi: false,
            read_isr: false,
            poll: false,
            special_mask: false,
            stats: PicStats::default(),
        }
    }

    /// Interrupt request register.
    pub fn irr(&self) -> u8 {
        self.irr
    }
    /// In-service register.
    pub fn isr(&self) -> u8 {
        self.isr
    }
    /// Interrupt mask register.
    pub fn imr(&self) -> u8 {
        self.imr
    }
    /// The vector of IR0 (ICW2, bits 7:3).
    pub fn vector_base(&self) -> u8 {
        self.vector_base
    }
    /// Whether initialization is complete (not waiting for an ICW).
    pub fn is_ready(&self) -> bool {
        self.step == InitStep::Ready
    }
    /// ICW3 as written: on a master, the inputs that have a slave.
    pub fn icw3(&self) -> u8 {
        self.icw3
    }
    /// Event counts.
    pub fn stats(&self) -> PicStats {
        self.stats
    }

    /// Priority rank of `ir`: 0 is the highest.
    fn rank(&self, ir: u8) -> u8 {
        ir.wrapping_sub(self.lowest).wrapping_sub(1) & 7
    }

    /// The highest-priority IR set in `bits`.
    fn highest(&self, bits: u8) -> Option<u8> {
        (0..8)
            .map(|i| (self.lowest + 1 + i) & 7)
            .find(|&ir| bits & (1 << ir) != 0)
    }

    /// The request the controller would deliver now: the highest unmasked
    /// one, if nothing of equal or higher priority is in service (in special
    /// mask mode, masked levels in service do not block).
    pub fn pending(&self) -> Option<u8> {
        if self.step != InitStep::Ready {
            return None;
        }
        let req = self.highest(self.irr & !self.imr)?;
        let blocking = if self.special_mask {
            self.isr & !self.imr
        } else {
            self.isr
        };
        match self.highest(blocking) {
            Some(s) if self.rank(s) <= self.rank(req) => None,
            _ => Some(req),
        }
    }

    /// The INT output to the CPU (or to the master's IR input).
    pub fn int_output(&self) -> bool {
        self.pending().is_some()
    }

    /// Drives input `ir` (0..=7) to `level`. Edge-triggered: a rising edge
    /// latches a request, which is withdrawn if the line falls before it is
    /// acknowledged (the datasheet's default IR7 case). Level-triggered: the
    /// request follows the line.
    pub fn set_irq(&mut self, ir: u8, level: bool) {
        let bit = 1u8 << (ir & 7);
        let was = self.lines & bit != 0;
        if level {
            self.lines |= bit;
            if self.level_triggered || !was {
                self.irr |= bit;
            }
        } else {
            self.lines &= !bit;
            self.irr &= !bit;
        }
    }

    /// An INTA cycle: returns the vector and moves the request into service
    /// (unless in automatic-EOI mode). With nothing to deliver it returns
    /// the IR7 vector and sets nothing in service, as the 8259A does.
    pub fn inta(&mut self) -> u8 {
        match self.pending() {
            Some(ir) => {
                self.acknowledge(ir);
                self.vector_base | ir
            }
            None => {
                self.stats.spurious += 1;
                self.vector_base | 7
            }
        }
    }

    fn acknowledge(&mut self, ir: u8) {
        let bit = 1u8 << ir;
        self.stats.acks += 1;
        self.irr &= !bit;
        if self.level_triggered && self.lines & bit != 0 {
            self.irr |= bit;
        }
        if self.auto_eoi {
            if self.rotate_on_aeoi {
                self.lowest = ir;
            }
        } else {
            self.isr |= bit;
        }
    }

    /// A read of the command (`a0 == false`) or data port.
    pub fn read(&mut self, a0: bool) -> u8 {
        if self.poll {
            // The poll command: this read is the acknowledge.
            self.poll = false;
            return match self.pending() {
                Some(ir) => {
                    self.acknowledge(ir);
                    0x80 | ir
                }
                None => 0,
            };
        }
        if a0 {
            self.imr
        } else if self.read_isr {
            self.isr
        } else {
            self.irr
        }
    }

    /// A write of the command (`a0 == false`) or data port.
    pub fn write(&mut self, a0: bool, v: u8) {
        if !a0 {
            if v & ICW1 != 0 {
                self.icw1(v);
            } else if v & OCW3 != 0 {
                self.ocw3(v);
            } else {
                self.ocw2(v);
            }
            return;
        }
        match self.step {
            InitStep::Icw2 => {
                self.vector_base = v & 0xf8;
                self.step = if !self.single {
                    InitStep::Icw3
                } else if self.needs_icw4 {
                    InitStep::Icw4
                } else {
                    InitStep::Ready
                };
            }
            InitStep::Icw3 => {
                self.icw3 = v;
                self.step = if self.needs_icw4 {
                    InitStep::Icw4
                } else {
                    InitStep::Ready
                };
            }
            InitStep::Icw4 => {
                self.auto_eoi = v & ICW4_AEOI != 0;
                self.step = InitStep::Ready;
            }
            InitStep::Ready => self.imr = v, // OCW1
        }
    }

    fn icw1(&mut self, v: u8) {
        // Datasheet, "Initialization command words": the IMR is cleared, IR7
        // gets the lowest priority, special mask mode is cleared, status read
        // selects the IRR, ICW4's functions are zeroed unless IC4, and the
        // edge sense is reset (an input already high must fall and rise
        // again). This model also drops requests and in-service levels, so a
        // re-initialized controller starts clean.
        self.stats.inits += 1;
        self.step = InitStep::Icw2;
        self.needs_icw4 = v & ICW1_IC4 != 0;
        self.single = v & ICW1_SNGL != 0;
        self.level_triggered = v & ICW1_LTIM != 0;
        self.imr = 0;
        self.irr = if self.level_triggered { self.lines } else { 0 };
        self.isr = 0;
        self.lowest = 7;
        self.special_mask = false;
        self.read_isr = false;
        self.poll = false;
        self.auto_eoi = false;
        self.rotate_on_aeoi = false;
        self.icw3 = 0;
    }

    fn ocw2(&mut self, v: u8) {
        let level = v & 7;
        match v >> 5 {
            0b001 | 0b101 => {
                // Non-specific EOI: the highest-priority level in service.
                self.stats.eois += 1;
                if let Some(ir) = self.highest(self.isr) {
                    self.isr &= !(1 << ir);
                    if v >> 5 == 0b101 {
                        self.lowest = ir;
                    }
                }
            }
            0b011 | 0b111 => {
                self.stats.eois += 1;
                self.isr &= !(1 << level);
                if v >> 5 == 0b111 {
                    self.lowest = level;
                }
            }
            0b110 => self.lowest = level,
            0b100 => self.rotate_on_aeoi = true,
            0b000 => self.rotate_on_aeoi = false,
            _ => {} // 0b010: no operation
        }
    }

    fn ocw3(&mut self, v: u8) {
        if v & OCW3_ESMM != 0 {
            self.special_mask = v & OCW3_SMM != 0;
        }
        if v & OCW3_RR != 0 {
            self.read_isr = v & OCW3_RIS != 0;
        }
        self.poll = v & OCW3_POLL != 0;
    }
}

/// The PC/AT pair: a master at ports 0x20/0x21 and a slave at 0xa0/0xa1
/// whose INT output drives the master's IR2. IRQs 0–7 are the master's
/// inputs, 8–15 the slave's.
#[derive(Debug, Clone, Default)]
pub struct DualPic {
    /// The master (IRQ 0–7).
    pub master: I8259,
    /// The slave (IRQ 8–15), cascaded on the master's IR2.
    pub slave: I8259,
}

/// The master input the slave is cascaded on.
pub const CASCADE_IR: u8 = 2;

impl DualPic {
    /// Both controllers at power-on.
    pub fn new() -> Self {
        Self::default()
    }

    fn sync_cascade(&mut self) {
        let s = self.slave.int_output();
        self.master.set_irq(CASCADE_IR, s);
    }

    /// Drives IRQ line `irq` (0..=15; others are ignored).
    pub fn set_irq(&mut self, irq: u8, level: bool) {
        match irq {
            0..=7 => self.master.set_irq(irq, level),
            8..=15 => {
                self.slave.set_irq(irq - 8, level);
                self.sync_cascade();
            }
            _ => {}
        }
    }

    /// The INT line to the CPU.
    pub fn int_output(&self) -> bool {
        self.master.int_output()
    }

    /// An INTA cycle: the vector of the highest-priority request. A request
    /// on the cascade input is answered by the slave.
    pub fn inta(&mut self) -> u8 {
        let cascaded = self.master.pending() == Some(CASCADE_IR)
            && self.master.icw3() & (1 << CASCADE_IR) != 0;
        let v = self.master.inta();
        if cascaded {
            let v = self.slave.inta();
            self.sync_cascade();
            v
        } else {
            v
        }
    }

    /// Whether `port` belongs to the pair.
    pub fn claims(port: u16) -> bool {
        matches!(port, 0x20 | 0x21 | 0xa0 | 0xa1)
    }

    /// A byte read of one of the four ports (`None` for any other port).
    pub fn read_port(&mut self, port: u16) -> Option<u8> {
        let v = match port {
            0x20 | 0x21 => self.master.read(port & 1 != 0),
            0xa0 | 0xa1 => {
                let v = self.slave.read(port & 1 != 0);
                self.sync_cascade();
                v
            }
            _ => return None,
        };
        Some(v)
    }

    /// A byte write of one of the four ports; false for any other port.
    pub fn write_port(&mut self, port: u16, v: u8) -> bool {
        match port {
            0x20 | 0x21 => self.master.write(port & 1 != 0, v),
            0xa0 | 0xa1 => {
                self.slave.write(port & 1 != 0, v);
                self.sync_cascade();
            }
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ICW1 (edge, cascade, IC4), ICW2 = `base`, ICW3, ICW4 (8086).
    fn init(p: &mut I8259, base: u8, icw3: u8) {
        p.write(false, ICW1 | ICW1_IC4);
        assert!(!p.is_ready());
        p.write(true, base);
        p.write(true, icw3);
        p.write(true, ICW4_8086);
        assert!(p.is_ready());
    }

    fn ready(base: u8) -> I8259 {
        let mut p = I8259::new();
        init(&mut p, base, 0x04);
        p
    }

    #[test]
    fn power_on_masks_everything_until_initialized() {
        let mut p = I8259::new();
        p.set_irq(3, true);
        assert!(!p.int_output());
        // Mid-initialization nothing is delivered either.
        p.write(false, ICW1 | ICW1_IC4);
        p.set_irq(4, true);
        assert!(!p.int_output());
        p.write(true, 0x20);
        p.write(true, 0x04);
        p.write(true, ICW4_8086);
        // ICW1 cleared the IMR; IR4 rose during initialization.
        assert_eq!(p.imr(), 0);
        assert_eq!(p.inta(), 0x24);
    }

    #[test]
    fn icw_sequence_single_without_icw4_skips_icw3_and_icw4() {
        // 8259A datasheet, Figure "Initialization sequence": SNGL=1 skips
        // ICW3, IC4=0 skips ICW4; the next data write is OCW1.
        let mut p = I8259::new();
        p.write(false, ICW1 | ICW1_SNGL);
        p.write(true, 0x47); // ICW2: bits 2:0 are ignored in 8086 mode
        assert!(p.is_ready());
        assert_eq!(p.vector_base(), 0x40);
        p.write(true, 0xfe); // OCW1
        assert_eq!(p.imr(), 0xfe);
        assert_eq!(p.read(true), 0xfe);
    }

    #[test]
    fn icw1_resets_state_and_requires_a_new_edge() {
        let mut p = ready(0x20);
        p.set_irq(1, true);
        assert_eq!(p.inta(), 0x21);
        assert_eq!(p.isr(), 0x02);
        p.write(true, 0x55);
        init(&mut p, 0x30, 0x04);
        assert_eq!((p.irr(), p.isr(), p.imr()), (0, 0, 0));
        // IR1 is still high but made no new low-to-high transition.
        assert!(!p.int_output());
        p.set_irq(1, false);
        p.set_irq(1, true);
        assert_eq!(p.inta(), 0x31);
    }

    #[test]
    fn ocw1_masks_delivery_but_not_latching() {
        let mut p = ready(0x20);
        p.write(true, 0x08);
        p.set_irq(3, true);
        assert_eq!(p.irr(), 0x08);
        assert!(!p.int_output());
        p.write(true, 0x00);
        assert_eq!(p.inta(), 0x23);
    }

    #[test]
    fn fixed_priority_lower_number_wins() {
        let mut p = ready(0x20);
        p.set_irq(5, true);
        p.set_irq(3, true);
        assert_eq!(p.inta(), 0x23);
        // IR5 waits: IR3 (higher) is in service.
        assert!(!p.int_output());
        p.write(false, OCW2_EOI);
        assert_eq!(p.inta(), 0x25);
    }

    #[test]
    fn higher_priority_nests_lower_and_equal_do_not() {
        let mut p = ready(0x20);
        p.set_irq(4, true);
        assert_eq!(p.inta(), 0x24);
        p.set_irq(6, true);
        assert!(!p.int_output(), "lower priority waits for EOI");
        p.set_irq(1, true);
        assert_eq!(p.inta(), 0x21, "higher priority nests");
        assert_eq!(p.isr(), 0x12);
        // Non-specific EOI clears the highest in service: IR1.
        p.write(false, OCW2_EOI);
        assert_eq!(p.isr(), 0x10);
        p.write(false, OCW2_SEOI | 4);
        assert_eq!(p.isr(), 0);
        assert_eq!(p.inta(), 0x26);
    }

    #[test]
    fn edge_triggered_line_is_not_redelivered_while_high() {
        let mut p = ready(0x20);
        p.set_irq(2, true);
        assert_eq!(p.inta(), 0x22);
        p.write(false, OCW2_EOI);
        // Still high, but no new edge: nothing to deliver.
        p.set_irq(2, true);
        assert!(!p.int_output());
        p.set_irq(2, false);
        p.set_irq(2, true);
        assert_eq!(p.inta(), 0x22);
    }

    #[test]
    fn edge_during_service_is_latched_and_delivered_after_eoi() {
        let mut p = ready(0x20);
        p.set_irq(3, true);
        assert_eq!(p.inta(), 0x23);
        p.set_irq(3, false);
        p.set_irq(3, true);
        assert!(!p.int_output(), "not re-delivered while in service");
        assert_eq!(p.irr(), 0x08);
        p.write(false, OCW2_SEOI | 3);
        assert_eq!(p.inta(), 0x23);
    }

    #[test]
    fn level_triggered_follows_the_line() {
        let mut p = I8259::new();
        p.write(false, ICW1 | ICW1_IC4 | ICW1_LTIM);
        p.write(true, 0x20);
        p.write(true, 0x04);
        p.write(true, ICW4_8086);
        p.set_irq(3, true);
        assert_eq!(p.inta(), 0x23);
        p.write(false, OCW2_EOI);
        // Still asserted: delivered again without a new edge.
        assert_eq!(p.inta(), 0x23);
        p.write(false, OCW2_EOI);
        p.set_irq(3, false);
        assert!(!p.int_output());
    }

    #[test]
    fn request_withdrawn_before_inta_gives_spurious_ir7() {
        let mut p = ready(0x20);
        p.set_irq(3, true);
        assert!(p.int_output());
        p.set_irq(3, false);
        assert!(!p.int_output());
        assert_eq!(p.inta(), 0x27);
        assert_eq!(p.isr(), 0, "a spurious IR7 sets nothing in service");
        assert_eq!(p.stats().spurious, 1);
    }

    #[test]
    fn ocw3_selects_irr_or_isr_for_command_port_reads() {
        let mut p = ready(0x20);
        p.write(true, 0x20); // mask IR5
        p.set_irq(5, true);
        p.set_irq(0, true);
        p.inta();
        assert_eq!(p.read(false), 0x20, "IRR is read by default");
        p.write(false, OCW3 | OCW3_RR | OCW3_RIS);
        assert_eq!(p.read(false), 0x01);
        assert_eq!(p.read(false), 0x01, "the selection sticks");
        p.write(false, OCW3 | OCW3_RR);
        assert_eq!(p.read(false), 0x20);
        // OCW3 without RR leaves the selection alone.
        p.write(false, OCW3);
        assert_eq!(p.read(false), 0x20);
    }

    #[test]
    fn poll_command_acknowledges_on_read() {
        let mut p = ready(0x20);
        p.set_irq(6, true);
        p.write(false, OCW3 | OCW3_POLL);
        assert_eq!(p.read(false), 0x86);
        assert_eq!(p.isr(), 0x40);
        p.write(false, OCW3 | OCW3_POLL);
        assert_eq!(p.read(false), 0x00);
    }

    #[test]
    fn rotation_moves_lowest_priority() {
        let mut p = ready(0x20);
        // Set priority: IR4 lowest, so IR5 is highest.
        p.write(false, 0xc0 | 4);
        p.set_irq(3, true);
        p.set_irq(5, true);
        assert_eq!(p.inta(), 0x25);
        // Rotate on non-specific EOI: IR5 becomes lowest; IR3 is then
        // higher than a new IR5.
        p.write(false, 0xa0);
        assert_eq!(p.isr(), 0);
        assert_eq!(p.inta(), 0x23);
        p.write(false, 0xe0 | 3); // rotate on specific EOI of IR3
        p.set_irq(5, false);
        p.set_irq(5, true);
        p.set_irq(4, true);
        assert_eq!(p.inta(), 0x24, "IR3 lowest: IR4 is now highest");
    }

    #[test]
    fn automatic_eoi_sets_nothing_in_service() {
        let mut p = I8259::new();
        p.write(false, ICW1 | ICW1_IC4 | ICW1_SNGL);
        p.write(true, 0x20);
        p.write(true, ICW4_8086 | ICW4_AEOI);
        p.set_irq(3, true);
        assert_eq!(p.inta(), 0x23);
        assert_eq!(p.isr(), 0);
        p.set_irq(4, true);
        assert_eq!(p.inta(), 0x24);
    }

    #[test]
    fn special_mask_mode_lets_lower_levels_through() {
        let mut p = ready(0x20);
        p.set_irq(2, true);
        assert_eq!(p.inta(), 0x22);
        p.set_irq(5, true);
        assert!(!p.int_output());
        // Mask the level in service and enter special mask mode.
        p.write(true, 0x04);
        p.write(false, OCW3 | OCW3_ESMM | OCW3_SMM);
        assert_eq!(p.inta(), 0x25);
        p.write(false, OCW3 | OCW3_ESMM);
        assert_eq!(p.isr(), 0x24);
    }

    /// The sequence Linux's init_8259A writes.
    const LINUX_INIT: [(u16, u8); 12] = [
        (0x21, 0xff),
        (0xa1, 0xff),
        (0x20, 0x11),
        (0x21, 0x20),
        (0x21, 0x04),
        (0x21, 0x01),
        (0xa0, 0x11),
        (0xa1, 0x28),
        (0xa1, 0x02),
        (0xa1, 0x01),
        (0x21, 0xfb),
        (0xa1, 0xff),
    ];

    fn linux_pair() -> DualPic {
        let mut d = DualPic::new();
        for (port, v) in LINUX_INIT {
            assert!(d.write_port(port, v));
        }
        d
    }

    #[test]
    fn cascade_delivers_slave_vectors_through_ir2() {
        let mut d = linux_pair();
        d.set_irq(10, true);
        assert!(!d.int_output(), "IRQ10 masked on the slave");
        d.write_port(0xa1, 0xfb);
        assert!(d.int_output());
        assert_eq!(d.inta(), 0x2a);
        assert_eq!(d.master.isr(), 0x04);
        assert_eq!(d.slave.isr(), 0x04);
        // A master IRQ of higher priority than IR2 (IRQ0/1) still nests.
        d.write_port(0x21, 0xf8);
        d.set_irq(1, true);
        assert_eq!(d.inta(), 0x21);
        d.write_port(0x20, 0x61);
        // Linux's EOIs for a slave IRQ: specific to the slave, then to IR2.
        d.write_port(0xa0, 0x62);
        d.write_port(0x20, 0x62);
        assert_eq!((d.master.isr(), d.slave.isr()), (0, 0));
        assert!(!d.int_output());
    }

    #[test]
    fn pair_ignores_foreign_ports() {
        let mut d = DualPic::new();
        assert_eq!(d.read_port(0x22), None);
        assert!(!d.write_port(0x60, 1));
        d.set_irq(16, true);
        d.set_irq(200, true);
        assert!(!DualPic::claims(0x4d0));
    }

    /// The storm's reference 8259A, written from the datasheet in its own
    /// terms (a priority list, one flag per input) rather than the model's
    /// bit masks and rank arithmetic, so the two do not share a slip.
    #[derive(Debug, Clone, PartialEq)]
    struct RefPic {
        line: [bool; 8],
        irr: [bool; 8],
        isr: [bool; 8],
        imr: [bool; 8],
        /// The IRs from the highest priority to the lowest.
        order: [u8; 8],
        base: u8,
        /// The ICW the data port expects next (2, 3 or 4), or 0 when ready.
        expect: u8,
        sngl: bool,
        ic4: bool,
        ltim: bool,
        aeoi: bool,
        rotate_aeoi: bool,
        ris: bool,
        poll: bool,
        smm: bool,
        icw3: u8,
        stats: PicStats,
    }

    fn bits(f: [bool; 8]) -> u8 {
        (0..8).filter(|&i| f[i]).map(|i| 1u8 << i).sum()
    }

    fn flags(v: u8) -> [bool; 8] {
        std::array::from_fn(|i| v & (1 << i) != 0)
    }

    impl RefPic {
        fn new() -> Self {
            RefPic {
                line: [false; 8],
                irr: [false; 8],
                isr: [false; 8],
                imr: [true; 8],
                order: [0, 1, 2, 3, 4, 5, 6, 7],
                base: 0,
                expect: 0,
                sngl: true,
                ic4: false,
                ltim: false,
                aeoi: false,
                rotate_aeoi: false,
                ris: false,
                poll: false,
                smm: false,
                icw3: 0,
                stats: PicStats::default(),
            }
        }

        /// `ir` becomes the lowest priority, the one after it the highest.
        fn lowest(&mut self, ir: u8) {
            self.order = std::array::from_fn(|k| (ir + 1 + k as u8) % 8);
        }

        fn first(&self, set: [bool; 8]) -> Option<u8> {
            self.order.iter().copied().find(|&i| set[i as usize])
        }

        fn place(&self, ir: u8) -> usize {
            self.order.iter().position(|&i| i == ir).unwrap()
        }

        fn pending(&self) -> Option<u8> {
            if self.expect != 0 {
                return None;
            }
            let req = self.first(std::array::from_fn(|i| self.irr[i] && !self.imr[i]))?;
            let blocking = std::array::from_fn(|i| self.isr[i] && !(self.smm && self.imr[i]));
            match self.first(blocking) {
                Some(s) if self.place(s) <= self.place(req) => None,
                _ => Some(req),
            }
        }

        fn set_irq(&mut self, ir: u8, level: bool) {
            let i = ir as usize;
            self.irr[i] = level && (self.irr[i] || self.ltim || !self.line[i]);
            self.line[i] = level;
        }

        fn ack(&mut self, ir: u8) {
            let i = ir as usize;
            self.stats.acks += 1;
            self.irr[i] = self.ltim && self.line[i];
            match (self.aeoi, self.rotate_aeoi) {
                (false, _) => self.isr[i] = true,
                (true, true) => self.lowest(ir),
                (true, false) => {}
            }
        }

        fn inta(&mut self) -> u8 {
            let Some(ir) = self.pending() else {
                self.stats.spurious += 1;
                return self.base | 7;
            };
            self.ack(ir);
            self.base | ir
        }

        fn read(&mut self, a0: bool) -> u8 {
            if std::mem::take(&mut self.poll) {
                let Some(ir) = self.pending() else {
                    return 0;
                };
                self.ack(ir);
                return 0x80 | ir;
            }
            bits(match (a0, self.ris) {
                (true, _) => self.imr,
                (false, true) => self.isr,
                (false, false) => self.irr,
            })
        }

        fn write(&mut self, a0: bool, v: u8) {
            match (a0, self.expect) {
                (false, _) if v & 0x10 != 0 => self.icw1(v),
                (false, _) if v & 0x08 != 0 => {
                    if v & 0x40 != 0 {
                        self.smm = v & 0x20 != 0;
                    }
                    if v & 0x02 != 0 {
                        self.ris = v & 0x01 != 0;
                    }
                    self.poll = v & 0x04 != 0;
                }
                (false, _) => self.ocw2(v),
                (true, 2) => {
                    self.base = v & 0xf8;
                    self.expect = [4 * u8::from(self.ic4), 3][usize::from(!self.sngl)];
                }
                (true, 3) => {
                    self.icw3 = v;
                    self.expect = 4 * u8::from(self.ic4);
                }
                (true, 4) => {
                    self.aeoi = v & 0x02 != 0;
                    self.expect = 0;
                }
                (true, _) => self.imr = flags(v),
            }
        }

        fn icw1(&mut self, v: u8) {
            // ICW2 sets the vector base; until then the old one stands.
            let (line, base, mut stats) = (self.line, self.base, self.stats);
            stats.inits += 1;
            *self = RefPic {
                line,
                base,
                stats,
                imr: [false; 8],
                expect: 2,
                ic4: v & 0x01 != 0,
                sngl: v & 0x02 != 0,
                ltim: v & 0x08 != 0,
                ..RefPic::new()
            };
            if self.ltim {
                self.irr = line;
            }
        }

        /// OCW2 by its R, SL and EOI bits (datasheet, "Operation command
        /// words").
        fn ocw2(&mut self, v: u8) {
            let (rotate, specific, eoi, level) =
                (v & 0x80 != 0, v & 0x40 != 0, v & 0x20 != 0, v & 7);
            if eoi {
                self.stats.eois += 1;
                let done = if specific {
                    Some(level)
                } else {
                    self.first(self.isr)
                };
                if let Some(ir) = done {
                    self.isr[ir as usize] = false;
                    if rotate {
                        self.lowest(ir);
                    }
                }
            } else if specific {
                if rotate {
                    self.lowest(level);
                }
            } else {
                self.rotate_aeoi = rotate;
            }
        }

        /// What the model's accessors show of this controller.
        fn shown(&self) -> Shown {
            let (irr, isr, imr) = (bits(self.irr), bits(self.isr), bits(self.imr));
            let ready = self.expect == 0;
            let out = self.pending().is_some();
            (irr, isr, imr, ready, self.base, self.icw3, self.stats, out)
        }
    }

    /// IRR, ISR, IMR, ready, vector base, ICW3, counts, INT output.
    type Shown = (u8, u8, u8, bool, u8, u8, PicStats, bool);

    fn shown(p: &I8259) -> Shown {
        let (irr, isr, imr, ready) = (p.irr(), p.isr(), p.imr(), p.is_ready());
        let out = p.int_output();
        (
            irr,
            isr,
            imr,
            ready,
            p.vector_base(),
            p.icw3(),
            p.stats(),
            out,
        )
    }

    /// The reference pair: the slave's INT drives the master's IR2.
    struct RefPair {
        master: RefPic,
        slave: RefPic,
    }

    impl RefPair {
        fn sync(&mut self) {
            let int = self.slave.pending().is_some();
            self.master.set_irq(CASCADE_IR, int);
        }

        fn port(&mut self, port: u16) -> &mut RefPic {
            if port < 0xa0 {
                &mut self.master
            } else {
                &mut self.slave
            }
        }

        fn inta(&mut self) -> u8 {
            let cascaded =
                self.master.pending() == Some(CASCADE_IR) && self.master.icw3 & 0x04 != 0;
            let v = self.master.inta();
            if !cascaded {
                return v;
            }
            let v = self.slave.inta();
            self.sync();
            v
        }
    }

    #[test]
    fn random_command_storm_keeps_the_pair_consistent() {
        // Random port writes, reads, line changes and INTA cycles: no
        // panic; after every step both controllers show exactly what the
        // reference shows, every read and vector agrees, and the cascade
        // holds (a request latched on the master's IR2 means the slave's
        // INT output is up).
        let mut d = linux_pair();
        let mut r = RefPair {
            master: RefPic::new(),
            slave: RefPic::new(),
        };
        for (port, v) in LINUX_INIT {
            r.port(port).write(port & 1 != 0, v);
            r.sync();
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut cascaded = 0;
        for step in 0..300_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = [0x20, 0x21, 0xa0, 0xa1][(x & 3) as usize];
            let a0 = port & 1 != 0;
            // ICW1 one command write in eight, so the controllers spend
            // most of the storm initialized.
            let mut v = (x >> 8) as u8;
            if !a0 && (x >> 40) & 7 != 0 {
                v &= !ICW1;
            }
            let what = match (x >> 2) & 7 {
                0..=3 => {
                    d.write_port(port, v);
                    r.port(port).write(a0, v);
                    r.sync();
                    format!("write {v:#04x} to {port:#x}")
                }
                4 => {
                    let got = d.read_port(port);
                    let want = r.port(port).read(a0);
                    r.sync();
                    assert_eq!(got, Some(want), "step {step}: read of {port:#x}");
                    format!("read {port:#x}")
                }
                5 => {
                    // IRQ2 is the cascade, driven by the slave alone (a PC
                    // wires its bus line to IRQ9 instead).
                    let irq = match (x >> 8) as u8 & 15 {
                        CASCADE_IR => 9,
                        n => n,
                    };
                    let level = x & (1 << 20) != 0;
                    d.set_irq(irq, level);
                    match irq {
                        0..=7 => r.master.set_irq(irq, level),
                        _ => {
                            r.slave.set_irq(irq - 8, level);
                            r.sync();
                        }
                    }
                    format!("IRQ{irq} to {level}")
                }
                _ => {
                    if d.int_output() {
                        cascaded += usize::from(
                            r.master.pending() == Some(CASCADE_IR) && r.master.icw3 & 0x04 != 0,
                        );
                        assert_eq!(d.inta(), r.inta(), "step {step}: INTA");
                    }
                    "INTA".into()
                }
            };
            assert_eq!(
                shown(&d.master),
                r.master.shown(),
                "step {step}, master, after {what}"
            );
            assert_eq!(
                shown(&d.slave),
                r.slave.shown(),
                "step {step}, slave, after {what}"
            );
            assert!(
                d.master.irr() & (1 << CASCADE_IR) == 0 || d.slave.int_output(),
                "step {step}: IR2 latched on the master with the slave's INT down, after {what}"
            );
        }
        // The storm reached the paths it is for.
        let (m, s) = (d.master.stats(), d.slave.stats());
        assert!(
            m.acks > 100 && s.acks > 100 && m.eois > 100 && s.inits > 100,
            "{m:?} {s:?}"
        );
        assert!(cascaded > 100, "{cascaded} vectors from the slave");
    }
}
