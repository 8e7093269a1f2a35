-- Named queries for the PostgreSQL store. Each starts with "-- name: <name>" and a purpose line.
-- Connections run with search_path set to the harnessx schema only, so no query names it.
-- Queries of sqlite.sql missing here are listed, with what replaces them, in
-- SQLITE_ONLY_QUERIES of tests/unit/test_queries.py (mostly: steps of the checkpoint statement).
-- The checkpoint statement is put together per shape from the blocks of postgres_checkpoint.sql.

-- name: schema_exists
-- Whether the harnessx schema exists (by its exact name).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1);

-- name: original_layout
-- Whether the schema holds the original harnessx 0.9.1's tables (sessions with a JSON payload).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'schema_versions')
   AND EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = $1 AND table_name = 'sessions' AND column_name = 'payload');

-- name: schema_state
-- Who we are, whether the schema exists, whether we may use it (without USAGE the search path
-- skips it), and whether it has its migrations table yet. The catalogs answer without USAGE.
SELECT current_user::text,
       EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)
            THEN has_schema_privilege($1, 'USAGE') END,
       EXISTS (
           SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'harnessx_migrations'
       );

-- name: schema_objects
-- The tables, views and functions in the schema, to find one that was dropped by hand.
SELECT c.relname::text FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v')
UNION
SELECT p.proname::text FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1;

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

-- name: take_leadership
-- Become the one holder of role $1 (e.g. the supervisor) without waiting, as process $2: the
-- lock is held by this connection; in the same statement (one transaction) the holder takes
-- the role's next epoch, its fencing token. No row when another connection holds the lock.
-- The epoch and start are set after the row is locked, so a leader's write still in flight
-- (it holds the row FOR SHARE) commits first and begins before this term does.
INSERT INTO leadership (role, epoch, holder, since)
SELECT $1, 1, $2, clock_timestamp()
WHERE pg_try_advisory_lock(harnessx_liveness_key('leader:' || $1))
ON CONFLICT (role) DO UPDATE
SET epoch = leadership.epoch + 1, holder = excluded.holder, since = clock_timestamp(),
    scanned_at = NULL, scans = 0, recovered = 0
RETURNING epoch, extract(epoch FROM since)::float8;

-- name: leadership_term
-- The latest term of role $1: its epoch and holder (none before anyone led).
SELECT epoch, holder FROM leadership WHERE role = $1;

-- name: release_leadership
-- Give a role up.
SELECT pg_advisory_unlock(harnessx_liveness_key('leader:' || $1));

-- name: channels
-- The LISTEN/NOTIFY channels announcing new events, newly queued runs and pause/cancel requests.
SELECT harnessx_channel('events'), harnessx_channel('work'), harnessx_channel('control');

-- name: insert_session
-- Create a session row with no lease; reports whether it was new.
INSERT INTO sessions (id, agent_ref, fingerprint, created_at, recording)
VALUES ($1, $2, $3::jsonb, now(), $4)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: get_session
-- One session with its lease (expiry as epoch seconds) and control flag.
SELECT id, agent_ref, fingerprint::text, lease_owner, generation,
       extract(epoch FROM lease_expires_at)::float8, control, recording
FROM sessions WHERE id = $1;

-- name: take_lease
-- Claim a session by the database clock unless another live process holds it.
SELECT new_generation, busy_seconds FROM harnessx_claim($1, $2, $3);

-- name: renew_leases
-- Extend the leases $2 (session ids), $3 (owners), $4 (generations) in one statement; returns
-- those still held, each with its pause/cancel request. The request stays on the session
-- (the commit that stops the run clears it), so a reply that never arrives loses nothing:
-- the next renewal returns it again. control_sent marks it returned (pending_controls).
-- Only the leases named: a lease this process let go of but could not give back (its release
-- failed) must expire, so that the supervisor can hand its run on.
UPDATE sessions s
SET lease_expires_at = clock_timestamp() + make_interval(secs => $1), control_sent = true
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h (id, owner, generation)
WHERE s.id = h.id AND s.lease_owner = h.owner AND s.generation = h.generation
RETURNING s.id, s.lease_owner, s.generation, s.control;

-- name: release_lease
-- Give a session back, only if this exact lease still holds it.
UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND generation = $3;

-- name: process_alive
-- Whether a lease owner's process still holds its liveness lock.
SELECT harnessx_owner_alive($1);

-- name: lock_session_row
-- Lock session $1's row (in a transaction) until it commits: a write in flight finishes first.
SELECT id FROM sessions WHERE id = $1 FOR UPDATE;

-- name: set_control
-- Ask whoever drives session $2 to pause or cancel ($1): only while it is leased and its run is
-- running (a row, else none). Sent after lock_session_row in the same transaction, so its
-- snapshot sees a checkpoint that just stopped the run (which clears the request it acted on).
-- A cancel is never replaced by a pause: a pause asked for after it leaves it in place.
UPDATE sessions s SET control = CASE WHEN s.control = 'cancel' THEN 'cancel' ELSE $1 END, control_sent = false
WHERE s.id = $2 AND s.lease_owner IS NOT NULL
  AND EXISTS (SELECT FROM runs r WHERE r.session_id = s.id AND r.status = 'running')
-- Lease holders listening hear it and renew at once, which returns it (see renew_leases).
RETURNING pg_notify(harnessx_channel('control'), s.id) IS NULL;

-- name: create_session_run
-- Create session $1 with its first run $5 in one statement, so one transaction and one round
-- trip instead of three (create the session, claim it, create the run). The session row
-- (agent $7, fingerprint $8, recording $9) is written already leased to $2 at generation $3
-- for $10 seconds, with the run's progress (as the run's first checkpoint writes it), or, for
-- a queued run ($13), with no lease at all: any worker may claim it, and $14 is the 'work'
-- channel to notify. Then the run (request message $11, request id $12, its fields $15-$22
-- as the checkpoint's run fields), its messages ($6) and events ($23-$28, one array per events
-- column; $29 the last one's seq, 0: none) and a recorded run's journal records ($30-$36, one
-- array per journal column), and a queued run's schedule ($37 priority, NULL: its agent's
-- default; $38 concurrency key; $39 tenant, NULL: none; $40 delay in seconds, NULL: claimable
-- at once). A retry after a lost reply finds the run (result false: already written). A session that exists already is left alone and nothing is written: HX004.
-- Nobody follows a session that did not exist, so no 'events' notification.
WITH session AS (
    INSERT INTO sessions (id, agent_ref, fingerprint, created_at, recording, lease_owner, generation,
                          lease_expires_at, message_count, last_checkpoint, current_run, current_phase,
                          current_event_count, current_updated_at)
    VALUES ($1::text, $7::text, $8::jsonb, now(), $9::boolean, CASE WHEN $13::boolean THEN NULL ELSE $2::text END,
            $3::bigint, CASE WHEN $13 THEN NULL ELSE clock_timestamp() + make_interval(secs => $10::float8) END,
            cardinality($6::json[]), $4::text, CASE WHEN $13 THEN NULL ELSE $5::text END,
            CASE WHEN $13 THEN NULL ELSE $16::text END, CASE WHEN $13 THEN NULL ELSE $29::bigint END,
            CASE WHEN $13 THEN NULL ELSE now() END)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
new_run AS (
    INSERT INTO runs (id, session_id, request_id, request_message, status, phase, iteration, usage,
                      output, stop_reason, error, usage_incomplete, history_length, event_count,
                      generation, created_at, updated_at, queued_at, agent_ref, priority, concurrency_key,
                      tenant, not_before)
    SELECT $5, s.id, $12::text, $11::text, $15::text, $16, $17::bigint, $18::jsonb, $19::text, $20::text,
           $21::json, $22::boolean, 0, $29, $3, now(), now(), CASE WHEN $13 AND $15 = 'running' THEN now() END,
           $7, coalesce($37::integer, (SELECT d.priority FROM agent_defaults d WHERE d.agent_ref = $7), 0),
           $38::text, coalesce($39::text, ''), CASE WHEN $40::float8 > 0 THEN now() + make_interval(secs => $40) END
    FROM session s
),
-- Set-returning functions in a select list run in lockstep, one row per array element.
messages_added AS (
    INSERT INTO messages (session_id, seq, run_id, body, generation)
    SELECT s.id, generate_subscripts($6, 1), $5, unnest($6), $3
    FROM session s
),
events_added AS (
    INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at)
    SELECT $5, unnest($23::bigint[]), unnest($24::text[]), unnest($25::text[]), unnest($26::text[]),
           unnest($27::text[]), unnest($28::json[]), $3, now()
    FROM session s
),
journal_added AS (
    INSERT INTO journal (run_id, seq, id, kind, step_id, attempt_id, execution_key, recorded_at, payload,
                         generation)
    SELECT $5, generate_subscripts($30::text[], 1), unnest($30::text[]), unnest($31::text[]),
           unnest($32::text[]), unnest($33::text[]), unnest($34::text[]), unnest($35::text[]),
           unnest($36::json[]), $3
    FROM session s
)
SELECT CASE
    WHEN EXISTS (SELECT FROM session) THEN $14::text IS NULL OR pg_notify($14, $5) IS NOT NULL
    WHEN EXISTS (SELECT FROM runs WHERE id = $5 AND session_id = $1) THEN false
    ELSE harnessx_raise('HX004', 'session ' || $1 || ' already exists')
