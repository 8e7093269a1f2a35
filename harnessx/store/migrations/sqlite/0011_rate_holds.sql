-- harnessx schema, version 11 (SQLite): a pool run whose model call must wait long for its
-- rate budget gives its worker slot back and keeps its place in the bucket (see
-- docs/scheduling.md, *Waiting*).
--
-- rate_holds: a reservation kept for a run that went back to the queue until shortly before
-- its start (claimable again then, by not_before). The run's next reservation of the
-- bucket takes it instead of reserving anew, so its budget is spent once. Removed with the
-- run.

CREATE TABLE rate_holds (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    bucket TEXT NOT NULL,
    start  REAL NOT NULL,
    PRIMARY KEY (run_id, bucket)
);
