-- Named queries for the SQLite store. Each starts with "-- name: <name>" and a purpose line.

-- name: record_migration
-- Remember that a migration was applied, with its checksum.
INSERT INTO harnessx_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?);

-- name: insert_session
-- Create a session row with no lease; retention first looks at it once it is as old as its cutoff.
INSERT INTO sessions (id, agent_ref, fingerprint, created_at, recording, prune_check_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?4);

-- name: get_session
-- One session with its lease and control flag.
SELECT id, agent_ref, fingerprint, lease_owner, generation, lease_expires_at, control, recording
FROM sessions WHERE id = ?;

-- name: take_lease
-- Claim a session: a new owner and the next generation (the fencing token).
UPDATE sessions
SET lease_owner = ?, generation = generation + 1, lease_expires_at = ?
WHERE id = ?
RETURNING generation;

-- name: renew_leases
-- Extend the leases given as a JSON array of [session id, owner, generation] in one
-- statement; returns those still held, each with its pause/cancel request. The request stays
-- on the session (the commit that stops the run clears it), so a reply that never reaches
-- the caller loses nothing: the next renewal returns it again. control_sent marks it returned
-- (pending_controls). Only the leases named: a lease this process let go of but could not
-- give back (its release failed) must expire, so that the supervisor can hand its run on.
UPDATE sessions
SET lease_expires_at = ?, control_sent = 1
WHERE (id, lease_owner, generation) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
    FROM json_each(?)
)
RETURNING id, lease_owner, generation, control;

-- name: release_lease
-- Give a session back, only if this exact lease still holds it.
UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = ? AND lease_owner = ? AND generation = ?;

-- name: fence
-- The fence: bumps the message counter only while the writer's lease holds. A write that
-- stops the run (?2: the status it writes, other than running; NULL: the status is not
-- written) clears the pause/cancel request, in the same transaction: the run has acted on it
-- (and a later execution must not apply it again), except a cancel left on a run that pauses
-- or waits for input: the driver looks for it after such a commit, and cancels the run.
UPDATE sessions
SET message_count = message_count + ?1,
    control = CASE WHEN ?2 <> 'running'
                        AND NOT (control IS 'cancel' AND ?2 IN ('paused', 'awaiting_input'))
                   THEN NULL ELSE control END
WHERE id = ?3 AND lease_owner = ?4 AND generation = ?5 AND lease_expires_at > ?6
RETURNING message_count;

-- name: set_control
-- Ask whoever drives the session to pause or cancel: only while it is leased and its run is
-- running (in the write transaction, so never on a run that has just stopped). A cancel is
-- never replaced by a pause: a pause asked for after it leaves it in place.
UPDATE sessions SET control = CASE WHEN control = 'cancel' THEN 'cancel' ELSE ?1 END, control_sent = 0
WHERE id = ?2 AND lease_owner IS NOT NULL
  AND EXISTS (SELECT 1 FROM runs r WHERE r.session_id = ?2 AND r.status = 'running')
RETURNING id;

