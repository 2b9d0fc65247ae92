//! Sugerman, Venkitachalam, Lim 2001: each result figure and table, with its key effects.

use super::e;
use crate::seeds::{Entry, Scope::*, Seed::*};

#[rustfmt::skip]
pub const ENTRIES: [Entry; 5] = [
    e(Sugerman, "Figure 5", "Time along the path of one transmit-triggering OUT", "hosted", Effects(&[]),
      &[("OUT end to end, µs", 31.63), ("world switch, µs", 8.9)]),
    e(Sugerman, "Table 1", "Where transmit time goes, Workstation 2.0 (unoptimized)", "hosted", Effects(&[]),
      &[]),
    e(Sugerman, "Table 2", "Where transmit time goes with the VMM's optimizations", "hosted", Effects(&[]),
      &[]),
    e(Sugerman, "Figure 6", "Transmit throughput against send size", "hosted", Effects(&[]),
      &[("unoptimized ÷ native, 4 KB", 0.64), ("optimized ÷ native", 1.00)]),
    e(Sugerman, "Table 3", "Idle time per configuration while transmitting", "hosted", Effects(&[]),
      &[("native idle %", 86.0), ("ports in the VMM idle %", 2.0), ("+ send combining idle %", 17.9), ("+ IRQ notification idle %", 21.7)]),
];
