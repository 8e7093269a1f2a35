-- harnessx schema, version 29 (PostgreSQL): finished runs whose streamed text is to be compacted.
--
-- A run that streams stores an event per piece of text its provider sent; once it has finished,
-- compacting stores each stretch of pieces as one row (harnessx/store/_compaction.py). When a
-- run's status becomes completed, cancelled or failed, whatever ended it, this trigger notes the
-- run in compactable_runs; the supervisor's leader (or harnessx compact) takes the runs that
-- finished long enough ago in the order they finished (the index) and compacts them. A run
-- that is resumed and finishes again is noted again; a run removed meanwhile is forgotten. Runs
-- that finished before this version are not noted (retention removes them as they are).

CREATE TABLE compactable_runs (
    run_id      text PRIMARY KEY,
    finished_at timestamptz NOT NULL
);

CREATE INDEX compactable_runs_finished ON compactable_runs (finished_at);

CREATE FUNCTION harnessx_note_compactable() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO compactable_runs (run_id, finished_at) VALUES (NEW.id, now())
    ON CONFLICT (run_id) DO UPDATE SET finished_at = EXCLUDED.finished_at;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_finished_compactable
    AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'cancelled', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION harnessx_note_compactable();
