-- harnessx schema, version 9 (PostgreSQL): scheduling the pool (see docs/scheduling.md).
--
-- runs: a queued run's concurrency key and tenant (the fair-share group: the tenant given,
-- else the concurrency key, else '' for neither), and what its last claim took: when, and
-- under which lease generation (a run is driving while its session still holds that
-- generation's unexpired lease). priority (0001) and not_before (0008) are written now too.
-- The queue is read per tenant in rank order: harnessx_queue_rank, the time a run became
-- claimable less a minute per point of priority (a run's effective priority rises by one
-- for every minute it waits). Its body is immutable in fact (an epoch has no time zone),
-- which the catalogue's STABLE on extract() cannot know: declared so, it can be indexed.
-- concurrency_limits: at most max_running runs of a key (or of each key a trailing-* pattern
-- matches; 'agent:NAME@VERSION' for an agent's runs) drive at once. agent_defaults: what the
-- workers' registries say of an agent (default priority, max_concurrent).
-- run_claims: every claim, the record of who drove what.
-- fair_shares: one row per tenant, its weight and pass (the stride scheduler's virtual time);
-- queued counts its queued runs, kept by triggers on runs, so that a claim finds the tenants
-- with work without reading the queue. The row '' is the runs with neither tenant nor key.
-- rate_limits, rate_buckets: fleet-wide model rate limits, as the theoretical arrival times
-- of a GCRA per bucket (one per provider/model), in epoch seconds of the database clock.

ALTER TABLE runs
    ADD COLUMN concurrency_key  text,
    ADD COLUMN tenant           text NOT NULL DEFAULT '',
    ADD COLUMN claimed_at       timestamptz,
    ADD COLUMN claim_generation bigint;

CREATE FUNCTION harnessx_queue_rank(p_queued timestamptz, p_not_before timestamptz, p_priority integer)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT extract(epoch FROM greatest(p_queued, p_not_before))::float8 - p_priority * 60.0
$$;

CREATE INDEX runs_tenant_queue ON runs (tenant, harnessx_queue_rank(queued_at, not_before, priority))
    WHERE queued_at IS NOT NULL;

-- Runs a worker took off the queue and that have not stopped: counted per key and per agent.
CREATE INDEX runs_driving_key ON runs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status = 'running' AND queued_at IS NULL;

CREATE INDEX runs_driving_agent ON runs (agent_ref)
    WHERE claim_generation IS NOT NULL AND status = 'running' AND queued_at IS NULL;

-- Every claim of a run: which lease generation and owner took it, and when (the record of
-- who drove what; a drive lasts from its claim until that lease is gone).
CREATE TABLE run_claims (
    run_id     text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    generation bigint NOT NULL,
    owner      text NOT NULL,
    claimed_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, generation)
);

CREATE TABLE concurrency_limits (
    pattern     text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent_defaults (
    agent_ref      text PRIMARY KEY,
    priority       integer,
    max_concurrent integer CHECK (max_concurrent >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fair_shares (
    tenant text PRIMARY KEY,
    weight double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
    pass   double precision NOT NULL DEFAULT 0,
    queued bigint NOT NULL DEFAULT 0
);

INSERT INTO fair_shares (tenant) VALUES ('');

CREATE INDEX fair_shares_waiting ON fair_shares ((pass + 1 / weight)) WHERE queued > 0;

CREATE TABLE rate_limits (
    pattern             text PRIMARY KEY,
    requests_per_minute double precision CHECK (requests_per_minute > 0),
    tokens_per_minute   double precision CHECK (tokens_per_minute > 0),
    burst_seconds       double precision NOT NULL DEFAULT 0 CHECK (burst_seconds >= 0),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rate_buckets (
    name        text PRIMARY KEY,
    requests_at double precision NOT NULL DEFAULT 0,
    tokens_at   double precision NOT NULL DEFAULT 0,
    waits       bigint NOT NULL DEFAULT 0,
    waited      double precision NOT NULL DEFAULT 0
);

-- A tenant's queued count follows its runs in and out of the queue. A tenant that starts
-- waiting begins at the lowest pass of those already waiting (else the untenanted group's),
-- so time spent idle is not credit to spend later.
CREATE FUNCTION harnessx_count_queued() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_tenant text := CASE WHEN TG_OP = 'DELETE' THEN OLD.tenant ELSE NEW.tenant END;
    v_queued boolean := TG_OP <> 'DELETE' AND NEW.queued_at IS NOT NULL;
    v_floor  double precision;
BEGIN
    IF v_queued THEN
        v_floor := coalesce(
            (SELECT min(f.pass) FROM fair_shares f WHERE f.queued > 0 AND f.tenant NOT IN ('', v_tenant)),
            (SELECT f.pass FROM fair_shares f WHERE f.tenant = ''),
            0);
        INSERT INTO fair_shares AS f (tenant, pass, queued) VALUES (v_tenant, v_floor, 1)
        ON CONFLICT (tenant) DO UPDATE
        SET pass = CASE WHEN f.queued = 0 THEN greatest(f.pass, v_floor) ELSE f.pass END,
            queued = f.queued + 1;
    ELSE
        UPDATE fair_shares f SET queued = greatest(f.queued - 1, 0) WHERE f.tenant = v_tenant;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_queued_insert
    AFTER INSERT ON runs
    FOR EACH ROW
    WHEN (NEW.queued_at IS NOT NULL AND NEW.tenant <> '')
    EXECUTE FUNCTION harnessx_count_queued();

CREATE TRIGGER runs_queued_update
    AFTER UPDATE OF queued_at ON runs
    FOR EACH ROW
    WHEN ((OLD.queued_at IS NULL) <> (NEW.queued_at IS NULL) AND NEW.tenant <> '')
    EXECUTE FUNCTION harnessx_count_queued();

CREATE TRIGGER runs_queued_delete
    AFTER DELETE ON runs
    FOR EACH ROW
    WHEN (OLD.queued_at IS NOT NULL AND OLD.tenant <> '')
    EXECUTE FUNCTION harnessx_count_queued();

-- runs_now (see 0003_run_progress, 0007_console, 0008_start_attempts) shows the new columns
-- too, after the existing ones.
CREATE OR REPLACE VIEW runs_now AS
SELECT r.id, r.session_id, r.request_id, r.request_message, r.status,
       coalesce(CASE WHEN s.current_run = r.id THEN s.current_phase END, r.phase) AS phase,
       greatest(r.event_count, CASE WHEN s.current_run = r.id THEN s.current_event_count END)
           AS event_count,
       r.iteration, r.usage, r.output, r.stop_reason, r.error, r.usage_incomplete,
       r.history_length, r.generation, r.created_at, r.created_seq,
       greatest(r.updated_at, CASE WHEN s.current_run = r.id THEN s.current_updated_at END)
           AS updated_at,
       r.queued_at, r.priority, r.claimed_by, r.agent_ref, r.start_attempts, r.not_before,
       r.concurrency_key, r.tenant, r.claimed_at, r.claim_generation
FROM runs r JOIN sessions s ON s.id = r.session_id;

-- The limit on key p_key: an operator's, the exact pattern first, then the longest
-- trailing-* pattern that matches; for 'agent:NAME@VERSION', else the registry's. NULL: none.
CREATE FUNCTION harnessx_limit_of(p_key text) RETURNS integer
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce(
        (SELECT l.max_running FROM concurrency_limits l
         WHERE l.pattern = p_key OR (right(l.pattern, 1) = '*' AND starts_with(p_key, left(l.pattern, -1)))
         ORDER BY l.pattern = p_key DESC, length(l.pattern) DESC
         LIMIT 1),
        (SELECT d.max_concurrent FROM agent_defaults d
         WHERE starts_with(p_key, 'agent:') AND d.agent_ref = substr(p_key, 7)))
$$;

-- Claim up to p_limit queued runs for p_owner (leases of p_lease seconds), of the agents
-- p_agents (NULL: any), as claim call p_claim: one row per run taken, then, when runs were
-- passed over because a limit was full, a row with only their count (deferred).
--
-- Fair share (stride scheduling): each tenant with queued runs (and the untenanted group '',
-- when some of its runs wait) has a pass; a claim takes as many runs of each as it has among
-- the lowest tags pass + k / weight, what a tenant cannot supply is shared out again among
-- the others, and each tenant's pass then advances by runs taken / weight. Within a tenant,
-- runs go in rank order (harnessx_queue_rank), passing over at most 32 whose limit is full.
--
-- Limits: a run is taken only while its concurrency key and its agent ('agent:' || ref)
-- each have fewer driving runs than their limit. Counting and taking must not race with
-- another claimer, so each limited key is first locked for the rest of the transaction
-- (pg_try_advisory_xact_lock: a key another claimer holds right now is passed over, never
-- waited for), and only then counted, by a statement of its own: in a VOLATILE function
-- every statement sees a fresh snapshot, so the count includes every claim of that key
-- committed before the lock was granted, and no claim can commit until this one does.
-- Runs, sessions and fair_shares rows are then written in tenant order, so that two claims
-- lock tenants' rows in the same order.
CREATE FUNCTION harnessx_claim_runs(
    p_owner text, p_agents text[], p_limit integer, p_lease double precision, p_claim text
) RETURNS TABLE (run_id text, session_id text, generation bigint, deferred integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_limited  boolean;
    v_floor    double precision;
    v_groups   text[];
    v_wants    integer[];
    v_group    text;
    v_want     integer;
    v_got      integer;
    v_skips    integer;
    v_left     integer;
    v_plain    boolean;
    v_taken    jsonb := '{}';
    v_done     text[] := '{}';
    v_runs     text[] := '{}';
    v_sessions text[] := '{}';
    v_tenants  text[] := '{}';
    v_keys     text[];
    v_full     text[] := '{}';
    v_caps     jsonb := '{}';
    v_used     jsonb := '{}';
    v_key      text;
    v_cap      integer;
    v_count    integer;
    v_ok       boolean;
    v_deferred integer := 0;
    v_gen      bigint;
    v_i        integer;
    v_run      record;
BEGIN
    v_limited := EXISTS (SELECT FROM concurrency_limits)
                 OR EXISTS (SELECT FROM agent_defaults WHERE max_concurrent IS NOT NULL);
    SELECT min(f.pass) INTO v_floor FROM fair_shares f WHERE f.queued > 0 AND f.tenant <> '';
    IF NOT v_limited AND v_floor IS NULL THEN
        -- Only untenanted runs wait and nothing is limited: one statement, in rank order.
        RETURN QUERY
        WITH candidates AS (
            SELECT r.id AS run_id, r.session_id,
                   harnessx_queue_rank(r.queued_at, r.not_before, r.priority) AS rank
            FROM runs r JOIN sessions s ON s.id = r.session_id
            WHERE r.queued_at IS NOT NULL AND r.tenant = ''
              AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
              AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
              AND (p_agents IS NULL OR r.agent_ref = ANY (p_agents))
            ORDER BY 3
            LIMIT p_limit
            FOR UPDATE OF r, s SKIP LOCKED
        ), leased AS (
            UPDATE sessions s
            SET lease_owner = p_owner, generation = s.generation + 1,
                lease_expires_at = clock_timestamp() + make_interval(secs => p_lease)
            FROM candidates cand WHERE s.id = cand.session_id
            RETURNING s.id, s.generation
        ), dequeued AS (
            UPDATE runs r
            SET queued_at = NULL, claimed_by = p_claim, claimed_at = clock_timestamp(),
                claim_generation = l.generation
            FROM candidates cand JOIN leased l ON l.id = cand.session_id
            WHERE r.id = cand.run_id
            RETURNING r.id, r.session_id, l.generation
        ), logged AS (
            INSERT INTO run_claims (run_id, generation, owner, claimed_at)
            SELECT d.id, d.generation, p_owner, clock_timestamp() FROM dequeued d
        )
        SELECT d.id, d.session_id, d.generation, 0
        FROM dequeued d JOIN candidates cand ON cand.run_id = d.id
        ORDER BY cand.rank;
        RETURN;
    END IF;

    v_plain := EXISTS (SELECT FROM runs r WHERE r.queued_at IS NOT NULL AND r.tenant = '');
    -- Share out what is left among the groups that may still supply, by their passes as this
    -- claim has advanced them (v_taken), until the claim is full or no group can give more:
    -- of the v_left lowest tags pass + k / weight (k = 1, 2, ...), each group gets as many
    -- runs as it has tags; a group that comes up short is done for this claim.
    LOOP
        v_left := p_limit - cardinality(v_runs);
        EXIT WHEN v_left <= 0;
        WITH candidates AS (
            SELECT f.tenant, f.pass, f.weight FROM fair_shares f WHERE f.queued > 0
            UNION ALL
            SELECT f.tenant, greatest(f.pass, v_floor), f.weight FROM fair_shares f
            WHERE f.tenant = '' AND v_plain
        ), groups AS (
            SELECT c.tenant, c.pass + coalesce((v_taken ->> c.tenant)::float8, 0) / c.weight AS pass, c.weight
            FROM candidates c
            WHERE NOT (c.tenant = ANY (v_done))
        ), waiting AS (
            SELECT g.tenant, g.pass, g.weight FROM groups g
            ORDER BY g.pass + 1 / g.weight, g.tenant
            LIMIT v_left + 1
        ), tags AS (
            SELECT w.tenant, w.pass + k / w.weight AS tag
            FROM waiting w, generate_series(1, v_left) k
            ORDER BY 2, 1
            LIMIT v_left
        )
        SELECT array_agg(t.tenant ORDER BY t.first, t.tenant), array_agg(t.n ORDER BY t.first, t.tenant)
        INTO v_groups, v_wants
        FROM (SELECT tags.tenant, min(tags.tag) AS first, count(*)::integer AS n FROM tags GROUP BY tags.tenant) t;
        EXIT WHEN v_groups IS NULL;
        FOR v_i IN 1..cardinality(v_groups) LOOP
            v_group := v_groups[v_i];
            v_want := least(v_wants[v_i], p_limit - cardinality(v_runs));
            v_got := 0;
            v_skips := 0;
            FOR v_run IN
                SELECT r.id, r.session_id, r.concurrency_key, r.agent_ref
                FROM runs r JOIN sessions s ON s.id = r.session_id
                WHERE r.queued_at IS NOT NULL AND r.tenant = v_group
                  AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
                  AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
                  AND (p_agents IS NULL OR r.agent_ref = ANY (p_agents))
                  AND NOT (r.id = ANY (v_runs)) AND NOT (r.session_id = ANY (v_sessions))
                ORDER BY harnessx_queue_rank(r.queued_at, r.not_before, r.priority)
                FOR UPDATE OF r, s SKIP LOCKED
            LOOP
                v_ok := true;
                IF v_limited THEN
                    v_keys := ARRAY[v_run.concurrency_key, 'agent:' || v_run.agent_ref];
                    FOREACH v_key IN ARRAY v_keys LOOP
                        CONTINUE WHEN v_key IS NULL;
                        IF v_key = ANY (v_full) THEN
                            v_ok := false;
                            EXIT;
                        END IF;
                        IF NOT v_caps ? v_key THEN
                            v_caps := v_caps || jsonb_build_object(v_key, harnessx_limit_of(v_key));
                        END IF;
                        v_cap := (v_caps ->> v_key)::integer;
                        CONTINUE WHEN v_cap IS NULL;
                        IF NOT v_used ? v_key THEN
                            IF NOT pg_try_advisory_xact_lock(harnessx_liveness_key('limit:' || v_key)) THEN
                                v_full := v_full || v_key;  -- another claimer is taking it now
                                v_ok := false;
                                EXIT;
                            END IF;
                            IF starts_with(v_key, 'agent:') THEN
                                SELECT count(*) INTO v_count
                                FROM runs d JOIN sessions ds ON ds.id = d.session_id
                                WHERE d.agent_ref = substr(v_key, 7) AND d.claim_generation IS NOT NULL
                                  AND d.status = 'running' AND d.queued_at IS NULL
                                  AND d.claim_generation = ds.generation AND ds.lease_owner IS NOT NULL
                                  AND ds.lease_expires_at > clock_timestamp();
                            ELSE
                                SELECT count(*) INTO v_count
                                FROM runs d JOIN sessions ds ON ds.id = d.session_id
                                WHERE d.concurrency_key = v_key
                                  AND d.status = 'running' AND d.queued_at IS NULL
                                  AND d.claim_generation = ds.generation AND ds.lease_owner IS NOT NULL
                                  AND ds.lease_expires_at > clock_timestamp();
                            END IF;
                            v_used := v_used || jsonb_build_object(v_key, v_count);
                        END IF;
                        IF (v_used ->> v_key)::integer >= v_cap THEN
                            v_full := v_full || v_key;
                            v_ok := false;
                            EXIT;
                        END IF;
                    END LOOP;
                END IF;
                IF NOT v_ok THEN
                    v_deferred := v_deferred + 1;
                    v_skips := v_skips + 1;
                    EXIT WHEN v_skips >= 32;
                    CONTINUE;
                END IF;
                IF v_limited THEN
                    FOREACH v_key IN ARRAY v_keys LOOP
                        IF v_key IS NOT NULL AND v_used ? v_key THEN
                            v_used := jsonb_set(v_used, ARRAY[v_key], to_jsonb((v_used ->> v_key)::integer + 1));
                        END IF;
                    END LOOP;
                END IF;
                v_runs := v_runs || v_run.id;
                v_sessions := v_sessions || v_run.session_id;
                v_tenants := v_tenants || v_group;
                v_got := v_got + 1;
                EXIT WHEN v_got >= v_want;
            END LOOP;
            v_taken := v_taken || jsonb_build_object(v_group, coalesce((v_taken ->> v_group)::integer, 0) + v_got);
            IF v_got < v_want THEN
                v_done := v_done || v_group;  -- it has nothing more to give this call
            END IF;
        END LOOP;
    END LOOP;

    -- Take them, tenant by tenant (the dequeue's trigger locks each tenant's row).
    FOR v_i IN SELECT i FROM generate_subscripts(v_runs, 1) i ORDER BY v_tenants[i], v_runs[i] LOOP
        UPDATE sessions s
        SET lease_owner = p_owner, generation = s.generation + 1,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_lease)
        WHERE s.id = v_sessions[v_i]
        RETURNING s.generation INTO v_gen;
        UPDATE runs r
        SET queued_at = NULL, claimed_by = p_claim, claimed_at = clock_timestamp(),
            claim_generation = v_gen
        WHERE r.id = v_runs[v_i];
        INSERT INTO run_claims (run_id, generation, owner, claimed_at)
        VALUES (v_runs[v_i], v_gen, p_owner, clock_timestamp());
        run_id := v_runs[v_i];
        session_id := v_sessions[v_i];
        generation := v_gen;
        deferred := 0;
        RETURN NEXT;
    END LOOP;
    -- Several groups waited: each one served advances its pass (the untenanted group from no
    -- lower than the lowest waiting tenant's).
    IF v_floor IS NOT NULL THEN
        FOR v_group, v_got IN
            SELECT t, count(*)::integer FROM unnest(v_tenants) t GROUP BY t ORDER BY t
        LOOP
            UPDATE fair_shares f
            SET pass = CASE WHEN f.tenant = '' THEN greatest(f.pass, v_floor) ELSE f.pass END + v_got / f.weight
            WHERE f.tenant = v_group;
        END LOOP;
    END IF;
    IF v_deferred > 0 THEN
        run_id := NULL;
        session_id := NULL;
        generation := NULL;
        deferred := v_deferred;
        RETURN NEXT;
    END IF;
END
$$;
