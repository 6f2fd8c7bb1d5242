//! Writing a batch in one transaction: every row it carries, then the keys it forgets.

use driftline_schemas::EventStatus;
use rusqlite::{params, Transaction};
use serde_json::Value;

use super::rollups::write_rollups;
use super::{identity_key, WORKER};
use crate::views::{ms, name, text};
use crate::{
    AppliedCommand, Batch, CallIdentity, Forgotten, ProjectSettings, StoreError, StoredCall, StoredToolList,
};

/// Removes forgotten keys' state and the rows that show them — after the batch's other rows, so a row the
/// batch itself wrote for a key it then forgot goes too.
pub(super) fn forget(transaction: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for forgotten in &batch.forgotten {
        let (kind, key) = forgotten.state_key();
        transaction
            .prepare_cached("DELETE FROM detector_state WHERE kind = ?1 AND key = ?2")?
            .execute(params![kind, key])?;
        match forgotten {
            Forgotten::Tool(tool) => {
                transaction
                    .prepare_cached(
                        "DELETE FROM tool_shapes WHERE project = ?1 AND server = ?2 AND tool = ?3",
                    )?
                    .execute(params![tool.project.as_str(), tool.server.as_str(), tool.tool.as_str()])?;
            }
            Forgotten::Server(server) => {
                for table in ["servers", "tool_schemas"] {
                    transaction
                        .prepare_cached(&format!(
                            "DELETE FROM {table} WHERE project = ?1 AND server_name = ?2"
                        ))?
                        .execute(params![server.project.as_str(), server.server.as_str()])?;
                }
            }
        }
    }
    Ok(())
}

