//! The host's shared state that root tests change: network namespaces
//! (`splitnet up` wipes every `splitnet-*` one), links in the host's
//! namespace, `/run/splitnet`, huge pages. Tests that touch it take one lock
//! across every test process on the machine, so the rest run in parallel.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::marker::PhantomData;
use std::path::PathBuf;

/// The lock file: one fixed path, so every test binary shares it.
pub fn lock_path() -> PathBuf {
    std::env::temp_dir().join("splitnet-tests-host.lock")
}

thread_local! {
    /// Whether this thread already holds the lock (a helper taking it
    /// again must not wait on itself).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// The host lock, held until dropped. An flock(2) on an open file: released
/// when the file closes, so also when a test panics (the guard drops while
/// unwinding) or its process dies.
#[must_use = "the lock is released when the guard drops"]
pub struct HostLock {
    file: Option<File>,
    /// `Sync` but not `Send`, as a mutex guard is: the guard belongs to the
    /// thread whose flag it clears.
    _thread: PhantomData<std::sync::MutexGuard<'static, ()>>,
}

impl Drop for HostLock {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            HELD.with(|h| h.set(false));
        }
    }
}

/// Takes the host lock, waiting for any other test (in this process or
/// another) that holds it. Taken again on a thread that holds it, it returns
/// at once and the first guard keeps it.
pub fn host_lock() -> HostLock {
    if HELD.with(Cell::get) {
        return HostLock {
            file: None,
            _thread: PhantomData,
        };
    }
    let path = lock_path();
    // A lock file another user made may not be writable: flock needs only
    // an open file.
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .or_else(|_| File::open(&path))
        .unwrap_or_else(|e| panic!("opening the test lock {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    HELD.with(|h| h.set(true));
    HostLock {
        file: Some(file),
        _thread: PhantomData,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn one_holder_at_a_time_and_again_on_the_same_thread() {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (inside, most) = (inside.clone(), most.clone());
                std::thread::spawn(move || {
                    let _l = host_lock();
                    let _again = host_lock();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_panic_releases_the_lock() {
        let r = std::thread::spawn(|| {
            let _l = host_lock();
            panic!("a failing test");
        })
        .join();
        assert!(r.is_err());
        // Would wait forever had the panicking thread kept it.
        let _l = host_lock();
    }
}
