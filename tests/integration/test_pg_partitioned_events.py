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
import re
import secrets
import time
import uuid
from typing import Any

import asyncpg
import pytest
from durable_support import make_agent

from harnessx import AgentRuntime, SchemaError, StorageError
from harnessx._compaction import compact_pass
from harnessx._events import RunEvent, RunEventType
from harnessx._ids import uuid7_time
from harnessx._results import RunStatus
from harnessx._retention import RetentionPolicy, prune_pass
from harnessx._state import Delta, Phase, RunPatch
from harnessx.store import PostgresBackend
from harnessx.store._archive import parse_record
from harnessx.store._migrations import load_migrations
from harnessx.store._pg_partitions import id_ms
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


async def sql_exec(dsn: str, query: str, *args: Any) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute(query, *args)
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
    """The relations an EXPLAIN (FORMAT JSON) plan reads or writes."""
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


# Every named statement that reads or writes one run's events, and which parameter is the run.
ONE_RUN = {
    name: int(match.group(1))
    for name, text in Q.items()
    if (match := re.search(r"harnessx_id_ms\(\$(\d+)\)", text))
}


SAMPLES = {"int8": 1, "int4": 1, "float8": 0.0, "bool": False, "json": "null", "jsonb": "null"}


def dummy(kind: Any, run_id: str, is_run: bool) -> Any:
    """A value of a statement parameter's type (the run's id for the run)."""
    if is_run:
        return run_id
    if kind.kind == "array":
        return []
    return SAMPLES.get(kind.name, "x")


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_every_statement_on_one_run_s_events_reads_its_partition_alone(
    pg_database: str, plan_mode: str
) -> None:
    assert {"read_events", "end_run", "defer_start", "forget_pruned_run"} <= set(ONE_RUN)
    async with PostgresBackend(pg_database) as backend:
        run_id = await one_run(backend)
        await backend.maintain_partitions(20 * DAY)  # many partitions to choose from
    conn = await connect(pg_database)
    try:
        await conn.execute(f"SET plan_cache_mode = {plan_mode}")
        for name, run_param in ONE_RUN.items():
            statement = await conn.prepare(f"EXPLAIN (FORMAT JSON) {Q[name]}")
            args = [dummy(t, run_id, n == run_param) for n, t in enumerate(statement.get_parameters(), 1)]
            plan = json.loads(await statement.fetchval(*args))
            # Only the run's day: initial pruning leaves the other partitions out of the plan.
            assert {r for r in scanned(plan) if r.startswith("events_")} == {day_partition(run_id)}, name
    finally:
        await conn.close()


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_compacting_a_run_reads_and_writes_its_partition_alone(
    pg_database: str, plan_mode: str
) -> None:
    async with PostgresBackend(pg_database) as backend:
        run_id = await one_run(backend)
        await backend.maintain_partitions(20 * DAY)
    conn = await connect(pg_database)
    try:
        await conn.execute(f"SET plan_cache_mode = {plan_mode}")
        key = [id_ms(run_id)]
        arguments = {
            "streamed_pieces": ([run_id], key),
            "compact_pieces": ([run_id], [3], ['"x"'], [run_id], [1], [2], [run_id], key, [run_id], [2]),
        }
        for name, args in arguments.items():
            statement = await conn.prepare(f"EXPLAIN (FORMAT JSON) {Q[name]}")
            plan = json.loads(await statement.fetchval(*args))
            assert {r for r in scanned(plan) if r.startswith("events_")} == {day_partition(run_id)}, name
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


# The migrations that partition events and drop their days; a database without them is
# what the release before them left, with every later migration of others applied (the
# statements of this release need those).
PARTITIONING = {
    m.version
    for m in load_migrations("postgres")
    if m.name in ("partitioned_events", "dropped_event_days", "pruned_run_events")
}


