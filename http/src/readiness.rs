//! The process's readiness beyond its dependencies: a stage whose detector worker stopped is not ready
//! (`/readyz` 503 with the reason) while it drains and exits, so the orchestrator restarts it.

use std::sync::{LazyLock, Mutex};

static FAILURE: Mutex<Option<String>> = Mutex::new(None);

static FAILURES: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "driftline_process_failures_total",
        "Fatal failures (a detector worker that stopped): the process reports not ready and exits"
    )
    .expect("metric names are static and valid")
});

/// Marks the process as failed for good; the first reason stays.
pub fn fail(reason: String) {
    FAILURES.inc();
    tracing::error!(%reason, "fatal: not ready, shutting down so that the process is restarted");
    if let Ok(mut failure) = FAILURE.lock() {
        failure.get_or_insert(reason);
    }
}

/// Why the process is failed, if it is.
pub fn failure() -> Option<String> {
    FAILURE.lock().ok().and_then(|failure| failure.clone())
}
