-- harnessx schema, version 10 (SQLite): a vendor's Retry-After shared by the fleet (see
-- docs/scheduling.md, *Model rate limits*).
--
-- rate_buckets.paused_until: no call of the bucket starts before then (epoch seconds): a
-- vendor answered a call of the bucket 429 with Retry-After, and every worker's next calls
-- of it wait that out, not only the refused call's retry.

ALTER TABLE rate_buckets ADD COLUMN paused_until REAL NOT NULL DEFAULT 0;
