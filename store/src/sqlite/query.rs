//! The API's side of the SQLite store: every query of DESIGN.md §7, each within the caller's project.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use driftline_schemas::api::{
    CallBucket, DeadLetterCount, DriftImpact, RecentCall, ReturnValueStats, ServerHealth, SignalGroup,
    ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{DetectorThresholds, SchemaDriftEvent, ServerSurfaces, ShapeDriftSignal, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::{event_from_row, text_at, SqliteStore};
use crate::rollup;
use crate::views::{self, ms, timestamp};
use crate::{BucketQuery, ImpactQuery, QueryStore, StoreError};

/// The tool rows of a window (minute rows at its start, hour rows after), as a subquery: `?1` project,
/// `?2` the window's start, `?3` where hour rows begin.
pub(super) const TOOL_WINDOW: &str = "(SELECT * FROM tool_rollups WHERE project = ?1 AND bucket_seconds = 3600 AND bucket_ms >= ?3
     UNION ALL
     SELECT * FROM tool_rollups WHERE project = ?1 AND bucket_seconds = 60 AND bucket_ms >= ?2 AND bucket_ms < ?3)";

pub(super) fn open_counts(
    connection: &Connection,
    project: &str,
) -> Result<HashMap<String, views::OpenDrift>, StoreError> {
    let mut select = connection.prepare_cached(
        "SELECT server_name, max_classification, max_severity FROM schema_drift_events
         WHERE project = ?1 AND status = 'open'",
    )?;
    let events = select
        .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut select = connection.prepare_cached(
        "SELECT e.server_name, json_extract(c.value, '$.classification'), COUNT(*)
         FROM schema_drift_events e, json_each(e.event, '$.changes') c
         WHERE e.project = ?1 AND e.status = 'open' GROUP BY 1, 2
         UNION ALL
         SELECT e.server_name, o.key, SUM(o.value)
         FROM schema_drift_events e, json_each(e.event, '$.omitted_changes') o
         WHERE e.project = ?1 AND e.status = 'open' GROUP BY 1, 2",
    )?;
    let changes = select
        .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(views::open_counts(events, changes))
}