END;

-- name: watch_run
-- Some process follows run $1 for the next $2 seconds: its session's checkpoints notify.
UPDATE sessions s SET watched_until = greatest(s.watched_until, now() + make_interval(secs => $2))
FROM runs r WHERE r.id = $1 AND s.id = r.session_id;

-- name: await_run
-- Some process waits for run $1's result for the next $2 seconds: the checkpoint of its session
-- that stops an execution notifies (migration 0019), whether or not anyone follows its events.
UPDATE sessions s SET awaited_until = greatest(s.awaited_until, now() + make_interval(secs => $2))
FROM runs r WHERE r.id = $1 AND s.id = r.session_id;

-- name: get_run
-- One run by id.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length, queued_at IS NOT NULL,
       start_attempts
FROM runs_now WHERE id = $1;

-- name: find_run
-- The run a request id created in a session.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length, queued_at IS NOT NULL,
       start_attempts
FROM runs_now WHERE session_id = $1 AND request_id = $2;

-- name: recent_sessions
-- The newest sessions with their latest run, for `harnessx status`.
SELECT s.id, s.agent_ref, extract(epoch FROM s.created_at)::float8, r.id, r.status,
       extract(epoch FROM r.updated_at)::float8, coalesce(r.queued_at IS NOT NULL, false)
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, status, updated_at, queued_at FROM runs_now
    WHERE session_id = s.id ORDER BY created_at DESC, created_seq DESC LIMIT 1
) r ON true
ORDER BY s.created_at DESC LIMIT $1;

-- name: session_summary
-- One session with its latest run, for `harnessx status SESSION_ID`.
SELECT s.id, s.agent_ref, extract(epoch FROM s.created_at)::float8, r.id, r.status,
       extract(epoch FROM r.updated_at)::float8, coalesce(r.queued_at IS NOT NULL, false)
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, status, updated_at, queued_at FROM runs_now
    WHERE session_id = s.id ORDER BY created_at DESC, created_seq DESC LIMIT 1
) r ON true
WHERE s.id = $1;

-- name: latest_run
-- The session's newest run.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage::text,
       output, stop_reason, error::text, usage_incomplete, history_length, queued_at IS NOT NULL,
       start_attempts
FROM runs_now WHERE session_id = $1 ORDER BY created_at DESC, created_seq DESC LIMIT 1;

-- name: load_run
-- A run (the columns of get_run) with its session (the columns of get_session, as one row),
-- the session's whole conversation, the run's tool calls (the columns of run_tool_calls),
-- their large results and the buckets whose reservation is kept for it (rate_holds), in one
-- statement: one round trip, and everything from one snapshot.
SELECT r.id, r.session_id, r.request_id, r.request_message, r.status, r.phase, r.event_count, r.iteration,
       r.usage::text, r.output, r.stop_reason, r.error::text, r.usage_incomplete, r.history_length,
       r.queued_at IS NOT NULL, r.start_attempts,
       ROW(s.id, s.agent_ref, s.fingerprint::text, s.lease_owner, s.generation,
           extract(epoch FROM s.lease_expires_at)::float8, s.control, s.recording),
       ARRAY(SELECT m.body::text FROM messages m WHERE m.session_id = r.session_id ORDER BY m.seq),
       ARRAY(SELECT ROW(tc.execution_key, tc.iteration, tc.idx, tc.call::text, tc.policy, tc.status,
                        tc.attempt, tc.approved, tc.raw_result::text, tc.result::text, tc.generation)
             FROM tool_calls tc WHERE tc.run_id = r.id ORDER BY tc.iteration, tc.idx),
       ARRAY(SELECT ROW(tr.execution_key, tr.kind, tr.body) FROM tool_results tr WHERE tr.run_id = r.id),
       ARRAY(SELECT h.bucket FROM rate_holds h WHERE h.run_id = r.id)
FROM runs_now r JOIN sessions s ON s.id = r.session_id WHERE r.id = $1;

-- name: session_messages
-- A session's whole conversation, in order (read only when a run is loaded).
SELECT body::text FROM messages WHERE session_id = $1 ORDER BY seq;

-- name: run_messages
-- A run's conversation as it stood at its last message: the session's messages up to it,
-- without those of later runs (get_run and latest_run of a whole run).
SELECT body::text FROM messages
WHERE session_id = $1 AND seq <= (SELECT max(seq) FROM messages WHERE session_id = $1 AND run_id = $2)
ORDER BY seq;

-- name: run_tool_calls
-- Every tool call of a run.
SELECT execution_key, iteration, idx, call::text, policy, status, attempt, approved, raw_result::text,
       result::text, generation
FROM tool_calls WHERE run_id = $1 ORDER BY iteration, idx;

-- name: run_tool_results
-- The large results of a run's tool calls.
SELECT execution_key, kind, body FROM tool_results WHERE run_id = $1;

-- name: tool_call_results
-- One tool call's result columns and its large results, if any (one row per stored body).
SELECT tc.raw_result::text, tc.result::text, tr.kind, tr.body
FROM tool_calls tc LEFT JOIN tool_results tr ON tr.execution_key = tc.execution_key
WHERE tc.execution_key = $1;

-- name: session_tool_call
-- The latest answered call of a session with this tool call id (for read_tool_result).
SELECT tc.execution_key
FROM tool_calls tc JOIN runs r ON r.id = tc.run_id
WHERE r.session_id = $1 AND tc.status = 'completed'
  -- The key counts the iteration from 1 (from 0 in keys written before 0.2).
  AND tc.execution_key IN (tc.run_id || ':' || (tc.iteration + 1) || ':' || $2,
                           tc.run_id || ':' || tc.iteration || ':' || $2)
ORDER BY r.created_at DESC, tc.iteration DESC LIMIT 1;

-- name: read_events
-- A page of a run's events behind a cursor, with the run's session. An event that refers to
-- what another row stores (content_ref) comes with it: a tool call's key, result columns and
-- large results (a JSON array of [kind, body]); the run's output; an answer's message (its
-- body and run). One statement, however many references the page holds. Every statement
-- that reads one run's events names its partition too (harnessx_id_ms, migration 0018): one
-- partition read.
SELECT e.seq, e.event_id, e.type, e.step_id, e.attempt_id, e.data::text, e.run_id, r.session_id,
       tc.execution_key, tc.raw_result::text, tc.result::text,
       (SELECT json_agg(json_build_array(tr.kind, tr.body))::text FROM tool_results tr
        WHERE tr.execution_key = tc.execution_key),
       CASE WHEN e.ref = 'output' THEN r.output END,
       m.body::text, m.run_id
