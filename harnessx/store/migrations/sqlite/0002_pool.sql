-- harnessx schema, version 2 (SQLite): the worker pool.
-- A run with queued_at set waits for a worker; workers register themselves per process start.

ALTER TABLE runs ADD COLUMN queued_at REAL;

ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

CREATE INDEX runs_queue ON runs (priority DESC, queued_at) WHERE queued_at IS NOT NULL;

CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    agents       TEXT NOT NULL,
    concurrency  INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    draining     INTEGER NOT NULL DEFAULT 0,
    stopped_at   REAL
);
