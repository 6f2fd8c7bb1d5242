//! The tool-list drift detector of DESIGN.md §5, one state per `project/server`.

mod canonical;
mod classify;
mod cost;
mod declared;
mod diff;
mod digest;
mod equivalences;
mod explain;
mod hashes;
mod index;
mod keywords;
mod limits;
mod node;
mod normal;
mod parallel;
pub(crate) mod refs;
pub mod security;
pub mod surfaces;
mod upcoming;

pub use driftline_schemas::ToolsText;
use driftline_schemas::{
    derive_id, Classification, ContextCost, EventStatus, InputPosition, OutputKind, SchemaChange,
    SchemaDriftEvent, SecurityFlag, ServerStatus, ServerSurfaces, Severity, Timestamp, ToolListSnapshot,
};
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use canonical::canonical_json;
pub use classify::classify;
pub use cost::{cost_change, server_cost, ContextGrowth};
pub use declared::{changed_declarations, declared_outputs, DeclaredOutput};
pub use diff::{
    diff_indexed, diff_indexed_holding, diff_tools, diff_tools_listed, held_classification, review_tool,
    ListedChanges, LISTED_BYTES_PER_KIND, LISTED_CHANGES_PER_KIND,
};
pub use digest::{definition_digest, definition_text, entry_digest, DefinitionDigest, Written};
pub use equivalences::EQUIVALENCES;
pub use explain::consequence;
pub use hashes::{definition_hash, schema_hash, tools_hash};
pub use index::{IndexedList, IndexedTool, ToolIndex};
pub use limits::{check_tool_list, check_tool_list_work, check_tools_text, list_work, RefusedTools};
pub use normal::{
    normalize_root_schema, normalize_schema, normalize_tool, normalize_tools, ref_expansion, NormalTool,
};
pub use security::ToolNames;
pub use surfaces::{carried, diff_surfaces, server_hash, surfaces_empty};
pub use upcoming::{ExpectedRelease, ReportedRelease};

/// Who accepts under the `auto` baseline policy.
pub const AUTO_ACCEPTOR: &str = "auto";

/// Short form of a hash, as people see it.
pub fn short_hash(hash: &str) -> String {
    hash.chars().take(8).collect()
}

pub use driftline_schemas::{BaselinePolicy, SecurityHold};

/// What a project does with a new list: its baseline policy, and the least security-flag severity that
/// holds a change for a person (such a change is at least WARNING, so `compatible` never accepts it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acceptance {
    pub policy: BaselinePolicy,
    pub hold: SecurityHold,
    /// Growth in context cost that is a WARNING change of its own.
    pub growth: ContextGrowth,
}

impl From<BaselinePolicy> for Acceptance {
    fn from(policy: BaselinePolicy) -> Self {
        Acceptance { policy, ..Acceptance::default() }
    }
}

impl From<&driftline_schemas::DetectorThresholds> for Acceptance {
    fn from(thresholds: &driftline_schemas::DetectorThresholds) -> Self {
        Acceptance {
            policy: thresholds.baseline,
            hold: thresholds.security_hold,
            growth: ContextGrowth {
                tokens: thresholds.context_growth_tokens,
                percent: thresholds.context_growth_percent,
            },
        }
    }
}