FROM (
    SELECT *,
           -- The cheap test first: most events refer to nothing.
           CASE WHEN strpos(data::text, '"content_ref"') > 0 THEN data ->> 'content_ref' END AS ref
    FROM events WHERE run_id = $1 AND harnessx_id_ms(run_id) = harnessx_id_ms($1) AND seq > $2
      -- A pruned run's events may wait for their day to be dropped (0022): none of a run not stored.
      AND EXISTS (SELECT 1 FROM runs WHERE id = $1)
    ORDER BY seq LIMIT $3
) e
LEFT JOIN runs r ON r.id = $1
-- (CASE, not AND: the cast of another event's "seq" could fail the statement.)
LEFT JOIN tool_calls tc ON tc.execution_key = CASE WHEN e.ref = 'tool_call'
    -- Rows written before typed payloads name the call by their own execution_key.
    THEN coalesce(e.data ->> 'result_of', e.data ->> 'execution_key') END
LEFT JOIN messages m ON m.session_id = r.session_id
    AND m.seq = CASE WHEN e.ref = 'message' THEN (e.data ->> 'seq')::bigint END
ORDER BY e.seq;

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

-- name: defer_start
-- A worker could not start run $4 (lease $1-$3): count the attempt ($5) and queue the run
-- again, held back for $6 seconds, appending the events saying so ($8-$12) as end_run does,
-- under the call's unique id $7 (same results, same HX001).
WITH fence AS (
    UPDATE sessions SET last_checkpoint = $7
    WHERE id = $1 AND lease_owner = $2 AND generation = $3 AND lease_expires_at > clock_timestamp()
      AND last_checkpoint IS DISTINCT FROM $7
    RETURNING id
), last AS (
    SELECT coalesce(max(seq), 0) AS seq FROM events
    WHERE run_id = $4 AND harnessx_id_ms(run_id) = harnessx_id_ms($4)
), added AS (
    INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at)
    SELECT $4, l.seq + e.n, e.event_id, e.type, e.step_id, e.attempt_id, e.data, $3, now()
    FROM fence f, last l,
         unnest($8::text[], $9::text[], $10::text[], $11::text[], $12::json[])
             WITH ORDINALITY AS e (event_id, type, step_id, attempt_id, data, n)
    RETURNING seq
), deferred AS (
    UPDATE runs
    SET start_attempts = $5, queued_at = now(), not_before = now() + make_interval(secs => $6),
        event_count = greatest(event_count, (SELECT max(seq) FROM added)), updated_at = now()
    WHERE id = $4 AND session_id IN (SELECT id FROM fence)
    RETURNING id
)
SELECT CASE
           WHEN EXISTS (SELECT FROM fence) OR EXISTS (
               SELECT FROM sessions WHERE id = $1 AND last_checkpoint = $7
           ) THEN true
           ELSE harnessx_raise('HX001', 'lease on session ' || $1 || ' (generation ' || $3 || ') no longer holds')
       END,
       coalesce((SELECT min(seq) FROM added),
                (SELECT min(seq) FROM events WHERE run_id = $4 AND harnessx_id_ms(run_id) = harnessx_id_ms($4)
                                                AND event_id = ANY ($8::text[]))),
       (SELECT count(pg_notify(harnessx_channel('events'), $4)) FROM deferred);

-- name: clear_start_attempts
-- A worker started run $4 under lease $1-$3: earlier failed attempts no longer count.
UPDATE runs SET start_attempts = 0
WHERE id = $4 AND start_attempts <> 0
  AND session_id IN (SELECT id FROM sessions
                     WHERE id = $1 AND lease_owner = $2 AND generation = $3);

-- name: end_run
-- End run $4 (lease $1-$3) without loading its state (it cannot be loaded, or cannot be
-- started): status $5, stop reason $6, error $7; off the queue; appending the events $9-$13
-- (one array per column) after the run's last. $8 is the call's unique id, kept on the
-- session row like a checkpoint's, so a retry after a lost reply finds it applied instead of
-- appending the events twice. Returns true and the first new event's seq; HX001 when the
-- lease no longer holds. Followers are woken (NOTIFY).
WITH fence AS (
    -- The run stops (cancelled or failed): a pause/cancel request was for this execution.
    UPDATE sessions SET last_checkpoint = $8, control = NULL
    WHERE id = $1 AND lease_owner = $2 AND generation = $3 AND lease_expires_at > clock_timestamp()
      AND last_checkpoint IS DISTINCT FROM $8
    RETURNING id
), last AS (
    SELECT coalesce(max(seq), 0) AS seq FROM events
    WHERE run_id = $4 AND harnessx_id_ms(run_id) = harnessx_id_ms($4)
), added AS (
    INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at)
    SELECT $4, l.seq + e.n, e.event_id, e.type, e.step_id, e.attempt_id, e.data, $3, now()
    FROM fence f, last l,
         unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::json[])
             WITH ORDINALITY AS e (event_id, type, step_id, attempt_id, data, n)
    RETURNING seq
), ended AS (
    UPDATE runs
    SET status = $5, stop_reason = $6, error = $7::json, generation = $3, updated_at = now(),
        event_count = greatest(event_count, (SELECT max(seq) FROM added)),
        queued_at = NULL, not_before = NULL, start_attempts = 0
    WHERE id = $4 AND session_id IN (SELECT id FROM fence)
    RETURNING id
)
SELECT CASE
           WHEN EXISTS (SELECT FROM fence) OR EXISTS (
               SELECT FROM sessions WHERE id = $1 AND last_checkpoint = $8
           ) THEN true
           ELSE harnessx_raise('HX001', 'lease on session ' || $1 || ' (generation ' || $3 || ') no longer holds')
       END,
       coalesce((SELECT min(seq) FROM added),
                (SELECT min(seq) FROM events WHERE run_id = $4 AND harnessx_id_ms(run_id) = harnessx_id_ms($4)
                                                AND event_id = ANY ($9::text[]))),
       (SELECT count(pg_notify(harnessx_channel('events'), $4)) FROM ended);

-- name: pending_controls
-- Pause/cancel requests no renewal has returned yet, for sessions this process holds (the
-- owners of process $1-$2: those starting '<process>/').
SELECT id, control FROM sessions
WHERE lease_owner COLLATE "C" >= $1 AND lease_owner COLLATE "C" < $2 AND control IS NOT NULL
  AND NOT control_sent;

-- name: claim_queued
-- Take up to $3 queued runs for owner $1 (leases of $4 seconds) of the agents $2 (NULL: any),
-- as claim call $5: in fair-share and rank order, within every concurrency limit, skipping
-- rows other claimers have locked (harnessx_claim_runs, migration 0009). A row with a NULL
-- run says how many runs were passed over because a limit was full (NULL: none).
-- Nothing is taken unless the owner's process holds its liveness lock (the last column says
-- whether it does): without it every other process sees it as dead, and a supervisor would
-- take the leases straight back (after a server restart, before the process has noticed).
-- The look is a try-lock of that key for this transaction (so nothing can leave it held):
-- refused while the owner holds it; no read of the whole lock table. The key is
-- harnessx_liveness_key's (0001) written out: that function's SET clause would have the
-- server parse its body anew at every call.
-- With a bucket $6, the claim also leases the taken runs' first model calls in its own
-- transaction (harnessx_lease_ahead, migration 0038; RateGate.ahead): at most $8 of them and
-- one a run taken, $7 tokens each, slack $9; the last column is its answer (NULL: nothing
-- asked, no run taken, or no limit governs the bucket), the same on every row.
WITH claimer AS MATERIALIZED (
    SELECT NOT pg_try_advisory_xact_lock(
        hashtextextended('harnessx:' || current_schema() || ':' || split_part($1, '/', 1), 0)
    ) AS alive
), claimed AS MATERIALIZED (
    SELECT c.run_id, c.session_id, c.generation, c.deferred, claimer.alive
    FROM claimer LEFT JOIN LATERAL harnessx_claim_runs($1, $2, CASE WHEN claimer.alive THEN $3 ELSE 0 END, $4, $5) c ON true
), leased AS MATERIALIZED (
    SELECT ROW(x.wait, x.start, x.requests_at, x.tokens_at, x.held, x.granted, x.given_back) AS lease
    FROM harnessx_lease_ahead($6, $7, least($8::integer, (SELECT count(run_id)::integer FROM claimed)), $9) x
    WHERE $6::text IS NOT NULL
)
SELECT claimed.run_id, claimed.session_id, claimed.generation, claimed.deferred, claimed.alive,
       (SELECT lease FROM leased)
