-- harnessx schema, version 10 (PostgreSQL): a lease changing hands settles the session row's
-- progress on the run row only where it is newer than the row.
--
-- An execution's last checkpoint now gives the lease up in the same statement that writes
-- the finished run's row (one round trip instead of two). The trigger that settles progress
-- when the lease changes hands runs after that statement and sees the session row as it was
-- before it (OLD): the progress of the checkpoint before. Copying that phase over the row the
-- statement has just written would put an older phase back. The run row is newer when its
-- updated_at is at least the progress's: a checkpoint that writes both sets both to the
-- same now(), and one that writes progress alone leaves the row's older.

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
    WHERE r.id = OLD.current_run AND r.session_id = OLD.id;
    RETURN NULL;
END
$$;
