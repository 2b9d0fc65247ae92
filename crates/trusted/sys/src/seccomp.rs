//! A seccomp-bpf allowlist, compiled by `seccompiler` (rust-vmm's, the one
//! Firecracker uses) and installed on every thread of the caller.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The system calls a process may make; every other call fails.
#[derive(Debug, Default, Clone)]
pub struct SyscallFilter {
    allow: BTreeMap<i64, Vec<SeccompRule>>,
    enosys: Vec<i64>,
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("seccomp filter: {e}"))
}

impl SyscallFilter {
    /// An empty allowlist.
    pub fn new() -> SyscallFilter {
        SyscallFilter::default()
    }

    /// Allows system call `nr` whatever its arguments.
    pub fn allow(&mut self, nr: libc::c_long) -> &mut Self {
        self.allow.insert(nr, Vec::new());
        self
    }

    /// Allows each of `nrs` whatever their arguments.
    pub fn allow_all(&mut self, nrs: &[libc::c_long]) -> &mut Self {
        for &nr in nrs {
            self.allow(nr);
        }
        self
    }

    /// Allows `nr` only when argument `arg` is one of `values`.
    pub fn allow_arg_in(
        &mut self,
        nr: libc::c_long,
        arg: u8,
        values: &[u64],
    ) -> io::Result<&mut Self> {
        let mut rules = Vec::new();
        for &v in values {
            let c = SeccompCondition::new(arg, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, v)
                .map_err(bad)?;
            rules.push(SeccompRule::new(vec![c]).map_err(bad)?);
        }
        self.allow.insert(nr, rules);
        Ok(self)
    }

    /// Allows `nr` only when argument `arg` has none of the bits of `mask`.
    pub fn allow_arg_without(
        &mut self,
        nr: libc::c_long,
        arg: u8,
        mask: u64,
    ) -> io::Result<&mut Self> {
        let c = SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(mask),
            0,
        )
        .map_err(bad)?;
        self.allow
            .insert(nr, vec![SeccompRule::new(vec![c]).map_err(bad)?]);
        Ok(self)
    }

    /// Makes `nr` fail with ENOSYS, as if the kernel lacked it, so that libc
    /// falls back to an older call the filter can inspect (clone3 → clone).
    pub fn absent(&mut self, nr: libc::c_long) -> &mut Self {
        // The allowlist lets it through; an earlier filter answers ENOSYS.
        self.allow.insert(nr, Vec::new());
        self.enosys.push(nr);
        self
    }

    /// Whether `nr` is allowed (for some arguments).
    pub fn allows(&self, nr: libc::c_long) -> bool {
        self.allow.contains_key(&nr) && !self.enosys.contains(&nr)
    }

    /// Compiles the filter: a call outside the list will fail with `errno`.
    pub fn compile(&self, errno: i32) -> io::Result<CompiledFilter> {
        let arch: TargetArch = std::env::consts::ARCH.try_into().map_err(bad)?;
        let list: BpfProgram = SeccompFilter::new(
            self.allow.clone(),
            SeccompAction::Errno(errno as u32),
            SeccompAction::Allow,
            arch,
        )
        .map_err(bad)?
        .try_into()
        .map_err(bad)?;
        let mut programs = Vec::new();
        if !self.enosys.is_empty() {
            // Installed first: once the allowlist is in, neither seccomp nor
            // no_new_privs could be called. The kernel runs every filter and
            // keeps the strictest answer: ENOSYS beats the list's ALLOW.
            programs.push(
                SeccompFilter::new(
                    self.enosys.iter().map(|&nr| (nr, Vec::new())).collect(),
                    SeccompAction::Allow,
                    SeccompAction::Errno(libc::ENOSYS as u32),
                    arch,
                )
                .map_err(bad)?
                .try_into()
                .map_err(bad)?,
            );
        }
        programs.push(list);
        Ok(CompiledFilter { programs })
    }
}

/// A filter ready to install.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    programs: Vec<BpfProgram>,
}

