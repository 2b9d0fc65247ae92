//! Signals taken synchronously: blocked in every thread, then received by
//! one thread that waits for them, so a daemon handles SIGTERM or SIGHUP
//! in ordinary code instead of in a handler. A child keeps its parent's
//! signal mask across fork and exec, so a daemon that blocks its signals
//! starts its processes with
//! [`SpawnUnblocked::spawn_unblocked`]: they begin with none blocked.

use std::io;

/// A set of signals blocked in the calling thread (and every thread it
/// starts afterwards); [`Blocked::wait`] takes the next one.
pub struct Blocked {
    set: libc::sigset_t,
}

/// Blocks `signals` in the calling thread. Call it before any other thread
/// starts, so that no thread leaves them to their default action.
pub fn block(signals: &[i32]) -> io::Result<Blocked> {
    // SAFETY: sigset_t is plain old data; sigemptyset initializes it below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, exclusively borrowed sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in signals {
        // SAFETY: as above; an invalid signal number is reported, not UB.
        if unsafe { libc::sigaddset(&mut set, s) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `set` is initialized and outlives the call; the old mask is
    // not asked for (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Blocked { set })
}

impl Blocked {
    /// Waits for the next of the blocked signals and returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `self.set` is an initialized sigset_t and `sig` a
            // valid place for the result; both outlive the call.
            let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
            match rc {
                0 => return Ok(sig),
                libc::EINTR => continue,
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

impl Blocked {
    /// A descriptor that is readable while one of the blocked signals is
    /// pending, which [`SignalFd::take`] then takes: a thread can wait for
    /// a signal without taking it (hv's upgrade in place takes a signal
    /// only inside its gate; one it does not take stays pending across the
    /// `execve`, for the next program).
    pub fn signal_fd(&self) -> io::Result<SignalFd> {
        // SAFETY: `self.set` is an initialized sigset_t; signalfd returns a
        // fresh descriptor or -1.
        let fd = unsafe { libc::signalfd(-1, &self.set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a fresh descriptor that we now own.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(SignalFd { fd })
    }
}

/// See [`Blocked::signal_fd`].
pub struct SignalFd {
    fd: std::os::fd::OwnedFd,
}

impl std::os::fd::AsFd for SignalFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl SignalFd {
    /// Takes one pending signal: its number, or None when none is.
    pub fn take(&self) -> io::Result<Option<i32>> {
        use std::os::fd::AsRawFd;
        // SAFETY: signalfd_siginfo is plain old data; all-zero is valid.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let len = std::mem::size_of::<libc::signalfd_siginfo>();
        loop {
            // SAFETY: reads at most `len` bytes into `info`, which is that large.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    len,
                )
            };
            if n == len as isize {
                return Ok(Some(info.ssi_signo as i32));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }
}

/// Replaces this process's program with `program` run with `args`
/// (`argv[0]` is `program`), keeping the signal mask, pending signals and
/// every descriptor without close-on-exec, as `execve` does (hv's upgrade
/// in place: its blocked signals must stay blocked until the new program
/// waits for them). Returns only on failure.
pub fn exec(program: &std::path::Path, args: &[std::ffi::OsString]) -> io::Error {
    exec_named(program, program, args)
}

/// [`exec`] with `name` as `argv[0]` (hv's guardian runs hv's program as
/// `/proc/self/exe`, named by its installed path).
pub fn exec_named(
    program: &std::path::Path,
    name: &std::path::Path,
    args: &[std::ffi::OsString],
) -> io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| CString::new(s.as_bytes());
    let (Ok(path), Ok(name)) = (c(program.as_os_str()), c(name.as_os_str())) else {
        return io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the program's path");
    };
    let mut owned = vec![name];
    for a in args {
        match c(a) {
            Ok(a) => owned.push(a),
            Err(_) => return io::Error::new(io::ErrorKind::InvalidInput, "a NUL in an argument"),
        }
    }
    let mut argv: Vec<*const libc::c_char> = owned.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: `path` and every `argv` entry are NUL-terminated strings that
    // outlive the call, and `argv` ends with a null pointer; execv returns
    // only on failure.
    unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
    io::Error::last_os_error()
}

// SAFETY: a sigset_t is plain data with no pointers; waiting on it from
// another thread reads it only.
unsafe impl Send for Blocked {}

/// Has `cmd`'s process start with no signal blocked.
pub fn unblock_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec. It calls
    // sigemptyset and pthread_sigmask on a set on its own stack (both
    // async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(())
        });
    }
}

/// `Command::spawn`, the child starting with no signal blocked whatever
/// the spawning thread blocks.
pub trait SpawnUnblocked {
    fn spawn_unblocked(&mut self) -> io::Result<std::process::Child>;
}

impl SpawnUnblocked for std::process::Command {
    fn spawn_unblocked(&mut self) -> io::Result<std::process::Child> {
        unblock_on_exec(self);
        self.spawn()
    }
}

/// Lets SIGPIPE end this process, as it ends any Unix filter whose reader
/// went away (`splitnet status | head`). Rust's runtime ignores it, and a
/// print to a closed pipe then panics. Writes that must survive a gone
/// peer (the control sockets) send with MSG_NOSIGNAL.
pub fn die_on_broken_pipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no
    // handler and passes no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// CLOCK_MONOTONIC in microseconds, the clock a service manager compares
/// a reload's `MONOTONIC_USEC=` with.
pub fn monotonic_usec() -> u64 {
    // SAFETY: timespec is plain old data; clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_waited_for_not_delivered() {
        // Blocked in this test's thread only; raised at this thread.
        let b = block(&[libc::SIGUSR2]).unwrap();
        // SAFETY: sends SIGUSR2 to this thread, which has it blocked.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
        assert_eq!(b.wait().unwrap(), libc::SIGUSR2);
    }

    #[test]
    fn a_child_starts_with_nothing_blocked() {
        // In a thread of its own: the mask is the thread's.
        std::thread::spawn(|| {
            let _b = block(&[libc::SIGTERM, libc::SIGHUP]).unwrap();
            let blocked = |cmd: &mut std::process::Command| {
                let out = cmd.output().unwrap();
                let status = String::from_utf8(out.stdout).unwrap();
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("SigBlk:"))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            let mut plain = std::process::Command::new("cat");
            plain.arg("/proc/self/status");
            assert_ne!(blocked(&mut plain), "0000000000000000", "inherited");
            let mut cmd = std::process::Command::new("cat");
            cmd.arg("/proc/self/status");
            unblock_on_exec(&mut cmd);
            assert_eq!(blocked(&mut cmd), "0000000000000000");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_usec();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_usec() >= a + 2_000);
    }
}