FROM claimed;

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
-- A worker records that it has stopped (the supervisor marks dead ones: mark_worker_dead).
UPDATE workers SET stopped_at = now() WHERE id = $1 AND stopped_at IS NULL;

-- name: pool_scan
-- The supervisor's scan in one statement: role $1's latest term (epoch, holder), every orphan
-- lease (as find_orphans), every running worker with its liveness (as running_workers) and,
-- for each run in $2 whose recovery the leader tracks, its status and whether its session is
-- leased again. One read of the lock table serves both liveness checks.
WITH live AS MATERIALIZED (SELECT key FROM harnessx_live_processes), leased AS (
    SELECT s.id, s.lease_owner, s.generation, s.agent_ref, s.lease_expires_at,
           harnessx_liveness_key(split_part(s.lease_owner, '/', 1)) AS key
    FROM sessions s WHERE s.lease_owner IS NOT NULL
), judged AS (
    SELECT id, lease_owner, generation, agent_ref, lease_expires_at,
           leased.key IN (SELECT key FROM live) AS alive
    FROM leased
), running AS (
    SELECT w.*, harnessx_liveness_key(w.id) AS key FROM workers w WHERE w.stopped_at IS NULL
)
SELECT (SELECT ROW(t.epoch, t.holder) FROM leadership t WHERE t.role = $1),
       ARRAY(SELECT ROW(id, lease_owner, generation, agent_ref, CASE WHEN alive THEN 'expired' ELSE 'dead' END)
             FROM judged WHERE NOT alive OR lease_expires_at <= clock_timestamp() ORDER BY id),
       ARRAY(SELECT ROW(id, host, pid, agents::text, concurrency, extract(epoch FROM started_at)::float8,
                        extract(epoch FROM heartbeat_at)::float8, draining,
                        running.key IN (SELECT key FROM live))
             FROM running ORDER BY started_at),
       ARRAY(SELECT ROW(r.id, r.status, s.lease_owner IS NOT NULL)
             FROM runs r JOIN sessions s ON s.id = r.session_id WHERE r.id = ANY($2::text[]));

-- name: running_workers
-- Workers not known to have stopped, each with whether its process still holds its liveness
-- lock: one statement (one read of the lock table) however many workers there are.
WITH live AS MATERIALIZED (SELECT key FROM harnessx_live_processes), running AS (
    SELECT w.*, harnessx_liveness_key(w.id) AS key FROM workers w WHERE w.stopped_at IS NULL
)
SELECT id, host, pid, agents::text, concurrency, extract(epoch FROM started_at)::float8,
       extract(epoch FROM heartbeat_at)::float8, draining,
       running.key IN (SELECT key FROM live)
FROM running ORDER BY started_at;

-- name: prune_workers
-- Forget up to $2 workers that stopped more than $1 seconds ago, oldest first.
DELETE FROM workers WHERE id IN (
    SELECT id FROM workers
    WHERE stopped_at IS NOT NULL AND stopped_at < clock_timestamp() - make_interval(secs => $1)
    ORDER BY stopped_at LIMIT $2
);

-- name: find_orphans
-- Leases whose holder process lost its liveness lock ('dead') or that expired ('expired').
WITH live AS MATERIALIZED (SELECT key FROM harnessx_live_processes), leased AS (
    SELECT s.id, s.lease_owner, s.generation, s.agent_ref, s.lease_expires_at,
           harnessx_liveness_key(split_part(s.lease_owner, '/', 1)) AS key
    FROM sessions s WHERE s.lease_owner IS NOT NULL
), judged AS (
    SELECT id, lease_owner, generation, agent_ref, lease_expires_at,
           leased.key IN (SELECT key FROM live) AS alive
    FROM leased
)
SELECT id, lease_owner, generation, agent_ref, CASE WHEN alive THEN 'expired' ELSE 'dead' END
FROM judged
WHERE NOT alive OR lease_expires_at <= clock_timestamp()
ORDER BY id;

-- name: recover_orphan
-- Drop a dead or expired holder's lease (the generation bump fences it out) and, if $4,
-- queue the session's unfinished run again (waking idle workers): a running run, or one
-- queued while it waited (a decision, a resume) that the dropped holder claimed and died
-- before writing to (it keeps its waiting status until a worker drives it); only while the
-- leader's term
-- ($5 role, $6 epoch, $7 holder) is the latest: read FOR SHARE, so a takeover waits for this
-- statement to commit. Returns whether the term holds, whether the lease was dropped, the run,
-- and the database clock inside the transaction (before any later term can begin).
WITH term AS (
    SELECT 1 FROM leadership WHERE role = $5 AND epoch = $6 AND holder = $7 FOR SHARE
), dropped AS (
    UPDATE sessions
    SET lease_owner = NULL, lease_expires_at = NULL, generation = generation + 1
    WHERE id = $1 AND lease_owner = $2 AND generation = $3 AND EXISTS (SELECT FROM term)
    RETURNING id
), queued AS (
    UPDATE runs SET queued_at = now()
    WHERE $4 AND session_id IN (SELECT id FROM dropped) AND queued_at IS NULL
      AND (status = 'running'
           OR (status IN ('paused', 'awaiting_input', 'failed')
               AND claim_generation = $3 AND generation IS DISTINCT FROM $3))
    RETURNING id
)
SELECT EXISTS (SELECT FROM term),
       EXISTS (SELECT 1 FROM dropped),
       (SELECT min(id) FROM queued),
       (SELECT count(pg_notify(harnessx_channel('work'), id)) FROM queued),
       extract(epoch FROM clock_timestamp())::float8;

-- name: mark_worker_dead
-- The leader records that worker $1 died, only while its term ($2 role, $3 epoch, $4 holder)
-- is the latest (as in recover_orphan). Returns whether the term holds, whether the worker
-- was marked, and the database clock inside the transaction.
WITH term AS (
    SELECT 1 FROM leadership WHERE role = $2 AND epoch = $3 AND holder = $4 FOR SHARE
), stopped AS (
    UPDATE workers SET stopped_at = now()
    WHERE id = $1 AND stopped_at IS NULL AND EXISTS (SELECT FROM term)
    RETURNING id
)
SELECT EXISTS (SELECT FROM term), EXISTS (SELECT FROM stopped),
       extract(epoch FROM clock_timestamp())::float8;

-- name: queue_stats
-- Queue depth and the oldest queued time, per agent reference (runs carry their session's; an
-- index-only scan of runs_queued_agent answers, without reading sessions).
SELECT agent_ref, count(*), extract(epoch FROM min(queued_at))::float8
FROM runs WHERE queued_at IS NOT NULL
GROUP BY agent_ref;

-- name: stuck_runs
-- Unfinished runs not updated for $1 seconds (database clock), oldest first.
SELECT id, session_id, status, extract(epoch FROM updated_at)::float8 FROM runs_now
WHERE status IN ('running', 'paused', 'awaiting_input')
  AND updated_at < clock_timestamp() - make_interval(secs => $1)
