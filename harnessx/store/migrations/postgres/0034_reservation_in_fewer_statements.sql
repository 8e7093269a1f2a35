-- harnessx schema, version 34 (PostgreSQL): a model call's rate reservation runs three
-- statements inside the server where it ran six, and writes the bucket's row once.
--
-- Until now a reservation set synchronous_commit, read the governing limit, upserted the
-- bucket's row (INSERT ... ON CONFLICT DO UPDATE, which writes a row version of its own just
-- to lock it), looked for a hold of the run, updated the row again and selected its answer.
-- Now one SELECT reads the limit, locks the bucket's row and looks for the run's hold (and
-- switches the transaction's commit to asynchronous, see version 27), one UPDATE writes the
-- new times, and the answer is returned from variables. The bucket's first reservation, a
-- hold to take and a limit removed meanwhile take the longer paths below; what each path
-- computes is unchanged (the arithmetic of _scheduling.reserve_rate).

CREATE OR REPLACE FUNCTION harnessx_reserve_rate(p_bucket text, p_tokens integer, p_settle integer, p_run text)
RETURNS TABLE (wait double precision, start double precision, requests_at double precision,
               tokens_at double precision, held boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rpm    double precision;
    v_tpm    double precision;
    v_burst  double precision;
    v_req    double precision;
    v_tok    double precision;
    v_paused double precision;
    v_now    double precision;
    v_start  double precision;
    v_held   double precision;
BEGIN
    LOOP
        -- set_config rides on the row the SELECT returns, so that it costs no statement of
        -- its own; when no row comes back nothing below writes but the bucket's first row.
        SELECT l.requests_per_minute, l.tokens_per_minute, l.burst_seconds,
               b.requests_at, b.tokens_at, b.paused_until, h.start
        INTO v_rpm, v_tpm, v_burst, v_req, v_tok, v_paused, v_held
        FROM (SELECT r.requests_per_minute, r.tokens_per_minute, r.burst_seconds,
                     set_config('synchronous_commit', 'off', true) AS async_commit
              FROM rate_limits r
              WHERE r.pattern = p_bucket
                 OR (right(r.pattern, 1) = '*' AND starts_with(p_bucket, left(r.pattern, -1)))
              ORDER BY r.pattern = p_bucket DESC, length(r.pattern) DESC
              LIMIT 1) l
        CROSS JOIN LATERAL (SELECT x.requests_at, x.tokens_at, x.paused_until
                            FROM rate_buckets x WHERE x.name = p_bucket FOR UPDATE) b
        LEFT JOIN rate_holds h ON h.run_id = p_run AND h.bucket = p_bucket;
        EXIT WHEN FOUND;
        -- No limit governs the bucket, or it has no row yet.
        PERFORM 1 FROM rate_limits r
        WHERE r.pattern = p_bucket
           OR (right(r.pattern, 1) = '*' AND starts_with(p_bucket, left(r.pattern, -1)));
        IF NOT FOUND THEN
            DELETE FROM rate_holds h WHERE h.run_id = p_run AND h.bucket = p_bucket;
            RETURN;
        END IF;
        INSERT INTO rate_buckets (name) VALUES (p_bucket) ON CONFLICT (name) DO NOTHING;
    END LOOP;
    v_now := extract(epoch FROM clock_timestamp());
    IF v_tpm IS NOT NULL AND p_settle <> 0 THEN
        v_tok := v_tok + p_settle * 60.0 / v_tpm;
    END IF;
    IF v_held IS NOT NULL THEN
        -- Taken only if it is still there (the run may have been deleted meanwhile).
        DELETE FROM rate_holds h WHERE h.run_id = p_run AND h.bucket = p_bucket RETURNING h.start INTO v_held;
    END IF;
    IF v_held IS NOT NULL THEN
        UPDATE rate_buckets b SET tokens_at = v_tok WHERE b.name = p_bucket;
        wait := v_held - v_now;
        start := v_held;
        requests_at := v_req;
        tokens_at := v_tok;
        held := true;
        RETURN NEXT;
        RETURN;
    END IF;
    v_start := greatest(v_now, v_paused);
    IF v_rpm IS NOT NULL THEN
        v_start := greatest(v_start, v_req - v_burst);
    END IF;
    IF v_tpm IS NOT NULL AND p_tokens > 0 THEN
        v_start := greatest(v_start, v_tok - v_burst);
    END IF;
    IF v_rpm IS NOT NULL THEN
        v_req := greatest(v_req, v_start) + 60.0 / v_rpm;
    END IF;
    IF v_tpm IS NOT NULL AND p_tokens > 0 THEN
        v_tok := greatest(v_tok, v_start) + p_tokens * 60.0 / v_tpm;
    END IF;
    UPDATE rate_buckets b
    SET requests_at = v_req, tokens_at = v_tok,
        waits = b.waits + CASE WHEN v_start > v_now THEN 1 ELSE 0 END,
        waited = b.waited + (v_start - v_now)
    WHERE b.name = p_bucket;
    wait := v_start - v_now;
    start := v_start;
    requests_at := v_req;
    tokens_at := v_tok;
    held := false;
    RETURN NEXT;
END;
$$;
