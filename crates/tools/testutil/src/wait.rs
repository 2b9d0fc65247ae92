//! Waiting on a fact: one poll loop with a deadline for every test, so a
//! timeout always says what was awaited and what was last seen.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// What one look at the awaited fact found: done with a value, or not yet
/// with the state to report if the wait times out.
pub trait Fact {
    /// What the wait returns once the fact holds.
    type Value;
    /// `Ok` when the fact holds, else `Err(the state seen)`.
    fn check(self) -> Result<Self::Value, String>;
}

impl Fact for bool {
    type Value = ();
    fn check(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("false".into())
        }
    }
}

impl<T> Fact for Option<T> {
    type Value = T;
    fn check(self) -> Result<T, String> {
        self.ok_or_else(|| "None".into())
    }
}

impl<T, E: Display> Fact for Result<T, E> {
    type Value = T;
    fn check(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// The first pause between looks, and the one after a change.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between looks: a fact is seen within this of holding.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Polls `look` until the fact holds (`true`, `Some`, `Ok`) and returns its
/// value. The pause between looks starts at 1 ms and doubles up to 20 ms
/// while the state seen stays the same; a look that sees a new state (an
/// `Err` that says how far a transfer got) starts it again. After `timeout` it panics naming
/// `what` and the last state seen (an `Err`'s value, or `false`/`None`).
pub fn wait_until<F: Fact>(what: &str, timeout: Duration, look: impl FnMut() -> F) -> F::Value {
    match poll_until(timeout, look) {
        Ok(v) => v,
        Err(last) => panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}"),
    }
}

/// [`wait_until`] without the panic: `Err(the last state seen)` when
/// `timeout` passes first, for a test to whom giving up is an outcome.
pub fn poll_until<F: Fact>(
    timeout: Duration,
    mut look: impl FnMut() -> F,
) -> Result<F::Value, String> {
    let deadline = Instant::now() + timeout;
    let mut pause = FIRST_PAUSE;
    let mut before = None;
    loop {
        let seen = match look().check() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(seen);
        }
        // A state that moved (a count that grew) is worth a quick look again.
        pause = if before.as_ref() == Some(&seen) {
            (pause * 2).min(MAX_PAUSE)
        } else {
            FIRST_PAUSE
        };
        before = Some(seen);
        std::thread::sleep(pause.min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value_once_the_fact_holds() {
        let mut n = 0;
        let v = wait_until("the third look", Duration::from_secs(5), || {
            n += 1;
            (n >= 3).then_some(n * 10)
        });
        assert_eq!(v, 30);
    }

    #[test]
    fn gives_up_at_the_deadline_with_the_last_state() {
        let t0 = Instant::now();
        let mut n = 0;
        let r = poll_until(Duration::from_millis(50), || {
            n += 1;
            Err::<(), _>(format!("look {n}"))
        });
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert_eq!(r, Err(format!("look {n}")));
        assert!(n >= 3, "polled only {n} times in 50 ms");
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible; last seen: false")]
    fn a_timeout_panics_naming_what_and_the_state() {
        wait_until("the impossible", Duration::from_millis(10), || false);
    }
}