-- name: insert_run
-- A new run, fenced by the caller's transaction; queued_at is set for the pool, with the run's
-- schedule (priority, NULL: its agent's default; concurrency key; tenant; not_before). It
-- carries its session's agent reference, for listing runs by agent.
INSERT INTO runs (id, session_id, request_id, request_message, status, phase, history_length,
                  generation, created_at, updated_at, queued_at, agent_ref, priority, concurrency_key,
                  tenant, not_before)
VALUES (?1, ?2, ?3, ?4, 'running', 'prepare_model_call', ?5, ?6, ?7, ?8, ?9,
        (SELECT agent_ref FROM sessions WHERE id = ?2),
        coalesce(?10, (SELECT d.priority FROM sessions s JOIN agent_defaults d ON d.agent_ref = s.agent_ref
                       WHERE s.id = ?2), 0),
        ?11, ?12, ?13);

-- name: update_run
-- Move a run to its state after a checkpoint; a run that stops running leaves the queue.
UPDATE runs
SET status = ?, phase = ?, iteration = ?, usage = ?, output = ?, stop_reason = ?, error = ?,
    usage_incomplete = ?, event_count = MAX(event_count, ?), generation = ?, updated_at = ?,
    queued_at = CASE WHEN ? = 'running' THEN queued_at END
WHERE id = ?;

-- name: update_run_progress
-- update_run for a checkpoint that leaves a running run running (most of them): it does not
-- name status or queued_at, so SQLite leaves alone the eight indexes that read them (it
-- rewrites an index entry whenever the SET names one of its columns, changed or not:
-- 12.7 against 2.9 us a row).
UPDATE runs
SET phase = ?, iteration = ?, usage = ?, output = ?, stop_reason = ?, error = ?,
    usage_incomplete = ?, event_count = MAX(event_count, ?), generation = ?, updated_at = ?
WHERE id = ?;

-- name: set_event_count
-- Record the highest event sequence after appending provisional events.
UPDATE runs SET event_count = ?, updated_at = ? WHERE id = ? AND event_count < ?;

-- name: insert_message
-- Append one message to a session's conversation.
INSERT INTO messages (session_id, seq, run_id, body, generation) VALUES (?, ?, ?, ?, ?);

-- name: upsert_tool_call
-- Record a tool call, or move it to its new status.
INSERT INTO tool_calls (execution_key, run_id, iteration, idx, call, policy, status, attempt,
                        approved, raw_result, result, generation, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (execution_key) DO UPDATE SET
    status = excluded.status, attempt = excluded.attempt, approved = excluded.approved,
    raw_result = excluded.raw_result, result = excluded.result,
    generation = excluded.generation, updated_at = excluded.updated_at;

-- name: insert_event
-- Append one event with its dense per-run sequence number.
INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_run
-- One run by id.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage,
       output, stop_reason, error, usage_incomplete, history_length, queued_at IS NOT NULL, start_attempts
FROM runs WHERE id = ?;

-- name: stopped_runs
-- Of the runs in the JSON array ?, those that are there: whether each is still running or
-- queued (a waiter's poll, one statement for every run waited on).
SELECT r.id, r.status = 'running' OR r.queued_at IS NOT NULL
FROM json_each(?) j JOIN runs r ON r.id = j.value;

-- name: find_run
-- The run a request id created in a session.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage,
       output, stop_reason, error, usage_incomplete, history_length, queued_at IS NOT NULL, start_attempts
FROM runs WHERE session_id = ? AND request_id = ?;

-- name: latest_run
-- The session's newest run.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage,
       output, stop_reason, error, usage_incomplete, history_length, queued_at IS NOT NULL, start_attempts
FROM runs WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1;

-- name: recent_sessions
-- The newest sessions with their latest run, for `harnessx status`.
SELECT s.id, s.agent_ref, s.created_at, r.id, r.status, r.updated_at, r.queued_at IS NOT NULL
FROM sessions s
LEFT JOIN runs r ON r.id = (
    SELECT id FROM runs WHERE session_id = s.id ORDER BY created_at DESC, rowid DESC LIMIT 1
)
ORDER BY s.created_at DESC LIMIT ?;

-- name: session_summary
-- One session with its latest run, for `harnessx status SESSION_ID`.
SELECT s.id, s.agent_ref, s.created_at, r.id, r.status, r.updated_at, r.queued_at IS NOT NULL
FROM sessions s
LEFT JOIN runs r ON r.id = (
    SELECT id FROM runs WHERE session_id = s.id ORDER BY created_at DESC, rowid DESC LIMIT 1
)
WHERE s.id = ?;

-- name: session_messages
-- A session's whole conversation, in order (read only when a run is loaded).
SELECT body FROM messages WHERE session_id = ? ORDER BY seq;

-- name: run_messages
-- A run's conversation as it stood at its last message: the session's messages up to it,
-- without those of later runs (get_run and latest_run of a whole run).
SELECT body FROM messages
WHERE session_id = ?1 AND seq <= (SELECT max(seq) FROM messages WHERE session_id = ?1 AND run_id = ?2)
ORDER BY seq;

-- name: run_tool_calls
-- Every tool call of a run.
SELECT execution_key, iteration, idx, call, policy, status, attempt, approved, raw_result, result,
       generation
FROM tool_calls WHERE run_id = ? ORDER BY iteration, idx;

-- name: upsert_tool_result
-- Store a large tool result once (a retried call's new raw result replaces the old one).
INSERT INTO tool_results (execution_key, kind, run_id, body) VALUES (?, ?, ?, ?)
ON CONFLICT (execution_key, kind) DO UPDATE SET body = excluded.body;

-- name: run_tool_results
-- The large results of a run's tool calls.
SELECT execution_key, kind, body FROM tool_results WHERE run_id = ?;

-- name: tool_call_results
-- One tool call's result columns and its large results, if any (one row per stored body).
SELECT tc.raw_result, tc.result, tr.kind, tr.body
FROM tool_calls tc LEFT JOIN tool_results tr ON tr.execution_key = tc.execution_key
WHERE tc.execution_key = ?;

-- name: session_tool_call
-- The latest answered call of a session with this tool call id (for read_tool_result).
SELECT tc.execution_key
FROM tool_calls tc JOIN runs r ON r.id = tc.run_id
WHERE r.session_id = ?1 AND tc.status = 'completed'
  -- The key counts the iteration from 1 (from 0 in keys written before 0.2).
  AND tc.execution_key IN (tc.run_id || ':' || (tc.iteration + 1) || ':' || ?2,
                           tc.run_id || ':' || tc.iteration || ':' || ?2)
ORDER BY r.created_at DESC, tc.iteration DESC LIMIT 1;

-- name: read_events
-- A page of a run's events behind a cursor, with the run's session. An event that refers to
-- what another row stores (content_ref) comes with it: a tool call's key, result columns and
-- large results (a JSON array of [kind, body]); the run's output; an answer's message (its
-- body and run). One statement, however many references the page holds.
SELECT e.seq, e.event_id, e.type, e.step_id, e.attempt_id, e.data, e.run_id, r.session_id,
       tc.execution_key, tc.raw_result, tc.result,
       CASE WHEN tc.execution_key IS NOT NULL THEN
           (SELECT json_group_array(json_array(tr.kind, tr.body)) FROM tool_results tr
            WHERE tr.execution_key = tc.execution_key)
       END,
       CASE WHEN e.ref = 'output' THEN r.output END,
       m.body, m.run_id
FROM (
    SELECT *,
           CASE
               -- The cheap test first: most events refer to nothing (and a damaged row is no JSON).
               WHEN instr(data, '"content_ref"') = 0 THEN NULL
               WHEN NOT json_valid(data) THEN NULL
               ELSE json_extract(data, '$.content_ref')
           END AS ref
    FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3
) e
LEFT JOIN runs r ON r.id = ?1
-- (CASE, not AND: json_extract of a row that is no JSON would fail the statement.)
LEFT JOIN tool_calls tc ON tc.execution_key = CASE WHEN e.ref = 'tool_call'
    -- Rows written before typed payloads name the call by their own execution_key.
    THEN coalesce(json_extract(e.data, '$.result_of'), json_extract(e.data, '$.execution_key')) END
LEFT JOIN messages m ON m.session_id = r.session_id
    AND m.seq = CASE WHEN e.ref = 'message' THEN json_extract(e.data, '$.seq') END
ORDER BY e.seq;

-- name: requeue_run
-- Put an unfinished run (back) in the pool's queue; a worker reopens it when it claims it.
UPDATE runs SET queued_at = ? WHERE id = ? AND status IN ('running', 'paused', 'awaiting_input', 'failed');

-- name: pending_controls
-- Pause/cancel requests no renewal has returned yet, for sessions this process holds (the
-- owners between the two bounds: those starting '<process>/').
SELECT id, control FROM sessions
WHERE lease_owner >= ? AND lease_owner < ? AND control IS NOT NULL AND NOT control_sent;

-- name: claim_setup
-- What a claim must consider: whether a queued run may be limited (a concurrency limit is
-- set, or an agent the registry limits has queued runs: one limited agent of a fleet does
-- not make every claim count), and the lowest pass of the tenants with queued runs (NULL:
-- only untenanted runs wait).
SELECT EXISTS (SELECT 1 FROM concurrency_limits)
       OR EXISTS (SELECT 1 FROM agent_defaults d
                  WHERE d.max_concurrent IS NOT NULL
                    AND EXISTS (SELECT 1 FROM runs r WHERE r.agent_ref = d.agent_ref AND r.queued_at IS NOT NULL)),
       (SELECT min(pass) FROM fair_shares WHERE queued > 0 AND tenant <> '');

-- name: waiting_tenants
-- The ?2 fair-share groups with queued runs (-1: all) whose next tag, pass + 1 / weight, is
-- lowest, as (tenant, pass, weight); the untenanted group's (when some of its runs wait) with
-- a pass no lower than ?1, the lowest of the tenants'.
SELECT tenant, pass, weight FROM (
    SELECT tenant, pass, weight FROM fair_shares WHERE queued > 0
    UNION ALL
    SELECT tenant, max(pass, ?1), weight FROM fair_shares
    WHERE tenant = '' AND EXISTS (SELECT 1 FROM runs WHERE queued_at IS NOT NULL AND tenant = '')
)
ORDER BY pass + 1.0 / weight, tenant
LIMIT ?2;

-- name: tenant_queue
-- A tenant's queued runs whose session no unexpired lease holds, whose not_before has passed
-- (?2: now), in rank order: the time a run became claimable less a minute per point of
-- priority (runs_tenant_queue).
SELECT r.id, r.session_id, r.concurrency_key, r.agent_ref,
       max(r.queued_at, coalesce(r.not_before, r.queued_at)) - r.priority * 60.0
FROM runs r JOIN sessions s ON s.id = r.session_id
WHERE r.queued_at IS NOT NULL AND r.tenant = ?1
  AND (s.lease_owner IS NULL OR s.lease_expires_at <= ?2)
  AND (r.not_before IS NULL OR r.not_before <= ?2)
ORDER BY max(r.queued_at, coalesce(r.not_before, r.queued_at)) - r.priority * 60.0;

-- name: queued_agents
-- Of the agents in the JSON array ?1, those with runs queued (runs_queued_agent): a claim
-- reads the queues of only those (a worker serving a dozen agents, one of them busy, read
-- twelve queues for every tenant it served).
SELECT j.value FROM json_each(?1) j
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.agent_ref = j.value AND r.queued_at IS NOT NULL)
ORDER BY j.key;

-- name: agent_queue
-- The same of one agent (?3) only, through runs_agent_queue: a worker that names its agents
-- merges theirs by rank, never reading other agents' runs.
SELECT r.id, r.session_id, r.concurrency_key, r.agent_ref,
       max(r.queued_at, coalesce(r.not_before, r.queued_at)) - r.priority * 60.0
FROM runs r JOIN sessions s ON s.id = r.session_id
WHERE r.queued_at IS NOT NULL AND r.tenant = ?1 AND r.agent_ref = ?3
  AND (s.lease_owner IS NULL OR s.lease_expires_at <= ?2)
  AND (r.not_before IS NULL OR r.not_before <= ?2)
ORDER BY max(r.queued_at, coalesce(r.not_before, r.queued_at)) - r.priority * 60.0;

-- name: key_room
-- The limit on key ?1 and, when it has one, how many of its runs drive now (?2), in one
-- statement (a claim looks at each key once). The limit: an operator's, the exact pattern
-- first, then the longest trailing-* pattern that matches; for 'agent:NAME@VERSION', else the
-- registry's; NULL: none (and no count). A run drives when it was taken off the queue, has not
-- stopped, and its session still holds the claim's lease; an agent's runs count only when a
-- claim took them (claim_generation).
SELECT cap,
       CASE WHEN cap IS NULL THEN NULL
            WHEN substr(?1, 1, 6) = 'agent:' THEN
                (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
                 WHERE d.agent_ref = substr(?1, 7) AND d.claim_generation IS NOT NULL
                   AND d.status = 'running' AND d.queued_at IS NULL
                   AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL
                   AND s.lease_expires_at > ?2)
            ELSE
                (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
                 WHERE d.concurrency_key = ?1 AND d.status = 'running' AND d.queued_at IS NULL
                   AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL
                   AND s.lease_expires_at > ?2)
       END
FROM (SELECT coalesce(
          (SELECT max_running FROM concurrency_limits
           WHERE pattern = ?1
              OR (substr(pattern, -1) = '*'
                  AND substr(?1, 1, length(pattern) - 1) = substr(pattern, 1, length(pattern) - 1))
           ORDER BY pattern = ?1 DESC, length(pattern) DESC
           LIMIT 1),
          (SELECT max_concurrent FROM agent_defaults
           WHERE substr(?1, 1, 6) = 'agent:' AND agent_ref = substr(?1, 7))) AS cap);

-- name: dequeue_run
-- A worker took the run, under the lease of generation ?2 (not_before stays: when the run
-- became claimable).
UPDATE runs SET queued_at = NULL, claimed_at = ?1, claim_generation = ?2 WHERE id = ?3;

-- name: record_claim
-- Who took a run, under which lease generation, when.
INSERT INTO run_claims (run_id, generation, owner, claimed_at) VALUES (?, ?, ?, ?);

-- name: advance_pass
-- A tenant was served ?2 runs: its pass advances by that over its weight (the untenanted
-- group's from no lower than ?1, the lowest pass of the tenants that wait).
UPDATE fair_shares SET pass = CASE WHEN tenant = '' THEN max(pass, ?1) ELSE pass END + ?2 / weight
WHERE tenant = ?3;

-- name: last_event_seq
-- The sequence number of a run's last event (0: none yet).
SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?;

-- name: defer_start
-- A worker could not start the run: count the attempt and queue it again, held back until
-- not_before; the events saying so are inserted by the same transaction.
UPDATE runs
SET start_attempts = ?, queued_at = ?, not_before = ?, event_count = MAX(event_count, ?), updated_at = ?
WHERE id = ?;

-- name: clear_start_attempts
-- A worker started the run: earlier failed attempts no longer count.
UPDATE runs SET start_attempts = 0 WHERE id = ? AND start_attempts <> 0;

-- name: end_run
-- End a run without loading its state (it cannot be loaded, or cannot be started): its
-- status, stop reason and error; off the queue; its events are inserted by the same transaction.
UPDATE runs
SET status = ?, stop_reason = ?, error = ?, event_count = MAX(event_count, ?), generation = ?,
    updated_at = ?, queued_at = NULL, not_before = NULL, start_attempts = 0
WHERE id = ?;

-- name: register_worker
-- A worker process announces itself (one row per process start).
INSERT INTO workers (id, host, pid, agents, concurrency, started_at, heartbeat_at)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: worker_heartbeat
-- A worker's periodic sign of life and drain state.
UPDATE workers SET heartbeat_at = ?, draining = ? WHERE id = ?;

-- name: stop_worker
-- A worker records that it has stopped; the supervisor, that a dead one has (fenced by its term).
UPDATE workers SET stopped_at = ? WHERE id = ? AND stopped_at IS NULL;

-- name: pool_scan
-- The supervisor's scan in one statement (each part as JSON): role ?1's latest term (epoch,
-- holder), every leased session (as leased_sessions, with whether its lease expired by ?2),
-- every running worker (as running_workers) and, for each run in the JSON array ?3 whose
-- recovery the leader tracks, its status and whether its session is leased again. The
-- backend checks the liveness lock files.
SELECT (SELECT json_array(t.epoch, t.holder) FROM leadership t WHERE t.role = ?1),
       (SELECT json_group_array(json_array(s.id, s.lease_owner, s.generation, s.agent_ref,
                                           s.lease_expires_at IS NOT NULL AND s.lease_expires_at <= ?2))
        FROM sessions s WHERE s.lease_owner IS NOT NULL),
       (SELECT json_group_array(json_array(w.id, w.host, w.pid, w.agents, w.concurrency, w.started_at,
                                           w.heartbeat_at, w.draining))
        FROM (SELECT * FROM workers WHERE stopped_at IS NULL ORDER BY started_at) w),
       (SELECT json_group_array(json_array(r.id, r.status, s.lease_owner IS NOT NULL))
        FROM runs r JOIN sessions s ON s.id = r.session_id
        WHERE r.id IN (SELECT value FROM json_each(?3)));

-- name: running_workers
-- Workers not known to have stopped (the backend checks each one's liveness lock file).
SELECT id, host, pid, agents, concurrency, started_at, heartbeat_at, draining
FROM workers WHERE stopped_at IS NULL ORDER BY started_at;

-- name: prune_workers
-- Forget up to a number of workers that stopped before a time, oldest first.
DELETE FROM workers WHERE id IN (
    SELECT id FROM workers WHERE stopped_at IS NOT NULL AND stopped_at < ? ORDER BY stopped_at LIMIT ?
);

-- name: leased_sessions
-- Every session with a lease holder, for the supervisor's orphan scan.
SELECT s.id, s.lease_owner, s.generation, s.lease_expires_at, s.agent_ref
FROM sessions s WHERE s.lease_owner IS NOT NULL;

-- name: drop_orphan_lease
-- Take a dead or expired holder's lease away; the generation bump fences it out.
UPDATE sessions
SET lease_owner = NULL, lease_expires_at = NULL, generation = generation + 1
WHERE id = ? AND lease_owner = ? AND generation = ?
RETURNING generation;

-- name: requeue_session
-- Queue a pool session's unfinished run again after its lease ?3 was dropped: a running run,
-- or one queued while it waited (a decision, a resume) that the dropped holder claimed and
-- died before writing to (it keeps its waiting status until a worker drives it).
UPDATE runs SET queued_at = ?1
WHERE session_id = ?2 AND queued_at IS NULL
  AND (status = 'running'
       OR (status IN ('paused', 'awaiting_input', 'failed')
           AND claim_generation = ?3 AND generation IS NOT ?3))
RETURNING id;

-- name: take_leadership
-- The holder of a role's lock file takes the role's next epoch (its fencing token).
INSERT INTO leadership (role, epoch, holder, since) VALUES (?, 1, ?, ?)
ON CONFLICT (role) DO UPDATE SET epoch = epoch + 1, holder = excluded.holder, since = excluded.since,
                                scanned_at = NULL, scans = 0, recovered = 0
RETURNING epoch, since;

-- name: leadership_term
-- The latest term of a role: its epoch and holder (none before anyone led).
SELECT epoch, holder FROM leadership WHERE role = ?;

-- name: term_holds
-- Whether a leader's term (role, epoch, holder) is still the latest; checked in the same
-- write transaction as every write the leader makes as leader.
SELECT 1 FROM leadership WHERE role = ? AND epoch = ? AND holder = ?;

-- name: queue_stats
-- Queue depth and the oldest queued time, per agent reference (runs carry their session's; the
-- runs_queued_agent index alone answers).
SELECT agent_ref, COUNT(*), MIN(queued_at) FROM runs WHERE queued_at IS NOT NULL GROUP BY agent_ref;

-- name: stuck_runs
-- Unfinished runs not updated since a time, oldest first.
SELECT id, session_id, status, updated_at FROM runs
WHERE status IN ('running', 'paused', 'awaiting_input') AND updated_at < ?
ORDER BY updated_at LIMIT ?;

-- name: journal_tail
-- The highest journal seq of a run (0: none yet); the lease holder numbers on from it.
SELECT coalesce(max(seq), 0) FROM journal WHERE run_id = ?;

-- name: insert_journal
-- Append one journal record.
INSERT INTO journal (run_id, seq, id, kind, step_id, attempt_id, execution_key, recorded_at, payload,
                     generation)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: read_journal
-- A run's journal records in order, up to a limit.
SELECT seq, id, kind, step_id, attempt_id, execution_key, recorded_at, payload
FROM journal WHERE run_id = ? ORDER BY seq LIMIT ?;

-- name: count_journal
-- How many records of one kind a run's journal holds for one model step.
SELECT count(*) FROM journal WHERE run_id = ? AND kind = ? AND step_id = ?;

-- name: list_runs
-- A page of runs, newest first, after a keyset cursor (created_at, id). A line ending in
-- "-- when: NAME" stays only when that filter is given (see _listing.list_statement), so each
-- combination of filters is a statement of its own, which one of the runs_* indexes serves.
SELECT r.id, r.session_id, r.agent_ref, r.request_id, r.status, r.phase, r.iteration, r.event_count,
       r.stop_reason, r.created_at, r.updated_at, r.queued_at IS NOT NULL, r.created_at
FROM runs r
WHERE 1 = 1
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
SELECT w.id, w.host, w.pid, w.agents, w.concurrency, w.started_at, w.heartbeat_at, w.draining,
       w.stopped_at,
       (SELECT count(*) FROM sessions s WHERE s.lease_owner >= w.id || '/' AND s.lease_owner < w.id || '0')
FROM workers w
ORDER BY w.stopped_at IS NOT NULL, coalesce(w.stopped_at, w.started_at) DESC
LIMIT ?;

-- name: leadership_state
-- Every role's latest term and what its leader last recorded of its scans.
SELECT role, epoch, holder, since, scanned_at, scans, recovered FROM leadership ORDER BY role;

-- name: record_scan
-- The leader records its scans so far (fenced by its term: no row, no longer the leader).
UPDATE leadership SET scanned_at = ?, scans = ?, recovered = ?
WHERE role = ? AND epoch = ? AND holder = ?;

-- name: insert_action
-- An operator's decision or control, recorded before it is carried out.
INSERT INTO audit (id, at, actor, via, action, session_id, run_id, execution_key, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: finish_action
-- How an operator's action ended, and what more is known of it then.
UPDATE audit SET outcome = ?, finished_at = ?, detail = ? WHERE id = ?;

-- name: run_actions
-- The operators' actions on one run, oldest first.
SELECT id, at, actor, via, action, session_id, run_id, execution_key, detail, outcome, finished_at
FROM audit WHERE run_id = ? ORDER BY at, id LIMIT ?;

-- name: recent_actions
-- The newest operator actions on any run.
SELECT id, at, actor, via, action, session_id, run_id, execution_key, detail, outcome, finished_at
FROM audit ORDER BY at DESC, id DESC LIMIT ?;

-- name: insert_login
-- A console sign-in (by a hash of its secret id).
INSERT INTO console_logins (id_hash, name, role, token_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?);

-- name: get_login
-- A console sign-in by the hash of its id, with whether it is still valid at a time.
SELECT name, role, token_id, expires_at > ? AND ended_at IS NULL FROM console_logins WHERE id_hash = ?;

-- name: end_login
-- Sign out: the session ends everywhere.
UPDATE console_logins SET ended_at = ? WHERE id_hash = ? AND ended_at IS NULL;

-- name: purge_logins
-- Forget console sign-ins that expired a day or more ago.
DELETE FROM console_logins WHERE expires_at < ?;

-- name: run_schedule
-- How a run is scheduled: priority, concurrency key, tenant, when it was queued, when it may
-- be claimed, when it was last claimed.
SELECT id, priority, concurrency_key, tenant, queued_at, not_before, claimed_at FROM runs WHERE id = ?;

-- name: set_limit
-- An operator's concurrency limit on a key or pattern (replacing any earlier one).
INSERT INTO concurrency_limits (pattern, max_running, updated_at) VALUES (?, ?, ?)
ON CONFLICT (pattern) DO UPDATE SET max_running = excluded.max_running, updated_at = excluded.updated_at;

-- name: remove_limit
-- Remove an operator's concurrency limit; returns it if there was one.
DELETE FROM concurrency_limits WHERE pattern = ? RETURNING pattern;

-- name: list_limits
-- Every concurrency limit: the operators', then the registries' agent limits no operator's replaces.
SELECT pattern, max_running, 'operator' FROM concurrency_limits
UNION ALL
SELECT 'agent:' || agent_ref, max_concurrent, 'registry' FROM agent_defaults
WHERE max_concurrent IS NOT NULL AND 'agent:' || agent_ref NOT IN (SELECT pattern FROM concurrency_limits)
ORDER BY 1;

-- name: key_usage
-- How many runs of concurrency key ?1 drive now (?2) and how many wait in the queue.
SELECT (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
        WHERE d.concurrency_key = ?1 AND d.status = 'running' AND d.queued_at IS NULL
          AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL AND s.lease_expires_at > ?2),
       (SELECT count(*) FROM runs WHERE concurrency_key = ?1 AND queued_at IS NOT NULL);

-- name: agent_usage
-- How many runs of agent ?1 drive now (?2) and how many wait in the queue.
SELECT (SELECT count(*) FROM runs d JOIN sessions s ON s.id = d.session_id
        WHERE d.agent_ref = ?1 AND d.claim_generation IS NOT NULL AND d.status = 'running'
          AND d.queued_at IS NULL AND d.claim_generation = s.generation AND s.lease_owner IS NOT NULL
          AND s.lease_expires_at > ?2),
       (SELECT count(*) FROM runs WHERE agent_ref = ?1 AND queued_at IS NOT NULL);

-- name: publish_agent_defaults
-- What a worker's registry says of an agent: its default priority and max_concurrent (NULL: none).
INSERT INTO agent_defaults (agent_ref, priority, max_concurrent, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (agent_ref) DO UPDATE SET priority = excluded.priority, max_concurrent = excluded.max_concurrent,
                                      updated_at = excluded.updated_at;

-- name: set_weight
-- A tenant's fair-share weight.
INSERT INTO fair_shares (tenant, weight) VALUES (?, ?)
ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight;

-- name: list_shares
-- The fair-share groups that wait or have a weight of their own.
SELECT tenant, weight, pass, queued FROM fair_shares WHERE queued > 0 OR weight <> 1 OR tenant = '' ORDER BY tenant;

-- name: queue_shape
-- Queued runs by priority band and concurrency key ('' for none): how many, how many may not
-- be claimed yet (now: ?1), and since when the longest-claimable one has been claimable.
SELECT CASE WHEN priority > 0 THEN 'high' WHEN priority < 0 THEN 'low' ELSE 'normal' END,
       coalesce(concurrency_key, ''), count(*), sum(CASE WHEN not_before > ?1 THEN 1 ELSE 0 END),
       min(CASE WHEN not_before IS NULL OR not_before <= ?1 THEN max(queued_at, coalesce(not_before, queued_at)) END)
FROM runs WHERE queued_at IS NOT NULL
GROUP BY 1, 2;

-- name: set_rate_limit
-- A fleet-wide model rate limit on a provider/model bucket or pattern (replacing any earlier one).
INSERT INTO rate_limits (pattern, requests_per_minute, tokens_per_minute, burst_seconds, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (pattern) DO UPDATE SET requests_per_minute = excluded.requests_per_minute,
    tokens_per_minute = excluded.tokens_per_minute, burst_seconds = excluded.burst_seconds,
    updated_at = excluded.updated_at;

-- name: remove_rate_limit
-- Remove a model rate limit; returns it if there was one.
DELETE FROM rate_limits WHERE pattern = ? RETURNING pattern;

-- name: list_rate_limits
-- Every model rate limit.
SELECT pattern, requests_per_minute, tokens_per_minute, burst_seconds FROM rate_limits ORDER BY pattern;

-- name: rate_bucket
-- A bucket's theoretical arrival times, pause and the request time leases gave back (absent:
-- never used).
SELECT requests_at, tokens_at, paused_until, given_back FROM rate_buckets WHERE name = ?;

-- name: reserve_rate
-- Record a reservation: the bucket's new arrival times, a wait of ?4 seconds (?5: it waited)
-- and the request time leases gave back so far (?6).
INSERT INTO rate_buckets (name, requests_at, tokens_at, waits, waited, given_back)
VALUES (?1, ?2, ?3, ?5, ?4, ?6)
ON CONFLICT (name) DO UPDATE SET requests_at = excluded.requests_at, tokens_at = excluded.tokens_at,
    waits = waits + excluded.waits, waited = waited + excluded.waited, given_back = excluded.given_back;

-- name: run_rate_holds
-- The buckets whose reservation is kept for run ? (read as a worker loads the run).
SELECT bucket FROM rate_holds WHERE run_id = ?;

-- name: take_rate_hold
-- The reservation kept for run ?1 in bucket ?2 (its start), removed as it is taken.
DELETE FROM rate_holds WHERE run_id = ?1 AND bucket = ?2 RETURNING start;

-- name: hold_rate
-- Keep run ?1's reservation of bucket ?2 starting at ?3 for it while it waits in the queue.
INSERT INTO rate_holds (run_id, bucket, start) VALUES (?1, ?2, ?3)
ON CONFLICT (run_id, bucket) DO UPDATE SET start = excluded.start;

-- name: requeue_later
-- Queue running run ?3 again, claimable from ?2 (a wait for rate budget gives its slot back).
UPDATE runs SET queued_at = ?1, not_before = ?2 WHERE id = ?3 AND status = 'running';

-- name: settle_rate
-- Earlier calls used ?2 seconds' worth of tokens more (negative: fewer) than they reserved.
UPDATE rate_buckets SET tokens_at = tokens_at + ?2 WHERE name = ?1;

-- name: pause_rate
-- A vendor said to come back at ?2 (epoch seconds): no call of bucket ?1 starts before then
-- (a later pause already set stands). Returns when the pause ends.
UPDATE rate_buckets SET paused_until = max(paused_until, ?2) WHERE name = ?1 RETURNING paused_until;

-- name: list_rate_buckets
-- Every bucket used so far, with how many calls waited for its budget and for how long.
SELECT name, waits, waited FROM rate_buckets ORDER BY name;

-- name: prune_candidates
-- Retention: sessions whose last known activity is before a cutoff and that no unexpired lease
-- holds, after a keyset cursor (prune_check_at, id), in that order.
SELECT id, prune_check_at FROM sessions
WHERE prune_check_at < ?1 AND (prune_check_at, id) > (?2, ?3)
  AND (lease_owner IS NULL OR lease_expires_at <= ?4)
ORDER BY prune_check_at, id
LIMIT ?5;

-- name: prune_facts
-- What decides whether each of the given sessions (a JSON array of ids) may go: whether no
-- unexpired lease holds it, whether it has an unfinished run, when it was last active (its
-- creation or its latest run's last write) and its latest run's status.
SELECT s.id,
       s.lease_owner IS NULL OR s.lease_expires_at <= ?2,
       EXISTS (SELECT 1 FROM runs r
               WHERE r.session_id = s.id AND r.status IN ('running', 'paused', 'awaiting_input')),
       max(s.created_at, coalesce((SELECT max(r.updated_at) FROM runs r WHERE r.session_id = s.id), 0)),
       (SELECT r.status FROM runs r WHERE r.session_id = s.id ORDER BY r.created_at DESC, r.rowid DESC LIMIT 1)
FROM sessions s
WHERE s.id IN (SELECT value FROM json_each(?1));

-- name: set_prune_check
-- When retention should look at a session again (it found the session still in use).
UPDATE sessions SET prune_check_at = ? WHERE id = ?;

-- name: oldest_prune_check
-- The oldest last known activity of any session (what retention examines next).
SELECT min(prune_check_at) FROM sessions;

-- name: delete_tool_results
-- Erase the large tool results of the given sessions' runs (a JSON array of session ids).
DELETE FROM tool_results
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)));

-- name: delete_tool_calls
-- Erase the tool calls of the given sessions' runs.
DELETE FROM tool_calls
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)));

-- name: delete_events
-- Erase the events of the given sessions' runs.
DELETE FROM events
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)));

