-- harnessx schema, version 27 (PostgreSQL): a model call's rate reservation commits without
-- waiting for its WAL to reach the disk (synchronous_commit off, for that transaction alone).
--
-- Every reservation of a bucket updates the bucket's one row, and a row stays locked until
-- its transaction has committed: with a synchronous commit, until its WAL is flushed. So
-- the fleet's reservations of a bucket queued behind each other's disk flushes, and each
-- model call waited for one before it started (bench/scheduling.py, PostgreSQL: samples of
-- the server's backends put a third of the reservations' time in waiting for the bucket's
-- row, most of the rest in flushing WAL; a reservation alone took 2.5 ms, 0.4-0.9 ms
-- without the flush).
--
-- What an asynchronous commit risks is a crash of the database server itself (not of a
-- worker) in the moment before the walwriter flushes (a few hundred ms at most, and any
-- synchronous commit on the server meanwhile, such as any run's next checkpoint, flushes
-- it too): reservations made in that moment are lost, and calls reserved after the restart
-- may start as if those had not been made. Those calls' replies were lost with the crash
-- as well (a reply is only kept once its checkpoint commits, which flushes the reservation
-- before it), so the overshoot is bounded by the calls in flight at the crash.

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
    -- Local to the reservation's own transaction (it is one statement): see above.
    PERFORM set_config('synchronous_commit', 'off', true);
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
