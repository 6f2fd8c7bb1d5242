-- What the notifier sends (one row per new drift event and per DOWN/UP transition, written by the detector
-- with its outputs; ids derived from the input record, so a replay writes nothing new), and what each
-- webhook has been sent: the notifier's stored cursor. A restart repeats at most the notification in flight.
CREATE TABLE notifications (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    server_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX notifications_by_time ON notifications (at);
CREATE TABLE notifications_sent (
    webhook TEXT NOT NULL,
    id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    sent_at INTEGER NOT NULL,
    PRIMARY KEY (webhook, id)
);
