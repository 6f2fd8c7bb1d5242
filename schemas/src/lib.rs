//! The contract between driftline's stages (DESIGN.md §2).
//!
//! Every message that crosses a stage boundary — HTTP body, Kafka record, stored row — is a type in this
//! crate. The two input messages also have versioned JSON Schemas under `schemas/json/`, because other
//! producers may publish them without our ingest service (DESIGN.md §8).

pub mod api;
mod commands;
mod context_cost;
mod declaration;
mod ids;
pub mod log_budget;
mod names;
mod notification;
mod secret;
mod shape_signal;
mod span;
mod thresholds;
mod time;
mod tool_drift;
mod tool_list;
mod tools_text;
mod upcoming;

pub use commands::{DeadLetter, OperatorCommand};
pub use context_cost::{ContextCost, ContextCostChange};
pub use declaration::{OutputDeclaration, OUTPUT_DECLARATION};
pub use ids::{derive_id, InputPosition, OutputKind};
pub use log_budget::LogBudget;
pub use names::{
    KeyError, KeyLimits, ListWorkLimits, NameError, ProjectName, ServerKey, ServerName, ToolKey, ToolName,
};
pub use notification::{ChangeCounts, Notification, NotificationKind, TOP_CHANGES, TOP_SECURITY_FLAGS};
pub use secret::Secret;
pub use shape_signal::{ReasonChange, ShapeDriftSignal, ShapeRanking, ShapeReason, SignalKind};
pub use span::{CallStatus, ShapeOutcome, ToolCallRecord, ToolCallSpan, MAX_ID_BYTES};
pub use thresholds::{BaselinePolicy, DetectorThresholds, SecurityHold, ThresholdError};
pub use time::Timestamp;
pub use tool_drift::{
    ChangeType, Classification, Direction, EventStatus, SchemaChange, SchemaDriftEvent, SecurityFlag,
    ServerStatus, Severity,
};
pub use tool_list::{
    check_tool_name, json_depth, ProbeFailure, ServerSurfaces, SnapshotSource, ToolListLimits,
    ToolListRecord, ToolListSnapshot, ToolListTooLarge, UpstreamRelease,
};
pub use tools_text::{name_of, DeclaredTool, ToolsText};
pub use upcoming::UpcomingRelease;

/// Version written into every message this build produces, and the only one it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// `schema_version` of an input message: absent means the current one; any other than it is refused (a
/// message of a later version may mean something this build would misread).
pub(crate) fn known_schema_version<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<u32, D::Error> {
    let version = <u32 as serde::Deserialize>::deserialize(deserializer)?;
    if version == SCHEMA_VERSION {
        Ok(version)
    } else {
        Err(serde::de::Error::custom(format!(
            "schema_version {version} is not supported: this driftline reads version {SCHEMA_VERSION}"
        )))
    }
}

/// JSON Schema (draft 2020-12) of a [`ToolListSnapshot`] record on the `tool-lists` topic.
pub const TOOL_LIST_SNAPSHOT_JSON_SCHEMA: &str = include_str!("../json/tool-list-snapshot.v1.json");
/// JSON Schema (draft 2020-12) of a raw [`ToolCallSpan`] record on the `spans` topic.
pub const TOOL_CALL_SPAN_JSON_SCHEMA: &str = include_str!("../json/tool-call-span.v1.json");
/// The declarations driftline's detectors write to the spans topic (`schemas/json/output-declaration.v1.json`).
pub const OUTPUT_DECLARATION_JSON_SCHEMA: &str = include_str!("../json/output-declaration.v1.json");

/// Lowercase hex of the first 4 bytes of a SHA-256 digest: the short form shown to people.
pub fn hex8(digest: &[u8]) -> String {
    hex::encode(&digest[..4.min(digest.len())])
}
