//! The worker's side of the ClickHouse store: batches, resume, rollups and the call identities it remembers.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use driftline_schemas::{EventStatus, InputPosition, Timestamp, ToolKey};
use serde_json::Value;

use super::rollups::{rollup_rows, AgentRollupRow, RollupScope, ToolRollupRow};
use super::rows::{
    AcceptanceRow, CallIdentityRow, CallRow, CommandRow, EventRow, NotificationRow, ServerRowDb, SettingRow,
    SignalRow, SnapshotRow, StateRow, StoredCallRow, ToolSchemaRow, ToolShapeDb, UpcomingRow,
};
use super::{last_per_key, try_all, ClickHouseStore, CONSUMER, POSITION};
use crate::retention;
use crate::rollup::{self, Rollup, RollupKey};
use crate::views::{ms, name, text};
use crate::{
    AppliedCommand, Batch, CallIdentity, DetectorState, DetectorStore, ProjectSettings, Resume, StoreError,
    StoredCall, StoredToolList, Streams,
};

/// Room for a run of snapshot keys listed as literals (server names are bounded by ingest's limits).
pub(super) const SNAPSHOT_LIST_QUERY_BYTES: &str = "16777216";

#[async_trait]
impl DetectorStore for ClickHouseStore {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        let mut events = batch.events.iter().map(EventRow::new).collect::<Result<Vec<_>, _>>()?;
        let pending: BTreeSet<&str> = batch.events.iter().map(|e| e.id.as_str()).collect();
        let elsewhere: Vec<String> = batch
            .event_updates
            .iter()
            .filter(|u| !pending.contains(u.id.as_str()))
            .map(|u| u.id.clone())
            .collect();
        let mut updated = self.stored_events(elsewhere).await?;
        for update in &batch.event_updates {
            let row = match events.iter_mut().find(|e| e.id == update.id) {
                Some(row) => row,
                None => match updated.iter_mut().find(|e| e.id == update.id) {
                    Some(row) => row,
                    None => {
                        tracing::warn!(id = %update.id, "status update for an unknown drift event ignored");
                        continue;
                    }
                },
            };
            row.status = name(&update.status)?;
            row.accepted_by = update.by.clone();
            row.accepted_at = (update.status == EventStatus::Accepted).then(|| ms(update.at));
        }
        events.extend(updated);
        let events = last_per_key(events, |e| e.id.clone());

