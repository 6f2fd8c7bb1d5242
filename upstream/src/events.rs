//! What happens in the watcher, one type each: emitting one writes its log line and counts its metric in
//! one place. Label values come from enums.

use crate::{metrics, Package, Source, UpstreamError};

pub(crate) trait Emit {
    fn emit(self);
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum CheckOutcome {
    /// 304: the document did not change.
    NotModified,
    /// The newest release was handled before.
    Unchanged,
    NewRelease,
    /// The registry lists no release to follow.
    NoRelease,
    Failed,
}

impl CheckOutcome {
    fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::NotModified => "not_modified",
            CheckOutcome::Unchanged => "unchanged",
            CheckOutcome::NewRelease => "new_release",
            CheckOutcome::NoRelease => "no_release",
            CheckOutcome::Failed => "failed",
        }
    }
}

pub(crate) struct Checked<'a> {
    pub package: &'a Source,
    pub server: &'a dyn std::fmt::Display,
    pub outcome: CheckOutcome,
    pub detail: &'a str,
}

impl Emit for Checked<'_> {
    fn emit(self) {
        let Checked { package, server, outcome, detail } = self;
        let registry = package.registry();
        match outcome {
            CheckOutcome::Failed => {
                tracing::warn!(package = %package, server = %server, error = detail, "upstream check failed")
            }
            CheckOutcome::NewRelease => {
                tracing::info!(package = %package, server = %server, version = detail, "upstream release seen");
                metrics::VERSIONS_SEEN.with_label_values(&[registry]).inc();
            }
            _ => {
                tracing::debug!(package = %package, server = %server, outcome = outcome.as_str(), "upstream checked")
            }
        }
        metrics::CHECKS.with_label_values(&[registry, outcome.as_str()]).inc();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        metrics::LAST_CHECK.set(now.as_secs_f64());
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum CaptureOutcome {
    Captured,
    /// Failed; tried again at a later poll.
    WillRetry,
    /// Failed for good: reported as not captured.
    Failed,
}

impl CaptureOutcome {
    fn as_str(self) -> &'static str {
        match self {
            CaptureOutcome::Captured => "captured",
            CaptureOutcome::WillRetry => "will_retry",
            CaptureOutcome::Failed => "failed",
        }
    }
}

pub(crate) struct CaptureFinished<'a> {
    pub package: &'a Package,
    pub version: &'a str,
    pub outcome: CaptureOutcome,
    pub seconds: f64,
    pub error: Option<&'a UpstreamError>,
}

impl Emit for CaptureFinished<'_> {
    fn emit(self) {
        let CaptureFinished { package, version, outcome, seconds, error } = self;
        match error {
            None => {
                tracing::info!(package = %package, version, seconds, "upstream release captured in the sandbox")
            }
            Some(error) => tracing::warn!(
                package = %package,
                version,
                seconds,
                outcome = outcome.as_str(),
                error = %error,
                "upstream release not captured"
            ),
        }
        metrics::CAPTURES.with_label_values(&[outcome.as_str()]).inc();
        metrics::CAPTURE_SECONDS.observe(seconds);
    }
}

/// No sandbox: the watcher follows releases but runs none of them.
pub(crate) struct WatcherUnavailable<'a> {
    pub error: &'a UpstreamError,
}

impl Emit for WatcherUnavailable<'_> {
    fn emit(self) {
        tracing::error!(error = %self.error, "upstream watcher runs no release: releases are reported as not captured");
        metrics::SANDBOX_AVAILABLE.set(0.0);
    }
}

/// The sandbox works.
pub(crate) struct SandboxReady;

impl Emit for SandboxReady {
    fn emit(self) {
        tracing::info!("upstream watcher sandbox ready (bubblewrap)");
        metrics::SANDBOX_AVAILABLE.set(1.0);
    }
}
