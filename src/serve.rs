//! `driftline serve` (ingest, the detector worker, the API and the prober in one process) and the single
//! stages `driftline ingest | detect | api | probe` of a split deployment over Kafka and ClickHouse.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use driftline_api::ApiState;
use driftline_bus::{KafkaBus, SqliteBus};
use driftline_http::Auth;
use driftline_ingest::{IngestState, Limits};
use driftline_schemas::Timestamp;
use driftline_store::{ClickHouseStore, SqliteStore, Store};
use driftline_worker::{Worker, WorkerSettings};

use driftline::config::{BusKind, Config, StoreKind};

pub fn now() -> Timestamp {
    Timestamp::from(chrono::Utc::now())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Which stages a process runs (DESIGN.md §1): all of them (`serve`), or one (`ingest`, `detect`, `api`,
/// `probe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    All,
    Ingest,
    Detect,
    Api,
    Probe,
    Notify,
    Upstream,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::All => "serve",
            Role::Ingest => "ingest",
            Role::Detect => "detect",
            Role::Api => "api",
            Role::Probe => "probe",
            Role::Notify => "notify",
            Role::Upstream => "upstream",
        }
    }

    fn probes(self) -> bool {
        matches!(self, Role::All | Role::Probe)
    }

    /// Detectors, probers, notifiers and the upstream watcher serve only health and metrics.
    fn serves_data(self) -> bool {
        !matches!(self, Role::Detect | Role::Probe | Role::Notify | Role::Upstream)
    }

    fn watches_upstream(self) -> bool {
        matches!(self, Role::All | Role::Upstream)
    }

    fn notifies(self) -> bool {
        matches!(self, Role::All | Role::Notify)
    }

    fn ingests(self) -> bool {
        matches!(self, Role::All | Role::Ingest)
    }

    fn detects(self) -> bool {
        matches!(self, Role::All | Role::Detect)
    }

    fn answers_queries(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }
}

/// A stage on its own shares nothing in-process with the others: they meet in Kafka and ClickHouse.
pub fn check_role(config: &Config, role: Role) -> anyhow::Result<()> {
    config.check_listener(role.serves_data())?;
    if role == Role::All {
        return Ok(());
    }
    if role == Role::Notify {
        // The notifier reads only the store.
        if config.storage.store != StoreKind::Clickhouse {
            anyhow::bail!(
                "driftline notify needs storage.store = \"clickhouse\" (DRIFTLINE__STORAGE__STORE=clickhouse)"
            );
        }
        return Ok(());
    }
    if config.storage.bus != BusKind::Kafka {
        anyhow::bail!(
            "driftline {} runs one stage and needs storage.bus = \"kafka\" (DRIFTLINE__STORAGE__BUS=kafka); \
             `driftline serve` runs every stage in one process on the embedded bus",
            role.name()
        );
    }
    if matches!(role, Role::Detect | Role::Api) && config.storage.store != StoreKind::Clickhouse {
        anyhow::bail!(
            "driftline {} needs storage.store = \"clickhouse\" (DRIFTLINE__STORAGE__STORE=clickhouse)",
            role.name()
        );
    }
    Ok(())
}

async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match config.storage.store {
        StoreKind::Sqlite => {
            let path = config.storage.data_dir.join("driftline.db");
            Arc::new(SqliteStore::open(&path).context("cannot open the store")?)
        }
        StoreKind::Clickhouse => {
            Arc::new(ClickHouseStore::connect(&config.clickhouse.settings()).await.with_context(|| {
                format!("cannot use ClickHouse at clickhouse.url = {}", config.clickhouse.url)
            })?)
        }
    })
}

/// `driftline migrate`: the ClickHouse tables of `schemas/clickhouse/`, idempotently.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let applied =
        driftline_store::migrate_clickhouse(&config.clickhouse.settings()).await.with_context(|| {
            format!("cannot migrate ClickHouse at clickhouse.url = {}", config.clickhouse.url)
        })?;
    if applied.is_empty() {
        println!("database {} is up to date", config.clickhouse.database);
    }
    for version in applied {
        println!("applied migration {version} to database {}", config.clickhouse.database);
    }
    Ok(())
}

