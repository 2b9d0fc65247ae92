//! Emulated register-level devices: the foundation of splitnet's third kind
//! of guest NIC, beside the paravirtual vif (issue 10).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod crc;
mod mem;
pub mod pcnet;
pub mod pic;
mod pio;

pub use mem::{GuestMemory, OutOfRange};
pub use pcnet::{FrameSink, NicStats, Pcnet, PcnetConfig, RxDrop, RxOutcome};
pub use pic::{DualPic, I8259};
pub use pio::{CountingIo, IoWidth, PortCounts, PortIo, PIC_PORTS};
