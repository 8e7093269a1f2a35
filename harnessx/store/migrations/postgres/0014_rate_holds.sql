-- harnessx schema, version 14 (PostgreSQL): a pool run whose model call must wait long for
-- its rate budget gives its worker slot back and keeps its place in the bucket (see
-- docs/scheduling.md, *Waiting*).
--
-- rate_holds: a reservation kept for a run that went back to the queue until shortly before
-- its start (claimable again then, by not_before). The run's next reservation of the
-- bucket takes it instead of reserving anew, so its budget is spent once. Removed with the
-- run.
-- harnessx_reserve_rate takes the run (p_run, or NULL) and says whether it took a hold.

CREATE TABLE rate_holds (
    run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    bucket text NOT NULL,
    start  double precision NOT NULL,
    PRIMARY KEY (run_id, bucket)
);

DROP FUNCTION harnessx_reserve_rate(text, integer, integer);

CREATE FUNCTION harnessx_reserve_rate(p_bucket text, p_tokens integer, p_settle integer, p_run text)
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
    SELECT l.requests_per_minute, l.tokens_per_minute, l.burst_seconds INTO v_rpm, v_tpm, v_burst
    FROM rate_limits l
    WHERE l.pattern = p_bucket
       OR (right(l.pattern, 1) = '*' AND starts_with(p_bucket, left(l.pattern, -1)))
    ORDER BY l.pattern = p_bucket DESC, length(l.pattern) DESC
    LIMIT 1;
    IF NOT FOUND THEN
        DELETE FROM rate_holds h WHERE h.run_id = p_run AND h.bucket = p_bucket;
        RETURN;
    END IF;
    INSERT INTO rate_buckets AS b (name) VALUES (p_bucket)
    ON CONFLICT (name) DO UPDATE SET name = excluded.name
    RETURNING b.requests_at, b.tokens_at, b.paused_until INTO v_req, v_tok, v_paused;
    v_now := extract(epoch FROM clock_timestamp());
    IF v_tpm IS NOT NULL AND p_settle <> 0 THEN
        v_tok := v_tok + p_settle * 60.0 / v_tpm;
    END IF;
    IF p_run IS NOT NULL THEN
        DELETE FROM rate_holds h WHERE h.run_id = p_run AND h.bucket = p_bucket RETURNING h.start INTO v_held;
        IF FOUND THEN
            UPDATE rate_buckets b SET tokens_at = v_tok WHERE b.name = p_bucket;
            RETURN QUERY SELECT v_held - v_now, v_held, v_req, v_tok, true;
            RETURN;
        END IF;
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
    RETURN QUERY SELECT v_start - v_now, v_start, v_req, v_tok, false;
END;
$$;
