-- harnessx schema, version 8 (PostgreSQL): runs a worker claimed but could not start.
-- start_attempts counts the consecutive claims of a run that ended before it started (its
-- agent could not be built); not_before keeps such a run in the queue, unclaimed, until its
-- back-off has passed. A worker that starts the run resets both; a run that ends clears them.
-- Both columns are additive: a process of the previous release ignores them (it may claim a
-- held-back run early, which is harmless).

ALTER TABLE runs
    ADD COLUMN start_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN not_before     timestamptz;

-- runs_now (see 0003_run_progress, 0007_console) shows the new columns too, after the existing ones.
CREATE OR REPLACE VIEW runs_now AS
SELECT r.id, r.session_id, r.request_id, r.request_message, r.status,
       coalesce(CASE WHEN s.current_run = r.id THEN s.current_phase END, r.phase) AS phase,
       greatest(r.event_count, CASE WHEN s.current_run = r.id THEN s.current_event_count END)
           AS event_count,
       r.iteration, r.usage, r.output, r.stop_reason, r.error, r.usage_incomplete,
       r.history_length, r.generation, r.created_at, r.created_seq,
       greatest(r.updated_at, CASE WHEN s.current_run = r.id THEN s.current_updated_at END)
           AS updated_at,
       r.queued_at, r.priority, r.claimed_by, r.agent_ref, r.start_attempts, r.not_before
FROM runs r JOIN sessions s ON s.id = r.session_id;
