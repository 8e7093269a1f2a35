-- harnessx schema, version 26 (PostgreSQL): a pruned run's events are counted when it is pruned.
--
-- Retention drops a day of events whole once none of its runs is stored (0022); the rows that
-- go with it were counted nowhere (harnessx_retention_rows_pruned_total{table="events"} counted
-- only the rows deleted one by one). Counting them when the day is dropped would read the whole
-- partition, the very read dropping it avoids (at 100 runs/s a day holds about 160 million
-- events). The prune that records a run in pruned_runs counts its events instead (an index
-- range of the run's own rows, next to the rows the prune deletes anyway), and the drop sums
-- the counts of the day's pruned runs: exact, for runs pruned from this version on (a run
-- pruned before counts 0; a release before this one, still pruning during a rollout, leaves
-- the default).

ALTER TABLE pruned_runs ADD COLUMN events bigint NOT NULL DEFAULT 0;
