-- Upcoming releases (issue #46): a watched server's release captured in a sandbox by the upstream watcher
-- and diffed against the server's baseline, one row per release and list (ids derived from the input
-- record, so a replay replaces rows with themselves). The body is the UpcomingRelease as JSON.
CREATE TABLE IF NOT EXISTS upcoming_releases (
    id String,
    project String,
    server_name String,
    package String,
    version String,
    detected_at DateTime64(3, 'UTC'),
    body String
) ENGINE = ReplacingMergeTree
ORDER BY (project, server_name, id)
TTL toDateTime(detected_at) + INTERVAL 90 DAY;
