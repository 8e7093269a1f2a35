-- harnessx schema, version 11 (PostgreSQL): what keeps every hot statement's cost independent of
-- how much history is kept, and what retention (harnessx prune) walks.
--
-- sessions_created: `harnessx status` lists the newest sessions (recent_sessions).
-- prune_check_at: when retention should next look at a session, as a time of last activity:
-- never later than the session's real last activity (its creation time at first), and set by
-- each prune that finds the session still in use to that activity (or to the time it looked,
-- while a run is unfinished). Nothing on a run's path writes it, so a checkpoint's update of
-- the session row changes no indexed column and can stay a HOT update. Sessions from before
-- this version read -infinity (a constant default: adding the column rewrites nothing), so the
-- first prune looks at them first; new sessions get the time they were created.
-- runs_queued_agent: queue statistics per agent read this index alone (no join to sessions).
-- workers_running, workers_stopped: the supervisor's liveness pass reads the workers not known
-- to have stopped, and forgets those stopped long ago, without reading every worker.
-- audit_session: erasing or pruning a session removes its operators' actions too.
-- Each CREATE INDEX holds off writes to its table while it builds (docs/benchmarks.md measures
-- how long on a loaded database).

CREATE INDEX sessions_created ON sessions (created_at);

ALTER TABLE sessions ADD COLUMN prune_check_at timestamptz NOT NULL DEFAULT '-infinity';

ALTER TABLE sessions ALTER COLUMN prune_check_at SET DEFAULT now();

CREATE INDEX sessions_prune_check ON sessions (prune_check_at, id);

CREATE INDEX runs_queued_agent ON runs (agent_ref, queued_at) WHERE queued_at IS NOT NULL;

CREATE INDEX workers_running ON workers (started_at) WHERE stopped_at IS NULL;

CREATE INDEX workers_stopped ON workers (stopped_at) WHERE stopped_at IS NOT NULL;

CREATE INDEX audit_session ON audit (session_id);
