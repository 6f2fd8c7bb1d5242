-- Rollups (store/src/rollup): the calls of one tool, and of one agent on one tool, per minute (60) and per
-- hour (3600), so that no API read scans raw calls. The detector writes whole rows in the batch of the calls
-- they include, before its positions; through_partition/through_offset is the last input record folded in, so
-- a replayed record is recognised and counted once. A row only grows: the one with the most calls is the
-- newest (the version FINAL keeps). Times are Unix ms. Minute rows are kept 3 days, hour rows 31.
CREATE TABLE IF NOT EXISTS tool_rollups (
    project LowCardinality(String),
    server LowCardinality(String),
    tool LowCardinality(String),
    bucket_seconds UInt32,
    bucket_ms Int64,
    through_partition UInt32,
    through_offset UInt64,
    calls UInt64,
    errors UInt64,
    duration_sum Float64,
    last_call_ms Int64,
    fingerprinted UInt64,
    oversized UInt64,
    truncated_sentinel UInt64,
    unparseable UInt64,
    too_deep UInt64,
    absent UInt64,
    not_success UInt64,
    latency String,                        -- LatencySketch
    shapes String                          -- ShapeCounts
) ENGINE = ReplacingMergeTree(calls)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(bucket_ms, 1000), 'UTC'))
ORDER BY (project, server, tool, bucket_seconds, bucket_ms)
TTL toDateTime(intDiv(bucket_ms, 1000), 'UTC') + toIntervalHour(if(bucket_seconds = 60, 72, 744));

CREATE TABLE IF NOT EXISTS agent_rollups (
    project LowCardinality(String),
    server LowCardinality(String),
    tool LowCardinality(String),
    bucket_seconds UInt32,
    bucket_ms Int64,
    agent String,                          -- 'unknown' for calls without an agent name
    through_partition UInt32,
    through_offset UInt64,
    calls UInt64,
    errors UInt64,
    duration_sum Float64,
    last_call_ms Int64,
    sessions String                        -- SessionSketch
) ENGINE = ReplacingMergeTree(calls)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(bucket_ms, 1000), 'UTC'))
ORDER BY (project, server, tool, bucket_seconds, bucket_ms, agent)
TTL toDateTime(intDiv(bucket_ms, 1000), 'UTC') + toIntervalHour(if(bucket_seconds = 60, 72, 744));
