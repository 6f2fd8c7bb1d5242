-- The store removes what is past its retention (store/src/retention.rs, ClickHouse's TTLs) itself. Identities
-- are looked up by identity; expiring them by age needs them in the order they were stored, which this index
-- keeps (appended at its end, so a batch dirties few of its pages).
CREATE INDEX call_identities_by_time ON call_identities (ingested_at);
