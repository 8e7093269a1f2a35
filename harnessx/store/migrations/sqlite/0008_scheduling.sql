-- harnessx schema, version 8 (SQLite): scheduling the pool (see docs/scheduling.md).
--
-- runs: a queued run's concurrency key and tenant (the fair-share group: the tenant given,
-- else the concurrency key, else '' for neither), and what its last claim took: when, and
-- under which lease generation (a run is driving while its session still holds that
-- generation's unexpired lease). priority (0002) and not_before (0007) are written now too.
-- The queue is read per tenant in rank order: the time a run became claimable less a minute
-- per point of priority (a run's effective priority rises by one for every minute it waits).
-- concurrency_limits: at most max_running runs of a key (or of each key a trailing-* pattern
-- matches; 'agent:NAME@VERSION' for an agent's runs) drive at once. agent_defaults: what the
-- workers' registries say of an agent (default priority, max_concurrent).
-- run_claims: every claim, the record of who drove what.
-- fair_shares: one row per tenant, its weight and pass (the stride scheduler's virtual time);
-- queued counts its queued runs, kept by triggers on runs, so that a claim finds the tenants
-- with work without reading the queue. The row '' is the runs with neither tenant nor key.
-- rate_limits, rate_buckets: fleet-wide model rate limits, as the theoretical arrival times
-- of a GCRA per bucket (one per provider/model), in epoch seconds.

ALTER TABLE runs ADD COLUMN concurrency_key TEXT;

ALTER TABLE runs ADD COLUMN tenant TEXT NOT NULL DEFAULT '';

ALTER TABLE runs ADD COLUMN claimed_at REAL;

ALTER TABLE runs ADD COLUMN claim_generation INTEGER;

CREATE INDEX runs_tenant_queue
    ON runs (tenant, max(queued_at, coalesce(not_before, queued_at)) - priority * 60.0)
    WHERE queued_at IS NOT NULL;

-- Runs a worker took off the queue and that have not stopped: counted per key and per agent.
CREATE INDEX runs_driving_key ON runs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status = 'running' AND queued_at IS NULL;

CREATE INDEX runs_driving_agent ON runs (agent_ref)
    WHERE claim_generation IS NOT NULL AND status = 'running' AND queued_at IS NULL;

-- Every claim of a run: which lease generation and owner took it, and when (the record of
-- who drove what; a drive lasts from its claim until that lease is gone).
CREATE TABLE run_claims (
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    owner      TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    PRIMARY KEY (run_id, generation)
) WITHOUT ROWID;

CREATE TABLE concurrency_limits (
    pattern     TEXT PRIMARY KEY,
    max_running INTEGER NOT NULL CHECK (max_running >= 0),
    updated_at  REAL NOT NULL
);

CREATE TABLE agent_defaults (
    agent_ref      TEXT PRIMARY KEY,
    priority       INTEGER,
    max_concurrent INTEGER CHECK (max_concurrent >= 0),
    updated_at     REAL NOT NULL
);

CREATE TABLE fair_shares (
    tenant TEXT PRIMARY KEY,
    weight REAL NOT NULL DEFAULT 1 CHECK (weight > 0),
    pass   REAL NOT NULL DEFAULT 0,
    queued INTEGER NOT NULL DEFAULT 0
);

INSERT INTO fair_shares (tenant) VALUES ('');

CREATE INDEX fair_shares_waiting ON fair_shares (pass + 1.0 / weight) WHERE queued > 0;

CREATE TABLE rate_limits (
    pattern             TEXT PRIMARY KEY,
    requests_per_minute REAL CHECK (requests_per_minute > 0),
    tokens_per_minute   REAL CHECK (tokens_per_minute > 0),
    burst_seconds       REAL NOT NULL DEFAULT 0 CHECK (burst_seconds >= 0),
    updated_at          REAL NOT NULL
);

CREATE TABLE rate_buckets (
    name        TEXT PRIMARY KEY,
    requests_at REAL NOT NULL DEFAULT 0,
    tokens_at   REAL NOT NULL DEFAULT 0,
    waits       INTEGER NOT NULL DEFAULT 0,
    waited      REAL NOT NULL DEFAULT 0
);

-- A tenant's queued count follows its runs in and out of the queue. A tenant that starts
-- waiting begins at the lowest pass of those already waiting (else the untenanted group's),
-- so time spent idle is not credit to spend later.
CREATE TRIGGER runs_queued_insert AFTER INSERT ON runs
WHEN NEW.queued_at IS NOT NULL AND NEW.tenant <> ''
BEGIN
    INSERT INTO fair_shares (tenant, pass, queued)
    VALUES (NEW.tenant,
            coalesce((SELECT min(pass) FROM fair_shares WHERE queued > 0 AND tenant NOT IN ('', NEW.tenant)),
                     (SELECT pass FROM fair_shares WHERE tenant = ''), 0),
            1)
    ON CONFLICT (tenant) DO UPDATE
    SET pass = CASE WHEN queued = 0 THEN max(pass, excluded.pass) ELSE pass END, queued = queued + 1;
END;

CREATE TRIGGER runs_queued_update AFTER UPDATE OF queued_at ON runs
WHEN OLD.queued_at IS NULL AND NEW.queued_at IS NOT NULL AND NEW.tenant <> ''
BEGIN
    INSERT INTO fair_shares (tenant, pass, queued)
    VALUES (NEW.tenant,
            coalesce((SELECT min(pass) FROM fair_shares WHERE queued > 0 AND tenant NOT IN ('', NEW.tenant)),
                     (SELECT pass FROM fair_shares WHERE tenant = ''), 0),
            1)
    ON CONFLICT (tenant) DO UPDATE
    SET pass = CASE WHEN queued = 0 THEN max(pass, excluded.pass) ELSE pass END, queued = queued + 1;
END;

CREATE TRIGGER runs_dequeued_update AFTER UPDATE OF queued_at ON runs
WHEN OLD.queued_at IS NOT NULL AND NEW.queued_at IS NULL AND NEW.tenant <> ''
BEGIN
    UPDATE fair_shares SET queued = max(queued - 1, 0) WHERE tenant = NEW.tenant;
END;

CREATE TRIGGER runs_queued_delete AFTER DELETE ON runs
WHEN OLD.queued_at IS NOT NULL AND OLD.tenant <> ''
BEGIN
    UPDATE fair_shares SET queued = max(queued - 1, 0) WHERE tenant = OLD.tenant;
END;
