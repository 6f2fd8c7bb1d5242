//! The watcher stage: each watched package's registry document polled on its registry's interval (with the
//! last ETag; failures back off), and each new release installed, captured in the sandbox and published as a
//! ToolListSnapshot of source `upstream` on the server's tool-list partition. The tool-list detector diffs it
//! against the server's baseline and reports it as upcoming (once per release and list: a release published
//! twice, by a watcher killed before it noted it, is reported once).
//!
//! What the watcher has handled is kept in a small state file in the cache directory, written (atomically)
//! after each publish. Captures run one at a time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use driftline_bus::{Message, Producer, Topic};
use driftline_schemas::{
    ProjectName, ServerKey, ServerName, SnapshotSource, Timestamp, ToolListSnapshot, UpstreamRelease,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::events::{
    CaptureFinished, CaptureOutcome, CheckOutcome, Checked, Emit, SandboxReady, WatcherUnavailable,
};
use crate::mcp_registry::{self, RegistryFetched};
use crate::registry::{self, Fetched, Follow, Release};
use crate::{Launch, Package, Source, Upstream, UpstreamError, UpstreamSettings};

/// Failed captures of one release retried at later polls before it is reported as failed.
const CAPTURE_ATTEMPTS: u32 = 3;
/// Longest wait after failed checks of a registry.
const MAX_BACKOFF: Duration = Duration::from_secs(6 * 3600);

/// One package to follow for one server.
#[derive(Debug, Clone)]
pub struct Watched {
    pub project: ProjectName,
    pub server: ServerName,
    pub source: Source,
    pub follow: Follow,
    pub launch: Launch,
}

impl Watched {
    fn key(&self) -> String {
        format!("{}/{}/{}", self.project, self.server, self.source)
    }
}

#[derive(Debug, Clone)]
pub struct WatchSettings {
    pub upstream: UpstreamSettings,
    /// How often each registry is asked, per package (by `Source::registry`: npm, pypi, mcp-registry).
    pub intervals: BTreeMap<&'static str, Duration>,
}

/// What the watcher remembers between runs, per watched package.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WatchState {
    #[serde(default)]
    packages: BTreeMap<String, PackageState>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PackageState {
    #[serde(default)]
    etag: Option<String>,
    /// The newest release the registry listed, as last seen.
    #[serde(default)]
    newest: Option<String>,
    /// Releases published (captured, or reported as failed).
    #[serde(default)]
    handled: Vec<String>,
    /// Failed captures of the newest release so far.
    #[serde(default)]
    failures: u32,
}

/// Runs until `shutdown` turns true.
pub async fn run(
    settings: WatchSettings,
    watched: Vec<Watched>,
    producer: Arc<dyn Producer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let state_file = settings.upstream.cache_dir.join("watch-state.json");
    let mut state = load(&state_file);
    // Without a sandbox nothing is installed, but every release is still seen and reported as not captured.
    let upstream = match Upstream::new(settings.upstream.clone()).await {
        Ok(upstream) => {
            SandboxReady.emit();
            Ok(upstream)
        }
        Err(err) => {
            WatcherUnavailable { error: &err }.emit();
            Err(err)
        }
    };
    let http = match &upstream {
        Ok(upstream) => upstream.http.clone(),
        Err(_) => reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap_or_default(),
    };
    let mut next: Vec<Instant> = vec![Instant::now(); watched.len()];
    let mut failures: Vec<u32> = vec![0; watched.len()];
    loop {
        if *shutdown.borrow() {
            return;
        }
        let now = Instant::now();
        for (index, entry) in watched.iter().enumerate() {
            if next[index] > now || *shutdown.borrow() {
                continue;
            }
            let interval =
                settings.intervals.get(entry.source.registry()).copied().unwrap_or(Duration::from_secs(900));
            let ok =
                check(entry, &settings, &upstream, &http, &mut state, producer.as_ref(), &state_file).await;
            failures[index] = if ok { 0 } else { failures[index].saturating_add(1) };
            next[index] = Instant::now() + backoff(interval, failures[index]);
        }
        let wake = next.iter().min().copied().unwrap_or_else(|| Instant::now() + Duration::from_secs(60));
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The wait before the next check after `failures` failed ones in a row: the interval, doubled per
/// failure, at most `MAX_BACKOFF` (never shorter than the interval).
fn backoff(interval: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.min(12);
    interval.saturating_mul(factor).min(MAX_BACKOFF.max(interval))
}

/// One check of one package; false when the registry could not be read.
async fn check(
    entry: &Watched,
    settings: &WatchSettings,
    upstream: &Result<Upstream, UpstreamError>,
    http: &reqwest::Client,
    state: &mut WatchState,
    producer: &dyn Producer,
    state_file: &PathBuf,
) -> bool {
    let key = entry.key();
    let package_state = state.packages.entry(key.clone()).or_default();
    // A release still to capture is asked for whole (a 304 would not name it).
    let pending = package_state.newest.as_ref().is_some_and(|newest| !package_state.handled.contains(newest));
    let etag = if pending { None } else { package_state.etag.clone() };
    let fetched = fetch(http, settings, entry, etag.as_deref()).await;
    let (newest, package, default_args) = match fetched {
        Err(err) => {
            Checked {
                package: &entry.source,
                server: &entry.server,
                outcome: CheckOutcome::Failed,
                detail: &err.to_string(),
            }
            .emit();
            return false;
        }
        Ok(Followed::NotModified) => {
            Checked {
                package: &entry.source,
                server: &entry.server,
                outcome: CheckOutcome::NotModified,
                detail: "",
            }
            .emit();
            return true;
        }
        Ok(Followed::Release { newest, package, default_args, etag }) => {
            package_state.etag = etag;
            (newest, package, default_args)
        }
    };
    let Some(newest) = newest else {
        Checked {
            package: &entry.source,
            server: &entry.server,
            outcome: CheckOutcome::NoRelease,
            detail: "",
        }
        .emit();
        return true;
    };
    let version = newest.version.as_str().to_owned();
    if package_state.newest.as_deref() != Some(&version) {
        package_state.newest = Some(version.clone());
        package_state.failures = 0;
    }
    if package_state.handled.contains(&version) {
        Checked {
            package: &entry.source,
            server: &entry.server,
            outcome: CheckOutcome::Unchanged,
            detail: &version,
        }
        .emit();
        save(state_file, state);
        return true;
    }
    Checked {
        package: &entry.source,
        server: &entry.server,
        outcome: CheckOutcome::NewRelease,
        detail: &version,
    }
    .emit();
    let started = Instant::now();
    let captured = match upstream {
        Ok(upstream) => {
            let mut launch = entry.launch.clone();
            launch.default_args = default_args;
            upstream.capture(&package, &newest.version, &launch).await
        }
        Err(err) => Err(err.clone()),
    };
    let seconds = started.elapsed().as_secs_f64();
    let package_state = state.packages.entry(key).or_default();
    let snapshot = match captured {
        Ok(captured) => {
            CaptureFinished {
                package: &package,
                version: &version,
                outcome: CaptureOutcome::Captured,
                seconds,
                error: None,
            }
            .emit();
            snapshot(entry, &package, &newest, captured.tools, Some(captured.surfaces), None)
        }
        Err(err) => {
            package_state.failures += 1;
            // Without a sandbox no retry helps; anything else gets a few polls' chances.
            let final_failure =
                matches!(err, UpstreamError::Sandbox(_)) || package_state.failures >= CAPTURE_ATTEMPTS;
            let outcome = if final_failure { CaptureOutcome::Failed } else { CaptureOutcome::WillRetry };
            CaptureFinished { package: &package, version: &version, outcome, seconds, error: Some(&err) }
                .emit();
            if !final_failure {
                save(state_file, state);
                return true;
            }
            snapshot(entry, &package, &newest, Vec::new(), None, Some(err.to_string()))
        }
    };
    let payload = match serde_json::to_vec(&snapshot) {
        Ok(payload) => payload,
        Err(_) => return true,
    };
    let key = ServerKey { project: entry.project.clone(), server: entry.server.clone() }.to_string();
    if let Err(err) = producer.publish(vec![Message { topic: Topic::ToolLists, key, payload }]).await {
        // Not noted as handled: the next check publishes it again.
        Checked {
            package: &entry.source,
            server: &entry.server,
            outcome: CheckOutcome::Failed,
            detail: &format!("cannot publish: {err}"),
        }
        .emit();
        return false;
    }
    let package_state = state.packages.entry(entry.key()).or_default();
    package_state.handled.push(version);
    // The list stays short: a long-followed package keeps its newest releases only.
    let excess = package_state.handled.len().saturating_sub(64);
    package_state.handled.drain(..excess);
    save(state_file, state);
    true
}

fn snapshot(
    entry: &Watched,
    package: &Package,
    release: &Release,
    tools: Vec<serde_json::Value>,
    surfaces: Option<driftline_schemas::ServerSurfaces>,
    error: Option<String>,
) -> ToolListSnapshot {
    ToolListSnapshot {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        project: entry.project.clone(),
        server: entry.server.clone(),
        captured_at: now(),
        source: SnapshotSource::Upstream,
        latency_ms: None,
        tools,
        surfaces,
        release: Some(UpstreamRelease {
            package: package.to_string(),
            version: release.version.as_str().to_owned(),
            released_at: release.released_at.map(Timestamp::from),
            pin: package.pinned(&release.version),
            error: error.map(|text| text.chars().take(4000).collect()),
        }),
    }
}

/// What a check of one source found: the newest release of the package it follows.
enum Followed {
    NotModified,
    Release { newest: Option<Release>, package: Package, default_args: Vec<String>, etag: Option<String> },
}

/// Asks the source's registry: a package's own, or the MCP Registry, whose newest server version names
/// the package (and its version and arguments).
async fn fetch(
    http: &reqwest::Client,
    settings: &WatchSettings,
    entry: &Watched,
    etag: Option<&str>,
) -> Result<Followed, UpstreamError> {
    let registries = &settings.upstream.registries;
    match &entry.source {
        Source::Package(package) => {
            Ok(match registry::fetch(http, registries, package, &entry.follow, etag).await? {
                Fetched::NotModified => Followed::NotModified,
                Fetched::Releases { newest, etag, .. } => {
                    Followed::Release { newest, package: package.clone(), default_args: Vec::new(), etag }
                }
            })
        }
        Source::McpRegistry(name) => {
            match mcp_registry::fetch(http, &registries.mcp, name, &entry.follow, None, etag).await? {
                RegistryFetched::NotModified => Ok(Followed::NotModified),
                RegistryFetched::Release { release: Some(found), etag } => Ok(Followed::Release {
                    newest: Some(found.release),
                    package: found.package,
                    default_args: found.arguments,
                    etag,
                }),
                RegistryFetched::Release { release: None, .. } => Err(UpstreamError::NoRelease(format!(
                    "{} (no version with an npm or PyPI package started over stdio)",
                    entry.source
                ))),
            }
        }
    }
}

fn now() -> Timestamp {
    Timestamp::from(chrono::Utc::now())
}

fn load(path: &PathBuf) -> WatchState {
    std::fs::read(path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
}

/// Written to a temporary file and renamed over the old one: a kill leaves the old state or the new.
fn save(path: &PathBuf, state: &WatchState) {
    let Ok(bytes) = serde_json::to_vec_pretty(state) else { return };
    let temporary = path.with_extension("json.tmp");
    let written = std::fs::write(&temporary, bytes).and_then(|()| std::fs::rename(&temporary, path));
    if let Err(err) = written {
        tracing::warn!(path = %path.display(), error = %err, "cannot write the upstream watcher's state");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        let minute = Duration::from_secs(60);
        assert_eq!(backoff(minute, 0), minute);
        assert_eq!(backoff(minute, 1), minute * 2);
        assert_eq!(backoff(minute, 3), minute * 8);
        assert_eq!(backoff(minute, 40), MAX_BACKOFF);
        let day = Duration::from_secs(86_400);
        assert_eq!(backoff(day, 5), day, "never shorter than the interval");
    }
}
