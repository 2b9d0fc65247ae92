//! The paper's throughput figures (Menon 2006 Figures 3, 4, 5, 7, 10, 11
//! and 13) as data: each bar's configuration and case, and the Mb/s the
//! paper's text gives for it.

use super::{Case, M6Config};

/// One bar of a paper figure: a configuration and case, and the paper's
/// Mb/s (with its ratio to the paper's Linux) where the text gives it.
pub struct PaperBar {
    pub config: M6Config,
    pub case: Case,
    pub paper_mbps: Option<f64>,
}

/// A throughput figure of the paper: its bars and the paper's Linux.
pub struct PaperFigure {
    pub id: &'static str,
    pub title: &'static str,
    pub linux_mbps: f64,
    pub bars: &'static [(M6Config, Case, Option<f64>)],
}

/// The paper's throughput figures with the numbers its text gives (Mb/s;
/// Linux: 3760 transmit, 2508 receive).
pub const FIGURES: [PaperFigure; 7] = {
    use Case::*;
    use M6Config::*;
    [
        PaperFigure {
            id: "Figure 3",
            title: "Transmit throughput in different configurations",
            linux_mbps: 3760.0,
            bars: &[
                (XenDriver, Tx, Some(3760.0)),
                (XenDriverOpt, Tx, Some(3760.0)),
                (GuestNone, Tx, Some(750.0)),
                (GuestHighIocSp, Tx, Some(3310.0)),
                (Default, Tx, None),
            ],
        },
        PaperFigure {
            id: "Figure 4",
            title: "Receive throughput in different configurations",
            linux_mbps: 2508.0,
            bars: &[
                (XenDriver, Rx, Some(1738.0)),
                (XenDriverOpt, Rx, Some(2343.0)),
                (GuestNone, Rx, Some(820.0)),
                (GuestHighIocSp, Rx, Some(970.0)),
                (Default, Rx, None),
            ],
        },
        PaperFigure {
            id: "Figure 5",
            title: "Contribution of individual transmit optimizations",
            linux_mbps: 3760.0,
            bars: &[
                (GuestNone, Tx, Some(750.0)),
                (GuestSp, Tx, Some(766.0)),
                (GuestIoc, Tx, Some(806.0)),
                (GuestHigh, Tx, Some(2794.0)),
                (GuestHighIoc, Tx, Some(3230.0)),
                (GuestHighIocSp, Tx, Some(3310.0)),
            ],
        },
        PaperFigure {
            id: "Figure 7",
            title: "The high-level interface over ports of each capability",
            linux_mbps: 3760.0,
            bars: &[
                (GuestNone, Tx, Some(750.0)),
                (PortNone, Tx, Some(1461.0)),
                (PortCsum, Tx, None),
                (PortSg, Tx, None),
                (PortSgCsum, Tx, Some(2007.0)),
                (GuestHigh, Tx, Some(2794.0)),
            ],
        },
        PaperFigure {
            id: "Figure 10",
            title: "Transmit with copying writes",
            linux_mbps: 3760.0,
            bars: &[
                (GuestNone, TxWrites, None),
                (GuestSp, TxWrites, None),
                (GuestIoc, TxWrites, None),
                (GuestHigh, TxWrites, None),
                (GuestHighIoc, TxWrites, None),
                (GuestHighIocSp, TxWrites, Some(1848.0)),
                (Default, TxWrites, None),
            ],
        },
        PaperFigure {
            id: "Figure 11",
            title: "Receive in the driver domain's configurations",
            linux_mbps: 2508.0,
            bars: &[
                (XenDriver, Rx, Some(1738.0)),
                (DriverMtu, Rx, Some(2033.0)),
                (XenDriverOpt, Rx, Some(2301.0)),
            ],
        },
        PaperFigure {
            id: "Figure 13",
            title: "Receive in the guest: page flip, copy, copy on superpages",
            linux_mbps: 2508.0,
            bars: &[
                (GuestNone, Rx, Some(820.0)),
                (GuestCopy, Rx, Some(970.0)),
                (GuestCopySp, Rx, Some(970.0)),
                (Default, Rx, None),
            ],
        },
    ]
};

/// Names a bar as the paper's figure does.
pub fn bar_label(id: &str, cfg: M6Config) -> &'static str {
    match (id, cfg) {
        ("Figure 3" | "Figure 4", M6Config::XenDriver) => "Xen-driver",
        ("Figure 3" | "Figure 4", M6Config::GuestNone) => "Xen-guest",
        ("Figure 3" | "Figure 4", M6Config::GuestHighIocSp) => "Xen-guest-opt",
        ("Figure 7", M6Config::PortNone) => "None",
        ("Figure 7", M6Config::PortCsum) => "Csum",
        ("Figure 7", M6Config::PortSg) => "SG",
        ("Figure 7", M6Config::PortSgCsum) => "SG+Csum",
        ("Figure 7", M6Config::GuestHigh) => "TSO",
        ("Figure 11", M6Config::XenDriver) => "Driver-none",
        ("Figure 11", M6Config::XenDriverOpt) => "Driver-MTU-SP",
        ("Figure 13", M6Config::GuestCopy) => "Guest-copy",
        ("Figure 13", M6Config::GuestCopySp) => "Guest-copy-SP",
        _ => cfg.name(),
    }
}