pub(super) fn write_batch(transaction: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for row in &batch.states {
        transaction
            .prepare_cached(
                "INSERT INTO detector_state (kind, key, stream, state) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, key) DO UPDATE SET stream = excluded.stream, state = excluded.state",
            )?
            .execute(params![row.kind, row.key, row.stream, row.state])?;
    }
    for event in &batch.events {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO schema_drift_events (id, project, server_name, detected_at, previous_hash,
                 current_hash, status, max_classification, max_severity, accepted_by, accepted_at, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?.execute(
            params![
                event.id,
                event.project,
                event.server_name,
                ms(event.detected_at),
                event.previous_hash,
                event.current_hash,
                name(&event.status)?,
                event.max_classification.map(|c| c.as_str()),
                event.max_severity.map(|s| s.as_str()),
                event.accepted_by,
                event.accepted_at.map(ms),
                text(event)?,
            ],
        )?;
    }
    for update in &batch.event_updates {
        transaction.prepare_cached(
            "UPDATE schema_drift_events SET status = ?2, accepted_by = ?3, accepted_at = ?4 WHERE id = ?1",
        )?.execute(
            params![
                update.id,
                name(&update.status)?,
                update.by,
                (update.status == EventStatus::Accepted).then(|| ms(update.at))
            ],
        )?;
    }
    for acceptance in &batch.acceptances {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO baseline_acceptances (id, project, server_name, previous_hash, new_hash,
                 accepted_by, accepted_at, event_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?.execute(
            params![
                acceptance.id,
                acceptance.project,
                acceptance.server_name,
                acceptance.previous_hash,
                acceptance.new_hash,
                acceptance.accepted_by,
                ms(acceptance.accepted_at),
                text(&acceptance.event_ids)?,
            ],
        )?;
    }
    for server in &batch.servers {
        transaction.prepare_cached(
            "INSERT INTO servers (project, server_name, status, schema_hash, tool_count, last_seen, note, latency_ms,
                 context_tokens, context_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (project, server_name) DO UPDATE SET status = excluded.status,
                 schema_hash = excluded.schema_hash, tool_count = excluded.tool_count,
                 last_seen = excluded.last_seen, note = excluded.note, latency_ms = excluded.latency_ms,
                 context_tokens = excluded.context_tokens, context_bytes = excluded.context_bytes",
        )?.execute(
            params![
                server.project,
                server.server_name,
                name(&server.status)?,
                server.schema_hash,
                server.tool_count,
                server.last_seen.map(ms),
                server.note,
                server.latency_ms,
                server.context.map(|c| c.tokens as i64),
                server.context.map(|c| c.bytes as i64),
            ],
        )?;
    }
    for StoredToolList { project, server, captured_at, hash, tools, surfaces } in &batch.tool_lists {
        transaction
            .prepare_cached("DELETE FROM tool_schemas WHERE project = ?1 AND server_name = ?2")?
            .execute(params![project, server])?;
        for tool in tools.declared() {
            let input = tool.input_schema.unwrap_or_else(|| Value::Object(Default::default()));
            transaction.prepare_cached(
                "INSERT OR REPLACE INTO tool_schemas (project, server_name, tool_name, description, input_schema,
                     captured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?.execute(
                params![
                    project,
                    server,
                    tool.name,
                    tool.description,
                    text(&input)?,
                    ms(*captured_at)
                ],
            )?;
        }
        transaction
            .prepare_cached(
                // A list seen again (changed back) is as new as its latest capture.
                "INSERT INTO server_snapshots (project, server_name, schema_hash, captured_at, tools, surfaces)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (project, server_name, schema_hash)
             DO UPDATE SET captured_at = max(captured_at, excluded.captured_at)",
            )?
            .execute(params![
                project,
                server,
                hash,
                ms(*captured_at),
                text(tools)?,
                surfaces.as_deref().map(text).transpose()?
            ])?;
    }
    for notification in &batch.notifications {
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO notifications (id, project, server_name, kind, at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                notification.id,
                notification.project,
                notification.server_name,
                notification.kind.as_str(),
                ms(notification.at),
                text(notification)?
            ])?;
    }
    for upcoming in &batch.upcoming {
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO upcoming_releases (id, project, server_name, package, version, detected_at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                upcoming.id,
                upcoming.project,
                upcoming.server_name,
                upcoming.package,
                upcoming.version,
                ms(upcoming.detected_at),
                text(upcoming)?
            ])?;
    }
    for CallIdentity { identity, position, received_at: ingested_at } in &batch.call_identities {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO call_identities (identity, partition, offset, ingested_at) VALUES (?1, ?2, ?3, ?4)",
        )?.execute(
            params![identity_key(identity), position.partition, position.offset as i64, ms(*ingested_at)],
        )?;
    }
    write_rollups(transaction, &batch.rollups)?;
    for StoredCall { id, position, call } in &batch.calls {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO tool_calls (partition, offset, id, project, server, tool, span_id, session_id,
                 agent_name, started_at, ingested_at, duration_ms, status, error, shape_outcome, shape_hash,
                 compact_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )?.execute(
            params![
                position.partition,
                position.offset as i64,
                id,
                call.project.as_str(),
                call.server.as_str(),
                call.tool.as_str(),
                call.span_id,
                call.session_id,
                call.agent_name,
                ms(call.started_at),
                ms(call.ingested_at),
                call.duration_ms,
                name(&call.status)?,
                call.error,
                call.shape_outcome.as_str(),
                call.shape_hash,
                call.compact_bytes.map(|b| b as i64),
            ],
        )?;
    }
    for signal in &batch.signals {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO shape_drift_signals (id, project, server, tool, detected_at, shape_hash, signal)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?.execute(
            params![
                signal.id,
                signal.project,
                signal.server,
                signal.tool,
                ms(signal.detected_at),
                signal.shape_hash,
                text(signal)?
            ],
        )?;
    }
    for row in &batch.tool_shapes {
        transaction
            .prepare_cached(
                "INSERT INTO tool_shapes (project, server, tool, shape) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project, server, tool) DO UPDATE SET shape = excluded.shape",
            )?
            .execute(params![row.project, row.shape.server, row.shape.tool, text(&row.shape)?])?;
    }
    for ProjectSettings { project, thresholds } in &batch.settings {
        transaction
            .prepare_cached(
                "INSERT INTO settings (project, thresholds) VALUES (?1, ?2)
             ON CONFLICT (project) DO UPDATE SET thresholds = excluded.thresholds",
            )?
            .execute(params![project, text(thresholds)?])?;
    }
    for AppliedCommand { id, at, result } in &batch.applied_commands {
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO applied_commands (id, applied_at, result) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![id, ms(*at), text(result)?])?;
    }
    for (partition, offset) in &batch.positions {
        transaction
            .prepare_cached(
                "INSERT INTO consumer_positions (consumer, partition, offset) VALUES (?1, ?2, ?3)
             ON CONFLICT (consumer, partition) DO UPDATE SET offset = excluded.offset",
            )?
            .execute(params![WORKER, partition, *offset as i64])?;
    }
    Ok(())
}
