//! Tool-call spans as sent to ingest and the call records ingest puts on the bus (DESIGN.md §2, §3).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::{ProjectName, ServerKey, ServerName, Timestamp, ToolKey, ToolName};

fn schema_version() -> u32 {
    crate::SCHEMA_VERSION
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    Success,
    Error,
}

/// One tool call as an agent or SDK reports it (DESIGN.md §2). `return_value` is any JSON value; it is
/// kept raw so that its shape can be computed from the bytes without building a tree.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpan {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    /// Only present on spans published straight to Kafka; ingest takes it from the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectName>,
    pub span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    pub server: ServerName,
    pub tool: ToolName,
    pub started_at: Timestamp,
    pub duration_ms: f64,
    pub status: CallStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `None` when the field is missing; a JSON `null` is kept as the raw value `null` (a real shape).
    #[serde(default, deserialize_with = "present_raw_value", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub return_value: Option<Box<RawValue>>,
    /// The call's arguments (`tools/call` params' `arguments`), when the client records them: only their
    /// shape is kept, never a value. `None` when the field is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Box<RawValue>>,
}

// `Option<Box<RawValue>>` would turn an explicit `null` into `None`; a null return is a shape, not absence.
fn present_raw_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

/// What became of a span's return value on its way to a shape (DESIGN.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShapeOutcome {
    Fingerprinted,
    Oversized,
    TruncatedSentinel,
    Unparseable,
    TooDeep,
    Absent,
    NotSuccess,
}

impl ShapeOutcome {
    pub const ALL: [ShapeOutcome; 7] = [
        ShapeOutcome::Fingerprinted,
        ShapeOutcome::Oversized,
        ShapeOutcome::TruncatedSentinel,
        ShapeOutcome::Unparseable,
        ShapeOutcome::TooDeep,
        ShapeOutcome::Absent,
        ShapeOutcome::NotSuccess,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ShapeOutcome::Fingerprinted => "fingerprinted",
            ShapeOutcome::Oversized => "oversized",
            ShapeOutcome::TruncatedSentinel => "truncated_sentinel",
            ShapeOutcome::Unparseable => "unparseable",
            ShapeOutcome::TooDeep => "too_deep",
            ShapeOutcome::Absent => "absent",
            ShapeOutcome::NotSuccess => "not_success",
        }
    }
}

/// What ingest produces from a span (key `project/server/tool`): the span without its return value, plus
/// the value's shape. Return values never travel past ingest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRecord {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    pub project: ProjectName,
    pub span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    pub server: ServerName,
    pub tool: ToolName,
    pub started_at: Timestamp,
    pub duration_ms: f64,
    pub status: CallStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When ingest accepted the span; drift found by this record is `detected_at` this instant.
    pub ingested_at: Timestamp,
    pub shape: Option<String>,
    /// First 8 hex digits of SHA-256(shape).
    pub shape_hash: Option<String>,
    /// Size of the value's compact JSON encoding; `None` when absent or not JSON.
    pub compact_bytes: Option<u64>,
    pub shape_outcome: ShapeOutcome,
    /// The shape of the call's arguments, when the span recorded them and they fingerprinted (within the
    /// byte cap, parseable); the arguments themselves never travel past ingest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_shape: Option<String>,
}

impl ToolCallRecord {
    pub fn key(&self) -> ToolKey {
        ToolKey { project: self.project.clone(), server: self.server.clone(), tool: self.tool.clone() }
    }

    pub fn server_key(&self) -> ServerKey {
        ServerKey { project: self.project.clone(), server: self.server.clone() }
    }

    /// What makes a call the same call when a client sends it again (a retry after a timeout or a 503,
    /// an OTLP export retried): its project, server, tool, trace id and span id (for OTLP the tool-call
    /// id when there is one). 32 hex digits of SHA-256.
    pub fn identity(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for part in [
            &*self.project,
            &*self.server,
            &*self.tool,
            self.trace_id.as_deref().unwrap_or(""),
            &*self.span_id,
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hex::encode(&hasher.finalize()[..16])
    }
}

/// Longest span, trace and session id and agent name accepted.
pub const MAX_ID_BYTES: usize = 256;
/// Longest call duration accepted: a day.
pub const MAX_DURATION_MS: f64 = 86_400_000.0;

impl ToolCallSpan {
    /// The rules every span meets, from ingest or published straight to Kafka (DESIGN.md §8).
    pub fn check(&self) -> Result<(), String> {
        if self.span_id.is_empty() || self.span_id.len() > MAX_ID_BYTES {
            return Err(format!("span_id must be 1-{MAX_ID_BYTES} bytes"));
        }
        if self.trace_id.as_ref().is_some_and(|id| id.len() > MAX_ID_BYTES)
            || self.session_id.as_ref().is_some_and(|id| id.len() > MAX_ID_BYTES)
        {
            return Err(format!("trace_id and session_id must be at most {MAX_ID_BYTES} bytes"));
        }
        if self.agent_name.as_ref().is_some_and(|name| name.len() > MAX_ID_BYTES) {
            return Err(format!("agent_name must be at most {MAX_ID_BYTES} bytes"));
        }
        // Bounded, so that sums and averages over any number of calls stay finite.
        if !(self.duration_ms.is_finite() && (0.0..=MAX_DURATION_MS).contains(&self.duration_ms)) {
            return Err(format!("duration_ms must be a number in [0, {MAX_DURATION_MS}] (one day)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(return_value: &str) -> ToolCallSpan {
        let text = format!(
            r#"{{"span_id":"s1","server":"srv","tool":"t","started_at":"2026-03-26T08:15:42Z",
                "duration_ms":12.5,"status":"success"{return_value}}}"#
        );
        serde_json::from_str(&text).expect("valid span")
    }

    #[test]
    fn missing_return_value_is_absent_but_null_is_kept() {
        assert!(span("").return_value.is_none());
        assert_eq!(span(r#","return_value":null"#).return_value.expect("present").get(), "null");
        assert_eq!(span(r#","return_value":{"a": 1}"#).return_value.expect("present").get(), r#"{"a": 1}"#);
    }

    #[test]
    fn bad_status_is_rejected_with_the_field_named() {
        let text = r#"{"span_id":"s","server":"a","tool":"t","started_at":"2026-03-26T08:15:42Z",
            "duration_ms":1,"status":"ok"}"#;
        let err = serde_json::from_str::<ToolCallSpan>(text).expect_err("bad status");
        assert!(err.to_string().contains("unknown variant `ok`"), "{err}");
    }
}
