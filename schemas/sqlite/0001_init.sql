-- driftline embedded store, version 1. Every table is filtered by project first.

CREATE TABLE consumer_offsets (
    consumer TEXT PRIMARY KEY,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL            -- the last input offset whose outputs and state are stored
);

CREATE TABLE detector_state (
    kind TEXT NOT NULL,                -- 'server' (tool-list detector) or 'tool' (shape detector)
    key TEXT NOT NULL,                 -- project/server or project/server/tool
    state TEXT NOT NULL,               -- JSON
    PRIMARY KEY (kind, key)
);

CREATE TABLE servers (
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    status TEXT NOT NULL,
    schema_hash TEXT,
    tool_count INTEGER NOT NULL,
    last_seen INTEGER,                 -- Unix ms
    note TEXT,
    PRIMARY KEY (project, server_name)
);

CREATE TABLE schema_drift_events (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    detected_at INTEGER NOT NULL,
    previous_hash TEXT NOT NULL,
    current_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    max_classification TEXT,
    max_severity TEXT,
    accepted_by TEXT,
    accepted_at INTEGER,
    event TEXT NOT NULL                -- the whole SchemaDriftEvent as JSON (changes, both tool lists)
);
CREATE INDEX schema_drift_events_by_server ON schema_drift_events (project, server_name, detected_at);

CREATE TABLE baseline_acceptances (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    previous_hash TEXT NOT NULL,
    new_hash TEXT NOT NULL,
    accepted_by TEXT NOT NULL,
    accepted_at INTEGER NOT NULL,
    event_ids TEXT NOT NULL
);

CREATE TABLE tool_schemas (
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    description TEXT,
    input_schema TEXT NOT NULL,
    captured_at INTEGER NOT NULL,
    PRIMARY KEY (project, server_name, tool_name)
);

CREATE TABLE server_snapshots (
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    schema_hash TEXT NOT NULL,
    captured_at INTEGER NOT NULL,
    tools TEXT NOT NULL,
    PRIMARY KEY (project, server_name, schema_hash)
);

CREATE TABLE tool_calls (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    span_id TEXT NOT NULL,
    session_id TEXT,
    agent_name TEXT,
    started_at INTEGER NOT NULL,
    ingested_at INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    shape_outcome TEXT NOT NULL,
    shape_hash TEXT,
    compact_bytes INTEGER
);
CREATE INDEX tool_calls_by_tool ON tool_calls (project, server, tool, ingested_at);

CREATE TABLE shape_drift_signals (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    detected_at INTEGER NOT NULL,
    shape_hash TEXT NOT NULL,
    signal TEXT NOT NULL               -- the whole ShapeDriftSignal as JSON
);
CREATE INDEX shape_drift_signals_by_tool ON shape_drift_signals (project, server, tool, shape_hash);

CREATE TABLE tool_shapes (
    project TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    shape TEXT NOT NULL,               -- the ToolShape view (without signal groups) as JSON
    PRIMARY KEY (project, server, tool)
);

CREATE TABLE settings (
    project TEXT PRIMARY KEY,
    thresholds TEXT NOT NULL
);

CREATE TABLE applied_commands (
    id TEXT PRIMARY KEY,
    applied_at INTEGER NOT NULL,
    result TEXT NOT NULL
);
