-- driftline on ClickHouse, version 1 (DESIGN.md §8). Applied by `driftline migrate`; every statement is
-- idempotent. Every sort key starts with project: queries filter on it first.
--
-- Replays deduplicate with ReplacingMergeTree, read with FINAL: after a crash the worker re-reads from its
-- last stored position and forms different batches than before, so insert-deduplication tokens (which
-- match whole blocks) would miss the repeats; rows with the same sort key collapse whatever the batching.
-- Tables holding the latest value of something keep the last inserted row (no version column): per key
-- one worker writes, in input order.

CREATE TABLE IF NOT EXISTS schema_drift_events (
    project LowCardinality(String),
    server_name LowCardinality(String),
    id String,
    detected_at DateTime64(3, 'UTC'),
    previous_hash String,
    current_hash String,
    changes String,                        -- JSON array of SchemaChange
    status LowCardinality(String),         -- open | accepted | reverted
    max_classification Nullable(String),
    max_severity Nullable(String),
    accepted_by Nullable(String),
    accepted_at Nullable(DateTime64(3, 'UTC')),
    event String,                          -- the whole SchemaDriftEvent as detected, JSON
    INDEX server_name_bloom server_name TYPE bloom_filter GRANULARITY 4
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(detected_at)
ORDER BY (project, server_name, id)
TTL toDateTime(detected_at) + INTERVAL 90 DAY;

CREATE TABLE IF NOT EXISTS baseline_acceptances (
    project LowCardinality(String),
    server_name LowCardinality(String),
    id String,
    previous_hash String,
    new_hash String,
    accepted_by String,
    accepted_at DateTime64(3, 'UTC'),
    event_ids String                       -- JSON array
) ENGINE = ReplacingMergeTree
ORDER BY (project, server_name, id);

CREATE TABLE IF NOT EXISTS servers (
    project LowCardinality(String),
    server_name String,
    status LowCardinality(String),
    schema_hash Nullable(String),
    tool_count UInt32,
    last_seen Nullable(DateTime64(3, 'UTC')),
    note Nullable(String),
    latency_ms Nullable(Float64)
) ENGINE = ReplacingMergeTree
ORDER BY (project, server_name);

CREATE TABLE IF NOT EXISTS server_snapshots (
    project LowCardinality(String),
    server_name String,
    schema_hash String,
    captured_at DateTime64(3, 'UTC'),
    tools String                           -- JSON array as declared
) ENGINE = ReplacingMergeTree
ORDER BY (project, server_name, schema_hash);

-- The tools of each snapshot; the current ones are those of the server's newest snapshot.
CREATE TABLE IF NOT EXISTS tool_schemas (
    project LowCardinality(String),
    server_name String,
    schema_hash String,
    tool_name String,
    description Nullable(String),
    input_schema String,
    captured_at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (project, server_name, schema_hash, tool_name);

CREATE TABLE IF NOT EXISTS tool_calls (
    project LowCardinality(String),
    server LowCardinality(String),
    tool LowCardinality(String),
    ingested_at DateTime64(3, 'UTC'),
    id String,
    span_id String,
    session_id Nullable(String),
    agent_name Nullable(String),
    started_at DateTime64(3, 'UTC'),
    duration_ms Float64,
    status LowCardinality(String),
    error Nullable(String),
    shape_outcome LowCardinality(String),
    shape_hash Nullable(String),
    compact_bytes Nullable(UInt64)
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ingested_at)
ORDER BY (project, server, tool, ingested_at, id)
TTL toDateTime(ingested_at) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS shape_drift_signals (
    project LowCardinality(String),
    server LowCardinality(String),
    tool LowCardinality(String),
    id String,
    detected_at DateTime64(3, 'UTC'),
    shape_hash String,
    signal String                          -- the whole ShapeDriftSignal, JSON
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(detected_at)
ORDER BY (project, server, tool, id)
TTL toDateTime(detected_at) + INTERVAL 90 DAY;

CREATE TABLE IF NOT EXISTS tool_shapes (
    project LowCardinality(String),
    server String,
    tool String,
    shape String                           -- the ToolShape view without signal groups, JSON
) ENGINE = ReplacingMergeTree
ORDER BY (project, server, tool);

CREATE TABLE IF NOT EXISTS settings (
    project String,
    thresholds String                      -- DetectorThresholds, JSON
) ENGINE = ReplacingMergeTree
ORDER BY project;

CREATE TABLE IF NOT EXISTS applied_commands (
    id String,
    applied_at DateTime64(3, 'UTC'),
    result String
) ENGINE = ReplacingMergeTree
ORDER BY id;

-- Detector state and input positions (kind 'position', key = stream). Written in one insert after the
-- batch's outputs, so a stored position always comes with the state and outputs it includes.
CREATE TABLE IF NOT EXISTS detector_state (
    consumer LowCardinality(String),
    kind LowCardinality(String),           -- server | tool | position
    key String,
    stream UInt32,                         -- the input partition whose records the state includes
    state String
) ENGINE = ReplacingMergeTree
ORDER BY (consumer, kind, key);
