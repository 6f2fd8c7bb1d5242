//! What the notifier tells people (webhooks), as the detector worker records it: one row per new drift
//! event and per DOWN/UP transition of a server, written with the detector's outputs so a replay writes the
//! same rows (ids are derived from the input record).

use serde::{Deserialize, Serialize};

use crate::{Classification, SchemaChange, SchemaDriftEvent, SecurityFlag, Severity, Timestamp};

/// How many changes a notification carries, worst first; the dashboard has the rest.
pub const TOP_CHANGES: usize = 10;
/// How many security flags a notification carries (a poisoned list of thousands of tools has thousands);
/// `security_flags_total` counts them all.
pub const TOP_SECURITY_FLAGS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotificationKind {
    /// A new drift event of a server's tool list.
    Drift,
    /// The server stopped answering probes.
    Down,
    /// A server that was DOWN answers again.
    Up,
    /// A tool's returns stopped meeting its declared output schema (BREAKING for every validating client).
    #[serde(rename = "declared_output_mismatch")]
    DeclaredOutputMismatch,
    /// A release not yet running would change the server's lists.
    Upcoming,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::Drift => "drift",
            NotificationKind::Down => "down",
            NotificationKind::Up => "up",
            NotificationKind::DeclaredOutputMismatch => "declared_output_mismatch",
            NotificationKind::Upcoming => "upcoming",
        }
    }
}

/// Changes of an event by classification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    pub breaking: u32,
    pub warning: u32,
    pub compatible: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub id: String,
    pub project: String,
    pub server_name: String,
    pub kind: NotificationKind,
    /// When the detector saw it (the triggering record's ingest time).
    pub at: Timestamp,
    /// Drift: the event's worst classification.
    #[serde(default)]
    pub classification: Option<Classification>,
    /// Drift: the event, for links and lookups.
    #[serde(default)]
    pub event_id: Option<String>,
    /// Drift: `open`, or `accepted` when the baseline policy accepted it at once.
    #[serde(default)]
    pub event_status: Option<crate::EventStatus>,
    #[serde(default)]
    pub counts: ChangeCounts,
    /// Drift: at most [`TOP_CHANGES`] changes, worst first.
    #[serde(default)]
    pub top_changes: Vec<SchemaChange>,
    /// Drift: the first [`TOP_SECURITY_FLAGS`] security flags, high severity first, with their tools.
    #[serde(default)]
    pub security_flags: Vec<(String, SecurityFlag)>,
    #[serde(default)]
    pub security_flags_total: u32,
    #[serde(default)]
    pub max_severity: Option<Severity>,
    /// Down: the probe's error. Up: how many tools the server declares. Mismatch: what the returns lack
    /// or add, path by path.
    #[serde(default)]
    pub note: Option<String>,
    /// Mismatch: the tool whose returns mismatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Drift: the agents that called the changed tools in the last 24 hours, one line each, with what the
    /// new input schema makes of their real calls where they recorded arguments. Filled in by the notifier
    /// when it first sends the notification (the detector stores it without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_agents: Vec<String>,
    /// Drift: what the new list costs a model's context next to the baseline, in words
    /// (`+12,400 tokens (+103.3 %): 3 tools added`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_cost: Option<String>,
    /// The release an `upcoming` notification is of: `npm:@scope/name 1.2.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

impl Notification {
    pub fn drift(event: &SchemaDriftEvent) -> Notification {
        let summary = Summary::of(&event.changes, &event.omitted_changes);
        Notification {
            id: event.id.clone(),
            project: event.project.clone(),
            server_name: event.server_name.clone(),
            kind: NotificationKind::Drift,
            at: event.detected_at,
            classification: event.max_classification,
            event_id: Some(event.id.clone()),
            event_status: Some(event.status),
            counts: summary.counts,
            top_changes: summary.top_changes,
            security_flags: summary.security_flags,
            security_flags_total: summary.security_flags_total,
            max_severity: event.max_severity,
            note: None,
            tool: None,
            affected_agents: Vec::new(),
            context_cost: event.context_cost.as_ref().map(|change| change.summary.clone()),
            release: None,
        }
    }

