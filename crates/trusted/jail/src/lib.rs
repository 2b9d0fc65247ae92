//! The privilege model of a domain process (docs/ARCHITECTURE.md,
//! "Privilege model"), after Firecracker's jailer: hv prepares the
//! namespaces, the domain process drops everything else itself as the first
//! thing it does, before it reads a byte from a peer.
//!
//! - the toolstack (`toolstack::host::domain_netns_add`) gives each domain
//!   a user namespace that owns its network namespace. The namespace's only uid and gid, 0, are uid and gid
//!   [`UID_BASE`] + domid on the host: no file, process or socket of the
//!   host belongs to them.
//! - the domain ([`enter`]) joins that user namespace, becomes its uid 0
//!   with no supplementary group, keeps only the capabilities of its
//!   [`Role`] (in its own namespace; they reach no other), as ambient
//!   capabilities so the `ip` it runs keeps them, sees the host's file
//!   systems read-only, and installs a seccomp filter of the system calls
//!   it and `ip` make ([`syscalls`]).

#![forbid(unsafe_code)]

use hypercall::launch::ENV_USERNS_FD;
use hypercall::DomId;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use sys::jail::{Caps, Credentials, CAP_NET_ADMIN, CAP_NET_RAW};
use sys::SyscallFilter;

/// A domain's uid and gid on the host are `UID_BASE + domid`: far above
/// login accounts and the usual subordinate-uid ranges, and one per domain,
/// so no two domains share an owner either.
pub const UID_BASE: u32 = hypercall::launch::DOMAIN_UID_BASE;

/// The host uid (and gid) of domain `domid`: [`UID_BASE`] + domid in the
/// host's own user namespace. Inside a user namespace (rootless, docs/
/// ARCHITECTURE.md "Without root"), the first id of the block of
/// subordinate ids it maps, + domid; with no such block, 0: every domain
/// then runs as hv's own uid, the invoking user.
pub fn domain_uid(domid: DomId) -> u32 {
    uid_base().map_or(0, |b| b + u32::from(domid))
}

/// Where domain ids start in hv's user namespace (read once); `None`:
/// domains share hv's uid.
pub fn uid_base() -> Option<u32> {
    static BASE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let read = |f: &str| std::fs::read_to_string(format!("/proc/self/{f}")).unwrap_or_default();
        base_in(&read("uid_map"), &read("gid_map"))
    })
}

/// Every domid needs an id of its own.
const IDS_NEEDED: u64 = 1 << 16;

/// The base for maps `uid_map` and `gid_map` (`inner outer count` lines):
/// [`UID_BASE`] when both map it (the host's namespace maps every id), else
/// the start of the first block past id 0 of at least [`IDS_NEEDED`] ids
/// that both map; `None` if there is none.
pub fn base_in(uid_map: &str, gid_map: &str) -> Option<u32> {
    let blocks = |m: &str| -> Vec<(u64, u64)> {
        m.lines()
            .filter_map(|l| {
                let v: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                (v.len() == 3).then(|| (v[0], v[2]))
            })
            .collect()
    };
    let (u, g) = (blocks(uid_map), blocks(gid_map));
    let holds = |b: &[(u64, u64)], from: u64| {
        b.iter()
            .any(|&(s, n)| s <= from && from + IDS_NEEDED <= s + n)
    };
    let both = |from: u64| holds(&u, from) && holds(&g, from);
    if both(u64::from(UID_BASE)) {
        return Some(UID_BASE);
    }
    u.iter()
        .map(|&(s, _)| s.max(1))
        .find(|&s| both(s))
        .and_then(|s| u32::try_from(s).ok())
}

/// Whether hv runs in the host's own user namespace (root); outside it
/// (rootless) it holds privilege only over namespaces it made.
pub fn in_host_userns() -> bool {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
}

