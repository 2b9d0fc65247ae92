//! Ram's thesis: each result figure and table, with its key effects.
//! Cycles are per 1514-byte frame as the thesis prints them (its native
//! Linux: 2927 RX, 441 TX); a class ("class Xen", "class driver") is one of
//! the thesis's Table 2.1 cost classes; throughputs are ratios to native
//! (its Linux: 9.31 Gb/s).

use super::e;
use crate::seeds::{Claim::*, Effect, Entry, Scope::*, Seed::*};

const fn fx(claim: &'static str, what: crate::seeds::Claim) -> Effect {
    Effect { claim, what }
}

/// The new grant mechanism's receive effects (§4.8), shared by 4.10's
/// claims and the driver domain's in 4.12.
const NGM_RX_DRIVER: Effect = fx(
    "the new grant mechanism cuts the driver domain's RX cycles 21%",
    Ratio {
        num: "NGM RX driver domain",
        den: "Orig RX driver domain",
        paper: 0.79,
    },
);
const MQ_RX_DRIVER: Effect = fx(
    "multi-queue cuts the driver domain's RX cycles 67% (8782 to 2872)",
    Ratio {
        num: "MQ RX driver domain",
        den: "Orig RX driver domain",
        paper: 0.33,
    },
);
const NGM_TX_DRIVER: Effect = fx(
    "the new grant mechanism cuts the driver domain's TX cycles 64%",
    Ratio {
        num: "NGM TX driver domain",
        den: "Orig TX driver domain",
        paper: 0.36,
    },
);

