-- The steps of the PostgreSQL checkpoint statement, one block per WITH item, and its main query
-- (see _pg_checkpoint.py, which declares every parameter, its type and the row set it belongs
-- to, and puts together one statement per checkpoint shape from these blocks).
--
-- Fence and write one checkpoint (a new run or the run's fields, messages, tool calls, events,
-- journal records, large tool results). One data-modifying WITH statement, so one transaction
-- and one round trip. The fence is the UPDATE of the session row: it matches only while
-- (owner, generation) hold an unexpired lease and locks the row against a concurrent claim.
-- Every step joins it, so a stale writer writes nothing. It hands out the new messages'
-- sequence numbers from message_count, so nothing reads anything proportional to the
-- conversation, and records the checkpoint's id: a client that lost its connection before
-- learning whether the call committed simply calls again, and finds the fence closed and its
-- id there (result false: already written). Otherwise an error undoes everything: HX001
-- (LeaseLostError) when the lease no longer holds, HX002 when the run is not the session's,
-- HX003 when a progress-only checkpoint finds the session row holding another run's progress
-- (the client sends it again whole). Wake-up notifications, at most one per channel, are
-- delivered only if the checkpoint commits. JSON is passed as text and stored verbatim (json,
-- not jsonb, columns).
--
-- Placeholders (numbered $1, $2, ... in declaration order, each with its declared type, when a
-- shape's statement is put together; a parameter no kept block uses is not sent):
--   :name            a parameter;
--   :set.column      one column of a row set, per row (unnest of an array; a plain value in a
--                    shape that writes exactly one row of a set that allows it);
--   :set.column[]    a row set's column as the whole array (sets always sent as arrays);
--   :set.columns     the set's columns' names, in order, comma-separated;
--   :set.each        every column of the set, per row, comma-separated.
-- Only the main query reads other steps (fence, run), so every step but those two may be left
-- out of a shape that has nothing for it, as the server sets up every step it is given.

-- name: fence
-- Lock and update the session row while the lease holds; hand out message numbers.
UPDATE sessions s
SET message_count = s.message_count + cardinality(:messages), last_checkpoint = :checkpoint_id,
    -- Queueing a run gives the session up in the same commit, so that a worker woken by the
    -- notification can claim it at once; so does an execution's last checkpoint, saving the
    -- release's round trip.
    lease_owner = CASE WHEN :release THEN NULL ELSE s.lease_owner END,
    lease_expires_at = CASE WHEN :release THEN NULL ELSE s.lease_expires_at END,
    -- The run's progress (SET sees the row as it was, RETURNING as it is now). Only a
    -- checkpoint that writes the run row too makes it this run's; one that writes progress
    -- alone to another run's is undone (HX003, in the main query).
    current_run = :run,  -- when: writes_run
    -- A checkpoint that stops the run clears its pause/cancel request: it has acted on it (and
    -- a later execution must not apply it again), except a cancel left on a run that pauses or
    -- waits for input: the driver looks for it after such a commit, and cancels the run.
    control = CASE WHEN :status <> 'running'  -- when: writes_run
                        AND NOT (s.control IS NOT DISTINCT FROM 'cancel' AND :status IN ('paused', 'awaiting_input'))  -- when: writes_run
                   THEN NULL ELSE s.control END,  -- when: writes_run
    current_phase = CASE WHEN s.current_run = :run THEN coalesce(:phase, s.current_phase) ELSE :phase END,
    current_event_count = CASE WHEN s.current_run = :run THEN greatest(s.current_event_count, :last_seq)
                               ELSE :last_seq END,
    current_updated_at = now()
WHERE s.id = :session AND s.lease_owner = :owner AND s.generation = :generation
  AND s.lease_expires_at > clock_timestamp()
  AND s.last_checkpoint IS DISTINCT FROM :checkpoint_id
-- A checkpoint that gives the lease up finds the progress let go of (the trigger of migration
-- 0003 clears it as the lease changes hands): its run step takes the phase and event count it
-- writes from the parameters then.
RETURNING s.message_count - cardinality(:messages) AS history_length, s.watched_until > now() AS watched,
          s.awaited_until > now() AS awaited,
          s.current_run IS NOT DISTINCT FROM :run AS current, coalesce(s.current_phase, :phase) AS phase,
          coalesce(s.current_event_count, :last_seq) AS event_count;

-- name: new_run
-- Create the run (a new run's checkpoint), with its schedule when it is queued (migration 0009).
INSERT INTO runs (id, session_id, request_id, request_message, status, phase, iteration, usage,
                  output, stop_reason, error, usage_incomplete, history_length, event_count,
                  generation, created_at, updated_at, queued_at, priority, concurrency_key, tenant,
                  not_before)
SELECT :run, :session, :request_id, :request_message, :status, :phase, :iteration, :usage, :output,
       :stop_reason, :error, :usage_incomplete, f.history_length, :last_seq, :generation,
       now(), now(), CASE WHEN :release AND :status = 'running' THEN now() END,
       coalesce(:priority, (SELECT d.priority FROM sessions s JOIN agent_defaults d ON d.agent_ref = s.agent_ref
                            WHERE s.id = :session), 0),
       :concurrency_key, coalesce(:tenant, ''),
       CASE WHEN :delay > 0 THEN now() + make_interval(secs => :delay) END
FROM fence f;

-- name: run
-- Write the run's fields after the delta (NULL: unchanged; all NULL when only events are added).
UPDATE runs r
SET status = coalesce(:status, r.status), phase = coalesce(f.phase, r.phase),
    iteration = coalesce(:iteration, r.iteration), usage = coalesce(:usage, r.usage),
    output = coalesce(:output, r.output), stop_reason = coalesce(:stop_reason, r.stop_reason),
    error = CASE WHEN :status IS NULL THEN r.error ELSE :error END,
    usage_incomplete = coalesce(:usage_incomplete, r.usage_incomplete),
    event_count = greatest(r.event_count, f.event_count), updated_at = now(),
    generation = CASE WHEN :status IS NULL THEN r.generation ELSE :generation END,
    -- A run that stops running leaves the pool's queue (as on SQLite).
    queued_at = CASE WHEN :status IS NULL OR :status = 'running' THEN r.queued_at END
FROM fence f
WHERE r.id = :run AND r.session_id = :session
RETURNING r.id;

-- name: run_progress
-- The run step of a progress-only checkpoint: the session row took the phase and event count;
-- the run row is not written (even an UPDATE that matches no row costs nearly as much as one
-- that does), so the main query's check that the step found the run becomes a check that the
-- session row holds this run's progress.
SELECT :run AS id FROM fence f WHERE f.current;

-- name: messages_added
-- Append the new messages, numbered on from the fence's count. Set-returning functions in a
-- select list run in lockstep, one row per array element, and unlike functions in FROM they do
-- not collect their rows first.
INSERT INTO messages (session_id, seq, run_id, body, generation)
SELECT :session, f.history_length + generate_subscripts(:messages, 1), :run, unnest(:messages), :generation
FROM fence f;

-- name: tools_moved
-- Insert or move on the tool calls that changed.
INSERT INTO tool_calls (:tools.columns, run_id, generation, updated_at)
SELECT :tools.each, :run, :generation, now()
FROM fence f
ON CONFLICT (execution_key) DO UPDATE SET
    status = excluded.status, attempt = excluded.attempt, approved = excluded.approved,
    raw_result = excluded.raw_result, result = excluded.result,
    generation = excluded.generation, updated_at = excluded.updated_at;

-- name: events_added
-- Append the new events.
INSERT INTO events (run_id, :events.columns, generation, created_at)
SELECT :run, :events.each, :generation, now()
FROM fence f;

-- name: journal_added
-- Append a recorded run's journal records, numbered on from the run's last one: the fence's
-- row lock keeps any other writer of this run (there is none while the lease holds) out until
-- this statement commits.
INSERT INTO journal (run_id, seq, :journal.columns, generation)
SELECT :run, (SELECT coalesce(max(j.seq), 0) FROM journal j WHERE j.run_id = :run)
             + generate_subscripts(:journal.id[], 1),
       :journal.each, :generation
FROM fence f;

-- name: results_added
-- Store large tool results once (migration 0006).
INSERT INTO tool_results (run_id, :results.columns)
SELECT :run, :results.each
FROM fence f
ON CONFLICT (execution_key, kind) DO UPDATE SET body = excluded.body;

-- name: main
-- Say whether the checkpoint was written (false: a retry that finds it applied), or raise.
SELECT CASE
    WHEN NOT EXISTS (SELECT FROM fence) THEN
        CASE WHEN EXISTS (SELECT FROM sessions WHERE id = :session AND last_checkpoint = :checkpoint_id)
                  -- A new run's id is the caller's own: if it exists, this call created it
                  -- (and a worker may already have taken the queued run over).
                  OR EXISTS (SELECT FROM runs WHERE id = :run AND session_id = :session)  -- when: new_run
             THEN false
             ELSE harnessx_raise('HX001', 'lease on session ' || :session || ' (generation ' || :generation
                                          || ') no longer holds')
        END
    WHEN NOT EXISTS (SELECT FROM run) THEN  -- when: run
        harnessx_raise('HX002', 'run ' || :run || ' is not a run of session ' || :session)  -- when: run
    WHEN NOT EXISTS (SELECT FROM run) THEN  -- when: progress
        harnessx_raise('HX003', 'session ' || :session || ' holds no progress of run ' || :run)  -- when: progress
    -- The events channel only while some process follows the session (see watch_run), or
    -- waits for its result and this checkpoint stops the execution (see await_run).
    ELSE (CASE WHEN :events_channel IS NULL THEN true
               WHEN coalesce((SELECT watched FROM fence), false)
                    OR (coalesce(:status, 'running') <> 'running' AND coalesce((SELECT awaited FROM fence), false))
               THEN pg_notify(:events_channel, :run) IS NOT NULL
               ELSE true END)
        AND (CASE WHEN :work_channel IS NULL THEN true ELSE pg_notify(:work_channel, :run) IS NOT NULL END)
END;
