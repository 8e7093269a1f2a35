-- harnessx schema, version 4 (SQLite): the supervisor's leadership as a fencing token.
-- The holder of a role's lock file takes the next epoch here, in a write transaction of its
-- own, right after taking the lock. Every write the leader makes as leader (recovering an
-- orphan, marking a worker dead) checks in its own transaction that the row still holds its
-- epoch, so a leader that was deposed (its lock file removed and taken by another process)
-- can no longer write, whatever it believes. One row per role: the latest term.

CREATE TABLE leadership (
    role   TEXT PRIMARY KEY,
    epoch  INTEGER NOT NULL,
    holder TEXT NOT NULL,
    since  REAL NOT NULL
);
