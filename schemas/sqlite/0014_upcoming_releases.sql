-- Upcoming releases (issue #46): a watched server's release captured in a sandbox by the upstream watcher
-- and diffed against the server's baseline, one row per release and list (ids derived from the input
-- record, so a replay writes nothing new). The body is the UpcomingRelease as JSON. Kept as drift events are.
CREATE TABLE upcoming_releases (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    detected_at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX upcoming_releases_by_server ON upcoming_releases (project, server_name, detected_at);
