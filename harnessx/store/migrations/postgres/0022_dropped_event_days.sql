-- harnessx schema, version 22 (PostgreSQL): retention drops whole days of events.
--
-- A prune used to delete every event of the sessions it removed, row by row (most of the rows
-- it deletes). Now it removes the runs and records them in pruned_runs instead, and the leading
-- supervisor drops a day partition of events (0018) once no run of that day is left: the
-- whole day at the cost of one catalog change. A pruned run's events cannot be read (every
-- reader goes through its run), and none is left for long where a day cannot be dropped (a
-- run of it is kept: a conversation still in use): events of runs pruned longer than the
-- grace (2 days by default, more than a day partition takes to empty) are deleted row by row.
-- The events of events_legacy (0018), which is never dropped, are still deleted by the prune.
-- harnessx_event_partition_for makes the partition of one run's day when none covers it
-- (restoring an archived run of a day that was dropped).

CREATE TABLE pruned_runs (
    run_id    text PRIMARY KEY,
    pruned_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX pruned_runs_at ON pruned_runs (pruned_at);

CREATE FUNCTION harnessx_event_partition_for(p_run_id text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_day  constant bigint := 86400000;
    v_ms   bigint := harnessx_id_ms(p_run_id);
    v_low  bigint := v_ms - v_ms % 86400000;
    v_name text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('harnessx:partitions:' || current_schema(), 0));
    IF EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        CROSS JOIN LATERAL (
            SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''(-?[0-9]+)''\)')::bigint AS low,
                   substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''(-?[0-9]+)''\)')::bigint AS high
        ) b
        WHERE i.inhparent = 'events'::regclass AND coalesce(b.low, v_ms) <= v_ms AND v_ms < b.high
    ) THEN
        RETURN false;
    END IF;
    v_name := 'events_' || to_char(to_timestamp(v_low / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD');
    EXECUTE format('CREATE TABLE %I (LIKE events)', v_name);
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (run_id, seq), ADD UNIQUE (event_id)', v_name);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   v_name, v_low, v_low + v_day);
    RETURN true;
END
$$;
