//! A controller pair's whole state as bytes, so that the vPIC outlives the
//! program that emulates it: hv keeps it in memory of its own that an
//! upgraded or restarted hv takes over (Zhang & Dong §5.1 place the vPIC in
//! the hypervisor; what hv holds there must survive hv).

use super::{DualPic, InitStep, PicStats, I8259};

/// Bytes of one controller's state: registers and modes, then its counts.
const PIC_LEN: usize = 48;

/// Bytes of a [`DualPic`]'s state (master, then slave).
pub const STATE_LEN: usize = 2 * PIC_LEN;

/// Why a state was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadState(pub &'static str);

impl std::fmt::Display for BadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a vPIC state that no controller can be in: {}", self.0)
    }
}

const FLAGS: usize = 7;

impl I8259 {
    fn save(&self, out: &mut [u8; PIC_LEN]) {
        let step = match self.step {
            InitStep::Ready => 0,
            InitStep::Icw2 => 1,
            InitStep::Icw3 => 2,
            InitStep::Icw4 => 3,
        };
        out.fill(0);
        out[..7].copy_from_slice(&[
            self.irr,
            self.isr,
            self.imr,
            self.lines,
            self.lowest,
            self.vector_base,
            step,
        ]);
        let flags = [
            self.needs_icw4,
            self.single,
            self.level_triggered,
            self.auto_eoi,
            self.rotate_on_aeoi,
            self.read_isr,
            self.poll,
            self.special_mask,
        ];
        out[FLAGS] = (flags.iter().enumerate()).fold(0, |b, (i, &f)| b | u8::from(f) << i);
        out[8] = self.icw3;
        let s = &self.stats;
        for (i, v) in [s.acks, s.spurious, s.eois, s.inits].iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
    }

    fn restore(b: &[u8; PIC_LEN]) -> Result<I8259, BadState> {
        let step = match b[6] {
            0 => InitStep::Ready,
            1 => InitStep::Icw2,
            2 => InitStep::Icw3,
            3 => InitStep::Icw4,
            _ => return Err(BadState("no such initialization step")),
        };
        if b[4] > 7 {
            return Err(BadState("the lowest priority names no input"));
        }
        if b[9..16].iter().any(|&x| x != 0) {
            return Err(BadState("reserved bytes are set"));
        }
        let flag = |i: u8| b[FLAGS] & (1 << i) != 0;
        let count = |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().unwrap());
        Ok(I8259 {
            irr: b[0],
            isr: b[1],
            imr: b[2],
            lines: b[3],
            lowest: b[4],
            vector_base: b[5],
            step,
            needs_icw4: flag(0),
            single: flag(1),
            level_triggered: flag(2),
            auto_eoi: flag(3),
            rotate_on_aeoi: flag(4),
            read_isr: flag(5),
            poll: flag(6),
            special_mask: flag(7),
            icw3: b[8],
            stats: PicStats {
                acks: count(0),
                spurious: count(1),
                eois: count(2),
                inits: count(3),
            },
        })
    }
}

impl DualPic {
    /// Both controllers' state, to be given to [`DualPic::restore`].
    pub fn save(&self) -> [u8; STATE_LEN] {
        let mut out = [0u8; STATE_LEN];
        let (m, s) = out.split_at_mut(PIC_LEN);
        self.master.save(m.try_into().unwrap());
        self.slave.save(s.try_into().unwrap());
        out
    }

    /// The pair [`DualPic::save`] saved; a state no pair can be in is
    /// refused.
    pub fn restore(b: &[u8; STATE_LEN]) -> Result<DualPic, BadState> {
        let (m, s) = b.split_at(PIC_LEN);
        Ok(DualPic {
            master: I8259::restore(m.try_into().unwrap())?,
            slave: I8259::restore(s.try_into().unwrap())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair as Linux leaves it (vectors 0x30 and 0x38, cascade on IR2),
    /// with IRQ 11 asserted and acknowledged.
    fn programmed() -> DualPic {
        let mut p = DualPic::new();
        for (port, v) in [
            (0x20, 0x11),
            (0x21, 0x30),
            (0x21, 0x04),
            (0x21, 0x01),
            (0xa0, 0x11),
            (0xa1, 0x38),
            (0xa1, 0x02),
            (0xa1, 0x01),
            (0x21, 0xfb),
            (0xa1, 0xf7),
        ] {
            p.write_port(port, v);
        }
        p.set_irq(11, true);
        assert_eq!(p.inta(), 0x3b);
        p
    }

    #[test]
    fn a_restored_pair_behaves_as_the_saved_one() {
        let mut a = programmed();
        let mut b = DualPic::restore(&a.save()).unwrap();
        assert_eq!(a.save(), b.save());
        // The same end of interrupt, the same next interrupt.
        for p in [&mut a, &mut b] {
            p.write_port(0xa0, 0x20);
            p.write_port(0x20, 0x20);
            p.set_irq(11, false);
            p.set_irq(11, true);
        }
        assert!(b.int_output());
        assert_eq!(a.inta(), b.inta());
        assert_eq!(a.master.stats(), b.master.stats());
    }

    #[test]
    fn a_state_no_pair_can_be_in_is_refused() {
        let good = programmed().save();
        for (at, v, why) in [
            (6, 4, "no such initialization step"),
            (4, 8, "the lowest priority names no input"),
            (PIC_LEN + 12, 1, "reserved bytes are set"),
        ] {
            let mut bad = good;
            bad[at] = v;
            assert_eq!(DualPic::restore(&bad).unwrap_err(), BadState(why));
        }
    }
}
