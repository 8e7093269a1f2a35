-- harnessx schema, version 7 (PostgreSQL): what the operator console reads and records.
--
-- Runs carry their session's agent reference (it never changes), so that listing the runs of
-- one agent newest first is an index range, not a walk through every run. A trigger fills it
-- in from the session, whichever statement (or older harnessx during a rolling upgrade)
-- inserts the run; runs_now shows it.
-- The listing's indexes: newest first overall, by status, by agent; runs by request id.
-- The supervisor's leader records its scans on its leadership row (fenced by its epoch).
-- audit: every decision and control an operator made (console or CLI): who, when, what, and
-- how it ended (NULL outcome: the acting process stopped before it learned).
-- console_logins: the console's signed-in browser sessions, by a hash of their id, so that
-- logging out ends a session on every replica.

ALTER TABLE runs ADD COLUMN agent_ref text;

UPDATE runs r SET agent_ref = s.agent_ref FROM sessions s WHERE s.id = r.session_id AND s.agent_ref IS NOT NULL;

CREATE FUNCTION harnessx_run_agent_ref() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NEW.agent_ref IS NULL THEN
        SELECT s.agent_ref INTO NEW.agent_ref FROM sessions s WHERE s.id = NEW.session_id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_agent_ref
    BEFORE INSERT ON runs
    FOR EACH ROW
    EXECUTE FUNCTION harnessx_run_agent_ref();

CREATE OR REPLACE VIEW runs_now AS
SELECT r.id, r.session_id, r.request_id, r.request_message, r.status,
       coalesce(CASE WHEN s.current_run = r.id THEN s.current_phase END, r.phase) AS phase,
       greatest(r.event_count, CASE WHEN s.current_run = r.id THEN s.current_event_count END)
           AS event_count,
       r.iteration, r.usage, r.output, r.stop_reason, r.error, r.usage_incomplete,
       r.history_length, r.generation, r.created_at, r.created_seq,
       greatest(r.updated_at, CASE WHEN s.current_run = r.id THEN s.current_updated_at END)
           AS updated_at,
       r.queued_at, r.priority, r.claimed_by, r.agent_ref
FROM runs r JOIN sessions s ON s.id = r.session_id;

CREATE INDEX runs_created ON runs (created_at, id);

CREATE INDEX runs_status_created ON runs (status, created_at, id);

CREATE INDEX runs_agent_created ON runs (agent_ref, created_at, id);

CREATE INDEX runs_request ON runs (request_id) WHERE request_id IS NOT NULL;

ALTER TABLE leadership
    ADD COLUMN scanned_at timestamptz,
    ADD COLUMN scans      bigint NOT NULL DEFAULT 0,
    ADD COLUMN recovered  bigint NOT NULL DEFAULT 0;

CREATE TABLE audit (
    id            text PRIMARY KEY,
    at            timestamptz NOT NULL,
    actor         text NOT NULL,
    via           text NOT NULL,
    action        text NOT NULL,
    session_id    text NOT NULL,
    run_id        text,
    execution_key text,
    detail        json NOT NULL,
    outcome       text,
    finished_at   timestamptz
);

CREATE INDEX audit_run ON audit (run_id, at);

CREATE INDEX audit_at ON audit (at);

CREATE TABLE console_logins (
    id_hash    text PRIMARY KEY,
    name       text NOT NULL,
    role       text NOT NULL,
    token_id   text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    ended_at   timestamptz
);