/// A tool list with its full hash.
/// What one snapshot did, with its hash (full hex) and the number of tools in it.
#[derive(Debug)]
pub struct Observed {
    pub outputs: Vec<ToolListOutput>,
    pub hash: String,
    pub tool_count: usize,
    /// What the server now declares besides its tools (the record's, or carried from the capture before).
    pub surfaces: Option<Arc<ServerSurfaces>>,
    /// What the list and the server's instructions cost a model's context.
    pub context: ContextCost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashedTools {
    pub hash: String,
    /// The list as text: kept for as long as the server's state, so held at its size, not as values.
    pub tools: Arc<ToolsText>,
    /// What the server declared besides its tools with this list (instructions, prompts, resources),
    /// carried from the capture before where this one had none; `None`: nothing. In the hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surfaces: Option<Arc<ServerSurfaces>>,
    /// Bytes of JSON the surfaces take, counted in the project's budget with the list's text.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub surfaces_bytes: usize,
    /// What the list and the instructions cost a model's context: counted whole at first sight, then from
    /// the baseline's and the changed tools; `None` in state stored before driftline counted it (counted
    /// whole when next needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextCost>,
    /// The list's index, built when it is first read (not stored: a function of `tools`).
    #[serde(skip)]
    index: IndexCache,
}

impl HashedTools {
    pub fn new(tools: ToolsText) -> Self {
        let index = ToolIndex::new(&tools);
        HashedTools::indexed(Arc::new(tools), index)
    }

    fn indexed(tools: Arc<ToolsText>, index: ToolIndex) -> Self {
        let hash = index.hash();
        HashedTools {
            hash,
            tools,
            surfaces: None,
            surfaces_bytes: 0,
            context: None,
            index: IndexCache(Some(Arc::new(index))),
        }
    }

    /// The list with the surfaces captured beside it: the hash then covers both (a server without
    /// surfaces keeps its tools' hash).
    fn with_surfaces(mut self, surfaces: Option<Arc<ServerSurfaces>>) -> Self {
        if let Some(declared) = &surfaces {
            self.hash = server_hash(&self.hash, Some(declared));
            self.surfaces_bytes = serde_json::to_string(&**declared).map_or(0, |text| text.len());
        }
        self.surfaces = surfaces;
        self
    }

    /// Builds the index if this list was read from the store (or changed) since it was last built.
    fn index(&mut self) -> &ToolIndex {
        let tools = &self.tools;
        self.index.0.get_or_insert_with(|| Arc::new(ToolIndex::new(tools)))
    }

    /// What the list costs a model's context, counted whole the first time it is asked for.
    pub fn context(&mut self) -> ContextCost {
        if let Some(known) = self.context {
            return known;
        }
        self.index();
        let counted =
            self.list().map(|list| cost::server_cost(list, self.surfaces.as_deref())).unwrap_or_default();
        self.context = Some(counted);
        counted
    }

    /// The list with its index, once [`HashedTools::index`] built it.
    fn list(&self) -> Option<IndexedList<'_>> {
        self.index.0.as_deref().map(|index| IndexedList { tools: &self.tools, index })
    }

    /// Whether `tools` is this list; if so, this list takes that copy (the same list read again is then
    /// recognised without comparing it).
    fn adopt_if_equal(&mut self, tools: &Arc<ToolsText>) -> bool {
        if Arc::ptr_eq(&self.tools, tools) {
            return true;
        }
        if self.tools != *tools {
            return false;
        }
        self.tools = Arc::clone(tools);
        true
    }

    /// How many tools the list declares (one per name).
    pub fn tool_count(&self) -> usize {
        match &self.index.0 {
            Some(index) => index.len(),
            None => tool_count(&self.tools),
        }
    }
}

fn is_zero(bytes: &usize) -> bool {
    *bytes == 0
}

/// A list's index kept beside it: derived from the list, so it takes no part in equality.
#[derive(Clone, Default)]
struct IndexCache(Option<Arc<ToolIndex>>);

impl PartialEq for IndexCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for IndexCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "indexed" } else { "not indexed" })
    }
}

