use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

/// Sends signal `sig` to process `pid`.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to signal a process group",
        ));
    }
    // SAFETY: plain syscall; pid > 0 addresses one process.
    cvt(unsafe { libc::kill(pid, sig) } as libc::c_long, "kill")?;
    Ok(())
}

/// Has the C allocator keep at most `n` arenas. glibc gives a thread an
/// arena of its own when others are busy, and an arena keeps what was
/// freed in it: a daemon that starts and ends threads all its life (hv
/// serves each domain with two) grows its resident memory arena by arena
/// with no leak. False when the allocator is not glibc's or refused.
pub fn limit_malloc_arenas(n: u32) -> bool {
    let Ok(n) = libc::c_int::try_from(n) else {
        return false;
    };
    // SAFETY: mallopt only sets a tuning parameter of the allocator; it
    // takes no pointer and is safe to call at any time.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, n) == 1 }
}

/// What the C allocator holds, summed over its arenas (glibc's
/// `mallinfo2`): what tells a leak (`in_use` grows) from memory freed
/// but kept (`free` grows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapUse {
    /// Bytes in blocks handed out and not yet freed, from the arenas.
    pub in_use: u64,
    /// Bytes in the arenas' free chunks, the top one included, whether or
    /// not a trim gave their pages back (blocks in glibc's per-thread
    /// caches count as in use).
    pub free: u64,
    /// Bytes in large blocks the allocator mapped on their own.
    pub mapped: u64,
}

/// This process's [`HeapUse`]; zero under a tool that replaces glibc's
/// allocator (valgrind).
pub fn heap_use() -> HeapUse {
    // SAFETY: mallinfo2 takes no pointer and returns its figures by
    // value; it only takes the arenas' locks while it reads them.
    let m = unsafe { libc::mallinfo2() };
    HeapUse {
        in_use: m.uordblks as u64,
        free: m.fordblks as u64,
        mapped: m.hblkhd as u64,
    }
}

/// Gives the kernel back the whole free pages every arena keeps (glibc's
/// `malloc_trim(0)`). True when some memory was released.
pub fn trim_heap() -> bool {
    // SAFETY: malloc_trim takes no pointer; it only releases pages of
    // free chunks, under the arenas' locks, and is safe at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// This process's effective user id (0: root).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises this process's soft limit on open descriptors to its hard limit
/// (children inherit it) and returns the limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    cvt(rc as libc::c_long, "getrlimit(RLIMIT_NOFILE)")?;
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit from a struct we own; raising
        // the soft limit up to the hard one needs no privilege.
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) };
        cvt(rc as libc::c_long, "setrlimit(RLIMIT_NOFILE)")?;
        lim.rlim_cur = lim.rlim_max;
    }
    Ok(lim.rlim_cur)
}

/// Lets `fd` survive exec (clears FD_CLOEXEC), so a child process inherits it.
pub fn set_inheritable(fd: BorrowedFd<'_>, inheritable: bool) -> io::Result<()> {
    set_inheritable_raw(fd.as_raw_fd(), inheritable)
}

/// [`set_inheritable`] for descriptor number `fd`, which some object of
/// this process owns (hv's upgrade in place names them by number before its
/// `execve`). A number that is not open is an error (EBADF), never harm:
/// only its close-on-exec flag is touched.
pub fn set_inheritable_raw(fd: RawFd, inheritable: bool) -> io::Result<()> {
    // SAFETY: F_GETFD and F_SETFD read and set one descriptor flag; on a
    // number that is not open they fail with EBADF.
    unsafe {
        let flags = cvt(
            libc::fcntl(fd, libc::F_GETFD) as libc::c_long,
            "fcntl(F_GETFD)",
        )? as i32;
        let new = if inheritable {
            flags & !libc::FD_CLOEXEC
        } else {
            flags | libc::FD_CLOEXEC
        };
        cvt(
            libc::fcntl(fd, libc::F_SETFD, new) as libc::c_long,
            "fcntl(F_SETFD)",
        )?;
    }
    Ok(())
}

/// Sets O_NONBLOCK on `fd`'s open file (a descriptor a peer sent, such as
/// a vhost-user kick or call eventfd, which the loop must never block on).
pub fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let fd = fd.as_fd();
    // SAFETY: plain fcntl calls on a descriptor borrowed for the duration.
    unsafe {
        let flags = cvt(
            libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) as libc::c_long,
            "fcntl(F_GETFL)",
        )? as i32;
        cvt(
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) as libc::c_long,
            "fcntl(F_SETFL)",
        )?;
    }
    Ok(())
}

