-- harnessx schema, version 1 (SQLite).
-- Messages, tool calls and events are appended per run; a checkpoint never rewrites them.

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    agent_ref        TEXT,
    fingerprint      TEXT NOT NULL,
    created_at       REAL NOT NULL,
    lease_owner      TEXT,
    generation       INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    control          TEXT CHECK (control IN ('pause', 'cancel')),
    message_count    INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX sessions_lease_owner ON sessions (lease_owner);

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id),
    request_id       TEXT,
    request_message  TEXT NOT NULL,
    status           TEXT NOT NULL,
    phase            TEXT NOT NULL,
    iteration        INTEGER NOT NULL DEFAULT 0,
    usage            TEXT NOT NULL DEFAULT '{}',
    output           TEXT NOT NULL DEFAULT '',
    stop_reason      TEXT NOT NULL DEFAULT '',
    error            TEXT,
    usage_incomplete INTEGER NOT NULL DEFAULT 0,
    history_length   INTEGER NOT NULL,
    event_count      INTEGER NOT NULL DEFAULT 0,
    generation       INTEGER NOT NULL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    CONSTRAINT runs_request_unique UNIQUE (session_id, request_id)
);

-- At most one unfinished run per session.
CREATE UNIQUE INDEX runs_one_unfinished ON runs (session_id)
    WHERE status IN ('running', 'paused', 'awaiting_input');

CREATE INDEX runs_session_created ON runs (session_id, created_at);

CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL,
    run_id     TEXT NOT NULL,
    body       TEXT NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE tool_calls (
    execution_key TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs (id),
    iteration     INTEGER NOT NULL,
    idx           INTEGER NOT NULL,
    call          TEXT NOT NULL,
    policy        TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempt       INTEGER NOT NULL DEFAULT 0,
    approved      INTEGER NOT NULL DEFAULT 0,
    raw_result    TEXT,
    result        TEXT,
    generation    INTEGER NOT NULL,
    updated_at    REAL NOT NULL
);

CREATE INDEX tool_calls_run ON tool_calls (run_id, iteration, idx);

CREATE TABLE events (
    run_id     TEXT NOT NULL REFERENCES runs (id),
    seq        INTEGER NOT NULL,
    event_id   TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL,
    step_id    TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    data       TEXT NOT NULL,
    generation INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
