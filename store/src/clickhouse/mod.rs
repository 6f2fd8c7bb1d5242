//! The production store: ClickHouse over HTTP (the `clickhouse` crate), tables from `schemas/clickhouse/`.
//!
//! A batch is written in three steps: every output but the traffic and the views (one insert per table, at
//! once), then the traffic (rollups and call rows) with the views that sum outputs up (servers' rows, tools'
//! shape views), at once, and `detector_state` (state + positions, one insert, so one part) last. Every output row has a deterministic sort key and the tables are ReplacingMergeTree
//! read with FINAL, so re-writing a batch after a failure or crash changes nothing a query sees.

mod detector;
mod notifications;
mod query;
mod rollups;
mod rows;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use clickhouse::Client;
use driftline_schemas::api::SignalGroup;
use rows::EventRow;

use crate::views;
use crate::{Forgotten, StoreError};

/// Migrations in order; the version is the position (1-based).
const MIGRATIONS: &[&str] = &[
    include_str!("../../../schemas/clickhouse/0001_init.sql"),
    include_str!("../../../schemas/clickhouse/0002_call_identities.sql"),
    include_str!("../../../schemas/clickhouse/0003_notifications.sql"),
    include_str!("../../../schemas/clickhouse/0004_rollups.sql"),
    include_str!("../../../schemas/clickhouse/0005_surfaces.sql"),
    include_str!("../../../schemas/clickhouse/0006_call_identities_by_stream.sql"),
    include_str!("../../../schemas/clickhouse/0007_argument_shapes.sql"),
    include_str!("../../../schemas/clickhouse/0008_context_cost.sql"),
    include_str!("../../../schemas/clickhouse/0009_upcoming_releases.sql"),
];
const CONSUMER: &str = "detectors";
const POSITION: &str = "position";

/// Where the ClickHouse HTTP interface is and which database holds driftline's tables.
#[derive(Debug, Clone)]
pub struct ClickHouseSettings {
    pub url: String,
    pub database: String,
    pub user: Option<String>,
    pub password: Option<driftline_schemas::Secret>,
}

#[derive(Clone)]
pub struct ClickHouseStore {
    client: Client,
}

impl From<clickhouse::error::Error> for StoreError {
    fn from(err: clickhouse::error::Error) -> Self {
        use clickhouse::error::Error;
        match err {
            Error::Network(_) | Error::TimedOut => StoreError::Unavailable(err.to_string()),
            Error::BadResponse(ref text) if text.contains("Code: 60.") || text.contains("Code: 81.") => {
                StoreError::Unavailable(format!("{err} (run `driftline migrate`)"))
            }
            other => StoreError::ClickHouse(other.to_string()),
        }
    }
}

/// The HTTP client under the `clickhouse` crate's, as the crate builds its own (keep-alive, idle pooled
/// connections dropped before ClickHouse's 3 s, http and https) but with TCP_NODELAY: without it every
/// request waits for the server's delayed ACK of its first segment, ≈ 40 ms per query or insert on Linux
/// (`SELECT 1` took 48 ms; a detector batch is a dozen inserts).
fn http_client() -> Result<Client, StoreError> {
    use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|err| StoreError::Unavailable(format!("tls for clickhouse: {err}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    let hyper = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector);
    Ok(Client::with_http_client(hyper))
}

fn client(settings: &ClickHouseSettings) -> Result<Client, StoreError> {
    let mut client = http_client()?.with_url(&settings.url);
    if let Some(user) = &settings.user {
        client = client.with_user(user);
    }
    if let Some(password) = &settings.password {
        client = client.with_password(password.expose());
    }
    Ok(client)
}

/// Creates the database and applies every migration not yet recorded; returns the versions applied now.
pub async fn migrate(settings: &ClickHouseSettings) -> Result<Vec<u32>, StoreError> {
    let root = client(settings)?;
    root.query(&format!("CREATE DATABASE IF NOT EXISTS `{}`", settings.database)).execute().await?;
    let client = root.with_database(&settings.database);
    client
        .query(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, applied_at DateTime64(3, 'UTC'))
             ENGINE = ReplacingMergeTree ORDER BY version",
        )
        .execute()
        .await?;
    let applied: Vec<u32> = client.query("SELECT version FROM schema_migrations FINAL").fetch_all().await?;
    let mut now_applied = Vec::new();
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as u32 + 1;
        if applied.contains(&version) {
            continue;
        }
        // Statements are idempotent, so a migration interrupted half way is simply applied again.
        for statement in statements(sql) {
            client.query(&statement).execute().await?;
        }
        client
            .query("INSERT INTO schema_migrations (version, applied_at) VALUES (?, now64(3))")
            .bind(version)
            .execute()
            .await?;
        now_applied.push(version);
    }
    Ok(now_applied)
}

