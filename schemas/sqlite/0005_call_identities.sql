-- Every stored call by its identity (project, server, tool, trace id, span id) and the input record it came
-- from: a call sent again (a client's retry) is recognised and counted once; a replay of the same record is not
-- a repeat.
CREATE TABLE call_identities (
    identity TEXT PRIMARY KEY,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    ingested_at INTEGER NOT NULL
);
CREATE INDEX call_identities_by_time ON call_identities (ingested_at);
