-- harnessx schema, version 13 (SQLite): a pause/cancel request stays on its session until the
-- run has acted on it (docs/architecture.md, *The pause/cancel request*).
--
-- The lease renewal used to take a request, clearing it in the transaction that returned it:
-- a reply that never reached the caller lost the request. Now every renewal returns the
-- request and the commit that stops the run clears it; control_sent only says that a renewal
-- has returned it since it was written, so that the holder's look for new requests every
-- 0.25 s (pending_controls) does not find it again and again.

ALTER TABLE sessions ADD COLUMN control_sent INTEGER NOT NULL DEFAULT 0;