/// Runs the stages of `role` until SIGTERM or Ctrl-C: stop accepting, drain requests, finish the batch.
pub async fn serve(config: Config, role: Role) -> anyhow::Result<()> {
    check_role(&config, role)?;
    let data_dir = &config.storage.data_dir;
    if config.storage.bus == BusKind::Embedded || config.storage.store == StoreKind::Sqlite {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create storage.data_dir {}", data_dir.display()))?;
    }
    let settings = WorkerSettings {
        thresholds: config.detector.thresholds(),
        repeat_window_hours: config.detector.repeat_window_hours,
        repeat_memory_bytes: config.detector.repeat_memory_bytes,
        throttle: Duration::from_millis(config.detector.test_batch_pause_ms),
        stop_after_batches: Some(config.detector.test_stop_after_batches).filter(|&n| n > 0),
        tool_lists: config.limits.tool_lists(),
        max_batch_records: config.detector.max_batch_records,
        keys: config.limits.keys(),
        forget_unseen_tools_after: Duration::from_secs(config.detector.forget_unseen_tools_after_seconds),
        max_batch_time: Duration::from_millis(config.detector.max_batch_millis),
    };
    let store = if matches!(role, Role::Ingest | Role::Probe | Role::Upstream) {
        None
    } else {
        Some(open_store(&config).await?)
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut notifiers = Vec::new();
    if let (true, Some(store)) = (role.notifies(), &store) {
        if role == Role::Notify && config.notify.webhooks.is_empty() {
            tracing::warn!("no [[notify.webhooks]] configured: the notify stage has nothing to send");
        }
        notifiers = driftline_notify::spawn(
            config.notify.webhooks.clone(),
            config.notify.settings(),
            store.clone(),
            stop.subscribe(),
        );
    }
    if role == Role::Notify {
        return serve_operations(&config, role, operations(store, None), stop, notifiers).await;
    }
    let mut worker_task = None;
    let (producer, kafka): (Arc<dyn driftline_bus::Producer>, Option<KafkaBus>) = match config.storage.bus {
        BusKind::Embedded => {
            let bus =
                SqliteBus::open(&data_dir.join("bus.db"), now_ms).context("cannot open the embedded bus")?;
            if let (true, Some(store)) = (role.detects(), &store) {
                // The detector is the embedded log's only reader: what it has stored is dropped from it.
                let worker = Worker::resume(bus.sole_consumer(), store.clone(), settings)
                    .await?
                    .with_declarations(Arc::new(bus.clone()));
                worker_task = Some(tokio::spawn(worker.run(stopped)));
            }
            (Arc::new(bus), None)
        }
        BusKind::Kafka => {
            let bus =
                KafkaBus::connect(config.kafka.settings()).context("cannot configure the Kafka producer")?;
            bus.ensure_topics()
                .await
                .with_context(|| format!("cannot reach Kafka at kafka.brokers = {}", config.kafka.brokers))?;
            if let (true, Some(store)) = (role.detects(), &store) {
                let worker = Worker::resume(bus.consumer()?, store.clone(), settings)
                    .await?
                    .with_dead_letters(Arc::new(bus.clone()))
                    .with_declarations(Arc::new(bus.clone()));
                worker_task = Some(tokio::spawn(worker.run(stopped)));
            }
            (Arc::new(bus.clone()), Some(bus))
        }
    };
    // Rows past their retention are removed beside the detector (a no-op where the store has TTLs).
    let expiry = match (role.detects(), &store) {
        (true, Some(store)) => Some(driftline_worker::expiry::spawn(
            store.clone(),
            now,
            driftline_worker::expiry::EXPIRE_EVERY,
            stop.subscribe(),
        )),
        _ => None,
    };
    // The worker is supervised: if it stops or panics before shutdown, the process is not ready and exits.
    let (worker_failed, worker_failure) = tokio::sync::oneshot::channel::<String>();
    let supervisor =
        worker_task.take().map(|task| tokio::spawn(supervise(task, stop.subscribe(), worker_failed)));
    let auth = Arc::new(Auth::new(config.auth.keys.clone()));
    let local_mode = auth.is_open();
    let mut probes = Vec::new();
    let mut app = axum::Router::new();
    let mut documents = Vec::new();
    if role == Role::Probe && config.probe.servers.is_empty() {
        tracing::warn!("no [[probe.servers]] configured: the probe stage has nothing to probe");
    }
    if role.probes() {
        let probe_settings = driftline_probe::ProbeSettings {
            project: config.probe.project.clone(),
            interval: Duration::from_secs(config.probe.interval_seconds),
            timeout: Duration::from_secs(config.probe.timeout_seconds),
            limits: config.limits.tool_lists(),
        };
        probes = driftline_probe::spawn(
            config.probe.servers.clone(),
            probe_settings,
            producer.clone(),
            stop.subscribe(),
        );
    }
    if role == Role::Upstream && config.upstream.is_empty() {
        tracing::warn!("no [[upstream]] packages configured: the upstream stage has nothing to watch");
    }
    let mut watcher = None;
    if role.watches_upstream() && !config.upstream.is_empty() {
        let (settings, watched) =
            config.upstream_watcher.watch(&config.upstream, &config.storage.data_dir)?;
        watcher = Some(tokio::spawn(driftline_upstream::watch::run(
            settings,
            watched,
            producer.clone(),
            stop.subscribe(),
        )));
    }
    let mut grpc_state = None;
    if role.ingests() {
        let state = IngestState {
            producer: producer.clone(),
            auth: auth.clone(),
            limits: Limits {
                max_body_bytes: config.limits.max_body_bytes,
                max_spans_per_batch: config.limits.max_spans_per_batch,
                tool_lists: config.limits.tool_lists(),
                list_work: config.limits.list_work(),
            },
            clock: now,
            list_budget: Arc::new(driftline_ingest::list_budget::ListWorkBudget::new(
                config.limits.list_work(),
            )),
            otlp_servers: Arc::new(config.otlp.server_names()?),
        };
        grpc_state = Some(state.clone());
        let (ingest, ingest_doc) = driftline_ingest::router(state);
        app = app.merge(ingest);
        documents.push(ingest_doc);
    }
    match (role.answers_queries(), &store) {
        (true, Some(store)) => {
            let (api, api_doc) = driftline_api::router(ApiState {
                store: store.clone(),
                producer,
                auth,
                default_thresholds: config.detector.thresholds(),
                high_risk_sessions: config.detector.high_risk_sessions,
                command_wait: Duration::from_secs(5),
                clock: now,
            });
            app = app.merge(api);
            documents.push(api_doc);
        }
        // A single stage without the API still answers the operations endpoints.
        _ => app = app.merge(operations(store.clone(), kafka)),
    }
    let listener = tokio::net::TcpListener::bind(config.bind_address()?)
        .await
        .with_context(|| format!("cannot listen on server.bind = {}", config.server.bind))?;
    let address = listener.local_addr()?;
    // The first line on stdout says where to reach the server (tests and scripts read it).
    println!("driftline listening on http://{address}");
    tracing::info!(%address, role = role.name(), bus = ?config.storage.bus, store = ?config.storage.store, "driftline serving");
    let grpc = match grpc_state {
        Some(state) => otlp_grpc(&config, state, stop.subscribe()).await?,
        None => None,
    };
    if !documents.is_empty() {
        let document = driftline_http::openapi_document(documents);
        // Serialised once: every connection shares these bytes instead of holding a copy of the document.
        let document = axum::body::Bytes::from(serde_json::to_vec(&document)?);
        app = app.route(
            "/openapi.json",
            axum::routing::get(move || {
                let body = document.clone();
                async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], body) }
            }),
        );
    }
    // Without API keys a web page must not be able to drive a stage that holds project data.
    let guard = driftline_http::guard::LocalGuard {
        open: local_mode && role.serves_data(),
        allowed_hosts: config.server.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
    };
    // Bodies are read after the guard has looked at the headers, before any handler.
    let bodies =
        driftline_http::body::BodyReader::new(config.server.body_limits(config.limits.max_body_bytes));
    let app = app
        .layer(axum::middleware::from_fn_with_state(bodies, driftline_http::body::read_whole_body))
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard), driftline_http::guard::guard))
        .layer(axum::middleware::from_fn(driftline_http::requests::track));
    let stopping = async move {
        tokio::select! {
            _ = shutdown_signal() => {}
            Ok(_) = worker_failure => {
                // A moment answering /readyz 503, so that load balancers stop sending before the exit.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    driftline_http::serve(
        listener,
        app,
        config.server.connection_limits(),
        stopping,
        Duration::from_secs(10),
    )
    .await?;
    // Requests are drained; let the worker finish the batch it holds, then stop.
    let _ = stop.send(true);
    if let Some(grpc) = grpc {
        let _ = tokio::time::timeout(Duration::from_secs(10), grpc).await;
    }
    // Probes close their sessions; a stdio server gets a few seconds to exit before it is killed.
    let _ = tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(probes)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), futures_util::future::join_all(notifiers)).await;
    if let Some(watcher) = watcher {
        // A capture in flight is dropped: its sandbox dies with it, and the release is captured again.
        let _ = tokio::time::timeout(Duration::from_secs(5), watcher).await;
    }
    if let Some(supervisor) = supervisor {
        let _ = supervisor.await;
    }
    if let Some(expiry) = expiry {
        let _ = expiry.await;
    }
    if let Some(reason) = driftline_http::readiness::failure() {
        anyhow::bail!("{reason}; exiting so that it is restarted");
    }
    tracing::info!(role = role.name(), "driftline stopped");
    Ok(())
}

