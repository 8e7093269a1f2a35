-- harnessx schema, version 40 (PostgreSQL): a claim waits for a tenant another claim is
-- serving only when waiting could give it a run.
--
-- A claim that took nothing because every tenant with runs queued was being served by other
-- claims (their fair_shares rows locked) goes round once more and waits for the first such
-- tenant's row (schema 25): one large tenant and several workers. But most often the other
-- claim holds every run of the tenant there is to take: one run queued, and the workers its
-- notification woke all claiming. The loser then waited for the winner's commit, read the
-- queue again for nothing, and, having locked the tenant's row, committed a transaction of
-- its own (a WAL flush) just as the winner's run made its first steps: in
-- bench/scheduling.py the claimed run's way to its first commit took ~0.5 ms longer with
-- tenants than without.
--
-- Now it first looks for a run of those tenants that it could take and no claim holds
-- (FOR KEY SHARE SKIP LOCKED: claimers hold their runs FOR UPDATE, which conflicts), and
-- waits only for the tenants that have one. The look locks the run it finds (KEY SHARE: it
-- does not hold up updates of the row, only its deletion), so the claim waiting for the
-- tenant may hold that run's row. A cycle of waits would need the claim serving the tenant
-- to wait for a session row held by a process that waits to delete this run: a session
-- being deleted while one of its runs is being claimed. PostgreSQL's deadlock detector
-- breaks it; the claim is retried.
--
-- The function is 0039's with that look added before the second round; nothing else.

