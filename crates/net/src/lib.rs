//! The split-driver network path (Menon 2006 §2, Ram thesis ch. 2):
//! guest → netfront → I/O channel → netback → bridge → physical port.
#![deny(unsafe_code)]

pub mod bridge;
pub mod counters;
pub mod driver;
pub mod netback;
pub mod netfront;
pub mod offload;
pub mod packet;
pub mod port;
