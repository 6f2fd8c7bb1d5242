//! Removes stored rows past their retention, now and then, beside the detector (DESIGN.md §11's TTLs,
//! and each server's snapshots beyond its newest: `driftline_store::retention`). ClickHouse's tables
//! expire rows by age themselves; there the store only thins out the snapshots.

use std::sync::Arc;
use std::time::Duration;

use crate::events::{Emit, ExpiryFailed, StoredRowsExpired};
use driftline_schemas::Timestamp;
use driftline_store::DetectorStore;

/// How often expired rows are looked for: retention is counted in hours and days.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(3600);

/// Expires rows as of `clock()` shortly after the start and then every `every`, until `stop` turns true.
/// Each run removes a bounded number of rows per transaction, so the detector's batches interleave with
/// it; a failure is logged and counted, and the next run tries again.
pub fn spawn(
    store: Arc<dyn DetectorStore>,
    clock: fn() -> Timestamp,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // The first run waits a little: a starting process resumes its detector first.
        let mut next = tokio::time::Instant::now() + every.min(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            next = tokio::time::Instant::now() + every;
            let started = std::time::Instant::now();
            // Stopping drops the run between its transactions: what it removed is committed.
            let expired = tokio::select! {
                expired = store.expire(clock()) => expired,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            match expired {
                Ok(0) => tracing::debug!("no stored rows past their retention"),
                Ok(rows) => {
                    StoredRowsExpired { rows, elapsed_ms: started.elapsed().as_millis() as u64 }.emit()
                }
                Err(err) => ExpiryFailed(&err).emit(),
            }
        }
    })
}
