//! The one place splitnet touches raw shared memory and raw file descriptors.
//!
//! Everything above this crate is safe Rust (as in rust-vmm's vm-memory;
//! every other crate forbids `unsafe`, and each `unsafe` block here says why
//! it is sound in a `// SAFETY:` comment):
//! - [`Memfd`]: a domain's frames, sealed against resizing so a peer can never
//!   make a mapping fault, with a read-only reopen the kernel enforces;
//! - [`Mapping`]: an mmap of a memfd, accessed only through copies and atomics,
//!   never as a Rust reference (implements [`abi::SharedMemory`]);
//! - [`Doorbell`]: the notification behind an event channel (a datagram socket
//!   pair, so a peer can never make ringing block);
//! - [`SeqPacket`]: message sockets that carry file descriptors (SCM_RIGHTS);
//! - [`Tap`] and [`PacketSocket`]: a guest's virtual NIC and the driver
//!   domain's "physical NIC", both speaking `virtio_net_hdr` for offloads;
//! - [`netlink::RouteEvents`]: notice of a namespace's link, address and
//!   multicast-group changes; [`rtnl::Rtnl`]: macvlans made and deleted;
//! - [`SocketFilter`]: classic BPF that splits a port's frames by MAC;
//! - [`jail`] and [`SyscallFilter`]: namespaces, credentials, capabilities
//!   and the seccomp filter that confine a domain process;
//! - [`signals`]: signals blocked and waited for, for a daemon's SIGTERM
//!   and SIGHUP.

#![deny(clippy::undocumented_unsafe_blocks)]

mod bpf;
mod doorbell;
mod epoll;
mod filelock;
pub mod huge;
mod iov;
pub mod jail;
mod mapping;
#[cfg(feature = "vm-memory")]
mod mapping_guest;
mod memfd;
mod mirror;
pub mod netlink;
mod packet;
mod perf;
mod pidfd;
mod prefetch;
mod process;
pub mod rtnl;
mod seccomp;
mod seqpacket;
pub mod signals;
mod tap;
mod window;

pub use bpf::{SocketFilter, FILTER_MACS};
pub use doorbell::{poll_readable, poll_readable_few, Doorbell, POLL_FEW};
pub use epoll::{Epoll, Event};
pub use filelock::FileLock;
pub use iov::{IoPart, IoPartMut, MAX_IO_PARTS};
pub use mapping::Mapping;
pub use memfd::{memory_file, punch_hole, seal_shrink, Memfd, PAGE_SIZE};
pub use mirror::{PoolMirror, USERFAULTFD_FLAGS};
pub use packet::{
    bound_ifindex, get_mac, ifindex, ping_sockets_allowed, set_mac, set_socket_rcvbuf,
    PacketSocket, RecvBatch, VlanTag, RECV_BATCH, SCATTER_BATCH, SCATTER_BATCH_PARTS, SEND_BATCH,
    SEND_BATCH_PARTS,
};
pub use perf::{
    online_cpus, Frame, PerfClock, PerfEvent, PerfSampler, Sample, SampleRate, SamplerConfig,
};
pub use pidfd::{place_fds, PidFd};
pub use prefetch::prefetch;
pub use process::{
    allowed_cpus, batch_on_exec, catch_interrupts, close_fds_on_exec, close_inherited_fds, cpus_of,
    current_cpu, dup_fd, enter_netns, euid, heap_use, interrupt_own_cores, interrupted, kill,
    limit_malloc_arenas, netns_on_exec, nice_of, nice_on_exec, pin_on_exec, raise_fd_limit, rdtsc,
    reap, register_core_interrupts, set_inheritable, set_inheritable_raw, set_nonblocking,
    set_own_threads_nice, set_process_nice, set_thread_cpus, set_thread_nice, set_thread_realtime,
    take_inherited_fd, trim_heap, wait_exited, HeapUse,
};
pub use seccomp::{CompiledFilter, SyscallFilter};
pub use seqpacket::connect_stream_nonblocking;
pub use seqpacket::{PeerCred, SeqPacket, SeqPacketListener, MAX_FDS};
pub use tap::{Tap, TapOffloads, VNET_HDR_LEN};
pub use window::Window;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// System calls made through this crate's I/O paths (doorbells, polls,
/// packet sockets, TAPs, message sockets), for the per-packet counts that
/// `splitnet status` reports.
static SYSCALLS: AtomicU64 = AtomicU64::new(0);

/// Counts one system call about to be made.
#[inline]
pub(crate) fn count_syscall() {
    SYSCALLS.fetch_add(1, Ordering::Relaxed);
}

/// How many system calls this process has made through this crate's I/O
/// paths so far.
pub fn syscalls() -> u64 {
    SYSCALLS.load(Ordering::Relaxed)
}

/// Converts a libc return value into an `io::Result`, naming the call.
pub(crate) fn cvt(ret: libc::c_long, op: &'static str) -> io::Result<libc::c_long> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{op}: {e}")))
    } else {
        Ok(ret)
    }
}
