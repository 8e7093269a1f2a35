-- harnessx schema, version 31 (PostgreSQL): a run counts the event rows compaction removed, so
-- that its stored events are counted without reading them.
--
-- Since schema 26 a prune records each run in pruned_runs with the count of its events, which
-- dropping the run's day adds up for harnessx_retention_rows_pruned_total; counting them read
-- each run's rows through its day's primary key, and that halved a prune's throughput (800
-- against 1,693 sessions/s, measured at 20,000 runs of history). A run's events are numbered
-- 1..event_count, densely, until compaction (0029) merges stretches of streamed text: the rows
-- stored are event_count - compacted_rows, and compaction adds what it removes here. Runs
-- compacted before this version count 0 removed (their day's count is high by that much).

ALTER TABLE runs ADD COLUMN compacted_rows bigint NOT NULL DEFAULT 0;
