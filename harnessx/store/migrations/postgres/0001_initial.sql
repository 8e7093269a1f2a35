-- harnessx schema, version 1 (PostgreSQL).
-- Runs with search_path set to the harnessx schema only: nothing here names the schema, so
-- the same file (and checksum) serves any schema name.
--
-- Same tables, columns and constraints as the SQLite schema, with PostgreSQL types:
-- timestamptz for times (all set by the database clock), bigint counters, booleans.
-- JSON columns: jsonb where harnessx controls the shape (fingerprint, usage); json where
-- the content comes verbatim from models and tools (messages, tool calls and results,
-- events, errors), because jsonb rejects "\u0000", reorders keys and turns 1e100 into an
-- integer, and a resumed run must send the model exactly what it saw before.
-- Three additions: runs.created_seq breaks created_at ties (SQLite's rowid);
-- sessions.last_checkpoint and runs.claimed_by let a call whose reply was lost be retried
-- without applying it twice (see the checkpoint and claim_queued queries in postgres.sql).
-- This one file also holds what SQLite added in its migration 2 (the worker pool: queued
-- runs, workers), since no PostgreSQL database predates it.

CREATE TABLE sessions (
    id               text PRIMARY KEY,
    agent_ref        text,
    fingerprint      jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    generation       bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    control          text CHECK (control IN ('pause', 'cancel')),
    message_count    bigint NOT NULL DEFAULT 0,
    last_checkpoint  text
);

-- Owners are '<process_id>/<holder>': renewal selects one process's leases by a
-- byte-wise range, which needs the "C" collation whatever the database's default is.
CREATE INDEX sessions_lease_owner ON sessions ((lease_owner COLLATE "C"));

CREATE TABLE runs (
    id               text PRIMARY KEY,
    session_id       text NOT NULL REFERENCES sessions (id),
    request_id       text,
    request_message  text NOT NULL,
    status           text NOT NULL,
    phase            text NOT NULL,
    iteration        bigint NOT NULL DEFAULT 0,
    usage            jsonb NOT NULL DEFAULT '{}',
    output           text NOT NULL DEFAULT '',
    stop_reason      text NOT NULL DEFAULT '',
    error            json,
    usage_incomplete boolean NOT NULL DEFAULT false,
    history_length   bigint NOT NULL,
    event_count      bigint NOT NULL DEFAULT 0,
    generation       bigint NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    created_seq      bigint GENERATED ALWAYS AS IDENTITY,
    queued_at        timestamptz,
    priority         integer NOT NULL DEFAULT 0,
    claimed_by       text,  -- the claim_queued call that last took it off the queue
    CONSTRAINT runs_request_unique UNIQUE (session_id, request_id)
);

-- At most one unfinished run per session.
CREATE UNIQUE INDEX runs_one_unfinished ON runs (session_id)
    WHERE status IN ('running', 'paused', 'awaiting_input');

CREATE INDEX runs_session_created ON runs (session_id, created_at, created_seq);

-- A run with queued_at set waits for a pool worker.
CREATE INDEX runs_queue ON runs (priority DESC, queued_at) WHERE queued_at IS NOT NULL;

CREATE TABLE messages (
    session_id text NOT NULL REFERENCES sessions (id),
    seq        bigint NOT NULL,
    run_id     text NOT NULL,
    body       json NOT NULL,
    generation bigint NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE tool_calls (
    execution_key text PRIMARY KEY,
    run_id        text NOT NULL REFERENCES runs (id),
    iteration     bigint NOT NULL,
    idx           bigint NOT NULL,
    call          json NOT NULL,
    policy        text NOT NULL,
    status        text NOT NULL,
    attempt       bigint NOT NULL DEFAULT 0,
    approved      boolean NOT NULL DEFAULT false,
    raw_result    json,
    result        json,
    generation    bigint NOT NULL,
    updated_at    timestamptz NOT NULL
);

CREATE INDEX tool_calls_run ON tool_calls (run_id, iteration, idx);

CREATE TABLE events (
    run_id     text NOT NULL REFERENCES runs (id),
    seq        bigint NOT NULL,
    event_id   text NOT NULL UNIQUE,
    type       text NOT NULL,
    step_id    text NOT NULL,
    attempt_id text NOT NULL,
    data       json NOT NULL,
    generation bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Pool workers, one row per process start (id = the backend's process_id).
CREATE TABLE workers (
    id           text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    agents       jsonb NOT NULL,
    concurrency  integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    draining     boolean NOT NULL DEFAULT false,
    stopped_at   timestamptz
);

-- Functions pin search_path to the schema they were created in, so they find their
-- tables whatever the caller's search_path, and current_schema() names that schema.

-- The key of a process's liveness lock: a 64-bit hash, namespaced by schema so it cannot
-- meet another application's advisory locks (or another harnessx schema's).
CREATE FUNCTION harnessx_liveness_key(p_process_id text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT hashtextextended('harnessx:' || current_schema() || ':' || p_process_id, 0)
$$;

-- A lease owner ('<process_id>/<holder>') is alive while its process holds its liveness
-- lock: a session-level advisory lock on a connection that lives as long as the process.
-- A process that dies, even by SIGKILL, loses the connection and so the lock.
CREATE FUNCTION harnessx_owner_alive(p_owner text) RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH k AS (SELECT harnessx_liveness_key(split_part(p_owner, '/', 1)) AS key)
    SELECT EXISTS (
        SELECT 1
        FROM pg_catalog.pg_locks l, k
        WHERE l.locktype = 'advisory'
          AND l.granted
          AND l.objsubid = 1  -- the one-bigint form: classid = high half, objid = low half
          AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
          AND l.classid = ((k.key >> 32) & 4294967295)::oid
          AND l.objid = (k.key & 4294967295)::oid
    )
$$;

-- LISTEN/NOTIFY channels, one of each kind per schema: 'events' (payload: the run whose
-- events were committed) and 'work' (payload: a run that was queued for the pool).
CREATE FUNCTION harnessx_channel(p_kind text) RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'harnessx_' || p_kind || '_' || left(md5(current_schema()), 16)
$$;

-- Claim a session for p_owner by the database clock. No row: no such session. A row with
-- a NULL new_generation: another live process holds an unexpired lease for busy_seconds
-- more. Otherwise the lease is taken and new_generation is the fencing token.
CREATE FUNCTION harnessx_claim(p_session_id text, p_owner text, p_lease_seconds double precision)
RETURNS TABLE (new_generation bigint, busy_seconds double precision)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner   text;
    v_expires timestamptz;
BEGIN
    SELECT s.lease_owner, s.lease_expires_at INTO v_owner, v_expires
    FROM sessions s WHERE s.id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_owner IS NOT NULL AND v_owner <> p_owner AND v_expires > clock_timestamp()
            AND harnessx_owner_alive(v_owner) THEN
        new_generation := NULL;
        busy_seconds := extract(epoch FROM v_expires - clock_timestamp());
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE sessions s
    SET lease_owner = p_owner,
        generation = s.generation + 1,
        lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_seconds)
    WHERE s.id = p_session_id
    RETURNING s.generation INTO new_generation;
    busy_seconds := NULL;
    RETURN NEXT;
END
$$;

-- Abort the calling statement with an error of our own SQLSTATE (HX001: the lease no longer
-- holds; HX002: the run is not the session's). The checkpoint statement calls it only on
-- those failure paths, so the whole statement, and everything it wrote, is rolled back.
CREATE FUNCTION harnessx_raise(p_sqlstate text, p_message text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message;
END
$$;
