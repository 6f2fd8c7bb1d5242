//! Upcoming releases: a release of a server's package captured in a sandbox before anyone runs it, diffed
//! against the server's baseline with the rules of drift, reported once per release, list and baseline.
//! The server's baseline, newest snapshot, open events and status are not touched.

use std::collections::BTreeMap;
use std::sync::Arc;

use driftline_schemas::{derive_id, OutputKind, ServerSurfaces, ToolsText, UpcomingRelease, UpstreamRelease};
use serde::{Deserialize, Serialize};

use super::{
    drift_event, short_hash, Acceptance, HashedTools, IndexedList, RecordContext, ServerState, ToolIndex,
};

/// An upcoming release a server's state has reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedRelease {
    pub version: String,
    pub hash: String,
    /// The baseline it was diffed against: a release reported before the baseline moved is reported again.
    #[serde(default)]
    pub baseline_hash: Option<String>,
}

/// An upcoming release an operator accepted ahead: a list with its hash becomes the baseline on arrival.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedRelease {
    pub version: String,
    /// Short hash of the release's list.
    pub hash: String,
    pub accepted_by: String,
}

impl ExpectedRelease {
    /// Who the acceptance is recorded as by.
    pub fn acceptor(&self) -> String {
        format!("{} (ahead, release {})", self.accepted_by, self.version)
    }
}

/// How many releases' lists a server's state remembers, to tell which release the server runs.
const RELEASE_LISTS: usize = 32;

impl ServerState {
    /// An operator accepts a release ahead (the newest acceptance replaces an older one).
    pub fn expect_release(&mut self, expected: ExpectedRelease) {
        self.expected = Some(expected);
    }

    /// The acceptance ahead that a new list with `short` (its short hash) meets, taken.
    pub(super) fn take_expected(&mut self, short: &str) -> Option<ExpectedRelease> {
        match &self.expected {
            Some(expected) if expected.hash == short => self.expected.take(),
            _ => None,
        }
    }

    /// A release not yet running, captured by the upstream watcher: diffed against the baseline with the
    /// rules of drift, and reported once per release, list and baseline. The server's baseline, newest
    /// snapshot, open events and status are not touched. `None` when this release was reported already.
    pub fn observe_release(
        &mut self,
        tools: Arc<ToolsText>,
        surfaces: Option<&ServerSurfaces>,
        release: &UpstreamRelease,
        context: RecordContext<'_>,
        acceptance: Acceptance,
    ) -> Option<UpcomingRelease> {
        self.rehash_if_stale();
        let surfaces = self.surfaces_with_carried(surfaces);
        for list in [&mut self.baseline, &mut self.observed].into_iter().flatten() {
            list.index();
        }
        let known: Vec<IndexedList<'_>> =
            [&self.baseline, &self.observed].into_iter().flatten().filter_map(HashedTools::list).collect();
        let index = ToolIndex::reusing(&tools, &known);
        let mut current = HashedTools::indexed(tools, index).with_surfaces(surfaces);
        let baseline_hash = self.baseline.as_ref().map(|baseline| short_hash(&baseline.hash));
        let in_use = self.release_in_use();
        if release.error.is_none() {
            self.remember_release_list(short_hash(&current.hash), &release.version);
        }
        let reported = ReportedRelease {
            version: release.version.clone(),
            hash: match &release.error {
                Some(_) => "error".to_owned(),
                None => short_hash(&current.hash),
            },
            baseline_hash: baseline_hash.clone(),
        };
        if self.upcoming.get(&release.package) == Some(&reported) {
            return None;
        }
        self.upcoming.insert(release.package.clone(), reported);
        let id = derive_id(OutputKind::UpcomingRelease, &context.key(), context.position);
        let tool_count = current.tool_count() as u32;
        let mut upcoming = UpcomingRelease {
            id,
            project: context.project.to_owned(),
            server_name: context.server.to_owned(),
            package: release.package.clone(),
            version: release.version.clone(),
            pin: in_use
                .filter(|in_use| *in_use != release.version)
                .and_then(|in_use| {
                    release.pin.strip_suffix(&release.version).map(|name| format!("{name}{in_use}"))
                })
                .unwrap_or_default(),
            released_at: release.released_at,
            detected_at: context.at,
            baseline_hash,
            release_hash: short_hash(&current.hash),
            tool_count,
            changes: Vec::new(),
            omitted_changes: BTreeMap::new(),
            max_classification: None,
            max_severity: None,
            context_cost: None,
            release_tools: Arc::clone(&current.tools),
            error: release.error.clone(),
        };
        if release.error.is_some() {
            return Some(upcoming);
        }
        if let Some(baseline) = self.baseline.as_mut().filter(|baseline| baseline.hash != current.hash) {
            let event = drift_event(baseline, &mut current, context, acceptance);
            upcoming.changes = event.changes;
            upcoming.omitted_changes = event.omitted_changes;
            upcoming.max_classification = event.max_classification;
            upcoming.max_severity = event.max_severity;
            upcoming.context_cost = event.context_cost;
        }
        Some(upcoming)
    }

    /// The release whose captured list is the server's current list, as far as the releases seen tell.
    fn release_in_use(&self) -> Option<String> {
        let running = short_hash(&self.observed.as_ref().or(self.baseline.as_ref())?.hash);
        self.release_lists.iter().rev().find(|(hash, _)| *hash == running).map(|(_, version)| version.clone())
    }

    fn remember_release_list(&mut self, hash: String, version: &str) {
        self.release_lists.retain(|(known, _)| *known != hash);
        self.release_lists.push((hash, version.to_owned()));
        let excess = self.release_lists.len().saturating_sub(RELEASE_LISTS);
        self.release_lists.drain(..excess);
    }
}
