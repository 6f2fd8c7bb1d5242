//! `driftline serve`: ingest, the detector worker and the API in one process on embedded defaults.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use driftline_api::{ApiState, Auth};
use driftline_bus::{KafkaBus, SqliteBus};
use driftline_ingest::{IngestState, Limits};
use driftline_schemas::Timestamp;
use driftline_store::SqliteStore;
use driftline_worker::{Worker, WorkerSettings};

use crate::config::{BusKind, Config};

pub fn now() -> Timestamp {
    Timestamp::from(chrono::Utc::now())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let data_dir = &config.storage.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create storage.data_dir {}", data_dir.display()))?;
    let store = Arc::new(SqliteStore::open(&data_dir.join("driftline.db")).context("cannot open the store")?);
    let settings = WorkerSettings {
        thresholds: config.detector.thresholds(),
        baseline_policy: config.detector.baseline,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (producer, worker_task): (Arc<dyn driftline_bus::Producer>, _) = match config.storage.bus {
        BusKind::Embedded => {
            let bus =
                SqliteBus::open(&data_dir.join("bus.db"), now_ms).context("cannot open the embedded bus")?;
            let worker = Worker::resume(bus.consumer(), store.clone(), settings).await?;
            (Arc::new(bus), tokio::spawn(worker.run(stopped)))
        }
        BusKind::Kafka => {
            let bus =
                KafkaBus::connect(config.kafka.settings()).context("cannot configure the Kafka producer")?;
            bus.ensure_topics()
                .await
                .with_context(|| format!("cannot reach Kafka at kafka.brokers = {}", config.kafka.brokers))?;
            let worker = Worker::resume(bus.consumer()?, store.clone(), settings).await?;
            (Arc::new(bus), tokio::spawn(worker.run(stopped)))
        }
    };
    let auth = Arc::new(Auth::new(config.auth.keys.clone()));
    let probe_settings = driftline_probe::ProbeSettings {
        project: config.probe.project.clone(),
        interval: Duration::from_secs(config.probe.interval_seconds),
        timeout: Duration::from_secs(config.probe.timeout_seconds),
    };
    let probes = driftline_probe::spawn(
        config.probe.servers.clone(),
        probe_settings,
        producer.clone(),
        stop.subscribe(),
    );
    let (ingest, ingest_doc) = driftline_ingest::router(IngestState {
        producer: producer.clone(),
        auth: auth.clone(),
        limits: Limits {
            max_body_bytes: config.limits.max_body_bytes,
            max_spans_per_batch: config.limits.max_spans_per_batch,
        },
        clock: now,
    });
    let (api, api_doc) = driftline_api::router(ApiState {
        store,
        producer,
        auth,
        default_thresholds: config.detector.thresholds(),
        high_risk_sessions: config.detector.high_risk_sessions,
        command_wait: Duration::from_secs(5),
        clock: now,
    });
    let listener = tokio::net::TcpListener::bind(config.bind_address()?)
        .await
        .with_context(|| format!("cannot listen on server.bind = {}", config.server.bind))?;
    let address = listener.local_addr()?;
    // The first line on stdout says where to reach the server (tests and scripts read it).
    println!("driftline listening on http://{address}");
    tracing::info!(%address, data_dir = %data_dir.display(), "driftline serving");
    let document = driftline_api::openapi_document(vec![ingest_doc, api_doc]);
    let openapi = axum::Router::new()
        .route("/openapi.json", axum::routing::get(move || async move { axum::Json(document) }));
    let app =
        ingest.merge(api).merge(openapi).layer(axum::middleware::from_fn(driftline_api::metrics::track));
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    // Requests are drained; let the worker finish the batch it holds, then stop.
    let _ = stop.send(true);
    for probe in probes {
        let _ = tokio::time::timeout(Duration::from_secs(2), probe).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), worker_task).await;
    tracing::info!("driftline stopped");
    Ok(())
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