impl CompiledFilter {
    /// Installs the filter on every thread of the calling process, for good.
    /// Sets no_new_privs, which an unprivileged filter needs.
    pub fn install(&self) -> io::Result<()> {
        for p in &self.programs {
            seccompiler::apply_filter_all_threads(p)
                .map_err(|e| io::Error::other(format!("installing the seccomp filter: {e}")))?;
        }
        Ok(())
    }

    /// What this filter answers to each of `calls` (a system call number
    /// and its first three arguments), made in turn in a child process
    /// that installed the filter first: each call's return value, or its
    /// errno. At most [`MAX_PROBES`] calls, and only calls whose effects
    /// stay in the child (the child shares the parent's open files).
    pub fn answers(&self, calls: &[(libc::c_long, [u64; 3])]) -> io::Result<Vec<Result<i64, i32>>> {
        if calls.len() > MAX_PROBES {
            return Err(bad(format!("at most {MAX_PROBES} probes")));
        }
        let (r, w) = pipe()?;
        // SAFETY: in the child only system calls on memory made before the
        // fork run (no allocation), then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            self.probe_in_child(calls, w.as_raw_fd());
        }
        drop(w);
        let mut buf = [0u8; 16 * MAX_PROBES];
        let got = std::fs::File::from(r).read(&mut buf);
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if got? != buf.len() || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(bad(format!(
                "the probing child failed (status {status:#x})"
            )));
        }
        let word =
            |i: usize| i64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        Ok((0..calls.len())
            .map(|i| match word(2 * i + 1) {
                0 => Ok(word(2 * i)),
                e => Err(e as i32),
            })
            .collect())
    }

    /// The child of [`CompiledFilter::answers`]: installs the filter, makes
    /// the calls, writes each result and errno to `out`, and exits.
    fn probe_in_child(&self, calls: &[(libc::c_long, [u64; 3])], out: i32) -> ! {
        let mut buf = [0u8; 16 * MAX_PROBES];
        let code = if self.install().is_ok() { 0 } else { 10 };
        for (i, (nr, a)) in calls.iter().enumerate() {
            // SAFETY: the caller's calls take no pointer the child could
            // misuse beyond its own copy of the parent's memory.
            let ret = unsafe { libc::syscall(*nr, a[0], a[1], a[2]) };
            let errno = if ret < 0 {
                io::Error::last_os_error().raw_os_error().unwrap_or(0)
            } else {
                0
            };
            buf[i * 16..i * 16 + 8].copy_from_slice(&(ret as i64).to_ne_bytes());
            buf[i * 16 + 8..i * 16 + 16].copy_from_slice(&i64::from(errno).to_ne_bytes());
        }
        // SAFETY: writes our own buffer to the pipe, then leaves the child
        // without running destructors.
        unsafe {
            libc::write(out, buf.as_ptr().cast(), buf.len());
            libc::_exit(code)
        }
    }
}

/// A pipe, close-on-exec: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made, and nobody else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The most calls [`CompiledFilter::answers`] makes in one child.
pub const MAX_PROBES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child process: install a filter, then see what is refused.
    #[test]
    fn filter_refuses_and_fakes_absence() {
        let mut f = SyscallFilter::new();
        f.allow_all(&[libc::SYS_exit_group, libc::SYS_exit, libc::SYS_getpid])
            .allow_arg_in(libc::SYS_getppid, 0, &[0])
            .unwrap()
            .absent(libc::SYS_getuid);
        // Compiled before the fork: the child must not allocate.
        let filter = f.compile(libc::EPERM).unwrap();
        // SAFETY: the child only makes system calls (no allocation) and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = if filter.install().is_err() {
                10
            } else {
                // SAFETY: plain system calls with no pointers.
                let (pid, uid, tid) = unsafe {
                    let pid = libc::syscall(libc::SYS_getpid);
                    let uid = libc::syscall(libc::SYS_getuid);
                    let uid_err = *libc::__errno_location();
                    let tid = libc::syscall(libc::SYS_gettid);
                    let tid_err = *libc::__errno_location();
                    (pid, (uid, uid_err), (tid, tid_err))
                };
                match (pid > 0, uid, tid) {
                    (true, (-1, libc::ENOSYS), (-1, libc::EPERM)) => 0,
                    _ => 11,
                }
            };
            // SAFETY: leaves the child without running destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
