-- The steps of the PostgreSQL group commit: the checkpoints of several sessions in one
-- statement (see _pg_group_commit.py, which decides when there are several to send, and
-- _pg_checkpoint.py, which declares the parameters and puts a statement together from these
-- blocks, leaving out a step that no member has anything for).
--
-- Each member is one checkpoint of a running run, as postgres_checkpoint.sql would write it on
-- its own: its fence, its run's fields (or its progress alone), messages, tool calls and events.
-- Every step joins the member's own fence, so a member whose lease no longer holds writes
-- nothing, and the others are written all the same: where the one-checkpoint statement raises
-- HX001, this one answers per member. What it answers, in member order:
--   written   the checkpoint is committed (with the others);
--   applied   it had been committed before (a retry after a lost reply finds its id);
--   not_held  a progress-only member whose session row holds another run's progress (the
--             client sends it again whole, as after HX003), its lease still holding;
--   lost      its lease no longer holds: nothing of it was written.
-- A member whose run is not its session's (HX002) raises for the whole statement, which
-- undoes every member; the client then sends each one on its own. Wake-up notifications go
-- out with the commit, as the one-checkpoint statement sends them.
--
-- Placeholders as in postgres_checkpoint.sql, and two more: a row set is sent as one JSON
-- document (an array of objects, one per row; the parameter of the set's name), read by
-- json_to_recordset as ``:set.record`` (its columns and how they travel: a JSON value as the
-- string of its text) and typed back as ``:set.values``. Each row names the member it belongs
-- to; members are numbered from 1, in the order sent.

-- name: members
-- One row per member.
SELECT :members.values FROM json_to_recordset(:members) AS m (:members.record)

-- name: fence
-- Lock and update each member's session row while its lease holds (a progress-only member's
-- only while the row holds its run's progress); hand out message numbers.
UPDATE sessions s
SET message_count = s.message_count + m.messages, last_checkpoint = m.checkpoint_id,
    lease_owner = CASE WHEN m.release THEN NULL ELSE s.lease_owner END,
    lease_expires_at = CASE WHEN m.release THEN NULL ELSE s.lease_expires_at END,
    current_run = CASE WHEN m.progress_only THEN s.current_run ELSE m.run END,
    control = CASE WHEN NOT m.progress_only AND m.status <> 'running'
                        AND NOT (s.control IS NOT DISTINCT FROM 'cancel' AND m.status IN ('paused', 'awaiting_input'))
                   THEN NULL ELSE s.control END,
    current_phase = CASE WHEN s.current_run = m.run THEN coalesce(m.phase, s.current_phase) ELSE m.phase END,
    current_event_count = CASE WHEN s.current_run = m.run THEN greatest(s.current_event_count, m.last_seq)
                               ELSE m.last_seq END,
    current_updated_at = now()
FROM members m
-- The array as well as the join: the rows are found by the primary key whatever the
-- statistics say (a new table's say it is tiny, and a scan of it would do).
WHERE s.id = ANY (ARRAY(SELECT session FROM members)) AND s.id = m.session
  AND s.lease_owner = m.owner AND s.generation = m.generation
  AND s.lease_expires_at > clock_timestamp()
  AND s.last_checkpoint IS DISTINCT FROM m.checkpoint_id
  AND (NOT m.progress_only OR s.current_run IS NOT DISTINCT FROM m.run)
RETURNING m.member, m.session, m.run, m.generation, s.message_count - m.messages AS history_length,
          s.watched_until > now() AS watched, s.awaited_until > now() AS awaited,
          coalesce(s.current_phase, m.phase) AS current_phase,
          coalesce(s.current_event_count, m.last_seq) AS current_event_count

-- name: run
-- Write the run's fields of each member that changes more than its progress.
UPDATE runs r
SET status = coalesce(m.status, r.status), phase = coalesce(f.current_phase, r.phase),
    iteration = coalesce(m.iteration, r.iteration), usage = coalesce(m.usage, r.usage),
    output = coalesce(m.output, r.output), stop_reason = coalesce(m.stop_reason, r.stop_reason),
    error = CASE WHEN m.status IS NULL THEN r.error ELSE m.error END,
    usage_incomplete = coalesce(m.usage_incomplete, r.usage_incomplete),
    event_count = greatest(r.event_count, f.current_event_count), updated_at = now(),
    generation = CASE WHEN m.status IS NULL THEN r.generation ELSE m.generation END,
    queued_at = CASE WHEN m.status IS NULL OR m.status = 'running' THEN r.queued_at END
FROM fence f JOIN members m ON m.member = f.member
WHERE r.id = ANY (ARRAY(SELECT run FROM members)) AND NOT m.progress_only AND r.id = m.run AND r.session_id = m.session
RETURNING f.member

-- name: messages_added
-- Append each member's new messages, numbered on from its fence's count.
INSERT INTO messages (session_id, seq, run_id, body, generation)
SELECT f.session, f.history_length + x.position, f.run, x.body, f.generation
FROM (SELECT :member_messages.values FROM json_to_recordset(:member_messages) AS x (:member_messages.record)) x
JOIN fence f USING (member)

-- name: tools_moved
-- Insert or move on each member's tool calls that changed.
INSERT INTO tool_calls (:tools.columns, run_id, generation, updated_at)
SELECT :tools.columns, f.run, f.generation, now()
FROM (SELECT :member_tools.values FROM json_to_recordset(:member_tools) AS x (:member_tools.record)) x
JOIN fence f USING (member)
ON CONFLICT (execution_key) DO UPDATE SET
    status = excluded.status, attempt = excluded.attempt, approved = excluded.approved,
    raw_result = excluded.raw_result, result = excluded.result,
    generation = excluded.generation, updated_at = excluded.updated_at

-- name: events_added
-- Append each member's new events.
INSERT INTO events (run_id, :events.columns, generation, created_at)
SELECT f.run, :events.columns, f.generation, now()
FROM (SELECT :member_events.values FROM json_to_recordset(:member_events) AS x (:member_events.record)) x
JOIN fence f USING (member)

-- name: main
-- What became of each member, in member order (see the header); notify as it is written.
SELECT CASE
    WHEN f.member IS NULL THEN
        CASE WHEN EXISTS (SELECT FROM sessions s WHERE s.id = m.session AND s.last_checkpoint = m.checkpoint_id)
             THEN 'applied'
             WHEN m.progress_only
                  AND EXISTS (SELECT FROM sessions s WHERE s.id = m.session AND s.lease_owner = m.owner
                                AND s.generation = m.generation AND s.lease_expires_at > clock_timestamp())
             THEN 'not_held'
             ELSE 'lost'
        END
    WHEN NOT m.progress_only AND r.member IS NULL  -- when: run
         AND harnessx_raise('HX002', 'run ' || m.run || ' is not a run of session ' || m.session) THEN 'lost'  -- when: run
    -- The events channel only while some process follows the session, or waits for its
    -- result and this checkpoint stops the execution (as in postgres_checkpoint.sql).
    WHEN m.events_channel IS NOT NULL
         AND (f.watched OR (coalesce(m.status, 'running') <> 'running' AND coalesce(f.awaited, false)))
    THEN CASE WHEN pg_notify(m.events_channel, m.run) IS NOT NULL THEN 'written' END
    ELSE 'written'
END
FROM members m
LEFT JOIN fence f ON f.member = m.member
LEFT JOIN run r ON r.member = m.member  -- when: run
ORDER BY m.member
