//! A frame's headers and offload state, parsed once and shared by both
//! ends of a vif (Menon 2006 §3, the high-level virtual interface; Ram
//! thesis 5.1, LRO). Everything here reads untrusted bytes: a short or
//! inconsistent frame is an error, never a panic.
#![forbid(unsafe_code)]

pub mod lro;
pub mod offload;
pub mod packet;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
