//! An AMD Am79C970A (PCnet-PCI II) subset: the Lance-family NIC that
//! VMware Workstation emulated (Sugerman §2.2) and qemu-dm offered HVM guests
//! (Zhang & Dong §5.3), driven by Linux's `pcnet32`.
//!
//! Supported: word I/O mode (APROM, RDP, RAP, RESET, BDP); CSR0 with its
//! commands (INIT, STRT, STOP, TDMD), its interrupt flags and their
//! write-one-to-clear semantics, IENA and INTA; CSR1/CSR2 (init block
//! address); CSR3 (interrupt masks); CSR4 (APAD_XMT, DPOLL, UINT, TXSTRT,
//! MFCO and their masks); CSR8–15 (LADRF, PADR, MODE with PROM, DRCVBC,
//! DRCVPA, DTX, DRX); CSR24/25 and CSR30/31 (ring bases); CSR58/BCR20
//! (software style); CSR72/74 (ring counters, read-only here); CSR76/78
//! (ring lengths); CSR88/89 (chip ID 0x2621); CSR112 (missed frames); BCRs
//! 2–31 as storage with their reset values. Software styles 2 (what
//! `pcnet32` selects) and 3; styles 0 and 1 (16-bit and ILACC structures)
//! are refused at INIT. Not modelled: DWIO mode, suspend, loopback, the
//! CSR5 interrupt sources, MII and EEPROM.

mod device;
pub mod regs;

pub use device::{
    FrameLog, FrameSink, NicStats, Pcnet, PcnetConfig, Ring, RxDrop, RxOutcome, TX_BUFFER,
};

#[cfg(test)]
mod tests;
