-- harnessx schema, version 21 (PostgreSQL): a lease changing hands writes the run row only
-- when the session row's progress is newer than it.
--
-- An execution's last checkpoint writes the finished run's row and gives the lease up in one
-- statement; the trigger that settles the progress then (0003, 0010) found the row newer and
-- still updated it to the same values: a second row version of the run in every pool run's
-- last checkpoint, the runs triggers fired again, a dead tuple for vacuum, about a third of
-- that statement's time. The update now matches the row only where it changes something (the
-- progress's phase is newer, or its event count higher), which is where it did before.

CREATE OR REPLACE FUNCTION harnessx_settle_progress() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE runs r
    SET phase = CASE WHEN OLD.current_updated_at > r.updated_at
                     THEN coalesce(OLD.current_phase, r.phase) ELSE r.phase END,
        event_count = greatest(r.event_count, OLD.current_event_count),
        updated_at = greatest(r.updated_at, OLD.current_updated_at)
    WHERE r.id = OLD.current_run AND r.session_id = OLD.id
      AND (OLD.current_updated_at > r.updated_at OR OLD.current_event_count > r.event_count);
    RETURN NULL;
END
$$;