/// Detector state for one server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerState {
    /// The accepted baseline; `None` until the first snapshot.
    pub baseline: Option<HashedTools>,
    /// The newest snapshot, when it differs from the baseline (accepting makes it the baseline).
    pub observed: Option<HashedTools>,
    /// Ids of events still open, oldest first.
    pub open_events: Vec<String>,
    /// The newest snapshot brought a new event (under the auto policy the event is accepted at once, but
    /// the server still reads DEGRADED until the next snapshot confirms the new list).
    pub last_check_drifted: bool,
    /// The last probe's failure, until a snapshot arrives.
    pub down: Option<String>,
    /// The version of the normal form the hashes above were computed with; state stored by an older
    /// version is rehashed once, so an upgrade of driftline is never reported as drift.
    #[serde(default)]
    pub normal_form: u32,
    /// Whether the baseline's declared output schemas were published to the tools' partitions (state
    /// stored by a driftline that did not publish them does so once, at the server's next record).
    #[serde(default)]
    pub declarations_published: bool,
    /// Why an open event waits for a person because of what the security review found (its worst flag),
    /// until the events are closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Per package, the upcoming release last reported and the hash of its list: a release captured again
    /// (a watcher restarted before it noted the version) reports nothing new.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upcoming: BTreeMap<String, ReportedRelease>,
    /// The short hashes of captured releases' lists with the newest version that had each, oldest first:
    /// the release a server runs is the one whose list is its list (for the pin that keeps it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub release_lists: Vec<(String, String)>,
    /// A release accepted ahead: a list equal to it becomes the baseline when it arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<ExpectedRelease>,
}

/// Bumped whenever normalisation changes what a hash covers (3: the hash of a list is a hash of its tools'
/// definition hashes; 4: an anyOf branch another branch accepts wholly is dropped).
pub const NORMAL_FORM_VERSION: u32 = 4;

/// What the detector tells the rest of the system.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolListOutput {
    /// The first snapshot of a server became its baseline; flags are the first-sight review of its tools.
    BaselineEstablished {
        hash: String,
        tool_count: usize,
        security_flags: Vec<(String, SecurityFlag)>,
    },
    DriftEvent(SchemaDriftEvent),
    /// An open event was closed: `accepted` by an operator (or the auto policy), or `reverted` because
    /// the server went back to its baseline.
    EventClosed {
        event_id: String,
        status: EventStatus,
        by: Option<String>,
        at: Timestamp,
    },
    BaselineAccepted(BaselineAcceptance),
}

/// An audit record of a baseline change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineAcceptance {
    pub id: String,
    pub project: String,
    pub server_name: String,
    pub previous_hash: String,
    pub new_hash: String,
    pub accepted_by: String,
    pub accepted_at: Timestamp,
    pub event_ids: Vec<String>,
}

/// The record being processed: its key and position (for ids) and its ingest time (`detected_at`).
#[derive(Debug, Clone, Copy)]
pub struct RecordContext<'a> {
    pub project: &'a str,
    pub server: &'a str,
    pub position: InputPosition,
    pub at: Timestamp,
}

impl RecordContext<'_> {
    fn key(&self) -> String {
        format!("{}/{}", self.project, self.server)
    }
}

impl ServerState {
    /// What a record captured besides tools, with what it leaves out taken from the newest capture (shared,
    /// not copied, when it is all of it).
    fn surfaces_with_carried(&self, surfaces: Option<&ServerSurfaces>) -> Option<Arc<ServerSurfaces>> {
        let latest =
            self.observed.as_ref().or(self.baseline.as_ref()).and_then(|list| list.surfaces.as_ref());
        match surfaces {
            None => latest.cloned(),
            Some(captured) => carried(Some(captured), latest.map(|arc| &**arc)).map(Arc::new),
        }
    }

    /// Bytes of list text the state holds: (baseline, newest snapshot).
    pub fn list_bytes(&self) -> (usize, usize) {
        let bytes = |list: &Option<HashedTools>| {
            list.as_ref().map_or(0, |list| list.tools.text_bytes().saturating_add(list.surfaces_bytes))
        };
        (bytes(&self.baseline), bytes(&self.observed))
    }

    pub fn status(&self) -> ServerStatus {
        match (&self.baseline, &self.down) {
            (_, Some(_)) => ServerStatus::Down,
            (None, None) => ServerStatus::Unknown,
            _ if !self.open_events.is_empty() || self.last_check_drifted => ServerStatus::Degraded,
            _ => ServerStatus::Up,
        }
    }

