-- harnessx schema, version 32 (PostgreSQL): the claim reads the queue in rank order through
-- its index again, whatever the statistics say, instead of sorting every queued run.
--
-- Since schema 28 the claim's statements use generic plans (planned once a session, without
-- the parameters' values), and its single-statement path passes over the runs of agents the
-- registry limits: `NOT (r.agent_ref = ANY (v_capped))`. Planned for an unknown array, that
-- condition is estimated from agent_ref's statistics: with few distinct agents among the runs
-- (a fleet of one agent: one), the planner takes an unknown value to be one of them and
-- counts on it removing nearly every row, so it expects one queued run where there are
-- thousands, and sorts them all (and looks up each one's session) rather than read the index
-- runs_tenant_queue in rank order. A claim of one run then cost 20 ms and 6,000 buffers with
-- 2,000 runs queued, 200 ms and 81,000 buffers with 20,000, growing with the queue where
-- schema 25's read a handful of index entries. (Schema 25's custom plans knew the claim's
-- size and had no such condition.) The cursor of the general path reads a tenant's queue
-- the same way and is open to the same misestimates.
--
-- As schema 15 ruled out bitmap scans, the function now plans without explicit sorts: the
-- queue's order then comes from its index at any estimate. Its other sorts (the reply's few
-- rows, the tenants' stride, a key's limit) have no plan without one and are kept; but a
-- plan with a sort ruled out is costed at 10^10, far over jit_above_cost, and a connection
-- with JIT on (the store's run with it off; psql, a pooler's, another client's do not)
-- compiled the claim's statements at every call: 0.9 s a claim. So JIT is off in the
-- function too (its statements are small, JIT never pays for itself there).

ALTER FUNCTION harnessx_claim_runs(text, text[], integer, double precision, text)
    SET enable_sort = off;
ALTER FUNCTION harnessx_claim_runs(text, text[], integer, double precision, text)
    SET jit = off;