ORDER BY updated_at LIMIT $2;

-- name: read_journal
-- A run's journal records in order, up to $2 of them.
SELECT seq, id, kind, step_id, attempt_id, execution_key, recorded_at, payload::text
FROM journal WHERE run_id = $1 ORDER BY seq LIMIT $2;

-- name: count_journal
-- How many records of one kind a run's journal holds for one model step.
SELECT count(*) FROM journal WHERE run_id = $1 AND kind = $2 AND step_id = $3;

-- name: list_runs
-- A page of runs, newest first, after a keyset cursor (created_at, id). A line ending in
-- "-- when: NAME" stays only when that filter is given (see _listing.list_statement), so each
-- combination of filters is a statement of its own, which one of the runs_* indexes serves.
-- The last column is the cursor's time in exact microseconds (extract gives a numeric).
SELECT r.id, r.session_id, r.agent_ref, r.request_id, r.status, r.phase, r.iteration, r.event_count,
       r.stop_reason, extract(epoch FROM r.created_at)::float8, extract(epoch FROM r.updated_at)::float8,
       r.queued_at IS NOT NULL, (extract(epoch FROM r.created_at) * 1000000)::bigint
FROM runs_now r
WHERE true
  AND r.status = :status -- when: status
  AND r.queued_at IS NULL -- when: not_queued
  AND r.queued_at IS NOT NULL -- when: queued
  AND r.agent_ref = :agent_ref -- when: agent_ref
  AND r.session_id = :session_id -- when: session_id
  AND r.id = :run_id -- when: run_id
  AND r.request_id = :request_id -- when: request_id
  AND r.created_at >= :created_from -- when: created_from
  AND r.created_at < :created_to -- when: created_to
  AND (r.created_at, r.id) < (:before_at, :before_id) -- when: before
ORDER BY r.created_at DESC, r.id DESC
LIMIT :limit;

-- name: count_runs
-- How many runs have each status, and how many wait in the queue (index-only counts).
SELECT status, count(*) FROM runs GROUP BY status
UNION ALL
SELECT 'queued', count(*) FROM runs WHERE queued_at IS NOT NULL;

-- name: list_workers
-- Workers, live ones first, then the most recently stopped, with the leases each holds.
SELECT w.id, w.host, w.pid, w.agents::text, w.concurrency, extract(epoch FROM w.started_at)::float8,
       extract(epoch FROM w.heartbeat_at)::float8, w.draining, extract(epoch FROM w.stopped_at)::float8,
       (SELECT count(*) FROM sessions s
        WHERE s.lease_owner COLLATE "C" >= w.id || '/' AND s.lease_owner COLLATE "C" < w.id || '0')
FROM workers w
ORDER BY w.stopped_at IS NOT NULL, coalesce(w.stopped_at, w.started_at) DESC
LIMIT $1;

-- name: leadership_state
-- Every role's latest term and what its leader last recorded of its scans.
SELECT role, epoch, holder, extract(epoch FROM since)::float8, extract(epoch FROM scanned_at)::float8,
       scans, recovered
FROM leadership ORDER BY role;

-- name: record_scan
-- The leader records its scans so far (fenced by its term: no row, no longer the leader).
UPDATE leadership SET scanned_at = clock_timestamp(), scans = $1, recovered = $2
WHERE role = $3 AND epoch = $4 AND holder = $5;

-- name: insert_action
-- An operator's decision or control, recorded before it is carried out (a retry after a lost
-- reply changes nothing); returns when, by the database clock.
INSERT INTO audit (id, at, actor, via, action, session_id, run_id, execution_key, detail)
VALUES ($1, clock_timestamp(), $2, $3, $4, $5, $6, $7, $8::json)
ON CONFLICT (id) DO UPDATE SET id = excluded.id
RETURNING extract(epoch FROM at)::float8;

-- name: finish_action
-- How an operator's action ended, and what more is known of it then.
UPDATE audit SET outcome = $2, finished_at = clock_timestamp(), detail = $3::json WHERE id = $1;

-- name: run_actions
-- The operators' actions on one run, oldest first.
SELECT id, extract(epoch FROM at)::float8, actor, via, action, session_id, run_id, execution_key,
       detail::text, outcome, extract(epoch FROM finished_at)::float8
FROM audit WHERE run_id = $1 ORDER BY at, id LIMIT $2;

-- name: recent_actions
-- The newest operator actions on any run.
SELECT id, extract(epoch FROM at)::float8, actor, via, action, session_id, run_id, execution_key,
       detail::text, outcome, extract(epoch FROM finished_at)::float8
FROM audit ORDER BY at DESC, id DESC LIMIT $1;

-- name: insert_login
-- A console sign-in (by a hash of its secret id), valid for $5 seconds.
INSERT INTO console_logins (id_hash, name, role, token_id, created_at, expires_at)
VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp() + make_interval(secs => $5))
ON CONFLICT (id_hash) DO NOTHING;

-- name: get_login
-- A console sign-in by the hash of its id, with whether it is still valid by the database clock.
SELECT name, role, token_id, expires_at > clock_timestamp() AND ended_at IS NULL
FROM console_logins WHERE id_hash = $1;

-- name: end_login
-- Sign out: the session ends everywhere.
UPDATE console_logins SET ended_at = clock_timestamp() WHERE id_hash = $1 AND ended_at IS NULL;

-- name: purge_logins
-- Forget console sign-ins that expired a day or more ago.
DELETE FROM console_logins WHERE expires_at < clock_timestamp() - interval '1 day';

-- name: run_schedule
-- How a run is scheduled: priority, concurrency key, tenant, when it was queued, when it may
-- be claimed, when it was last claimed (epoch seconds).
SELECT id, priority, concurrency_key, tenant, extract(epoch FROM queued_at)::float8,
       extract(epoch FROM not_before)::float8, extract(epoch FROM claimed_at)::float8
FROM runs WHERE id = $1;

-- name: set_limit
-- An operator's concurrency limit on a key or pattern (replacing any earlier one).
INSERT INTO concurrency_limits (pattern, max_running, updated_at) VALUES ($1, $2, now())
ON CONFLICT (pattern) DO UPDATE SET max_running = excluded.max_running, updated_at = excluded.updated_at;

-- name: remove_limit
-- Remove an operator's concurrency limit; returns it if there was one.
DELETE FROM concurrency_limits WHERE pattern = $1 RETURNING pattern;

-- name: list_limits
-- Every concurrency limit: the operators', then the registries' agent limits no operator's replaces.
SELECT pattern, max_running, 'operator' FROM concurrency_limits
UNION ALL
SELECT 'agent:' || agent_ref, max_concurrent, 'registry' FROM agent_defaults
WHERE max_concurrent IS NOT NULL AND 'agent:' || agent_ref NOT IN (SELECT pattern FROM concurrency_limits)
ORDER BY 1;

-- name: key_usage
-- How many runs of concurrency key $1 drive now and how many wait in the queue.
SELECT (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
        WHERE d.concurrency_key = $1 AND d.status = 'running' AND d.queued_at IS NULL
          AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL
          AND s.lease_expires_at > clock_timestamp()),
       (SELECT count(*) FROM runs WHERE concurrency_key = $1 AND queued_at IS NOT NULL);

-- name: agent_usage
-- How many runs of agent $1 drive now and how many wait in the queue.
SELECT (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
        WHERE d.agent_ref = $1 AND d.claim_generation IS NOT NULL AND d.status = 'running'
          AND d.queued_at IS NULL AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL
          AND s.lease_expires_at > clock_timestamp()),
       (SELECT count(*) FROM runs WHERE agent_ref = $1 AND queued_at IS NOT NULL);