/// Takes ownership of an inherited descriptor number (from the environment).
pub fn take_inherited_fd(fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    cvt(
        // SAFETY: F_GETFD only checks that the descriptor is open.
        unsafe { libc::fcntl(fd, libc::F_GETFD) } as libc::c_long,
        "inherited descriptor",
    )?;
    // SAFETY: the descriptor is open and was handed to this process to own.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    set_inheritable(std::os::fd::AsFd::as_fd(&owned), false)?;
    Ok(owned)
}

/// A descriptor of our own for the open file behind `fd`
/// (F_DUPFD_CLOEXEC), for a library type that exposes only `AsRawFd`
/// (rust-vmm's `EventFd`) but must also sit in an event manager.
pub fn dup_fd(fd: &impl AsRawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let new = cvt(
        // SAFETY: fcntl takes no pointers; on a number that is no open
        // descriptor it fails with EBADF.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) } as libc::c_long,
        "fcntl(F_DUPFD_CLOEXEC)",
    )?;
    // SAFETY: F_DUPFD_CLOEXEC returned a fresh descriptor that we now own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(new as i32) })
}

/// Reads the time-stamp counter (cycles at a constant rate on this machine).
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no memory effects and exists on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }
}

/// Closes every descriptor numbered 3 or above except `keep`: a daemon must
/// not hold on to pipes or sockets its launcher happened to leak to it (a CI
/// runner waits for its output pipe to close). Call first thing in `main`,
/// before anything else opens a descriptor.
pub fn close_inherited_fds(keep: &[i32]) {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => return,
    };
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: called before the program opened any descriptor of its own,
            // so these are inherited ones no Rust object owns. The read_dir handle
            // is already closed; closing a stale number fails harmlessly with EBADF.
            unsafe { libc::close(fd) };
        }
    }
}

/// The cores this process may run on (its `sched_getaffinity` mask, which
/// a cpuset narrows), lowest first.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    cpus_of(0)
}

/// The cores thread or process `pid` may run on (0: the calling thread),
/// lowest first.
pub fn cpus_of(pid: i32) -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into
    // the set we own; a pid that is gone is an error, not a write.
    let rc =
        unsafe { libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    cvt(rc as libc::c_long, "sched_getaffinity")?;
    // SAFETY: CPU_ISSET reads one bit of a set we own, below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The core the calling thread is running on now (sched_getcpu(3), from
/// the vDSO: no system call), or None if the kernel cannot say.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// membarrier(2) commands (linux/membarrier.h).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Lets [`interrupt_own_cores`] be used by this process (membarrier(2)'s
/// registration; idempotent).
pub fn register_core_interrupts() -> io::Result<()> {
    // SAFETY: membarrier takes a command and flags and touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0,
        )
    };
    cvt(rc, "membarrier(REGISTER_PRIVATE_EXPEDITED)").map(|_| ())
}

