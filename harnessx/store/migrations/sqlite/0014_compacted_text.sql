-- harnessx schema, version 14 (SQLite): finished runs whose streamed text is to be compacted.
--
-- A run that streams stores an event per piece of text its provider sent; once it has finished,
-- compacting stores each stretch of pieces as one row (harnessx/store/_compaction.py). When a
-- run's status becomes completed, cancelled or failed, whatever ended it, this trigger notes the
-- run in compactable_runs (with the time, epoch seconds); the supervisor's leader (or harnessx
-- compact) takes the runs that finished long enough ago in the order they finished (the index)
-- and compacts them. A run that is resumed and finishes again is noted again; a run removed
-- meanwhile is forgotten. Runs that finished before this version are not noted.

CREATE TABLE compactable_runs (
    run_id      TEXT PRIMARY KEY,
    finished_at REAL NOT NULL
) WITHOUT ROWID;

CREATE INDEX compactable_runs_finished ON compactable_runs (finished_at);

CREATE TRIGGER runs_finished_compactable
AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN NEW.status IN ('completed', 'cancelled', 'failed') AND OLD.status IS NOT NEW.status
BEGIN
    INSERT INTO compactable_runs (run_id, finished_at)
    VALUES (NEW.id, (julianday('now') - 2440587.5) * 86400.0)
    ON CONFLICT (run_id) DO UPDATE SET finished_at = excluded.finished_at;
END;