/// OTLP/gRPC beside the HTTP listener (`otlp.grpc_bind`): its address is the second line on stdout. The
/// default port is taken when free; a configured one must be.
async fn otlp_grpc(
    config: &Config,
    state: IngestState,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    use driftline::config::GrpcListen;
    let (address, required) = match config.otlp.grpc_listen()? {
        GrpcListen::Off => return Ok(None),
        GrpcListen::Default(address) => (address, false),
        GrpcListen::Required(address) => (address, true),
    };
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(err) if !required => {
            tracing::warn!(%address, error = %err, "otlp grpc not served: its default port is taken; set otlp.grpc_bind");
            return Ok(None);
        }
        Err(err) => return Err(anyhow::anyhow!("cannot listen on otlp.grpc_bind = {address}: {err}")),
    };
    let bound = listener.local_addr()?;
    println!("otlp grpc listening on {bound}");
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    Ok(Some(tokio::spawn(async move {
        if let Err(err) = driftline_ingest::grpc::serve(state, listener, shutdown).await {
            tracing::error!(error = %err, "otlp grpc stopped");
        }
    })))
}

/// Waits for the worker: a stop before shutdown (a panic, or a return) fails readiness and triggers the
/// process's shutdown with the reason; at shutdown it gives the worker 10 s to store its batch.
async fn supervise(
    mut task: tokio::task::JoinHandle<()>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    failed: tokio::sync::oneshot::Sender<String>,
) {
    tokio::select! {
        result = &mut task => {
            let reason = match result {
                Ok(()) => "it returned".to_owned(),
                Err(err) if err.is_panic() => {
                    let payload = err.into_panic();
                    let message = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".to_owned());
                    format!("it panicked: {message}")
                }
                Err(err) => err.to_string(),
            };
            driftline_http::readiness::fail(format!("the detector worker stopped ({reason})"));
            let _ = failed.send(reason);
        }
        _ = async { stopping.wait_for(|stop| *stop).await.is_ok() } => {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// A stage that serves only `operations`: `driftline notify`.
async fn serve_operations(
    config: &Config,
    role: Role,
    app: axum::Router,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.bind_address()?)
        .await
        .with_context(|| format!("cannot listen on server.bind = {}", config.server.bind))?;
    let address = listener.local_addr()?;
    println!("driftline listening on http://{address}");
    tracing::info!(%address, role = role.name(), store = ?config.storage.store, "driftline serving");
    let bodies =
        driftline_http::body::BodyReader::new(config.server.body_limits(config.limits.max_body_bytes));
    let app = app
        .layer(axum::middleware::from_fn_with_state(bodies, driftline_http::body::read_whole_body))
        .layer(axum::middleware::from_fn(driftline_http::requests::track));
    let limits = config.server.connection_limits();
    driftline_http::serve(listener, app, limits, shutdown_signal(), Duration::from_secs(10)).await?;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), futures_util::future::join_all(tasks)).await;
    tracing::info!(role = role.name(), "driftline stopped");
    Ok(())
}