/// What a domain process does, and so what it may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// netfront on a TAP: creates and configures its TAP (CAP_NET_ADMIN).
    Guest,
    /// A `nic = "virtio"` guest: as [`Role::Guest`], and its vhost-user
    /// frontend makes its RAM (a memfd it sizes and maps shared, then
    /// passes to the backend) and its kick and call eventfds.
    VirtioGuest,
    /// netback, bridge and port: an AF_PACKET socket on the physical port
    /// (CAP_NET_RAW, held in the user namespace that owns the driver
    /// domain's network namespace, so it reaches its own interfaces only),
    /// and its endpoint TAP, which the toolstack made for its uid. No
    /// CAP_NET_ADMIN, which would reach a host NIC's firmware, features
    /// and names: hv makes its multi-queue macvlans for it (`QueueOpen`).
    Driver,
    /// A hosted guest's VMApp, or an HVM guest's device model, in its
    /// driver domain's namespaces: it made its TAP and mapped the guest's
    /// memory before the jail, and keeps no capability; it only reads and
    /// writes descriptors it holds, and starts one thread (VMNet's
    /// notifier; the device model's stand-in for dom0's upcall handler).
    VmApp,
}

impl Role {
    /// The role of a domain of `kind` (as in the topology) whose NIC is
    /// `nic` (its store's `splitnet/nic`; empty for a driver domain).
    pub fn of_domain(kind: &str, nic: &str) -> Result<Role, JailError> {
        match (kind, nic) {
            ("guest", "virtio") => Ok(Role::VirtioGuest),
            _ => Role::of_kind(kind),
        }
    }

    /// The role of a domain of `kind` (as in the topology).
    pub fn of_kind(kind: &str) -> Result<Role, JailError> {
        match kind {
            "guest" => Ok(Role::Guest),
            "driver" => Ok(Role::Driver),
            k => Err(JailError::new(
                "choosing the jail",
                format!("unknown domain kind {k:?}"),
            )),
        }
    }

    /// The capabilities the role keeps, over its own network namespace only.
    pub fn caps(self) -> Caps {
        match self {
            Role::Guest | Role::VirtioGuest => Caps::of(&[CAP_NET_ADMIN]),
            Role::Driver => Caps::of(&[CAP_NET_RAW]),
            Role::VmApp => Caps::of(&[]),
        }
    }
}

/// A jail that could not be set up, with the step that failed.
#[derive(Debug)]
pub struct JailError {
    pub step: &'static str,
    pub detail: String,
}

impl JailError {
    fn new(step: &'static str, detail: impl std::fmt::Display) -> JailError {
        JailError {
            step,
            detail: detail.to_string(),
        }
    }
}

impl std::fmt::Display for JailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot confine the domain process: {}: {} (domains run unprivileged in a user namespace \
             hv creates; see docs/ARCHITECTURE.md, \"Privilege model\")",
            self.step, self.detail
        )
    }
}

impl std::error::Error for JailError {}

