-- harnessx schema, version 18 (PostgreSQL): events partitioned by the time of their run.
--
-- Events are most of what a run stores (one row per streamed piece, 46-75 % of its bytes), and
-- nothing else grows as fast. They are now partitioned by range of harnessx_id_ms(run_id): the
-- Unix time in milliseconds a version 7 run id begins with (harnessx/_ids.py), 0 for any other
-- id (runs of the original harnessx and of versions before time-ordered ids). Every event of a
-- run is in one partition, one per UTC day of run creation, so the indexes a run writes are
-- those of the current day's partition, and a day whose runs are all gone is dropped whole
-- instead of deleted row by row (docs/operations.md, *Partitioned events*).
-- A partitioned table whose key is an expression can have no primary key or unique
-- constraint of its own: each partition has them ((run_id, seq), event_id), which is as good
-- for (run_id, seq), since all of a run's events are in one partition. The foreign key to runs
-- goes: retention removes a run before the partition holding its events is dropped.
-- Queries that name the run say harnessx_id_ms(run_id) = harnessx_id_ms($1) too, so that the
-- server reads one partition (any query without it still works, reading every partition).
--
-- The existing table becomes the first partition, events_legacy, of every run id made before
-- a time two UTC midnights ahead (and of every run id that is not a version 7 UUID). Attaching
-- it checks that each row belongs there, which would read the whole table under a lock that
-- stops every checkpoint; a validated CHECK constraint saying the same spares that read. So
-- this migration first adds the constraint NOT VALID (which only needs its lock for an
-- instant), then validates it (reading the table under a lock that lets reads and writes go
-- on), each in a transaction of its own, before the migrations' transaction swaps the tables,
-- last in it (after every other pending migration): it holds the old table's lock only for the
-- renames, the attach and the commit, and waits at most 5 s for it (a long transaction reading
-- events: the migration fails and can be run again). The day partitions are made after the
-- commit (on a new database, in the transaction).
-- Should that transaction fail, the constraint is dropped again, so that a harnessx of the
-- previous version that keeps running does not find new runs refused once that time passes.

-- harnessx: before
DO $outer$
BEGIN
    IF coalesce((SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass('events')), 'p') <> 'r' THEN
        RETURN;  -- a new database (its events table is made below) or one migrated already
    END IF;
    PERFORM set_config('lock_timeout', '5s', true);
    CREATE OR REPLACE FUNCTION harnessx_id_ms(p_id text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $fn$
        SELECT CASE WHEN p_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
                    THEN ('x' || substr(p_id, 1, 8) || substr(p_id, 10, 4))::bit(48)::bigint
                    ELSE 0 END
    $fn$;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint k
                   WHERE k.conrelid = 'events'::regclass AND k.conname = 'events_before_partitions') THEN
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_before_partitions '
                       'CHECK (harnessx_id_ms(run_id) IS NOT NULL AND harnessx_id_ms(run_id) < %s) NOT VALID',
                       (extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC') + interval '2 days')
                        * 1000)::bigint);
    END IF;
END
$outer$;

-- harnessx: before
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
               WHERE c.oid = to_regclass('events') AND c.relkind = 'r'
                 AND k.conname = 'events_before_partitions' AND NOT k.convalidated) THEN
        ALTER TABLE events VALIDATE CONSTRAINT events_before_partitions;
    END IF;
END
$$;

