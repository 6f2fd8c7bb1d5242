//! `make bench-scale`: API reads of traffic at scale, from rollups, next to the raw-call scans they replace.
//!
//! Loads `SCALE_CALLS` calls (default 50,000,000) of one project (20 tools on 2 servers, 50 agents, 5,000
//! sessions each kept by one agent, started over the last 24 hours) through the detector's write path:
//! batches of calls, call identities and the rollup rows a [`RollupCache`] folds, handed to the store's
//! `apply` (a generator stands in for HTTP and the bus). At each checkpoint (1M, 10M and the total; each
//! load spreads its calls over the whole day) it times every read the API makes of traffic, through the
//! store as the API calls it, and the raw-call query that read made before rollups, on the same data, and
//! checks that both answer the same counts. Before that, the rollups' write overhead: the day's first calls
//! loaded into two new stores, with and without rollups. After it, on SQLite, the store's expiry a month
//! later (every loaded row has expired), timed with the detector's batches stored beside it.
//!
//! Settings (environment): `SCALE_STORES` (`sqlite,clickhouse`; ClickHouse at `CLICKHOUSE_URL`, default the
//! local one of `make infra-up`), `SCALE_OVERHEAD_CALLS` (1,000,000; 0 skips that comparison), `SCALE_BATCH`
//! (5,000 calls per batch), `SCALE_REPEATS` (20 timings per read), `SCALE_RAW_RUNS` (raw scans stop after 3
//! runs, or after 30 s),
//! `SCALE_KEEP=1` (keep the loaded store: `target/bench-scale/reads.db`, database `bench_scale_reads_<pid>`).
//! Prints one table per store and writes them all to `target/bench-scale.json`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use driftline_schemas::{
    derive_id, CallStatus, InputPosition, OutputKind, ProjectName, ServerName, ShapeOutcome, Timestamp,
    ToolCallRecord, ToolName,
};
use driftline_store::rollup::{self, RollupCache, HOUR_MS, MINUTE_MS};
use driftline_store::{
    Batch, BucketQuery, CallIdentity, ClickHouseSettings, ClickHouseStore, ImpactQuery, SqliteStore, Store,
    StoredCall,
};
use serde_json::{json, Value};

const PROJECT: &str = "scale";
const SERVERS: usize = 2;
const TOOLS_PER_SERVER: usize = 10;
const AGENTS: usize = 50;
const SESSIONS: usize = 5_000;

struct Config {
    calls: u64,
    /// Calls of the write-overhead comparison (0: none).
    overhead_calls: u64,
    batch: usize,
    stores: Vec<String>,
    repeats: usize,
    raw_runs: usize,
    clickhouse_url: String,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

impl Config {
    fn read() -> Self {
        Config {
            calls: env_number("SCALE_CALLS", 50_000_000),
            overhead_calls: env_number("SCALE_OVERHEAD_CALLS", 1_000_000),
            batch: env_number("SCALE_BATCH", 5_000) as usize,
            stores: std::env::var("SCALE_STORES")
                .unwrap_or_else(|_| "sqlite,clickhouse".into())
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            repeats: env_number("SCALE_REPEATS", 20) as usize,
            raw_runs: env_number("SCALE_RAW_RUNS", 3).max(1) as usize,
            clickhouse_url: std::env::var("CLICKHOUSE_URL")
                .unwrap_or_else(|_| "http://127.0.0.1:18123".into()),
        }
    }

    /// 1M, 10M and the total (those below it).
    fn checkpoints(&self) -> Vec<u64> {
        let mut points: Vec<u64> =
            [1_000_000u64, 10_000_000].into_iter().filter(|p| *p < self.calls).collect();
        points.push(self.calls);
        points
    }
}

/// Deterministic pseudo-random numbers (xorshift), so every run loads the same calls.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The calls: `count` of them in time order over the day that ends at `now`, numbered from `first`.
struct Generator {
    servers: Vec<ServerName>,
    tools: Vec<ToolName>,
    project: ProjectName,
    random: Random,
}

impl Generator {
    fn new() -> Self {
        Generator {
            servers: (0..SERVERS).map(|s| ServerName::parse(format!("server-{s}")).expect("name")).collect(),
            tools: (0..TOOLS_PER_SERVER)
                .map(|t| ToolName::parse(format!("tool_{t}")).expect("name"))
                .collect(),
            project: ProjectName::parse(PROJECT).expect("name"),
            random: Random(0x9e37_79b9_7f4a_7c15),
        }
    }

