//! Xen's shared-memory wire formats, byte-compatible with its public headers.
//!
//! Each format has a zero-copy checked view over bytes and a validated owned
//! representation, as in smoltcp. Nothing in this crate does I/O.
//!
//! - [`ring`]: `io/ring.h` shared rings (the I/O channel) and their two ends.
//! - [`netif`]: `io/netif.h` transmit/receive requests, responses, extra info.
//! - [`grant`]: `grant_table.h` entries, copy/map/unmap/transfer operations.
//! - [`xenbus`]: `io/xenbus.h` states, netif store keys, store path rules.
//! - [`offloads`]: a vif's or port's offload capabilities, one switch each,
//!   and their netif store keys.
//! - [`ioreq`]: `hvm/ioreq.h`, an HVM guest's I/O request to its device model.
//! - [`inet`]: the Ethernet, IP, TCP and UDP headers netback and the
//!   software offload driver read from untrusted frames.
#![forbid(unsafe_code)]

mod error;
pub mod grant;
pub mod inet;
pub mod ioreq;
pub mod mem;
pub mod netif;
pub mod offloads;
pub mod ring;
pub mod vif_backend;
mod wire;
pub mod xenbus;

pub use error::Error;
pub use mem::{FrameRange, HeapMemory, MemError, Pfn, SharedMemory, Window};
