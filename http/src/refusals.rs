//! Refusal logs with a budget: a client can be refused as fast as it can send, and one line per refusal
//! would let it fill the disks that keep the logs (≈ 28 GB an hour from one connection). Each kind of
//! refusal logs at most one line per [`INTERVAL`], carrying how many were refused since the line before
//! (the metrics count every one).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::body::BodyRefused;

/// At most one line per kind this often.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Per kind: when its last line was written and how many refusals it has not reported yet.
static WINDOWS: LazyLock<Mutex<HashMap<&'static str, (Instant, u64)>>> = LazyLock::new(Default::default);

/// Calls `log(count)` if the kind's budget allows a line now, `count` being the refusals since its last
/// line (this one included); otherwise counts this one for the next line.
pub fn throttled(kind: &'static str, log: impl FnOnce(u64)) {
    throttled_at(kind, Instant::now(), log);
}

fn throttled_at(kind: &'static str, now: Instant, log: impl FnOnce(u64)) {
    let due = {
        let mut windows = WINDOWS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match windows.get_mut(kind) {
            Some((last, pending)) if now.duration_since(*last) < INTERVAL => {
                *pending += 1;
                None
            }
            Some((last, pending)) => {
                let count = *pending + 1;
                (*last, *pending) = (now, 0);
                Some(count)
            }
            None => {
                windows.insert(kind, (now, 0));
                Some(1)
            }
        }
    };
    if let Some(count) = due {
        log(count);
    }
}

pub(crate) fn log_body_refused(path: &str, refused: &BodyRefused) {
    throttled("body", |count| {
        tracing::warn!(path, reason = %refused, refused_since_last_line = count, "request body refused");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_per_kind_with_the_count_since_the_last() {
        let start = Instant::now();
        let mut lines = Vec::new();
        for i in 0..1_000u64 {
            // 1,000 refusals over 25 s: a line at 0 s, 10 s and 20 s.
            throttled_at("test-kind", start + Duration::from_millis(i * 25), |count| lines.push(count));
        }
        assert_eq!(lines, vec![1, 400, 400]);
        let mut other = Vec::new();
        throttled_at("test-other-kind", start + Duration::from_secs(1), |count| other.push(count));
        assert_eq!(other, vec![1], "kinds have budgets of their own");
    }
}