/// The domain's half, called first thing by the domain process (and by the
/// escape tests, which must run exactly what a domain runs): confines the
/// calling process for good. It must be single-threaded, root on the host,
/// in the network namespace hv made for it (`toolstack::host::domain_netns_add`),
/// or, for a container's guest, in the runtime's with the user namespace hv
/// made for it.
pub fn enter(role: Role) -> Result<(), JailError> {
    match sys::jail::thread_count() {
        Ok(1) => {}
        Ok(n) => {
            return Err(JailError::new(
                "checking threads",
                format!("{n} threads; the jail must come before any thread"),
            ))
        }
        Err(x) => return Err(JailError::new("checking threads", x)),
    }
    let userns = match given_userns()? {
        Some(fd) => fd,
        None => {
            sys::jail::netns_owner().map_err(|x| JailError::new("finding the user namespace", x))?
        }
    };
    let host_userns = std::fs::metadata("/proc/self/ns/user")
        .map_err(|x| JailError::new("finding the user namespace", x))?;
    let owner = std::fs::File::from(
        userns
            .try_clone()
            .map_err(|x| JailError::new("finding the user namespace", x))?,
    )
    .metadata()
    .map_err(|x| JailError::new("finding the user namespace", x))?;
    if owner.ino() == host_userns.ino() && owner.dev() == host_userns.dev() {
        return Err(JailError::new(
            "finding the user namespace",
            "the user namespace to join is the host's; it must be one hv created (toolstack::host::domain_netns_add)",
        ));
    }
    // Everything that allocates or reads files comes before the drop.
    let filter = syscalls(role)
        .compile(libc::EPERM)
        .map_err(|x| JailError::new("compiling the seccomp filter", x))?;
    sys::jail::private_mounts().map_err(|x| JailError::new("making a mount namespace", x))?;
    if role != Role::VmApp && !in_host_userns() {
        // Rootless: no namespace but the host's may make a device node, so
        // the domain uses the host's, which must be open to all (as for
        // rootless podman).
        host_tun_open_to_all().map_err(|x| JailError::new("using /dev/net/tun", x))?;
    } else if role != Role::VmApp {
        // Like the jailer's /dev/net/tun in its chroot: a node of our own,
        // since the host's may be root's alone. Only this mount namespace
        // (the domain and its children) sees it, so it may be 0666, and it
        // does not depend on which uid the namespace maps. A guest makes
        // its TAP; a driver domain, without CAP_NET_ADMIN, can only attach
        // to a TAP the toolstack made for its uid (its endpoint).
        sys::jail::mount_tmpfs("/dev/net", "mode=0755,size=4k")
            .and_then(|_| sys::jail::mknod_char("/dev/net/tun", 10, 200, 0o666))
            .and_then(|_| {
                use std::os::unix::fs::PermissionsExt;
                // mknod's mode passed through the umask.
                std::fs::set_permissions("/dev/net/tun", std::fs::Permissions::from_mode(0o666))
            })
            .map_err(|x| JailError::new("making /dev/net/tun", x))?;
    }
    sys::jail::all_mounts_read_only()
        .map_err(|x| JailError::new("making the file systems read-only", x))?;
    sys::jail::enter_userns(userns.as_fd())
        .map_err(|x| JailError::new("joining the user namespace", x))?;
    Credentials {
        uid: 0,
        gid: 0,
        caps: role.caps(),
    }
    .apply()
    .map_err(|x| JailError::new("dropping privileges", x))?;
    filter.install().map_err(|x| JailError::new("seccomp", x))?;
    Ok(())
}