-- name: delete_journal
-- Erase the flight-recorder journals of the given sessions' runs.
DELETE FROM journal
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)));

-- name: delete_messages
-- Erase the conversations of the given sessions.
DELETE FROM messages WHERE session_id IN (SELECT value FROM json_each(?));

-- name: delete_audit
-- Erase the operators' actions on the given sessions.
DELETE FROM audit WHERE session_id IN (SELECT value FROM json_each(?));

-- name: delete_runs
-- Erase the given sessions' runs (after everything that refers to them).
DELETE FROM runs WHERE session_id IN (SELECT value FROM json_each(?));

-- name: delete_sessions
-- Erase the given sessions (after everything they own).
DELETE FROM sessions WHERE id IN (SELECT value FROM json_each(?));

-- name: lock_session
-- A session's lease, whether it has an unfinished run, and its runs (erasure decides on these).
SELECT s.lease_owner, s.lease_expires_at,
       (SELECT r.id || ' (' || r.status || ')' FROM runs r
        WHERE r.session_id = s.id AND r.status IN ('running', 'paused', 'awaiting_input'))
FROM sessions s WHERE s.id = ?;

-- name: session_page
-- Session ids in order after a cursor (exporting every session).
SELECT id FROM sessions WHERE id > ? ORDER BY id LIMIT ?;

