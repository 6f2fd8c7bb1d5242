//! Refusal logs with a budget: a client can be refused as fast as it can send, and one line per refusal
//! would let it fill the disks that keep the logs (≈ 28 GB an hour from one connection). Each kind of
//! refusal has the [`LogBudget`] dead letters have (a few lines a second, the next line carrying how many
//! went without one); the metrics count every one.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use driftline_schemas::LogBudget;

/// One budget per kind of refusal, so a flood of one kind does not silence another.
static BUDGETS: LazyLock<Mutex<HashMap<&'static str, LogBudget>>> = LazyLock::new(Default::default);

/// Calls `log(unlogged)` if the kind's budget allows a line now, `unlogged` being the refusals of that kind
/// that went without a line since its last one; otherwise counts this one for the next line.
pub fn throttled(kind: &'static str, log: impl FnOnce(u64)) {
    let due = {
        let mut budgets = BUDGETS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        budgets.entry(kind).or_default().take(Instant::now())
    };
    if let Some(unlogged) = due {
        log(unlogged);
    }
}

#[cfg(test)]
mod tests {
    use driftline_schemas::log_budget::LINES_PER_SECOND;

    use super::*;

    #[test]
    fn a_flood_of_one_kind_is_sampled_and_leaves_other_kinds_their_lines() {
        let mut lines = 0;
        for _ in 0..1_000 {
            throttled("test-flood", |_| lines += 1);
        }
        // The test runs well within a second or two: at most two seconds' lines.
        assert!(lines <= 2 * LINES_PER_SECOND, "{lines} lines for 1,000 refusals");
        let mut other = 0;
        throttled("test-other-kind", |_| other += 1);
        assert_eq!(other, 1, "kinds have budgets of their own");
    }
}
