//! Processes by descriptor, and descriptors taken from another process:
//! what hv's guardian needs to hold hv's descriptors while hv runs and to
//! hand them to the hv that replaces one that died.

use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A process, by a descriptor that stays valid (and readable once the
/// process has ended) whether or not it is this process's child.
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Process `pid`'s descriptor; an error if it is gone.
    pub fn open(pid: i32) -> io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
        let fd = cvt(raw, "pidfd_open")?;
        // SAFETY: a descriptor the kernel just gave us and nobody else owns.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// A duplicate, in this process, of the process's descriptor `fd`
    /// (close-on-exec). Needs the right to trace it (same user, or root).
    pub fn take_fd(&self, fd: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_getfd takes two descriptor numbers and flags, no
        // pointers, and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.0.as_raw_fd(), fd, 0u32) };
        let got = cvt(raw, "pidfd_getfd")?;
        // SAFETY: a descriptor the kernel just installed for us alone.
        Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
    }

    /// Waits up to `limit` (None: for ever) for the process to end;
    /// whether it did.
    pub fn wait_ended(&self, limit: Option<Duration>) -> io::Result<bool> {
        let ready = crate::poll_readable(&[self.0.as_fd()], limit)?;
        Ok(ready[0])
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Puts each descriptor of `fds` at its number, inheritable, for a program
/// about to be `execve`d (hv's guardian becoming hv): every one is first
/// moved above all the numbers asked, so that no placement closes another.
/// A number below 3 is refused (standard input, output and error stay).
/// Whatever else this process had open at those numbers is closed, so the
/// caller must own nothing there any more; on success the descriptors are
/// no Rust object's.
pub fn place_fds(fds: Vec<(OwnedFd, RawFd)>) -> io::Result<()> {
    if let Some((_, n)) = fds.iter().find(|(_, n)| *n < 3) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {n} is standard input, output or error"),
        ));
    }
    let above = fds.iter().map(|(_, n)| *n).max().unwrap_or(2) + 1;
    let mut moved = Vec::with_capacity(fds.len());
    for (fd, n) in fds {
        // SAFETY: F_DUPFD_CLOEXEC takes no pointers and returns a new
        // descriptor at or above `above`, which we own.
        let high = cvt(
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) } as libc::c_long,
            "fcntl(F_DUPFD_CLOEXEC)",
        )?;
        // SAFETY: the fresh descriptor F_DUPFD_CLOEXEC returned.
        moved.push((unsafe { OwnedFd::from_raw_fd(high as RawFd) }, n));
        drop(fd);
    }
    for (high, n) in moved {
        // SAFETY: dup2 takes two numbers; the target, if open, is closed
        // first (the caller owns nothing there, as documented), and the
        // new descriptor at `n` has close-on-exec cleared.
        let r = unsafe { libc::dup2(high.as_raw_fd(), n) };
        cvt(r as libc::c_long, "dup2")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_is_taken_from_another_process_and_its_end_seen() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = PidFd::open(child.id() as i32).unwrap();
        // The child's stdin is the read end of a pipe whose write end we hold.
        let taken = pid.take_fd(0).unwrap();
        let mut w = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut w, b"x").unwrap();
        let mut r = std::fs::File::from(taken);
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut r, &mut b).unwrap();
        assert_eq!(&b, b"x", "the taken descriptor is the child's pipe");
        assert!(!pid.wait_ended(Some(Duration::from_millis(10))).unwrap());
        child.kill().unwrap();
        assert!(pid.wait_ended(Some(Duration::from_secs(10))).unwrap());
        child.wait().unwrap();
        assert!(pid.take_fd(0).is_err(), "a dead process has no descriptors");
    }

    #[test]
    fn placing_refuses_standard_streams() {
        let fd = crate::dup_fd(&std::io::stderr()).unwrap();
        let e = place_fds(vec![(fd, 1)]).unwrap_err();
        assert!(e.to_string().contains("standard"), "{e}");
    }
}
