//! hv's quiescence gate, for its upgrade in place: every thread that serves
//! a domain or the toolstack passes it after its request (a datagram, a
//! doorbell, a child's exit) is waiting and before it takes it, and leaves
//! it once the request is answered. Whoever comes while it is closed waits
//! outside with its request still unread, so the program that replaces
//! hv's finds it there.
//!
//! Requests are of two kinds. A toolstack request is long: a hot-plug
//! waits for both ends of the vif to connect, a restart for the domain's
//! reaping, which take the domains' hypercalls and the supervisor's reaps,
//! the short kind. Closing therefore goes in two steps: first to long
//! requests, waiting while those inside finish with the short ones still
//! served; then to every request.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A request's kind (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A domain's hypercall or batch; a domain's reaping (which may
    /// restart it: its hypercalls are short too); a connection accepted.
    Short,
    /// A toolstack request, which may wait on short ones.
    Long,
}

#[derive(Default)]
struct Inside {
    /// Passes held, and of those, long ones.
    all: usize,
    long: usize,
    closed_to_long: bool,
    closed: bool,
}

/// See the module documentation.
#[derive(Default)]
pub struct Gate {
    inside: Mutex<Inside>,
    changed: Condvar,
}

/// Held while one request is served; leaving the gate on drop.
pub struct Pass<'a>(&'a Gate, Kind);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut g = self.0.lock();
        g.all -= 1;
        if self.1 == Kind::Long {
            g.long -= 1;
        }
        // Only a closing waits for passes to go: no wake-up (a system call)
        // per request otherwise, a batch of the data path among them.
        let closing = g.closed_to_long;
        drop(g);
        if closing {
            self.0.changed.notify_all();
        }
    }
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, Inside> {
        self.inside.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, Inside>, until: Instant) -> MutexGuard<'a, Inside> {
        let left = until.saturating_duration_since(Instant::now());
        (self.changed.wait_timeout(g, left))
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// Enters for a request of `kind`, waiting while the gate is closed to
    /// it.
    pub fn enter(&self, kind: Kind) -> Pass<'_> {
        let mut g = self.lock();
        while g.closed || (kind == Kind::Long && g.closed_to_long) {
            g = self.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.all += 1;
        if kind == Kind::Long {
            g.long += 1;
        }
        Pass(self, kind)
    }

    /// Closes the gate in its two steps, waiting up to `patience` for
    /// each, until at most `own` requests are inside (the caller's own
    /// long passes). On time the gate stays closed; otherwise it opens
    /// again and the error says how many requests were still being served.
    pub fn close(&self, own: usize, patience: Duration) -> Result<(), usize> {
        let mut g = self.lock();
        if g.closed_to_long {
            return Err(g.all);
        }
        g.closed_to_long = true;
        let until = Instant::now() + patience;
        while g.long > own && Instant::now() < until {
            g = self.wait(g, until);
        }
        if g.long <= own {
            g.closed = true;
            let until = Instant::now() + patience;
            while g.all > own && Instant::now() < until {
                g = self.wait(g, until);
            }
            if g.all <= own {
                return Ok(());
            }
        }
        let busy = g.all - own.min(g.all);
        g.closed = false;
        g.closed_to_long = false;
        drop(g);
        self.changed.notify_all();
        Err(busy)
    }

    /// With the gate closed: waits up to `patience` until no one is inside
    /// (the pass of whoever asked for the upgrade is gone once its reply
    /// is sent). Whether it emptied.
    pub fn wait_empty(&self, patience: Duration) -> bool {
        let until = Instant::now() + patience;
        let mut g = self.lock();
        while g.all > 0 && Instant::now() < until {
            g = self.wait(g, until);
        }
        g.all == 0
    }

    /// Opens the gate again (an upgrade that did not happen).
    pub fn open(&self) {
        let mut g = self.lock();
        g.closed = false;
        g.closed_to_long = false;
        drop(g);
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
            let inside = gate.enter(Kind::Short);
            assert_eq!(gate.close(0, Duration::from_millis(20)), Err(1));
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                drop(inside);
            });
            assert_eq!(gate.close(0, Duration::from_secs(5)), Ok(()));
            let (tx, rx) = std::sync::mpsc::channel();
            let g = &gate;
            s.spawn(move || {
                let _p = g.enter(Kind::Short);
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
            gate.open();
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        });
    }

    /// A long request inside (a hot-plug waiting for its vif) finishes
    /// with the domains' short requests still served, before the gate
    /// closes to them.
    #[test]
    fn short_requests_pass_while_long_ones_finish() {
        let gate = Gate::default();
        std::thread::scope(|s| {
            let long = gate.enter(Kind::Long);
            let g = &gate;
            let closing = s.spawn(move || g.close(0, Duration::from_secs(5)));
            // Closed to long requests now; a short one still passes.
            let deadline = Instant::now() + Duration::from_secs(5);
            while !gate.lock().closed_to_long && Instant::now() < deadline {
                std::thread::yield_now();
            }
            drop(gate.enter(Kind::Short));
            drop(long);
            assert_eq!(closing.join().unwrap(), Ok(()));
        });
    }

    #[test]
    fn the_callers_own_pass_does_not_count() {
        let gate = Gate::default();
        let _mine = gate.enter(Kind::Long);
        assert_eq!(gate.close(1, Duration::from_millis(1)), Ok(()));
        assert_eq!(gate.close(1, Duration::from_millis(1)), Err(1));
    }
}
