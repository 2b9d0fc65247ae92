//! Emulated register-level devices: the foundation of splitnet's third kind
//! of guest NIC, beside the paravirtual vif: an unmodified driver reaches
//! a register-level device through port I/O.
//!
//! The two architectures this serves, and what here they rest on:
//!
//! - **The hosted VMM** (Sugerman, Venkitachalam and Lim, USENIX 2001). The
//!   guest's unmodified `pcnet32` driver talks to a virtual AMD Lance
//!   (Am79C970A) through IN and OUT instructions, each trapped by the VMM and
//!   emulated there or, after a world switch, in the VMApp (§2.1–2.3). A
//!   transmitted packet costs 12 port accesses and one IRQ (§3.2, §4.3), and
//!   each guest IRQ five accesses to the virtual PIC (§4.1). The
//!   optimizations of §3.3 (ports handled in the VMM, the address register's
//!   memory semantics, send combining that leaves packets in the Lance's
//!   transmit ring) are register-level facts this crate exposes: [`Pcnet`]
//!   separates the address port from the data ports and can hold frames in
//!   the ring until polled ([`PcnetConfig::transmit_on_demand`]).
//! - **The HVM device model** (Zhang and Dong, Xen on Intel VT). An I/O exit
//!   goes from the guest through the hypervisor to qemu-dm in dom0 (§2.2,
//!   §4.2's five stages); the virtual PIC is accessed four times per timer
//!   interrupt by Linux's i8259 code (§5.1) and was moved into the
//!   hypervisor; the PCnet model was made event-driven (§5.3).
//!
//! What exists:
//! - [`GuestMemory`]: bounds-checked DMA over any `abi::SharedMemory`, so the
//!   same device code runs on a shared memfd mapping or in a test.
//! - [`Pcnet`]: the NIC, register-exact for what `pcnet32` uses
//!   ([`pcnet`] lists the subset).
//! - [`DualPic`]/[`I8259`]: the 8259A pair.
//! - [`PortIo`] and [`CountingIo`]: the guest's port space and a counter of
//!   the accesses (the traps) per packet and per interrupt.
//! - [`driver`]: a `pcnet32`-like guest driver and the guest kernel's i8259
//!   interrupt path, making the same port accesses in the same order.
//! - [`Machine`]: NIC, PIC pair and memory wired together in one process,
//!   the reference the trap-based worlds are measured against.
//!
//! Everything the guest controls is hostile: no panic, no unbounded loop, no
//! access outside guest memory, whatever it writes (see `tests/hostile.rs`
//! and the `nic_ports` fuzz target).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod crc;
pub mod driver;
pub mod fuzz;
mod machine;
mod mem;
pub mod pcnet;
pub use vpic as pic;
mod pio;

pub use machine::{Machine, NIC_IO_BASE, NIC_IRQ};
pub use mem::{GuestMemory, OutOfRange};
pub use pcnet::{FrameLog, FrameSink, NicStats, Pcnet, PcnetConfig, RxDrop, RxOutcome};
pub use pic::{DualPic, I8259};
pub use pio::{CountingIo, IoWidth, PortCounts, PortIo, PIC_PORTS};
