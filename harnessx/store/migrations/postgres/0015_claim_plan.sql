-- harnessx schema, version 15 (PostgreSQL): the queue claim always reads the queue in rank
-- order through its index.
--
-- harnessx_claim_runs takes the best-ranked queued runs with ORDER BY rank LIMIT n, which the
-- index runs_tenant_queue (tenant, rank) answers by reading n entries. Without statistics on
-- runs (a new database, or a queue that filled up since the last ANALYZE) the planner guesses
-- that `tenant = ''` matches 0.5 % of the rows, and prefers a bitmap scan of every queued run
-- and a sort of them all: 12 ms instead of 0.2 ms with 2,000 runs queued, for each claim of
-- each worker, growing with the queue. The function plans its statements without bitmap
-- scans, so the ordered index scan is the plan whatever the statistics say. (Sequential scans
-- stay allowed: ruling them out too made some of its small statements far slower.)

ALTER FUNCTION harnessx_claim_runs(text, text[], integer, double precision, text) SET enable_bitmapscan = off;
