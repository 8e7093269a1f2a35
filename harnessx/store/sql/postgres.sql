-- Named queries for the PostgreSQL store. Each starts with "-- name: <name>" and a purpose line.
-- Connections run with search_path set to the harnessx schema only, so no query names it.
-- Queries of sqlite.sql missing here are listed, with what replaces them, in
-- _postgres.SQLITE_ONLY_QUERIES (mostly: steps of the harnessx_checkpoint function).

-- name: schema_exists
-- Whether the harnessx schema exists (by its exact name).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1);

-- name: migrations_table_exists
-- Whether the schema has its migrations table yet.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'harnessx_migrations'
);

-- name: create_migrations_table
-- The record of applied migrations, created before the first migration runs.
CREATE TABLE IF NOT EXISTS harnessx_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
-- Every applied migration with its checksum.
SELECT version, checksum FROM harnessx_migrations ORDER BY version;

-- name: lock_migrations
-- Serialize migrators of one schema until their transaction ends (key: a hash of its name).
SELECT pg_advisory_xact_lock(hashtextextended($1, 0));

-- name: privileges
-- Who we are, and whether we may create a schema in this database or objects in ours.
SELECT current_user::text, current_database()::text,
       has_database_privilege(current_database(), 'CREATE'),
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)
            THEN has_schema_privilege($1, 'CREATE') END;

-- name: record_migration
-- Remember that a migration was applied, with its checksum.
INSERT INTO harnessx_migrations (version, name, checksum) VALUES ($1, $2, $3);

-- name: hold_liveness
-- Take this process's liveness lock, held by its dedicated connection until it closes.
SELECT pg_advisory_lock(harnessx_liveness_key($1));

-- name: try_leadership
-- Become the one holder of a role (e.g. the supervisor) without waiting; held by this connection.
SELECT pg_try_advisory_lock(harnessx_liveness_key('leader:' || $1));

-- name: release_leadership
-- Give a role up.
SELECT pg_advisory_unlock(harnessx_liveness_key('leader:' || $1));

-- name: channels
-- The LISTEN/NOTIFY channels announcing new events and newly queued runs.
SELECT harnessx_channel('events'), harnessx_channel('work');

-- name: insert_session
-- Create a session row with no lease; reports whether it was new.
INSERT INTO sessions (id, agent_ref, fingerprint, created_at) VALUES ($1, $2, $3::jsonb, now())
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: get_session
-- One session with its lease (expiry as epoch seconds) and control flag.
SELECT id, agent_ref, fingerprint::text, lease_owner, generation,
       extract(epoch FROM lease_expires_at)::float8, control
FROM sessions WHERE id = $1;

-- name: take_lease
-- Claim a session by the database clock unless another live process holds it.
SELECT new_generation, busy_seconds FROM harnessx_claim($1, $2, $3);

-- name: renew_leases
-- Extend every lease this process holds, in one statement; returns what is still held.
UPDATE sessions
SET lease_expires_at = clock_timestamp() + make_interval(secs => $1)
WHERE lease_owner COLLATE "C" >= $2 AND lease_owner COLLATE "C" < $3
RETURNING id, lease_owner, generation, control;

-- name: release_lease
-- Give a session back, only if this exact lease still holds it.
UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND generation = $3;

-- name: process_alive
-- Whether a lease owner's process still holds its liveness lock.
SELECT harnessx_owner_alive($1);

-- name: set_control
-- Ask whoever drives the session to pause or cancel (NULL clears the request).
UPDATE sessions SET control = $1 WHERE id = $2;

-- name: checkpoint
-- Fence and write one checkpoint (run, messages, tool calls, events) in one round trip.
SELECT harnessx_checkpoint($1, $2, $3, $4, $5, $6::json, $7::text[], $8::json, $9::json, $10::json);

-- name: get_run
-- One run by id.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length
FROM runs WHERE id = $1;

-- name: find_run
-- The run a request id created in a session.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length
FROM runs WHERE session_id = $1 AND request_id = $2;

-- name: recent_sessions
-- The newest sessions with their latest run, for `harnessx status`.
SELECT s.id, s.agent_ref, extract(epoch FROM s.created_at)::float8, r.id, r.status,
       extract(epoch FROM r.updated_at)::float8
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, status, updated_at FROM runs
    WHERE session_id = s.id ORDER BY created_at DESC, created_seq DESC LIMIT 1
) r ON true
ORDER BY s.created_at DESC LIMIT $1;

-- name: latest_run
-- The session's newest run.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length
FROM runs WHERE session_id = $1 ORDER BY created_at DESC, created_seq DESC LIMIT 1;

-- name: session_messages
-- A session's whole conversation, in order (read only when a run is loaded).
SELECT body::text FROM messages WHERE session_id = $1 ORDER BY seq;

-- name: run_tool_calls
-- Every tool call of a run.
SELECT execution_key, iteration, idx, call::text, policy, status, attempt, approved, raw_result::text,
       result::text, generation
FROM tool_calls WHERE run_id = $1 ORDER BY iteration, idx;

-- name: read_events
-- A page of a run's events behind a cursor.
SELECT seq, event_id, type, step_id, attempt_id, data::text, run_id
FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3;

-- name: requeue_run
-- Put an unfinished run (back) in the pool's queue, fenced by the holder's lease, and wake
-- idle workers; says whether the lease held.
WITH fence AS (
    SELECT id FROM sessions
    WHERE id = $1 AND lease_owner = $2 AND generation = $3 AND lease_expires_at > clock_timestamp()
    FOR UPDATE
), queued AS (
    UPDATE runs SET queued_at = now()
    WHERE id = $4 AND session_id IN (SELECT id FROM fence)
      AND status IN ('running', 'paused', 'awaiting_input', 'failed')
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM fence),
       (SELECT count(pg_notify(harnessx_channel('work'), id)) FROM queued);

