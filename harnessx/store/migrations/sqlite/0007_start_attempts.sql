-- harnessx schema, version 7 (SQLite): runs a worker claimed but could not start.
-- start_attempts counts the consecutive claims of a run that ended before it started (its
-- agent could not be built); not_before keeps such a run in the queue, unclaimed, until its
-- back-off has passed. A worker that starts the run resets both; a run that ends clears them.

ALTER TABLE runs ADD COLUMN start_attempts INTEGER NOT NULL DEFAULT 0;

ALTER TABLE runs ADD COLUMN not_before REAL;