-- name: export_sessions
-- The given sessions' rows (a JSON array of ids), for an archive.
SELECT * FROM sessions WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id;

-- name: export_runs
-- The given sessions' runs, oldest first.
SELECT * FROM runs WHERE session_id IN (SELECT value FROM json_each(?)) ORDER BY session_id, created_at, rowid;

-- name: export_messages
-- The given sessions' conversations, in order.
SELECT * FROM messages WHERE session_id IN (SELECT value FROM json_each(?)) ORDER BY session_id, seq;

-- name: export_tool_calls
-- The tool calls of the given sessions' runs.
SELECT * FROM tool_calls
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)))
ORDER BY run_id, iteration, idx;

-- name: export_tool_results
-- The large tool results of the given sessions' runs.
SELECT * FROM tool_results
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)))
ORDER BY execution_key, kind;

-- name: export_events
-- The events of the given sessions' runs, in order.
SELECT * FROM events
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)))
ORDER BY run_id, seq;

-- name: export_journal
-- The flight-recorder journals of the given sessions' runs, in order.
SELECT * FROM journal
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?)))
ORDER BY run_id, seq;

-- name: export_audit
-- The operators' actions on the given sessions, oldest first.
SELECT * FROM audit WHERE session_id IN (SELECT value FROM json_each(?)) ORDER BY at, id;

