//! The system calls that confine a process: user and network namespaces,
//! credentials, capabilities, `no_new_privs`, mounts. The policy (which uid,
//! which capabilities) is the caller's; `hv::jail` holds splitnet's.

use crate::cvt;
use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};

/// `CAP_NET_ADMIN`: interfaces, addresses, routes, TAP devices, ethtool.
pub const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`: packet sockets.
pub const CAP_NET_RAW: u32 = 13;

/// A set of capabilities, one bit per capability number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps(pub u64);

impl Caps {
    /// The set holding exactly `caps`.
    pub fn of(caps: &[u32]) -> Caps {
        Caps(caps.iter().fold(0, |m, &c| m | (1u64 << c)))
    }

    /// Whether `cap` is in the set.
    pub fn has(self, cap: u32) -> bool {
        cap < 64 && self.0 & (1u64 << cap) != 0
    }
}

// <linux/securebits.h>
const SECBIT_NOROOT: u64 = 1 << 0;
const SECBIT_NOROOT_LOCKED: u64 = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: u64 = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: u64 = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: u64 = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: u64 = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: u64 = 1 << 7;
// <linux/nsfs.h>: _IO(0xb7, 0x1)
const NS_GET_USERNS: libc::c_ulong = 0xb701;
// <linux/capability.h>
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The capability sets of the calling thread: (effective, permitted, inheritable).
pub fn current_caps() -> io::Result<(Caps, Caps, Caps)> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    cvt(
        // SAFETY: capget writes two `CapData` records (version 3) into `data`.
        unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) },
        "capget",
    )?;
    let join = |f: fn(&CapData) -> u32| Caps(u64::from(f(&data[0])) | u64::from(f(&data[1])) << 32);
    Ok((
        join(|d| d.effective),
        join(|d| d.permitted),
        join(|d| d.inheritable),
    ))
}

fn set_caps(effective: Caps, permitted: Caps, inheritable: Caps) -> io::Result<()> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let split = |c: Caps| [c.0 as u32, (c.0 >> 32) as u32];
    let (e, p, i) = (split(effective), split(permitted), split(inheritable));
    let data = [0, 1].map(|k| CapData {
        effective: e[k],
        permitted: p[k],
        inheritable: i[k],
    });
    cvt(
        // SAFETY: capset reads the header and two `CapData` records (version 3).
        unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) },
        "capset",
    )?;
    Ok(())
}

fn prctl(op: libc::c_int, a: u64, what: &'static str) -> io::Result<()> {
    prctl2(op, a, 0, what)
}

/// `prctl(op, a, b)` for the operations that take integer arguments.
fn prctl2(op: libc::c_int, a: u64, b: u64, what: &'static str) -> io::Result<()> {
    cvt(
        // SAFETY: the prctl operations used here take integer arguments only.
        unsafe {
            libc::prctl(
                op,
                a as libc::c_ulong,
                b as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        } as libc::c_long,
        what,
    )?;
    Ok(())
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
        .min(63)
}

/// A process holding a new user namespace and a network namespace that the
/// user namespace owns, until [`NamespaceHolder::release`]. Meanwhile its
/// owner writes the uid and gid maps (`/proc/<pid>/uid_map`) and gives the
/// network namespace a name (`ip netns attach`); both namespaces then live
/// on through that name.
pub struct NamespaceHolder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl NamespaceHolder {
    /// Starts the holder (`cat`, waiting on its standard input).
    pub fn spawn() -> io::Result<NamespaceHolder> {
        Self::spawn_with(libc::CLONE_NEWUSER | libc::CLONE_NEWNET)
    }

    /// Starts a holder of a new network namespace only, owned by the
    /// caller's user namespace: `ip netns add` without its `setns` back into
    /// the caller's network namespace, which a caller without privilege over
    /// that namespace (rootless) may not make.
    pub fn spawn_net() -> io::Result<NamespaceHolder> {
        Self::spawn_with(libc::CLONE_NEWNET)
    }

    fn spawn_with(flags: libc::c_int) -> io::Result<NamespaceHolder> {
        let mut cmd = Command::new("cat");
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and makes
        // one system call, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(flags) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // spawn returns once the child has exec'd, so the namespaces exist.
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("creating a user and network namespace: {e} (are user namespaces enabled? see /proc/sys/user/max_user_namespaces)"),
            )
        })?;
        let stdin = child.stdin.take();
        Ok(NamespaceHolder { child, stdin })
    }

    /// The holder's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Writes the user namespace's uid and gid maps: `inner` maps to `outer`.
    pub fn map_ids(&self, inner: u32, outer_uid: u32, outer_gid: u32) -> io::Result<()> {
        for (file, outer) in [("uid_map", outer_uid), ("gid_map", outer_gid)] {
            let path = format!("/proc/{}/{file}", self.pid());
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("{inner} {outer} 1\n").as_bytes()))
                .map_err(|e| io::Error::new(e.kind(), format!("writing {path}: {e}")))?;
        }
        Ok(())
    }

    /// Lets the holder exit and reaps it.
    pub fn release(mut self) -> io::Result<()> {
        drop(self.stdin.take());
        self.child.wait().map(|_| ())
    }
}

impl Drop for NamespaceHolder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The number of threads of the calling process.
pub fn thread_count() -> io::Result<usize> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Threads: line in /proc/self/status"))
}

/// The user namespace that owns the calling process's network namespace.
pub fn netns_owner() -> io::Result<OwnedFd> {
    let net = std::fs::File::open("/proc/self/ns/net")?;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor.
    let fd = cvt(
        unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) } as libc::c_long,
        "ioctl(NS_GET_USERNS)",
    )?;
    // SAFETY: the ioctl returned a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Joins the namespace behind `ns` (of type `nstype`, a `CLONE_NEW*` flag,
/// or 0 for any).
pub fn setns(ns: BorrowedFd<'_>, nstype: libc::c_int) -> io::Result<()> {
    cvt(
        // SAFETY: plain syscall on a borrowed descriptor.
        unsafe { libc::setns(ns.as_raw_fd(), nstype) } as libc::c_long,
        "setns",
    )?;
    Ok(())
}

/// Joins user namespace `userns`; the caller must be single-threaded.
pub fn enter_userns(userns: impl AsFd) -> io::Result<()> {
    setns(userns.as_fd(), libc::CLONE_NEWUSER)
}

/// Moves the calling process into a mount namespace of its own whose mounts
/// propagate nowhere.
pub fn private_mounts() -> io::Result<()> {
    cvt(
        // SAFETY: unshare takes a flag word; no memory is passed.
        unsafe { libc::unshare(libc::CLONE_NEWNS) } as libc::c_long,
        "unshare(CLONE_NEWNS)",
    )?;
    cvt(
        // SAFETY: NULL source, type and data are allowed for a propagation change.
        unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            )
        } as libc::c_long,
        "mount(/, MS_SLAVE|MS_REC)",
    )?;
    Ok(())
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes every mount of the calling process's mount namespace read-only
/// (call after [`private_mounts`]: it changes the mounts themselves).
pub fn all_mounts_read_only() -> io::Result<()> {
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    cvt(
        // SAFETY: mount_setattr reads one `mount_attr` of the size passed.
        unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                AT_RECURSIVE,
                &attr,
                std::mem::size_of::<MountAttr>(),
            )
        },
        "mount_setattr(/, read-only, recursive)",
    )?;
    Ok(())
}

fn cpath(path: &str) -> io::Result<CString> {
    CString::new(path).map_err(|_| io::Error::other("path has a NUL"))
}

/// Mounts a small tmpfs on `dir` (no executables, no set-uid).
pub fn mount_tmpfs(dir: &str, options: &str) -> io::Result<()> {
    let (d, o) = (cpath(dir)?, cpath(options)?);
    cvt(
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                d.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                o.as_ptr().cast(),
            )
        } as libc::c_long,
        "mount(tmpfs)",
    )
    .map_err(|e| io::Error::new(e.kind(), format!("{e} ({dir})")))?;
    Ok(())
}

/// Creates character device node `path` (`major`:`minor`, permissions `mode`).
pub fn mknod_char(path: &str, major: u32, minor: u32, mode: u32) -> io::Result<()> {
    let p = cpath(path)?;
    cvt(
        // SAFETY: `p` is a NUL-terminated path; the other arguments are integers.
        unsafe {
            libc::mknod(
                p.as_ptr(),
                libc::S_IFCHR | mode,
                libc::makedev(major, minor),
            )
        } as libc::c_long,
        "mknod",
    )
    .map_err(|e| io::Error::new(e.kind(), format!("{e} ({path})")))?;
    Ok(())
}

/// What a confined process keeps: its ids (in its user namespace) and its
/// capabilities, which stay ambient so the programs it runs keep them too.
#[derive(Debug, Clone, Copy)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub caps: Caps,
}

impl Credentials {
    /// Becomes `uid`:`gid` with no supplementary group and exactly `caps`:
    /// effective, permitted, inheritable and ambient; every other capability
    /// leaves the bounding set; the securebits are locked so that neither
    /// uid 0 nor a set-uid change brings capabilities back; no_new_privs.
    /// Needs CAP_SETUID, CAP_SETGID and CAP_SETPCAP at the start.
    pub fn apply(&self) -> io::Result<()> {
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED;
        prctl(libc::PR_SET_SECUREBITS, bits, "prctl(PR_SET_SECUREBITS)")?;
        self.set_ids()?;
        self.drop_bounding()?;
        let (eff, perm, _) = current_caps()?;
        if perm.0 & self.caps.0 != self.caps.0 {
            return Err(io::Error::other(format!(
                "the capabilities to keep ({:#x}) are not all permitted ({:#x})",
                self.caps.0, perm.0
            )));
        }
        set_caps(eff, perm, self.caps)?;
        self.set_ambient()?;
        let locked = bits | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        prctl(libc::PR_SET_SECUREBITS, locked, "prctl(PR_SET_SECUREBITS)")?;
        set_caps(self.caps, self.caps, self.caps)?;
        prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")?;
        let (e, p, i) = current_caps()?;
        if (e, p, i) != (self.caps, self.caps, self.caps) {
            return Err(io::Error::other(format!(
                "capabilities are {:#x}/{:#x}/{:#x} after dropping, not {:#x}",
                e.0, p.0, i.0, self.caps.0
            )));
        }
        Ok(())
    }

    /// No supplementary group, then `gid` and `uid` as real, effective
    /// and saved ids. Where the user namespace denies setgroups (a rootless
    /// hv with no subordinate gids: the kernel lets an unprivileged user
    /// map a gid only so), the groups stay those the process already holds.
    fn set_ids(&self) -> io::Result<()> {
        let cleared = cvt(
            // SAFETY: a zero-length list is allowed with a NULL pointer.
            unsafe { libc::setgroups(0, std::ptr::null()) } as libc::c_long,
            "setgroups([])",
        );
        if let Err(e) = cleared {
            let denied =
                std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny");
            if !denied {
                return Err(e);
            }
        }
        cvt(
            // SAFETY: setresgid takes three integers; no memory is passed.
            unsafe { libc::setresgid(self.gid, self.gid, self.gid) } as libc::c_long,
            "setresgid",
        )?;
        cvt(
            // SAFETY: setresuid takes three integers; no memory is passed.
            unsafe { libc::setresuid(self.uid, self.uid, self.uid) } as libc::c_long,
            "setresuid",
        )?;
        Ok(())
    }

    /// Drops every capability but `caps` from the bounding set.
    fn drop_bounding(&self) -> io::Result<()> {
        for cap in 0..=last_cap() {
            if !self.caps.has(cap) {
                prctl(
                    libc::PR_CAPBSET_DROP,
                    u64::from(cap),
                    "prctl(PR_CAPBSET_DROP)",
                )?;
            }
        }
        Ok(())
    }

    /// Makes the ambient set exactly `caps`, so they survive an exec.
    fn set_ambient(&self) -> io::Result<()> {
        let clear = libc::PR_CAP_AMBIENT_CLEAR_ALL as u64;
        prctl2(
            libc::PR_CAP_AMBIENT,
            clear,
            0,
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
        )?;
        for cap in 0..64 {
            if self.caps.has(cap) {
                let raise = libc::PR_CAP_AMBIENT_RAISE as u64;
                prctl2(
                    libc::PR_CAP_AMBIENT,
                    raise,
                    u64::from(cap),
                    "prctl(PR_CAP_AMBIENT_RAISE)",
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_sets() {
        let c = Caps::of(&[CAP_NET_ADMIN, CAP_NET_RAW]);
        assert_eq!(c.0, 0x3000);
        assert!(c.has(CAP_NET_RAW) && !c.has(0) && !c.has(200));
    }

    #[test]
    fn current_caps_reads() {
        let (e, p, _) = current_caps().unwrap();
        assert_eq!(e.0 & !p.0, 0, "effective is a subset of permitted");
    }
}