-- name: pending_controls
-- Pause/cancel requests for sessions this process holds (owner range as in renew_leases).
SELECT id, control FROM sessions
WHERE lease_owner COLLATE "C" >= $1 AND lease_owner COLLATE "C" < $2 AND control IS NOT NULL;

-- name: claim_queued
-- Take up to $3 queued runs whose sessions no unexpired lease holds (best first), skipping rows
-- other claimers have locked: lease each session for $1 and dequeue the run (marked with the
-- call's id $5), in one statement.
WITH candidates AS (
    SELECT r.id AS run_id, r.session_id, r.priority, r.queued_at
    FROM runs r JOIN sessions s ON s.id = r.session_id
    WHERE r.queued_at IS NOT NULL
      AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
      AND ($2::text[] IS NULL OR s.agent_ref = ANY ($2::text[]))
    ORDER BY r.priority DESC, r.queued_at
    LIMIT $3
    FOR UPDATE OF r, s SKIP LOCKED
), picked AS (
    SELECT DISTINCT ON (session_id) run_id, session_id, priority, queued_at
    FROM candidates ORDER BY session_id, priority DESC, queued_at
), leased AS (
    UPDATE sessions s
    SET lease_owner = $1, generation = s.generation + 1,
        lease_expires_at = clock_timestamp() + make_interval(secs => $4)
    FROM picked p WHERE s.id = p.session_id
    RETURNING s.id, s.generation
), dequeued AS (
    UPDATE runs r SET queued_at = NULL, claimed_by = $5 FROM picked p WHERE r.id = p.run_id RETURNING r.id
)
SELECT p.run_id, l.id, l.generation
FROM picked p JOIN leased l ON l.id = p.session_id
ORDER BY p.priority DESC, p.queued_at;

-- name: claimed_by
-- What an earlier attempt of one claim_queued call took, if it committed but its reply was lost.
SELECT r.id, s.id, s.generation
FROM sessions s JOIN runs r ON r.session_id = s.id
WHERE s.lease_owner COLLATE "C" = $1 AND r.claimed_by = $2
ORDER BY r.priority DESC, r.id;

-- name: register_worker
-- A worker process announces itself (one row per process start; a retried call is harmless).
INSERT INTO workers (id, host, pid, agents, concurrency, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4::jsonb, $5, now(), now())
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now();

-- name: worker_heartbeat
-- A worker's periodic sign of life and drain state.
UPDATE workers SET heartbeat_at = now(), draining = $2 WHERE id = $1;

-- name: stop_worker
-- A worker or the supervisor records that the worker has stopped.
UPDATE workers SET stopped_at = now() WHERE id = $1 AND stopped_at IS NULL;

-- name: running_workers
-- Workers not known to have stopped.
SELECT id, host, pid, agents::text, concurrency, extract(epoch FROM started_at)::float8,
       extract(epoch FROM heartbeat_at)::float8, draining
FROM workers WHERE stopped_at IS NULL ORDER BY started_at;

-- name: find_orphans
-- Leases whose holder process lost its liveness lock ('dead') or that expired ('expired').
WITH live AS MATERIALIZED (
    SELECT l.classid, l.objid
    FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
), leased AS (
    SELECT s.id, s.lease_owner, s.generation, s.agent_ref, s.lease_expires_at,
           harnessx_liveness_key(split_part(s.lease_owner, '/', 1)) AS key
    FROM sessions s WHERE s.lease_owner IS NOT NULL
), judged AS (
    SELECT id, lease_owner, generation, agent_ref, lease_expires_at,
           EXISTS (SELECT 1 FROM live
                   WHERE live.classid = ((key >> 32) & 4294967295)::oid
                     AND live.objid = (key & 4294967295)::oid) AS alive
    FROM leased
)
SELECT id, lease_owner, generation, agent_ref, CASE WHEN alive THEN 'expired' ELSE 'dead' END
FROM judged
WHERE NOT alive OR lease_expires_at <= clock_timestamp()
ORDER BY id;

-- name: recover_orphan
-- Drop a dead or expired holder's lease (the generation bump fences it out) and, if $4,
-- queue the session's running run again (waking idle workers); returns whether the lease was
-- dropped and the run.
WITH dropped AS (
    UPDATE sessions
    SET lease_owner = NULL, lease_expires_at = NULL, generation = generation + 1
    WHERE id = $1 AND lease_owner = $2 AND generation = $3
    RETURNING id
), queued AS (
    UPDATE runs SET queued_at = now()
    WHERE $4 AND session_id IN (SELECT id FROM dropped) AND status = 'running' AND queued_at IS NULL
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM dropped),
       (SELECT min(id) FROM queued),
       (SELECT count(pg_notify(harnessx_channel('work'), id)) FROM queued);

-- name: queue_stats
-- Queue depth and the oldest queued time, per agent reference.
SELECT s.agent_ref, count(*), extract(epoch FROM min(r.queued_at))::float8
FROM runs r JOIN sessions s ON s.id = r.session_id
WHERE r.queued_at IS NOT NULL
GROUP BY s.agent_ref;

-- name: stuck_runs
-- Unfinished runs not updated for $1 seconds (database clock), oldest first.
SELECT id, session_id, status, extract(epoch FROM updated_at)::float8 FROM runs
WHERE status IN ('running', 'paused', 'awaiting_input')
  AND updated_at < clock_timestamp() - make_interval(secs => $1)
ORDER BY updated_at LIMIT $2;
