-- harnessx schema, version 3 (SQLite): the flight recorder.
-- A session records its runs or not, for good (sessions.recording). A recorded run's journal
-- gets its records in the same transaction as the checkpoint they describe, numbered densely
-- per run (seq 1, 2, ...) by the writer, which holds the session's lease.

ALTER TABLE sessions ADD COLUMN recording INTEGER NOT NULL DEFAULT 0;

CREATE TABLE journal (
    run_id        TEXT NOT NULL REFERENCES runs (id),
    seq           INTEGER NOT NULL,
    id            TEXT NOT NULL UNIQUE,
    kind          TEXT NOT NULL,
    step_id       TEXT NOT NULL,
    attempt_id    TEXT NOT NULL,
    execution_key TEXT,
    recorded_at   TEXT NOT NULL,
    payload       TEXT NOT NULL,
    generation    INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