    /// A release not yet running that would change the server's lists; the note names the release and the
    /// pin that keeps the version in use.
    pub fn upcoming(release: &crate::UpcomingRelease) -> Notification {
        let summary = Summary::of(&release.changes, &release.omitted_changes);
        let released = release.released_at.map(|at| format!(", released {at}")).unwrap_or_default();
        Notification {
            id: release.id.clone(),
            project: release.project.clone(),
            server_name: release.server_name.clone(),
            kind: NotificationKind::Upcoming,
            at: release.detected_at,
            classification: release.max_classification,
            event_id: Some(release.id.clone()),
            event_status: None,
            counts: summary.counts,
            top_changes: summary.top_changes,
            security_flags: summary.security_flags,
            security_flags_total: summary.security_flags_total,
            max_severity: release.max_severity,
            note: Some(match release.pin.as_str() {
                "" => format!(
                    "{} {}{released}; to stay on the version in use, pin it",
                    release.package, release.version
                ),
                pin => format!(
                    "{} {}{released}; to stay on the version in use, pin it: {pin}",
                    release.package, release.version
                ),
            }),
            tool: None,
            affected_agents: Vec::new(),
            context_cost: release.context_cost.as_ref().map(|change| change.summary.clone()),
            release: Some(format!("{} {}", release.package, release.version)),
        }
    }

    pub fn output_mismatch(signal: &crate::ShapeDriftSignal) -> Notification {
        let reasons: Vec<String> = signal.reasons.iter().take(TOP_CHANGES).map(ToString::to_string).collect();
        Notification {
            id: signal.id.clone(),
            project: signal.project.clone(),
            server_name: signal.server.clone(),
            kind: NotificationKind::DeclaredOutputMismatch,
            at: signal.detected_at,
            classification: Some(Classification::Breaking),
            event_id: None,
            event_status: None,
            counts: ChangeCounts { breaking: signal.reasons.len() as u32, ..ChangeCounts::default() },
            top_changes: Vec::new(),
            security_flags: Vec::new(),
            security_flags_total: 0,
            max_severity: None,
            note: Some(reasons.join("; ")),
            tool: Some(signal.tool.clone()),
            affected_agents: Vec::new(),
            context_cost: None,
            release: None,
        }
    }

    /// A DOWN or UP transition; `id` comes from the input record (`derive_id`).
    pub fn transition(
        id: String,
        project: &str,
        server: &str,
        kind: NotificationKind,
        at: Timestamp,
        note: String,
    ) -> Notification {
        Notification {
            id,
            project: project.to_owned(),
            server_name: server.to_owned(),
            kind,
            at,
            classification: None,
            event_id: None,
            event_status: None,
            counts: ChangeCounts::default(),
            top_changes: Vec::new(),
            security_flags: Vec::new(),
            security_flags_total: 0,
            max_severity: None,
            note: Some(note),
            tool: None,
            affected_agents: Vec::new(),
            context_cost: None,
            release: None,
        }
    }
}

/// The counts, worst changes and worst flags of a list of changes, as notifications carry them.
struct Summary {
    counts: ChangeCounts,
    top_changes: Vec<SchemaChange>,
    security_flags: Vec<(String, SecurityFlag)>,
    security_flags_total: u32,
}

impl Summary {
    fn of(changes: &[SchemaChange], omitted: &std::collections::BTreeMap<Classification, u64>) -> Summary {
        let mut counts = ChangeCounts::default();
        let listed = changes.iter().map(|change| (change.classification, 1));
        let omitted = omitted.iter().map(|(classification, n)| (*classification, *n));
        for (classification, n) in listed.chain(omitted) {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            match classification {
                Classification::Breaking => counts.breaking = counts.breaking.saturating_add(n),
                Classification::Warning => counts.warning = counts.warning.saturating_add(n),
                Classification::Compatible => counts.compatible = counts.compatible.saturating_add(n),
            }
        }
        let mut worst: Vec<&SchemaChange> = changes.iter().collect();
        worst.sort_by_key(|change| std::cmp::Reverse(change.classification));
        let mut flags: Vec<(String, SecurityFlag)> = changes
            .iter()
            .flat_map(|c| c.security_flags.iter().map(|f| (c.tool_name.clone(), f.clone())))
            .collect();
        let security_flags_total = flags.len() as u32;
        flags.sort_by_key(|(_, flag)| std::cmp::Reverse(flag.severity));
        flags.truncate(TOP_SECURITY_FLAGS);
        Summary {
            counts,
            top_changes: worst.into_iter().take(TOP_CHANGES).cloned().collect(),
            security_flags: flags,
            security_flags_total,
        }
    }
}
