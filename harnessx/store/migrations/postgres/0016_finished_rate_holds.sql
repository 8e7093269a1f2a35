-- harnessx schema, version 16 (PostgreSQL): a run that finishes gives up the rate reservation
-- kept for it (see docs/scheduling.md, *Waiting*).
--
-- A hold (0014) is taken by the run's next reservation of its bucket, but a run cancelled
-- while it waited in the queue for its start makes none, and its row stayed until the run
-- itself was deleted. When a run's status becomes completed, cancelled or failed, whatever
-- ended it (a worker's checkpoint, a cancel of the queued run, an operator), its holds go;
-- its budget stays spent, as for any call that was reserved. Holds of runs already finished
-- are removed here.

CREATE FUNCTION harnessx_drop_rate_holds() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM rate_holds h WHERE h.run_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_finished_rate_holds
    AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'cancelled', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION harnessx_drop_rate_holds();

DELETE FROM rate_holds h USING runs r
WHERE r.id = h.run_id AND r.status IN ('completed', 'cancelled', 'failed');