/// The statements of a migration file: `;` at a line end separates them; `--` comment lines are dropped.
fn statements(sql: &str) -> Vec<String> {
    let without_comments: String = sql
        .lines()
        .map(|line| match line.find("--") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    without_comments.split(";\n").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// Keeps the last of several rows with the same key (a batch may update a server or tool more than once;
/// rows of one insert have no defined order among equal sort keys).
fn last_per_key<T, K: Ord>(rows: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut last: BTreeMap<K, T> = BTreeMap::new();
    for row in rows {
        last.insert(key(&row), row);
    }
    last.into_values().collect()
}

type Insert<'a> = futures_util::future::BoxFuture<'a, Result<(), StoreError>>;

/// Runs inserts at once; the first error, once all are done (a failed batch is written again whole).
async fn try_all(inserts: Vec<Insert<'_>>) -> Result<(), StoreError> {
    futures_util::future::join_all(inserts).await.into_iter().collect()
}

impl ClickHouseStore {
    /// Removes the rows that show forgotten keys (lightweight deletes: masked at once, gone with their
    /// parts' next merge); rows written later (the key seen again) are not touched.
    async fn forget_views(&self, forgotten: &[Forgotten]) -> Result<(), StoreError> {
        for forgotten in forgotten {
            match forgotten {
                Forgotten::Tool(tool) => {
                    self.client
                        .query("DELETE FROM tool_shapes WHERE project = ? AND server = ? AND tool = ?")
                        .bind(tool.project.as_str())
                        .bind(tool.server.as_str())
                        .bind(tool.tool.as_str())
                        .execute()
                        .await?;
                }
                Forgotten::Server(server) => {
                    for table in ["servers", "tool_schemas"] {
                        self.client
                            .query(&format!("DELETE FROM {table} WHERE project = ? AND server_name = ?"))
                            .bind(server.project.as_str())
                            .bind(server.server.as_str())
                            .execute()
                            .await?;
                    }
                }
            }
        }
        Ok(())
    }
    /// Connects to an already migrated database; fails with a hint when the tables are missing.
    pub async fn connect(settings: &ClickHouseSettings) -> Result<Self, StoreError> {
        let store = ClickHouseStore { client: client(settings)?.with_database(&settings.database) };
        store
            .client
            .query("SELECT count() FROM schema_migrations")
            .fetch_one::<u64>()
            .await
            .map_err(StoreError::from)?;
        Ok(store)
    }

    async fn insert<T>(&self, table: &str, rows: &[T]) -> Result<(), StoreError>
    where
        T: clickhouse::RowOwned + clickhouse::RowWrite,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert =
            self.client.insert::<T>(table).await?.with_timeouts(Some(Duration::from_secs(30)), None);
        for row in rows {
            insert.write(row).await?;
        }
        insert.end().await?;
        Ok(())
    }

    /// Events the batch changes the lifecycle of but did not detect: read them back to write new rows.
    async fn stored_events(&self, ids: Vec<String>) -> Result<Vec<EventRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .client
            .query("SELECT ?fields FROM schema_drift_events FINAL WHERE id IN ?")
            .bind(ids)
            .fetch_all()
            .await?)
    }

    async fn signal_groups(&self, filter: &str, bind: Vec<String>) -> Result<Vec<SignalGroup>, StoreError> {
        let mut query = self.client.query(&format!(
            "SELECT signal FROM shape_drift_signals FINAL WHERE {filter} ORDER BY detected_at, id"
        ));
        for value in bind {
            query = query.bind(value);
        }
        views::signal_groups(query.fetch_all::<String>().await?)
    }
}
