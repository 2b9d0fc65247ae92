//! The Ram thesis's figures (chapters 2-6) as it gives them, each with
//! the median of this suite that stands beside it.

use super::{Case, RamConfig};

/// The thesis's figures (chapters 2-6), as the numbers it gives and as a
/// ratio to its native Linux (2,927 cycles per RX packet, 441 per TX
/// packet, 9.31 Gb/s); `ours` names what of this suite stands beside each.
pub(super) struct ThesisRow {
    pub(super) what: &'static str,
    pub(super) figure: &'static str,
    pub(super) thesis: &'static str,
    pub(super) thesis_x_native: &'static str,
    pub(super) ours: Ours,
}

/// Which of our medians stands beside a thesis figure.
#[derive(Clone, Copy)]
pub(super) enum Ours {
    /// Total cycles per frame over native's.
    Cycles(RamConfig, Case),
    /// One role's cycles per frame over native's total.
    Role(RamConfig, Case, &'static str),
    /// Total cycles per frame against another configuration's: a change in %.
    Change(RamConfig, RamConfig, Case),
    /// One role's cycles per frame against another configuration's: a
    /// change in %.
    RoleChange(RamConfig, RamConfig, Case, &'static str),
    /// Throughput over native's.
    Rate(RamConfig, Case),
    /// Two configurations' throughput over native's, the first → the second.
    Rates(RamConfig, RamConfig, Case),
    /// One role's cycles per frame over native's total, two configurations.
    Roles(RamConfig, RamConfig, Case, &'static str),
    /// Buffer uses per granted page.
    Locality(RamConfig),
}

pub(super) const THESIS: [ThesisRow; 24] = {
    use Case::*;
    use Ours::*;
    use RamConfig::*;
    const fn row(
        what: &'static str,
        figure: &'static str,
        thesis: &'static str,
        thesis_x_native: &'static str,
        ours: Ours,
    ) -> ThesisRow {
        ThesisRow {
            what,
            figure,
            thesis,
            thesis_x_native,
            ours,
        }
    }
    [
        row(
            "RX cycles/packet, Orig",
            "2.4",
            "13,165",
            "4.50×",
            Cycles(Orig, Rx),
        ),
        row(
            "  of it the driver domain",
            "2.4",
            "8,782",
            "3.00×",
            Role(Orig, Rx, "driver"),
        ),
        row(
            "  of it the guest",
            "2.4",
            "4,383",
            "1.50×",
            Role(Orig, Rx, "guest"),
        ),
        row(
            "TX cycles/packet, Orig",
            "2.5",
            "2,061",
            "4.67×",
            Cycles(Orig, Tx),
        ),
        row(
            "RX cycles/packet, MQ",
            "3.4",
            "7,448",
            "2.54×",
            Cycles(Mq, Rx),
        ),
        row(
            "  of it the driver domain",
            "3.4, 3.5",
            "2,872",
            "0.98×",
            Role(Mq, Rx, "driver"),
        ),
        row(
            "RX, NGM against Orig",
            "4.10, 4.12",
            "−19%",
            "-",
            Change(Ngm, Orig, Rx),
        ),
        row(
            "  of it the driver domain",
            "4.10, 4.12",
            "−21%",
            "-",
            RoleChange(Ngm, Orig, Rx, "driver"),
        ),
        row(
            "RX, MQ+NGM against Orig",
            "4.10",
            "−51%",
            "-",
            Change(MqNgm, Orig, Rx),
        ),
        row(
            "  of it the driver domain",
            "4.10, 4.12",
            "−81%",
            "-",
            RoleChange(MqNgm, Orig, Rx, "driver"),
        ),
        row(
            "TX, NGM against Orig",
            "4.11",
            "−47%",
            "-",
            Change(Ngm, Orig, Tx),
        ),
        row(
            "  of it the driver domain",
            "4.11, 4.13",
            "−64%",
            "-",
            RoleChange(Ngm, Orig, Tx, "driver"),
        ),
        row(
            "Guest RX, MQ+NGM",
            "5.1",
            "4,790",
            "1.64×",
            Role(MqNgm, Rx, "guest"),
        ),
        row(
            "Guest RX, LRO in the guest",
            "5.1",
            "4,440",
            "1.52×",
            Role(LroGuest, Rx, "guest"),
        ),
        row(
            "Guest RX, + prefetch",
            "5.1",
            "4,176",
            "1.43×",
            Role(Spf, Rx, "guest"),
        ),
        row(
            "Guest RX, + half pages",
            "5.1",
            "3,325",
            "1.14×",
            Role(HalfPg, Rx, "guest"),
        ),
        row(
            "Driver RX, MQ+NGM",
            "5.2",
            "1,635",
            "0.56×",
            Role(MqNgm, Rx, "driver"),
        ),
        row(
            "Driver RX, LRO in the driver domain",
            "5.2",
            "2,181",
            "0.75×",
            Role(LroDriver, Rx, "driver"),
        ),
        row(
            "Driver RX, SPF → half pages",
            "5.1",
            "1,672 → 1,378",
            "0.57× → 0.47×",
            Roles(Spf, HalfPg, Rx, "driver"),
        ),
        row(
            "Final RX cycles/packet (All)",
            "ch. 6",
            "-",
            "1.6×",
            Cycles(All, Rx),
        ),
        row(
            "Final TX cycles/packet (All)",
            "ch. 6",
            "-",
            "2.4×",
            Cycles(All, Tx),
        ),
        row(
            "One guest RX throughput, Orig → All",
            "6.1",
            "3.0 → 7.9 Gb/s (83% of line rate)",
            "0.32 → 0.85",
            Rates(Orig, All, Rx),
        ),
        row(
            "Two guests RX throughput (All)",
            "6.1",
            "line rate, 9.41 Gb/s",
            "1.01",
            Rate(All, RxTwoGuests),
        ),
        row(
            "Pages → packets (NGM)",
            "4.7",
            "1,114 pages, 2,996,824 packets",
            "2,690 per page",
            Locality(Ngm),
        ),
    ]
};
