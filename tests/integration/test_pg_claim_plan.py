"""The queue claim reads the queue in rank order through its index, statistics or not
(PostgreSQL, schema 15).

A new database, or a queue that filled up since the last ANALYZE, has no statistics on
``runs``: the planner then guesses that ``tenant = ''`` matches a few rows and, left alone,
scans every queued run and sorts them for each claim (12 ms at 2,000 queued). The plan is
read from auto_explain's report of the statement inside ``harnessx_claim_runs``. With
statistics, a generic plan's misestimate did the same (schema 32): counted in buffers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from harnessx._state import Delta, Phase
from harnessx.store import PostgresBackend
from harnessx.store._scheduling import Schedule
from harnessx.testing import quote_ident

SCHEMA = "harness_x"
QUEUED = 2_000  # enough for the planner, left alone, to sort them (300 are not)


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


async def test_the_claim_reads_the_queue_index_in_rank_order_without_statistics(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as store:
        # Autovacuum would analyse runs while the queue fills up on a slow machine; this test
        # is about a queue the statistics have not seen yet.
        admin = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
        try:
            await admin.execute("ALTER TABLE runs SET (autovacuum_enabled = false)")
        finally:
            await admin.close()
        for n in range(QUEUED):
            await store.create_session(f"s{n}", "sales:v1", {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease, f"r{n}", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True
            )
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    try:
        stats = await conn.fetchval("SELECT count(*) FROM pg_stats WHERE tablename = 'runs'")
        assert stats == 0  # as in a new database: nothing analysed yet
        reports: list[str] = []
        conn.add_log_listener(lambda _, message: reports.append(message.message))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            await conn.execute(setting)
        transaction = conn.transaction()
        await transaction.start()
        try:
            claimed = await conn.fetch("SELECT run_id FROM harnessx_claim_runs('w/x', NULL, 8, 30, 'c1')")
        finally:
            await transaction.rollback()
        assert len(claimed) == 8
    finally:
        await conn.close()
    plans = [json.loads(report.split("plan:", 1)[1]) for report in reports if "plan:" in report]
    [claim] = [plan for plan in plans if "WITH candidates" in plan["Query Text"]]
    used = [(node["Node Type"], node.get("Index Name")) for node in nodes(claim["Plan"])]
    assert ("Index Scan", "runs_tenant_queue") in used, used
    assert not any(kind == "Bitmap Heap Scan" for kind, _ in used), used
    # The candidates come out of the index in rank order: nothing sorts the queue. (The
    # claimed few are sorted once more for the reply, above the limit.)
    limit = next(node for node in nodes(claim["Plan"]) if node["Node Type"] == "Limit")
    assert not any(node["Node Type"] == "Sort" for node in nodes(limit)), used


async def queue_copies(conn: asyncpg.Connection, run_id: str, upto: int, *, analyze: bool = True) -> None:
    """Runs ``run_id``-1 .. ``run_id``-``upto`` queued (those not there yet): copies of the
    queued run ``run_id`` and its session, made with SQL (a queue of thousands in a second);
    the tables analysed after, unless not ``analyze`` (which keeps the plans made before)."""
    renamed = {
        "sessions": {"id": "id || '-' || g.n"},
        "runs": {"id": "id || '-' || g.n", "session_id": "session_id || '-' || g.n"},
    }
    key = {"sessions": "id = (SELECT session_id FROM runs WHERE id = $1)", "runs": "id = $1"}
    async with conn.transaction():
        for table, names in renamed.items():
            columns = [
                str(row[0])
                for row in await conn.fetch(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = $1 "
                    "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position",
                    table,
                )
            ]
            values = ", ".join(names.get(name, name) for name in columns)
            await conn.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT {values} FROM {table}, "
                f"generate_series(1, $2) AS g(n) WHERE {key[table]} ON CONFLICT DO NOTHING",
                run_id,
                upto,
            )
    if analyze:
        await conn.execute("ANALYZE runs, sessions")


async def test_what_a_claim_reads_does_not_grow_with_the_queue(pg_database: str) -> None:
    # Schema 28's generic plans estimated that passing over the registry's limited agents
    # (`NOT agent_ref = ANY (...)`, an array not known when planned) leaves one queued run of
    # thousands when few agents have runs, and sorted the whole queue at every claim: 6,000
    # buffers with 2,000 runs queued, 81,000 with 20,000 (schema 32: the queue's index, in rank
    # order, at any estimate). Counted in buffers, with statistics on the queue (the test above
    # has none), on a connection with JIT on (schema 32's claim is costed past its threshold).
    async with PostgresBackend(pg_database) as store:
        await store.create_session("s", "sales:v1", {})
        lease = await store.claim("s", "submitter")
        await store.create_run(lease, "r", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    reports: list[str] = []
    read: dict[int, int] = {}
    try:
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = warning",  # the claims' reports only (set below)
        ):
            await conn.execute(setting)
        conn.add_log_listener(lambda _, message: reports.append(message.message))
        for queued in (200, 5_000):
            await queue_copies(conn, "r", queued)
            await conn.execute("SET client_min_messages = notice")
            for _ in range(2):  # the first call plans the function's statements
                transaction = conn.transaction()
                await transaction.start()
                try:
                    [plan] = json.loads(
                        await conn.fetchval(
                            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                            "SELECT * FROM harnessx_claim_runs('w/x', NULL, 1, 30, 'c1')"
                        )
                    )
                finally:
                    await transaction.rollback()
                assert plan["Plan"]["Actual Rows"] == 1
                read[queued] = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
            await conn.execute("SET client_min_messages = warning")
    finally:
        await conn.close()
    # 54 and 69 buffers (a deeper index reads a page more per descent); a sorted queue reads
    # every queued run's session (462 and 15,294 buffers on schema 31).
    assert read[5_000] < 2 * read[200], read
    plans = [json.loads(report.split("plan:", 1)[1]) for report in reports if "plan:" in report]
    assert plans and not [plan["Query Text"] for plan in plans if "JIT" in plan], "compiled by JIT"


async def test_a_tenants_fair_share_row_is_updated_in_place(pg_database: str) -> None:
    # Each queued run of a tenant updates its fair_shares row three times (queued in, claimed
    # out, the pass advanced). With no index on what those updates change (schema 20), each
    # is HOT: the table does not grow by a dead version per update until autovacuum.
    async with PostgresBackend(pg_database) as store:
        for n in range(20):
            await store.create_session(f"s{n}", "sales:v1", {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease,
                f"r{n}",
                None,
                "queued",
                Delta(Phase.PREPARE_MODEL_CALL),
                queued=True,
                schedule=Schedule(tenant=f"t{n % 4}"),
            )
        claimed = 0
        while taken := await store.claim_queued("w", None, 3):
            claimed += len(taken)
            for lease, _ in taken:
                await store.release(lease)
        assert claimed == 20
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    try:
        indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'fair_shares'")
        assert [row[0] for row in indexes] == ["fair_shares_pkey"]
        # 16 submissions of a tenant already counted and 20 claims, at least: wait until the
        # closed store's server processes have reported their updates.
        query = (
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'fair_shares'::regclass"
        )
        deadline = time.monotonic() + 30
        while (row := await conn.fetchrow(query))[0] < 36:
            assert time.monotonic() < deadline, f"the updates were never reported: {tuple(row)}"
            await asyncio.sleep(0.1)
        assert row[1] == row[0], f"{row[0] - row[1]} of {row[0]} updates were not HOT"
    finally:
        await conn.close()


async def test_a_claim_locks_only_the_runs_it_looks_at_and_another_goes_elsewhere(pg_database: str) -> None:
    # A claim locks the runs it looks at until it commits (SKIP LOCKED: others pass over
    # them). Schema 24: it looks at one run per run it takes (reading a tenant's queue ten
    # rows at a time, a claim of one locked the tenant's next nine too), and a claim made
    # meanwhile passes over the tenant the first is serving instead of waiting for its commit.
    async with PostgresBackend(pg_database) as store:
        for n, tenant in enumerate(["acme"] * 5 + ["zeta"] * 2):
            await store.create_session(f"s{n}", "sales:v1", {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease, f"r{n}", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True,
                schedule=Schedule(tenant=tenant),
            )  # fmt: skip
    settings = {"search_path": quote_ident(SCHEMA)}
    first = await asyncpg.connect(pg_database, server_settings=settings)
    second = await asyncpg.connect(pg_database, server_settings=settings)
    try:
        claim = "SELECT run_id FROM harnessx_claim_runs($1, NULL, 1, 30, $2) WHERE run_id IS NOT NULL"
        async with first.transaction():
            taken = await first.fetch(claim, "w/1", "c1")  # not committed yet
            assert [row[0] for row in taken] == ["r0"]
            async with second.transaction():
                assert await second.fetchval(
                    "SELECT count(*) FROM (SELECT FROM runs WHERE queued_at IS NOT NULL AND tenant = 'acme' "
                    "FOR UPDATE SKIP LOCKED) unlocked"
                ) == 4  # fmt: skip
                meanwhile = await asyncio.wait_for(second.fetch(claim, "w/2", "c2"), 10)
            assert [row[0] for row in meanwhile] == ["r5"]  # zeta's, with no wait for acme's row
    finally:
        await first.close()
        await second.close()


async def test_a_claim_naming_its_agents_passes_over_runs_another_claim_holds(pg_database: str) -> None:
    # Schema 33 reads a named agent's next runs without locking them, then locks them with
    # SKIP LOCKED: a run another claim holds is passed over and the next one read, so the
    # second claim neither takes the same run nor comes back empty.
    async with PostgresBackend(pg_database) as store:
        for n, agent in enumerate(["sales:v1", "batch:v1", "sales:v1", "sales:v1"]):
            await store.create_session(f"s{n}", agent, {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease, f"r{n}", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True
            )
    settings = {"search_path": quote_ident(SCHEMA)}
    first = await asyncpg.connect(pg_database, server_settings=settings)
    second = await asyncpg.connect(pg_database, server_settings=settings)
    try:
        claim = (
            "SELECT run_id FROM harnessx_claim_runs($1, '{sales:v1}', $2, 30, $3) WHERE run_id IS NOT NULL"
        )
        async with first.transaction():
            assert [row[0] for row in await first.fetch(claim, "w/1", 1, "c1")] == ["r0"]  # not committed
            async with second.transaction():
                meanwhile = await asyncio.wait_for(second.fetch(claim, "w/2", 2, "c2"), 10)
                assert [row[0] for row in meanwhile] == ["r2", "r3"]
    finally:
        await first.close()
        await second.close()


async def queue_tenants_runs(dsn: str, count: int) -> None:
    """Runs r0, r1, ... of tenant acme queued, each in its own session."""
    async with PostgresBackend(dsn) as store:
        for n in range(count):
            await store.create_session(f"s{n}", "sales:v1", {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease, f"r{n}", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True,
                schedule=Schedule(tenant="acme"),
            )  # fmt: skip


async def test_a_claim_finding_its_only_tenant_busy_waits_for_it_instead_of_coming_back_empty(
    pg_database: str,
) -> None:
    # One large tenant and two workers claiming at once: the second claim passes the tenant
    # over (another claim holds its row), finds nothing else, and then waits for the first
    # claim's commit and takes the tenant's next run (schema 25), where it came back empty.
    await queue_tenants_runs(pg_database, 5)
    settings = {"search_path": quote_ident(SCHEMA)}
    first = await asyncpg.connect(pg_database, server_settings=settings)
    second = await asyncpg.connect(pg_database, server_settings=settings)
    watcher = await asyncpg.connect(pg_database)
    try:
        claim = "SELECT run_id FROM harnessx_claim_runs($1, NULL, 1, 30, $2) WHERE run_id IS NOT NULL"
        transaction = first.transaction()
        await transaction.start()
        taken = await first.fetch(claim, "w/1", "c1")
        assert [row[0] for row in taken] == ["r0"]
        meanwhile = asyncio.ensure_future(second.fetch(claim, "w/2", "c2"))
        deadline = time.monotonic() + 30
        while not await watcher.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", second.get_server_pid()
        ):
            assert time.monotonic() < deadline and not meanwhile.done(), "the second claim never waited"
            await asyncio.sleep(0.02)
        await transaction.commit()
        assert [row[0] for row in await asyncio.wait_for(meanwhile, 30)] == ["r1"]
    finally:
        await first.close()
        await second.close()
        await watcher.close()


async def test_a_claim_does_not_wait_for_a_busy_tenant_whose_runs_the_other_claim_holds(
    pg_database: str,
) -> None:
    # Two idle workers woken for one run: the claim that loses the tenant's row finds every
    # run of the tenant locked by the other claim, so waiting could not give it one. It comes
    # back empty at once (schema 40), where it waited for the other's commit, took nothing,
    # and committed a transaction of its own (the tenant's row lock) as the run started.
    await queue_tenants_runs(pg_database, 1)
    settings = {"search_path": quote_ident(SCHEMA)}
    first = await asyncpg.connect(pg_database, server_settings=settings)
    second = await asyncpg.connect(pg_database, server_settings=settings)
    try:
        claim = "SELECT run_id FROM harnessx_claim_runs($1, NULL, 8, 30, $2) WHERE run_id IS NOT NULL"
        transaction = first.transaction()
        await transaction.start()
        assert [row[0] for row in await first.fetch(claim, "w/1", "c1")] == ["r0"]
        # Answered while the first claim still holds the tenant's row and the run.
        assert await asyncio.wait_for(second.fetch(claim, "w/2", "c2"), 10) == []
        await transaction.commit()
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize(("tenants", "expected"), [(3, 13), (1, 12)], ids=["three-tenants", "one-tenant"])
async def test_a_claim_through_tenants_and_a_key_limit_runs_a_known_number_of_statements(
    pg_database: str, tenants: int, expected: int
) -> None:
    # The general path's cost is mostly statements (each one an executor run, some a plan):
    # counted from auto_explain's report of every statement the claim of one run ran,
    # triggers' and foreign-key checks' included: 21 before schema 28 (what waits and what is
    # limited read at once, a run written by one statement, not three), 16 with it, 14 with
    # schema 30 (no lookup of a limit on the run's agent when nothing can limit agents), 13
    # with schema 37 (the key's lock not taken through a SQL function). With one tenant
    # waiting, as when runs come one at a time to idle workers, schema 37 deals no tags and
    # does not look for another tenant after it: 12, where it was 15.
    async with PostgresBackend(pg_database) as store:
        await store.set_concurrency_limit("key:*", 100)
        for n in range(6):
            await store.create_session(f"s{n}", "sales:v1", {})
            lease = await store.claim(f"s{n}", "submitter")
            await store.create_run(
                lease, f"r{n}", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True,
                schedule=Schedule(concurrency_key=f"key:{n % tenants}"),
            )  # fmt: skip
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    try:
        claim = "SELECT run_id FROM harnessx_claim_runs('w/1', NULL, $2, 30, $1) WHERE run_id IS NOT NULL"
        for warm in range(2):  # the connection's plans made; two runs driving
            assert len(await conn.fetch(claim, f"warm{warm}", 1)) == 1
        if tenants == 1:  # one run left: the claim wants more than the tenant has
            assert len(await conn.fetch(claim, "warm2", 3)) == 3
        reports: list[str] = []
        conn.add_log_listener(lambda _, message: reports.append(message.message))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            await conn.execute(setting)
        # key:2's tenant, next in line; or the one tenant's last run
        wanted, expected_run = (1, "r2") if tenants == 3 else (8, "r5")
        assert [row[0] for row in await conn.fetch(claim, "c", wanted)] == [expected_run]
    finally:
        await conn.close()
    statements = [
        report.split("Query Text:", 1)[-1].strip().split("\n")[0] for report in reports if "plan:" in report
    ]
    assert len(statements) == expected, "\n".join(statements)


@pytest.mark.parametrize("own", [True, False], ids=["own-run", "none-own"])
@pytest.mark.parametrize("tenant", ["", "acme"], ids=["untenanted", "tenant"])
async def test_a_claim_naming_its_agents_does_not_read_other_agents_backlog(
    pg_database: str, tenant: str, own: bool
) -> None:
    # A worker names the agents it serves (`p_agents`). Through schema 32 its claim read the
    # queue in rank order and passed over every run of other agents ranked before its own:
    # 1,256 buffers a claim with 20,000 of another agent's runs queued. Schema 33 reads each named agent's
    # queue through its own index and merges them by rank, on the single-statement path
    # (untenanted) and in a tenant's alike; also when no run of its agents waits, when the
    # statistics know one agent only (a plan that took the tenant's queue index for as good).
    schedule = Schedule(tenant=tenant or None)
    queued_runs = [("other", "batch:v1", "r")] + ([("mine", "sales:v1", "own")] if own else [])
    async with PostgresBackend(pg_database) as store:
        for session, agent, run in queued_runs:
            # The worker's own run is queued last: ranked behind all the others'.
            await store.create_session(session, agent, {})
            lease = await store.claim(session, "submitter")
            await store.create_run(
                lease, run, None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True, schedule=schedule
            )
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    read: dict[int, int] = {}
    try:
        for queued in (200, 5_000):
            await queue_copies(conn, "r", queued)
            # Copied in one transaction, the runs' counting into their tenant's row left as
            # many versions of it as runs (submissions one by one leave it a page: pruned).
            await conn.execute("VACUUM FULL fair_shares")
            for _ in range(2):  # the first call plans the function's statements
                transaction = conn.transaction()
                await transaction.start()
                try:
                    [plan] = json.loads(
                        await conn.fetchval(
                            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                            "SELECT * FROM harnessx_claim_runs('w/x', '{sales:v1}', 1, 30, 'c1')"
                        )
                    )
                    taken = await conn.fetchval(
                        "SELECT array_agg(run_id) FROM harnessx_claim_runs('w/x', '{sales:v1}', 1, 30, 'c2')"
                    )
                finally:
                    await transaction.rollback()
                assert plan["Plan"]["Actual Rows"] == (1 if own else 0)
                assert taken is None  # the first claim took the worker's only run, if any
                read[queued] = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
    finally:
        await conn.close()
    # Schema 33: 81 and 76 buffers untenanted, 74 and 91 in a tenant (a claim there writes its
    # run by a statement of its own, into indexes a level deeper); 4 and 4, 8 and 9 with none
    # of the worker's runs queued. Schema 32: 65 and 326, 79 and 341; 13 and 259, 17 and 265.
    assert read[5_000] < 1.5 * read[200], read


async def claim_buffers(conn: asyncpg.Connection, agents: str) -> int:
    """Buffers one claim of one run by a worker naming ``agents`` reads (rolled back)."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        [plan] = json.loads(
            await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                f"SELECT * FROM harnessx_claim_runs('w/x', '{agents}', 1, 30, 'c1')"
            )
        )
    finally:
        await transaction.rollback()
    assert plan["Plan"]["Actual Rows"] == 1
    return int(plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"])


async def test_a_claim_planned_on_small_tables_still_finds_runs_by_key(pg_database: str) -> None:
    # The claim's plans are made at a connection's first claim and kept until the tables are
    # analysed again. Through schema 35, two made on small tables read whole tables later:
    # with an agent under a registry's max_concurrent, whether such an agent had runs queued
    # was a scan of every run, and the runs a worker naming its agents had picked were looked
    # up by scanning the queue index rather than by their ids. Counted in buffers, with the
    # tables grown by thousands of queued runs after the plans were made (no ANALYZE between).
    async with PostgresBackend(pg_database) as store:
        await store.publish_agent_defaults({"capped:v1": (None, 2)})
        await store.create_session("mine", "sales:v1", {})
        lease = await store.claim("mine", "submitter")
        await store.create_run(lease, "own", None, "queued", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": quote_ident(SCHEMA)})
    try:
        for table in ("runs", "sessions"):
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        # As on a pool that has run a while: a thousand runs finished, the queue empty but
        # for one run, and the tables analysed so.
        await queue_copies(conn, "own", 1_000, analyze=False)
        await conn.execute("UPDATE runs SET queued_at = NULL, status = 'completed' WHERE id LIKE 'own-%'")
        await conn.execute("VACUUM ANALYZE runs, sessions")
        await claim_buffers(conn, "{sales:v1}")  # plans the function's statements
        small = await claim_buffers(conn, "{sales:v1}")
        await queue_copies(conn, "own", 4_000, analyze=False)  # 3,000 more runs, queued
        grown = await claim_buffers(conn, "{sales:v1}")
    finally:
        await conn.close()
    # Schema 36: 78 and 76 buffers. Schema 35: 79 and 9,389 (the queue index read whole by id,
    # and every run read for the capped agent).
    assert grown < 1.5 * small, (small, grown)
