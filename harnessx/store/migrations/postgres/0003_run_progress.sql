-- harnessx schema, version 3 (PostgreSQL): the running run's progress on its session row.
--
-- Most checkpoints of a running run change nothing of the run but its phase and its event
-- count: a tool call is prepared, dispatched, returns; streamed text is flushed. The
-- checkpoint's fence rewrites the session row anyway, so those go there (current_*), and
-- the run row is written only when something else changes (status, usage, output,
-- iteration...) or the run is created: a second row in the same statement costs the server
-- about 30 us, whether or not its UPDATE matches.
--
-- current_run names the run the progress belongs to. Only a checkpoint that also writes
-- that run's row (and so checks the run is the session's) sets it, and such a checkpoint
-- copies the progress to the run row. Every run that stops running is written whole, so
-- only the session's one running run can be ahead of its row. A progress-only checkpoint
-- for a run the session row does not hold is refused (HX003) and sent again whole: runs in
-- flight during the upgrade move over at their first checkpoint after it.
-- Readers go through runs_now, which overlays the progress; a query that reads runs
-- directly may see a running run's phase and event count behind.

ALTER TABLE sessions
    ADD COLUMN current_run         text,
    ADD COLUMN current_phase       text,
    ADD COLUMN current_event_count bigint,
    ADD COLUMN current_updated_at  timestamptz;

-- Every run as readers must see it: its row, with its session's progress where that is newer.
CREATE VIEW runs_now AS
SELECT r.id, r.session_id, r.request_id, r.request_message, r.status,
       coalesce(CASE WHEN s.current_run = r.id THEN s.current_phase END, r.phase) AS phase,
       greatest(r.event_count, CASE WHEN s.current_run = r.id THEN s.current_event_count END)
           AS event_count,
       r.iteration, r.usage, r.output, r.stop_reason, r.error, r.usage_incomplete,
       r.history_length, r.generation, r.created_at, r.created_seq,
       greatest(r.updated_at, CASE WHEN s.current_run = r.id THEN s.current_updated_at END)
           AS updated_at,
       r.queued_at, r.priority, r.claimed_by
FROM runs r JOIN sessions s ON s.id = r.session_id;

-- When a session's lease changes hands (a claim, a release, a lease the supervisor drops),
-- its run's progress is copied to the run row and the session row lets go of it. Whoever
-- drives or reads the run next then finds it on the row, even a harnessx from before this
-- version that is still running during a rolling upgrade and reads runs directly; and such
-- a process, which writes the run row but not the progress, can leave no stale progress
-- behind for the new version to overlay. The next progress-only checkpoint is refused once
-- (HX003) and sent whole, which takes the progress over again.
-- Two triggers: the session row lets go before it is written; the run row is written after
-- the statement, because statements that hand a lease over also update the run (queueing
-- it, taking it off the queue), and a row a BEFORE trigger changed cannot be updated again
-- by the statement that fired it.
CREATE FUNCTION harnessx_release_progress() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.current_run := NULL;
    NEW.current_phase := NULL;
    NEW.current_event_count := NULL;
    NEW.current_updated_at := NULL;
    RETURN NEW;
END
$$;

CREATE FUNCTION harnessx_settle_progress() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE runs r
    SET phase = coalesce(OLD.current_phase, r.phase),
        event_count = greatest(r.event_count, OLD.current_event_count),
        updated_at = greatest(r.updated_at, OLD.current_updated_at)
    WHERE r.id = OLD.current_run AND r.session_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_release_progress
    BEFORE UPDATE OF lease_owner, generation ON sessions
    FOR EACH ROW
    WHEN (OLD.current_run IS NOT NULL
          AND (OLD.lease_owner IS DISTINCT FROM NEW.lease_owner
               OR OLD.generation IS DISTINCT FROM NEW.generation))
    EXECUTE FUNCTION harnessx_release_progress();

CREATE TRIGGER sessions_settle_progress
    AFTER UPDATE OF lease_owner, generation ON sessions
    FOR EACH ROW
    WHEN (OLD.current_run IS NOT NULL
          AND (OLD.lease_owner IS DISTINCT FROM NEW.lease_owner
               OR OLD.generation IS DISTINCT FROM NEW.generation))
    EXECUTE FUNCTION harnessx_settle_progress();
