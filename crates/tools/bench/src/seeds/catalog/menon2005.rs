//! Menon et al. 2005 (Xenoprof): each result figure and table, with its key effects.

use super::e;
use crate::seeds::{Entry, Scope::*, Seed::*};

#[rustfmt::skip]
pub const ENTRIES: [Entry; 16] = [
    e(Menon2005, "Figure 1", "Receive throughput against the application's buffer size (the anomaly)", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Figure 2", "The anomaly's two points, high and low throughput, as profiled", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Table 1", "Driver domain's profile at the two points", "menon2005", Effects(&[]),
      &[("Xen share at the fast point %", 30.0), ("Xen share at the slow point %", 11.0)]),
    e(Menon2005, "Table 2", "Guest kernel functions at the two points", "menon2005", Effects(&[]),
      &[("skb_copy_bits share at the slow point %", 28.0)]),
    e(Menon2005, "Figure 3", "Receive throughput, native and driver domain, one to three NICs", "menon2005", Effects(&[]),
      &[("driver domain ÷ native, best", 0.76)]),
    e(Menon2005, "Figure 4", "Hardware events of the driver domain against Linux, receive", "menon2005", Effects(&[]),
      &[("D-TLB misses, driver domain ÷ Linux", 13.0), ("I-TLB misses, driver domain ÷ Linux", 17.0)]),
    e(Menon2005, "Table 3", "Data TLB misses by function in the driver domain", "menon2005", Effects(&[]),
      &[("top function's share of D-TLB misses %", 9.48)]),
    e(Menon2005, "Table 4", "The costliest routines in the driver domain, receive", "menon2005", Effects(&[]),
      &[("skbuff_ctor %", 9.15), ("mask_and_ack_irq %", 6.01)]),
    e(Menon2005, "Figure 5", "Hardware events: driver domain against a guest with one and two CPUs", "menon2005", Effects(&[]),
      &[("guest instruction cost ÷ driver domain (1 CPU)", 2.25), ("guest instruction cost ÷ driver domain (2 CPUs)", 2.52)]),
    e(Menon2005, "Table 5", "Instruction samples per domain and Xen in each configuration", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Table 6", "Instructions in Xen by function class, guest receiving", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Table 7", "Instructions in the driver domain by function class, guest receiving", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Figure 6", "Hardware events of the driver domain against a guest, sending", "menon2005", Effects(&[]),
      &[("guest TX ÷ native", 0.19), ("guest instruction cost ÷ driver domain", 8.15)]),
    e(Menon2005, "Table 8", "Instruction samples, guest and driver domain, sending", "menon2005", Effects(&[]),
      &[]),
    e(Menon2005, "Figure 7", "Web server throughput against request rate", "menon2005", Effects(&[]),
      &[("driver domain peak ÷ Linux, below", 0.80), ("guest (1 CPU) peak ÷ Linux", 0.34)]),
    e(Menon2005, "Figure 8", "Hardware events of the web server at 5000 requests/s", "menon2005", Effects(&[]),
      &[]),
];
