//! A tool's declared output schema, carried from the server's partition to the tool's.
//!
//! Tool lists are partitioned by server and calls by tool, so the detector that owns a server's baseline
//! is not the one that sees the tool's calls. When a baseline changes, the server's detector publishes one
//! declaration per changed tool on the spans topic, keyed `project/server/tool`, so it reaches the tool's
//! state in order with its calls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ProjectName, ServerName, Timestamp, ToolKey, ToolName};

fn schema_version() -> u32 {
    crate::SCHEMA_VERSION
}

/// The `type` of every declaration record, so it can never be read as a span.
pub const OUTPUT_DECLARATION: &str = "output_declaration";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputDeclaration {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    /// Always [`OUTPUT_DECLARATION`].
    #[serde(rename = "type")]
    pub kind: String,
    pub project: ProjectName,
    pub server: ServerName,
    pub tool: ToolName,
    /// The accepted baseline's `outputSchema` of the tool; `None` when it declares none (or was removed).
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    /// Hash (hex8) of the declared schema's canonical JSON; `None` with no schema.
    pub schema_hash: Option<String>,
    /// When the baseline changed: the ingest time of the record that changed it.
    pub declared_at: Timestamp,
    /// That record's offset in the server's stream: a declaration at or below the one a tool holds is old
    /// (a replay after a crash publishes it again) and changes nothing.
    pub sequence: u64,
}

impl OutputDeclaration {
    pub fn key(&self) -> ToolKey {
        crate::ServerKey::new(self.project.clone(), self.server.clone()).tool(self.tool.clone())
    }

    /// Whether a payload is a declaration (rather than a span): a cheap look before a full parse.
    pub fn looks_like(payload: &[u8]) -> bool {
        memchr::memmem::find(payload, br#""type":"output_declaration""#).is_some()
    }
}