-- name: publish_agent_defaults
-- What a worker's registry says of agents $1: default priorities $2 and max_concurrent $3 (NULL: none).
INSERT INTO agent_defaults (agent_ref, priority, max_concurrent, updated_at)
SELECT ref, priority, max_concurrent, now()
FROM unnest($1::text[], $2::integer[], $3::integer[]) AS d (ref, priority, max_concurrent)
ORDER BY ref
ON CONFLICT (agent_ref) DO UPDATE SET priority = excluded.priority, max_concurrent = excluded.max_concurrent,
                                      updated_at = excluded.updated_at;

-- name: set_weight
-- A tenant's fair-share weight.
INSERT INTO fair_shares (tenant, weight) VALUES ($1, $2)
ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight;

-- name: list_shares
-- The fair-share groups that wait or have a weight of their own.
SELECT tenant, weight, pass, queued FROM fair_shares WHERE queued > 0 OR weight <> 1 OR tenant = '' ORDER BY tenant;

-- name: queue_shape
-- Queued runs by priority band and concurrency key ('' for none): how many, how many may not
-- be claimed yet, and since when the longest-claimable one has been claimable (epoch seconds).
SELECT CASE WHEN priority > 0 THEN 'high' WHEN priority < 0 THEN 'low' ELSE 'normal' END,
       coalesce(concurrency_key, ''), count(*), count(*) FILTER (WHERE not_before > clock_timestamp()),
       extract(epoch FROM min(greatest(queued_at, not_before))
                          FILTER (WHERE not_before IS NULL OR not_before <= clock_timestamp()))::float8
FROM runs WHERE queued_at IS NOT NULL
GROUP BY 1, 2;