/// `/healthz`, `/readyz` (the store answers, Kafka answers) and `/metrics` of a stage without the API.
fn operations(store: Option<Arc<dyn Store>>, kafka: Option<KafkaBus>) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    let ready = move || {
        let (store, kafka) = (store.clone(), kafka.clone());
        async move {
            let mut problems = Vec::new();
            if let Some(reason) = driftline_http::readiness::failure() {
                problems.push(reason);
            }
            if let Some(store) = store {
                if let Err(err) = store.ping().await {
                    problems.push(format!("store: {err}"));
                }
            }
            if let Some(kafka) = kafka {
                if let Err(err) = kafka.ping().await {
                    problems.push(format!("kafka: {err}"));
                }
            }
            if problems.is_empty() {
                (StatusCode::OK, axum::Json(serde_json::json!({"status": "ready"})))
            } else {
                tracing::warn!(problems = ?problems, "not ready");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(serde_json::json!({"error": problems.join("; ")})),
                )
            }
        }
    };
    axum::Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route("/metrics", get(driftline_http::metrics::metrics))
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
    tracing::info!("shutdown requested");
}

/// `driftline topics migrate-partitioner`: driftline's producer used librdkafka's CRC32 partitioner before
/// it used the Java clients' murmur2, so a key may now land on another partition than the one its
/// detector state was stored with. This moves every state to the partition murmur2 gives its key. Run it
/// once, with the input topics drained (consumer lag 0) and the detectors stopped; it is idempotent.
pub async fn migrate_partitioner(config: &Config) -> anyhow::Result<()> {
    use driftline_bus::{partition_for_key, stream, Topic};
    use driftline_store::{Batch, DetectorState, Streams};

    let settings = config.kafka.settings();
    let bus = KafkaBus::connect(settings.clone())?;
    let counts: std::collections::HashMap<String, usize> = bus.describe_topics()?.into_iter().collect();
    let partitions = |topic: Topic| -> anyhow::Result<u32> {
        let name = settings.topic_name(topic);
        match counts.get(&name) {
            Some(&n) if n > 0 => Ok(n as u32),
            _ => anyhow::bail!("topic {name} does not exist; run `driftline topics create` first"),
        }
    };
    let (servers, tools) = (partitions(Topic::ToolLists)?, partitions(Topic::Spans)?);
    let store = open_store(config).await?;
    let resume = store.resume(Streams::All).await.context("cannot read detector state")?;
    // Keys' states move; other rows (the streams' rollup marks) stay with their stream.
    let keyed = |state: &DetectorState| matches!(state.kind.as_str(), "server" | "tool");
    let total = resume.states.iter().filter(|state| keyed(state)).count();
    let moved: Vec<DetectorState> = resume
        .states
        .into_iter()
        .filter_map(|state| {
            let (topic, count) = match state.kind.as_str() {
                "server" => (Topic::ToolLists, servers),
                "tool" => (Topic::Spans, tools),
                _ => return None,
            };
            let target = stream(topic, partition_for_key(&state.key, count) as i32);
            (target != state.stream).then_some(DetectorState { stream: target, ..state })
        })
        .collect();
    let count = moved.len();
    let mut moved = moved.into_iter().peekable();
    while moved.peek().is_some() {
        let states: Vec<DetectorState> = moved.by_ref().take(1000).collect();
        store.apply(Batch { states, ..Default::default() }).await.context("cannot store detector state")?;
    }
    tracing::info!(moved = count, states = total, "detector state moved to murmur2 partitions");
    println!("moved {count} of {total} detector states to the partitions murmur2 gives their keys");
    Ok(())
}

/// `driftline topics create|describe` against `[kafka]`.
pub async fn topics(config: &Config, create: bool) -> anyhow::Result<()> {
    let bus = KafkaBus::connect(config.kafka.settings())?;
    if create {
        let created = bus.ensure_topics().await?;
        if created.is_empty() {
            println!("all topics exist");
        }
        for name in created {
            println!("created {name} ({} partitions)", config.kafka.partitions);
        }
    }
    for (name, partitions) in bus.describe_topics()? {
        println!("{name}\t{partitions} partitions");
    }
    Ok(())
}
