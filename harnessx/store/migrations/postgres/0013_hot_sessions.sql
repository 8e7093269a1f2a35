-- harnessx schema, version 13 (PostgreSQL): room on the session rows' pages for HOT updates.
--
-- Every checkpoint, lease renewal and progress write updates its session's row, and none of
-- them changes an indexed column (the indexes are on id, lease_owner, created_at and
-- prune_check_at; only a claim and a release change lease_owner). Such an update can be HOT
-- (a heap-only tuple: no index entry written, the old version pruned on the page) only if the
-- page has room for the new version. At the default fillfactor of 100 a page of sessions is
-- filled by inserts; fillfactor 70 keeps 30 % of each new page for the updates of its rows.
-- Dead versions pile up at one per update; vacuuming the table after 2 % of it is dead, not
-- the default 20 %, keeps the pages' free space from running out between vacuums on a
-- sessions table of millions of rows. Both are storage parameters: setting them takes a
-- SHARE UPDATE EXCLUSIVE lock (reads and writes go on) and rewrites nothing; fillfactor
-- applies to pages filled from now on (docs/operations.md, *Autovacuum and HOT updates*).

ALTER TABLE sessions SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05
);
