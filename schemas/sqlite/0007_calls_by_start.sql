-- Timelines read a server's (or a tool's) calls by when they were made.
CREATE INDEX tool_calls_by_start ON tool_calls (project, server, started_at);