-- harnessx: body
-- The time (Unix milliseconds) a version 7 id was made; 0 for any other text. SQL, without
-- SET options, so that the server inlines it wherever it appears (the partition key, queries).
CREATE OR REPLACE FUNCTION harnessx_id_ms(p_id text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
    SELECT CASE WHEN p_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
                THEN ('x' || substr(p_id, 1, 8) || substr(p_id, 10, 4))::bit(48)::bigint
                ELSE 0 END
$fn$;

-- Create the day partitions of events that cover run ids made up to p_until, after the newest
-- one; returns how many it made. Each is made as a table of its own and then attached, which
-- only needs a lock on events that lets reads and writes go on. SECURITY DEFINER: the
-- supervisor calls it, whatever role it connects as (only the owner of events may attach).
CREATE FUNCTION harnessx_add_event_partitions(p_until timestamptz) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_day   constant bigint := 86400000;
    v_until bigint := (extract(epoch FROM p_until) * 1000)::bigint;
    v_high  bigint;
    v_name  text;
    v_made  integer := 0;
BEGIN
    -- One caller at a time (the supervisor's leader; a migration).
    PERFORM pg_advisory_xact_lock(hashtextextended('harnessx:partitions:' || current_schema(), 0));
    SELECT max(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''(-?[0-9]+)''\)')::bigint)
    INTO v_high
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'events'::regclass;
    WHILE v_high < v_until LOOP
        v_name := 'events_' || to_char(to_timestamp(v_high / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD');
        EXECUTE format('CREATE TABLE %I (LIKE events)', v_name);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (run_id, seq), ADD UNIQUE (event_id)', v_name);
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                       v_name, v_high, v_high + v_day);
        v_high := v_high + v_day;
        v_made := v_made + 1;
    END LOOP;
    RETURN v_made;
END
$$;

-- harnessx: last
-- The swap, after every other pending migration (which may be slow), so that its lock on the
-- old table is held only until the commit that follows.
DO $$
DECLARE
    v_start  bigint;
    v_grant  record;
    v_empty  boolean;
BEGIN
    PERFORM set_config('lock_timeout', '5s', true);
    LOCK TABLE events IN ACCESS EXCLUSIVE MODE;
    SELECT substring(pg_get_constraintdef(k.oid) FROM '< \(?''?([0-9]+)')::bigint INTO v_start
    FROM pg_constraint k
    WHERE k.conrelid = 'events'::regclass AND k.conname = 'events_before_partitions' AND k.convalidated;
    v_empty := NOT EXISTS (SELECT 1 FROM events);
    IF v_start IS NULL THEN
        -- No parts ran before: a new database (nothing to read; its runs' events go to day
        -- partitions from today on), or they were undone (then the table is read here).
        ALTER TABLE events DROP CONSTRAINT IF EXISTS events_before_partitions;
        v_start := (extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC')
                                       + CASE WHEN v_empty THEN interval '0 days'
                                              ELSE interval '2 days' END) * 1000)::bigint;
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_before_partitions '
                       'CHECK (harnessx_id_ms(run_id) IS NOT NULL AND harnessx_id_ms(run_id) < %s)', v_start);
    END IF;
    ALTER TABLE events DROP CONSTRAINT IF EXISTS events_run_id_fkey;
    ALTER TABLE events RENAME TO events_legacy;
    ALTER INDEX events_pkey RENAME TO events_legacy_pkey;
    ALTER INDEX events_event_id_key RENAME TO events_legacy_event_id_key;
    CREATE TABLE events (
        run_id     text NOT NULL,
        seq        bigint NOT NULL,
        event_id   text NOT NULL,
        type       text NOT NULL,
        step_id    text NOT NULL,
        attempt_id text NOT NULL,
        data       json NOT NULL,
        generation bigint NOT NULL,
        created_at timestamptz NOT NULL
    ) PARTITION BY RANGE (harnessx_id_ms(run_id));
    -- Whoever could read and write the events before can now (partitions need no grants of
    -- their own: they are read and written through events).
    FOR v_grant IN
        SELECT a.privilege_type, a.grantee::regrole::text AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'events_legacy'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON events TO %s', v_grant.privilege_type, v_grant.grantee);
    END LOOP;
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%s)', v_start);
    IF v_empty THEN
        -- A new database's runs need today's partition at once (nobody waits on its lock).
        PERFORM harnessx_add_event_partitions(now() + interval '7 days');
    END IF;
END
$$;

-- harnessx: after
-- The day partitions, once the swap committed (events_legacy covers at least the next day,
-- and the supervisor makes them too should this not run).
SELECT harnessx_add_event_partitions(now() + interval '7 days');

-- harnessx: on failure
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
               WHERE c.oid = to_regclass('events') AND c.relkind = 'r'
                 AND k.conname = 'events_before_partitions') THEN
        ALTER TABLE events DROP CONSTRAINT events_before_partitions;
    END IF;
END
$$;
