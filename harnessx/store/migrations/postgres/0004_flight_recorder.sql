-- harnessx schema, version 4 (PostgreSQL): the flight recorder.
-- A session records its runs or not, for good (sessions.recording; adding a column with a
-- constant default rewrites nothing). A recorded run's journal gets its records from the
-- checkpoint statement they describe (its journal_added step), numbered densely per run
-- (seq 1, 2, ...) from the run's highest seq: the writer holds the session's lease, and the
-- fence locks the session row, so no other statement numbers the same run meanwhile.

ALTER TABLE sessions ADD COLUMN recording boolean NOT NULL DEFAULT false;

CREATE TABLE journal (
    run_id        text NOT NULL REFERENCES runs (id),
    seq           bigint NOT NULL,
    id            text NOT NULL UNIQUE,
    kind          text NOT NULL,
    step_id       text NOT NULL,
    attempt_id    text NOT NULL,
    execution_key text,
    recorded_at   text NOT NULL,
    payload       json NOT NULL,
    generation    bigint NOT NULL,
    PRIMARY KEY (run_id, seq)
);