async def unpartitioned(dsn: str) -> None:
    """The database as a release without partitioned events left it."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"CREATE SCHEMA {SCHEMA}")
            await conn.execute(f"SET LOCAL search_path = {SCHEMA}")
            await conn.execute(Q["create_migrations_table"])
            for migration in load_migrations("postgres"):
                if migration.version in PARTITIONING:
                    continue
                await conn.execute(migration.body)
                await conn.execute(
                    Q["record_migration"], migration.version, migration.name, migration.checksum
                )
    finally:
        await conn.close()


async def with_id_ms(dsn: str) -> None:
    """The statements of this release name harnessx_id_ms; the worker of the release before
    did not. What the migration's first part creates anyway, created first for it."""
    (migration,) = [m for m in load_migrations("postgres") if m.version == 18]
    function = migration.body.split("CREATE OR REPLACE FUNCTION harnessx_id_ms", 1)[1].split("$fn$;", 1)[0]
    await fetch(dsn, "CREATE OR REPLACE FUNCTION harnessx_id_ms" + function + "$fn$;")


async def test_migrating_a_live_database_loses_no_event_and_fails_no_run(pg_database: str) -> None:
    await unpartitioned(pg_database)
    await with_id_ms(pg_database)
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
        assert {m.version for m in report.applied} == PARTITIONING
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


