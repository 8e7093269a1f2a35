-- harnessx schema, version 35 (PostgreSQL): rate leases, several model calls' starts of a
-- bucket reserved in one statement (SQLite's schema 17; docs/scheduling.md, *Model rate
-- limits*).
--
-- Every model call of a limited bucket made one reservation, a write of the bucket's one
-- row: with a limit that never binds, two statements a run of two calls, and every worker's
-- reservations queued on that row. A worker's gate now asks for up to p_calls starts at once
-- and spends them itself. The first is reserved exactly as before (it may have to wait); each
-- further one only while it too may start now (its start at most p_slack seconds ahead of
-- now), by GCRA's own arithmetic, so a bucket near its limit grants one and behaves as
-- before. The answer says how many were granted.
--
-- Calls a lease did not spend in time are given back (p_release: how many; p_release_end:
-- the bucket's requests_at their grant left; p_release_mark: rate_buckets.given_back then),
-- first in the same statement as the bucket's next reservation from that worker, or on their
-- own (release_rate). What is given back is only the part of their share of the schedule that
-- is still ahead of now (_scheduling.released_seconds): the calls that used the bucket after
-- them never find more room than the calls that really started leave. given_back is the
-- bucket's running total of request time given back: a lease given back moves the shares of
-- the leases granted after it earlier, by at most what was given back since their grant.
--
-- The old four-argument calls keep working (the new arguments have defaults), so workers of
-- the previous version share the buckets with the new ones during a rolling upgrade.

ALTER TABLE rate_buckets ADD COLUMN given_back double precision NOT NULL DEFAULT 0;

DROP FUNCTION harnessx_reserve_rate(text, integer, integer, text);

CREATE FUNCTION harnessx_reserve_rate(
    p_bucket text, p_tokens integer, p_settle integer, p_run text,
    p_calls integer DEFAULT 1, p_slack double precision DEFAULT 0,
    p_release integer DEFAULT 0, p_release_end double precision DEFAULT 0,
    p_release_mark double precision DEFAULT 0)
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
    v_held    double precision;
    v_credit  double precision;
    v_granted integer := 1;
BEGIN
    LOOP
        -- set_config rides on the row the SELECT returns (schema 34): the transaction's
        -- commit does not wait for the disk (schema 27).
        SELECT l.requests_per_minute, l.tokens_per_minute, l.burst_seconds,
               b.requests_at, b.tokens_at, b.paused_until, b.given_back, h.start
        INTO v_rpm, v_tpm, v_burst, v_req, v_tok, v_paused, v_given, v_held
        FROM (SELECT r.requests_per_minute, r.tokens_per_minute, r.burst_seconds,
                     set_config('synchronous_commit', 'off', true) AS async_commit
              FROM rate_limits r
              WHERE r.pattern = p_bucket
                 OR (right(r.pattern, 1) = '*' AND starts_with(p_bucket, left(r.pattern, -1)))
              ORDER BY r.pattern = p_bucket DESC, length(r.pattern) DESC
              LIMIT 1) l
        CROSS JOIN LATERAL (SELECT x.requests_at, x.tokens_at, x.paused_until, x.given_back
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
    IF p_release > 0 AND v_rpm IS NOT NULL THEN
        -- _scheduling.released_seconds: only what is still ahead of now, never below now.
        v_credit := greatest(0.0, least(p_release * 60.0 / v_rpm,
                                        p_release_end - (v_given - p_release_mark) - v_now,
                                        v_req - v_now));
        v_req := v_req - v_credit;
        v_given := v_given + v_credit;
    END IF;
    IF v_held IS NOT NULL THEN
        -- Taken only if it is still there (the run may have been deleted meanwhile).
        DELETE FROM rate_holds h WHERE h.run_id = p_run AND h.bucket = p_bucket RETURNING h.start INTO v_held;
    END IF;
    IF v_held IS NOT NULL THEN
        UPDATE rate_buckets b SET requests_at = v_req, tokens_at = v_tok, given_back = v_given
        WHERE b.name = p_bucket;
        wait := v_held - v_now;
        start := v_held;
        requests_at := v_req;
        tokens_at := v_tok;
        held := true;
        granted := 1;
        given_back := v_given;
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
    -- _scheduling.lease_rate: more calls only while each may start now too.
    IF v_start <= v_now THEN
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
    END IF;
    UPDATE rate_buckets b
    SET requests_at = v_req, tokens_at = v_tok, given_back = v_given,
        waits = b.waits + CASE WHEN v_start > v_now THEN 1 ELSE 0 END,
        waited = b.waited + (v_start - v_now)
    WHERE b.name = p_bucket;
    wait := v_start - v_now;
    start := v_start;
    requests_at := v_req;
    tokens_at := v_tok;
    held := false;
    granted := v_granted;
    given_back := v_given;
    RETURN NEXT;
END;
$$;
