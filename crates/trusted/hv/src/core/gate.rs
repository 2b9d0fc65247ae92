//! hv's quiescence gate, for its upgrade in place: every thread that serves
//! a domain or the toolstack passes it after its request (a datagram, a
//! doorbell, a child's exit) is waiting and before it takes it, and leaves
//! it once the request is answered. Closing the gate waits until no one is
//! inside; whoever comes meanwhile waits outside with its request still
//! unread, so the program that replaces hv's finds it there.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Inside {
    count: usize,
    closed: bool,
}

/// See the module documentation.
#[derive(Default)]
pub struct Gate {
    inside: Mutex<Inside>,
    changed: Condvar,
}

/// Held while one request is served; leaving the gate on drop.
pub struct Pass<'a>(&'a Gate);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.lock().count -= 1;
        self.0.changed.notify_all();
    }
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, Inside> {
        self.inside.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enters, waiting while the gate is closed.
    pub fn enter(&self) -> Pass<'_> {
        let mut g = self.lock();
        while g.closed {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.count += 1;
        Pass(self)
    }

    /// Closes the gate and waits up to `patience` until at most `own`
    /// threads are inside (the caller's own passes). On time, the gate
    /// stays closed and true is returned; otherwise it opens again and the
    /// error says how many requests were still being served.
    pub fn close(&self, own: usize, patience: Duration) -> Result<(), usize> {
        let until = Instant::now() + patience;
        let mut g = self.lock();
        if g.closed {
            return Err(g.count);
        }
        g.closed = true;
        while g.count > own {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                g.closed = false;
                let busy = g.count - own;
                drop(g);
                self.changed.notify_all();
                return Err(busy);
            }
            g = (self.changed.wait_timeout(g, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// With the gate closed: waits up to `patience` until no one is inside
    /// (the pass of whoever asked for the upgrade is gone once its reply
    /// is sent). Whether it emptied.
    pub fn wait_empty(&self, patience: Duration) -> bool {
        let until = Instant::now() + patience;
        let mut g = self.lock();
        while g.count > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = (self.changed.wait_timeout(g, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Opens the gate again (an upgrade that did not happen).
    pub fn open(&self) {
        self.lock().closed = false;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_waits_for_those_inside_and_holds_back_newcomers() {
        let gate = Gate::default();
        std::thread::scope(|s| {
            let inside = gate.enter();
            assert_eq!(gate.close(0, Duration::from_millis(20)), Err(1));
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                drop(inside);
            });
            assert_eq!(gate.close(0, Duration::from_secs(5)), Ok(()));
            let (tx, rx) = std::sync::mpsc::channel();
            let g = &gate;
            s.spawn(move || {
                let _p = g.enter();
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
            gate.open();
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        });
    }

    #[test]
    fn the_callers_own_pass_does_not_count() {
        let gate = Gate::default();
        let _mine = gate.enter();
        assert_eq!(gate.close(1, Duration::from_millis(1)), Ok(()));
        assert_eq!(gate.close(1, Duration::from_millis(1)), Err(1));
    }
}