    /// Applies one snapshot (DESIGN.md §5 lifecycle).
    pub fn observe(
        &mut self,
        snapshot: &ToolListSnapshot,
        context: RecordContext<'_>,
        policy: impl Into<Acceptance>,
    ) -> Vec<ToolListOutput> {
        self.observe_list(snapshot, context, policy).outputs
    }

    /// [`ServerState::observe`], also returning the snapshot's hash and tool count.
    pub fn observe_list(
        &mut self,
        snapshot: &ToolListSnapshot,
        context: RecordContext<'_>,
        policy: impl Into<Acceptance>,
    ) -> Observed {
        let tools = Arc::new(ToolsText::from_values(&snapshot.tools));
        self.observe_server(tools, snapshot.surfaces.as_ref(), context, policy)
    }

    /// Applies one snapshot's tools (taken, not copied: the state, the event and the stored snapshot share
    /// them), from a producer that captured nothing else. The list is indexed once, and the hash, the diff
    /// and the count all read that index.
    pub fn observe_tools(
        &mut self,
        tools: Arc<ToolsText>,
        context: RecordContext<'_>,
        policy: impl Into<Acceptance>,
    ) -> Observed {
        self.observe_server(tools, None, context, policy)
    }

    /// [`ServerState::observe_tools`] with what the snapshot captured besides the tools (what it left out
    /// is carried from the newest capture: a producer of tools only changes no prompt).
    pub fn observe_server(
        &mut self,
        tools: Arc<ToolsText>,
        surfaces: Option<&ServerSurfaces>,
        context: RecordContext<'_>,
        policy: impl Into<Acceptance>,
    ) -> Observed {
        let policy = policy.into();
        self.rehash_if_stale();
        let surfaces = self.surfaces_with_carried(surfaces);
        // The common case: a probe finds the list it found before, as sent. The index is a function of
        // the list, so an equal list has the hash already known and nothing to diff.
        match self.observe_known(&tools, &surfaces, context) {
            Some(observed) => observed,
            None => self.observe_list_indexing(tools, surfaces, context, policy),
        }
    }

    /// [`ServerState::observe_tools`] for a list not seen before: indexed (taking the digests of tools
    /// declared as in the baseline or the newest snapshot), hashed and diffed (the tests hold the shortcut
    /// for lists seen before to this).
    fn observe_list_indexing(
        &mut self,
        tools: Arc<ToolsText>,
        surfaces: Option<Arc<ServerSurfaces>>,
        context: RecordContext<'_>,
        policy: Acceptance,
    ) -> Observed {
        self.rehash_if_stale();
        for list in [&mut self.baseline, &mut self.observed].into_iter().flatten() {
            list.index();
        }
        let known: Vec<IndexedList<'_>> =
            [&self.baseline, &self.observed].into_iter().flatten().filter_map(HashedTools::list).collect();
        let index = ToolIndex::reusing(&tools, &known);
        let current = HashedTools::indexed(tools, index).with_surfaces(surfaces.clone());
        let (hash, tool_count) = (current.hash.clone(), current.tool_count());
        let (outputs, context) = self.observe_indexed(current, context, policy);
        Observed { outputs, hash, tool_count, surfaces, context }
    }

