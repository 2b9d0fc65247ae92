//! Ram's thesis: each result figure and table, with its key effects.

use super::e;
use crate::seeds::{Entry, Scope::*, Seed::*};

#[rustfmt::skip]
pub const ENTRIES: [Entry; 13] = [
    e(Ram, "Figure 2.4", "RX cycles per packet by domain, Xen against native Linux", "ram", Effects(&[]),
      &[("total ÷ native", 4.50), ("driver domain ÷ native total", 3.00), ("guest ÷ native total", 1.50)]),
    e(Ram, "Figure 2.5", "TX cycles per packet by domain, Xen against native Linux", "ram", Effects(&[]),
      &[("total ÷ native", 4.67)]),
    e(Ram, "Figure 3.4", "RX cycles per packet with a multi-queue NIC", "ram", Effects(&[]),
      &[("MQ total ÷ native", 2.54), ("MQ driver domain ÷ native total", 0.98)]),
    e(Ram, "Figure 3.5", "Multi-queue RX cycles by cost class", "ram", Effects(&[]),
      &[("MQ driver domain ÷ native total", 0.98)]),
    e(Ram, "Figure 4.4", "Share of cycles spent on grants, driver domain and guest", "ram", Effects(&[]),
      &[]),
    e(Ram, "Figure 4.10", "RX cycles by domain with the new grant mechanism", "ram", Effects(&[]),
      &[("NGM total ÷ Orig total", 0.81)]),
    e(Ram, "Figure 4.11", "RX cycles by domain with multi-queue and the new grant mechanism", "ram", Effects(&[]),
      &[("MQ+NGM total ÷ Orig total", 0.49)]),
    e(Ram, "Figure 4.12", "Functions behind the new grant mechanism's RX cost", "ram", Effects(&[]),
      &[("NGM total ÷ Orig total", 0.81)]),
    e(Ram, "Figure 4.13", "Functions behind multi-queue with the new grant mechanism", "ram", Effects(&[]),
      &[("MQ+NGM total ÷ Orig total", 0.49)]),
    e(Ram, "Figure 5.1", "Guest receive optimizations: LRO, prefetch, half-page buffers", "ram", Effects(&[]),
      &[("guest, MQ+NGM ÷ native total", 1.64), ("guest, LRO ÷ native total", 1.52), ("guest, + prefetch ÷ native total", 1.43), ("guest, + half pages ÷ native total", 1.14)]),
    e(Ram, "Figure 5.2", "LRO in the guest against LRO in the driver domain", "ram", Effects(&[]),
      &[("driver, MQ+NGM ÷ native total", 0.56), ("driver, LRO in the driver ÷ native total", 0.75)]),
    e(Ram, "Figure 6.1", "Receive throughput, one and two guests, original and optimized", "ram", Effects(&[]),
      &[("one guest, Orig ÷ native", 0.32), ("one guest, optimized ÷ native", 0.85), ("two guests ÷ native", 1.01)]),
    e(Ram, "Figure 6.2", "CPU use of the receive cases, with and without a shared cache", "ram", Effects(&[]),
      &[("final RX cycles ÷ native", 1.6), ("final TX cycles ÷ native", 2.4)]),
];
