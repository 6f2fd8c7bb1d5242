//! Upcoming releases: what a server's next release, captured in a sandbox before anyone runs it, would
//! change against the server's baseline (issue #46).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Classification, ContextCostChange, SchemaChange, Severity, Timestamp, ToolsText};

/// A release of a watched server's package, diffed against the server's accepted baseline with the rules
/// of drift; the server's status does not change. Written once per release and list (a release captured
/// again with the same list is not reported again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpcomingRelease {
    pub id: String,
    pub project: String,
    pub server_name: String,
    /// `npm:@scope/name` or `pypi:name`.
    pub package: String,
    pub version: String,
    /// The pin that keeps the version in use (`@scope/name@1.2.3`, `name==1.2.3`), for the advice; empty
    /// while the version in use is unknown (no release captured so far had the server's current list).
    pub pin: String,
    #[serde(default)]
    pub released_at: Option<Timestamp>,
    pub detected_at: Timestamp,
    /// The baseline it was diffed against (short); absent when the server had none yet.
    #[serde(default)]
    pub baseline_hash: Option<String>,
    /// The release's own list (short hash).
    pub release_hash: String,
    pub tool_count: u32,
    pub changes: Vec<SchemaChange>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, u64>)]
    pub omitted_changes: BTreeMap<Classification, u64>,
    pub max_classification: Option<Classification>,
    pub max_severity: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_cost: Option<ContextCostChange>,
    /// Why the release could not be installed or captured in the sandbox (nothing was diffed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The release's tools as captured (for each changed tool's new input schema, and the full view).
    #[schema(value_type = Vec<serde_json::Value>)]
    #[serde(default, deserialize_with = "crate::tools_text::shared_from_any")]
    pub release_tools: Arc<ToolsText>,
}
