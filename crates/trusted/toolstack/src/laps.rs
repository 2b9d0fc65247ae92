//! How long each step of a multi-step operation took, for a log line that
//! says where the time went (a driver domain's restart, say).

use std::fmt;
use std::time::Instant;

/// The steps taken so far, each with the moment it ended.
#[derive(Debug)]
pub struct Laps {
    start: Instant,
    marks: Vec<(&'static str, Instant)>,
}

impl Laps {
    /// Laps timed from `start`.
    pub fn from(start: Instant) -> Laps {
        Laps {
            start,
            marks: Vec::new(),
        }
    }

    /// Step `what` ended now.
    pub fn mark(&mut self, what: &'static str) {
        self.marks.push((what, Instant::now()));
    }

    /// The time from the start to the last step's end.
    pub fn total(&self) -> std::time::Duration {
        self.marks
            .last()
            .map_or(Default::default(), |(_, at)| at.duration_since(self.start))
    }
}

impl fmt::Display for Laps {
    /// "destroy 2 ms, create 5 ms": each step's own time, in order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.start;
        for (i, (what, at)) in self.marks.iter().enumerate() {
            let ms = at.duration_since(last).as_secs_f64() * 1e3;
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{what} {ms:.0} ms")?;
            last = *at;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_step_is_timed_from_the_one_before() {
        let t0 = Instant::now();
        let mut laps = Laps::from(t0);
        laps.marks.push(("destroy", t0 + Duration::from_millis(3)));
        laps.marks.push(("launch", t0 + Duration::from_millis(10)));
        assert_eq!(laps.to_string(), "destroy 3 ms, launch 7 ms");
        assert_eq!(Laps::from(t0).to_string(), "");
    }
}
