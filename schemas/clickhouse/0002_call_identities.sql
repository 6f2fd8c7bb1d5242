-- Every stored call by its identity (project, server, tool, trace id, span id) and the input record it came
-- from: a call sent again (a client's retry) is recognised and counted once; a replay of the same record is not
-- a repeat. Looked up by identity (the sort key); kept as long as the calls.
CREATE TABLE IF NOT EXISTS call_identities (
    identity String,
    partition UInt32,
    offset UInt64,
    ingested_at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY identity
TTL toDateTime(ingested_at) + INTERVAL 30 DAY;