async def test_a_migration_that_loses_a_deadlock_to_a_running_transaction_goes_again(
    pg_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The swap (0018's last part) holds events and, dropping events' foreign key, waits for
    runs; a worker's transaction that changed runs and then writes events waits for the
    swap: a deadlock, which the server breaks by failing the migration's transaction (it
    waited first, so it looks first). The migrations' transaction is run again and applies."""
    await unpartitioned(pg_database)
    await with_id_ms(pg_database)
    worker = await connect(pg_database)
    try:
        transaction = worker.transaction()
        await transaction.start()
        # Long enough that this side never looks for the deadlock itself (it would be the one
        # failed, and the test would prove nothing).
        await worker.execute("SET LOCAL deadlock_timeout = '60s'")
        await worker.execute("LOCK TABLE runs IN ROW EXCLUSIVE MODE")
        migrating = asyncio.create_task(PostgresBackend(pg_database).migrate())

        async def swap_waits_for_runs() -> None:
            waiting = "SELECT count(*) FROM pg_locks WHERE relation = 'runs'::regclass AND NOT granted"
            while not (await worker.fetchval(waiting)):
                if migrating.done():
                    migrating.result()
                await asyncio.sleep(0.01)

        await asyncio.wait_for(swap_waits_for_runs(), 60)
        with caplog.at_level("WARNING", logger="harnessx.store.postgres"):
            # Granted once the server has failed the migration's transaction.
            await asyncio.wait_for(worker.execute("LOCK TABLE events IN ROW EXCLUSIVE MODE"), 60)
            await transaction.commit()
            report = await asyncio.wait_for(migrating, 60)
    finally:
        await worker.close()
    assert {m.version for m in report.applied} == PARTITIONING
    kind = await fetch(pg_database, "SELECT relkind::text FROM pg_class WHERE oid = 'events'::regclass")
    assert kind[0][0] == "p"
    assert any("DeadlockDetectedError" in r.getMessage() for r in caplog.records), caplog.text


async def catalog(dsn: str) -> list[Any]:
    """What a migration may change: the schema's relations, constraints (validated or not),
    functions and recorded migrations."""
    return await fetch(
        dsn,
        """
        SELECT 'relation', c.relname::text, c.relkind::text FROM pg_class c
        WHERE c.relnamespace = $1::regnamespace
        UNION ALL
        SELECT 'constraint', k.conname::text, k.convalidated::text FROM pg_constraint k
        WHERE k.connamespace = $1::regnamespace
        UNION ALL
        SELECT 'function', p.proname::text, md5(p.prosrc) FROM pg_proc p
        WHERE p.pronamespace = $1::regnamespace
        UNION ALL
        SELECT 'migration', version::text, checksum FROM harnessx_migrations
        ORDER BY 1, 2, 3
        """,
        SCHEMA,
    )


@contextlib.asynccontextmanager
async def reading_events(dsn: str) -> Any:
    """A transaction that read events and stays open (a long report, a session left idle in
    transaction): it holds a lock every change of the table's layout waits for."""
    conn = await connect(dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.fetch("SELECT count(*) FROM events")
        yield await conn.fetchval("SELECT pg_backend_pid()")
        await transaction.rollback()
    finally:
        await conn.close()


async def test_a_migration_that_cannot_take_its_lock_changes_nothing_and_says_what_to_do(
    pg_database: str,
) -> None:
    await unpartitioned(pg_database)
    await with_id_ms(pg_database)
    async with RunningWorker(pg_database, auto_migrate=False) as worker:
        await one_run(worker)
    before = await catalog(pg_database)
    async with reading_events(pg_database) as holder:
        with pytest.raises(SchemaError) as caught:
            await PostgresBackend(pg_database).migrate()
    message = str(caught.value)
    # Which migration, which table, who holds it, and what to do.
    assert "0018_partitioned_events" in message and "events" in message, message
    assert f"pid {holder}" in message, message
    assert "pg_terminate_backend" in message and "harnessx migrate" in message, message
    assert "Nothing was changed" in message, message
    assert await catalog(pg_database) == before
    report = await PostgresBackend(pg_database).migrate()
    assert {m.version for m in report.applied} >= PARTITIONING
    async with PostgresBackend(pg_database, auto_migrate=False) as backend:
        await one_run(backend)


async def test_a_swap_that_cannot_take_its_lock_leaves_a_migration_that_resumes(pg_database: str) -> None:
    """The long read (validating the constraint) is done; the swap, last in the migrations'
    transaction, waits at most 5 s for the table and fails; taking back the constraint needs
    the same lock and is given up too, without making every checkpoint wait behind it. The
    next migration skips the read and completes."""
    await unpartitioned(pg_database)
    (migration,) = [m for m in load_migrations("postgres") if m.name == "partitioned_events"]
    conn = await connect(pg_database)
    try:
        for part in migration.before:
            await conn.execute(part)
    finally:
        await conn.close()
    before = await catalog(pg_database)
    assert ("constraint", "events_before_partitions", "true") in before
    async with reading_events(pg_database) as holder:
        with pytest.raises(SchemaError) as caught:
            # Before the clean-up had a lock timeout of its own it waited here for as long as
            # the reader lived, with every statement on events queued behind it.
            await asyncio.wait_for(PostgresBackend(pg_database).migrate(), 60)
    message = str(caught.value)
    assert "0018_partitioned_events" in message and f"pid {holder}" in message, message
    assert "run the migration again soon, it resumes" in message, message
    assert await catalog(pg_database) == before  # the validated constraint is what remains
    report = await PostgresBackend(pg_database).migrate()
    assert {m.version for m in report.applied} >= PARTITIONING
    kind = await fetch(pg_database, "SELECT relkind::text FROM pg_class WHERE oid = 'events'::regclass")
    assert kind[0][0] == "p"


def test_a_migration_s_parts_run_before_and_after_failure_of_its_transaction() -> None:
    migrations = {m.version: m for m in load_migrations("postgres")}
    partitioned = migrations[18]
    assert len(partitioned.before) == 2 and all("DO $" in part for part in partitioned.before)
    # The swap is last in the transaction, the day partitions after it.
    assert "PARTITION BY RANGE (harnessx_id_ms(run_id))" in partitioned.last
    assert "PARTITION BY" not in partitioned.body
    assert len(partitioned.after) == 1 and "harnessx_add_event_partitions" in partitioned.after[0]
    assert partitioned.on_failure is not None and "DROP CONSTRAINT" in partitioned.on_failure
    assert "VALIDATE CONSTRAINT" not in partitioned.body  # the long read is outside the transaction
    # A migration without markers is its body alone.
    assert migrations[1].before == () and migrations[1].body == migrations[1].sql
    assert migrations[1].last == "" and migrations[1].after == ()
    assert migrations[1].on_failure is None


# ------------------------------------------------------------------ retention drops whole days

DAY_MS = 86_400_000


def id_at(ms: int) -> str:
    """A version 7 id made at Unix millisecond ``ms``."""
    value = (ms << 80) | (0x7 << 76) | (secrets.randbits(12) << 64) | (0b10 << 62) | secrets.randbits(62)
    return str(uuid.UUID(int=value))


async def with_past_day(dsn: str, days_ago: int = 3) -> int:
    """A migrated database whose events_legacy ends 10 days ago, with a day partition of
    ``days_ago`` days ago (as if the database had been partitioned for a while); that day's
    first millisecond."""
    async with PostgresBackend(dsn):
        pass
    midnight = int(time.time() * 1000) // DAY_MS * DAY_MS
    day = midnight - days_ago * DAY_MS
    conn = await connect(dsn)
    try:
        await conn.execute("ALTER TABLE events DETACH PARTITION events_legacy")
        await conn.execute("ALTER TABLE events_legacy DROP CONSTRAINT events_before_partitions")
        await conn.execute(
            f"ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) "
            f"TO ({midnight - 10 * DAY_MS})"
        )
        assert await conn.fetchval(Q["event_partition_for"], id_at(day + 1))
    finally:
        await conn.close()
    return day


async def finished_run(backend: PostgresBackend, run_id: str, *, finish: bool = True, events: int = 4) -> str:
    """A session with one run of id ``run_id`` and ``events`` events, completed (or left running)."""
    session_id = id_at(int(uuid7_time(run_id) * 1000))
    await backend.create_session(session_id, None, {})
    lease = await backend.claim(session_id, "h")
    stream = [
        RunEvent(RunEventType.TEXT_DELTA, f"e{n}", run_id=run_id, cursor=str(n)) for n in range(1, events)
    ]
    start = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}], events=stream)
    await backend.create_run(lease, run_id, None, "hi", start)
    if finish:
        state = await backend.load_state(run_id)
        last = RunEvent(RunEventType.TEXT_DELTA, "done", run_id=run_id, cursor=str(events))
        done = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED), events=[last])
        await backend.commit(lease, state, done, [])
    await backend.release(lease)
    return session_id