-- name: session_exists
-- Whether a session id is taken (importing skips sessions that exist).
SELECT 1 FROM sessions WHERE id = ?;

-- name: compaction_waiting
-- Whether a run noted as finished before ?1 waits to be compacted (read without the write lock).
SELECT 1 FROM compactable_runs WHERE finished_at < ?1 LIMIT 1;

-- name: compaction_due
-- Up to ?2 runs noted as finished before ?1 (compactable_runs, migration 14), oldest first: the
-- run id, whether it is still finished (a resumed run is not; a removed one is not stored),
-- and its last cursor. The write transaction keeps prunes and erasures out meanwhile.
SELECT c.run_id, coalesce(r.status IN ('completed', 'cancelled', 'failed'), 0), coalesce(r.event_count, 0)
FROM compactable_runs c LEFT JOIN runs r ON r.id = c.run_id
WHERE c.finished_at < ?1
ORDER BY c.finished_at
LIMIT ?2;

-- name: streamed_pieces
-- The streamed text events (a piece each, or compacted before) of the runs in the JSON array ?1,
-- in order: run id, cursor, type, step id, attempt id, payload.
SELECT run_id, seq, type, step_id, attempt_id, data FROM events
WHERE run_id IN (SELECT value FROM json_each(?1))
  AND type IN ('text_delta', 'thinking_delta', 'tool_call_delta')
ORDER BY run_id, seq;

-- name: compact_keep
-- The row that takes the text of the pieces before it (?1: its new payload).
UPDATE events SET data = ?1 WHERE run_id = ?2 AND seq = ?3;

-- name: compact_gone
-- The pieces of run ?1 from cursor ?2 to ?3, merged into the row after them.
DELETE FROM events WHERE run_id = ?1 AND seq >= ?2 AND seq <= ?3;

-- name: count_compacted
-- Run ?2 counts ?1 more event rows removed by compaction (migration 15).
UPDATE runs SET compacted_rows = compacted_rows + ?1 WHERE id = ?2;

-- name: forget_compactable
-- Runs in the JSON array ?1 no longer waiting to be compacted (done, resumed, or removed).
DELETE FROM compactable_runs WHERE run_id IN (SELECT value FROM json_each(?1));

-- name: forget_compactable_sessions
-- The runs of the sessions in the JSON array ?1, about to be removed, no longer wait either.
DELETE FROM compactable_runs
WHERE run_id IN (SELECT id FROM runs WHERE session_id IN (SELECT value FROM json_each(?1)));