-- name: set_rate_limit
-- A fleet-wide model rate limit on a provider/model bucket or pattern (replacing any earlier one).
INSERT INTO rate_limits (pattern, requests_per_minute, tokens_per_minute, burst_seconds, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (pattern) DO UPDATE SET requests_per_minute = excluded.requests_per_minute,
    tokens_per_minute = excluded.tokens_per_minute, burst_seconds = excluded.burst_seconds,
    updated_at = excluded.updated_at;

-- name: remove_rate_limit
-- Remove a model rate limit; returns it if there was one.
DELETE FROM rate_limits WHERE pattern = $1 RETURNING pattern;

-- name: list_rate_limits
-- Every model rate limit.
SELECT pattern, requests_per_minute, tokens_per_minute, burst_seconds FROM rate_limits ORDER BY pattern;

-- name: reserve_rate
-- Reserve one model call of $2 tokens from bucket $1, and up to $5 in all while each may also
-- start within $6 s (a lease), after settling $3 tokens of earlier calls and giving back $7
-- unspent calls of a lease (its grant's requests_at $8, given_back $9); or take the
-- reservation kept for run $4 (harnessx_reserve_rate, migration 0035): one statement, on the
-- database's clock. No row: no limit governs the bucket.
SELECT wait, start, requests_at, tokens_at, held, granted, given_back
FROM harnessx_reserve_rate($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: release_rate
-- A lease's $3 unspent calls go back to bucket $1 (its grant's requests_at $4, given_back $5):
-- only the part of their share of the schedule still ahead of now (released_seconds), never
-- below now; and $2 tokens of earlier calls are settled.
UPDATE rate_buckets b
SET requests_at = b.requests_at - c.credit, given_back = b.given_back + c.credit,
    tokens_at = b.tokens_at + coalesce($2::integer * 60.0 / c.tokens_per_minute, 0)
FROM (
    SELECT x.name, l.tokens_per_minute,
           CASE WHEN l.requests_per_minute IS NULL OR $3 <= 0 THEN 0.0
                ELSE greatest(0.0, least($3::integer * 60.0 / l.requests_per_minute,
                                         $4::float8 - (x.given_back - $5::float8) - extract(epoch FROM clock_timestamp()),
                                         x.requests_at - extract(epoch FROM clock_timestamp())))
           END AS credit
    FROM rate_buckets x,
         (SELECT requests_per_minute, tokens_per_minute FROM rate_limits
          WHERE pattern = $1 OR (right(pattern, 1) = '*' AND starts_with($1, left(pattern, -1)))
          ORDER BY pattern = $1 DESC, length(pattern) DESC
          LIMIT 1) l
    WHERE x.name = $1
    FOR UPDATE OF x
) c
WHERE b.name = c.name;

-- name: hold_rate
-- Pool run $4 (lease $1-$3) gives its worker slot back while it waits for its rate budget:
-- its reservation of bucket $5 starting at $6 (epoch seconds) is kept for it, and it is
-- queued again, claimable $7 seconds from now. Says whether the lease held.
WITH fence AS (
    SELECT id FROM sessions
    WHERE id = $1 AND lease_owner = $2 AND generation = $3 AND lease_expires_at > clock_timestamp()
    FOR UPDATE
), queued AS (
    UPDATE runs SET queued_at = now(), not_before = now() + make_interval(secs => $7)
    WHERE id = $4 AND session_id IN (SELECT id FROM fence) AND status = 'running'
    RETURNING id
), kept AS (
    INSERT INTO rate_holds (run_id, bucket, start) SELECT id, $5, $6 FROM queued
    ON CONFLICT (run_id, bucket) DO UPDATE SET start = excluded.start
    RETURNING run_id
)
SELECT EXISTS (SELECT 1 FROM fence), (SELECT count(*) FROM kept);

-- name: settle_rate
-- Earlier calls of bucket $1 used $2 tokens more (negative: fewer) than they reserved: move
-- its token arrival time by their share of the governing limit's tokens per minute.
UPDATE rate_buckets b SET tokens_at = b.tokens_at + $2 * 60.0 / l.tokens_per_minute
FROM (
    SELECT tokens_per_minute FROM rate_limits
    WHERE pattern = $1 OR (right(pattern, 1) = '*' AND starts_with($1, left(pattern, -1)))
    ORDER BY pattern = $1 DESC, length(pattern) DESC
    LIMIT 1
) l
WHERE b.name = $1 AND l.tokens_per_minute IS NOT NULL;

-- name: pause_rate
-- A vendor said to come back in $2 seconds: no call of bucket $1 starts before then (a later
-- pause already set stands). Returns when the pause ends, by the database's clock.
UPDATE rate_buckets SET paused_until = greatest(paused_until, extract(epoch FROM clock_timestamp()) + $2)
WHERE name = $1
RETURNING paused_until;

-- name: list_rate_buckets
-- Every bucket used so far, with how many calls waited for its budget and for how long.
SELECT name, waits, waited FROM rate_buckets ORDER BY name;

-- name: hold_term
-- Inside a leader's transaction: its term ($1 role, $2 epoch, $3 holder) is the latest, and
-- stays so until the transaction ends (FOR SHARE: a takeover waits for it). No row: deposed.
SELECT 1 FROM leadership WHERE role = $1 AND epoch = $2 AND holder = $3 FOR SHARE;

-- name: prune_candidates
-- Retention: lock up to $4 sessions whose last known activity is more than $1 seconds ago and
-- that no unexpired lease holds, after the keyset cursor ($2 prune_check_at as text, $3 id),
-- in that order; rows another transaction has locked are skipped (a claim in flight, another
-- pruner). The cutoff is by now(), the transaction's start, which the index scan can stop at
-- (clock_timestamp() would make the scan read every later session and filter it out). The lock keeps any run from starting in them until the transaction ends; a dry run
-- (only reading) leaves the line marked "when: locking" out.
SELECT id, prune_check_at::text AS cursor_at FROM sessions
WHERE prune_check_at < now() - make_interval(secs => $1)
  AND (prune_check_at, id) > ($2::text::timestamptz, $3)
  AND (lease_owner IS NULL OR lease_expires_at <= clock_timestamp())
ORDER BY prune_check_at, id
LIMIT $4
FOR UPDATE SKIP LOCKED -- when: locking
;

-- name: prune_facts
-- What decides whether each of the sessions $1 may go (read after they were locked, so it is
-- current): whether no unexpired lease holds it, whether it has an unfinished run, when it was
-- last active (its creation or its latest run's last write; a finished run's row is whole, so
-- runs is read directly) as text, whether that is more than $2 seconds ago, and its latest
-- run's status.
SELECT s.id,
       s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp(),
       EXISTS (SELECT 1 FROM runs r
               WHERE r.session_id = s.id AND r.status IN ('running', 'paused', 'awaiting_input')),
       a.at::text,
       a.at < clock_timestamp() - make_interval(secs => $2),
       (SELECT r.status FROM runs r WHERE r.session_id = s.id
        ORDER BY r.created_at DESC, r.created_seq DESC LIMIT 1)
FROM sessions s
CROSS JOIN LATERAL (
    SELECT greatest(s.created_at, (SELECT max(r.updated_at) FROM runs r WHERE r.session_id = s.id)) AS at
) a
WHERE s.id = ANY ($1::text[]);

-- name: set_prune_check
-- When retention should look at the sessions $1 again (found still in use): at $2 (text; NULL:
-- the database clock now, for a session with an unfinished run).
UPDATE sessions s SET prune_check_at = coalesce(c.at::timestamptz, clock_timestamp())
FROM unnest($1::text[], $2::text[]) AS c (id, at)
WHERE s.id = c.id;

-- name: oldest_prune_check
-- The oldest last known activity of any session (what retention examines next), epoch seconds.
SELECT extract(epoch FROM min(prune_check_at))::float8 FROM sessions;

-- name: delete_sessions
-- Erase the sessions $1 and everything they own, in one statement: the rows that refer to a run
-- or a session go first (the foreign keys are checked when the statement ends). Returns the
-- rows deleted per table.
WITH gone AS (
    SELECT id FROM runs WHERE session_id = ANY ($1::text[])
), tool_results_gone AS (
    DELETE FROM tool_results WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), tool_calls_gone AS (
    DELETE FROM tool_calls WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), events_gone AS (
    DELETE FROM events WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), compactable_gone AS (
    -- Not a row the session owns: not counted.
    DELETE FROM compactable_runs WHERE run_id IN (SELECT id FROM gone)
), journal_gone AS (
    DELETE FROM journal WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), messages_gone AS (
    DELETE FROM messages WHERE session_id = ANY ($1::text[]) RETURNING 1
), audit_gone AS (
    DELETE FROM audit WHERE session_id = ANY ($1::text[]) RETURNING 1
), runs_gone AS (
    DELETE FROM runs WHERE session_id = ANY ($1::text[]) RETURNING 1
), sessions_gone AS (
    DELETE FROM sessions WHERE id = ANY ($1::text[]) RETURNING 1
)
SELECT (SELECT count(*) FROM sessions_gone), (SELECT count(*) FROM runs_gone),
       (SELECT count(*) FROM messages_gone), (SELECT count(*) FROM tool_calls_gone),
       (SELECT count(*) FROM tool_results_gone), (SELECT count(*) FROM events_gone),
       (SELECT count(*) FROM journal_gone), (SELECT count(*) FROM audit_gone);

-- name: prune_sessions
-- Retention's delete_sessions: the same rows, but the events of runs in the day partitions
-- (0018) stay, to go with their day when it is dropped; the runs are recorded in pruned_runs
-- (0022) so that none stays longer than the grace where a day cannot be dropped. The events
-- of events_legacy, which is never dropped, go now. Returns the rows deleted per table.
WITH gone AS (
    SELECT id FROM runs WHERE session_id = ANY ($1::text[])
), tool_results_gone AS (
    DELETE FROM tool_results WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), tool_calls_gone AS (
    DELETE FROM tool_calls WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), events_gone AS (
    DELETE FROM events_legacy WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), events_later AS (
    -- With the count of the rows each leaves (0026, 0031): dropping the day adds these up.
    INSERT INTO pruned_runs (run_id, events)
    SELECT r.id, r.event_count - r.compacted_rows FROM runs r WHERE r.session_id = ANY ($1::text[])
    ON CONFLICT (run_id) DO NOTHING
), compactable_gone AS (
    -- Not a row the session owns: not counted.
    DELETE FROM compactable_runs WHERE run_id IN (SELECT id FROM gone)
), journal_gone AS (
    DELETE FROM journal WHERE run_id IN (SELECT id FROM gone) RETURNING 1
), messages_gone AS (
    DELETE FROM messages WHERE session_id = ANY ($1::text[]) RETURNING 1
), audit_gone AS (
    DELETE FROM audit WHERE session_id = ANY ($1::text[]) RETURNING 1
), runs_gone AS (
    DELETE FROM runs WHERE session_id = ANY ($1::text[]) RETURNING 1
), sessions_gone AS (
    DELETE FROM sessions WHERE id = ANY ($1::text[]) RETURNING 1
)
SELECT (SELECT count(*) FROM sessions_gone), (SELECT count(*) FROM runs_gone),
       (SELECT count(*) FROM messages_gone), (SELECT count(*) FROM tool_calls_gone),
       (SELECT count(*) FROM tool_results_gone), (SELECT count(*) FROM events_gone),
       (SELECT count(*) FROM journal_gone), (SELECT count(*) FROM audit_gone);

-- name: lock_session
-- Lock a session against claims until the transaction ends; whether a live process holds an
-- unexpired lease on it and its unfinished run, if any ('<run id> (<status>)'): erasure refuses both.
SELECT s.lease_owner IS NOT NULL AND s.lease_expires_at > clock_timestamp()
           AND harnessx_owner_alive(s.lease_owner),
       (SELECT r.id || ' (' || r.status || ')' FROM runs r
        WHERE r.session_id = s.id AND r.status IN ('running', 'paused', 'awaiting_input'))
FROM sessions s WHERE s.id = $1
FOR UPDATE;

-- name: session_page
-- Session ids in order after a cursor (exporting every session).
SELECT id FROM sessions WHERE id > $1 ORDER BY id LIMIT $2;

-- name: column_types
-- The columns of the archived tables, with their types and whether the database generates them.
SELECT c.table_name::text, c.column_name::text, c.data_type::text, c.is_identity = 'YES'
FROM information_schema.columns c
WHERE c.table_schema = current_schema()
  AND c.table_name IN ('sessions', 'runs', 'messages', 'tool_calls', 'tool_results', 'events', 'journal', 'audit')
ORDER BY c.table_name, c.ordinal_position;

-- name: export_sessions
-- The sessions $1's rows, for an archive.
SELECT * FROM sessions WHERE id = ANY ($1::text[]) ORDER BY id;

-- name: export_runs
-- The sessions $1's runs, oldest first, with a running run's progress as readers see it (now_*).
SELECT r.*, n.phase AS now_phase, n.event_count AS now_event_count, n.updated_at AS now_updated_at
FROM runs r JOIN runs_now n ON n.id = r.id
WHERE r.session_id = ANY ($1::text[])
ORDER BY r.session_id, r.created_at, r.created_seq;

-- name: export_messages
-- The sessions $1's conversations, in order.
SELECT * FROM messages WHERE session_id = ANY ($1::text[]) ORDER BY session_id, seq;

-- name: export_tool_calls
-- The tool calls of the sessions $1's runs.
SELECT * FROM tool_calls
WHERE run_id IN (SELECT id FROM runs WHERE session_id = ANY ($1::text[]))
ORDER BY run_id, iteration, idx;

-- name: export_tool_results
-- The large tool results of the sessions $1's runs.
SELECT * FROM tool_results
WHERE run_id IN (SELECT id FROM runs WHERE session_id = ANY ($1::text[]))
ORDER BY execution_key, kind;

-- name: export_events
-- The events of the sessions $1's runs, in order.
SELECT * FROM events
WHERE run_id IN (SELECT id FROM runs WHERE session_id = ANY ($1::text[]))
ORDER BY run_id, seq;

-- name: export_journal
-- The flight-recorder journals of the sessions $1's runs, in order.
SELECT * FROM journal
WHERE run_id IN (SELECT id FROM runs WHERE session_id = ANY ($1::text[]))
ORDER BY run_id, seq;

-- name: export_audit
-- The operators' actions on the sessions $1, oldest first.
SELECT * FROM audit WHERE session_id = ANY ($1::text[]) ORDER BY at, id;

-- name: session_exists
-- Whether a session id is taken (importing skips sessions that exist).
SELECT 1 FROM sessions WHERE id = $1;

-- name: add_event_partitions
-- Make the day partitions of events that cover run ids made up to $1 seconds from now; how many.
SELECT harnessx_add_event_partitions(now() + make_interval(secs => $1));

-- name: event_partitions
-- The day partitions of events (events_legacy, from MINVALUE, is not one) and the end of the
-- newest, epoch seconds: events of runs made after it cannot be stored.
SELECT count(b.low), (max(b.high) / 1000.0)::float8
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''(-?[0-9]+)''\)')::bigint AS low,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''(-?[0-9]+)''\)')::bigint AS high
) b
WHERE i.inhparent = 'events'::regclass;

