//! The batch being stored while the next one is read: waiting for its write, moving positions on, the lag
//! gauges, and releasing stored records from a bus this worker alone reads.

use std::collections::HashMap;
use std::time::Duration;

use driftline_bus::{Consumer, Positions};
use driftline_store::StoreError;

use crate::events::{
    BatchStored, BusRecordsReleased, BusReleaseFailed, Emit, LagMeasured, OldestUnprocessed,
};
use crate::{Worker, WorkerError, LAG_REFRESH};

/// A batch handed to the store whose write has not been seen to finish.
pub(crate) struct InFlight {
    /// The store's write, and how long it took.
    pub(crate) write: tokio::task::JoinHandle<(Result<(), StoreError>, Duration)>,
    pub(crate) positions: Positions,
    /// Its calls' identities: a retry of one of them in the next batch is a repeat before the store can
    /// tell.
    pub(crate) identities: HashMap<String, driftline_schemas::InputPosition>,
    pub(crate) records: usize,
    pub(crate) rollup_rows: usize,
    /// Bytes of tool-list text the batch parsed.
    pub(crate) list_bytes: usize,
}

/// After a batch that parsed this much tool-list text, the heap's free memory goes back to the system.
pub(crate) const RELEASE_AFTER_LIST_BYTES: usize = 1 << 20;

/// How often stored batches are made durable and their records released to the bus (the embedded log
/// holds about this much more than its backlog).
pub(crate) const RELEASE_EVERY: Duration = Duration::from_secs(2);

/// Returns the heap's free memory to the system. A large tool list is parsed, diffed and stored as values
/// between the small allocations the state keeps, and glibc's malloc keeps what that freed: 20 servers whose
/// 2.9 MB lists drifted left 1.6 GB resident with 0.35 GB in use (0.34 GB once trimmed).
pub(crate) fn release_freed_memory(list_bytes: usize) {
    let started = std::time::Instant::now();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heap to the system; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
    tracing::debug!(
        list_bytes,
        took_ms = started.elapsed().as_millis() as u64,
        "freed memory returned after large tool lists"
    );
}

impl<C: Consumer> Worker<C> {
    /// Now and then, where the bus can drop what this worker alone reads (the embedded log), makes the
    /// stored batches durable and releases their records, in a task beside the polls, one at a time (the
    /// detector waiting for them stored ≈ 25 % fewer spans/s on a backlog, beside them ≈ 19 % fewer).
    /// Releasing only once caught up saved some of that but dropped a whole backlog at once, which held
    /// appends up: span → queryable p99 1 s instead of 30 ms. A failure only postpones a release: the
    /// batches are stored.
    pub(crate) async fn release_stored(&mut self) {
        let Some(releaser) = &self.releaser else { return };
        if let Some(releasing) = self.releasing.take_if(|task| task.is_finished()) {
            if !releasing.await.unwrap_or(false) {
                self.released = Positions::new();
            }
        }
        if self.releasing.is_some()
            || self.released_at.elapsed() < RELEASE_EVERY
            || self.released == self.positions
        {
            return;
        }
        self.released_at = std::time::Instant::now();
        self.released = self.positions.clone();
        let (store, releaser, positions) = (self.store.clone(), releaser.clone(), self.positions.clone());
        self.releasing = Some(tokio::spawn(async move {
            let released = async {
                store.sync().await?;
                Ok::<_, WorkerError>(releaser.release(&positions).await?)
            };
            match released.await {
                Ok(records) => {
                    BusRecordsReleased { records, positions: &positions }.emit();
                    true
                }
                Err(err) => {
                    BusReleaseFailed(&err).emit();
                    false
                }
            }
        }));
    }

    /// Waits until the batch [`Worker::step`] left in flight is stored.
    pub async fn flush(&mut self) -> Result<(), WorkerError> {
        self.finish_in_flight().await
    }

    /// Waits until the batch in flight is stored, then moves the positions on and commits them to the
    /// group. A batch the store refused leaves memory ahead of the store: everything is read again from
    /// what the store holds.
    pub(crate) async fn finish_in_flight(&mut self) -> Result<(), WorkerError> {
        let Some(in_flight) = self.in_flight.take() else { return Ok(()) };
        let InFlight { write, positions, records, rollup_rows, list_bytes, .. } = in_flight;
        // A slow store must not freeze the lag gauge: it keeps following the bus while the batch is written.
        tokio::pin!(write);
        let mut refresh = tokio::time::interval(LAG_REFRESH);
        refresh.tick().await;
        let applied = loop {
            tokio::select! {
                applied = &mut write => break applied,
                _ = refresh.tick() => {
                    let _ = self.report_lag().await;
                }
            }
        };
        let applied = applied
            .map_err(|err| WorkerError::Store(StoreError::Unavailable(format!("store write failed: {err}"))))
            .and_then(|(stored, took)| stored.map(|()| took).map_err(WorkerError::from));
        let took = match applied {
            Ok(took) => took,
            Err(err) => {
                self.stale = true;
                let _ = self.reload().await;
                return Err(err);
            }
        };
        if list_bytes >= RELEASE_AFTER_LIST_BYTES {
            release_freed_memory(list_bytes);
        }
        self.rollup_marks.extend(positions.iter().map(|(s, o)| (*s, *o)));
        self.positions.extend(positions);
        self.consumer.commit(&self.positions).await?;
        self.release_stored().await;
        let lag = self.report_lag().await?;
        if lag == 0 {
            OldestUnprocessed(0.0).emit();
        }
        self.report_recent();
        let (server_keys, tool_keys) = (self.servers.len(), self.tools.len());
        BatchStored { records, rollup_rows, seconds: took.as_secs_f64(), lag, server_keys, tool_keys }.emit();
        Ok(())
    }

    /// Sets the lag gauges (total and per owned partition; partitions moved away lose their series).
    pub(crate) async fn report_lag(&mut self) -> Result<u64, WorkerError> {
        let lags = self.consumer.lag(&self.positions).await?;
        LagMeasured { lags: &lags, gone: &self.lag_labels }.emit();
        let total: u64 = lags.values().sum();
        self.lag_labels = lags.into_keys().collect();
        Ok(total)
    }
}
