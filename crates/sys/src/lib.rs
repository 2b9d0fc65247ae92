//! The one place splitnet touches raw shared memory and raw file descriptors.
//!
//! Everything above this crate is safe Rust (STYLE.md, rust-vmm vm-memory):
//! - [`Memfd`]: a domain's frames, sealed against resizing so a peer can never
//!   make a mapping fault, with a read-only reopen the kernel enforces;
//! - [`Mapping`]: an mmap of a memfd, accessed only through copies and atomics,
//!   never as a Rust reference (implements [`abi::SharedMemory`]);
//! - [`EventFd`]: the doorbell behind an event channel;
//! - [`SeqPacket`]: message sockets that carry file descriptors (SCM_RIGHTS).

mod eventfd;
mod mapping;
mod memfd;
mod process;
mod seqpacket;

pub use eventfd::{poll_readable, EventFd};
pub use mapping::Mapping;
pub use memfd::{Memfd, PAGE_SIZE};
pub use process::{close_inherited_fds, kill, rdtsc, set_inheritable, take_inherited_fd};
pub use seqpacket::{PeerCred, SeqPacket, SeqPacketListener, MAX_FDS};

use std::io;

/// Converts a libc return value into an `io::Result`, naming the call.
pub(crate) fn cvt(ret: libc::c_long, op: &'static str) -> io::Result<libc::c_long> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{op}: {e}")))
    } else {
        Ok(ret)
    }
}