pub(super) fn signal_groups(
    connection: &Connection,
    project: &str,
    filter: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<SignalGroup>, StoreError> {
    let sql = format!(
        "SELECT signal FROM shape_drift_signals WHERE project = ?1 {filter} ORDER BY detected_at, id"
    );
    let mut select = connection.prepare(&sql)?;
    let mut all_args: Vec<&dyn rusqlite::ToSql> = vec![&project];
    all_args.extend_from_slice(args);
    let rows = select.query_map(all_args.as_slice(), |row| row.get::<_, String>(0))?;
    views::signal_groups(rows.collect::<Result<Vec<_>, _>>()?)
}

#[async_trait]
impl QueryStore for SqliteStore {
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError> {
        let project = project.to_owned();
        self.read(move |connection| {
            let open = open_counts(connection, &project)?;
            let mut select = connection.prepare_cached(
                "SELECT server_name, status, schema_hash, tool_count, last_seen, note, latency_ms, context_tokens,
                     context_bytes FROM servers WHERE project = ?1 ORDER BY server_name",
            )?;
            let rows = select.query_map(params![project], |row| {
                Ok(views::StoredServer {
                    server_name: row.get(0)?,
                    status: row.get(1)?,
                    schema_hash: row.get(2)?,
                    tool_count: row.get(3)?,
                    last_seen: row.get(4)?,
                    note: row.get(5)?,
                    latency_ms: row.get(6)?,
                    context_tokens: row.get::<_, Option<i64>>(7)?.map(|n| n.max(0) as u64),
                    context_bytes: row.get::<_, Option<i64>>(8)?.map(|n| n.max(0) as u64),
                })
            })?;
            let mut servers = Vec::new();
            for row in rows {
                servers.push(views::server_health(row?, &open)?);
            }
            let mut traced =
                connection.prepare_cached("SELECT DISTINCT server FROM tool_shapes WHERE project = ?1")?;
            let traced = traced.query_map(params![project], |row| row.get::<_, String>(0))?;
            let servers = views::with_trace_only_servers(servers, traced.collect::<Result<_, _>>()?);
            // The LIKE only narrows the rows read; the JSON decides.
            let mut mismatched = connection.prepare_cached(
                "SELECT server, tool, shape FROM tool_shapes WHERE project = ?1 AND shape LIKE '%\"mismatch\"%'",
            )?;
            let mismatched = mismatched.query_map(params![project], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })?;
            let mismatched = views::contract_mismatches(mismatched.collect::<Result<Vec<_>, _>>()?)?;
            Ok(views::with_contract_mismatches(servers, mismatched))
        })
        .await
    }

    async fn drift_history(
        &self,
        project: &str,
        server: &str,
        limit: u32,
        list_bytes: usize,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT event, status, accepted_by, accepted_at FROM schema_drift_events
                 WHERE project = ?1 AND server_name = ?2 ORDER BY detected_at DESC, id DESC LIMIT ?3",
            )?;
            let mut rows = select.query(params![project, server, limit])?;
            // One row at a time, its text borrowed from SQLite: only the events answered with their lists
            // are held whole.
            let mut history = views::History::new(list_bytes);
            while let Some(row) = rows.next()? {
                let json = text_at(row, 0)?;
                history.push(json.len(), event_from_row(json, row)?);
            }
            Ok(history.into_events())
        })
        .await
    }

    async fn drift_event(
        &self,
        project: &str,
        server: &str,
        id: &str,
    ) -> Result<Option<SchemaDriftEvent>, StoreError> {
        let (project, server, id) = (project.to_owned(), server.to_owned(), id.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT event, status, accepted_by, accepted_at FROM schema_drift_events
                 WHERE project = ?1 AND server_name = ?2 AND id = ?3",
            )?;
            let mut rows = select.query(params![project, server, id])?;
            match rows.next()? {
                Some(row) => Ok(Some(event_from_row(text_at(row, 0)?, row)?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        let (project, server, tool) =
            (query.project.to_owned(), query.server.to_owned(), query.tool.to_owned());
        let window = rollup::window(ms(query.now), query.hours);
        let (events, rows) = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT json_extract(event, '$.changes') FROM schema_drift_events
                     WHERE project = ?1 AND server_name = ?2 AND status = 'open'",
                )?;
                let events: Vec<String> =
                    select.query_map(params![project, server], |row| row.get(0))?.collect::<Result<_, _>>()?;
                let mut select = connection.prepare_cached(
                    "SELECT agent, calls, errors, duration_sum, last_call_ms, sessions, arguments FROM agent_rollups
                     WHERE project = ?1 AND server = ?2 AND tool = ?3 AND bucket_seconds = 3600 AND bucket_ms >= ?5
                     UNION ALL
                     SELECT agent, calls, errors, duration_sum, last_call_ms, sessions, arguments FROM agent_rollups
                     WHERE project = ?1 AND server = ?2 AND tool = ?3 AND bucket_seconds = 60
                       AND bucket_ms >= ?4 AND bucket_ms < ?5",
                )?;
                let rows: Vec<rollup::AgentRow> = select
                    .query_map(
                        params![project, server, tool, window.from_ms, window.hours_from_ms],
                        |row| {
                            Ok(rollup::AgentRow {
                                agent: row.get(0)?,
                                calls: row.get::<_, i64>(1)? as u64,
                                errors: row.get::<_, i64>(2)? as u64,
                                duration_sum_ms: row.get(3)?,
                                last_call_ms: row.get(4)?,
                                sessions: row.get(5)?,
                                arguments: row.get(6)?,
                            })
                        },
                    )?
                    .collect::<Result<_, _>>()?;
                Ok((events, rows))
            })
            .await?;
        let (agents, total_sessions) = rollup::agent_stats(rows)?;
        let schema = match query.input_schema {
            Some(candidate) => Some(candidate.clone()),
            None => crate::current_input_schema(self, query.project, query.server, query.tool).await?,
        };
        views::drift_impact(&query, events, agents, total_sessions, schema.as_ref())
    }

    async fn tool_schemas(&self, project: &str, server: &str) -> Result<Vec<ToolSchema>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT tool_name, description, input_schema, captured_at FROM tool_schemas
                 WHERE project = ?1 AND server_name = ?2 ORDER BY tool_name",
            )?;
            let rows = select.query_map(params![project, server], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })?;
            let mut tools = Vec::new();
            for row in rows {
                let (tool_name, description, input_schema, captured_at) = row?;
                let server_name = server.clone();
                let row = views::StoredToolSchema {
                    server_name,
                    tool_name,
                    description,
                    input_schema,
                    captured_at,
                };
                tools.push(views::tool_schema(row)?);
            }
            Ok(tools)
        })
        .await
    }

    async fn server_surfaces(
        &self,
        project: &str,
        server: &str,
    ) -> Result<Option<ServerSurfaces>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let surfaces: Option<Option<String>> = connection
                .prepare_cached(
                    // The server's current list (two captures may share a time), else the newest.
                    "SELECT s.surfaces FROM server_snapshots s LEFT JOIN servers v
                         ON v.project = s.project AND v.server_name = s.server_name
                     WHERE s.project = ?1 AND s.server_name = ?2
                     ORDER BY s.schema_hash IS v.schema_hash DESC, s.captured_at DESC LIMIT 1",
                )?
                .query_row(params![project, server], |row| row.get(0))
                .optional()?;
            Ok(surfaces.flatten().map(|json| serde_json::from_str(&json)).transpose()?)
        })
        .await
    }

    async fn upcoming(
        &self,
        project: &str,
        server: Option<&str>,
    ) -> Result<Vec<driftline_schemas::UpcomingRelease>, StoreError> {
        let (project, server) = (project.to_owned(), server.map(str::to_owned));
        self.read(move |connection| {
            let mut statement = connection.prepare_cached(
                "SELECT body FROM upcoming_releases WHERE project = ?1 AND (?2 IS NULL OR server_name = ?2)
                 ORDER BY detected_at DESC, id LIMIT ?3",
            )?;
            let bodies = statement
                .query_map(params![project, server, crate::UPCOMING_LIMIT], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(bodies.iter().map(|body| serde_json::from_str(body)).collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        let project = project.to_owned();
        let window = rollup::window(ms(now), hours);
        self.read(move |connection| {
            let mut select = connection
                .prepare_cached("SELECT server_name, tool_name FROM tool_schemas WHERE project = ?1")?;
            let declared: BTreeSet<(String, String)> = select
                .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut shapes = HashMap::new();
            let mut select = connection
                .prepare_cached("SELECT server, tool, shape FROM tool_shapes WHERE project = ?1")?;
            for row in select.query_map(params![project], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })? {
                let (server, tool, json) = row?;
                shapes.insert((server, tool), views::shape_status(&json)?);
            }
            let mut select = connection.prepare_cached(&format!(
                "SELECT server, tool, SUM(calls), SUM(errors), SUM(duration_sum), MAX(last_call_ms)
                 FROM {TOOL_WINDOW} GROUP BY server, tool ORDER BY server, tool"
            ))?;
            let calls: Vec<views::CallStats> = select
                .query_map(params![project, window.from_ms, window.hours_from_ms], |row| {
                    let calls = row.get::<_, i64>(2)? as u64;
                    let duration_sum: f64 = row.get(4)?;
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        calls,
                        row.get::<_, i64>(3)? as u64,
                        duration_sum / calls.max(1) as f64,
                        row.get(5)?,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            views::tool_summaries(&declared, shapes, calls)
        })
        .await
    }

    async fn tool_shape(
        &self,
        project: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<ToolShape>, StoreError> {
        let (project, server, tool) = (project.to_owned(), server.to_owned(), tool.to_owned());
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row(
                    "SELECT shape FROM tool_shapes WHERE project = ?1 AND server = ?2 AND tool = ?3",
                    params![project, server, tool],
                    |row| row.get(0),
                )
                .optional()?;
            let Some(json) = json else { return Ok(None) };
            let mut shape: ToolShape = serde_json::from_str(&json)?;
            shape.signal_groups =
                signal_groups(connection, &project, "AND server = ?2 AND tool = ?3", &[&server, &tool])?;
            Ok(Some(shape))
        })
        .await
    }

    async fn shape_drift(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<Vec<SignalGroup>, StoreError> {
        let project = project.to_owned();
        let from = views::since(now, hours);
        self.read(move |connection| signal_groups(connection, &project, "AND detected_at >= ?2", &[&from]))
            .await
    }

    async fn thresholds(&self, project: &str) -> Result<Option<DetectorThresholds>, StoreError> {
        let project = project.to_owned();
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row("SELECT thresholds FROM settings WHERE project = ?1", params![project], |row| {
                    row.get(0)
                })
                .optional()?;
            json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
        })
        .await
    }

    async fn dead_letters(&self, project: &str) -> Result<Vec<DeadLetterCount>, StoreError> {
        // Keys `project/kind/stream`: a range of the primary key (no project name holds a `/`).
        let (from, to) = (format!("{project}/"), format!("{project}0"));
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT state FROM detector_state WHERE kind = ?1 AND key >= ?2 AND key < ?3",
            )?;
            let states = select
                .query_map(params![crate::DEAD_LETTER_STATE, from, to], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(crate::dead_letter_counts(states))
        })
        .await
    }

    async fn return_value_stats(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError> {
        let project = project.to_owned();
        let window = rollup::window(ms(now), hours);
        let rows = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(&format!(
                    "SELECT server, tool, SUM(fingerprinted), SUM(oversized), SUM(truncated_sentinel),
                            SUM(unparseable), SUM(too_deep), SUM(absent), SUM(not_success)
                     FROM {TOOL_WINDOW} GROUP BY server, tool"
                ))?;
                let mut rows = Vec::new();
                let mut stored = select.query(params![project, window.from_ms, window.hours_from_ms])?;
                while let Some(row) = stored.next()? {
                    let (server, tool): (String, String) = (row.get(0)?, row.get(1)?);
                    let mut outcomes = [0u64; 7];
                    for (i, n) in outcomes.iter_mut().enumerate() {
                        *n = row.get::<_, i64>(i + 2)? as u64;
                    }
                    rows.extend(rollup::outcome_rows(&server, &tool, outcomes));
                }
                Ok(rows)
            })
            .await?;
        Ok(views::return_value_stats(hours, rows))
    }

    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError> {
        let granularity = query.granularity_ms;
        let (project, server) = (query.project.to_owned(), query.server.to_owned());
        let tool = query.tool.map(str::to_owned);
        let (from, to, bucket) = (ms(query.from), ms(query.to), query.bucket_ms);
        let owned = BucketQuery { project: "", server: "", tool: None, ..query };
        let rows = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT bucket_ms, calls, errors, latency, shapes FROM tool_rollups
                     WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3) AND bucket_seconds = ?4
                       AND bucket_ms >= ?5 AND bucket_ms < ?6",
                )?;
                let rows = select
                    .query_map(params![project, server, tool, granularity / 1000, from, to], |row| {
                        Ok(rollup::BucketRow {
                            bucket_ms: row.get(0)?,
                            calls: row.get::<_, i64>(1)? as u64,
                            errors: row.get::<_, i64>(2)? as u64,
                            latency: row.get(3)?,
                            shapes: row.get(4)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        views::call_buckets(&owned, rollup::bucket_aggregates(from, bucket, rows)?)
    }

    async fn recent_calls(
        &self,
        project: &str,
        server: &str,
        tool: &str,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecentCall>, StoreError> {
        let (project, server, tool) = (project.to_owned(), server.to_owned(), tool.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT span_id, session_id, agent_name, started_at, ingested_at, duration_ms, status, error,
                        shape_outcome, shape_hash, compact_bytes
                 FROM tool_calls WHERE project = ?1 AND server = ?2 AND tool = ?3 AND ingested_at >= ?4
                 ORDER BY ingested_at DESC, started_at DESC, span_id DESC LIMIT ?5",
            )?;
            let mut rows = select.query(params![project, server, tool, ms(since), limit])?;
            let mut calls = Vec::new();
            while let Some(row) = rows.next()? {
                calls.push(RecentCall {
                    span_id: row.get(0)?,
                    session_id: row.get(1)?,
                    agent_name: row.get(2)?,
                    started_at: timestamp(row.get(3)?)?,
                    ingested_at: timestamp(row.get(4)?)?,
                    duration_ms: row.get(5)?,
                    status: row.get(6)?,
                    error: row.get(7)?,
                    shape_outcome: row.get(8)?,
                    shape_hash: row.get(9)?,
                    compact_bytes: row.get::<_, Option<i64>>(10)?.map(|b| b as u64),
                });
            }
            Ok(calls)
        })
        .await
    }

    async fn signals(
        &self,
        project: &str,
        server: &str,
        tool: Option<&str>,
        from: Timestamp,
    ) -> Result<Vec<ShapeDriftSignal>, StoreError> {
        let (project, server, tool, from) =
            (project.to_owned(), server.to_owned(), tool.map(str::to_owned), ms(from));
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT signal FROM shape_drift_signals
                 WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3) AND detected_at >= ?4
                 ORDER BY detected_at, id",
            )?;
            let rows =
                select.query_map(params![project, server, tool, from], |row| row.get::<_, String>(0))?;
            views::signals(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row("SELECT result FROM applied_commands WHERE id = ?1", params![id], |row| row.get(0))
                .optional()?;
            json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|connection| {
            Ok(connection.query_row("SELECT 1", [], |row| row.get::<_, i64>(0)).map(|_| ())?)
        })
        .await
    }
}