    /// A list equal, as sent, to the baseline (the server went back to it, or never left) or to the newest
    /// snapshot (the same drift again): what [`ServerState::observe_indexed`] does for its hash, without
    /// indexing it. `None` for any other list.
    fn observe_known(
        &mut self,
        tools: &Arc<ToolsText>,
        surfaces: &Option<Arc<ServerSurfaces>>,
        context: RecordContext<'_>,
    ) -> Option<Observed> {
        let same_surfaces = |list: &HashedTools| list.surfaces == *surfaces;
        if self
            .baseline
            .as_mut()
            .is_some_and(|baseline| same_surfaces(baseline) && baseline.adopt_if_equal(tools))
        {
            let baseline = self.baseline.as_mut()?;
            let (hash, tool_count, cost) = (baseline.hash.clone(), baseline.tool_count(), baseline.context());
            self.down = None;
            let outputs = self.back_to_baseline(context.at);
            return Some(Observed { outputs, hash, tool_count, surfaces: surfaces.clone(), context: cost });
        }
        let observed = self.observed.as_mut().filter(|_| self.baseline.is_some())?;
        if !same_surfaces(observed) || !observed.adopt_if_equal(tools) {
            return None;
        }
        let (hash, tool_count, cost) = (observed.hash.clone(), observed.tool_count(), observed.context());
        self.down = None;
        let outputs = Vec::new();
        Some(Observed { outputs, hash, tool_count, surfaces: surfaces.clone(), context: cost })
    }

    /// `current` was indexed when it was built. Answers the outputs and what the list costs a model's
    /// context.
    fn observe_indexed(
        &mut self,
        mut current: HashedTools,
        context: RecordContext<'_>,
        acceptance: Acceptance,
    ) -> (Vec<ToolListOutput>, ContextCost) {
        self.down = None;
        let Some(baseline) = &mut self.baseline else {
            let security_flags = first_sight_review(&mut current);
            let output = ToolListOutput::BaselineEstablished {
                hash: current.hash.clone(),
                tool_count: current.tool_count(),
                security_flags,
            };
            let cost = current.context();
            self.baseline = Some(current);
            return (vec![output], cost);
        };
        // The same list in other text (members reordered, other spacing: a producer that writes its own
        // JSON) takes the place of the text held, so that it is recognised as sent from now on; it costs
        // what the list held costs.
        if current.hash == baseline.hash {
            let cost = baseline.context();
            current.context = Some(cost);
            *baseline = current;
            return (self.back_to_baseline(context.at), cost);
        }
        if let Some(seen) = self.observed.as_mut().filter(|seen| seen.hash == current.hash) {
            let cost = seen.context();
            current.context = Some(cost);
            *seen = current;
            return (Vec::new(), cost); // the same drift again: one event is enough
        }
        let event = drift_event(baseline, &mut current, context, acceptance);
        let cost = current.context.unwrap_or_default();
        self.observed = Some(current);
        self.last_check_drifted = true;
        let policy = acceptance.policy;
        // A release accepted ahead arrived: the operator read its changes before it ran.
        let ahead = self.take_expected(&event.current_hash);
        let accept_now = ahead.is_some()
            || match policy {
                BaselinePolicy::Manual => false,
                BaselinePolicy::Auto => true,
                BaselinePolicy::Compatible => {
                    event.max_classification.is_none_or(|worst| worst == Classification::Compatible)
                }
            };
        let mut event = event;
        self.open_events.push(event.id.clone());
        if !accept_now {
            if let Some(reason) = hold_reason(&event, acceptance.hold) {
                self.held = Some(reason);
            }
            return (vec![ToolListOutput::DriftEvent(event)], cost);
        }
        let acceptor = ahead.as_ref().map_or_else(|| AUTO_ACCEPTOR.to_owned(), ExpectedRelease::acceptor);
        let mut outputs = self.accept(&acceptor, context);
        // The new event is recorded as accepted rather than opened and closed.
        outputs
            .retain(|o| !matches!(o, ToolListOutput::EventClosed { event_id, .. } if *event_id == event.id));
        event.status = EventStatus::Accepted;
        event.accepted_by = Some(acceptor);
        event.accepted_at = Some(context.at);
        outputs.insert(0, ToolListOutput::DriftEvent(event));
        // Under `auto` the baseline moved, but this check still saw drift (LangSight's sequence: DEGRADED
        // once, then UP). A compatible change, or a release accepted ahead, is no reason to look at the
        // server at all: it stays UP.
        self.last_check_drifted = policy == BaselinePolicy::Auto && ahead.is_none();
        (outputs, cost)
    }

