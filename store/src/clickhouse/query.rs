//! The API's side of the ClickHouse store: every query of DESIGN.md §7, each within the caller's project.

use std::collections::HashMap;

use async_trait::async_trait;
use driftline_schemas::api::{
    CallBucket, DeadLetterCount, DriftImpact, RecentCall, ReturnValueStats, ServerHealth, SignalGroup,
    ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{DetectorThresholds, SchemaDriftEvent, ServerSurfaces, ShapeDriftSignal, Timestamp};
use serde_json::Value;

use super::rollups::{bind_window, TOOL_WINDOW};
use super::rows::{EventRow, RecentCallRow, ServerRowDb, ToolSchemaRow};
use super::{ClickHouseStore, CONSUMER};
use crate::rollup;
use crate::views::{self, ms, since, timestamp};
use crate::{BucketQuery, ImpactQuery, QueryStore, StoreError};

#[async_trait]
impl QueryStore for ClickHouseStore {
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError> {
        let open: Vec<(String, Option<String>, Option<String>)> = self
            .client
            .query(
                "SELECT server_name, max_classification, max_severity FROM schema_drift_events FINAL
                 WHERE project = ? AND status = 'open'",
            )
            .bind(project)
            .fetch_all()
            .await?;
        let changes: Vec<(String, String, u32)> = self
            .client
            .query(
                "SELECT server_name, JSONExtractString(change, 'classification') AS classification,
                        toUInt32(count())
                 FROM schema_drift_events FINAL ARRAY JOIN JSONExtractArrayRaw(changes) AS change
                 WHERE project = ? AND status = 'open' GROUP BY server_name, classification",
            )
            .bind(project)
            .fetch_all()
            .await?;
        // Changes the detector found but did not list (it lists at most so many of each kind in an event).
        let omitted: Vec<(String, String, u32)> = self
            .client
            .query(
                "SELECT server_name, tupleElement(omitted, 1) AS classification,
                        toUInt32(sum(tupleElement(omitted, 2)))
                 FROM schema_drift_events FINAL
                 ARRAY JOIN JSONExtractKeysAndValues(event, 'omitted_changes', 'UInt64') AS omitted
                 WHERE project = ? AND status = 'open' GROUP BY server_name, classification",
            )
            .bind(project)
            .fetch_all()
            .await?;
        let changes = changes
            .into_iter()
            .chain(omitted)
            .map(|(server, classification, n)| (server, Some(classification), n));
        let open = views::open_counts(open, changes);
        let rows: Vec<ServerRowDb> = self
            .client
            .query("SELECT ?fields FROM servers FINAL WHERE project = ? ORDER BY server_name")
            .bind(project)
            .fetch_all()
            .await?;
        let servers = rows
            .into_iter()
            .map(|row| views::server_health(row.into(), &open))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let traced: Vec<String> = self
            .client
            .query("SELECT DISTINCT server FROM tool_shapes WHERE project = ?")
            .bind(project)
            .fetch_all()
            .await?;
        let servers = views::with_trace_only_servers(servers, traced);
        // The LIKE only narrows the rows read; the JSON decides.
        let mismatched: Vec<(String, String, String)> = self
            .client
            .query(
                "SELECT server, tool, shape FROM tool_shapes FINAL
                 WHERE project = ? AND position(shape, '\"mismatch\"') > 0",
            )
            .bind(project)
            .fetch_all()
            .await?;
        Ok(views::with_contract_mismatches(servers, views::contract_mismatches(mismatched)?))
    }

    async fn drift_history(
        &self,
        project: &str,
        server: &str,
        limit: u32,
        list_bytes: usize,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        // Read row by row: only the events answered with their lists are held whole.
        let mut rows = self
            .client
            .query(
                "SELECT ?fields FROM schema_drift_events FINAL WHERE project = ? AND server_name = ?
                 ORDER BY detected_at DESC, id DESC LIMIT ?",
            )
            .bind(project)
            .bind(server)
            .bind(limit)
            .fetch::<EventRow>()?;
        let mut history = views::History::new(list_bytes);
        while let Some(row) = rows.next().await? {
            history.push(row.event.len(), row.into_event()?);
        }
        Ok(history.into_events())
    }

    async fn drift_event(
        &self,
        project: &str,
        server: &str,
        id: &str,
    ) -> Result<Option<SchemaDriftEvent>, StoreError> {
        let row: Option<EventRow> = self
            .client
            .query(
                "SELECT ?fields FROM schema_drift_events FINAL WHERE project = ? AND server_name = ? AND id = ?",
            )
            .bind(project)
            .bind(server)
            .bind(id)
            .fetch_optional()
            .await?;
        row.map(EventRow::into_event).transpose()
    }

    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        let events: Vec<String> = self
            .client
            .query("SELECT changes FROM schema_drift_events FINAL WHERE project = ? AND server_name = ? AND status = 'open'")
            .bind(query.project)
            .bind(query.server)
            .fetch_all()
            .await?;
        let window = rollup::window(ms(query.now), query.hours);
        let rows: Vec<rollup::AgentRow> = self
            .client
            .query(
                "SELECT agent, calls, errors, duration_sum AS duration_sum_ms, last_call_ms, sessions, arguments FROM agent_rollups FINAL
                 WHERE project = ? AND server = ? AND tool = ?
                   AND ((bucket_seconds = 3600 AND bucket_ms >= ?) OR (bucket_seconds = 60 AND bucket_ms >= ? AND bucket_ms < ?))",
            )
            .bind(query.project)
            .bind(query.server)
            .bind(query.tool)
            .bind(window.hours_from_ms)
            .bind(window.from_ms)
            .bind(window.hours_from_ms)
            .fetch_all()
            .await?;
        let (agents, total_sessions) = rollup::agent_stats(rows)?;
        let schema = match query.input_schema {
            Some(candidate) => Some(candidate.clone()),
            None => crate::current_input_schema(self, query.project, query.server, query.tool).await?,
        };
        views::drift_impact(&query, events, agents, total_sessions, schema.as_ref())
    }

    async fn tool_schemas(&self, project: &str, server: &str) -> Result<Vec<ToolSchema>, StoreError> {
        let rows: Vec<ToolSchemaRow> = self
            .client
            .query(
                "SELECT ?fields FROM tool_schemas FINAL WHERE project = ? AND server_name = ? AND schema_hash = (
                     SELECT argMax(schema_hash, captured_at) FROM server_snapshots FINAL
                     WHERE project = ? AND server_name = ?)
                 ORDER BY tool_name",
            )
            .bind(project)
            .bind(server)
            .bind(project)
            .bind(server)
            .fetch_all()
            .await?;
        rows.into_iter().map(|row| views::tool_schema(row.into())).collect()
    }

    async fn server_surfaces(
        &self,
        project: &str,
        server: &str,
    ) -> Result<Option<ServerSurfaces>, StoreError> {
        let surfaces: Vec<Option<String>> = self
            .client
            .query(
                // The server's current list (two captures may share a time), else the newest.
                "SELECT surfaces FROM server_snapshots FINAL WHERE project = ? AND server_name = ?
                 ORDER BY schema_hash = ifNull((SELECT any(schema_hash) FROM servers FINAL
                     WHERE project = ? AND server_name = ?), '') DESC, captured_at DESC LIMIT 1",
            )
            .bind(project)
            .bind(server)
            .bind(project)
            .bind(server)
            .fetch_all()
            .await?;
        Ok(surfaces.into_iter().next().flatten().map(|json| serde_json::from_str(&json)).transpose()?)
    }

    async fn upcoming(
        &self,
        project: &str,
        server: Option<&str>,
    ) -> Result<Vec<driftline_schemas::UpcomingRelease>, StoreError> {
        let bodies: Vec<String> = self
            .client
            .query(
                "SELECT body FROM upcoming_releases FINAL WHERE project = ? AND (? = '' OR server_name = ?)
                 ORDER BY detected_at DESC, id LIMIT ?",
            )
            .bind(project)
            .bind(server.unwrap_or_default())
            .bind(server.unwrap_or_default())
            .bind(crate::UPCOMING_LIMIT)
            .fetch_all()
            .await?;
        Ok(bodies.iter().map(|body| serde_json::from_str(body)).collect::<Result<Vec<_>, _>>()?)
    }

    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        let declared: Vec<(String, String)> = self
            .client
            .query(
                "SELECT server_name, tool_name FROM tool_schemas FINAL WHERE project = ? AND (server_name, schema_hash) IN (
                     SELECT server_name, argMax(schema_hash, captured_at) FROM server_snapshots FINAL
                     WHERE project = ? GROUP BY server_name)",
            )
            .bind(project)
            .bind(project)
            .fetch_all()
            .await?;
        let shape_rows: Vec<(String, String, String)> = self
            .client
            .query("SELECT server, tool, shape FROM tool_shapes FINAL WHERE project = ?")
            .bind(project)
            .fetch_all()
            .await?;
        let mut shapes = HashMap::new();
        for (server, tool, json) in shape_rows {
            shapes.insert((server, tool), views::shape_status(&json)?);
        }
        let window = rollup::window(ms(now), hours);
        let select = self.client.query(&format!(
            "SELECT toString(server), toString(tool), sum(calls), sum(errors), sum(duration_sum), max(last_call_ms)
             {TOOL_WINDOW} GROUP BY server, tool ORDER BY server, tool"
        ));
        let sums: Vec<(String, String, u64, u64, f64, i64)> =
            bind_window(select, project, window).fetch_all().await?;
        let calls: Vec<views::CallStats> = sums
            .into_iter()
            .map(|(server, tool, calls, errors, duration_sum, last)| {
                (server, tool, calls, errors, duration_sum / calls.max(1) as f64, last)
            })
            .collect();
        views::tool_summaries(&declared.into_iter().collect(), shapes, calls)
    }

    async fn tool_shape(
        &self,
        project: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<ToolShape>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT shape FROM tool_shapes FINAL WHERE project = ? AND server = ? AND tool = ?")
            .bind(project)
            .bind(server)
            .bind(tool)
            .fetch_optional()
            .await?;
        let Some(json) = json else { return Ok(None) };
        let mut shape: ToolShape = serde_json::from_str(&json)?;
        shape.signal_groups = self
            .signal_groups(
                "project = ? AND server = ? AND tool = ?",
                vec![project.to_owned(), server.to_owned(), tool.to_owned()],
            )
            .await?;
        Ok(Some(shape))
    }

    async fn shape_drift(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<Vec<SignalGroup>, StoreError> {
        self.signal_groups(
            "project = ? AND detected_at >= fromUnixTimestamp64Milli(toInt64(?))",
            vec![project.to_owned(), since(now, hours).to_string()],
        )
        .await
    }

    async fn thresholds(&self, project: &str) -> Result<Option<DetectorThresholds>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT thresholds FROM settings FINAL WHERE project = ?")
            .bind(project)
            .fetch_optional()
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
    }

    async fn dead_letters(&self, project: &str) -> Result<Vec<DeadLetterCount>, StoreError> {
        let states: Vec<String> = self
            .client
            .query(
                "SELECT state FROM detector_state FINAL
                 WHERE consumer = ? AND kind = ? AND startsWith(key, ?) AND state != ''",
            )
            .bind(CONSUMER)
            .bind(crate::DEAD_LETTER_STATE)
            .bind(format!("{project}/"))
            .fetch_all()
            .await?;
        Ok(crate::dead_letter_counts(states))
    }

    async fn return_value_stats(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError> {
        let window = rollup::window(ms(now), hours);
        type Sums = (String, String, u64, u64, u64, u64, u64, u64, u64);
        let select = self.client.query(&format!(
            "SELECT toString(server), toString(tool), sum(fingerprinted), sum(oversized), sum(truncated_sentinel),
                    sum(unparseable), sum(too_deep), sum(absent), sum(not_success)
             {TOOL_WINDOW} GROUP BY server, tool"
        ));
        let sums: Vec<Sums> = bind_window(select, project, window).fetch_all().await?;
        let rows = sums
            .into_iter()
            .flat_map(|(server, tool, a, b, c, d, e, f, g)| {
                rollup::outcome_rows(&server, &tool, [a, b, c, d, e, f, g])
            })
            .collect();
        Ok(views::return_value_stats(hours, rows))
    }

    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError> {
        let granularity = query.granularity_ms;
        let tool_filter = if query.tool.is_some() { "AND tool = ?" } else { "" };
        let mut select = self
            .client
            .query(&format!(
                "SELECT bucket_ms, calls, errors, latency, shapes FROM tool_rollups FINAL
                 WHERE project = ? AND server = ? {tool_filter} AND bucket_seconds = ? AND bucket_ms >= ? AND bucket_ms < ?"
            ))
            .bind(query.project)
            .bind(query.server);
        if let Some(tool) = query.tool {
            select = select.bind(tool);
        }
        let rows: Vec<rollup::BucketRow> = select
            .bind((granularity / 1000) as u32)
            .bind(ms(query.from))
            .bind(ms(query.to))
            .fetch_all()
            .await?;
        views::call_buckets(&query, rollup::bucket_aggregates(ms(query.from), query.bucket_ms, rows)?)
    }

    async fn recent_calls(
        &self,
        project: &str,
        server: &str,
        tool: &str,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecentCall>, StoreError> {
        let rows: Vec<RecentCallRow> = self
            .client
            .query(
                "SELECT ?fields FROM tool_calls FINAL WHERE project = ? AND server = ? AND tool = ?
                   AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))
                 ORDER BY ingested_at DESC, started_at DESC, span_id DESC LIMIT ?",
            )
            .bind(project)
            .bind(server)
            .bind(tool)
            .bind(ms(since))
            .bind(limit)
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(RecentCall {
                    span_id: row.span_id,
                    session_id: row.session_id,
                    agent_name: row.agent_name,
                    started_at: timestamp(row.started_at)?,
                    ingested_at: timestamp(row.ingested_at)?,
                    duration_ms: row.duration_ms,
                    status: row.status,
                    error: row.error,
                    shape_outcome: row.shape_outcome,
                    shape_hash: row.shape_hash,
                    compact_bytes: row.compact_bytes,
                })
            })
            .collect()
    }

    async fn signals(
        &self,
        project: &str,
        server: &str,
        tool: Option<&str>,
        from: Timestamp,
    ) -> Result<Vec<ShapeDriftSignal>, StoreError> {
        let tool_filter = if tool.is_some() { "AND tool = ?" } else { "" };
        let mut query = self
            .client
            .query(&format!(
                "SELECT signal FROM shape_drift_signals FINAL WHERE project = ? AND server = ? {tool_filter}
                   AND detected_at >= fromUnixTimestamp64Milli(toInt64(?)) ORDER BY detected_at, id"
            ))
            .bind(project)
            .bind(server);
        if let Some(tool) = tool {
            query = query.bind(tool);
        }
        views::signals(query.bind(ms(from)).fetch_all::<String>().await?)
    }

    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT result FROM applied_commands FINAL WHERE id = ?")
            .bind(id)
            .fetch_optional()
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.client.query("SELECT 1").fetch_one::<u8>().await?;
        Ok(())
    }
}
