-- harnessx schema, version 38 (PostgreSQL): a claim may reserve the first model calls of the
-- runs it takes (docs/scheduling.md, *Leases*).
--
-- A worker's gate that holds no lease of a limited bucket reserved the first call of every
-- run it claimed on that call's way: one more statement, and one more transaction, between
-- the claim and the run's first commit. The worker can ask for those calls with the claim
-- instead (RateGate.ahead: the bucket its runs have lately opened with), and the claim
-- reserves them in its own transaction, which already writes and waits for the disk: one
-- UPDATE of the bucket's row more, no statement and no commit more.
--
-- harnessx_lease_ahead is that reservation. Unlike harnessx_reserve_rate it never makes a
-- call wait: it grants as many of p_calls starts as may start now (the first now, each
-- further one within p_slack, by the same GCRA arithmetic), or none, and then writes
-- nothing. And it does not switch its transaction to synchronous_commit = off as
-- harnessx_reserve_rate does: here the transaction is the claim's, and a claim lost in a
-- server crash would hand its sessions' generations out twice.

CREATE FUNCTION harnessx_lease_ahead(
    p_bucket text, p_tokens integer, p_calls integer, p_slack double precision)
RETURNS TABLE (wait double precision, start double precision, requests_at double precision,
               tokens_at double precision, held boolean, granted integer, given_back double precision)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rpm     double precision;
    v_tpm     double precision;
    v_burst   double precision;
    v_req     double precision;
    v_tok     double precision;
    v_paused  double precision;
    v_given   double precision;
    v_now     double precision;
    v_start   double precision;
    v_granted integer := 1;
BEGIN
    IF p_calls IS NULL OR p_calls <= 0 THEN
        RETURN;  -- the claim took no run: the bucket is not even read
    END IF;
    LOOP
        SELECT l.requests_per_minute, l.tokens_per_minute, l.burst_seconds,
               b.requests_at, b.tokens_at, b.paused_until, b.given_back
        INTO v_rpm, v_tpm, v_burst, v_req, v_tok, v_paused, v_given
        FROM (SELECT r.requests_per_minute, r.tokens_per_minute, r.burst_seconds
              FROM rate_limits r
              WHERE r.pattern = p_bucket
                 OR (right(r.pattern, 1) = '*' AND starts_with(p_bucket, left(r.pattern, -1)))
              ORDER BY r.pattern = p_bucket DESC, length(r.pattern) DESC
              LIMIT 1) l
        CROSS JOIN LATERAL (SELECT x.requests_at, x.tokens_at, x.paused_until, x.given_back
                            FROM rate_buckets x WHERE x.name = p_bucket FOR UPDATE) b;
        EXIT WHEN FOUND;
        -- No limit governs the bucket (no row: the gate drops its guess), or it has no row yet.
        PERFORM 1 FROM rate_limits r
        WHERE r.pattern = p_bucket
           OR (right(r.pattern, 1) = '*' AND starts_with(p_bucket, left(r.pattern, -1)));
        IF NOT FOUND THEN
            RETURN;
        END IF;
        INSERT INTO rate_buckets (name) VALUES (p_bucket) ON CONFLICT (name) DO NOTHING;
    END LOOP;
    v_now := extract(epoch FROM clock_timestamp());
    v_start := greatest(v_now, v_paused);
    IF v_rpm IS NOT NULL THEN
        v_start := greatest(v_start, v_req - v_burst);
    END IF;
    IF v_tpm IS NOT NULL AND p_tokens > 0 THEN
        v_start := greatest(v_start, v_tok - v_burst);
    END IF;
    wait := 0;
    held := false;
    given_back := v_given;
    IF v_start > v_now THEN
        -- The first call would wait: nothing is granted, nothing written.
        start := v_now;
        requests_at := v_req;
        tokens_at := v_tok;
        granted := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_rpm IS NOT NULL THEN
        v_req := greatest(v_req, v_start) + 60.0 / v_rpm;
    END IF;
    IF v_tpm IS NOT NULL AND p_tokens > 0 THEN
        v_tok := greatest(v_tok, v_start) + p_tokens * 60.0 / v_tpm;
    END IF;
    -- _scheduling.lease_rate: more calls only while each may start now too.
    WHILE v_granted < p_calls
          AND (v_rpm IS NULL OR v_req - v_burst <= v_now + p_slack)
          AND (v_tpm IS NULL OR p_tokens <= 0 OR v_tok - v_burst <= v_now + p_slack) LOOP
        IF v_rpm IS NOT NULL THEN
            v_req := v_req + 60.0 / v_rpm;
        END IF;
        IF v_tpm IS NOT NULL AND p_tokens > 0 THEN
            v_tok := v_tok + p_tokens * 60.0 / v_tpm;
        END IF;
        v_granted := v_granted + 1;
    END LOOP;
    UPDATE rate_buckets b SET requests_at = v_req, tokens_at = v_tok WHERE b.name = p_bucket;
    start := v_start;
    requests_at := v_req;
    tokens_at := v_tok;
    granted := v_granted;
    RETURN NEXT;
END;
$$;