async def age(dsn: str, session_ids: list[str], days: int = 3) -> None:
    """Make the sessions' last activity ``days`` ago."""
    conn = await connect(dsn)
    try:
        ago = f"now() - interval '{days} days'"
        await conn.execute(
            f"UPDATE sessions SET created_at = {ago}, prune_check_at = '-infinity' WHERE id = ANY ($1)",
            session_ids,
        )
        await conn.execute(
            f"UPDATE runs SET created_at = {ago}, updated_at = {ago} WHERE session_id = ANY ($1)", session_ids
        )
    finally:
        await conn.close()


async def stored_events(dsn: str, run_id: str) -> int:
    return int((await fetch(dsn, "SELECT count(*) FROM events WHERE run_id = $1", run_id))[0][0])


POLICY = RetentionPolicy(older_than=DAY, batch=10)


async def test_retention_drops_a_day_once_none_of_its_runs_is_left(pg_database: str) -> None:
    day = await with_past_day(pg_database)
    async with PostgresBackend(pg_database) as backend:
        old = [id_at(day + 1000 * n) for n in range(1, 4)]
        sessions = [await finished_run(backend, run_id) for run_id in old]
        recent = await one_run(backend)
        await age(pg_database, sessions)
        partition = day_partition(old[0])
        assert len(await fetch(pg_database, f"SELECT 1 FROM {partition}")) == 12

        report = await prune_pass(backend, POLICY)
        assert report.sessions == 3 and report.rows["runs"] == 3
        # The prune removed the runs and left their events to go with their day.
        assert report.rows["events"] == 0
        assert sum([await stored_events(pg_database, r) for r in old]) == 12
        assert [await backend.read_events(r, 0) for r in old] == [[], [], []]  # not readable
        assert len(await fetch(pg_database, "SELECT 1 FROM pruned_runs")) == 3

        state = await backend.maintain_partitions(7 * DAY)
        assert state is not None and state.dropped == [partition] and state.problem is None
        assert state.purged == 0  # nothing row by row
        assert state.dropped_rows == 12  # as the prune counted them
        assert await fetch(pg_database, "SELECT to_regclass($1)", partition) == [(None,)]
        assert await fetch(pg_database, "SELECT 1 FROM pruned_runs") == []
        # The run of today, in another partition, is untouched.
        assert len(await backend.read_events(recent, 0)) > 2
        again = await backend.maintain_partitions(7 * DAY)
        assert again is not None and again.dropped == []


