//! How a domain's loop waits between batches: block on its event sources at
//! once (the default), or first keep polling them, yielding the CPU between
//! polls, for an adaptive budget after the last work, so that a
//! notification arriving soon costs no wake-up.
//!
//! A fixed spin was measured to cost more than it saved on this machine
//! kind (2 vCPUs shared by every domain; docs/RESULTS.md, "Where the
//! remaining cycles go"). The budget now adapts and the poll yields; set its
//! cap per domain with `spin_us` in the topology, or for every domain with
//! `splitnet up --spin-us`.

use hypercall::HvClient;
use std::time::{Duration, Instant};

pub use abi::xenbus::{spin_path, SPIN_KEY};

/// The longest spin a store value may ask for: the value comes from the
/// toolstack, but a domain still refuses to burn a CPU for seconds.
pub const MAX_SPIN: Duration = Duration::from_millis(10);

/// The wait of an idle loop: after work, keep polling for up to a budget
/// before blocking for at most `block`. The budget adapts, as Linux's NAPI
/// busy-poll does to load: a poll that caught work doubles it (up to the
/// `spin` cap), a poll that ran out empty halves it, so a request-response
/// flow keeps its domains awake between messages while a quiet or bulk
/// one soon stops spinning. The poll is polite: the loop yields the CPU
/// between polls ([`Idle::pause`]), so on a machine with fewer CPUs than
/// runnable processes the application it waits for still runs.
#[derive(Debug, Clone)]
pub struct Idle {
    spin: Duration,
    block: Duration,
    last_work: Instant,
    /// The current polling budget, at most `spin`.
    budget: Duration,
    /// The last timeout was a poll (zero without pending work).
    polling: bool,
}

/// The smallest budget a poll that caught work restores.
const MIN_BUDGET: Duration = Duration::from_micros(5);

impl Idle {
    /// A policy that polls for up to `spin` (capped at [`MAX_SPIN`]) and
    /// then blocks for up to `block` (so periodic work still runs).
    pub fn new(spin: Duration, block: Duration) -> Idle {
        let spin = spin.min(MAX_SPIN);
        Idle {
            spin,
            block,
            last_work: Instant::now(),
            budget: spin,
            polling: false,
        }
    }

    /// The policy the toolstack set for this domain (its store key
    /// [`SPIN_KEY`]), blocking for up to `block`; `who` names the loop in
    /// the log line that says it spins.
    pub fn for_domain(hv: &mut HvClient, who: &str, block: Duration) -> Idle {
        let key = spin_path(hv.domid());
        let spin = Idle::spin_from_store(hv.store_read_str(&key).ok().as_deref());
        if !spin.is_zero() {
            eprintln!(
                "{who}: polling up to {} µs before sleeping (adaptive)",
                spin.as_micros()
            );
        }
        Idle::new(spin, block)
    }

    /// Parses a store value in microseconds; a missing or malformed value
    /// means no spin (and says so on stderr when malformed).
    pub fn spin_from_store(value: Option<&str>) -> Duration {
        match value.map(str::trim) {
            None | Some("") => Duration::ZERO,
            Some(v) => match v.parse::<u64>() {
                Ok(us) => Duration::from_micros(us).min(MAX_SPIN),
                Err(_) => {
                    eprintln!("{SPIN_KEY} = {v:?} is not a number of microseconds; not spinning");
                    Duration::ZERO
                }
            },
        }
    }

    /// The cap on the polling budget.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// The polling budget in effect now.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// How long the next wait may block: zero while work is pending or
    /// within the budget since the last work, `block` otherwise. A poll
    /// that has run out empty halves the budget.
    pub fn timeout(&mut self, pending: bool) -> Duration {
        if pending {
            self.polling = false;
            return Duration::ZERO;
        }
        if !self.budget.is_zero() && self.last_work.elapsed() < self.budget {
            self.polling = true;
            return Duration::ZERO;
        }
        if self.polling {
            self.polling = false;
            self.budget /= 2;
        }
        self.block
    }

    /// Between two polls: gives the CPU to whatever else is runnable (the
    /// application this loop is waiting for, on a small machine).
    pub fn pause(&self) {
        if self.polling {
            std::thread::yield_now();
        }
    }

    /// Records that the last wait found something to do; if it was a poll,
    /// the poll paid off and the budget grows.
    pub fn worked(&mut self) {
        if self.spin.is_zero() {
            return;
        }
        if self.polling {
            self.budget = (self.budget * 2).max(MIN_BUDGET).min(self.spin);
        } else if self.budget.is_zero() {
            // Woken from a sleep: try polling again, briefly.
            self.budget = MIN_BUDGET.min(self.spin);
        }
        self.polling = false;
        self.last_work = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_spin_an_idle_loop_blocks_at_once() {
        let mut i = Idle::new(Duration::ZERO, Duration::from_millis(200));
        i.worked();
        assert_eq!(i.timeout(false), Duration::from_millis(200));
        assert_eq!(i.timeout(true), Duration::ZERO);
    }

    /// Waits on the fact (the budget since the last work elapsed).
    fn outlast(i: &Idle) {
        while i.last_work.elapsed() < i.budget() {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_poll_that_runs_out_empty_halves_the_budget_and_one_that_catches_work_doubles_it() {
        let mut i = Idle::new(Duration::from_micros(400), Duration::from_millis(200));
        i.worked();
        assert_eq!(i.budget(), Duration::from_micros(400));
        assert_eq!(i.timeout(false), Duration::ZERO, "polls after work");
        outlast(&i);
        assert_eq!(i.timeout(false), Duration::from_millis(200));
        assert_eq!(
            i.budget(),
            Duration::from_micros(200),
            "an empty poll halves it"
        );
        // Work after a sleep: the budget stays, the poll starts again.
        i.worked();
        assert_eq!(i.timeout(false), Duration::ZERO);
        // Work caught while polling doubles it, up to the cap.
        i.worked();
        assert_eq!(i.budget(), Duration::from_micros(400));
        assert_eq!(i.timeout(false), Duration::ZERO);
        i.worked();
        assert_eq!(i.budget(), Duration::from_micros(400), "capped at spin");
        assert_eq!(i.timeout(true), Duration::ZERO);
    }

    #[test]
    fn a_quiet_loop_stops_polling() {
        // Each wake-up's work is followed by a poll that catches nothing.
        let mut i = Idle::new(Duration::from_micros(64), Duration::from_millis(200));
        for _ in 0..4 {
            i.worked();
            assert_eq!(i.timeout(false), Duration::ZERO);
            outlast(&i);
            assert_eq!(i.timeout(false), Duration::from_millis(200));
        }
        assert_eq!(
            i.budget(),
            Duration::from_micros(4),
            "64 µs halved four times"
        );
    }

    #[test]
    fn store_values_are_checked_and_capped() {
        assert_eq!(Idle::spin_from_store(None), Duration::ZERO);
        assert_eq!(Idle::spin_from_store(Some("")), Duration::ZERO);
        assert_eq!(Idle::spin_from_store(Some("50")), Duration::from_micros(50));
        assert_eq!(Idle::spin_from_store(Some("-3")), Duration::ZERO);
        assert_eq!(Idle::spin_from_store(Some("many")), Duration::ZERO);
        assert_eq!(Idle::spin_from_store(Some("99999999999")), MAX_SPIN);
        assert_eq!(
            Idle::new(Duration::from_secs(5), Duration::ZERO).spin(),
            MAX_SPIN
        );
    }
}