/// Interrupts every other core now running a thread of this process and
/// returns once each has run the interrupt: one inter-processor interrupt
/// per such core, and the wait for it (membarrier(2),
/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`). Needs [`register_core_interrupts`]
/// first.
pub fn interrupt_own_cores() -> io::Result<()> {
    // SAFETY: as in register_core_interrupts.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) };
    cvt(rc, "membarrier(PRIVATE_EXPEDITED)").map(|_| ())
}

/// Restricts the calling thread, and every thread it starts afterwards, to
/// the cores `cpus` (sched_setaffinity(2) on this thread only). Giving back
/// an earlier [`allowed_cpus`] undoes it.
pub fn set_thread_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("core {c} is beyond CPU_SETSIZE"),
            ));
        }
        // SAFETY: CPU_SET writes one bit, below CPU_SETSIZE (checked above),
        // of the set we own.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes of the set we
    // own; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    cvt(rc as libc::c_long, "sched_setaffinity")?;
    Ok(())
}

/// Makes the calling thread a real-time thread (`SCHED_FIFO` at
/// `priority`, 1-99, sched(7)): it runs whenever it is runnable, ahead of
/// every ordinary task, so a wake-up it misses is one the machine could
/// not give anybody. Threads it starts afterwards inherit the policy.
/// Needs `CAP_SYS_NICE` (or an `RLIMIT_RTPRIO`).
pub fn set_thread_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: the kernel reads the plain struct we own; pid 0 is this thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    cvt(rc as libc::c_long, "sched_setscheduler(SCHED_FIFO)")?;
    Ok(())
}

/// Makes the process `cmd` starts a batch process (`SCHED_BATCH`,
/// sched(7)): when it wakes, it does not preempt the task running on its
/// core, but waits for that task to block or for the tick. Set between
/// fork and exec, so every thread it ever has inherits the policy.
pub fn batch_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec; it builds a
    // plain struct on the stack (no allocation) and makes one system call,
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let param = libc::sched_param { sched_priority: 0 };
            if libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the process `cmd` starts join the network namespace behind `ns`
/// (a `/run/netns` file) between fork and exec: what `ip netns exec` does
/// for it, without a second program to execute first, which cost a
/// restarting driver domain 8-22 ms on a loaded host. Unlike `ip netns
/// exec` it keeps the caller's mount namespace and `/sys`. The
/// descriptor is the command's own and closes with it.
pub fn netns_on_exec(cmd: &mut std::process::Command, ns: std::fs::File) {
    use std::os::unix::process::CommandExt;
    let ns = std::os::fd::OwnedFd::from(ns);
    // SAFETY: the closure runs in the forked child before exec; it
    // allocates nothing and makes one system call (async-signal-safe) on
    // a descriptor the command keeps open until it is dropped.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sets the calling thread's nice value (-20..=19): Linux keeps one per
/// thread, so the process's other threads keep theirs.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers and touches no memory of
    // ours; who = 0 names the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the nice value of every thread of running process `pid` to
/// `nice` (-20..=19): a nice value is each thread's own, so the process's
/// threads are set one by one, as listed in `/proc/PID/task`.
pub fn set_process_nice(pid: i32, nice: i32) -> io::Result<()> {
    set_tasks_nice(&format!("/proc/{pid}/task"), nice, |_| true).map(drop)
}

/// Sets the nice value of those threads of this process whose names
/// (`comm`, at most 15 bytes, as `std::thread::Builder::name` gave them)
/// are among `names`; returns how many it set.
pub fn set_own_threads_nice(names: &[&str], nice: i32) -> io::Result<usize> {
    let named = |comm: &str| {
        let comm = comm.as_bytes();
        names
            .iter()
            .any(|n| n.as_bytes()[..n.len().min(15)] == *comm)
    };
    set_tasks_nice("/proc/self/task", nice, named)
}

/// Sets `nice` on each thread listed in `tasks` (a `/proc/PID/task`
/// directory) whose name passes `pick`; returns how many it set.
fn set_tasks_nice(tasks: &str, nice: i32, pick: impl Fn(&str) -> bool) -> io::Result<usize> {
    let mut set = 0;
    for entry in std::fs::read_dir(tasks)? {
        let entry = entry?;
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if !pick(comm.trim_end_matches('\n')) {
            continue;
        }
        // SAFETY: setpriority takes plain integers and touches no memory of ours.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
            let e = io::Error::last_os_error();
            // A thread that ended since the listing is not an error.
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(e);
            }
            continue;
        }
        set += 1;
    }
    Ok(set)
}

/// Has `cmd`'s child run at nice value `nice` (-20..=19), set in the
/// child before exec so that every thread it starts inherits it. Best
/// effort: a caller without the privilege to raise a priority
/// (CAP_SYS_NICE, or RLIMIT_NICE) leaves the child at its own; read it
/// back with [`nice_of`].
pub fn nice_on_exec(cmd: &mut std::process::Command, nice: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and makes
    // one system call, which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            Ok(())
        });
    }
}

