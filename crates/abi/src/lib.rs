//! Xen's shared-memory wire formats, byte-compatible with its public headers.
//!
//! Each format has a zero-copy checked view over bytes and a validated owned
//! representation (STYLE.md, smoltcp). Nothing in this crate does I/O.
//!
//! - [`ring`]: `io/ring.h` shared rings (the I/O channel) and their two ends.
//! - [`netif`]: `io/netif.h` transmit/receive requests, responses, extra info.
//! - [`grant`]: `grant_table.h` entries, copy/map/unmap/transfer operations.
//! - [`xenbus`]: `io/xenbus.h` states, netif store keys, store path rules.
#![deny(unsafe_code)]

mod error;
pub mod grant;
pub mod mem;
pub mod netif;
pub mod ring;
mod wire;
pub mod xenbus;

pub use error::Error;
pub use mem::{HeapMemory, SharedMemory};

/// Shared ownership of a memory region, e.g. one `HeapMemory` used by both
/// ends of a ring on different threads.
impl<M: SharedMemory + ?Sized> SharedMemory for std::sync::Arc<M> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        (**self).read_bytes(off, dst)
    }
    fn write_bytes(&self, off: usize, src: &[u8]) {
        (**self).write_bytes(off, src)
    }
    fn load_u32(&self, off: usize) -> u32 {
        (**self).load_u32(off)
    }
    fn store_u32(&self, off: usize, v: u32) {
        (**self).store_u32(off, v)
    }
    fn cmpxchg_u16(&self, off: usize, old: u16, new: u16) -> Result<u16, u16> {
        (**self).cmpxchg_u16(off, old, new)
    }
    fn load_u16(&self, off: usize) -> u16 {
        (**self).load_u16(off)
    }
}
