//! `rate=`: Xen netback's credit scheduler for a vif's transmit
//! (xl-network-configuration(5); the backend's `rate` node is
//! "<bytes>,<usec>", as libxl writes it).
//!
//! The vif holds a credit of bytes. A packet no larger than the credit goes
//! and is charged for its length. A larger one stays on the ring, not
//! dropped: if an interval has passed since the window began, the window
//! restarts now and one interval's worth of bytes is added first; if it is
//! still too big, the vif waits until the window's end, when another
//! interval's worth is added. The credit never exceeds the larger of one
//! interval's bytes and 128 KiB, so a packet bigger than one interval's
//! allowance (a 64 KiB GSO packet on a slow vif) waits while the credit
//! builds up over several intervals and then goes through at once; the
//! average stays at the rate.

use std::time::{Duration, Instant};

/// The most credit a vif can hold when one interval's bytes are fewer:
/// enough for the largest packet the ring carries (Xen netback's burst).
pub const MAX_BURST: u64 = 128 * 1024;
/// The longest interval accepted (an hour).
pub const MAX_USEC: u64 = 3_600_000_000;

/// A vif's transmit credit.
#[derive(Debug, Clone)]
pub struct Credit {
    bytes: u64,
    interval: Duration,
    remaining: u64,
    window_start: Instant,
    /// The vif waits for credit until then (Xen's credit timer).
    wait: Option<Instant>,
}

/// Parses a `rate` node: "<bytes>,<usec>", both positive, the interval at
/// most [`MAX_USEC`].
pub fn parse_store_rate(text: &str) -> Result<(u64, u64), String> {
    let (b, u) = text
        .trim()
        .split_once(',')
        .ok_or_else(|| format!("{text:?} is not <bytes>,<usec>"))?;
    let num = |s: &str, what: &str| {
        s.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{text:?}: {what} {s:?} is not a positive integer"))
    };
    let (bytes, usec) = (num(b, "bytes")?, num(u, "usec")?);
    if usec > MAX_USEC {
        return Err(format!("{text:?}: an interval over an hour"));
    }
    Ok((bytes, usec))
}

impl Credit {
    /// A full credit of `bytes`, replenished every `usec` µs from `now`.
    pub fn new(bytes: u64, usec: u64, now: Instant) -> Credit {
        Credit {
            bytes,
            interval: Duration::from_micros(usec),
            remaining: bytes,
            window_start: now,
            wait: None,
        }
    }

    fn replenish(&mut self) {
        let cap = self.bytes.max(MAX_BURST);
        self.remaining = self.remaining.saturating_add(self.bytes).min(cap);
    }

    /// Whether a packet of `size` bytes may go at `now`; if it may, it is
    /// charged. If not, [`Credit::wait_until`] says until when.
    pub fn admit(&mut self, size: u64, now: Instant) -> bool {
        if let Some(at) = self.wait {
            if now < at {
                return false;
            }
            // The timer's end: one interval's worth more.
            self.wait = None;
            self.replenish();
        }
        if size > self.remaining {
            let next = self.window_start + self.interval;
            if now >= next {
                self.window_start = now;
                self.replenish();
            }
            if size > self.remaining {
                self.window_start = next;
                self.wait = Some(next);
                return false;
            }
        }
        self.remaining -= size;
        true
    }

    /// When a vif refused credit may try again (None: it is not waiting).
    pub fn wait_until(&self) -> Option<Instant> {
        self.wait
    }

    /// Whether the vif waits for credit at `now`.
    pub fn waiting(&self, now: Instant) -> bool {
        self.wait.is_some_and(|at| now < at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_libxl_rate_nodes() {
        assert_eq!(parse_store_rate("1250000,50000"), Ok((1_250_000, 50_000)));
        for bad in [
            "",
            "10",
            "0,50000",
            "100,0",
            "a,b",
            "-1,5",
            "1,3600000001",
            "1,2,3",
        ] {
            assert!(parse_store_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn spends_the_credit_then_waits_for_the_next_window() {
        let t0 = Instant::now();
        let mut c = Credit::new(3000, 10_000, t0);
        assert!(c.admit(1500, t0));
        assert!(c.admit(1500, t0));
        assert!(!c.admit(1500, t0 + ms(1)));
        assert_eq!(c.wait_until(), Some(t0 + ms(10)));
        assert!(c.waiting(t0 + ms(9)));
        // Still waiting: refused without a new window.
        assert!(!c.admit(1, t0 + ms(9)));
        // At the window's end the credit is back.
        assert!(c.admit(1500, t0 + ms(10)));
        assert!(c.admit(1500, t0 + ms(10)));
        assert!(!c.admit(1500, t0 + ms(10)));
        assert_eq!(c.wait_until(), Some(t0 + ms(20)));
    }

    #[test]
    fn an_idle_vif_gets_one_intervals_worth_not_more() {
        let t0 = Instant::now();
        let mut c = Credit::new(1000, 1000, t0);
        assert!(c.admit(1000, t0));
        // A second later: one replenish, not a thousand.
        let t1 = t0 + Duration::from_secs(1);
        assert!(c.admit(1000, t1));
        assert!(!c.admit(1000, t1));
    }

    #[test]
    fn a_packet_over_one_intervals_bytes_waits_while_credit_builds_up() {
        let t0 = Instant::now();
        let mut c = Credit::new(10_000, 1000, t0);
        let big = 65_535;
        let mut t = t0;
        let mut tries = 0;
        while !c.admit(big, t) {
            t = c.wait_until().expect("waits for a replenish");
            tries += 1;
            assert!(tries < 10, "the credit never reached {big}");
        }
        // 10 000 at first, then 10 000 per millisecond: it goes after 6 ms.
        assert_eq!(t, t0 + ms(6));
        assert_eq!(c.remaining, 70_000 - big);
    }

    #[test]
    fn the_credit_is_capped() {
        let t0 = Instant::now();
        let mut c = Credit::new(100_000, 1000, t0);
        for i in 1..10 {
            c.replenish();
            assert!(c.remaining <= MAX_BURST, "after {i}");
        }
        let mut huge = Credit::new(1 << 20, 1000, t0);
        huge.replenish();
        assert_eq!(huge.remaining, 1 << 20);
        let mut wrap = Credit::new(u64::MAX, 1, t0);
        wrap.replenish();
        assert_eq!(wrap.remaining, u64::MAX);
    }

    #[test]
    fn the_long_run_average_is_the_rate() {
        // 1500-byte packets offered back to back for a simulated second at
        // 1 MB/s in 50 ms windows.
        let t0 = Instant::now();
        let mut c = Credit::new(50_000, 50_000, t0);
        let (mut t, mut sent) = (t0, 0u64);
        let end = t0 + Duration::from_secs(1);
        while t < end {
            if c.admit(1500, t) {
                sent += 1500;
            } else {
                t = c.wait_until().unwrap();
            }
        }
        assert!((950_000..=1_050_000).contains(&sent), "{sent}");
    }
}