/// Has every descriptor from 3 up closed when `cmd`'s child execs: a
/// long-lived process must not hold what its launcher happened to have
/// open (a lock a test runner waits on, a CI job's output pipe). They are
/// marked close-on-exec rather than closed, so the standard library's
/// pipe that reports a failed exec still works; a kernel without
/// `close_range` (before 5.11) leaves them as they were.
pub fn close_fds_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and makes
    // one system call, which is async-signal-safe; it only sets flags on
    // descriptors, which exec then closes.
    unsafe {
        cmd.pre_exec(|| {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
}

/// The nice value of thread (or process) `tid`.
pub fn nice_of(tid: i32) -> io::Result<i32> {
    let who = u32::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: getpriority takes plain integers. It may return -1 as a
    // value, so errno is cleared first and read after.
    unsafe {
        *libc::__errno_location() = 0;
        let v = libc::getpriority(libc::PRIO_PROCESS, who);
        if v == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }
}

/// Makes the process `cmd` starts run on core `cpu` only: the child sets
/// its own affinity between fork and exec, so every thread it ever has
/// inherits the mask (sched_setaffinity(2)). A core outside the kernel's
/// mask makes the spawn fail with EINVAL.
pub fn pin_on_exec(cmd: &mut std::process::Command, cpu: usize) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("core {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit, below CPU_SETSIZE (checked above), of
    // the set we own.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure runs in the forked child before exec; it uses a
    // copy of the set made before the fork (no allocation) and makes one
    // system call, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Moves the calling thread into the network namespace behind `ns` (a
/// file under `/run/netns`, or `/proc/PID/ns/net`); call it before any
/// other thread exists, so that all of them and every child are there.
pub fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    crate::jail::setns(ns.as_fd(), libc::CLONE_NEWNET)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set a flag ([`interrupted`]) instead of ending
/// the process, so a long-running command can stop cleanly (flush its
/// output, report counts). Blocking calls made afterwards may be cut short.
pub fn catch_interrupts() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain old data; all-zero is a valid start.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        cvt(
            // SAFETY: installs a handler that only stores to an atomic
            // (async-signal-safe); `sa` lives for the call.
            unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } as libc::c_long,
            "sigaction",
        )?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits until child `pid` has exited, without reaping it: it stays a
/// zombie, so its pid cannot be reused, until [`reap`] (or `Child::wait`)
/// collects it. hv waits so for its domains, and reaps only once no
/// upgrade of its own program can cut the reaping short. A process that is
/// not this one's child (an hv that died started it) is waited for by its
/// pidfd.
pub fn wait_exited(pid: i32) -> io::Result<()> {
    loop {
        // SAFETY: `info` is a zeroed siginfo_t for the kernel to fill;
        // WNOWAIT leaves the child waitable.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ECHILD) {
            // Not this process's child (its parent, an hv before this one,
            // died): its end is seen, its status is not.
            return match crate::pidfd::PidFd::open(pid) {
                Ok(p) => p.wait_ended(None).map(drop),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                Err(e) => Err(e),
            };
        }
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps child `pid` (which a program this process ran before an
/// `execve` started, so no `Child` stands for it): its exit status.
pub fn reap(pid: i32) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    loop {
        let mut status = 0;
        // SAFETY: `status` is a live int for the kernel to fill.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_interrupts_work_once_registered_and_registering_twice_is_fine() {
        register_core_interrupts().unwrap();
        register_core_interrupts().unwrap();
        // With another thread of ours spinning or not, the call returns once
        // every core running one has taken the interrupt.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = std::sync::Arc::clone(&stop);
        let spinner = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        for _ in 0..10 {
            interrupt_own_cores().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
    }

    #[test]
    fn only_the_named_threads_get_the_nice_value() {
        use std::sync::mpsc::channel;
        let (go, wait) = channel::<()>();
        let (tell, told) = channel();
        // A name over the kernel's 15 bytes: it keeps the first 15. A
        // thread is named once it runs: it says so first.
        let named = std::thread::Builder::new()
            .name("weighed-thread-long".into())
            .spawn(move || {
                tell.send(None).unwrap();
                wait.recv().unwrap();
                tell.send(Some(nice_of(0).unwrap())).unwrap();
            })
            .unwrap();
        assert_eq!(told.recv().unwrap(), None);
        let mine = nice_of(0).unwrap();
        // Lowering a priority needs no privilege.
        let to = (mine + 2).min(19);
        assert_eq!(
            set_own_threads_nice(&["weighed-thread-long"], to).unwrap(),
            1
        );
        assert_eq!(set_own_threads_nice(&["no-such-thread"], to).unwrap(), 0);
        go.send(()).unwrap();
        assert_eq!(told.recv().unwrap(), Some(to));
        named.join().unwrap();
        assert_eq!(
            nice_of(0).unwrap(),
            mine,
            "the caller's thread is not named"
        );
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by `reap`, the function under test
    fn an_exited_child_is_waited_for_then_reaped_with_its_status() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        wait_exited(pid).unwrap();
        // Still a zombie: waiting again does not block or fail.
        wait_exited(pid).unwrap();
        assert_eq!(reap(pid).unwrap().code(), Some(7));
        assert!(reap(pid).is_err(), "a reaped child is gone");
    }

    #[test]
    fn a_duplicate_is_the_same_open_file() {
        use std::io::{Read, Write};
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let d = dup_fd(&a).unwrap();
        assert_ne!(d.as_raw_fd(), a.as_raw_fd());
        std::os::unix::net::UnixStream::from(d)
            .write_all(b"x")
            .unwrap();
        let mut got = [0u8; 1];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
    }

    #[test]
    fn a_batch_child_runs_under_sched_batch() {
        let mut cmd = std::process::Command::new("grep");
        cmd.args(["^policy", "/proc/self/sched"]);
        batch_on_exec(&mut cmd);
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        // sched(7): SCHED_BATCH is policy 3.
        assert_eq!(out.split_whitespace().last(), Some("3"), "{out}");
    }

    #[test]
    fn a_pinned_child_runs_on_its_core_only() {
        let cores = allowed_cpus().unwrap();
        assert!(!cores.is_empty());
        let last = *cores.last().unwrap();
        let mut cmd = std::process::Command::new("grep");
        cmd.args(["Cpus_allowed_list", "/proc/self/status"]);
        pin_on_exec(&mut cmd, last).unwrap();
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        assert_eq!(
            out.split_whitespace().nth(1),
            Some(last.to_string().as_str())
        );
        let mut bad = std::process::Command::new("true");
        assert!(pin_on_exec(&mut bad, 1 << 20).is_err());
    }
}