CREATE OR REPLACE FUNCTION harnessx_claim_runs(
    p_owner text, p_agents text[], p_limit integer, p_lease double precision, p_claim text
) RETURNS TABLE (run_id text, session_id text, generation bigint, deferred integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_keyed    boolean;
    v_agents_keyed boolean;
    v_capped   text[];
    v_limited  boolean;
    v_floor    double precision;
    v_plain    boolean;
    v_sole     text;              -- the one tenant with runs queued, if only one has
    v_groups   text[];
    v_wants    integer[];
    v_group    text;
    v_want     integer;
    v_got      integer;
    v_skips    integer;
    v_left     integer;
    v_taken    jsonb := '{}';
    v_done     text[] := '{}';
    v_runs     text[] := '{}';
    v_sessions text[] := '{}';
    v_tenants  text[] := '{}';
    v_keys     text[];
    v_full     text[] := '{}';
    v_met      text[] := '{}';    -- keys looked up so far, their limits, the runs driving
    v_caps     integer[] := '{}'; -- under each (NULL: no limit)
    v_used     integer[] := '{}';
    v_key      text;
    v_k        integer;
    v_cap      integer;
    v_count    integer;
    v_ok       boolean;
    v_deferred integer := 0;
    v_i        integer;
    v_gen      bigint;
    v_run      record;
    v_queue    refcursor;
    v_busy     text[] := '{}';
    v_held     integer := 0;
    v_round    integer;
    v_named    text[];            -- the agents the worker names, once each
    v_batch    text[];            -- the next of their runs in rank order, not locked yet
    v_seen     text[] := '{}';    -- every run a batch held (taken, passed over or busy)
    v_size     integer;
    v_open     boolean;
    v_gens     bigint[] := '{}';
    v_waiting  integer;           -- the groups that may still supply when a pass began
    v_gone     integer;           -- of them, those this pass found done
BEGIN
    SELECT EXISTS (SELECT FROM concurrency_limits),
           EXISTS (SELECT FROM concurrency_limits l
                   WHERE starts_with(l.pattern, 'agent:')
                      OR (right(l.pattern, 1) = '*' AND starts_with('agent:', left(l.pattern, -1)))),
           coalesce((SELECT array_agg(d.agent_ref) FROM agent_defaults d WHERE d.max_concurrent IS NOT NULL), '{}'),
           (SELECT min(f.pass) FROM fair_shares f WHERE f.queued > 0 AND f.tenant <> ''),
           EXISTS (SELECT FROM runs r WHERE r.queued_at IS NOT NULL AND r.tenant = ''),
           (SELECT CASE WHEN count(*) = 1 THEN min(w.tenant) END
            FROM (SELECT f.tenant FROM fair_shares f WHERE f.queued > 0 AND f.tenant <> '' LIMIT 2) w)
    INTO v_keyed, v_agents_keyed, v_capped, v_floor, v_plain, v_sole;
    v_limited := v_keyed;
    IF NOT v_limited AND cardinality(v_capped) > 0 THEN
        -- One probe of runs_queued_agent per capped agent: the first run in its order
        -- (with sorts off, no other index gives it; an EXISTS would drop the order and
        -- could scan a whole queue index as well, see the top).
        v_limited := EXISTS (
            SELECT FROM unnest(v_capped) c(ref)
            WHERE (SELECT r.queued_at FROM runs r
                   WHERE r.agent_ref = c.ref AND r.queued_at IS NOT NULL
                   ORDER BY r.agent_ref, r.queued_at
                   LIMIT 1) IS NOT NULL);
    END IF;
    IF NOT v_limited AND v_floor IS NULL AND p_agents IS NULL THEN
        -- Only untenanted runs wait and nothing that waits is limited: one statement, in
        -- rank order (passing over a limited agent's run queued since the look above).
        RETURN QUERY
        WITH candidates AS (
            SELECT r.id AS run_id, r.session_id,
                   harnessx_queue_rank(r.queued_at, r.not_before, r.priority) AS rank
            FROM runs r JOIN sessions s ON s.id = r.session_id
            WHERE r.queued_at IS NOT NULL AND r.tenant = ''
              AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
              AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
              AND (p_agents IS NULL OR r.agent_ref = ANY (p_agents))
              AND NOT (r.agent_ref = ANY (v_capped))
            ORDER BY 3
            LIMIT p_limit
            FOR UPDATE OF r SKIP LOCKED FOR NO KEY UPDATE OF s
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
    IF NOT v_limited AND v_floor IS NULL THEN
        -- The same for a worker that names its agents, which reads each one's queue through
        -- its own index (runs_agent_queue) rather than every run ranked before theirs: the
        -- next runs of them all by rank, not locked yet (harnessx_queue_of_agents), then
        -- locked, leased and taken off the queue in one statement. A run of them that another
        -- claimer holds is passed over (SKIP LOCKED) and the next ones are read, until the
        -- claim is full or they have no more.
        v_named := ARRAY(SELECT DISTINCT a.ref FROM unnest(p_agents) a(ref) WHERE NOT (a.ref = ANY (v_capped)));
        LOOP
            v_left := p_limit - cardinality(v_runs);
            EXIT WHEN v_left <= 0;
            v_batch := harnessx_queue_of_agents('', v_named, v_left, v_seen);
            EXIT WHEN cardinality(v_batch) = 0;
            v_seen := v_seen || v_batch;
            WITH candidates AS (
                SELECT r.id AS run_id, r.session_id, p.k
                FROM unnest(v_batch) WITH ORDINALITY p(id, k)
                JOIN runs r ON r.id = p.id JOIN sessions s ON s.id = r.session_id
                WHERE coalesce(r.queued_at, '-infinity') > '-infinity'  -- queued; see the top
                  AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
                  AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
                FOR UPDATE OF r SKIP LOCKED FOR NO KEY UPDATE OF s
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
            SELECT v_runs || coalesce(array_agg(d.id ORDER BY cand.k), '{}'),
                   v_sessions || coalesce(array_agg(d.session_id ORDER BY cand.k), '{}'),
                   v_gens || coalesce(array_agg(d.generation ORDER BY cand.k), '{}')
            INTO v_runs, v_sessions, v_gens
            FROM dequeued d JOIN candidates cand ON cand.run_id = d.id;
            EXIT WHEN cardinality(v_batch) < v_left;  -- the last of their claimable runs
        END LOOP;
        RETURN QUERY SELECT t.r, t.s, t.g, 0 FROM unnest(v_runs, v_sessions, v_gens) t(r, s, g);
        RETURN;
    END IF;
    IF p_agents IS NOT NULL THEN
        v_named := ARRAY(SELECT DISTINCT a.ref FROM unnest(p_agents) a(ref));
    END IF;

    -- Share out what is left among the groups that may still supply, by their passes as this
    -- claim has advanced them (v_taken), until the claim is full or no group can give more:
    -- of the v_left lowest tags pass + k / weight (k = 1, 2, ...), each group gets as many
    -- runs as it has tags; a group that comes up short is done for this claim.
    FOR v_round IN 1..2 LOOP
    LOOP
        v_left := p_limit - cardinality(v_runs);
        EXIT WHEN v_left <= 0;
        IF v_sole IS NOT NULL AND NOT v_plain AND cardinality(v_done) = 0 THEN
            -- One group waits: its share is the whole claim, no tags to deal (the common
            -- case of one tenant, or of runs submitted one at a time to idle workers).
            v_groups := ARRAY[v_sole];
            v_wants := ARRAY[v_left];
            v_waiting := 1;
        ELSE
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
        SELECT array_agg(t.tenant ORDER BY t.first, t.tenant), array_agg(t.n ORDER BY t.first, t.tenant),
               (SELECT count(*)::integer FROM groups)
        INTO v_groups, v_wants, v_waiting
        FROM (SELECT tags.tenant, min(tags.tag) AS first, count(*)::integer AS n FROM tags GROUP BY tags.tenant) t;
        END IF;
        EXIT WHEN v_groups IS NULL;
        v_gone := 0;
        FOR v_i IN 1..cardinality(v_groups) LOOP
            v_group := v_groups[v_i];
            v_want := least(v_wants[v_i], p_limit - cardinality(v_runs));
            v_got := 0;
            v_skips := 0;
            -- A tenant another claim is serving right now (its row locked until that claim
            -- commits) is passed over, as a limited key is; waited for only in the second
            -- round by a claim that holds no tenant's row yet (see below).
            IF v_group <> '' THEN
                IF v_round = 2 AND v_held = 0 THEN
                    PERFORM FROM fair_shares f WHERE f.tenant = v_group FOR UPDATE;
                ELSE
                    PERFORM FROM fair_shares f WHERE f.tenant = v_group FOR UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        v_busy := v_busy || v_group;
                        v_done := v_done || v_group;
                        v_gone := v_gone + 1;
                        CONTINUE;
                    END IF;
                END IF;
                v_held := v_held + 1;
            END IF;
            -- One row at a time (an explicit cursor): a FOR loop over the query would fetch, and
            -- so lock, ten runs and their sessions at once, which other claimers then skip. A
            -- worker that names its agents reads their runs of the tenant in batches, each the
            -- next few by rank (harnessx_queue_of_agents), not past other agents' runs.
            v_open := false;
            LOOP
                IF NOT v_open THEN
                    IF v_named IS NULL THEN
                        OPEN v_queue FOR
                            SELECT r.id, r.session_id, r.concurrency_key, r.agent_ref
                            FROM runs r JOIN sessions s ON s.id = r.session_id
                            WHERE r.queued_at IS NOT NULL AND r.tenant = v_group
                              AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
                              AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
                              AND NOT (r.id = ANY (v_runs)) AND NOT (r.session_id = ANY (v_sessions))
                            ORDER BY harnessx_queue_rank(r.queued_at, r.not_before, r.priority)
                            FOR UPDATE OF r SKIP LOCKED FOR NO KEY UPDATE OF s;
                    ELSE
                        -- As many as it still wants, and more after runs passed over.
                        v_size := v_want - v_got + v_skips;
                        v_batch := harnessx_queue_of_agents(v_group, v_named, v_size, v_seen || v_runs);
                        EXIT WHEN cardinality(v_batch) = 0;
                        v_seen := v_seen || v_batch;
                        OPEN v_queue FOR
                            SELECT r.id, r.session_id, r.concurrency_key, r.agent_ref
                            FROM unnest(v_batch) WITH ORDINALITY p(id, k)
                            JOIN runs r ON r.id = p.id JOIN sessions s ON s.id = r.session_id
                            WHERE coalesce(r.queued_at, '-infinity') > '-infinity'  -- queued
                              AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
                              AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
                              AND NOT (r.session_id = ANY (v_sessions))
                            ORDER BY p.k
                            FOR UPDATE OF r SKIP LOCKED FOR NO KEY UPDATE OF s;
                    END IF;
                    v_open := true;
                END IF;
                FETCH v_queue INTO v_run;
                IF NOT FOUND THEN
                    CLOSE v_queue;
                    v_open := false;
                    -- A batch read whole may have more of the named agents' runs after it.
                    EXIT WHEN v_named IS NULL OR cardinality(v_batch) < v_size;
                    CONTINUE;
                END IF;
                v_ok := true;
                IF v_limited THEN
                    -- Its agent's key only when a limit can govern it (a registry's, or an
                    -- operator's pattern that can match an agent's key): else no lookup.
                    v_keys := ARRAY[v_run.concurrency_key,
                                    CASE WHEN v_agents_keyed OR v_run.agent_ref = ANY (v_capped)
                                         THEN 'agent:' || v_run.agent_ref END];
                    FOREACH v_key IN ARRAY v_keys LOOP
                        CONTINUE WHEN v_key IS NULL;
                        IF v_key = ANY (v_full) THEN
                            v_ok := false;
                            EXIT;
                        END IF;
                        v_k := array_position(v_met, v_key);
                        IF v_k IS NULL THEN
                            -- The key's limit: an operator's, the exact pattern first, then
                            -- the longest trailing-* pattern that matches; for
                            -- 'agent:NAME@VERSION', else the registry's.
                            SELECT coalesce(
                                (SELECT l.max_running FROM concurrency_limits l
                                 WHERE l.pattern = v_key
                                    OR (right(l.pattern, 1) = '*' AND starts_with(v_key, left(l.pattern, -1)))
                                 ORDER BY l.pattern = v_key DESC, length(l.pattern) DESC
                                 LIMIT 1),
                                (SELECT d.max_concurrent FROM agent_defaults d
                                 WHERE starts_with(v_key, 'agent:') AND d.agent_ref = substr(v_key, 7)))
                            INTO v_cap;
                            v_count := NULL;
                            IF v_cap IS NOT NULL THEN
                                IF NOT pg_try_advisory_xact_lock(hashtextextended('harnessx:' || current_schema() || ':limit:' || v_key, 0)) THEN
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
                            END IF;
                            v_met := v_met || v_key;
                            v_caps := v_caps || v_cap;
                            v_used := v_used || v_count;
                            v_k := cardinality(v_met);
                        END IF;
                        CONTINUE WHEN v_caps[v_k] IS NULL;
                        IF v_used[v_k] >= v_caps[v_k] THEN
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
                        v_k := array_position(v_met, v_key);
                        IF v_k IS NOT NULL AND v_caps[v_k] IS NOT NULL THEN
                            v_used[v_k] := v_used[v_k] + 1;
                        END IF;
                    END LOOP;
                END IF;
                v_runs := v_runs || v_run.id;
                v_sessions := v_sessions || v_run.session_id;
                v_tenants := v_tenants || v_group;
                v_got := v_got + 1;
                EXIT WHEN v_got >= v_want;
            END LOOP;
            IF v_open THEN
                CLOSE v_queue;
            END IF;
            v_taken := v_taken || jsonb_build_object(v_group, coalesce((v_taken ->> v_group)::integer, 0) + v_got);
            IF v_got < v_want THEN
                v_done := v_done || v_group;  -- it has nothing more to give this call
                v_gone := v_gone + 1;
            END IF;
        END LOOP;
        -- Every group that could supply is done: the next look would find none.
        EXIT WHEN v_gone = v_waiting;
    END LOOP;
        -- Nothing taken because the tenants with runs were being served by other claims
        -- (one large tenant and several workers, say): rather than come back empty, go round
        -- once more and wait for the first such tenant's row. A claim holding no tenant's row
        -- cannot close a cycle of waits (runs are taken with SKIP LOCKED, keys with try-locks).
        EXIT WHEN cardinality(v_runs) > 0 OR cardinality(v_busy) = 0 OR v_held > 0;
        -- Only for the busy tenants with a run this claim could take that no claim holds
        -- (claimers hold theirs FOR UPDATE, which KEY SHARE conflicts with): if the claim
        -- serving a tenant holds all of its runs, waiting for it would give nothing.
        v_busy := ARRAY(
            SELECT b.tenant FROM unnest(v_busy) b(tenant)
            WHERE EXISTS (
                SELECT FROM runs r JOIN sessions s ON s.id = r.session_id
                WHERE r.queued_at IS NOT NULL AND r.tenant = b.tenant
                  AND (s.lease_owner IS NULL OR s.lease_expires_at <= clock_timestamp())
                  AND (r.not_before IS NULL OR r.not_before <= clock_timestamp())
                  AND (v_named IS NULL OR r.agent_ref = ANY (v_named))
                FOR KEY SHARE OF r SKIP LOCKED));
        EXIT WHEN cardinality(v_busy) = 0;
        v_done := ARRAY(SELECT d FROM unnest(v_done) d WHERE NOT (d = ANY (v_busy)));
        v_busy := '{}';
    END LOOP;

    -- Take them, a statement a run: lease its session (the next generation), take it off
    -- the queue (its trigger counts it out of its tenant's queued runs), record the claim.
    -- Each row is found by its key (a statement over all of them would be planned once per
    -- session, as every statement here is, and could keep a plan made while the tables
    -- were small: scans of whole tables).
    FOR v_i IN 1..cardinality(v_runs) LOOP
        WITH leased AS (
            UPDATE sessions s
            SET lease_owner = p_owner, generation = s.generation + 1,
                lease_expires_at = clock_timestamp() + make_interval(secs => p_lease)
            WHERE s.id = v_sessions[v_i]
            RETURNING s.generation
        ), dequeued AS (
            UPDATE runs r
            SET queued_at = NULL, claimed_by = p_claim, claimed_at = clock_timestamp(),
                claim_generation = l.generation
            FROM leased l
            WHERE r.id = v_runs[v_i]
            RETURNING r.claim_generation
        )
        INSERT INTO run_claims (run_id, generation, owner, claimed_at)
        SELECT v_runs[v_i], d.claim_generation, p_owner, clock_timestamp() FROM dequeued d
        RETURNING run_claims.generation INTO v_gen;
        run_id := v_runs[v_i];
        session_id := v_sessions[v_i];
        generation := v_gen;
        deferred := 0;
        RETURN NEXT;
    END LOOP;
    -- Several groups waited: each one served advances its pass (the untenanted group's from
    -- no lower than the lowest waiting tenant's), in one statement.
    IF v_floor IS NOT NULL AND cardinality(v_runs) > 0 THEN
        UPDATE fair_shares f
        SET pass = CASE WHEN f.tenant = '' THEN greatest(f.pass, v_floor) ELSE f.pass END
                   + (v_taken ->> f.tenant)::float8 / f.weight
        WHERE f.tenant = ANY (v_tenants);
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
