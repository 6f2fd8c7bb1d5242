-- What the notifier sends (one row per new drift event and per DOWN/UP transition, written by the detector
-- with its outputs; ids derived from the input record, so a replay replaces rows with themselves), and what
-- each webhook has been sent: the notifier's stored cursor. Both are small; kept 30 days.
CREATE TABLE IF NOT EXISTS notifications (
    id String,
    project String,
    server_name String,
    kind LowCardinality(String),
    at DateTime64(3, 'UTC'),
    body String
) ENGINE = ReplacingMergeTree
ORDER BY id
TTL toDateTime(at) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS notifications_sent (
    webhook String,
    id String,
    outcome LowCardinality(String),
    sent_at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (webhook, id)
TTL toDateTime(sent_at) + INTERVAL 30 DAY;
