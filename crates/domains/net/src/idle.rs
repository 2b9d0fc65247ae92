//! How a domain's poll loop waits between batches: block on its event
//! channels at once (the default), or first keep polling them without
//! blocking for a bounded time after the last work, so that a notification
//! arriving soon costs no wake-up.
//!
//! The bounded spin is off by default because on this machine kind (2 vCPUs shared by every domain)
//! it was measured to cost more than it saves (docs/RESULTS.md, "Where the
//! remaining cycles go"). Set it per domain with `spin_us` in the topology,
//! or for every domain with `splitnet up --spin-us`.

use hypercall::HvClient;
use std::time::{Duration, Instant};

pub use abi::xenbus::{spin_path, SPIN_KEY};

/// The longest spin a store value may ask for: the value comes from the
/// toolstack, but a domain still refuses to burn a CPU for seconds.
pub const MAX_SPIN: Duration = Duration::from_millis(10);

/// The wait of an idle loop: spin for `spin` after the last work, then block
/// for at most `block`.
#[derive(Debug, Clone)]
pub struct Idle {
    spin: Duration,
    block: Duration,
    last_work: Instant,
}

impl Idle {
    /// A policy that spins for `spin` (capped at [`MAX_SPIN`]) and then
    /// blocks for up to `block` (so periodic work still runs).
    pub fn new(spin: Duration, block: Duration) -> Idle {
        Idle {
            spin: spin.min(MAX_SPIN),
            block,
            last_work: Instant::now(),
        }
    }

    /// The policy the toolstack set for this domain (its store key
    /// [`SPIN_KEY`]), blocking for up to `block`; `who` names the loop in
    /// the log line that says it spins.
    pub fn for_domain(hv: &mut HvClient, who: &str, block: Duration) -> Idle {
        let key = spin_path(hv.domid());
        let spin = Idle::spin_from_store(hv.store_read_str(&key).ok().as_deref());
        if !spin.is_zero() {
            eprintln!("{who}: spinning {} µs before sleeping", spin.as_micros());
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

    /// The spin budget in effect.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// How long the next wait may block: zero while work is pending or the
    /// last work was under `spin` ago, `block` otherwise.
    pub fn timeout(&self, pending: bool) -> Duration {
        if pending || (!self.spin.is_zero() && self.last_work.elapsed() < self.spin) {
            Duration::ZERO
        } else {
            self.block
        }
    }

    /// Records that the last wait found something to do.
    pub fn worked(&mut self) {
        if !self.spin.is_zero() {
            self.last_work = Instant::now();
        }
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

    #[test]
    fn with_spin_it_polls_until_the_budget_since_the_last_work_is_spent() {
        let mut i = Idle::new(Duration::from_millis(5), Duration::from_millis(200));
        i.worked();
        assert_eq!(i.timeout(false), Duration::ZERO);
        // Wait on the fact (the budget elapsed), not a fixed sleep.
        while i.last_work.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        assert_eq!(i.timeout(false), Duration::from_millis(200));
        assert_eq!(i.timeout(true), Duration::ZERO);
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
