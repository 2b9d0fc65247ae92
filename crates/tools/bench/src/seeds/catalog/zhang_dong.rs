//! Zhang and Dong: each result figure and table, with its key effects.
//! Cycles are as each side counts them (the paper's 3.8 GHz Xeon, our TSC);
//! an exit's handling runs from hv's wake-up to the guest's resume, as
//! xentrace's runs from VM exit to VM entry (§2.3.1).

use super::e;
use crate::seeds::{Claim::*, Effect, Entry, Scope::*, Seed::*};

const fn fx(claim: &'static str, what: crate::seeds::Claim) -> Effect {
    Effect { claim, what }
}

const DISK: &str = "IDE DMA emulation is disk, not network";
const VIDEO: &str = "shared video memory is graphics, not network";

#[rustfmt::skip]
pub const ENTRIES: [Entry; 12] = [
    e(ZhangDong, "Table 1", "Exits by reason and their cost, CPU2000", "", OutOfScope(
        "its claim, that I/O exits (37.9% of exits) take 90% of the handling time because each costs 8–16× an \
         exception or interrupt exit, is about the exit mix of a guest OS running CPU2000; our HVM vcpu runs no guest \
         kernel and makes only port I/O exits, so hv's accounting by reason under network traffic has I/O at nearly \
         all exits and handling by construction and is no stand-in; a forwarded I/O exit's cost is Table 3's"),
      &[("I/O share of exits %", 37.9), ("I/O share of handling time %", 90.06), ("cycles per I/O exit", 158413.0)]),
    e(ZhangDong, "Table 2", "Exits by reason and their cost, kernel build", "", OutOfScope(
        "needs a guest OS running a kernel build; as for Table 1, our vcpu's exits are all port I/O"),
      &[("I/O share of handling time %", 57.93)]),
    e(ZhangDong, "Table 3", "A dummy port I/O, stage by stage", "hvm", Effects(&[
        fx("the device model's own emulation is only about a sixth of the round trip (15.9%, §4.2)", Level { of: "device model share %", paper: 15.92 }),
        fx("the process switch in dom0 costs more than the device model", Order { hi: "process switch share %", lo: "device model share %" }),
        fx("hypervisor processing is the largest stage, a third (32.6%)", Level { of: "hypervisor share %", paper: 32.58 }),
        fx("the process switch in dom0 takes a quarter (25.4%)", Level { of: "process switch share %", paper: 25.39 }),
        fx("the switch back to the HVM domain takes 18.3%", Level { of: "switch back share %", paper: 18.25 }),
        fx("the domain switch to dom0 takes 7.9%", Level { of: "domain switch share %", paper: 7.85 }),
        fx("a dummy port I/O costs 51.4k cycles", Level { of: "round trip, cycles", paper: 51397.0 }),
      ]),
      &[("round trip, cycles", 51397.0), ("hypervisor share %", 32.58), ("domain switch share %", 7.85), ("process switch share %", 25.39), ("device model share %", 15.92), ("switch back share %", 18.25)]),
    e(ZhangDong, "Table 4", "The PIC ports' share of I/O cost", "hvm", Effects(&[
        fx("with the vPIC in the device model the PIC ports take nearly all I/O handling time (the table's column sums to 94.7%; the text's 97.78% is their share of I/O exits, §5.1)", Level { of: "PIC ports' share of I/O handling time %", paper: 94.67 }),
        fx("PIC accesses are 97.78% of the I/O exits", Level { of: "PIC ports' share of I/O exits %", paper: 97.78 }),
        fx("the guest's timer handler makes them: port 0x20 1005 times a second, 0x21 3006 times (§5.1)", Level { of: "PIC accesses per second", paper: 4011.0 }),
      ]),
      &[("PIC ports' share of I/O handling time %", 94.67), ("PIC ports' share of I/O exits %", 97.78), ("PIC accesses per second", 4011.0)]),
    e(ZhangDong, "Table 5", "Gain from moving the virtual PIC into the hypervisor", "hvm", Effects(&[
        fx("moving the vPIC into hv speeds a CPU-bound guest 7–14% (§5.1.1); the cycle soak by 12.07%", Level { of: "cycle soak gain %", paper: 12.07 }),
      ]),
      &[("CPU2000 gain %", 6.58), ("kernel build gain %", 14.44), ("cycle soak gain %", 12.07)]),
    e(ZhangDong, "Table 6", "I/O port costs after the move, kernel build", "hvm", Effects(&[
        fx("moving the vPIC into hv cuts a PIC access from the device model's 60–200k cycles (158k, Table 1's mean I/O exit, nearly all PIC) to about 4.5k (§5.1.1)", Ratio { num: "PIC exit cycles, vPIC in hv", den: "PIC exit cycles, vPIC in the device model", paper: 4499.0 / 158413.0 }),
        fx("a PIC (IMR) access in hv costs 4,499 cycles", Level { of: "PIC exit cycles, vPIC in hv", paper: 4499.0 }),
        fx("the PIC's share of I/O handling time falls to 2.67%", Level { of: "PIC share of I/O time after the move %", paper: 2.67 }),
      ]),
      &[("PIC exit cycles, vPIC in hv", 4499.0), ("PIC exit cycles, vPIC in the device model", 158413.0), ("PIC share of I/O time after the move %", 2.67)]),
    e(ZhangDong, "Table 7", "IDE bus-master command register access costs", "", OutOfScope(DISK),
      &[]),
    e(ZhangDong, "Table 8", "Gain from concurrent IDE DMA emulation", "", OutOfScope(DISK),
      &[]),
    e(ZhangDong, "Table 9", "scp into and out of the guest: polling against event-driven NIC", "hvm", Effects(&[
        fx("event-driven receive raises copies into the guest from 30 KB/s (vPIC in hv, polled every ~100 ms) to 4–8 MB/s (§5.3)", Ratio { num: "to guest, event-driven KB/s", den: "to guest, vPIC in hv KB/s", paper: 6000.0 / 30.0 }),
        fx("and copies out of the guest from 148 KB/s to 2–4 MB/s", Ratio { num: "from guest, event-driven KB/s", den: "from guest, vPIC in hv KB/s", paper: 3000.0 / 148.0 }),
        fx("polling every 5 ms gains nearly as much (3.5 MB/s into the guest)", Ratio { num: "to guest, polling 5 ms KB/s", den: "to guest, vPIC in hv KB/s", paper: 3500.0 / 30.0 }),
        fx("event-driven matches or beats 5 ms polling (4–8 against 3.5 MB/s)", Ratio { num: "to guest, event-driven KB/s", den: "to guest, polling 5 ms KB/s", paper: 6000.0 / 3500.0 }),
        fx("moving the vPIC into hv slows the polled NIC (174 → 30 KB/s into the guest, §5.1.2)", Ratio { num: "to guest, vPIC in hv KB/s", den: "to guest, original KB/s", paper: 30.0 / 174.0 }),
      ]),
      &[("to guest, original KB/s", 174.0), ("to guest, vPIC in hv KB/s", 30.0), ("to guest, polling 5 ms KB/s", 3500.0), ("to guest, event-driven KB/s", 6000.0),
        ("from guest, original KB/s", 290.0), ("from guest, vPIC in hv KB/s", 148.0), ("from guest, polling 5 ms KB/s", 2200.0), ("from guest, event-driven KB/s", 3000.0)]),
    e(ZhangDong, "Figure 2", "HVM domain against native across benchmarks", "", OutOfScope(
        "needs a guest OS running CPU, disk and Java benchmarks (CPU2000, kernel build, SpecJBB, Sysbench)"),
      &[]),
    e(ZhangDong, "Table 10", "X startup and an xterm with shared video memory", "", OutOfScope(VIDEO),
      &[]),
    e(ZhangDong, "Table 11", "x11perf with shared video memory", "", OutOfScope(VIDEO),
      &[]),
];
