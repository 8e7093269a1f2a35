-- harnessx schema, version 17 (PostgreSQL): which processes are alive, said in one place.
--
-- A process is alive while it holds its liveness lock (harnessx_liveness_key, 0001): a
-- session-level advisory lock in the one-bigint form, which pg_locks shows split in two
-- (classid: the high half, objid: the low half). The lease claim, the orphan scan, the
-- workers' listing and the supervisor's scan all judge liveness by this view; the statements
-- that judge many owners at once read it once (a MATERIALIZED CTE), so the lock table is read
-- once per statement however many leases or workers there are.

CREATE VIEW harnessx_live_processes AS
SELECT (l.classid::bigint << 32) | l.objid::bigint AS key
FROM pg_catalog.pg_locks l
WHERE l.locktype = 'advisory'
  AND l.granted
  AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database());

CREATE OR REPLACE FUNCTION harnessx_owner_alive(p_owner text) RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (
        SELECT 1 FROM harnessx_live_processes
        WHERE key = harnessx_liveness_key(split_part(p_owner, '/', 1))
    )
$$;
