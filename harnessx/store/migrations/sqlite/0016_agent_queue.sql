-- harnessx schema, version 16 (SQLite): each agent's queued runs of a tenant in rank order
-- (PostgreSQL's schema 33). A worker names the agents it serves; its claim read the tenant's
-- queue (runs_tenant_queue) in rank order and passed over every run of other agents ranked
-- before its own: 24 ms a claim with 20,000 of another agent's runs queued. It now reads each
-- named agent's queue through this index and merges them by rank as it goes
-- (harnessx/store/_sqlite_scheduling.py).

CREATE INDEX runs_agent_queue
    ON runs (tenant, agent_ref, max(queued_at, coalesce(not_before, queued_at)) - priority * 60.0)
    WHERE queued_at IS NOT NULL;