#[rustfmt::skip]
pub const ENTRIES: [Entry; 13] = [
    e(Ram, "Figure 2.4", "RX cycles per packet by domain, Xen against native Linux", "ram", Effects(&[
        fx("Xen's receive costs 4.5× native's cycles per packet (13165 against 2927)", Ratio { num: "total ÷ native", den: "", paper: 4.50 }),
        fx("the driver domain costs twice the guest (8782 against 4383)", Ratio { num: "Orig RX driver domain", den: "Orig RX guest", paper: 2.00 }),
        fx("even the guest costs 1.5× native (4383 against 2927)", Ratio { num: "Orig RX guest", den: "native RX cycles", paper: 1.50 }),
        fx("the inter-domain copy is the largest part: 3840 of 13165 cycles", Ratio { num: "Orig RX class inter-domain copy", den: "Orig RX cycles", paper: 0.29 }),
        fx("the grant mechanism in the hypervisor costs 1623 of 13165 cycles", Ratio { num: "Orig RX class Xen", den: "Orig RX cycles", paper: 0.12 }),
      ]),
      &[("total ÷ native", 4.50), ("native RX cycles", 2927.0), ("Orig RX cycles", 13165.0), ("Orig RX driver domain", 8782.0), ("Orig RX guest", 4383.0),
        ("Orig RX class inter-domain copy", 3840.0), ("Orig RX class Xen", 1623.0)]),
    e(Ram, "Figure 2.5", "TX cycles per packet by domain, Xen against native Linux", "ram", Effects(&[
        fx("Xen's transmit costs 4.7× native's cycles per packet (2061 against 441)", Ratio { num: "total ÷ native", den: "", paper: 4.67 }),
        fx("the grant mechanism is 860 of the 2061 cycles", Ratio { num: "Orig TX grant share", den: "", paper: 0.42 }),
      ]),
      &[("total ÷ native", 4.67), ("native TX cycles", 441.0), ("Orig TX cycles", 2061.0), ("Orig TX grant share", 0.42)]),
    e(Ram, "Figure 3.4", "RX cycles per packet with a multi-queue NIC", "ram", Effects(&[
        fx("multi-queue cuts RX cycles per packet 43% (13165 to 7448)", Ratio { num: "MQ RX cycles", den: "Orig RX cycles", paper: 0.57 }),
        MQ_RX_DRIVER,
      ]),
      &[("native RX cycles", 2927.0), ("Orig RX cycles", 13165.0), ("MQ RX cycles", 7448.0), ("Orig RX driver domain", 8782.0), ("MQ RX driver domain", 2872.0)]),
    e(Ram, "Figure 3.5", "The driver domain's RX cycles by cost class, with and without multi-queue", "ram", Effects(&[
        MQ_RX_DRIVER,
        fx("the biggest cut is the inter-domain copy, gone: the NIC places frames in the guest's memory", Order { hi: "Orig RX driver domain class inter-domain copy", lo: "MQ RX driver domain class inter-domain copy" }),
        fx("\"network\" falls: no software bridge", Order { hi: "Orig RX driver domain class network", lo: "MQ RX driver domain class network" }),
        fx("\"driver\" falls: the driver domain no longer reads headers", Order { hi: "Orig RX driver domain class driver", lo: "MQ RX driver domain class driver" }),
        fx("\"other\" falls: netback recycles socket buffers", Order { hi: "Orig RX driver domain class other", lo: "MQ RX driver domain class other" }),
      ]),
      &[("Orig RX driver domain class inter-domain copy", 3840.0), ("MQ RX driver domain class inter-domain copy", 0.0), ("Orig RX driver domain", 8782.0), ("MQ RX driver domain", 2872.0)]),
    e(Ram, "Figure 4.4", "Share of cycles spent on grants, driver domain and guest", "ram", Effects(&[
        fx("the driver domain spends more on grants than the guest: using a grant costs more than creating it", Order { hi: "Orig RX driver domain grant share", lo: "Orig RX guest grant share" }),
        fx("once multi-queue removes the copy, the grant share of RX grows", Order { hi: "MQ RX grant share", lo: "Orig RX grant share" }),
      ]),
      &[]),
    e(Ram, "Figure 4.10", "RX cycles by domain with the new grant mechanism, alone and with multi-queue", "ram", Effects(&[
        fx("the new grant mechanism cuts RX cycles per packet 19%", Ratio { num: "NGM RX cycles", den: "Orig RX cycles", paper: 0.81 }),
        NGM_RX_DRIVER,
        fx("with multi-queue, RX cycles fall 51%", Ratio { num: "MQ+NGM RX cycles", den: "Orig RX cycles", paper: 0.49 }),
        fx("with multi-queue, the driver domain's fall 81% (8782 to 1635)", Ratio { num: "MQ+NGM RX driver domain", den: "Orig RX driver domain", paper: 0.19 }),
        fx("the guest's cost rises a little with multi-queue (more grant revocations)", Order { hi: "MQ+NGM RX guest", lo: "NGM RX guest" }),
      ]),
      &[("native RX cycles", 2927.0), ("Orig RX cycles", 13165.0), ("NGM RX cycles", 13165.0 * 0.81), ("Orig RX driver domain", 8782.0), ("MQ+NGM RX cycles", 6425.0), ("MQ+NGM RX driver domain", 1635.0)]),
    e(Ram, "Figure 4.11", "TX cycles by domain with the new grant mechanism", "ram", Effects(&[
        fx("the new grant mechanism cuts TX cycles per packet 47%", Ratio { num: "NGM TX cycles", den: "Orig TX cycles", paper: 0.53 }),
        NGM_TX_DRIVER,
        fx("TX falls to 2.4× native's cycles (from 4.7×)", Ratio { num: "NGM TX cycles", den: "native TX cycles", paper: 2.4 }),
      ]),
      &[("native TX cycles", 441.0), ("Orig TX cycles", 2061.0), ("NGM TX cycles", 2061.0 * 0.53)]),
    e(Ram, "Figure 4.12", "The driver domain's RX cycles by function class with the new grant mechanism", "ram", Effects(&[
        fx("the biggest cut is \"Xen\": the driver domain runs no grant code in the hypervisor", Order { hi: "Orig RX driver domain class Xen", lo: "NGM RX driver domain class Xen" }),
        fx("\"driver\" falls too (256 RX buffers fit the L2 cache)", Order { hi: "Orig RX driver domain class driver", lo: "NGM RX driver domain class driver" }),
        NGM_RX_DRIVER,
        fx("with multi-queue both mechanisms' savings add up", Order { hi: "NGM RX driver domain", lo: "MQ+NGM RX driver domain" }),
      ]),
      &[("Orig RX driver domain class Xen", 1623.0), ("Orig RX driver domain", 8782.0), ("MQ+NGM RX driver domain", 1635.0)]),
    e(Ram, "Figure 4.13", "The driver domain's TX cycles by function class with the new grant mechanism", "ram", Effects(&[
        fx("the biggest cut is \"Xen\", as in RX", Order { hi: "Orig TX driver domain class Xen", lo: "NGM TX driver domain class Xen" }),
        fx("\"network\" falls: each page is mapped at one place", Order { hi: "Orig TX driver domain class network", lo: "NGM TX driver domain class network" }),
        fx("\"netback\" falls: one pass per packet, no batched hypercalls", Order { hi: "Orig TX driver domain class netback", lo: "NGM TX driver domain class netback" }),
        fx("\"other\" falls: smaller TLB and cache working sets", Order { hi: "Orig TX driver domain class other", lo: "NGM TX driver domain class other" }),
        NGM_TX_DRIVER,
      ]),
      &[]),
    e(Ram, "Figure 5.1", "Guest receive optimizations: LRO, prefetch, half-page buffers", "ram", Effects(&[
        fx("the three guest optimizations cut the guest's cycles 31% (4790 to 3325)", Ratio { num: "HalfPG RX guest", den: "MQ+NGM RX guest", paper: 0.694 }),
        fx("LRO in the guest cuts them 7.3% (4790 to 4440)", Ratio { num: "LRO-guest RX guest", den: "MQ+NGM RX guest", paper: 0.927 }),
        fx("prefetch cuts a further 6% (4440 to 4176)", Ratio { num: "SPF RX guest", den: "LRO-guest RX guest", paper: 0.94 }),
        fx("half-page buffers cut a further 20% (4176 to 3325)", Ratio { num: "HalfPG RX guest", den: "SPF RX guest", paper: 0.80 }),
        fx("half-page buffers cut the driver domain's 18% too (1672 to 1378)", Ratio { num: "HalfPG RX driver domain", den: "SPF RX driver domain", paper: 0.82 }),
        fx("LRO in the driver domain cuts the guest's only 3.9% (4790 to 4602)", Ratio { num: "LRO-driver RX guest", den: "MQ+NGM RX guest", paper: 0.96 }),
        fx("the final guest costs 14% more than native (3325 against 2927)", Ratio { num: "HalfPG RX guest", den: "native RX cycles", paper: 1.14 }),
      ]),
      &[("native RX cycles", 2927.0), ("MQ+NGM RX guest", 4790.0), ("LRO-guest RX guest", 4440.0), ("LRO-driver RX guest", 4602.0), ("SPF RX guest", 4176.0),
        ("HalfPG RX guest", 3325.0), ("SPF RX driver domain", 1672.0), ("HalfPG RX driver domain", 1378.0)]),
    e(Ram, "Figure 5.2", "LRO in the guest against LRO in the driver domain: the driver domain's cycles", "ram", Effects(&[
        fx("LRO in the driver domain raises the driver domain's cycles 33% (1635 to 2181)", Ratio { num: "LRO-driver RX driver domain", den: "MQ+NGM RX driver domain", paper: 1.33 }),
        fx("LRO in the guest leaves the driver domain's cycles as they were", Ratio { num: "LRO-guest RX driver domain", den: "MQ+NGM RX driver domain", paper: 1.0 }),
        fx("LRO in the guest cuts the total 5%", Ratio { num: "LRO-guest RX cycles", den: "MQ+NGM RX cycles", paper: 0.95 }),
        fx("LRO in the driver domain raises the total 6%", Ratio { num: "LRO-driver RX cycles", den: "MQ+NGM RX cycles", paper: 1.06 }),
      ]),
      &[("MQ+NGM RX driver domain", 1635.0), ("LRO-driver RX driver domain", 2181.0), ("MQ+NGM RX cycles", 6425.0), ("LRO-guest RX cycles", 6075.0), ("LRO-driver RX cycles", 6783.0)]),
    e(Ram, "Figure 6.1", "Receive throughput, one and two guests, original and optimized", "ram", Effects(&[
        fx("the optimizations raise one guest's receive throughput 2.6× (3.0 to 7.9 Gb/s)", Ratio { num: "All RX ÷ native (Gb/s)", den: "Orig RX ÷ native (Gb/s)", paper: 2.63 }),
        fx("original Xen receives at 0.32 of native (3.0 against 9.31 Gb/s)", Ratio { num: "Orig RX ÷ native (Gb/s)", den: "", paper: 0.32 }),
        fx("the optimized guest receives at 0.85 of native (7.9 Gb/s)", Ratio { num: "All RX ÷ native (Gb/s)", den: "", paper: 0.85 }),
        fx("two guests together reach line rate, as native does", Ratio { num: "All RX two guests ÷ native (Gb/s)", den: "", paper: 1.0 }),
        fx("one guest sharing the driver domain's cache reaches line rate", Ratio { num: "All RX same core ÷ native (Gb/s)", den: "", paper: 1.0 }),
      ]),
      &[("Orig RX ÷ native (Gb/s)", 0.32), ("All RX ÷ native (Gb/s)", 0.85), ("All RX two guests ÷ native (Gb/s)", 1.01), ("All RX same core ÷ native (Gb/s)", 1.01)]),
    e(Ram, "Figure 6.2", "CPU use and cycles of the receive and transmit cases, original and optimized", "ram", Effects(&[
        fx("the optimized receive costs 1.6× native's cycles (from 4.5×)", Ratio { num: "All RX cycles ÷ native", den: "", paper: 1.6 }),
        fx("the optimized transmit costs 2.4× native's cycles (from 4.7×)", Ratio { num: "All TX cycles ÷ native", den: "", paper: 2.4 }),
        fx("RX cycles per packet fall 64%", Ratio { num: "All RX cycles", den: "Orig RX cycles", paper: 0.36 }),
        fx("original Xen: the driver domain's CPU is saturated", Level { of: "Orig RX driver domain CPU", paper: 1.0 }),
        fx("optimized: the guest's CPU is saturated", Level { of: "All RX guest CPU", paper: 1.0 }),
      ]),
      &[("All RX cycles ÷ native", 1.6), ("All TX cycles ÷ native", 2.4), ("Orig RX cycles", 13165.0), ("All RX cycles", 4739.0),
        ("Orig RX driver domain CPU", 1.0), ("All RX guest CPU", 1.0)]),
];