async def test_a_day_with_a_kept_run_stays_and_pruned_runs_go_row_by_row_after_the_grace(
    pg_database: str,
) -> None:
    day = await with_past_day(pg_database)
    async with PostgresBackend(pg_database) as backend:
        pruned, kept, unfinished = (id_at(day + 1000 * n) for n in range(1, 4))
        old = await finished_run(backend, pruned)
        still_used = await finished_run(backend, kept)  # finished, but recently active
        waiting = await finished_run(backend, unfinished, finish=False)
        await age(pg_database, [old, waiting])
        report = await prune_pass(backend, POLICY)
        assert report.sessions == 1
        partition = day_partition(pruned)

        state = await backend.maintain_partitions(7 * DAY)
        assert state is not None and state.dropped == [] and state.purged == 0
        assert await stored_events(pg_database, pruned) == 4  # within the grace: left for the day

        state = await backend.maintain_partitions(7 * DAY, grace=0)
        assert state is not None and state.dropped == [] and state.purged == 4
        assert await stored_events(pg_database, pruned) == 0
        assert await fetch(pg_database, "SELECT 1 FROM pruned_runs") == []
        assert len(await backend.read_events(kept, 0)) == 4
        assert len(await backend.read_events(unfinished, 0)) == 3
        assert await fetch(pg_database, "SELECT to_regclass($1)::text", partition) == [(partition,)]
        assert {s for (s,) in await fetch(pg_database, "SELECT id FROM sessions")} == {still_used, waiting}


async def test_an_archived_run_is_restored_whether_its_day_was_dropped_or_not(pg_database: str) -> None:
    day = await with_past_day(pg_database)
    async with PostgresBackend(pg_database) as backend:
        first, second = id_at(day + 1000), id_at(day + 2000)
        sessions = [await finished_run(backend, first), await finished_run(backend, second)]
        await age(pg_database, sessions)
        before = {r: await backend.read_events(r, 0) for r in (first, second)}
        records = [parse_record(json.dumps(r), "test") for r in await backend.export_sessions(sessions)]
        assert (await prune_pass(backend, POLICY)).sessions == 2
        # Restored while its events wait for the day to go: those are replaced, not doubled.
        assert await backend.import_session(next(r for r in records if r.session_id == sessions[0]))
        assert await backend.read_events(first, 0) == before[first]
        assert await stored_events(pg_database, first) == 4
        state = await backend.maintain_partitions(7 * DAY)  # the day holds a stored run again
        assert state is not None and state.dropped == []
        # Pruned again, the day dropped, then restored: the day's partition is made again.
        await age(pg_database, sessions[:1])
        assert (await prune_pass(backend, POLICY)).sessions == 1
        state = await backend.maintain_partitions(7 * DAY)
        assert state is not None and state.dropped == [day_partition(first)]
        assert await backend.import_session(next(r for r in records if r.session_id == sessions[1]))
        assert await backend.read_events(second, 0) == before[second]


async def test_the_events_of_a_dropped_day_are_counted_as_rows_pruned(pg_database: str) -> None:
    day = await with_past_day(pg_database)
    metrics = SupervisorMetrics()
    async with PostgresBackend(pg_database) as backend:
        old = [id_at(day + 1000 * n) for n in range(1, 4)]
        sessions = [await finished_run(backend, run_id, events=3 + n) for n, run_id in enumerate(old)]
        # One of them compacted: its 5 events are 2 rows (the pieces before its last one merged).
        await sql_exec(pg_database, "DELETE FROM compactable_runs WHERE run_id <> $1", old[2])
        assert (await compact_pass(backend, 0.0, batch=10)).rows == 3
        stored = await fetch(pg_database, f"SELECT count(*) FROM {day_partition(old[0])}")
        await age(pg_database, sessions)
        assert (await prune_pass(backend, POLICY)).rows["events"] == 0
        supervisor = Supervisor(backend, SupervisorConfig(partitions_ahead=7 * DAY), metrics=metrics)
        await supervisor._partitions()
    assert metrics.partitions_dropped._value.get() == 1
    # 3 + 4 + 2 rows, none deleted one by one: all of them went with their day, counted
    # without reading them (each run's events less what compaction removed).
    assert stored == [(9,)] and metrics.rows_pruned.labels(table="events")._value.get() == 9