    /// The server sent its baseline: any drift it showed is over.
    fn back_to_baseline(&mut self, at: Timestamp) -> Vec<ToolListOutput> {
        self.observed = None;
        self.last_check_drifted = false;
        self.close_open_events(EventStatus::Reverted, None, at)
    }

    /// Hashes stored by an older normal form are recomputed from the lists they came with.
    fn rehash_if_stale(&mut self) {
        if self.normal_form == NORMAL_FORM_VERSION {
            return;
        }
        for list in [&mut self.baseline, &mut self.observed].into_iter().flatten() {
            let tools_hash = list.index().hash();
            list.hash = server_hash(&tools_hash, list.surfaces.as_deref());
        }
        self.normal_form = NORMAL_FORM_VERSION;
    }

    /// An operator accepts the newest snapshot as the baseline; open events become `accepted`. Nothing
    /// happens (and nothing is returned) when there is nothing to accept.
    pub fn accept(&mut self, by: &str, context: RecordContext<'_>) -> Vec<ToolListOutput> {
        let (Some(baseline), Some(observed)) = (&self.baseline, self.observed.take()) else {
            return Vec::new();
        };
        let acceptance = BaselineAcceptance {
            id: derive_id(OutputKind::BaselineAcceptance, &context.key(), context.position),
            project: context.project.to_owned(),
            server_name: context.server.to_owned(),
            previous_hash: short_hash(&baseline.hash),
            new_hash: short_hash(&observed.hash),
            accepted_by: by.to_owned(),
            accepted_at: context.at,
            event_ids: self.open_events.clone(),
        };
        self.baseline = Some(observed);
        self.last_check_drifted = false;
        let mut outputs = self.close_open_events(EventStatus::Accepted, Some(by), context.at);
        outputs.push(ToolListOutput::BaselineAccepted(acceptance));
        outputs
    }

    /// A probe could not reach the server.
    pub fn probe_failed(&mut self, error: &str) {
        self.down = Some(error.to_owned());
    }

    fn close_open_events(
        &mut self,
        status: EventStatus,
        by: Option<&str>,
        at: Timestamp,
    ) -> Vec<ToolListOutput> {
        self.held = None;
        self.open_events
            .drain(..)
            .map(|event_id| ToolListOutput::EventClosed { event_id, status, by: by.map(String::from), at })
            .collect()
    }
}

/// How many tools a list declares, as [`normalize_tools`] counts them: objects with a string `name`, one
/// per name.
fn tool_count(tools: &ToolsText) -> usize {
    let names: std::collections::HashSet<String> = tools.names().flatten().collect();
    names.len()
}

/// The first-sight review of every tool of a server's first list.
fn first_sight_review(list: &mut HashedTools) -> Vec<(String, SecurityFlag)> {
    // The instructions, prompts and resources are read on first sight too, each under its name.
    let (declared, _) = diff_surfaces(None, list.surfaces.as_deref(), Severity::Medium);
    let surfaces = declared.into_iter().flat_map(|change| {
        let name = if change.tool_name.is_empty() { change.path.clone() } else { change.tool_name.clone() };
        change.security_flags.into_iter().map(move |flag| (name.clone(), flag))
    });
    let surfaces: Vec<(String, SecurityFlag)> = surfaces.collect();
    list.index();
    let Some(list) = list.list() else { return surfaces };
    let names = ToolNames::new(list.index.tools().iter().map(|t| &*t.name).collect());
    list.index
        .tools()
        .iter()
        .flat_map(|tool| {
            let normal = list.normal(tool);
            review_tool(&normal, &names).into_iter().map(move |flag| (tool.name.to_string(), flag))
        })
        .chain(surfaces)
        .collect()
}

