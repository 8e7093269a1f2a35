-- harnessx schema, version 23 (PostgreSQL): a pause/cancel request stays on its session until
-- the run has acted on it (docs/architecture.md, *The pause/cancel request*).
--
-- The lease renewal used to take a request, clearing it in the statement that returned it:
-- a reply lost after the commit (a connection dropped) lost the request. Now every renewal
-- returns the request and the commit that stops the run clears it; control_sent only says
-- that a renewal has returned it since it was written, so that a holder that looks for new
-- requests (pending_controls, SQLite's wake-up) does not find it again and again.

ALTER TABLE sessions ADD COLUMN control_sent boolean NOT NULL DEFAULT false;
