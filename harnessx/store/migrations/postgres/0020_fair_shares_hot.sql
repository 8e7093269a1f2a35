-- harnessx schema, version 20 (PostgreSQL): the fair-share rows' updates are HOT.
--
-- Every queued run of a tenant updates its tenant's fair_shares row three times: its
-- submission counts it in (queued + 1), its claim counts it out (queued - 1) and advances
-- the tenant's pass. The index fair_shares_waiting (0009) was on pass + 1 / weight where
-- queued > 0, so none of those updates could be HOT: each left a dead version of the row and
-- a new entry in both indexes until autovacuum came (a minute or more on a busy store). The
-- claim reads the waiting tenants, and each submission the lowest pass, by scanning the
-- table, so a claim read thousands of dead versions for 50 tenants after a few hundred
-- runs, more with every run (bench/scheduling.py: 13 pages after 1,200 runs of 50 tenants,
-- the claim several times slower than when it started). Without that index no update of the
-- row changes an indexed column (the key, tenant, never changes), so each is HOT: the new
-- version goes on the same page and the old ones are pruned there, and the table stays at
-- its live rows' pages. fillfactor 50 keeps half of each new page for those updates. The
-- scan the index served is of the tenants with queued runs, a few thousand rows at most.

DROP INDEX fair_shares_waiting;

ALTER TABLE fair_shares SET (fillfactor = 50);
