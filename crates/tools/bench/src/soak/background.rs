//! A thread that watches something until told to stop, then hands back
//! what it saw: the soak's probe and its watchdog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The running thread; told to stop when dropped.
pub struct Background<T> {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Default + Send + 'static> Background<T> {
    /// Runs `body` on a thread named `name`; it should return soon after
    /// the flag it is given is set.
    pub fn spawn(
        name: &str,
        body: impl FnOnce(&AtomicBool) -> T + Send + 'static,
    ) -> std::io::Result<Background<T>> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&s))?;
        Ok(Background {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops it: what it saw (the default if it panicked).
    pub fn finish(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
