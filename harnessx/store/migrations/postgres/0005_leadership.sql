-- harnessx schema, version 5 (PostgreSQL): the supervisor's leadership as a fencing token.
--
-- Leadership is an advisory lock on the holder's liveness connection, and it goes with that
-- connection: after a server restart the old leader may still act for a moment while a
-- standby already holds the lock. So the statement that takes the lock also takes the next
-- epoch of the role here, in the same transaction, and every write the leader makes as
-- leader (recovering an orphan, marking a worker dead) applies only while this row still
-- holds its epoch, reading it FOR SHARE: a takeover's UPDATE waits for such a write to
-- commit, and a write that comes after the takeover finds a newer epoch and changes nothing.
-- A deposed leader is refused by the database, not by timing. One row per role: the latest
-- term (since: when it began, by the database clock).

CREATE TABLE leadership (
    role   text PRIMARY KEY,
    epoch  bigint NOT NULL,
    holder text NOT NULL,
    since  timestamptz NOT NULL
);