    fn call(&mut self, index: u64, of: u64, now: i64) -> ToolCallRecord {
        let day = 24 * HOUR_MS - MINUTE_MS;
        let at = now - day + (index as i128 * day as i128 / of.max(1) as i128) as i64;
        let server = self.random.below(SERVERS as u64) as usize;
        let tool = self.random.below(TOOLS_PER_SERVER as u64) as usize;
        let session = self.random.below(SESSIONS as u64) as usize;
        let agent = session % AGENTS;
        let error = self.random.below(50) == 0;
        // Latency: 5-500 ms, heavier toward the low end; one shape in 20 is a second one.
        let duration = 5.0 + (self.random.below(1000) as f64).powi(2) / 2000.0;
        let (outcome, hash, shape) = match (error, self.random.below(20)) {
            (true, _) => (ShapeOutcome::NotSuccess, None, None),
            (false, 0) => (ShapeOutcome::Fingerprinted, Some("bbbbbbbb"), Some("{error:string}")),
            (false, _) => (ShapeOutcome::Fingerprinted, Some("aaaaaaaa"), Some("{id:number,items:[string]}")),
        };
        let time = Timestamp::from_millis(at).expect("a time");
        ToolCallRecord {
            schema_version: 1,
            project: self.project.clone(),
            span_id: format!("span-{index}-{}", self.random.next()),
            trace_id: None,
            session_id: Some(format!("session-{session}")),
            agent_name: Some(format!("agent-{agent}")),
            server: self.servers[server].clone(),
            tool: self.tools[tool].clone(),
            started_at: time,
            duration_ms: duration,
            status: if error { CallStatus::Error } else { CallStatus::Success },
            error: error.then(|| "upstream timeout".to_owned()),
            ingested_at: time,
            shape: shape.map(str::to_owned),
            shape_hash: hash.map(str::to_owned),
            compact_bytes: Some(120),
            shape_outcome: outcome,
            argument_shape: None,
        }
    }
}

/// Loads calls `0..count` of a day of `of` calls, in time order (offsets from `next_offset` on), through the
/// detector's write path; returns seconds.
#[allow(clippy::too_many_arguments)]
async fn load(
    store: &dyn Store,
    generator: &mut Generator,
    cache: Option<&mut RollupCache>,
    count: u64,
    of: u64,
    next_offset: &mut u64,
    batch_size: usize,
    now: i64,
) -> f64 {
    let started = Instant::now();
    let mut cache = cache;
    let mut done = 0u64;
    while done < count {
        let n = (batch_size as u64).min(count - done);
        let mut batch = Batch::default();
        for i in 0..n {
            let call = generator.call(done + i, of, now);
            let position = InputPosition { partition: 0, offset: *next_offset };
            *next_offset += 1;
            let key = call.key().to_string();
            let (identity, received_at) = (call.identity(), call.ingested_at);
            batch.call_identities.push(CallIdentity { identity, position, received_at });
            batch.calls.push(StoredCall {
                id: derive_id(OutputKind::ToolCall, &key, position),
                position,
                call,
            });
        }
        batch.positions.insert(0, *next_offset - 1);
        if let Some(cache) = cache.as_deref_mut() {
            let missing = cache.missing(batch.calls.iter().map(|stored| &stored.call));
            if !missing.is_empty() {
                let found = store.rollups(&missing).await.expect("rollup rows");
                cache.hold(missing, found);
            }
            batch.rollups = cache
                .fold(batch.calls.iter().map(|stored| (&stored.call, stored.position)))
                .expect("rows loaded");
            cache.trim(&batch.rollups);
        }
        store.apply(batch).await.expect("a stored batch");
        done += n;
    }
    started.elapsed().as_secs_f64()
}

/// The SQLite store's hourly expiry at its worst: a month later every loaded row has expired at once.
/// Times removing them while the detector goes on storing one-call batches beside it (each should wait for
/// one run of the expiry at most), and checks that exactly those calls are left.
async fn expire_everything(
    store: Arc<dyn Store>,
    mut offset: u64,
    now: i64,
    path: &std::path::Path,
) -> Value {
    let tables = ["tool_calls", "call_identities", "tool_rollups", "agent_rollups"];
    let counts = || {
        let connection = rusqlite::Connection::open(path).expect("raw connection");
        tables.map(|table| {
            connection
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| row.get::<_, i64>(0))
                .expect(table) as u64
        })
    };
    let before: u64 = counts().iter().sum();
    let later = Timestamp::from_millis(now + 32 * 24 * HOUR_MS).expect("a time");
    let started = Instant::now();
    let expiry = tokio::spawn({
        let store = store.clone();
        async move { store.expire(later).await }
    });
    let mut generator = Generator::new();
    let mut waits_ms = Vec::new();
    loop {
        let mut call = generator.call(0, 1, now);
        (call.started_at, call.ingested_at) = (later, later);
        call.span_id = format!("beside-{offset}");
        let position = InputPosition { partition: 0, offset };
        offset += 1;
        let mut batch = Batch { positions: [(0, position.offset)].into(), ..Default::default() };
        let (identity, received_at) = (call.identity(), call.ingested_at);
        batch.call_identities.push(CallIdentity { identity, position, received_at });
        let id = derive_id(OutputKind::ToolCall, &call.key().to_string(), position);
        batch.calls.push(StoredCall { id, position, call });
        let waited = Instant::now();
        store.apply(batch).await.expect("a stored batch");
        waits_ms.push(waited.elapsed().as_secs_f64() * 1e3);
        if expiry.is_finished() {
            break;
        }
    }
    let removed = expiry.await.expect("the expiry task").expect("expired rows");
    let seconds = started.elapsed().as_secs_f64();
    let beside = waits_ms.len() as u64;
    assert_eq!(removed, before, "every loaded row had expired");
    assert_eq!(counts(), [beside, beside, 0, 0], "left: the calls stored beside the expiry ({tables:?})");
    waits_ms.sort_by(f64::total_cmp);
    let percentile = |p: f64| waits_ms[((waits_ms.len() - 1) as f64 * p).round() as usize];
    let (p50, max) = (percentile(0.5), percentile(1.0));
    println!(
        "sqlite: {removed} expired rows removed in {seconds:.1} s ({:.0} rows/s); {beside} one-call batches \
         stored beside it waited p50 {p50:.1} ms, at most {max:.1} ms",
        removed as f64 / seconds
    );
    json!({"rows": removed, "seconds": seconds, "rows_per_s": removed as f64 / seconds,
        "batches_beside": beside, "batch_wait_p50_ms": p50, "batch_wait_max_ms": max})
}

