//! Each project's budget of tool-list work: a token bucket per project, charged with what a list costs
//! the detector to read and normalise (`driftline_detectors::tool_drift::list_work`: its text, and 16 bytes
//! per node its `$ref`s copy in). A list's own cost is bounded by the list limits, not how many arrive: 30
//! legal lists near the `$ref` budget, sent in 20 s, held one detector — and every other project's calls
//! behind them on the embedded bus's one log — for 27–49 s. Beyond its budget a project's PUT is answered
//! 429 with `Retry-After`, so the detector work any one project can queue is at most the burst plus its
//! rate. Per ingest process (each replica keeps its own buckets).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use driftline_schemas::ProjectName;

pub use driftline_schemas::ListWorkLimits;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets per project. Projects come from API keys (or the one keyless `default`), so they are few.
#[derive(Debug, Default)]
pub struct ListWorkBudget {
    limits: ListWorkLimits,
    buckets: Mutex<HashMap<ProjectName, Bucket>>,
}

/// A list beyond its project's budget: when enough of it is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    pub retry_after: Duration,
}

impl ListWorkBudget {
    pub fn new(limits: ListWorkLimits) -> Self {
        ListWorkBudget { limits, buckets: Mutex::default() }
    }

    pub fn limits(&self) -> ListWorkLimits {
        self.limits
    }

    /// Takes `cost` from `project`'s bucket at `now`, or says when it could. A cost beyond the burst is
    /// charged as the whole burst (the list limits bound it; a full bucket always lets one list through).
    pub fn take(&self, project: &ProjectName, cost: u64, now: Instant) -> Result<(), OverBudget> {
        let ListWorkLimits { per_second, burst } = self.limits;
        let cost = cost.min(burst) as f64;
        let Ok(mut buckets) = self.buckets.lock() else { return Ok(()) };
        let bucket = buckets.entry(project.clone()).or_insert(Bucket { tokens: burst as f64, at: now });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second as f64).min(burst as f64);
        bucket.at = now;
        if bucket.tokens >= cost {
            bucket.tokens -= cost;
            return Ok(());
        }
        let missing = cost - bucket.tokens;
        Err(OverBudget { retry_after: Duration::from_secs_f64(missing / per_second.max(1) as f64) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limits: ListWorkLimits, takes: &[(u64, u64)], expected: &[Result<(), u64>]) {
        let budget = ListWorkBudget::new(limits);
        let project: ProjectName = "p".parse().expect("a project");
        let start = Instant::now();
        let got: Vec<Result<(), u64>> = takes
            .iter()
            .map(|&(at_ms, cost)| {
                budget
                    .take(&project, cost, start + Duration::from_millis(at_ms))
                    .map_err(|over| over.retry_after.as_millis() as u64)
            })
            .collect();
        assert_eq!(got, expected, "{limits:?} {takes:?}");
    }

    #[test]
    fn a_project_spends_its_burst_then_its_rate() {
        let limits = ListWorkLimits { per_second: 1000, burst: 3000 };
        // The burst at once, then nothing until the rate brings enough back (1 s for 1000).
        check(limits, &[(0, 1000), (0, 1000), (0, 1000), (0, 1000)], &[Ok(()), Ok(()), Ok(()), Err(1000)]);
        check(limits, &[(0, 3000), (500, 1000), (1000, 1000)], &[Ok(()), Err(500), Ok(())]);
        // A refused list takes nothing.
        check(limits, &[(0, 2500), (0, 1000), (0, 500)], &[Ok(()), Err(500), Ok(())]);
        // One list beyond the burst passes with a full bucket, as the whole burst.
        check(limits, &[(0, 10_000), (0, 1)], &[Ok(()), Err(1)]);
        // The bucket holds no more than the burst, however long it waited.
        check(limits, &[(0, 3000), (60_000, 3000), (60_000, 1000)], &[Ok(()), Ok(()), Err(1000)]);
    }

    #[test]
    fn each_project_has_a_bucket_of_its_own() {
        let budget = ListWorkBudget::new(ListWorkLimits { per_second: 1, burst: 10 });
        let now = Instant::now();
        let (p, q): (ProjectName, ProjectName) = ("p".parse().expect("p"), "q".parse().expect("q"));
        assert_eq!(budget.take(&p, 10, now), Ok(()));
        assert!(budget.take(&p, 1, now).is_err());
        assert_eq!(budget.take(&q, 10, now), Ok(()));
    }
}