        let acceptances = batch
            .acceptances
            .iter()
            .map(|a| {
                Ok(AcceptanceRow {
                    project: a.project.clone(),
                    server_name: a.server_name.clone(),
                    id: a.id.clone(),
                    previous_hash: a.previous_hash.clone(),
                    new_hash: a.new_hash.clone(),
                    accepted_by: a.accepted_by.clone(),
                    accepted_at: ms(a.accepted_at),
                    event_ids: text(&a.event_ids)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let servers = batch
            .servers
            .iter()
            .map(|s| {
                Ok(ServerRowDb {
                    project: s.project.clone(),
                    server_name: s.server_name.clone(),
                    status: name(&s.status)?,
                    schema_hash: s.schema_hash.clone(),
                    tool_count: s.tool_count,
                    last_seen: s.last_seen.map(ms),
                    note: s.note.clone(),
                    latency_ms: s.latency_ms,
                    context_tokens: s.context.map(|c| c.tokens),
                    context_bytes: s.context.map(|c| c.bytes),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let servers = last_per_key(servers, |s| (s.project.clone(), s.server_name.clone()));

        let mut snapshots = Vec::new();
        let mut schemas = Vec::new();
        for StoredToolList { project, server, captured_at, hash, tools, surfaces } in &batch.tool_lists {
            for tool in tools.declared() {
                let input = tool.input_schema.unwrap_or_else(|| Value::Object(Default::default()));
                schemas.push(ToolSchemaRow {
                    project: project.clone(),
                    server_name: server.clone(),
                    schema_hash: hash.clone(),
                    tool_name: tool.name,
                    description: tool.description,
                    input_schema: text(&input)?,
                    captured_at: ms(*captured_at),
                });
            }
            snapshots.push(SnapshotRow {
                project: project.clone(),
                server_name: server.clone(),
                schema_hash: hash.clone(),
                captured_at: ms(*captured_at),
                tools: text(tools)?,
                surfaces: surfaces.as_deref().map(text).transpose()?,
            });
        }
        let schemas = last_per_key(schemas, |s| {
            (s.project.clone(), s.server_name.clone(), s.schema_hash.clone(), s.tool_name.clone())
        });
        let snapshots =
            last_per_key(snapshots, |s| (s.project.clone(), s.server_name.clone(), s.schema_hash.clone()));

        let signals = batch
            .signals
            .iter()
            .map(|s| {
                Ok(SignalRow {
                    project: s.project.clone(),
                    server: s.server.clone(),
                    tool: s.tool.clone(),
                    id: s.id.clone(),
                    detected_at: ms(s.detected_at),
                    shape_hash: s.shape_hash.clone(),
                    signal: text(s)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let shapes = batch
            .tool_shapes
            .iter()
            .map(|row| {
                Ok(ToolShapeDb {
                    project: row.project.clone(),
                    server: row.shape.server.clone(),
                    tool: row.shape.tool.clone(),
                    shape: text(&row.shape)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let shapes = last_per_key(shapes, |s| (s.project.clone(), s.server.clone(), s.tool.clone()));

        let settings = batch
            .settings
            .iter()
            .map(|ProjectSettings { project, thresholds }| {
                Ok(SettingRow { project: project.clone(), thresholds: text(thresholds)? })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let settings = last_per_key(settings, |s| s.project.clone());

        let commands = batch
            .applied_commands
            .iter()
            .map(|AppliedCommand { id, at, result }| {
                Ok(CommandRow { id: id.clone(), applied_at: ms(*at), result: text(result)? })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let calls = batch
            .calls
            .iter()
            .map(|StoredCall { id, call, .. }| {
                Ok(CallRow {
                    project: call.project.to_string(),
                    server: call.server.to_string(),
                    tool: call.tool.to_string(),
                    ingested_at: ms(call.ingested_at),
                    id: id.clone(),
                    span_id: call.span_id.clone(),
                    session_id: call.session_id.clone(),
                    agent_name: call.agent_name.clone(),
                    started_at: ms(call.started_at),
                    duration_ms: call.duration_ms,
                    status: name(&call.status)?,
                    error: call.error.clone(),
                    shape_outcome: call.shape_outcome.as_str().to_owned(),
                    shape_hash: call.shape_hash.clone(),
                    compact_bytes: call.compact_bytes,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let identities: Vec<CallIdentityRow> = batch
            .call_identities
            .iter()
            .map(|CallIdentity { identity, position, received_at: at }| CallIdentityRow {
                identity: identity.clone(),
                partition: position.partition,
                offset: position.offset,
                ingested_at: ms(*at),
            })
            .collect();
        let notifications = batch
            .notifications
            .iter()
            .map(|n| {
                Ok(NotificationRow {
                    id: n.id.clone(),
                    project: n.project.clone(),
                    server_name: n.server_name.clone(),
                    kind: n.kind.as_str().to_owned(),
                    at: ms(n.at),
                    body: text(n)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let upcoming = batch
            .upcoming
            .iter()
            .map(|u| {
                Ok(UpcomingRow {
                    id: u.id.clone(),
                    project: u.project.clone(),
                    server_name: u.server_name.clone(),
                    package: u.package.clone(),
                    version: u.version.clone(),
                    detected_at: ms(u.detected_at),
                    body: text(u)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // Every output but the traffic a reader counts and the views that sum outputs up is written at once
        // (each table its own insert).
        try_all(vec![
            Box::pin(self.insert("schema_drift_events", &events)),
            Box::pin(self.insert("baseline_acceptances", &acceptances)),
            Box::pin(self.insert("tool_schemas", &schemas)),
            Box::pin(self.insert("server_snapshots", &snapshots)),
            Box::pin(self.insert("shape_drift_signals", &signals)),
            Box::pin(self.insert("settings", &settings)),
            Box::pin(self.insert("applied_commands", &commands)),
            Box::pin(self.insert("call_identities_by_stream", &identities)),
            Box::pin(self.insert("notifications", &notifications)),
            Box::pin(self.insert("upcoming_releases", &upcoming)),
        ])
        .await?;
        // Rollup rows are whole values: a row stored by a batch that crashed before its positions is
        // replaced by the same row, and its calls are skipped when replayed (see `rollup`).
        let (tool_rollups, agent_rollups) = rollup_rows(&batch.rollups);
        // The traffic and the views (a server's row, a tool's shape view) come after every other output: a
        // reader that sees a batch's calls, or a view that counts them, sees all of its signals and events
        // (written beside them, a tool's view showed 18 checked calls while its signal was not readable yet).
        try_all(vec![
            Box::pin(self.insert("servers", &servers)),
            Box::pin(self.insert("tool_shapes", &shapes)),
            Box::pin(self.insert("tool_rollups", &tool_rollups)),
            Box::pin(self.insert("agent_rollups", &agent_rollups)),
            Box::pin(self.insert("tool_calls", &calls)),
        ])
        .await?;

        // Forgotten keys' rows go after the batch's own (a row it wrote for a key it then forgot too).
        self.forget_views(&batch.forgotten).await?;

        // Last, in one insert: the state and the positions that the outputs above include.
        let mut state: Vec<StateRow> = batch
            .states
            .into_iter()
            .map(|row| StateRow {
                consumer: CONSUMER.into(),
                kind: row.kind,
                key: row.key,
                stream: row.stream,
                state: row.state,
            })
            .collect();
        state.extend(batch.positions.iter().map(|(stream, offset)| StateRow {
            consumer: CONSUMER.into(),
            kind: POSITION.into(),
            key: stream.to_string(),
            stream: *stream,
            state: offset.to_string(),
        }));
        // A forgotten key's state is replaced by an empty one (resume skips those), in the insert of the
        // positions: forgetting is stored exactly when the batch is.
        state.extend(batch.forgotten.iter().map(|forgotten| {
            let (kind, key) = forgotten.state_key();
            StateRow { consumer: CONSUMER.into(), kind: kind.into(), key, stream: 0, state: String::new() }
        }));
        let state = last_per_key(state, |s| (s.kind.clone(), s.key.clone()));
        self.insert("detector_state", &state).await
    }

    async fn rollups(&self, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        // One range read per project and table over the keys' tools and times (the sort key's prefix), then
        // only the rows asked for: a list of thousands of whole keys would be read key by key.
        let wanted: BTreeSet<&RollupKey> = keys.iter().collect();
        let mut scopes: BTreeMap<(&str, bool), RollupScope<'_>> = BTreeMap::new();
        for key in keys {
            let scope = scopes.entry((key.project.as_str(), key.agent.is_some())).or_default();
            scope.tools.insert((key.server.as_str(), key.tool.as_str()));
            if let Some(agent) = &key.agent {
                scope.agents.insert(agent.as_str());
            }
            scope.from_ms = scope.from_ms.min(key.bucket_ms);
            scope.to_ms = scope.to_ms.max(key.bucket_ms);
        }
        let mut rows = Vec::new();
        for ((project, agents), scope) in scopes {
            let tools: Vec<(&str, &str)> = scope.tools.into_iter().collect();
            for chunk in tools.chunks(1000) {
                let found = if agents {
                    let agent_names: Vec<&str> = scope.agents.iter().copied().collect();
                    let found: Vec<AgentRollupRow> = self
                        .client
                        .query(
                            "SELECT ?fields FROM agent_rollups FINAL WHERE project = ? AND (server, tool) IN ?
                               AND bucket_seconds IN (60, 3600) AND bucket_ms >= ? AND bucket_ms <= ? AND agent IN ?",
                        )
                        .bind(project)
                        .bind(chunk)
                        .bind(scope.from_ms)
                        .bind(scope.to_ms)
                        .bind(agent_names)
                        .fetch_all()
                        .await?;
                    found.into_iter().map(AgentRollupRow::into_rollup).collect::<Result<Vec<_>, _>>()?
                } else {
                    let found: Vec<ToolRollupRow> = self
                        .client
                        .query(
                            "SELECT ?fields FROM tool_rollups FINAL WHERE project = ? AND (server, tool) IN ?
                               AND bucket_seconds IN (60, 3600) AND bucket_ms >= ? AND bucket_ms <= ?",
                        )
                        .bind(project)
                        .bind(chunk)
                        .bind(scope.from_ms)
                        .bind(scope.to_ms)
                        .fetch_all()
                        .await?;
                    found.into_iter().map(ToolRollupRow::into_rollup).collect::<Result<Vec<_>, _>>()?
                };
                rows.extend(found.into_iter().filter(|row| wanted.contains(&row.key)));
            }
        }
        Ok(rows)
    }

    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        mut backfill: rollup::Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        for (key, through) in tools {
            let (project, server, tool) = (key.project.as_str(), key.server.as_str(), key.tool.as_str());
            // Streamed: a tool's calls of 31 days need not fit in memory, only its rollup rows.
            let mut cursor = self
                .client
                .query(
                    "SELECT ?fields FROM tool_calls FINAL WHERE project = ? AND server = ? AND tool = ?
                       AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))",
                )
                .bind(project)
                .bind(server)
                .bind(tool)
                .bind(backfill.since_ms())
                .fetch::<StoredCallRow>()?;
            while let Some(row) = cursor.next().await? {
                let call = rollup::CallFacts {
                    project,
                    server,
                    tool,
                    agent: row.agent_name.as_deref(),
                    session: row.session_id.as_deref(),
                    started_ms: row.started_at,
                    ingested_ms: row.ingested_at,
                    duration_ms: row.duration_ms,
                    error: row.status == "error",
                    outcome: crate::stored_outcome(&row.shape_outcome),
                    shape_hash: row.shape_hash.as_deref(),
                    argument_shape: None,
                };
                backfill.add(&call, *through);
            }
        }
        Ok(backfill.finish())
    }

    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        let query = match streams {
            Streams::All => self
                .client
                .query("SELECT ?fields FROM detector_state FINAL WHERE consumer = ? AND state != ''")
                .bind(CONSUMER),
            Streams::Only(streams) => self
                .client
                .query("SELECT ?fields FROM detector_state FINAL WHERE consumer = ? AND stream IN ? AND state != ''")
                .bind(CONSUMER)
                .bind(streams),
        };
        let rows: Vec<StateRow> = query.fetch_all().await?;
        let mut resume = Resume::default();
        for row in rows {
            if row.kind == POSITION {
                let bad = |text: &str| StoreError::Corrupt(format!("bad stored position {text}"));
                // Offsets pass 2^32 within days on a busy partition: read them as u64, streams as u32.
                let stream: u32 = row.key.parse().map_err(|_| bad(&row.key))?;
                let offset: u64 = row.state.parse().map_err(|_| bad(&row.state))?;
                resume.positions.insert(stream, offset);
            } else {
                resume.states.push(DetectorState {
                    kind: row.kind,
                    key: row.key,
                    stream: row.stream,
                    state: row.state,
                });
            }
        }
        let settings: Vec<SettingRow> =
            self.client.query("SELECT ?fields FROM settings FINAL").fetch_all().await?;
        resume.settings = settings
            .into_iter()
            .map(|row| Ok((row.project, serde_json::from_str(&row.thresholds)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(resume)
    }

    fn repeat_lookup(&self) -> crate::RepeatLookup {
        crate::RepeatLookup::Remember
    }

    async fn recent_identities(
        &self,
        streams: Streams<'_>,
        since: Timestamp,
        most_per_stream: usize,
    ) -> Result<Vec<(String, InputPosition, Timestamp)>, StoreError> {
        let streams: Vec<u32> = match streams {
            Streams::Only(streams) => streams.to_vec(),
            // The sort key's first column: read without the rest of the rows.
            Streams::All => {
                self.client
                    .query(
                        "SELECT DISTINCT partition FROM call_identities_by_stream
                     WHERE ingested_at >= fromUnixTimestamp64Milli(toInt64(?))",
                    )
                    .bind(ms(since))
                    .fetch_all()
                    .await?
            }
        };
        // One query per stream, newest first along the sort key (stream, time): ClickHouse reads it in order
        // and stops at the limit, so a takeover reads what memory holds, not the stream's whole window
        // (`LIMIT … BY` over several streams read and sorted all of it: 4.7 s against 0.3 s for 2 million
        // of one stream's 50 million identities).
        let mut rows: Vec<CallIdentityRow> = Vec::new();
        for stream in streams {
            let found: Vec<CallIdentityRow> = self
                .client
                .query(
                    "SELECT identity, partition, offset, ingested_at FROM call_identities_by_stream
                     WHERE partition = ? AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))
                     ORDER BY partition DESC, ingested_at DESC LIMIT ?",
                )
                .bind(stream)
                .bind(ms(since))
                .bind(most_per_stream as u64)
                .fetch_all()
                .await?;
            rows.extend(found);
        }
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let at = Timestamp::from_millis(row.ingested_at)?;
                Some((row.identity, InputPosition { partition: row.partition, offset: row.offset }, at))
            })
            .collect())
    }

    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        // Not the worker's way here (`RepeatLookup::Remember`): a full read of the window, for tools.
        let wanted: std::collections::HashSet<&String> = identities.iter().collect();
        let rows = self.recent_identities(Streams::All, since, usize::MAX / 2).await?;
        Ok(rows
            .into_iter()
            .filter(|(identity, _, _)| wanted.contains(identity))
            .map(|(identity, position, _)| (identity, position))
            .collect())
    }

    /// The tables' TTLs expire rows by age; what a TTL cannot say is "all but a server's newest
    /// [`retention::SNAPSHOTS_PER_SERVER`] snapshots": those go here, a run of them at a time, from
    /// `tool_schemas` and `server_snapshots` by the same list (a snapshot seen again since — a list
    /// changed back — ranks by its newer row and stays). Answers the rows removed from both.
    async fn expire(&self, _now: Timestamp) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let older: Vec<(String, String, String)> = self
                .client
                .query(
                    "SELECT project, server_name, schema_hash FROM (
                         SELECT project, server_name, schema_hash,
                                row_number() OVER (PARTITION BY project, server_name ORDER BY captured_at DESC) AS rank
                         FROM server_snapshots FINAL)
                     WHERE rank > ? LIMIT ?",
                )
                .bind(retention::SNAPSHOTS_PER_SERVER)
                .bind(retention::RUN)
                .fetch_all()
                .await?;
            if older.is_empty() {
                return Ok(removed);
            }
            for table in ["tool_schemas", "server_snapshots"] {
                let rows: u64 = self
                    .client
                    .query(&format!(
                        "SELECT count() FROM {table} WHERE (project, server_name, schema_hash) IN ?"
                    ))
                    .with_setting("max_query_size", SNAPSHOT_LIST_QUERY_BYTES)
                    .bind(&older)
                    .fetch_one()
                    .await?;
                // A lightweight delete: the rows are masked at once and go with their parts' next merge.
                self.client
                    .query(&format!("DELETE FROM {table} WHERE (project, server_name, schema_hash) IN ?"))
                    .with_setting("max_query_size", SNAPSHOT_LIST_QUERY_BYTES)
                    .bind(&older)
                    .execute()
                    .await?;
                removed += rows;
            }
            if (older.len() as i64) < retention::RUN {
                return Ok(removed);
            }
        }
    }
}
