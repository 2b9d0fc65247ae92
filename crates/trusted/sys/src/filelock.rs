//! An exclusive advisory lock on a file (`flock(2)`), held until dropped:
//! how processes that share one host setting take turns changing it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// An exclusive `flock` on a file, released when dropped (or when the
/// process dies, which the kernel does for it).
#[derive(Debug)]
pub struct FileLock {
    /// Held open for the lock's life: closing it lets go.
    _file: File,
}

impl FileLock {
    /// Opens (creating it, mode 0600: only its owner may take it, so no
    /// other user can hold it against its owner) and locks `path`, waiting
    /// for any other holder.
    pub fn exclusive(path: &Path) -> io::Result<FileLock> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        loop {
            // SAFETY: flock only takes a lock on the descriptor, which `f`
            // owns for the lock's whole life.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            match crate::cvt(r.into(), "flock") {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            };
            return Ok(FileLock { _file: f });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("splitnet-flock-{}", std::process::id()));
        let first = FileLock::exclusive(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = dir.clone();
        let t = std::thread::spawn(move || {
            let _second = FileLock::exclusive(&path).unwrap();
            tx.send(()).unwrap();
        });
        // Still held: the second has not got it.
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the second takes the lock once the first lets go");
        t.join().unwrap();
        let _ = std::fs::remove_file(dir);
    }
}
