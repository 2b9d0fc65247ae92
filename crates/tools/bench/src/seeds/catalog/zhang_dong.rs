//! Zhang and Dong: each result figure and table, with its key effects.

use super::e;
use crate::seeds::{Entry, Scope::*, Seed::*};

#[rustfmt::skip]
pub const ENTRIES: [Entry; 12] = [
    e(ZhangDong, "Table 1", "Exits by reason and their cost, CPU2000", "hvm", Effects(&[]),
      &[("I/O share of exits %", 37.9), ("I/O share of handling time %", 90.06), ("cycles per I/O exit", 158413.0)]),
    e(ZhangDong, "Table 2", "Exits by reason and their cost, kernel build", "hvm", NotMeasurable("no guest operating system runs a kernel build here; Table 1's accounting covers the network case"),
      &[("I/O share of handling time %", 57.93)]),
    e(ZhangDong, "Table 3", "A dummy port I/O, stage by stage", "hvm", Effects(&[]),
      &[("round trip, cycles", 51397.0), ("hypervisor share %", 32.58), ("process switch share %", 25.39)]),
    e(ZhangDong, "Table 4", "The PIC ports' share of I/O cost", "hvm", Effects(&[]),
      &[("PIC ports' share of I/O cost %", 97.78)]),
    e(ZhangDong, "Table 5", "Gain from moving the virtual PIC into the hypervisor", "hvm", Effects(&[]),
      &[("CPU2000 gain %", 6.58), ("kernel build gain %", 14.44)]),
    e(ZhangDong, "Table 6", "I/O port costs after the move, kernel build", "hvm", Effects(&[]),
      &[("PIC port cycles after the move", 4499.0), ("PIC share of I/O time %", 2.67)]),
    e(ZhangDong, "Table 7", "IDE bus-master command register access costs", "", OutOfScope("IDE DMA emulation is disk, not network"),
      &[]),
    e(ZhangDong, "Table 8", "Gain from concurrent IDE DMA emulation", "", OutOfScope("IDE DMA emulation is disk, not network"),
      &[]),
    e(ZhangDong, "Table 9", "scp into and out of the guest: polling against event-driven NIC", "hvm", Effects(&[]),
      &[("to guest, original KB/s", 174.0), ("to guest, event-driven KB/s (low end)", 4000.0), ("from guest, original KB/s", 290.0), ("from guest, event-driven KB/s (low end)", 2000.0)]),
    e(ZhangDong, "Figure 2", "HVM domain against native across benchmarks", "", NotMeasurable("needs hardware-virtualized guests running CPU and disk benchmarks; splitnet's domains are processes"),
      &[]),
    e(ZhangDong, "Table 10", "X startup and an xterm with shared video memory", "", OutOfScope("shared video memory is graphics, not network"),
      &[]),
    e(ZhangDong, "Table 11", "x11perf with shared video memory", "", OutOfScope("shared video memory is graphics, not network"),
      &[]),
];
