//! Operations per wire frame of each configuration, from hv's and
//! netback's counters: the counts that explain where a configuration's
//! cycles go (Ram thesis §2.3 for the original path's copy, §3.3 for the
//! multi-queue NIC's direct placement, §4.2 for the new grant mechanism's
//! reuse), and with them what one hypercall batch cost hv.

use super::{Case, RamConfig, RamReport, RamSummary};
use crate::seeds::num;
use std::fmt::Write as _;

/// The counts the table shows, in order.
const COLUMNS: [&str; 11] = [
    "packets to the guest",
    "hv batches, driver domain",
    "hv operations, driver domain",
    "grant copies",
    "grant maps",
    "netback ring batches",
    "notifications to the guest",
    "notifications from the guest",
    "function-call IPIs",
    "TLB-shootdown IPIs",
    "rescheduling IPIs",
];

/// The count of hypercall batches, each a wake-up of hv here.
const BATCHES: &str = "hv batches, driver domain";
/// The count of grant copies, hv's copies into the guest's buffers.
const COPIES: &str = "grant copies";

/// What the thesis's mechanism does per frame in `cfg` (received, and sent
/// where that differs).
pub(super) fn mechanism(cfg: RamConfig) -> &'static str {
    use RamConfig::*;
    match cfg {
        Native | Forwarder => "no virtualization",
        Orig => {
            "RX: hv's grant copy of each frame into the guest's buffer (§2.3); \
             TX: the guest's pages grant-mapped, zero-copy (§1.1)"
        }
        Mq => {
            "RX: the queue places each frame, hv's grant copy moves it (§3.3); \
             TX: as Orig"
        }
        Ngm | LroDriver | Gro => {
            "netback copies into the guest's buffer through its mapped pool, no hypercall (§4.2)"
        }
        MqNgm | LroGuest | Spf | HalfPg | All => {
            "the queue places each frame in the guest's buffer through its mapped pool (§3.3, §4.2)"
        }
    }
}

/// hv's cycles per driver-domain batch of `m`: all of hv's cycles per
/// frame (its batches, and every domain's event-channel sends and other
/// calls) over the driver domain's batches per frame, so an upper bound on
/// what one batch cost (None without batches).
fn hv_cycles_per_batch(m: &RamSummary) -> Option<f64> {
    let batches = m.ops_per_frame.get(BATCHES).copied().filter(|b| *b > 0.0)?;
    Some(m.by_domain.get("hv").copied()? / batches)
}

impl RamReport {
    /// Operations per wire frame of every configuration and case counted,
    /// with the thesis's mechanism and hv's cycles per batch beside them.
    pub fn ops_table(&self) -> String {
        let rows: Vec<&RamSummary> = self
            .summary
            .iter()
            .filter(|m| !m.ops_per_frame.is_empty())
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        let mut s = format!(
            "\n**Operations per 1514-byte frame on the wire, from hv's and netback's counters** \
             (guest1's vif; and the host's inter-processor interrupts around the flow, every \
             core's, from `/proc/interrupts`; medians over runs; hv cycles per batch: all of \
             hv's cycles per frame over the driver domain's batches per frame, an upper bound \
             on one batch's cost)\n\n\
             | config | case | the thesis's mechanism | {} | hv cycles per batch |\n|---|---|---|{}---:|\n",
            COLUMNS.join(" | "),
            "---:|".repeat(COLUMNS.len())
        );
        for m in rows {
            let cells: Vec<String> = COLUMNS
                .iter()
                .map(|c| m.ops_per_frame.get(*c).map_or("-".into(), |v| num(*v)))
                .collect();
            let per_batch = hv_cycles_per_batch(m).map_or("-".into(), |c| format!("{c:.0}"));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {per_batch} |",
                m.config.name(),
                m.case.name(),
                mechanism(m.config),
                cells.join(" | ")
            );
        }
        s
    }

    /// Figures 3.4 and 3.5's counts in words, for frames received in MTU
    /// frames: the grant copies MQ still makes through hv against Orig's,
    /// and the hypercall batches that carry them, with hv's cycles each.
    pub(super) fn mq_counts(&self) -> Option<String> {
        let orig = self.row(RamConfig::Orig, Case::Rx)?;
        let mq = self.row(RamConfig::Mq, Case::Rx)?;
        let count = |m: &RamSummary, k: &str| m.ops_per_frame.get(k).copied();
        let (k0, k1) = (count(orig, COPIES)?, count(mq, COPIES)?);
        let (b0, b1) = (count(orig, BATCHES)?, count(mq, BATCHES)?);
        let (c0, c1) = (hv_cycles_per_batch(orig)?, hv_cycles_per_batch(mq)?);
        Some(format!(
            "Per frame received, MQ made {} grant copies through hv (Orig {}), in {} hypercall \
             batches (Orig {}); all of hv's cycles came to {c1:.0} per batch (Orig {c0:.0}).",
            num(k1),
            num(k0),
            num(b1),
            num(b0)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{summarize, RamRecord, TWO_GUESTS};
    use super::*;
    use std::collections::BTreeMap;

    fn rx(cfg: RamConfig, hv: f64, copies: f64, batches: f64) -> RamRecord {
        let map = |kv: &[(&str, f64)]| -> BTreeMap<String, f64> {
            kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        RamRecord {
            config: cfg,
            case: Case::Rx,
            run: 0,
            gbps: 1.0,
            ratio_to_native: None,
            cycles_per_packet: map(&[("total", 5000.0)]),
            cycles_x_native: None,
            by_domain: map(&[("hv", hv), ("driver", 2000.0)]),
            by_class: BTreeMap::new(),
            role_classes: BTreeMap::new(),
            locality: None,
            ops_per_frame: map(&[(COPIES, copies), (BATCHES, batches)]),
        }
    }

    fn report(records: Vec<RamRecord>) -> RamReport {
        RamReport {
            suite: "ram",
            tsc_mhz: 1.0,
            runs: 1,
            seconds_per_flow: 1,
            wall_seconds: 1.0,
            summary: summarize(&records),
            records,
            unavailable: Vec::new(),
            chapter6_config: None,
            two_guests: TWO_GUESTS,
            profiled: false,
        }
    }

    #[test]
    fn the_counts_come_per_frame_with_hv_cycles_per_batch() {
        let r = report(vec![
            rx(RamConfig::Orig, 1600.0, 1.0, 0.02),
            rx(RamConfig::Mq, 2000.0, 1.25, 0.04),
        ]);
        let t = r.ops_table();
        assert!(t.contains("| Orig | rx | "), "{t}");
        // hv's 1,600 cycles a frame over 0.02 batches a frame.
        assert!(t.contains("| 80000 |"), "{t}");
        let said = r.mq_counts().expect("both configurations were counted");
        assert!(
            said.contains("MQ made 1.25 grant copies through hv (Orig 1.00)"),
            "{said}"
        );
        assert!(
            said.contains("came to 50000 per batch (Orig 80000)"),
            "{said}"
        );
    }

    #[test]
    fn a_run_without_counts_says_nothing_of_them() {
        let mut orig = rx(RamConfig::Orig, 1600.0, 1.0, 0.02);
        orig.ops_per_frame.clear();
        let r = report(vec![orig, rx(RamConfig::Mq, 2000.0, 1.25, 0.04)]);
        assert_eq!(r.mq_counts(), None);
        assert!(!r.ops_table().contains("| Orig |"));
    }
}
