//! The rows of the ClickHouse tables as the `clickhouse` crate reads and writes them.

use clickhouse::Row;
use driftline_schemas::SchemaDriftEvent;
use serde::{Deserialize, Serialize};

use crate::views::{ms, name, parse_name, text, timestamp};
use crate::StoreError;

/// `upcoming_releases`: the release as JSON, with the columns a query filters on.
#[derive(Row, Serialize, Deserialize)]
pub(super) struct UpcomingRow {
    pub(super) id: String,
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) package: String,
    pub(super) version: String,
    /// DateTime64(3): milliseconds.
    pub(super) detected_at: i64,
    pub(super) body: String,
}

#[derive(Row, Serialize)]
pub(super) struct NotificationRow {
    pub(super) id: String,
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) kind: String,
    /// DateTime64(3): milliseconds.
    pub(super) at: i64,
    pub(super) body: String,
}

#[derive(Row, Serialize)]
pub(super) struct NotifiedRow {
    pub(super) webhook: String,
    pub(super) id: String,
    pub(super) outcome: String,
    pub(super) sent_at: i64,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct CallIdentityRow {
    pub(super) identity: String,
    pub(super) partition: u32,
    pub(super) offset: u64,
    /// DateTime64(3): milliseconds.
    pub(super) ingested_at: i64,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct EventRow {
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) id: String,
    pub(super) detected_at: i64,
    pub(super) previous_hash: String,
    pub(super) current_hash: String,
    pub(super) changes: String,
    pub(super) status: String,
    pub(super) max_classification: Option<String>,
    pub(super) max_severity: Option<String>,
    pub(super) accepted_by: Option<String>,
    pub(super) accepted_at: Option<i64>,
    pub(super) event: String,
}

impl EventRow {
    pub(super) fn new(event: &SchemaDriftEvent) -> Result<Self, StoreError> {
        Ok(EventRow {
            project: event.project.clone(),
            server_name: event.server_name.clone(),
            id: event.id.clone(),
            detected_at: ms(event.detected_at),
            previous_hash: event.previous_hash.clone(),
            current_hash: event.current_hash.clone(),
            changes: text(&event.changes)?,
            status: name(&event.status)?,
            max_classification: event.max_classification.map(|c| c.as_str().to_owned()),
            max_severity: event.max_severity.map(|s| s.as_str().to_owned()),
            accepted_by: event.accepted_by.clone(),
            accepted_at: event.accepted_at.map(ms),
            event: text(event)?,
        })
    }

    /// The event with its lifecycle columns (updated after detection) applied.
    pub(super) fn into_event(self) -> Result<SchemaDriftEvent, StoreError> {
        let mut event: SchemaDriftEvent = serde_json::from_str(&self.event)?;
        event.status = parse_name(&self.status)?;
        event.accepted_by = self.accepted_by;
        event.accepted_at = self.accepted_at.map(timestamp).transpose()?;
        Ok(event)
    }
}

#[derive(Row, Serialize)]
pub(super) struct AcceptanceRow {
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) id: String,
    pub(super) previous_hash: String,
    pub(super) new_hash: String,
    pub(super) accepted_by: String,
    pub(super) accepted_at: i64,
    pub(super) event_ids: String,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct ServerRowDb {
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) status: String,
    pub(super) schema_hash: Option<String>,
    pub(super) tool_count: u32,
    pub(super) last_seen: Option<i64>,
    pub(super) note: Option<String>,
    pub(super) latency_ms: Option<f64>,
    pub(super) context_tokens: Option<u64>,
    pub(super) context_bytes: Option<u64>,
}

#[derive(Row, Serialize)]
pub(super) struct SnapshotRow {
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) schema_hash: String,
    pub(super) captured_at: i64,
    pub(super) tools: String,
    pub(super) surfaces: Option<String>,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct ToolSchemaRow {
    pub(super) project: String,
    pub(super) server_name: String,
    pub(super) schema_hash: String,
    pub(super) tool_name: String,
    pub(super) description: Option<String>,
    pub(super) input_schema: String,
    pub(super) captured_at: i64,
}

#[derive(Row, Serialize)]
pub(super) struct CallRow {
    pub(super) project: String,
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) ingested_at: i64,
    pub(super) id: String,
    pub(super) span_id: String,
    pub(super) session_id: Option<String>,
    pub(super) agent_name: Option<String>,
    pub(super) started_at: i64,
    pub(super) duration_ms: f64,
    pub(super) status: String,
    pub(super) error: Option<String>,
    pub(super) shape_outcome: String,
    pub(super) shape_hash: Option<String>,
    pub(super) compact_bytes: Option<u64>,
}

#[derive(Row, Serialize)]
pub(super) struct SignalRow {
    pub(super) project: String,
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) id: String,
    pub(super) detected_at: i64,
    pub(super) shape_hash: String,
    pub(super) signal: String,
}

#[derive(Row, Serialize)]
pub(super) struct ToolShapeDb {
    pub(super) project: String,
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) shape: String,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct SettingRow {
    pub(super) project: String,
    pub(super) thresholds: String,
}

#[derive(Row, Serialize)]
pub(super) struct CommandRow {
    pub(super) id: String,
    pub(super) applied_at: i64,
    pub(super) result: String,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct StateRow {
    pub(super) consumer: String,
    pub(super) kind: String,
    pub(super) key: String,
    pub(super) stream: u32,
    pub(super) state: String,
}

/// A stored call as the drill-down lists it.
#[derive(Row, Deserialize)]
pub(super) struct RecentCallRow {
    pub(super) span_id: String,
    pub(super) session_id: Option<String>,
    pub(super) agent_name: Option<String>,
    pub(super) started_at: i64,
    pub(super) ingested_at: i64,
    pub(super) duration_ms: f64,
    pub(super) status: String,
    pub(super) error: Option<String>,
    pub(super) shape_outcome: String,
    pub(super) shape_hash: Option<String>,
    pub(super) compact_bytes: Option<u64>,
}

/// What a rollup keeps of a stored call (rebuilding rollups over calls stored before they existed).
#[derive(Row, Deserialize)]
pub(super) struct StoredCallRow {
    pub(super) agent_name: Option<String>,
    pub(super) session_id: Option<String>,
    pub(super) started_at: i64,
    pub(super) ingested_at: i64,
    pub(super) duration_ms: f64,
    pub(super) status: String,
    pub(super) shape_outcome: String,
    pub(super) shape_hash: Option<String>,
}

impl From<ServerRowDb> for crate::views::StoredServer {
    fn from(row: ServerRowDb) -> Self {
        let ServerRowDb {
            project: _,
            server_name,
            status,
            schema_hash,
            tool_count,
            last_seen,
            note,
            latency_ms,
            context_tokens,
            context_bytes,
        } = row;
        crate::views::StoredServer {
            server_name,
            status,
            schema_hash,
            tool_count,
            last_seen,
            note,
            latency_ms,
            context_tokens,
            context_bytes,
        }
    }
}

impl From<ToolSchemaRow> for crate::views::StoredToolSchema {
    fn from(row: ToolSchemaRow) -> Self {
        let ToolSchemaRow {
            project: _,
            server_name,
            schema_hash: _,
            tool_name,
            description,
            input_schema,
            captured_at,
        } = row;
        crate::views::StoredToolSchema { server_name, tool_name, description, input_schema, captured_at }
    }
}
