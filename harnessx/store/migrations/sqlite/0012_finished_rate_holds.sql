-- harnessx schema, version 12 (SQLite): a run that finishes gives up the rate reservation
-- kept for it (see docs/scheduling.md, *Waiting*).
--
-- A hold (0011) is taken by the run's next reservation of its bucket, but a run cancelled
-- while it waited in the queue for its start makes none, and its row stayed until the run
-- itself was deleted. When a run's status becomes completed, cancelled or failed, whatever
-- ended it (a worker's checkpoint, a cancel of the queued run, an operator), its holds go;
-- its budget stays spent, as for any call that was reserved. Holds of runs already finished
-- are removed here.

CREATE TRIGGER runs_finished_rate_holds
AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN NEW.status IN ('completed', 'cancelled', 'failed') AND OLD.status IS NOT NEW.status
BEGIN
    DELETE FROM rate_holds WHERE run_id = NEW.id;
END;

DELETE FROM rate_holds
WHERE run_id IN (SELECT id FROM runs WHERE status IN ('completed', 'cancelled', 'failed'));
