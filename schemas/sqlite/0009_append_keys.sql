-- Calls and identities keyed for appends. Every batch used to insert each call under a random key twice
-- (`tool_calls.id`, a hash, and `call_identities.identity` as 32 hex characters), so every call dirtied a
-- page of two ever-growing random indexes and the detector spent its time writing those pages to the WAL
-- and checkpointing them.
--
-- Calls are keyed by the input record they came from (stream, offset): a replayed record is ignored by that
-- key, and new calls append at the end of their stream. Calls stored before this migration have no stored
-- position; they keep their row order under stream -1, which no input stream has, and are never replayed
-- (a stored position commits with its outputs).
CREATE TABLE tool_calls_by_position (
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    id TEXT NOT NULL,
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
    compact_bytes INTEGER,
    PRIMARY KEY (partition, offset)
) WITHOUT ROWID;
INSERT INTO tool_calls_by_position
    SELECT -1, rowid, id, project, server, tool, span_id, session_id, agent_name, started_at, ingested_at,
           duration_ms, status, error, shape_outcome, shape_hash, compact_bytes
    FROM tool_calls ORDER BY rowid;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_by_position RENAME TO tool_calls;
CREATE INDEX tool_calls_by_tool ON tool_calls (project, server, tool, ingested_at);

-- Identities as their 16 bytes (any other text as text), in a table that is its own index: a third of the
-- pages per entry. Lookups stay random by nature; small entries make a batch dirty fewer pages.
CREATE TABLE call_identities_packed (
    identity BLOB PRIMARY KEY,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    ingested_at INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO call_identities_packed
    SELECT COALESCE(unhex(identity), identity), partition, offset, ingested_at FROM call_identities;
DROP TABLE call_identities;
ALTER TABLE call_identities_packed RENAME TO call_identities;
