//! Operations per wire frame of each configuration, beside what the paper
//! says its mechanism does per packet: the counts that explain a cost
//! (Menon 2006 §2.2 for Xen 2.0's path, §4 for the I/O channel, §5 for the
//! receive side).

use super::{Case, M6Config, Menon2006Report};
use std::fmt::Write as _;

/// The counts the table shows, in order.
const COLUMNS: [&str; 16] = [
    "packets from the guest",
    "packets to the guest",
    "hv operations, driver domain",
    "hv batches, driver domain",
    "grant maps",
    "grant unmaps",
    "grant copies",
    "grant table reads",
    "page flips",
    "pages zeroed",
    "netback ring batches",
    "bytes netback copied",
    "notifications from the guest",
    "function-call IPIs",
    "TLB-shootdown IPIs",
    "rescheduling IPIs",
];

/// What the paper's mechanism does per packet in `cfg` and `case`.
pub fn mechanism(cfg: M6Config, case: Case) -> &'static str {
    use M6Config::*;
    match (cfg, case) {
        (Linux, _) => "no virtualization",
        (Default, _) => "splitnet's default: grants reused across batches",
        (XenDriver, _) => "the endpoint; a fresh zeroed page per received packet (§6.4.1)",
        (DriverMtu | XenDriverOpt, _) => "the endpoint; MTU-sized buffers, nothing zeroed",
        (
            GuestNone | GuestSp | GuestHigh | GuestCopy | GuestCopySp | PortNone | PortCsum
            | PortSg | PortSgCsum,
            Case::Tx | Case::TxWrites | Case::TxOneNic,
        ) => "each fragment's page mapped, its header copied, unmapped (§2.2)",
        (GuestIoc | GuestHighIoc | GuestHighIocSp, Case::Tx | Case::TxWrites | Case::TxOneNic) => {
            "grants read by netback, header copied, payload never mapped, no hypercall (§4.1)"
        }
        (GuestCopy | GuestCopySp | GuestHighIocSp, Case::Rx) => {
            "one copy into the guest's buffer (§4.2)"
        }
        (_, Case::Rx) => "one page flipped to the guest per packet (§2.2)",
    }
}

impl Menon2006Report {
    /// Operations per wire frame of every measured splitnet configuration
    /// and case, with the paper's mechanism beside them.
    pub fn ops_table(&self) -> String {
        let mut s = format!(
            "**Operations per 1448-byte segment on the wire, from hv's and netback's counters, \
             and the host's inter-processor interrupts around the flow (every core's, from \
             `/proc/interrupts`)**\n\n\
             | configuration | case | the paper's mechanism | {} |\n|---|---|---|{}\n",
            COLUMNS.join(" | "),
            "---:|".repeat(COLUMNS.len())
        );
        for m in self.summary.iter().filter(|m| !m.ops_per_frame.is_empty()) {
            let cells: Vec<String> = COLUMNS
                .iter()
                .map(|c| {
                    m.ops_per_frame
                        .get(*c)
                        .map_or("-".into(), |v| crate::seeds::num(*v))
                })
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                m.config.name(),
                m.case.name(),
                mechanism(m.config, m.case),
                cells.join(" | ")
            );
        }
        s
    }
}
