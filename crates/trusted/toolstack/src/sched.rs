//! A domain's scheduling weight (Xen's credit scheduler: each domain has a
//! weight, and contending domains get CPU time in proportion to theirs).
//! Here a domain is a process, so its weight becomes the nice value at
//! which the kernel gives it about that proportion: each nice step is a
//! factor of 1.25 in CPU share.

use std::ops::RangeInclusive;

/// A domain's weight unless its topology says otherwise (Xen's default).
pub const DEFAULT_WEIGHT: u32 = 256;
/// The weights `weight` accepts (Xen's range).
pub const WEIGHTS: RangeInclusive<u32> = 1..=65535;

/// The nice value whose CPU share stands to the default's as `weight`
/// stands to [`DEFAULT_WEIGHT`], within the kernel's -20..=19.
pub fn nice_of(weight: u32) -> i32 {
    let steps = (f64::from(weight.max(1)) / f64::from(DEFAULT_WEIGHT)).ln() / 1.25f64.ln();
    (-steps.round() as i32).clamp(-20, 19)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twice_the_weight_is_three_nice_steps_up() {
        assert_eq!(nice_of(DEFAULT_WEIGHT), 0);
        assert_eq!(nice_of(512), -3);
        assert_eq!(nice_of(128), 3);
        assert_eq!(nice_of(*WEIGHTS.end()), -20);
        assert_eq!(nice_of(*WEIGHTS.start()), 19);
    }
}
