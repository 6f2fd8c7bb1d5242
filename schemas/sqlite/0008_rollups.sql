-- Rollups (store/src/rollup): the calls of one tool, and of one agent on one tool, per minute (60) and per
-- hour (3600), so that no API read scans raw calls. The detector writes whole rows in the batch of the calls
-- they include; through_partition/through_offset is the last input record folded in (a replayed record at or
-- before it is in the row already). Times are Unix ms.
CREATE TABLE tool_rollups (
    project TEXT NOT NULL,
    bucket_seconds INTEGER NOT NULL,
    bucket_ms INTEGER NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    through_partition INTEGER NOT NULL,
    through_offset INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    duration_sum REAL NOT NULL,
    last_call_ms INTEGER NOT NULL,
    fingerprinted INTEGER NOT NULL,
    oversized INTEGER NOT NULL,
    truncated_sentinel INTEGER NOT NULL,
    unparseable INTEGER NOT NULL,
    too_deep INTEGER NOT NULL,
    absent INTEGER NOT NULL,
    not_success INTEGER NOT NULL,
    latency BLOB NOT NULL,                  -- LatencySketch
    shapes BLOB NOT NULL,                   -- ShapeCounts
    PRIMARY KEY (project, bucket_seconds, bucket_ms, server, tool)
) WITHOUT ROWID;
-- Timelines read one server's (or tool's) rows.
CREATE INDEX tool_rollups_by_tool ON tool_rollups (project, server, tool, bucket_seconds, bucket_ms);

CREATE TABLE agent_rollups (
    project TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    bucket_seconds INTEGER NOT NULL,
    bucket_ms INTEGER NOT NULL,
    agent TEXT NOT NULL,                    -- 'unknown' for calls without an agent name
    through_partition INTEGER NOT NULL,
    through_offset INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    duration_sum REAL NOT NULL,
    last_call_ms INTEGER NOT NULL,
    sessions BLOB NOT NULL,                 -- SessionSketch
    PRIMARY KEY (project, server, tool, bucket_seconds, bucket_ms, agent)
) WITHOUT ROWID;

-- Timelines read rollups now; no query reads calls by when they started.
DROP INDEX IF EXISTS tool_calls_by_start;