/// The raw-call queries the API made before rollups, answering the same questions.
trait Raw {
    /// (tool, calls, errors) per tool in the window starting at `from`.
    fn tools(&self, from: i64) -> Vec<(String, u64, u64)>;
    /// (tool, outcome, calls).
    fn stats(&self, from: i64) -> Vec<(String, String, u64)>;
    /// (agent, sessions, calls) of one tool, and its distinct sessions.
    fn impact(&self, server: &str, tool: &str, from: i64) -> (Vec<(String, u64, u64)>, u64);
    /// (bucket index, calls) of a timeline, with its percentiles computed as before.
    fn timeline(&self, server: &str, tool: Option<&str>, from: i64, to: i64, bucket: i64) -> Vec<(i64, u64)>;
}

struct RawSqlite {
    connection: std::sync::Mutex<rusqlite::Connection>,
}

impl Raw for RawSqlite {
    fn tools(&self, from: i64) -> Vec<(String, u64, u64)> {
        let connection = self.connection.lock().expect("lock");
        let mut select = connection
            .prepare(
                "SELECT server || '/' || tool, COUNT(*), SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END),
                        AVG(duration_ms), MAX(started_at)
                 FROM tool_calls WHERE project = ?1 AND started_at >= ?2 GROUP BY server, tool ORDER BY server, tool",
            )
            .expect("prepare");
        select
            .query_map(rusqlite::params![PROJECT, from], |row| {
                Ok((row.get(0)?, row.get::<_, i64>(1)? as u64, row.get::<_, i64>(2)? as u64))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    fn stats(&self, from: i64) -> Vec<(String, String, u64)> {
        let connection = self.connection.lock().expect("lock");
        let mut select = connection
            .prepare(
                "SELECT server || '/' || tool, shape_outcome, COUNT(*) FROM tool_calls
                 WHERE project = ?1 AND started_at >= ?2 GROUP BY server, tool, status, shape_outcome",
            )
            .expect("prepare");
        let mut rows: Vec<(String, String, u64)> = select
            .query_map(rusqlite::params![PROJECT, from], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get::<_, i64>(2)? as u64))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        rows.sort();
        rows
    }

    fn impact(&self, server: &str, tool: &str, from: i64) -> (Vec<(String, u64, u64)>, u64) {
        let connection = self.connection.lock().expect("lock");
        let mut select = connection
            .prepare(
                "SELECT COALESCE(agent_name, 'unknown'), COUNT(DISTINCT session_id), COUNT(*),
                        SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END), AVG(duration_ms), MAX(started_at)
                 FROM tool_calls WHERE project = ?1 AND server = ?2 AND tool = ?3 AND started_at >= ?4
                 GROUP BY 1 ORDER BY 3 DESC, 1",
            )
            .expect("prepare");
        let agents = select
            .query_map(rusqlite::params![PROJECT, server, tool, from], |row| {
                Ok((row.get(0)?, row.get::<_, i64>(1)? as u64, row.get::<_, i64>(2)? as u64))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let total: i64 = connection
            .query_row(
                "SELECT COUNT(DISTINCT session_id) FROM tool_calls
                 WHERE project = ?1 AND server = ?2 AND tool = ?3 AND started_at >= ?4",
                rusqlite::params![PROJECT, server, tool, from],
                |row| row.get(0),
            )
            .expect("total");
        (agents, total as u64)
    }

    fn timeline(&self, server: &str, tool: Option<&str>, from: i64, to: i64, bucket: i64) -> Vec<(i64, u64)> {
        let connection = self.connection.lock().expect("lock");
        let scope = "FROM tool_calls WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3)
                     AND started_at >= ?4 AND started_at < ?5";
        let args = rusqlite::params![PROJECT, server, tool, from, to, bucket];
        let mut select = connection
            .prepare(&format!(
                "SELECT (started_at - ?4) / ?6, COUNT(*), SUM(status = 'error'),
                        SUM(shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL) {scope} GROUP BY 1"
            ))
            .expect("prepare");
        let counts: Vec<(i64, u64)> = select
            .query_map(args, |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let mut select = connection
            .prepare(&format!(
                "SELECT k, MAX(n) FROM (SELECT (started_at - ?4) / ?6 AS k, COUNT(*) AS n {scope}
                    AND shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL GROUP BY k, shape_hash) GROUP BY k"
            ))
            .expect("prepare");
        let _dominant: Vec<(i64, i64)> = select
            .query_map(args, |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let mut select = connection
            .prepare(&format!(
                "SELECT (started_at - ?4) / ?6 AS k, duration_ms {scope} ORDER BY k, duration_ms"
            ))
            .expect("prepare");
        let mut rows = select.query(args).expect("query");
        let mut sorted = 0u64;
        while let Some(row) = rows.next().expect("row") {
            let _: f64 = row.get(1).expect("duration");
            sorted += 1;
        }
        assert_eq!(sorted, counts.iter().map(|(_, n)| n).sum::<u64>());
        let mut counts = counts;
        counts.sort();
        counts
    }
}

struct RawClickHouse {
    url: String,
    database: String,
}

impl RawClickHouse {
    fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        let url = format!("{}/?database={}", self.url, self.database);
        let mut response = ureq::post(&url).send(format!("{sql} FORMAT TSV")).expect("clickhouse answers");
        let text = response.body_mut().with_config().limit(1 << 30).read_to_string().expect("body");
        text.lines().map(|line| line.split('\t').map(str::to_owned).collect()).collect()
    }
}

fn number(text: &str) -> u64 {
    text.parse().unwrap_or_default()
}

impl Raw for RawClickHouse {
    fn tools(&self, from: i64) -> Vec<(String, u64, u64)> {
        self.rows(&format!(
            "SELECT concat(server, '/', tool), count(), countIf(status = 'error'), avg(duration_ms),
                    toInt64(toUnixTimestamp64Milli(max(started_at)))
             FROM tool_calls FINAL WHERE project = '{PROJECT}' AND started_at >= fromUnixTimestamp64Milli(toInt64({from}))
             GROUP BY server, tool ORDER BY server, tool"
        ))
        .into_iter()
        .map(|r| (r[0].clone(), number(&r[1]), number(&r[2])))
        .collect()
    }

    fn stats(&self, from: i64) -> Vec<(String, String, u64)> {
        let mut rows: Vec<(String, String, u64)> = self
            .rows(&format!(
                "SELECT concat(server, '/', tool), toString(shape_outcome), count() FROM tool_calls FINAL
                 WHERE project = '{PROJECT}' AND started_at >= fromUnixTimestamp64Milli(toInt64({from}))
                 GROUP BY server, tool, status, shape_outcome"
            ))
            .into_iter()
            .map(|r| (r[0].clone(), r[1].clone(), number(&r[2])))
            .collect();
        rows.sort();
        rows
    }

    fn impact(&self, server: &str, tool: &str, from: i64) -> (Vec<(String, u64, u64)>, u64) {
        let window = format!(
            "FROM tool_calls FINAL WHERE project = '{PROJECT}' AND server = '{server}' AND tool = '{tool}'
               AND started_at >= fromUnixTimestamp64Milli(toInt64({from}))"
        );
        let agents = self
            .rows(&format!(
                "SELECT ifNull(agent_name, 'unknown') AS agent, uniqExact(session_id), count() AS calls,
                        countIf(status = 'error'), avg(duration_ms), max(started_at)
                 {window} GROUP BY agent ORDER BY calls DESC, agent"
            ))
            .into_iter()
            .map(|r| (r[0].clone(), number(&r[1]), number(&r[2])))
            .collect();
        let total = self.rows(&format!("SELECT uniqExact(session_id) {window}"));
        (agents, number(&total[0][0]))
    }

    fn timeline(&self, server: &str, tool: Option<&str>, from: i64, to: i64, bucket: i64) -> Vec<(i64, u64)> {
        let tool_filter = tool.map(|t| format!("AND tool = '{t}'")).unwrap_or_default();
        let scope = format!(
            "FROM tool_calls FINAL WHERE project = '{PROJECT}' AND server = '{server}' {tool_filter}
               AND started_at >= fromUnixTimestamp64Milli(toInt64({from})) AND started_at < fromUnixTimestamp64Milli(toInt64({to}))"
        );
        let key = format!("toInt64(intDiv(toUnixTimestamp64Milli(started_at) - {from}, {bucket}))");
        let mut counts: Vec<(i64, u64)> = self
            .rows(&format!(
                "SELECT {key} AS k, count(), countIf(status = 'error'),
                        countIf(shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL),
                        arrayElement(arraySort(groupArray(duration_ms)), toUInt64(greatest(1, ceil(0.5 * count())))),
                        arrayElement(arraySort(groupArray(duration_ms)), toUInt64(greatest(1, ceil(0.95 * count()))))
                 {scope} GROUP BY k"
            ))
            .into_iter()
            .map(|r| (r[0].parse().unwrap_or_default(), number(&r[1])))
            .collect();
        self.rows(&format!(
            "SELECT k, max(n) FROM (SELECT {key} AS k, count() AS n {scope}
                 AND shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL GROUP BY k, shape_hash) GROUP BY k"
        ));
        counts.sort();
        counts
    }
}

/// p50 and p95 (ms) of `repeats` timings of `read`, stopping early after `budget`; and its last answer.
async fn time<T, F, Fut>(repeats: usize, budget: Duration, mut read: F) -> (f64, f64, usize, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last = None;
    while samples.len() < repeats && (samples.is_empty() || started.elapsed() < budget) {
        let at = Instant::now();
        last = Some(read().await);
        samples.push(at.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    let rank = |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    (rank(0.5), rank(0.95), samples.len(), last.expect("one timing at least"))
}

/// One read, from rollups and from raw calls.
#[derive(Debug, Clone, serde::Serialize)]
struct Timing {
    read: String,
    rollups_p50_ms: f64,
    rollups_p95_ms: f64,
    raw_p50_ms: f64,
    raw_p95_ms: f64,
    raw_runs: usize,
}

/// Times every read of traffic on both paths at `now` and checks that they count the same.
async fn measure(store: &dyn Store, raw: &(dyn Raw + Sync), config: &Config, now: i64) -> Vec<Timing> {
    let at = Timestamp::from_millis(now).expect("now");
    let raw_budget = Duration::from_secs(30);
    let (repeats, raw_repeats) = (config.repeats, config.raw_runs);
    let mut timings = Vec::new();
    let day = rollup::window(now, 24).from_ms;
    let month = rollup::window(now, 720).from_ms;
    let mut record = |read: &str, rolled: (f64, f64), scanned: (f64, f64, usize)| {
        timings.push(Timing {
            read: read.to_owned(),
            rollups_p50_ms: rolled.0,
            rollups_p95_ms: rolled.1,
            raw_p50_ms: scanned.0,
            raw_p95_ms: scanned.1,
            raw_runs: scanned.2,
        });
    };

    for (name, hours, from) in
        [("GET /api/tools (24 h)", 24u32, day), ("GET /api/tools?hours=720", 720, month)]
    {
        let (p50, p95, _, tools) = time(repeats, Duration::from_secs(60), || async {
            store.tools(PROJECT, hours, at).await.expect("tools")
        })
        .await;
        let (r50, r95, runs, scanned) = time(raw_repeats, raw_budget, || async { raw.tools(from) }).await;
        let rolled: Vec<(String, u64, u64)> =
            tools.iter().map(|t| (format!("{}/{}", t.server, t.tool), t.calls, t.errors)).collect();
        assert_eq!(rolled, scanned, "{name}: rollups and raw calls disagree");
        record(name, (p50, p95), (r50, r95, runs));
    }

    let (p50, p95, _, stats) = time(repeats, Duration::from_secs(60), || async {
        store.return_value_stats(PROJECT, 24, at).await.expect("stats")
    })
    .await;
    let (r50, r95, runs, scanned) = time(raw_repeats, raw_budget, || async { raw.stats(day) }).await;
    let mut rolled: Vec<(String, String, u64)> = Vec::new();
    for tool in &stats.tools {
        let name = format!("{}/{}", tool.server, tool.tool);
        let counts = tool.counts;
        for (outcome, n) in [("fingerprinted", counts.fingerprinted), ("not_success", counts.not_success)] {
            if n > 0 {
                rolled.push((name.clone(), outcome.to_owned(), n));
            }
        }
    }
    rolled.sort();
    assert_eq!(rolled, scanned, "return-value stats: rollups and raw calls disagree");
    record("GET /api/settings/return-value-stats", (p50, p95), (r50, r95, runs));

    let (p50, p95, _, impact) = time(repeats, Duration::from_secs(60), || async {
        let query = ImpactQuery {
            project: PROJECT,
            server: "server-0",
            tool: "tool_0",
            hours: 24,
            now: at,
            high_risk_sessions: 10,
            input_schema: None,
        };
        store.drift_impact(query).await.expect("impact")
    })
    .await;
    let (r50, r95, runs, (agents, total)) =
        time(raw_repeats, raw_budget, || async { raw.impact("server-0", "tool_0", day) }).await;
    let rolled: Vec<(String, u64, u64)> =
        impact.consumers.iter().map(|c| (c.agent_name.clone(), c.session_count, c.call_count)).collect();
    assert_eq!(rolled, agents, "drift impact: rollups and raw calls disagree");
    assert_eq!(impact.total_sessions, total, "drift impact: total sessions");
    record("GET …/drift-impact (agents, sessions, risk)", (p50, p95), (r50, r95, runs));

    for (name, server, tool, hours, bucket) in [
        ("GET /api/tools/{s}/{t}/timeline (6 h, 10 min)", "server-0", Some("tool_0"), 6i64, 10 * MINUTE_MS),
        ("GET /api/health/servers/{s}/timeline (24 h, 30 min)", "server-0", None, 24, 30 * MINUTE_MS),
        ("GET /api/health/servers/{s}/timeline (7 d, 6 h)", "server-0", None, 168, 6 * HOUR_MS),
    ] {
        let from = (now - hours * HOUR_MS).div_euclid(bucket) * bucket;
        let to = (now.div_euclid(bucket) + 1) * bucket;
        let (from_at, to_at) =
            (Timestamp::from_millis(from).expect("from"), Timestamp::from_millis(to).expect("to"));
        let query = BucketQuery::new(PROJECT, server, tool, from_at, to_at, bucket).expect("valid buckets");
        let (p50, p95, _, buckets) = time(repeats, Duration::from_secs(60), || async {
            store.call_buckets(query).await.expect("buckets")
        })
        .await;
        let (r50, r95, runs, scanned) =
            time(raw_repeats, raw_budget, || async { raw.timeline(server, tool, from, to, bucket) }).await;
        let rolled: Vec<(i64, u64)> = buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.calls > 0)
            .map(|(i, b)| (i as i64, b.calls))
            .collect();
        assert_eq!(rolled, scanned, "{name}: rollups and raw calls disagree");
        record(name, (p50, p95), (r50, r95, runs));
    }
    timings
}

/// A new store of `kind` (SQLite under `dir`, or a new ClickHouse database), with its raw-query side.
async fn open(
    kind: &str,
    name: &str,
    config: &Config,
    dir: &std::path::Path,
) -> (Arc<dyn Store>, Box<dyn Raw + Sync>) {
    match kind {
        "sqlite" => {
            let path = dir.join(format!("{name}.db"));
            let _ = std::fs::remove_file(&path);
            let store = SqliteStore::open(&path).expect("sqlite store");
            let connection = rusqlite::Connection::open(&path).expect("raw connection");
            (Arc::new(store), Box::new(RawSqlite { connection: std::sync::Mutex::new(connection) }))
        }
        "clickhouse" => {
            let database = format!("bench_scale_{name}_{}", std::process::id());
            let settings = ClickHouseSettings {
                url: config.clickhouse_url.clone(),
                database: database.clone(),
                user: None,
                password: None,
            };
            driftline_store::migrate_clickhouse(&settings)
                .await
                .expect("migrate ClickHouse: is `make infra-up` running, or CLICKHOUSE_URL set?");
            let store = ClickHouseStore::connect(&settings).await.expect("clickhouse store");
            (Arc::new(store), Box::new(RawClickHouse { url: config.clickhouse_url.clone(), database }))
        }
        other => panic!("SCALE_STORES: unknown store {other:?} (sqlite, clickhouse)"),
    }
}

fn drop_store(kind: &str, name: &str, config: &Config, dir: &std::path::Path) {
    match kind {
        "sqlite" => {
            for suffix in ["db", "db-wal", "db-shm"] {
                let _ = std::fs::remove_file(dir.join(format!("{name}.{suffix}")));
            }
        }
        _ => {
            let database = format!("bench_scale_{name}_{}", std::process::id());
            let _ = ureq::post(format!("{}/", config.clickhouse_url))
                .send(format!("DROP DATABASE IF EXISTS {database} SYNC"));
        }
    }
}

fn main() {
    let config = Config::read();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-scale");
    std::fs::create_dir_all(&dir).expect("target/bench-scale");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let now = chrono::Utc::now().timestamp_millis();
    let mut report = json!({"calls": config.calls, "batch": config.batch, "stores": {}});
    for kind in config.stores.clone() {
        runtime.block_on(async {
            // Write overhead: the same calls with and without rollups, each into a new store. They are the
            // day's first calls, as dense in time as the full load's (rows written per call depend on it).
            let sample = config.calls.min(config.overhead_calls);
            let mut seconds = BTreeMap::new();
            for with_rollups in [false, true].into_iter().filter(|_| sample > 0) {
                let name = if with_rollups { "overhead_rollups" } else { "overhead_raw" };
                let (store, _) = open(&kind, name, &config, &dir).await;
                let mut cache = RollupCache::default();
                let mut offset = 1;
                let rollups = with_rollups.then_some(&mut cache);
                let (generator, batch) = (&mut Generator::new(), config.batch);
                let taken = load(store.as_ref(), generator, rollups, sample, config.calls, &mut offset, batch, now).await;
                drop(store);
                drop_store(&kind, name, &config, &dir);
                seconds.insert(with_rollups, taken);
            }
            let overhead = (sample > 0).then(|| {
                let (raw_s, rollups_s) = (seconds[&false], seconds[&true]);
                let overhead_us = (rollups_s - raw_s) / sample as f64 * 1e6;
                println!(
                    "{kind}: the day's first {sample} calls stored in {raw_s:.1} s without rollups, {rollups_s:.1} s \
                     with them: {overhead_us:+.2} µs per call ({:.2}x)",
                    rollups_s / raw_s
                );
                json!({"sample_calls": sample, "without_rollups_s": raw_s, "with_rollups_s": rollups_s,
                    "overhead_us_per_call": overhead_us, "ratio": rollups_s / raw_s})
            });

            let (store, raw) = open(&kind, "reads", &config, &dir).await;
            let mut generator = Generator::new();
            let mut cache = RollupCache::default();
            let (mut loaded, mut offset) = (0u64, 1u64);
            let mut checkpoints = Vec::new();
            for point in config.checkpoints() {
                // Each load spreads its calls over the whole day: as if traffic had been that much all day.
                let count = point - loaded;
                let rollups = Some(&mut cache);
                let seconds =
                    load(store.as_ref(), &mut generator, rollups, count, count, &mut offset, config.batch, now).await;
                loaded = point;
                println!("{kind}: {loaded} calls loaded ({:.0} calls/s for the last {count})", count as f64 / seconds);
                let timings = measure(store.as_ref(), raw.as_ref(), &config, now).await;
                checkpoints.push(json!({"calls": loaded, "load_calls_per_s": count as f64 / seconds, "reads": timings}));
            }
            let expiry = match kind.as_str() {
                // ClickHouse expires rows by its tables' TTLs: the store has nothing to do.
                "sqlite" => Some(expire_everything(store.clone(), offset, now, &dir.join("reads.db")).await),
                _ => None,
            };
            report["stores"][&kind] =
                json!({"write_overhead": overhead, "checkpoints": checkpoints, "expiry": expiry});
            drop(store);
            if std::env::var_os("SCALE_KEEP").is_none() {
                drop_store(&kind, "reads", &config, &dir);
            }
        });
    }
    print_report(&report);
    let path = dir.parent().expect("target").join("bench-scale.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("JSON")).expect("write the report");
    println!("written to {}", path.display());
}

/// One table of every store: each read at each checkpoint, from rollups and from raw calls, and the writes.
fn print_report(report: &Value) {
    let stores = report["stores"].as_object().cloned().unwrap_or_default();
    let points: Vec<u64> = stores
        .values()
        .next()
        .and_then(|store| store["checkpoints"].as_array())
        .map(|points| points.iter().filter_map(|p| p["calls"].as_u64()).collect())
        .unwrap_or_default();
    let mut table = comfy_table::Table::new();
    let mut header = vec!["store".to_owned(), "API read (p50 / p95)".to_owned()];
    for calls in &points {
        header.push(format!("{} M calls: rollups", *calls as f64 / 1e6));
        header.push("raw scan (runs)".to_owned());
    }
    table.set_header(header);
    for (kind, store) in &stores {
        let checkpoints = store["checkpoints"].as_array().cloned().unwrap_or_default();
        let reads = checkpoints.first().and_then(|p| p["reads"].as_array()).cloned().unwrap_or_default();
        for (i, read) in reads.iter().enumerate() {
            let mut row = vec![kind.clone(), read["read"].as_str().unwrap_or_default().to_owned()];
            for point in &checkpoints {
                let timing = &point["reads"][i];
                let ms = |key: &str| timing[key].as_f64().unwrap_or(f64::NAN);
                row.push(format!("{:.1} / {:.1} ms", ms("rollups_p50_ms"), ms("rollups_p95_ms")));
                let runs = timing["raw_runs"].as_u64().unwrap_or_default();
                row.push(format!("{:.0} / {:.0} ms ({runs})", ms("raw_p50_ms"), ms("raw_p95_ms")));
            }
            table.add_row(row);
        }
        let mut row = vec![kind.clone(), "store writes, with rollups (calls/s)".to_owned()];
        for point in &checkpoints {
            row.push(format!("{:.0}", point["load_calls_per_s"].as_f64().unwrap_or(f64::NAN)));
            row.push(String::new());
        }
        table.add_row(row);
        if let Some(overhead) = store["write_overhead"].as_object() {
            let number = |key: &str| overhead.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN);
            table.add_row(vec![
                kind.clone(),
                format!(
                    "rollup write overhead ({} calls, with vs without)",
                    overhead.get("sample_calls").and_then(Value::as_u64).unwrap_or_default()
                ),
                format!("{:+.1} µs per call ({:.2}×)", number("overhead_us_per_call"), number("ratio")),
            ]);
        }
    }
    println!("API reads of traffic from rollups, next to the raw-call scans they replaced (same data, same answers)");
    println!("{table}");
}
