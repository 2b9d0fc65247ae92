//! Menon, Cox, Zwaenepoel 2006: each result figure and table, with its key
//! effects. Throughputs are ratios to native (the paper's Mb/s over its
//! Linux's: 3760 TX, 2508 RX); cycles are per frame, by domain.

use super::e;
use crate::seeds::{Claim::*, Effect, Entry, Scope::*, Seed::*};

const fn fx(claim: &'static str, what: crate::seeds::Claim) -> Effect {
    Effect { claim, what }
}

const TLB: &str = "TLB misses need a hardware PMU, which this host does not expose, and no software \
                   stand-in counts a TLB; superpages' effect shows in throughput and cycles instead";

#[rustfmt::skip]
pub const ENTRIES: [Entry; 12] = [
    e(Menon2006, "Table 1", "TCP throughput of Linux, the driver domain and a guest, TX and RX", "menon2006", Effects(&[
        fx("the Xen 2.0 guest transmits at 0.20 of native (§2.2)", Ratio { num: "guest TX ÷ native", den: "", paper: 0.20 }),
        fx("the Xen 2.0 guest receives at 0.33 of native", Ratio { num: "guest RX ÷ native", den: "", paper: 0.33 }),
        fx("the driver domain receives at 0.69 of native", Ratio { num: "driver RX ÷ native", den: "", paper: 0.69 }),
        fx("the driver domain transmits at native speed", Ratio { num: "driver TX ÷ native", den: "", paper: 1.0 }),
      ]),
      &[("driver RX ÷ native", 0.69), ("driver TX ÷ native", 1.00), ("guest RX ÷ native", 0.33), ("guest TX ÷ native", 0.20)]),
    e(Menon2006, "Figure 3", "Transmit throughput, unoptimized and optimized driver domain and guest", "menon2006", Effects(&[
        fx("the optimizations raise guest transmit 4.4× (750 to 3310 Mb/s)", Ratio { num: "Xen-guest-opt ÷ native", den: "Xen-guest ÷ native", paper: 4.41 }),
        fx("the optimized guest transmits within 12% of native", Ratio { num: "Xen-guest-opt ÷ native", den: "", paper: 0.88 }),
        fx("the driver domain transmits at native speed", Ratio { num: "Xen-driver ÷ native", den: "", paper: 1.0 }),
      ]),
      &[("Xen-driver ÷ native", 1.00), ("Xen-driver-opt ÷ native", 1.00), ("Xen-guest ÷ native", 0.20), ("Xen-guest-opt ÷ native", 0.88)]),
    e(Menon2006, "Figure 4", "Receive throughput, unoptimized and optimized driver domain and guest", "menon2006", Effects(&[
        fx("the optimized driver domain receives 35% more (1738 to 2343 Mb/s)", Ratio { num: "Xen-driver-opt ÷ native", den: "Xen-driver ÷ native", paper: 1.35 }),
        fx("the optimized guest receives 18% more (820 to 970 Mb/s)", Ratio { num: "Xen-guest-opt ÷ native", den: "Xen-guest ÷ native", paper: 1.18 }),
        fx("the optimized driver domain receives within 7% of native", Ratio { num: "Xen-driver-opt ÷ native", den: "", paper: 0.93 }),
        fx("the optimized guest still receives 61% below native", Ratio { num: "Xen-guest-opt ÷ native", den: "", paper: 0.39 }),
      ]),
      &[("Xen-driver ÷ native", 0.69), ("Xen-driver-opt ÷ native", 0.93), ("Xen-guest ÷ native", 0.33), ("Xen-guest-opt ÷ native", 0.39)]),
    e(Menon2006, "Figure 5", "Each transmit optimization alone and combined (the Guest-* configurations)", "menon2006", Effects(&[
        fx("the high-level interface dominates: alone it beats the I/O channel alone", Order { hi: "Guest-high ÷ native", lo: "Guest-ioc ÷ native" }),
        fx("the high-level interface alone gains 3.7× (750 to 2794 Mb/s)", Ratio { num: "Guest-high ÷ native", den: "Guest-none ÷ native", paper: 3.73 }),
        fx("the I/O channel adds 16% on top of it (2794 to 3230 Mb/s)", Ratio { num: "Guest-high-ioc ÷ native", den: "Guest-high ÷ native", paper: 1.16 }),
        fx("the I/O channel alone gains 7% (750 to 806 Mb/s)", Ratio { num: "Guest-ioc ÷ native", den: "Guest-none ÷ native", paper: 1.07 }),
        fx("superpages alone make no real difference (+16 Mb/s)", Ratio { num: "Guest-sp ÷ native", den: "Guest-none ÷ native", paper: 1.0 }),
      ]),
      &[("Guest-none ÷ native", 0.20), ("Guest-sp ÷ native", 0.20), ("Guest-ioc ÷ native", 0.21), ("Guest-high ÷ native", 0.74), ("Guest-high-ioc ÷ native", 0.86), ("Guest-high-ioc-sp ÷ native", 0.88)]),
    e(Menon2006, "Figure 6", "Transmit cycles by domain: high-level against unoptimized interface", "menon2006", Effects(&[
        fx("the high-level interface cuts the guest's cost per byte about 4×", Ratio { num: "guest cycles, Guest-none", den: "guest cycles, Guest-high", paper: 4.0 }),
        fx("it cuts the hypervisor's 1.9×", Ratio { num: "hv cycles, Guest-none", den: "hv cycles, Guest-high", paper: 1.9 }),
        fx("it cuts the driver domain's 2.1×", Ratio { num: "driver cycles, Guest-none", den: "driver cycles, Guest-high", paper: 2.1 }),
      ]),
      &[]),
    e(Menon2006, "Figure 7", "The high-level interface against what the physical NIC can offload", "menon2006", Effects(&[
        fx("with a NIC of no offloads the high-level interface still nearly doubles transmit (750 to 1461 Mb/s)", Ratio { num: "None ÷ native", den: "Guest-none ÷ native", paper: 1.95 }),
        fx("scatter/gather in the NIC raises it further, to 2007 Mb/s", Ratio { num: "SG+Csum ÷ native", den: "None ÷ native", paper: 1.37 }),
        fx("checksum offload alone is comparable to none", Ratio { num: "Csum ÷ native", den: "None ÷ native", paper: 1.0 }),
        fx("TSO gives the most (2794 Mb/s)", Ratio { num: "TSO ÷ native", den: "SG+Csum ÷ native", paper: 1.39 }),
      ]),
      &[("Guest-none ÷ native", 0.20), ("None ÷ native", 0.39), ("SG+Csum ÷ native", 0.53), ("TSO ÷ native", 0.74)]),
    e(Menon2006, "Figure 8", "Transmit cycles with and without the I/O-channel optimization", "menon2006", Effects(&[
        fx("the I/O channel cuts the hypervisor's time 38%", Ratio { num: "hv cycles, Guest-high-ioc", den: "hv cycles, Guest-high", paper: 0.62 }),
        fx("the guest's time stays nearly the same", Ratio { num: "guest cycles, Guest-high-ioc", den: "guest cycles, Guest-high", paper: 1.0 }),
        fx("the driver domain's time stays nearly the same", Ratio { num: "driver cycles, Guest-high-ioc", den: "driver cycles, Guest-high", paper: 1.0 }),
      ]),
      &[]),
    e(Menon2006, "Figure 9", "TLB misses while transmitting, per configuration", "menon2006", NotMeasurable(TLB), &[]),
    e(Menon2006, "Figure 10", "Transmit throughput with copying writes instead of sendfile", "menon2006", Effects(&[
        fx("the optimizations still beat the unoptimized guest with copying writes", Order { hi: "Guest-high-ioc-sp ÷ native", lo: "Guest-none ÷ native" }),
        fx("the best with writes is 0.56 of the best with sendfile (1848 against 3310 Mb/s)", Ratio { num: "Guest-high-ioc-sp writes Gbit/s", den: "Guest-high-ioc-sp sendfile Gbit/s", paper: 0.56 }),
        fx("the contributions split as with sendfile: the high-level interface beats the I/O channel", Order { hi: "Guest-high ÷ native", lo: "Guest-ioc ÷ native" }),
      ]),
      &[("Guest-high-ioc-sp ÷ native", 0.49), ("Guest-high-ioc-sp sendfile ÷ native", 0.88)]),
    e(Menon2006, "Figure 11", "Driver-domain receive: page-sized against MTU-sized buffers, superpages", "menon2006", Effects(&[
        fx("MTU-sized buffers raise driver-domain receive 17% (1738 to 2033 Mb/s)", Ratio { num: "Driver-MTU ÷ native", den: "Driver-none ÷ native", paper: 1.17 }),
        fx("superpages add 13% (2033 to 2301 Mb/s)", Ratio { num: "Driver-MTU-SP ÷ native", den: "Driver-MTU ÷ native", paper: 1.13 }),
      ]),
      &[("Driver-none ÷ native", 0.69), ("Driver-MTU ÷ native", 0.81), ("Driver-MTU-SP ÷ native", 0.92)]),
    e(Menon2006, "Figure 12", "Data TLB misses of the driver-domain receive configurations", "menon2006", NotMeasurable(TLB), &[]),
    e(Menon2006, "Figure 13", "Guest receive: page flip against copy, with and without superpages", "menon2006", Effects(&[
        fx("copying beats page flipping by 18% (820 to 970 Mb/s)", Ratio { num: "Guest-copy ÷ native", den: "Guest-none ÷ native", paper: 1.18 }),
        fx("superpages make no visible difference", Ratio { num: "Guest-copy-SP ÷ native", den: "Guest-copy ÷ native", paper: 1.0 }),
      ]),
      &[("Guest-none ÷ native", 0.33), ("Guest-copy ÷ native", 0.39), ("Guest-copy-SP ÷ native", 0.39)]),
];
