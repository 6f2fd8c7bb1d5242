-- Call identities by input stream and time: a detector that takes a stream reads its recent identities as
-- one range, then tells a call sent again from memory. Looking up a batch's scattered identities in
-- `call_identities` (sorted by identity) read most of that table, so its cost grew with every call stored
-- in 30 days. `call_identities` is written no more and empties by its TTL.
CREATE TABLE IF NOT EXISTS call_identities_by_stream (
    partition UInt32,
    ingested_at DateTime64(3, 'UTC'),
    identity String,
    offset UInt64
) ENGINE = ReplacingMergeTree
ORDER BY (partition, ingested_at, identity)
TTL toDateTime(ingested_at) + INTERVAL 31 DAY;

-- What detectors before this one stored (run again after an interruption, the same rows collapse).
INSERT INTO call_identities_by_stream SELECT partition, ingested_at, identity, offset FROM call_identities;
