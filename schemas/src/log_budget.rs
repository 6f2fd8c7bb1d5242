//! A cap on log lines per second for events that can come in floods: dead letters in the detector, refused
//! requests and connections at the HTTP edge. Each is counted by a metric; its log line is a sample. A
//! client over its project's limits sent 80,000 unusable calls in a second and the detector wrote a
//! 460-byte line for each (37 MB of logs). Not a wire type: the one log helper every crate shares, kept in
//! the crate they all depend on.

use std::time::{Duration, Instant};

/// Lines per second at most.
pub const LINES_PER_SECOND: u32 = 10;

#[derive(Debug, Default)]
pub struct LogBudget {
    window: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogBudget {
    /// Whether the event at `now` gets a line: `Some(n)` with the `n` events left without one since the
    /// last line, `None` when this second's lines are spent (the event is counted for the next line).
    pub fn take(&mut self, now: Instant) -> Option<u64> {
        if self.window.is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1)) {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged < LINES_PER_SECOND {
            self.logged += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_as_a_sample_and_a_count() {
        let start = Instant::now();
        let mut budget = LogBudget::default();
        let first: Vec<Option<u64>> = (0..25).map(|_| budget.take(start)).collect();
        assert_eq!(first.iter().filter(|line| line.is_some()).count(), LINES_PER_SECOND as usize);
        assert!(first[..LINES_PER_SECOND as usize].iter().all(|line| *line == Some(0)));
        // Still within the second: no line.
        assert_eq!(budget.take(start + Duration::from_millis(999)), None);
        // The next second's first line carries what went without one.
        assert_eq!(budget.take(start + Duration::from_secs(1)), Some(16));
        assert_eq!(budget.take(start + Duration::from_secs(1)), Some(0));
    }
}
