-- harnessx schema, version 9 (SQLite): what keeps every hot statement's cost independent of
-- how much history is kept, and what retention (harnessx prune) walks.
--
-- sessions_created: `harnessx status` lists the newest sessions (recent_sessions).
-- prune_check_at: when retention should next look at a session, as a time of last activity:
-- never later than the session's real last activity (its creation time at first), and set by
-- each prune that finds the session still in use to that activity (or to the time it looked,
-- while a run is unfinished). Nothing on a run's path writes it, so no checkpoint pays for it.
-- Sessions from before this version read 0: the first prune looks at them first.
-- runs_queued_agent: queue statistics per agent read this index alone (no sessions).
-- workers_running, workers_stopped: the supervisor's liveness pass reads the workers not known
-- to have stopped, and forgets those stopped long ago, without reading every worker.
-- audit_session: erasing or pruning a session removes its operators' actions too.
-- sessions_leased: the supervisor's orphan scan (leased_sessions) reads the leased sessions
-- alone; SQLite's planner reads every session rather than range-scan sessions_lease_owner for
-- lease_owner IS NOT NULL, and the partial index holds only the few sessions in use.

CREATE INDEX sessions_created ON sessions (created_at);

ALTER TABLE sessions ADD COLUMN prune_check_at REAL NOT NULL DEFAULT 0;

CREATE INDEX sessions_prune_check ON sessions (prune_check_at, id);

CREATE INDEX runs_queued_agent ON runs (agent_ref, queued_at) WHERE queued_at IS NOT NULL;

CREATE INDEX workers_running ON workers (started_at) WHERE stopped_at IS NULL;

CREATE INDEX workers_stopped ON workers (stopped_at) WHERE stopped_at IS NOT NULL;

CREATE INDEX audit_session ON audit (session_id);

CREATE INDEX sessions_leased ON sessions (lease_owner) WHERE lease_owner IS NOT NULL;
