//! A frame's headers and offload state, parsed once and shared by both
//! ends of a vif (Menon 2006 §3, the high-level virtual interface; Ram
//! thesis 5.1, LRO). [`wire`] holds one zero-copy view and one validated
//! repr per header, and the one walk from the Ethernet header to the
//! transport header that every layer (netback's checks, the bridge, VLANs,
//! the offload driver, LRO) takes its offsets from. Everything here reads
//! untrusted bytes: a short or inconsistent frame is an error, never a
//! panic.
#![forbid(unsafe_code)]

mod error;
mod headers;
pub mod lro;
pub mod offload;
pub mod packet;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod wire;
