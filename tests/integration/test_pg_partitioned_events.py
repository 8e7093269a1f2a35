"""Events partitioned by the day of their run (PostgreSQL, migration 0018).

A run's events are stored in the partition of the day its (version 7) id was made; the
statements that read one run's events read that partition alone (EXPLAIN, on a database with
several); the supervisor's leader keeps partitions made ahead, and an event whose day has no
partition fails with advice that works. An existing database is migrated while a worker keeps
running runs on it: no run fails and no event is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from typing import Any

import asyncpg
import pytest
from durable_support import make_agent

from harnessx import AgentRuntime, StorageError
from harnessx._ids import uuid7_time
from harnessx.store import PostgresBackend
from harnessx.store._migrations import load_migrations
from harnessx.store._queries import load_queries
from harnessx.testing import quote_ident
from supervisor._metrics import SupervisorMetrics
from supervisor._supervisor import Supervisor, SupervisorConfig

SCHEMA = "harness_x"
Q = load_queries("postgres")
DAY = 86400.0


async def connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})


async def fetch(dsn: str, query: str, *args: Any) -> list[Any]:
    conn = await connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def partitions(dsn: str) -> dict[str, str]:
    rows = await fetch(
        dsn,
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass",
    )
    return {str(name): str(bound) for name, bound in rows}


def day_partition(run_id: str) -> str:
    return "events_" + dt.datetime.fromtimestamp(uuid7_time(run_id), dt.UTC).strftime("%Y%m%d")


async def one_run(backend: PostgresBackend, message: str = "Write the EMEA report.") -> str:
    runtime = AgentRuntime(make_agent(policy="safe"), backend=backend)
    async with runtime:
        result = await runtime.run(message)
        assert result.ok, result
        return result.run_id


def scanned(plan: Any) -> list[str]:
    """The relations an EXPLAIN (FORMAT JSON) plan reads."""
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            found.append(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


async def test_a_run_s_events_are_in_the_partition_of_its_day(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        run_id = await one_run(backend)
        events = await backend.read_events(run_id, 0)
    made = await partitions(pg_database)
    # A new database: today's partition and the next 7 days', and the legacy one before them.
    assert len(made) >= 9 and "events_legacy" in made
    assert made["events_legacy"].startswith("FOR VALUES FROM (MINVALUE)")
    stored = await fetch(
        pg_database, "SELECT DISTINCT tableoid::regclass::text FROM events WHERE run_id = $1", run_id
    )
    assert [row[0] for row in stored] == [day_partition(run_id)]
    assert len(events) > 2 and [int(e.cursor) for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_reading_a_run_s_events_reads_its_partition_alone(pg_database: str, plan_mode: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        run_id = await one_run(backend)
    conn = await connect(pg_database)
    try:
        await conn.execute(f"SET plan_cache_mode = {plan_mode}")
        for name, args in [
            ("read_events", (run_id, 0, 100)),
        ]:
            (row,) = await conn.fetch(f"EXPLAIN (ANALYZE, FORMAT JSON) {Q[name]}", *args)
            plan = json.loads(row[0])
            assert [r for r in scanned(plan) if r.startswith("events")] == [day_partition(run_id)], plan
    finally:
        await conn.close()


async def test_the_supervisor_keeps_partitions_made_ahead(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        state = await backend.maintain_partitions(20 * DAY)
        assert state is not None and state.made >= 12
        assert state.covered_until is not None and state.covered_until >= time.time() + 19 * DAY
        again = await backend.maintain_partitions(20 * DAY)
        assert again is not None and again.made == 0 and again.count == state.count
        metrics = SupervisorMetrics()
        supervisor = Supervisor(backend, SupervisorConfig(partitions_ahead=30 * DAY), metrics=metrics)
        await supervisor._partitions()
        assert metrics.partitions_made._value.get() >= 10
        assert metrics.partitions_ahead._value.get() >= 29 * DAY
        assert metrics.partitions._value.get() == again.count + metrics.partitions_made._value.get()


async def test_an_event_whose_day_has_no_partition_fails_with_advice_that_works(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        await one_run(backend)
    # As if no supervisor had run since the partitions made by the migration ran out.
    conn = await connect(pg_database)
    try:
        for name in await partitions(pg_database):
            if name != "events_legacy":
                await conn.execute(f"DROP TABLE {quote_ident(name)}")
    finally:
        await conn.close()
    async with PostgresBackend(pg_database) as backend:
        with pytest.raises(StorageError) as caught:
            await one_run(backend, "And APAC.")
        message = str(caught.value)
        assert "no partition of events covers this run's day" in message
        advice = message.split("to make them now run: ", 1)[1].split(" (")[0]
        await fetch(pg_database, advice)
        await one_run(backend, "And APAC.")


# ------------------------------------------------------------------ migrating a live database


class RunningWorker(PostgresBackend):
    """A process that keeps running runs across the upgrade: it opened the store before the
    migration (and does not check the schema version again)."""

    async def _verify_on(self, conn: Any) -> None:
        return None


async def schema_17(dsn: str) -> None:
    """The database as the release before migration 0018 left it."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"CREATE SCHEMA {SCHEMA}")
            await conn.execute(f"SET LOCAL search_path = {SCHEMA}")
            await conn.execute(Q["create_migrations_table"])
            for migration in load_migrations("postgres"):
                if migration.version >= 18:
                    break
                await conn.execute(migration.body)
                await conn.execute(
                    Q["record_migration"], migration.version, migration.name, migration.checksum
                )
    finally:
        await conn.close()


