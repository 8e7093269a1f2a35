-- harnessx schema, version 12 (PostgreSQL): a model call's rate reservation in one statement,
-- and a vendor's Retry-After shared by the fleet (see docs/scheduling.md, *Model rate limits*).
--
-- rate_buckets.paused_until: no call of the bucket starts before then (epoch seconds of the
-- database clock): a vendor answered a call of the bucket 429 with Retry-After, and every
-- worker's next calls of it wait that out, not only the refused call's retry.
-- harnessx_reserve_rate: one reservation, the GCRA of harnessx/store/_scheduling.py's
-- reserve_rate, as one statement: the governing limit (the exact bucket, else the longest
-- prefix*), the bucket's row locked (created on first use), the database clock read once
-- the lock is held, the row written. The lock is held inside the server only, for
-- microseconds, not across round trips to a worker: reservations of one bucket take turns
-- without waiting for each other's network. p_settle tokens that earlier calls of the
-- bucket used beyond (negative: short of) what they reserved are settled first. No row: no
-- limit governs the bucket.

ALTER TABLE rate_buckets ADD COLUMN paused_until double precision NOT NULL DEFAULT 0;

CREATE FUNCTION harnessx_reserve_rate(p_bucket text, p_tokens integer, p_settle integer)
RETURNS TABLE (wait double precision, start double precision, requests_at double precision,
               tokens_at double precision)
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
BEGIN
    SELECT l.requests_per_minute, l.tokens_per_minute, l.burst_seconds INTO v_rpm, v_tpm, v_burst
    FROM rate_limits l
    WHERE l.pattern = p_bucket
       OR (right(l.pattern, 1) = '*' AND starts_with(p_bucket, left(l.pattern, -1)))
    ORDER BY l.pattern = p_bucket DESC, length(l.pattern) DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO rate_buckets AS b (name) VALUES (p_bucket)
    ON CONFLICT (name) DO UPDATE SET name = excluded.name
    RETURNING b.requests_at, b.tokens_at, b.paused_until INTO v_req, v_tok, v_paused;
    v_now := extract(epoch FROM clock_timestamp());
    IF v_tpm IS NOT NULL AND p_settle <> 0 THEN
        v_tok := v_tok + p_settle * 60.0 / v_tpm;
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
    RETURN QUERY SELECT v_start - v_now, v_start, v_req, v_tok;
END;
$$;
