-- harnessx schema, version 6 (SQLite): what the operator console reads and records.
--
-- Runs carry their session's agent reference (it never changes), so that listing the runs of
-- one agent newest first is an index range, not a walk through every run. insert_run sets it.
-- The listing's indexes: newest first overall, by status, by agent; runs by request id.
-- The supervisor's leader records its scans on its leadership row (fenced by its epoch).
-- audit: every decision and control an operator made (console or CLI): who, when, what, and
-- how it ended (NULL outcome: the acting process stopped before it learned).
-- console_logins: the console's signed-in browser sessions, by a hash of their id, so that
-- logging out ends a session on every replica.

ALTER TABLE runs ADD COLUMN agent_ref TEXT;

UPDATE runs SET agent_ref = (SELECT s.agent_ref FROM sessions s WHERE s.id = runs.session_id);

CREATE INDEX runs_created ON runs (created_at, id);

CREATE INDEX runs_status_created ON runs (status, created_at, id);

CREATE INDEX runs_agent_created ON runs (agent_ref, created_at, id);

CREATE INDEX runs_request ON runs (request_id) WHERE request_id IS NOT NULL;

ALTER TABLE leadership ADD COLUMN scanned_at REAL;

ALTER TABLE leadership ADD COLUMN scans INTEGER NOT NULL DEFAULT 0;

ALTER TABLE leadership ADD COLUMN recovered INTEGER NOT NULL DEFAULT 0;

CREATE TABLE audit (
    id            TEXT PRIMARY KEY,
    at            REAL NOT NULL,
    actor         TEXT NOT NULL,
    via           TEXT NOT NULL,
    action        TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    run_id        TEXT,
    execution_key TEXT,
    detail        TEXT NOT NULL,
    outcome       TEXT,
    finished_at   REAL
);

CREATE INDEX audit_run ON audit (run_id, at);

CREATE INDEX audit_at ON audit (at);

CREATE TABLE console_logins (
    id_hash    TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    token_id   TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    ended_at   REAL
);
