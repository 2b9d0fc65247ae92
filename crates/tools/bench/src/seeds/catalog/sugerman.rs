//! Sugerman, Venkitachalam, Lim 2001: each result figure and table, with
//! its key effects. Shares are percent of the time (ours: of the VM world's
//! window); the paper's Tables 1–2 split their VMM time further, in percent
//! of the VMM's time, where the claims say so.

use super::e;
use crate::seeds::{Claim::*, Effect, Entry, Scope::*, Seed::*};

const fn fx(claim: &'static str, what: crate::seeds::Claim) -> Effect {
    Effect { claim, what }
}

#[rustfmt::skip]
pub const ENTRIES: [Entry; 5] = [
    e(Sugerman, "Figure 5", "Time along the path of one transmit-triggering OUT", "hosted", Effects(&[
        fx("almost all of the OUT's time is spent in world switches and the host world (30.65 of 31.63 µs, §3.2)", Level { of: "switches and host world, % of the OUT", paper: 96.9 }),
        fx("the transmitting OUT takes 31.63 µs end to end", Level { of: "OUT end to end, µs", paper: 31.63 }),
        fx("the hosted architecture adds 13.10 µs beyond the VMNet write", Level { of: "hosted overhead beyond the VMNet write, µs", paper: 13.10 }),
        fx("the VMNet write, the packet's real transmit, takes 17.55 µs", Level { of: "VMNet write, µs", paper: 17.55 }),
        fx("a world switch to the host and back costs about 8.90 µs", Level { of: "world switch, µs", paper: 8.9 }),
      ]),
      &[("switches and host world, % of the OUT", 96.9), ("OUT end to end, µs", 31.63), ("hosted overhead beyond the VMNet write, µs", 13.10), ("VMNet write, µs", 17.55), ("world switch, µs", 8.9)]),
    e(Sugerman, "Table 1", "Where transmit time goes, Workstation 2.0 (unoptimized)", "hosted", Effects(&[
        fx("I/O that world switches to the VMApp costs more than the host network I/O itself (IN/OUTs that switch: 26.8% of the VMM's time, 20.7% of all, against 9.5% in VMNet)", Order { hi: "switching I/O %, unoptimized", lo: "host network I/O %, unoptimized" }),
        fx("the VMM world, world switches included, takes 77.3% of the time", Level { of: "VMM world incl. world switches %, unoptimized", paper: 77.3 }),
        fx("VMNet sends and receives take 9.5% (8.7 + 0.8)", Level { of: "host network I/O %, unoptimized", paper: 9.5 }),
        fx("the VMApp's Lance emulation (status register 4.0%, transmit path 3.3%) takes 7.3%", Level { of: "VMApp Lance emulation %, unoptimized", paper: 7.3 }),
        fx("each transmitted packet takes 12 port accesses, the transmitting OUT and 11 others (§3.2)", Level { of: "NIC port accesses per transmitted packet, unoptimized", paper: 12.0 }),
        fx("the virtual NIC raises an IRQ on every packet sent and received", Level { of: "virtual IRQs per packet, unoptimized", paper: 1.0 }),
      ]),
      &[("switching I/O %, unoptimized", 26.8), ("VMM world incl. world switches %, unoptimized", 77.3), ("host network I/O %, unoptimized", 9.5), ("VMApp Lance emulation %, unoptimized", 7.3),
        ("NIC port accesses per transmitted packet, unoptimized", 12.0), ("virtual IRQs per packet, unoptimized", 1.0)]),
    e(Sugerman, "Table 2", "Where transmit time goes with the VMM's optimizations", "hosted", Effects(&[
        fx("the optimizations remove nearly all switching I/O (IN/OUTs that world switch: 26.8% → 0.5% of the VMM's time, §3.3)", Ratio { num: "switching I/O %, optimized", den: "switching I/O %, unoptimized", paper: 0.5 / 26.8 }),
        fx("the guest now idles, 21.7% of the time (none before)", Level { of: "idle %, optimized", paper: 21.7 }),
        fx("VMNet's share of the time doubles (9.5% → 20.4%): the same sends in less time, host IRQs taken inside the call", Ratio { num: "host network I/O %, optimized", den: "host network I/O %, unoptimized", paper: 20.4 / 9.5 }),
        fx("a packet's VMNet write costs what it did before (within 100 cycles of Figure 5's)", Ratio { num: "VMNet write per frame µs, optimized", den: "VMNet write per frame µs, unoptimized", paper: 1.0 }),
        fx("they cut the world switches per packet (§3.3)", Order { hi: "world switches per packet, unoptimized", lo: "world switches per packet, optimized" }),
        fx("send combining delivers one virtual IRQ per batch, so fewer per packet", Order { hi: "virtual IRQs per packet, unoptimized", lo: "virtual IRQs per packet, optimized" }),
      ]),
      &[("switching I/O %, unoptimized", 26.8), ("switching I/O %, optimized", 0.5), ("idle %, optimized", 21.7), ("host network I/O %, unoptimized", 9.5), ("host network I/O %, optimized", 20.4)]),
    e(Sugerman, "Figure 6", "Transmit throughput against send size", "hosted", Effects(&[
        fx("the optimizations lift the CPU-bound guest to native speed (64 Mb/s to the link's rate, 4 KB sends)", Ratio { num: "optimized ÷ native, 4 KB", den: "unoptimized ÷ native, 4 KB", paper: 1.0 / 0.64 }),
        fx("optimized, the guest matches native at every send size", Ratio { num: "optimized ÷ native, lowest over sizes", den: "", paper: 1.0 }),
        fx("Workstation 2.0 is CPU bound at 64 Mb/s, well below the 100 Mb/s link", Ratio { num: "unoptimized ÷ native, 4 KB", den: "", paper: 0.64 }),
      ]),
      &[("unoptimized ÷ native, 4 KB", 0.64), ("optimized ÷ native, 4 KB", 1.00), ("optimized ÷ native, lowest over sizes", 1.00)]),
    e(Sugerman, "Table 3", "Idle time per configuration while transmitting", "hosted", Effects(&[
        fx("with all three optimizations the guest idles where Workstation 2.0 never did (§3.5)", Order { hi: "+ IRQ notification idle %", lo: "Version 2.0 idle %" }),
        fx("the optimized guest idles 21.7% of the time", Level { of: "+ IRQ notification idle %", paper: 21.7 }),
        fx("native idles far more than the optimized guest (86% against 21.7%)", Ratio { num: "native idle %", den: "+ IRQ notification idle %", paper: 86.0 / 21.7 }),
        fx("native idles 86% of the time", Level { of: "native idle %", paper: 86.0 }),
        fx("send combining adds most of the idle time (2.0% → 17.9%)", Ratio { num: "+ send combining idle %", den: "ports in the VMM idle %", paper: 17.9 / 2.0 }),
        fx("IRQ notification adds a little more (17.9% → 21.7%)", Ratio { num: "+ IRQ notification idle %", den: "+ send combining idle %", paper: 21.7 / 17.9 }),
      ]),
      &[("native idle %", 86.0), ("Version 2.0 idle %", 0.0), ("ports in the VMM idle %", 2.0), ("+ send combining idle %", 17.9), ("+ IRQ notification idle %", 21.7)]),
];
