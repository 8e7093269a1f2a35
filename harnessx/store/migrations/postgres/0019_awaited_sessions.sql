-- harnessx schema, version 19 (PostgreSQL): whether some process waits for a session's result.
-- A process that only waits for a run's result (RunHandle.result() of a run driven
-- elsewhere, a pool run) needs to hear one commit: the checkpoint that stops the execution.
-- While awaited_until is in the future, that checkpoint sends the 'events' NOTIFY even when
-- nobody follows the session's events (watched_until, migration 0002), and no other
-- checkpoint does: one notifying commit per execution instead of one per checkpoint, and the
-- waiter reads the run once it has stopped rather than after every commit. The checkpoint
-- reads it from the session row its fence updates anyway (see the await_run query).

ALTER TABLE sessions ADD COLUMN awaited_until timestamptz;
