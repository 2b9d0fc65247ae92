//! Xen's shared-memory wire formats, byte-compatible with its public headers.
//!
//! Each format has a zero-copy checked view over bytes and a validated owned
//! representation (STYLE.md, smoltcp). Nothing in this crate does I/O.
#![deny(unsafe_code)]

pub mod mem;

pub use mem::{HeapMemory, SharedMemory};
