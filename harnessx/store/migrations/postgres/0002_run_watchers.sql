-- harnessx schema, version 2 (PostgreSQL): which processes follow which runs.
-- A checkpoint sends its 'events' NOTIFY only while some process watches the run. Every
-- transaction that notifies takes one lock for the whole cluster and holds it until its
-- commit is flushed, so notifying commits queue behind each other; a commit nobody follows
-- from another process must not pay that, nor make every other commit wait.
-- A row is a hint that expires. The table is UNLOGGED: a crash loses the rows, which only
-- means that followers poll until they announce themselves again (at least every 30 s).

CREATE UNLOGGED TABLE run_watchers (
    run_id     text NOT NULL,
    process_id text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, process_id)
);

CREATE INDEX run_watchers_expires ON run_watchers (expires_at);