/// Whether the host's `/dev/net/tun` is the TUN device, readable and
/// writable by everyone.
fn host_tun_open_to_all() -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata("/dev/net/tun").map_err(|e| format!("/dev/net/tun: {e}"))?;
    let rdev = m.rdev();
    let is_tun =
        m.file_type().is_char_device() && libc::major(rdev) == 10 && libc::minor(rdev) == 200;
    if !is_tun || m.mode() & 0o666 != 0o666 {
        return Err(format!(
            "/dev/net/tun is not the TUN device with mode 0666 (mode {:o}); without root a domain cannot make its TAP (as root: chmod 0666 /dev/net/tun)",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The user namespace hv gave a container's guest (its descriptor named by
/// [`ENV_USERNS_FD`]), if any: such a guest runs in the runtime's network
/// namespace, whose owner is the host's user namespace.
fn given_userns() -> Result<Option<std::os::fd::OwnedFd>, JailError> {
    let Ok(v) = std::env::var(ENV_USERNS_FD) else {
        return Ok(None);
    };
    let bad = |x: String| JailError::new("finding the user namespace", x);
    let fd: i32 = v
        .parse()
        .map_err(|_| bad(format!("{ENV_USERNS_FD}={v:?} is no descriptor")))?;
    sys::take_inherited_fd(fd)
        .map(Some)
        .map_err(|x| bad(format!("{ENV_USERNS_FD}: {x}")))
}

/// The system calls a domain process of `role` may make, and the `ip`
/// commands a guest runs (they inherit the filter). The set was collected
/// with `strace -f` over `splitnet up`, ping, iperf3 TCP both ways and UDP,
/// guest to guest, and `splitnet down`, under each preset (default, hv-copy,
/// baseline), keeping what the domain and its children call after the jail;
/// [`RUNTIME`] adds what Rust and glibc call on paths that run rarely
/// (panics, sleeps, large reallocations). Anything else fails with EPERM.
pub fn syscalls(role: Role) -> SyscallFilter {
    let mut f = SyscallFilter::new();
    f.allow_all(DOMAIN).allow_all(RUNTIME);
    match role {
        Role::Guest => f.allow_all(GUEST_RUNS_IP).allow_all(EXEC).allow_all(LOADER),
        Role::VirtioGuest => f
            .allow_all(GUEST_RUNS_IP)
            .allow_all(EXEC)
            .allow_all(LOADER)
            .allow_all(VIRTIO_FRONTEND),
        Role::VmApp => f.allow_all(THREADS),
        Role::Driver => f
            .allow_all(THREADS)
            .allow_all(VHOST_BACKEND)
            .allow_all(GRANT_MAPS)
            .allow_all(KEPT_PORTS)
            .allow_all(LOADER),
    };
    // Threads and processes, without new namespaces (clone3 hides its flags
    // in memory, so it looks absent and glibc falls back to clone).
    let ns = (libc::CLONE_NEWNS
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWCGROUP) as u64;
    f.allow_arg_without(libc::SYS_clone, 0, ns)
        .expect("a valid condition");
    if role != Role::VmApp {
        // The loader and Rust's start-up read their own limits (pid 0);
        // another process's are none of a domain's business.
        f.allow_arg_in(libc::SYS_prlimit64, 0, &[0])
            .expect("a valid condition");
    }
    f.absent(libc::SYS_clone3);
    let families: &[i32] = match role {
        Role::Guest | Role::VirtioGuest => &[
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
        ],
        Role::Driver => &[
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_PACKET,
        ],
        Role::VmApp => &[libc::AF_UNIX],
    };
    let families: Vec<u64> = families.iter().map(|&a| a as u64).collect();
    if role == Role::VirtioGuest {
        // Its RAM: a memfd of ordinary pages, never MFD_HUGETLB
        // (the host's huge pages are other domains' too).
        f.allow_arg_without(libc::SYS_memfd_create, 1, libc::MFD_HUGETLB as u64)
            .expect("a valid condition");
    }
    f.allow_arg_in(libc::SYS_socket, 0, &families)
        .expect("a valid condition");
    allow_memory_advice(&mut f, role);
    // libcap (in `ip`) reads the bounding set; threads get names.
    let prctls: Vec<u64> = [
        libc::PR_CAPBSET_READ,
        libc::PR_GET_SECUREBITS,
        libc::PR_GET_NO_NEW_PRIVS,
        libc::PR_GET_DUMPABLE,
        libc::PR_SET_NAME,
        libc::PR_GET_NAME,
        libc::PR_SET_VMA,
    ]
    .iter()
    .map(|&p| p as u64)
    .collect();
    f.allow_arg_in(libc::SYS_prctl, 0, &prctls)
        .expect("a valid condition");
    f
}

/// `madvise` with [`MADVICE`] alone; a driver domain's grant maps:
/// userfaultfd (user-mode faults only) and `process_madvise` (dropping
/// pages only).
fn allow_memory_advice(f: &mut SyscallFilter, role: Role) {
    if role == Role::Driver {
        f.allow_arg_in(libc::SYS_userfaultfd, 0, &[sys::USERFAULTFD_FLAGS as u64])
            .expect("a valid condition");
        f.allow_arg_in(libc::SYS_process_madvise, 3, &[libc::MADV_DONTNEED as u64])
            .expect("a valid condition");
    }
    let advice: Vec<u64> = MADVICE.iter().map(|&a| a as u64).collect();
    f.allow_arg_in(libc::SYS_madvise, 2, &advice)
        .expect("a valid condition");
}

/// What the domain process calls: its control and watch sockets, doorbells,
/// shared memory, the TAP or the packet socket, `poll` and the event
/// manager's epoll set.
const DOMAIN: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_openat,
    libc::SYS_statx,
    libc::SYS_ioctl,
    libc::SYS_poll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_getpid,
    libc::SYS_capget,
    libc::SYS_bind,
    libc::SYS_setsockopt,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_recvfrom,
    libc::SYS_exit_group,
];

/// What starting a thread adds (glibc's pthread_create: the guard page,
/// then the new thread registers itself): a VMApp's notifier, a driver
/// domain's vhost-user control thread per VM.
const THREADS: &[libc::c_long] = &[
    libc::SYS_mprotect,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
];

/// A driver domain's vhost-user backend: it accepts the VM's connection on
/// the listener hv gave it, and its control thread waits on an eventfd of
/// its own beside the connection (the rust-vmm crates' exit event). The
/// VM's memory arrives as descriptors it maps with `mmap`, already allowed.
/// A connection that is replaced (or refused) is shut down, so its
/// control thread, maybe blocked mid-message, ends; each vif's backend
/// wakes the loop through a doorbell (a socket pair) of its own.
const VHOST_BACKEND: &[libc::c_long] = &[
    libc::SYS_accept4,
    libc::SYS_eventfd2,
    libc::SYS_shutdown,
    libc::SYS_socketpair,
];

/// A driver domain's grant maps into a guest's pool mirror
/// (`sys::PoolMirror`): a userfaultfd (with `sys::USERFAULTFD_FLAGS` only,
/// so user-mode faults alone) whose `UFFDIO_CONTINUE` installs a
/// mapped frame (its `ioctl` is allowed), `MADV_POPULATE_READ` for a frame
/// never touched, the unmap of a batch in one `process_madvise` on a
/// pidfd of its own process (or a `madvise` per frame), and `fstatfs` on
/// a pool's descriptor (a hugetlb pool is mirrored a huge page at a time).
/// `madvise` is every domain's ([`MADVICE`]); `process_madvise` takes
/// `MADV_DONTNEED` alone (`syscalls`).
const GRANT_MAPS: &[libc::c_long] = &[libc::SYS_fstatfs, libc::SYS_pidfd_open];

/// A driver domain takes over the uplink sockets hv keeps for it
/// (`sys::PacketSocket::adopt`): it asks each which interface it is bound to.
const KEPT_PORTS: &[libc::c_long] = &[libc::SYS_getsockname];

/// Running a program: a guest runs `ip`. The filter, the user namespace
/// and `no_new_privs` stay across the exec, so the program holds nothing
/// its caller did not. A driver domain runs no program: its next one is
/// started beside it, not in its place (`splitnet upgrade`).
const EXEC: &[libc::c_long] = &[libc::SYS_execve];

/// What the dynamic loader, libc and Rust's start-up call before a
/// program reaches its own code, and call again on rare paths. (`prlimit64`
/// too, on the calling process only: `syscalls`.)
const LOADER: &[libc::c_long] = &[
    libc::SYS_access,
    libc::SYS_arch_prctl,
    libc::SYS_set_tid_address,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_mprotect,
    libc::SYS_newfstatat,
    libc::SYS_pread64,
    libc::SYS_getrandom,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_getuid,
];

/// The `madvise` advice a domain may give: what the allocator, the pools'
/// huge pages and the grant mirrors use, and the harmless hints. Never
/// `MADV_REMOVE`: it punches a page out of a shared pool, and a peer that
/// has the page mapped in a mirror (`sys::PoolMirror`) would fault on its
/// next read once the page came back, a `SIGBUS` that would kill it.
const MADVICE: &[i32] = &[
    libc::MADV_NORMAL,
    libc::MADV_RANDOM,
    libc::MADV_SEQUENTIAL,
    libc::MADV_WILLNEED,
    libc::MADV_DONTNEED,
    libc::MADV_FREE,
    libc::MADV_DONTFORK,
    libc::MADV_DOFORK,
    libc::MADV_HUGEPAGE,
    libc::MADV_NOHUGEPAGE,
    libc::MADV_DONTDUMP,
    libc::MADV_DODUMP,
    libc::MADV_POPULATE_READ,
    libc::MADV_POPULATE_WRITE,
];

/// A `nic = "virtio"` guest's vhost-user frontend: its RAM is a memfd it
/// sizes and maps shared (the backend maps the same pages), and each ring
/// has a kick and a call eventfd. hv makes the connection, so no `connect`.
/// (`sys::Memfd` also makes the memfd its owner's alone, with `fchmod`.) A
/// watchdog thread cuts off a handshake that runs out of time with
/// `shutdown` (a thread needs nothing the guest's `ip` does not).
const VIRTIO_FRONTEND: &[libc::c_long] = &[
    libc::SYS_ftruncate,
    libc::SYS_fchmod,
    libc::SYS_shutdown,
    libc::SYS_eventfd2,
];

/// A guest runs `ip` (Rust's `Command`, then `ip` itself: libcap,
/// netlink), with [`EXEC`] and [`LOADER`].
const GUEST_RUNS_IP: &[libc::c_long] = &[
    libc::SYS_pipe2,
    libc::SYS_wait4,
    libc::SYS_dup2,
    libc::SYS_getsockname,
];

/// Rare paths of the Rust runtime and glibc: thread exit, signals and
/// panics, sleeps and clocks, allocator housekeeping, descriptor flags.
const RUNTIME: &[libc::c_long] = &[
    libc::SYS_exit,
    libc::SYS_rt_sigreturn,
    libc::SYS_restart_syscall,
    libc::SYS_sigaltstack,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_mremap,
    libc::SYS_fcntl,
    libc::SYS_fstat,
    libc::SYS_lseek,
    libc::SYS_getsockopt,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_ids_come_from_the_block_both_maps_give() {
        let host = "         0          0 4294967295\n";
        assert_eq!(base_in(host, host), Some(UID_BASE));
        // Rootless with a subordinate range: 0 is the user, 1.. the range.
        let sub = "0 1001 1\n1 300000 65536\n";
        assert_eq!(base_in(sub, sub), Some(1));
        // The gid map lacks the range: no block both give.
        assert_eq!(base_in(sub, "0 1001 1\n"), None);
        // The user alone, or a range too small for every domid.
        assert_eq!(base_in("0 1001 1\n", "0 1001 1\n"), None);
        let small = "0 1001 1\n1 300000 1000\n";
        assert_eq!(base_in(small, small), None);
    }

    #[test]
    fn no_driver_domain_may_administer_its_namespace() {
        let driver = Role::of_kind("driver").unwrap();
        assert!(!driver.caps().has(CAP_NET_ADMIN));
        assert!(driver.caps().has(CAP_NET_RAW));
        // A guest's kind never yields a driver role, whatever its NIC.
        assert_eq!(Role::of_domain("guest", "vif").ok(), Some(Role::Guest));
        assert_eq!(Role::of_kind("driver").ok(), Some(Role::Driver));
    }

    /// A guest may run `ip`; a driver domain runs no program, its next
    /// one being started beside it (`splitnet upgrade`).
    #[test]
    fn only_a_guest_may_run_a_program() {
        // No path: the kernel answers EFAULT to a call it is let to see.
        let execve = (libc::SYS_execve, [0, 0, 0]);
        for (role, want) in [
            (Role::Guest, Err(libc::EFAULT)),
            (Role::Driver, Err(libc::EPERM)),
            (Role::VmApp, Err(libc::EPERM)),
        ] {
            let filter = syscalls(role).compile(libc::EPERM).unwrap();
            assert_eq!(filter.answers(&[execve]).unwrap(), [want], "{role:?}");
        }
    }

    /// Under every role's filter a page may be dropped from the caller's
    /// own page table (`MADV_DONTNEED`), never punched out of a shared pool
    /// (`MADV_REMOVE`).
    #[test]
    fn no_domain_may_punch_a_page_out_of_a_pool() {
        // Zero bytes at address 0: the kernel answers 0 to any advice it
        // is let to see, so a refusal is the filter's.
        let madvise = |advice: i32| (libc::SYS_madvise, [0, 0, advice as u64]);
        for role in [Role::Guest, Role::Driver, Role::VmApp] {
            let filter = syscalls(role).compile(libc::EPERM).unwrap();
            let got = filter
                .answers(&[madvise(libc::MADV_DONTNEED), madvise(libc::MADV_REMOVE)])
                .unwrap();
            assert_eq!(got, [Ok(0), Err(libc::EPERM)], "{role:?}");
        }
    }
}