async def test_migrating_a_live_database_loses_no_event_and_fails_no_run(pg_database: str) -> None:
    await schema_17(pg_database)
    # The statements of this release name harnessx_id_ms; the worker of the release before
    # did not. What the migration's first part creates anyway, created first for it.
    (migration,) = [m for m in load_migrations("postgres") if m.version == 18]
    function = migration.body.split("CREATE OR REPLACE FUNCTION harnessx_id_ms", 1)[1].split("$fn$;", 1)[0]
    await fetch(pg_database, "CREATE OR REPLACE FUNCTION harnessx_id_ms" + function + "$fn$;")
    worker = RunningWorker(pg_database, auto_migrate=False)
    await worker.initialize()
    finished: list[str] = []
    stop = asyncio.Event()

    async def keep_running() -> None:
        runtime = AgentRuntime(make_agent(policy="safe"), backend=worker)
        async with runtime:
            while not stop.is_set():
                result = await runtime.run(f"Report {len(finished)}.")
                assert result.ok, result
                finished.append(result.run_id)

    running = asyncio.create_task(keep_running())
    try:

        async def ran(count: int) -> None:
            while len(finished) < count:
                if running.done():
                    running.result()
                await asyncio.sleep(0.01)

        await asyncio.wait_for(ran(5), 60)
        before = len(finished)
        report = await asyncio.wait_for(PostgresBackend(pg_database).migrate(), 60)
        assert [m.version for m in report.applied] == [18]
        await asyncio.wait_for(ran(before + 5), 60)  # runs go on, on the partitioned table
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(running, 60)
    try:
        kind = await fetch(pg_database, "SELECT relkind::text FROM pg_class WHERE oid = 'events'::regclass")
        assert kind[0][0] == "p"
        made = await partitions(pg_database)
        assert "events_legacy" in made and len(made) >= 7
        # Every run's events, all there, in order, readable through the store.
        for run_id in finished:
            run = await worker.get_run(run_id)
            assert run is not None and run.status == "completed"
            events = await worker.read_events(run_id, 0)
            assert [int(e.cursor) for e in events] == list(range(1, run.event_count + 1)), run_id
        counts = await fetch(
            pg_database, "SELECT (SELECT count(*) FROM events), (SELECT sum(event_count) FROM runs)"
        )
        assert counts[0][0] == counts[0][1]
        # Rows made before the migration are in the old table, now the legacy partition.
        legacy = await fetch(pg_database, "SELECT count(*) FROM events_legacy")
        assert legacy[0][0] > 0
    finally:
        await worker.aclose()
    # A new backend of this release opens the migrated database and runs on it.
    async with PostgresBackend(pg_database, auto_migrate=False) as backend:
        await one_run(backend)


def test_a_migration_s_parts_run_before_and_after_failure_of_its_transaction() -> None:
    migrations = {m.version: m for m in load_migrations("postgres")}
    partitioned = migrations[18]
    assert len(partitioned.before) == 2 and all("DO $" in part for part in partitioned.before)
    assert "PARTITION BY RANGE (harnessx_id_ms(run_id))" in partitioned.body
    assert partitioned.on_failure is not None and "DROP CONSTRAINT" in partitioned.on_failure
    assert "VALIDATE CONSTRAINT" not in partitioned.body  # the long read is outside the transaction
    # A migration without markers is its body alone.
    assert migrations[1].before == () and migrations[1].body == migrations[1].sql
    assert migrations[1].on_failure is None
