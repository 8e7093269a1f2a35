-- Named queries for the SQLite store. Each starts with "-- name: <name>" and a purpose line.

-- name: record_migration
-- Remember that a migration was applied, with its checksum.
INSERT INTO harnessx_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?);

-- name: insert_session
-- Create a session row with no lease.
INSERT INTO sessions (id, agent_ref, fingerprint, created_at) VALUES (?, ?, ?, ?);

-- name: get_session
-- One session with its lease and control flag.
SELECT id, agent_ref, fingerprint, lease_owner, generation, lease_expires_at, control
FROM sessions WHERE id = ?;

-- name: take_lease
-- Claim a session: a new owner and the next generation (the fencing token).
UPDATE sessions
SET lease_owner = ?, generation = generation + 1, lease_expires_at = ?
WHERE id = ?
RETURNING generation;

-- name: renew_leases
-- Extend every lease this process holds, in one statement; returns what is still held.
UPDATE sessions
SET lease_expires_at = ?
WHERE lease_owner >= ? AND lease_owner < ?
RETURNING id, lease_owner, generation, control;

-- name: release_lease
-- Give a session back, only if this exact lease still holds it.
UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL
WHERE id = ? AND lease_owner = ? AND generation = ?;

-- name: fence
-- The fence: bumps the message counter only while the writer's lease holds.
UPDATE sessions
SET message_count = message_count + ?
WHERE id = ? AND lease_owner = ? AND generation = ? AND lease_expires_at > ?
RETURNING message_count;

-- name: set_control
-- Ask whoever drives the session to pause or cancel (NULL clears the request).
UPDATE sessions SET control = ? WHERE id = ?;

-- name: insert_run
-- A new run, fenced by the caller's transaction.
INSERT INTO runs (id, session_id, request_id, request_message, status, phase, history_length,
                  generation, created_at, updated_at)
VALUES (?, ?, ?, ?, 'running', 'prepare_model_call', ?, ?, ?, ?);

-- name: update_run
-- Move a run to its state after a checkpoint.
UPDATE runs
SET status = ?, phase = ?, iteration = ?, usage = ?, output = ?, stop_reason = ?, error = ?,
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
       output, stop_reason, error, usage_incomplete, history_length
FROM runs WHERE id = ?;

-- name: find_run
-- The run a request id created in a session.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage,
       output, stop_reason, error, usage_incomplete, history_length
FROM runs WHERE session_id = ? AND request_id = ?;

-- name: latest_run
-- The session's newest run.
SELECT id, session_id, request_id, request_message, status, phase, event_count, iteration, usage,
       output, stop_reason, error, usage_incomplete, history_length
FROM runs WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1;

-- name: recent_sessions
-- The newest sessions with their latest run, for `harnessx status`.
SELECT s.id, s.agent_ref, s.created_at, r.id, r.status, r.updated_at
FROM sessions s
LEFT JOIN runs r ON r.id = (
    SELECT id FROM runs WHERE session_id = s.id ORDER BY created_at DESC, rowid DESC LIMIT 1
)
ORDER BY s.created_at DESC LIMIT ?;

-- name: session_messages
-- A session's whole conversation, in order (read only when a run is loaded).
SELECT body FROM messages WHERE session_id = ? ORDER BY seq;

-- name: run_tool_calls
-- Every tool call of a run.
SELECT execution_key, iteration, idx, call, policy, status, attempt, approved, raw_result, result,
       generation
FROM tool_calls WHERE run_id = ? ORDER BY iteration, idx;

-- name: read_events
-- A page of a run's events behind a cursor.
SELECT seq, event_id, type, step_id, attempt_id, data, run_id
FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?;
