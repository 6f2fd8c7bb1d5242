//! The process's readiness beyond its dependencies: a stage whose detector worker stopped is not ready
//! (`/readyz` 503 with the reason) while it drains and exits, so the orchestrator restarts it.

use std::sync::Mutex;

use crate::events::{Emit, ProcessFailed};

static FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Marks the process as failed for good; the first reason stays.
pub fn fail(reason: String) {
    ProcessFailed { reason: &reason }.emit();
    if let Ok(mut failure) = FAILURE.lock() {
        failure.get_or_insert(reason);
    }
}

/// Why the process is failed, if it is.
pub fn failure() -> Option<String> {
    FAILURE.lock().ok().and_then(|failure| failure.clone())
}
