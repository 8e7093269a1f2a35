-- harnessx schema, version 17 (SQLite): rate leases, several model calls' starts reserved in
-- one write (PostgreSQL's schema 35; see docs/scheduling.md, *Model rate limits*).
--
-- rate_buckets.given_back: the bucket's running total of request time (seconds) that leases
-- gave back unspent. A lease given back moves every later lease's share of the schedule that
-- much earlier; a lease given back after another counts the difference since its own grant
-- so that it never gives back time that is no longer ahead of now.

ALTER TABLE rate_buckets ADD COLUMN given_back REAL NOT NULL DEFAULT 0;