-- name: event_days
-- The day partitions of events (not events_legacy), oldest first: name, bounds (Unix ms), and
-- whether a detach of it was interrupted (it is still attached, pending).
SELECT c.relname::text, b.low, b.high, i.inhdetachpending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''(-?[0-9]+)''\)')::bigint AS low,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''(-?[0-9]+)''\)')::bigint AS high
) b
WHERE i.inhparent = 'events'::regclass AND b.low IS NOT NULL
ORDER BY b.low;

-- name: day_has_runs
-- Whether a run made in [$3, $4) (Unix ms) is stored: the range of run ids from $1 to $2 (the
-- lowest version 7 ids of those times) through the primary key, each checked exactly.
SELECT EXISTS (
    SELECT 1 FROM runs
    WHERE id >= $1 AND id < $2 AND harnessx_id_ms(id) >= $3 AND harnessx_id_ms(id) < $4
);

-- name: forget_pruned_day
-- Pruned runs of a day just dropped ($1-$4 as day_has_runs): nothing of theirs is left. Returns
-- the events the day held, as their prunes counted them (0026).
WITH forgotten AS (
    DELETE FROM pruned_runs
    WHERE run_id >= $1 AND run_id < $2 AND harnessx_id_ms(run_id) >= $3 AND harnessx_id_ms(run_id) < $4
    RETURNING events
)
SELECT coalesce(sum(events), 0)::bigint FROM forgotten;

-- name: purge_pruned_events
-- The events of up to $2 runs pruned more than $1 seconds ago whose day could not be dropped
-- (a run of it is kept), deleted row by row; those runs are forgotten. Rows deleted.
WITH batch AS (
    SELECT run_id FROM pruned_runs
    WHERE pruned_at < now() - make_interval(secs => $1)
    ORDER BY pruned_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM events e USING batch b WHERE e.run_id = b.run_id RETURNING 1
), forgotten AS (
    DELETE FROM pruned_runs p USING batch b WHERE p.run_id = b.run_id RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM forgotten);

-- name: event_partition_for
-- Make the day partition of run $1 if no partition covers it (restoring an archived run).
SELECT harnessx_event_partition_for($1);

-- name: forget_pruned_run
-- Before run $1 is restored: the events a prune left of it (its day not dropped yet) go, and
-- it is no longer a pruned run.
WITH forgotten AS (
    DELETE FROM pruned_runs WHERE run_id = $1 RETURNING run_id
)
DELETE FROM events
WHERE run_id IN (SELECT run_id FROM forgotten) AND harnessx_id_ms(run_id) = harnessx_id_ms($1);

-- name: detach_pending
-- Whether the partition $1 (a quoted name) of events is being detached; NULL: not attached.
SELECT i.inhdetachpending FROM pg_inherits i
WHERE i.inhrelid = to_regclass($1) AND i.inhparent = 'events'::regclass;

-- name: lock_holders
-- Other sessions holding a lock on a table of schema $1 (what a migration's lock waited for),
-- the longest transaction first: pid, application name, state, transaction age (s), table.
-- Another role's state and transaction start are hidden from a role without pg_read_all_stats.
SELECT a.pid, a.application_name::text, a.state::text,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8, min(c.relname)::text
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = $1) AND l.granted AND l.pid <> pg_backend_pid()
GROUP BY a.pid, a.application_name, a.state, a.xact_start
ORDER BY a.xact_start NULLS LAST
LIMIT 5;

-- name: compaction_due
-- Up to $2 runs noted as finished more than $1 seconds ago (compactable_runs, migration 29),
-- oldest first, taken from the note (FOR UPDATE SKIP LOCKED: compactors take different runs):
-- the run id; whether it may be compacted now: still finished (a resumed run is not; a removed
-- one is not stored), its session locked against removal (FOR KEY SHARE: checkpoints, claims
-- and renewals do not wait for it; a prune or an erasure holding the session passes it over
-- (SKIP LOCKED), one that comes later waits for this transaction); whether it is still stored
-- (a run passed over stays noted); and its last cursor.
WITH due AS (
    SELECT run_id, finished_at FROM compactable_runs
    WHERE finished_at < now() - make_interval(secs => $1)
    ORDER BY finished_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), held AS (
    SELECT r.id FROM runs r JOIN sessions s ON s.id = r.session_id
    WHERE r.id IN (SELECT run_id FROM due) AND r.status IN ('completed', 'cancelled', 'failed')
    FOR KEY SHARE OF s SKIP LOCKED
)
SELECT d.run_id, d.run_id IN (SELECT id FROM held),
       EXISTS (SELECT 1 FROM runs r WHERE r.id = d.run_id AND r.status IN ('completed', 'cancelled', 'failed')),
       coalesce((SELECT r.event_count FROM runs r WHERE r.id = d.run_id), 0)
FROM due d ORDER BY d.finished_at;

-- name: streamed_pieces
-- The streamed text events (a piece each, or compacted before) of the runs $1, whose partition
-- keys are $2 (harnessx_id_ms; the partitions are chosen as the statement starts), in order:
-- run id, cursor, type, step id, attempt id, payload.
SELECT run_id, seq, type, step_id, attempt_id, data::text FROM events
WHERE run_id = ANY ($1::text[]) AND harnessx_id_ms(run_id) = ANY ($2::bigint[])
  AND type IN ('text_delta', 'thinking_delta', 'tool_call_delta')
ORDER BY run_id, seq;

-- name: compact_pieces
-- Compacting: the rows ($1 run, $2 cursor) that take the text of the pieces before them ($3 the
-- new payloads), the pieces merged into them removed (run $4, cursors $5 to $6), and the runs
-- $7 no longer waiting; $8: the partition keys of the runs; the runs $9 count the rows $10
-- removed of theirs (runs.compacted_rows, 0031). Rows updated, rows deleted.
WITH kept AS (
    UPDATE events e SET data = k.data::json
    FROM unnest($1::text[], $2::bigint[], $3::text[]) AS k (run_id, seq, data)
    WHERE e.run_id = k.run_id AND e.seq = k.seq AND harnessx_id_ms(e.run_id) = ANY ($8::bigint[])
    RETURNING 1
), gone AS (
    DELETE FROM events e USING unnest($4::text[], $5::bigint[], $6::bigint[]) AS g (run_id, first, last)
    WHERE e.run_id = g.run_id AND e.seq BETWEEN g.first AND g.last
      AND harnessx_id_ms(e.run_id) = ANY ($8::bigint[])
    RETURNING 1
), done AS (
    DELETE FROM compactable_runs WHERE run_id = ANY ($7::text[])
), counted AS (
    UPDATE runs r SET compacted_rows = r.compacted_rows + c.removed
    FROM unnest($9::text[], $10::bigint[]) AS c (run_id, removed)
    WHERE r.id = c.run_id
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM gone);