/// Why an event is held for a person by the security review: its worst flag at or above `hold`, where it
/// stands, in the words health and the dashboard show. `None` when no flag reaches the hold.
pub fn hold_reason(event: &SchemaDriftEvent, hold: SecurityHold) -> Option<String> {
    let held = event.changes.iter().flat_map(|change| {
        change
            .security_flags
            .iter()
            .filter(|flag| flag.severity >= hold.severity())
            .map(move |flag| (change, flag))
    });
    let flagged = held.clone().count();
    // The first of the worst: the review's order is the list's.
    let (change, flag) =
        held.reduce(|worst, next| if next.1.severity > worst.1.severity { next } else { worst })?;
    let place = match &change.param_name {
        Some(_) => format!("{} of tool {}", change.path, change.tool_name),
        None => format!("tool {}", change.tool_name),
    };
    let more = match flagged {
        1 => String::new(),
        n => format!(" (+{} more)", n - 1),
    };
    Some(format!(
        "held for security review: {} {} flag in {} ({}): {}{more}",
        flag.severity.as_str(),
        flag.rule,
        place,
        change.change_type,
        flag.excerpt
    ))
}

/// The event of `current` against `baseline`, which also gives `current` its context cost.
pub(super) fn drift_event(
    baseline: &mut HashedTools,
    current: &mut HashedTools,
    context: RecordContext<'_>,
    acceptance: Acceptance,
) -> SchemaDriftEvent {
    let hold = acceptance.hold;
    let before = baseline.context();
    baseline.index();
    current.index();
    let (mut changes, mut omitted, mut context_cost) = (Vec::new(), Default::default(), None);
    if let (Some(old), Some(new)) = (baseline.list(), current.list()) {
        ListedChanges { changes, omitted } = diff::diff_indexed_holding(old, new, hold);
        let surfaces = (baseline.surfaces.as_deref(), current.surfaces.as_deref());
        context_cost = Some(cost::cost_change(before, (old, new), surfaces));
    }
    let (surface_changes, surface_omitted) =
        diff_surfaces(baseline.surfaces.as_deref(), current.surfaces.as_deref(), hold.severity());
    changes.extend(surface_changes);
    for (classification, count) in surface_omitted {
        *omitted.entry(classification).or_default() += count;
    }
    if let Some(change) = &context_cost {
        current.context = Some(change.after);
        if acceptance.growth.exceeded(change) {
            changes.push(context_growth_change(change));
        }
    }
    SchemaDriftEvent {
        id: derive_id(OutputKind::SchemaDriftEvent, &context.key(), context.position),
        project: context.project.to_owned(),
        server_name: context.server.to_owned(),
        detected_at: context.at,
        previous_hash: short_hash(&baseline.hash),
        current_hash: short_hash(&current.hash),
        status: EventStatus::Open,
        max_classification: max_classification(&changes),
        max_severity: max_severity(&changes),
        changes,
        omitted_changes: omitted,
        accepted_by: None,
        accepted_at: None,
        previous_tools: Arc::clone(&baseline.tools),
        current_tools: Arc::clone(&current.tools),
        lists_omitted: false,
        context_cost,
    }
}

/// The WARNING change a growth past the project's setting is: before and after in tokens.
pub fn context_growth_change(change: &driftline_schemas::ContextCostChange) -> SchemaChange {
    SchemaChange::new(
        driftline_schemas::ChangeType::ContextCostGrew,
        Classification::Warning,
        String::new(),
        "context".to_owned(),
        None,
        (serde_json::json!(change.before.tokens), serde_json::json!(change.after.tokens)),
        Vec::new(),
    )
}

/// The worst classification among `changes`: among all of a diff's changes when they are its listed ones
/// (the first change of each kind of consequence is always listed).
pub fn max_classification(changes: &[SchemaChange]) -> Option<Classification> {
    changes.iter().map(|c| c.classification).max()
}

pub fn max_severity(changes: &[SchemaChange]) -> Option<Severity> {
    changes.iter().flat_map(|c| &c.security_flags).map(|f| f.severity).max()
}

#[cfg(test)]
mod tests;
