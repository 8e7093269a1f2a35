-- harnessx schema, version 2 (PostgreSQL): whether some process follows a session's runs.
-- A checkpoint sends its 'events' NOTIFY only while watched_until is in the future. Every
-- transaction that notifies takes one lock for the whole cluster and holds it until its
-- commit is flushed, so notifying commits queue behind each other; a commit nobody follows
-- from another process must not pay that, nor make every other commit wait. A follower
-- pushes watched_until forward while it waits (see the watch_run query); the checkpoint
-- reads it from the session row its fence updates anyway, at no extra cost.

ALTER TABLE sessions ADD COLUMN watched_until timestamptz;
