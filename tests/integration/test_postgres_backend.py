"""PostgresBackend against a real server: migrations, fencing, liveness, notifications,
retries, secrets and privileges. (The runtime itself runs on both backends in
test_runtime.py; this file covers what is specific to PostgreSQL.)"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import re
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from harnessx import ConfigurationError, LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunResult, RunStatus
from harnessx._state import Delta, Phase, RunPatch, ToolEntry, ToolStatus
from harnessx.providers._base import ToolCall
from harnessx.store import PostgresBackend
from harnessx.store._listing import list_statement
from harnessx.store._migrations import load_migrations
from harnessx.store._pg_checkpoint import (
    ROW_SETS,
    SCALARS,
    Shape,
    all_group_shapes,
    all_shapes,
    checkpoint_statement,
    group_statement,
)
from harnessx.store._postgres import redact_dsn, runtime_grants
from harnessx.store._protocol import Lease, WorkerInfo
from harnessx.store._queries import load_queries
from harnessx.testing import ThrowawayCluster, free_port, quote_ident, run_psql

SCHEMA = "harness_x"
Q_PG = load_queries("postgres")
LISTING_FILTERS = ("status", "not_queued", "queued", "agent_ref", "session_id", "run_id", "request_id",
                   "created_from", "created_to", "before")  # fmt: skip
TABLES = {
    "audit",
    "console_logins",
    "sessions",
    "runs",
    "messages",
    "tool_calls",
    "leadership",
    "events",
    "journal",
    "tool_results",
    "workers",
    "harnessx_migrations",
    "run_claims",
    "concurrency_limits",
    "agent_defaults",
    "fair_shares",
    "rate_limits",
    "rate_buckets",
    "rate_holds",
    "pruned_runs",
    "compactable_runs",
}


# ---------------------------------------------------------------------------- helpers


async def sql(dsn: str, query: str, *args: Any) -> list[Any]:
    """Run one statement on a connection of its own (no harnessx involved)."""
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def script(dsn: str, statements: str) -> None:
    """Run several ';'-separated statements (simple query protocol)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statements)
    finally:
        await conn.close()


def dsn_as(dsn: str, user: str, password: str | None = None) -> str:
    parts = urlsplit(dsn)
    auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
    return urlunsplit(parts._replace(netloc=f"{auth}@{parts.hostname}:{parts.port}"))


def event(run_id: str, seq: int, kind: RunEventType = RunEventType.TEXT_DELTA, text: str = "") -> RunEvent:
    return RunEvent(kind, text or f"e{seq}", run_id=run_id, cursor=str(seq))


def tool_entry(run_id: str, status: ToolStatus = ToolStatus.PREPARED, *, iteration: int = 0) -> ToolEntry:
    call = ToolCall("call_1", "write_report", {"region": "EMEA"})
    return ToolEntry(f"{run_id}:{iteration}:call_1", iteration, 0, call, "manual", status)


# The model's reply, as a checkpoint at phase model_call commits it (a loaded run must have one).
REPLY = {"role": "assistant", "content": "On it."}


async def start_run(
    backend: PostgresBackend, session_id: str, run_id: str, *, holder: str = "h", events: int = 1
) -> Lease:
    """A session with one run whose first boundary holds one message and ``events`` events."""
    await backend.create_session(session_id, None, {})
    lease = await backend.claim(session_id, holder)
    start = Delta(
        Phase.PREPARE_MODEL_CALL,
        messages=[{"role": "user", "content": "hi"}],
        events=[event(run_id, seq) for seq in range(1, events + 1)],
    )
    await backend.create_run(lease, run_id, None, "hi", start)
    return lease


async def expire(dsn: str, session_id: str, schema: str = SCHEMA) -> None:
    await sql(
        dsn,
        f"UPDATE {quote_ident(schema)}.sessions SET lease_expires_at = now() - interval '1 s' WHERE id = $1",
        session_id,
    )


async def count(dsn: str, table: str, where: str = "true", *args: Any) -> int:
    rows = await sql(dsn, f"SELECT count(*) FROM {SCHEMA}.{table} WHERE {where}", *args)
    return int(rows[0][0])


async def spawn(code: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line:
        out, err = await proc.communicate()
        raise AssertionError(f"child exited {proc.returncode}:\n{out.decode()}\n{err.decode()}")
    return line.decode().strip()


@contextlib.asynccontextmanager
async def backends(dsn: str, n: int, **kwargs: Any) -> AsyncIterator[list[PostgresBackend]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(PostgresBackend(dsn, **kwargs)) for _ in range(n)]


async def eventually(check: Callable[[], Any]) -> float:
    """Poll a predicate (plain or async) until it is true; return how long that took."""
    began = time.monotonic()
    while not await _value(check()):
        assert time.monotonic() - began < 5.0, "condition not met in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - began


async def _value(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def waiting_for_events(backend: PostgresBackend, run_id: str) -> asyncio.Task[None]:
    """A wait for ``run_id``'s next commit that is under way: registered, with the run
    announced as followed and the events channel listened on, so that only a notification
    ends it early. (A wait that has just begun to listen or to announce returns at once, for
    its caller to look again: then another is started.)"""
    notifications = backend._notifications

    def underway() -> bool:
        return (
            notifications._runs._waiting.get(run_id, 0) > 0
            and notifications.events_channel in notifications._listening
            and notifications._watching.get(("watch", run_id), 0.0) > time.monotonic()
        )

    def settled(task: asyncio.Task[None]) -> bool:
        return task.done() or underway()

    for _ in range(5):
        task = asyncio.create_task(backend.wait_for_events(run_id, 30))
        await eventually(functools.partial(settled, task))
        if not task.done():
            return task
    raise AssertionError(f"every wait for run {run_id} returned at once")


async def waiting_for_work(backend: PostgresBackend) -> asyncio.Task[bool]:
    """A wait for queued work that is under way (the process already listens for work)."""
    notifications = backend._notifications
    task = asyncio.create_task(backend.wait_for_work(30))
    await eventually(lambda: task.done() or notifications._work._waiters)
    assert not task.done(), "the wait for work returned at once"
    return task


# ------------------------------------------------------------------------- migrations


async def test_fresh_database_is_migrated_once_and_reopening_is_idempotent(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        await backend.migrate()  # again: nothing to do
    async with PostgresBackend(pg_database, auto_migrate=False) as backend:
        await backend.migrate()

    expected = [(m.version, m.name, m.checksum) for m in load_migrations("postgres")]
    rows = await sql(pg_database, f"SELECT version, name, checksum FROM {SCHEMA}.harnessx_migrations")
    assert [tuple(r) for r in rows] == expected
    # Tables other than the partitions of events (migration 17), which come and go by day.
    tables = await sql(
        pg_database,
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname <> 'pg_catalog'",
    )
    assert {(s, t) for s, t in tables if s != "information_schema"} == {(SCHEMA, t) for t in TABLES}


async def test_migrate_works_on_a_backend_that_was_never_opened(pg_database: str) -> None:
    await PostgresBackend(pg_database, schema="by_command").migrate()
    rows = await sql(pg_database, "SELECT count(*) FROM by_command.harnessx_migrations")
    assert rows[0][0] == len(load_migrations("postgres"))


async def test_every_named_query_is_valid_sql(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend, backend._pool.acquire() as conn:
        for name, query in load_queries("postgres").items():
            if name == "list_runs":  # named parameters: prepared with every filter numbered
                query = list_statement("postgres", frozenset(LISTING_FILTERS))[0]
            try:
                await conn.prepare(query)
            except asyncpg.PostgresError as exc:  # pragma: no cover - the message is the point
                pytest.fail(f"query {name!r} does not prepare: {exc}")
        # Every shape of checkpoint statement too: each prepares, and the server types its
        # parameters as declared (a row set's columns as their element types when the shape
        # sends one row as plain values).
        for shape in all_shapes():
            statement = checkpoint_statement(shape)
            try:
                prepared = await conn.prepare(statement.text)
            except asyncpg.PostgresError as exc:  # pragma: no cover - the message is the point
                pytest.fail(f"checkpoint statement {shape} does not prepare: {exc}")
            expected = [declared_type(shape, name) for name in statement.params]
            assert [param.name for param in prepared.get_parameters()] == expected, shape
        # And every shape of the group commit's statement (all its row sets are arrays).
        for group_shape in all_group_shapes():
            grouped = group_statement(group_shape)
            try:
                prepared = await conn.prepare(grouped.text)
            except asyncpg.PostgresError as exc:  # pragma: no cover - the message is the point
                pytest.fail(f"group statement {group_shape} does not prepare: {exc}")
            assert [param.name for param in prepared.get_parameters()] == ["json"] * len(grouped.params)


def declared_type(shape: Shape, name: str) -> str:
    """The type name PostgreSQL reports for a checkpoint parameter as _pg_checkpoint declares it."""
    if "." not in name:
        declared = SCALARS[name]
    else:
        set_name, column = name.split(".")
        row_set = ROW_SETS[set_name]
        element = dict(row_set.columns)[column]
        single = row_set.single and shape.rows(set_name) == 1
        declared = element if single else f"{element}[]"
    names = {"float8": "float8", "integer": "int4", "bigint": "int8", "boolean": "bool"}
    element = declared.removesuffix("[]")
    return names.get(element, element) + ("[]" if declared.endswith("[]") else "")


async def test_schema_checks_name_the_versions_the_dsn_and_the_command(pg_database: str) -> None:
    redacted = redact_dsn(pg_database)
    with pytest.raises(SchemaError) as missing:
        await PostgresBackend.connect(pg_database, auto_migrate=False)
    text = str(missing.value)
    newest = len(load_migrations("postgres"))
    assert f"no harnessx schema (version 0; this harnessx needs version {newest})" in text
    # The DSN goes in the environment, never on a command line.
    assert redacted in text and f"'harnessx migrate' with HARNESSX_DSN set to {redacted}" in text

    await (await PostgresBackend.connect(pg_database)).aclose()
    await (await PostgresBackend.connect(pg_database, auto_migrate=False)).aclose()  # up to date

    await sql(pg_database, f"INSERT INTO {SCHEMA}.harnessx_migrations VALUES (99, 'future', 'x', now())")
    for auto_migrate in (True, False):
        with pytest.raises(
            SchemaError, match=rf"schema version 99, newer than this harnessx knows \({newest}\)"
        ):
            await PostgresBackend.connect(pg_database, auto_migrate=auto_migrate)
    await sql(pg_database, f"DELETE FROM {SCHEMA}.harnessx_migrations WHERE version = 99")

    migrations = f"{SCHEMA}.harnessx_migrations"
    (checksum,) = (await sql(pg_database, f"SELECT checksum FROM {migrations} WHERE version = 1"))[0]
    await sql(pg_database, f"UPDATE {SCHEMA}.harnessx_migrations SET checksum = 'tampered' WHERE version = 1")
    for auto_migrate in (True, False):
        with pytest.raises(SchemaError, match=r"0001_initial was altered after it was applied"):
            await PostgresBackend.connect(pg_database, auto_migrate=auto_migrate)

    await sql(pg_database, f"UPDATE {migrations} SET checksum = $1 WHERE version = 1", checksum)
    await sql(pg_database, f"DELETE FROM {SCHEMA}.harnessx_migrations WHERE version >= 2")
    with pytest.raises(
        SchemaError, match=rf"at schema version 1, this harnessx needs version {newest}: run 'harnessx"
    ):
        await PostgresBackend.connect(pg_database, auto_migrate=False)


# What each migration after the first added, undone in reverse order: the database as an
# older harnessx left it.
def _view_of(version: int) -> str:
    """The CREATE VIEW runs_now statement migration ``version`` left behind."""
    text = load_migrations("postgres")[version - 1].sql
    return re.search(r"CREATE (?:OR REPLACE )?VIEW runs_now AS.*?;", text, re.S).group(0)  # type: ignore[union-attr]


UNDO_MIGRATION = {
    19: "ALTER TABLE sessions DROP COLUMN awaited_until",
    9: "DROP TRIGGER runs_queued_insert ON runs; DROP TRIGGER runs_queued_update ON runs; "
    "DROP TRIGGER runs_queued_delete ON runs; DROP FUNCTION harnessx_count_queued(); "
    "DROP FUNCTION harnessx_claim_runs(text, text[], integer, double precision, text); "
    "DROP FUNCTION IF EXISTS harnessx_limit_of(text); DROP VIEW runs_now; DROP INDEX runs_tenant_queue; "
    "DROP INDEX runs_agent_queue; "  # schema 33's, on the rank function
    "DROP FUNCTION harnessx_queue_rank(timestamptz, timestamptz, integer); "
    "DROP TABLE run_claims, concurrency_limits, agent_defaults, fair_shares, rate_limits, rate_buckets; "
    "ALTER TABLE runs DROP COLUMN concurrency_key, DROP COLUMN tenant, DROP COLUMN claimed_at, "
    "DROP COLUMN claim_generation; " + _view_of(8),
    8: "DROP VIEW runs_now; ALTER TABLE runs DROP COLUMN start_attempts, DROP COLUMN not_before; "
    + _view_of(7),
    6: "DROP TABLE tool_results",
    5: "DROP TABLE leadership",
    4: "DROP TABLE journal; ALTER TABLE sessions DROP COLUMN recording",
    3: "DROP TRIGGER sessions_release_progress ON sessions; "
    "DROP TRIGGER sessions_settle_progress ON sessions; "
    "DROP FUNCTION harnessx_release_progress(); DROP FUNCTION harnessx_settle_progress(); "
    "DROP VIEW runs_now; ALTER TABLE sessions DROP COLUMN current_run, DROP COLUMN current_phase, "
    "DROP COLUMN current_event_count, DROP COLUMN current_updated_at",
    2: "ALTER TABLE sessions DROP COLUMN watched_until",
}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7, 8])
async def test_an_older_database_with_a_run_in_flight_upgrades_in_place(
    pg_database: str, version: int
) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        state = await backend.load_state("r1")
        # Written to the run's row, as every checkpoint before version 3 was.
        await backend.commit(
            lease, state, Delta(Phase.MODEL_CALL, messages=[REPLY], run=RunPatch(iteration=1)), []
        )
    for undone in sorted(UNDO_MIGRATION, reverse=True):
        if undone > version:
            await script(pg_database, f"SET search_path TO {SCHEMA}; {UNDO_MIGRATION[undone]}")
            await sql(pg_database, f"DELETE FROM {SCHEMA}.harnessx_migrations WHERE version = $1", undone)
    async with PostgresBackend(pg_database) as backend:
        versions = await sql(pg_database, f"SELECT version FROM {SCHEMA}.harnessx_migrations ORDER BY 1")
        assert [row[0] for row in versions] == [m.version for m in load_migrations("postgres")]
        record = await backend.get_run("r1")
        assert record is not None and (record.phase, record.event_count) == ("model_call", 1)
        lease = await backend.claim("s", lease.owner)  # the same holder takes its session again
        await backend.append_events(lease, "r1", [event("r1", 2)])
        state = await backend.load_state("r1")
        await backend.commit(lease, state, Delta(Phase.RAW_RESULT, events=[event("r1", 3)]), [])
        record = await backend.get_run("r1")
        assert record is not None and (record.phase, record.event_count) == ("raw_result", 3)
        await backend.wait_for_events("r1", 0.01)  # announces itself in the new column
        assert [e.cursor for e in await backend.read_events("r1", 1)] == ["2", "3"]


MIGRATOR = """
import asyncio, logging, sys
from harnessx.store import PostgresBackend

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")

async def main(dsn):
    print("ready", flush=True)
    sys.stdin.readline()  # all three start together
    async with PostgresBackend(dsn):
        pass

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.process
async def test_three_processes_provision_an_empty_database_exactly_once(pg_database: str) -> None:
    children = [await spawn(MIGRATOR, pg_database) for _ in range(3)]
    for child in children:
        assert await read_line(child) == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
    outputs = [await asyncio.wait_for(child.communicate(), 60) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err.decode()
    logs = "".join(err.decode() for _, err in outputs)
    assert logs.count("applied migration 0001_initial") == 1, logs
    rows = await sql(
        pg_database, f"SELECT version, count(*) FROM {SCHEMA}.harnessx_migrations GROUP BY 1 ORDER BY 1"
    )
    assert [tuple(r) for r in rows] == [(m.version, 1) for m in load_migrations("postgres")]


@pytest.mark.parametrize("schema", ['weird "Schema"; DROP TABLE x; --', "Ünïcode schéma", "UPPER"])
async def test_any_schema_name_is_quoted_everywhere(pg_database: str, schema: str) -> None:
    async with PostgresBackend(pg_database, schema=schema) as a, PostgresBackend(pg_database) as other:
        lease = await start_run(a, "s", "r1", events=2)
        assert await a.process_alive(lease.owner)
        state = await a.load_state("r1")
        done = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED), events=[event("r1", 3)])
        await a.commit(lease, state, done, [])
        assert [e.cursor for e in await a.read_events("r1", 0)] == ["1", "2", "3"]
        renewal = await a.renew([lease])
        assert renewal.held == {"s"}
        await other.create_session("s", None, {})  # the same id in another schema is another session
        assert await other.latest_run("s") is None
    found = await sql(
        pg_database,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        schema,
    )
    assert {r[0] for r in found} == TABLES
    assert await sql(pg_database, "SELECT nspname FROM pg_namespace WHERE nspname = $1", schema)


# ----------------------------------------------------------------- fencing and leases


async def test_a_stale_writer_is_fenced_and_writes_nothing(pg_database: str) -> None:
    async with backends(pg_database, 2) as (a, b):
        await a.create_session("s", None, {})
        stale = await a.claim("s", "a")
        await expire(pg_database, "s")
        # Expired but not yet taken over: still refused.
        with pytest.raises(LeaseLostError):
            await a.create_run(stale, "r0", None, "hi", Delta(Phase.PREPARE_MODEL_CALL))

        fresh = await b.claim("s", "b")  # a is alive, but its lease expired
        assert fresh.generation == stale.generation + 1
        start = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}])
        await b.create_run(fresh, "r1", None, "hi", start)
        state = await b.load_state("r1")

        step = Delta(
            Phase.PREPARE_TOOLS,
            messages=[{"role": "assistant", "content": "zombie"}],
            tools=[tool_entry("r1")],
            run=RunPatch(iteration=7),
            events=[event("r1", 2)],
        )
        with pytest.raises(LeaseLostError, match=rf"session s \(generation {stale.generation}\)"):
            await a.commit(stale, state, step, [event("r1", 1)])
        with pytest.raises(LeaseLostError):
            await a.append_events(stale, "r1", [event("r1", 1)])
        with pytest.raises(LeaseLostError):
            await a.requeue(stale, "r1")
        assert (await a.renew([stale])).lost == {"s"}

        for table in ("runs", "messages", "tool_calls", "events"):
            assert await count(pg_database, table, "generation = $1", stale.generation) == 0, table
        run = await b.get_run("r1")
        assert run is not None and run.result["iteration"] == 0 and run.event_count == 0
        assert (await b.load_state("r1")).messages == [{"role": "user", "content": "hi"}]

        await b.commit(fresh, state, step, [event("r1", 1)])  # the real holder still can
        assert await count(pg_database, "events", "generation = $1", fresh.generation) == 2


async def test_claim_is_refused_while_the_holder_lives_and_a_closed_one_is_dead(pg_database: str) -> None:
    async with backends(pg_database, 2) as (a, b):
        await a.create_session("s", None, {})
        held = await a.claim("s", "a")
        assert await b.process_alive(held.owner)
        with pytest.raises(SessionBusyError, match=r"held by another live process .* \(in \d+ s\)"):
            await b.claim("s", "b")
        with pytest.raises(ConfigurationError, match="no session 'nope'"):
            await b.claim("nope", "b")
        again = await a.claim("s", "a")  # the holder itself may re-claim: a newer generation
        assert again.generation == held.generation + 1
        await a.aclose()
        assert not await b.process_alive(held.owner)
        assert (await b.claim("s", "b")).generation == again.generation + 1


HOLDER = """
import asyncio, sys
from harnessx.store import PostgresBackend

async def main(dsn, session_id):
    async with PostgresBackend(dsn, lease_seconds=300) as backend:
        lease = await backend.claim(session_id, "child")
        print(lease.owner, flush=True)
        await asyncio.sleep(600)

asyncio.run(main(*sys.argv[1:3]))
"""


@pytest.mark.process
async def test_a_session_held_by_a_killed_process_can_be_claimed_at_once(pg_database: str) -> None:
    async with PostgresBackend(pg_database, lease_seconds=300) as backend:
        await backend.create_session("s", None, {})
        child = await spawn(HOLDER, pg_database, "s")
        try:
            owner = await read_line(child)
            assert await backend.process_alive(owner)
            with pytest.raises(SessionBusyError):
                await backend.claim("s", "me")
        finally:
            child.kill()  # SIGKILL: no cleanup runs in the child
            await child.communicate()

        async def claimable() -> bool:
            try:
                await backend.claim("s", "me")
            except SessionBusyError:
                return False
            return True

        # The lease has ~300 s left; only the dropped connection frees the session.
        assert await eventually(claimable) < 2.0
        assert not await backend.process_alive(owner)
        session = await backend.get_session("s")
        assert session is not None and session.generation == 2


async def test_renew_extends_held_leases_and_reports_lost_ones_in_one_statement(pg_database: str) -> None:
    async with backends(pg_database, 2, lease_seconds=60) as (mine, theirs):
        leases = {}
        for sid in "abc":
            leases[sid] = await start_run(mine, sid, f"run-{sid}")
        await expire(pg_database, "b")
        await theirs.claim("b", "thief")
        await mine.release(leases["c"])
        assert await theirs.set_control("a", "pause")

        statements = 0
        run = mine._run

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal statements
            statements += 1
            return await run(*args, **kwargs)

        mine._run = counting  # type: ignore[method-assign]
        renewal = await mine.renew(list(leases.values()))
        assert statements == 1
        assert renewal.held == {"a"} and renewal.lost == {"b", "c"}
        assert renewal.controls == {"a": "pause"}
        assert await mine.pending_controls() == {}  # the renewal took it
        rows = await sql(
            pg_database,
            f"SELECT extract(epoch FROM lease_expires_at - now()) FROM {SCHEMA}.sessions WHERE id='a'",
        )
        assert 55 < float(rows[0][0]) <= 60


# ------------------------------------------------------------------- runs and events


async def test_events_are_dense_ordered_and_content_round_trips_verbatim(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1", events=2)
        state = await backend.load_state("r1")
        odd = {
            "role": "assistant",
            "z": 1e100,
            "content": [{"type": "text", "text": "nul \u0000 and ünïcode"}],
            "a": [1.0, 2],
        }
        step = Delta(Phase.MODEL_CALL, messages=[odd], events=[event("r1", 5, RunEventType.TEXT_COMPLETE)])
        await backend.commit(lease, state, step, [event("r1", 3), event("r1", 4)])
        await backend.append_events(lease, "r1", [event("r1", n) for n in (6, 7, 8)])
        quiet = Delta(Phase.PREPARE_TOOLS, tools=[tool_entry("r1")])  # no events: the count stays
        await backend.commit(lease, await backend.load_state("r1"), quiet, [])

        events = await backend.read_events("r1", 0)
        assert [e.cursor for e in events] == [str(n) for n in range(1, 9)]
        assert events[4].type is RunEventType.TEXT_COMPLETE and events[4].data == "e5"
        assert [e.cursor for e in await backend.read_events("r1", 3, limit=2)] == ["4", "5"]
        run = await backend.get_run("r1")
        assert run is not None and run.event_count == 8 and run.phase == "prepare_tools"

        loaded = await backend.load_state("r1")
        assert loaded.messages == [{"role": "user", "content": "hi"}, odd]
        assert json.dumps(loaded.messages[1]) == json.dumps(odd)  # key order and number forms kept
        assert list(loaded.tools) == ["r1:0:call_1"] and loaded.tools["r1:0:call_1"].generation == 1

        finish = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED, output="done"))
        await backend.commit(lease, loaded, finish, [])
        second = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "again"}])
        await backend.create_run(lease, "r2", "req-2", "again", second)
        latest = await backend.latest_run("s", messages=False)
        assert latest is not None and latest.id == "r2" and latest.result["history_length"] == 2
        assert (await backend.find_run("s", "req-2")) == latest
        with pytest.raises(SessionBusyError, match="already has an unfinished run"):
            await backend.create_run(lease, "r3", None, "x", Delta(Phase.PREPARE_MODEL_CALL))
        with pytest.raises(SessionBusyError, match="already has a run for request_id 'req-2'"):
            await backend.create_run(lease, "r4", "req-2", "again", Delta(Phase.PREPARE_MODEL_CALL))
        assert await count(pg_database, "runs") == 2 and await count(pg_database, "messages") == 3

        await backend.create_session("other", None, {})
        elsewhere = await backend.claim("other", "h")
        with pytest.raises(StorageError, match="run r1 is not a run of session other"):
            await backend.append_events(elsewhere, "r1", [event("r1", 99)])
        assert [e.cursor for e in await backend.read_events("r1", 8)] == []


async def test_progress_alone_goes_to_the_session_row_and_every_reader_sees_it(pg_database: str) -> None:
    """Schema 3: a checkpoint that moves only a running run's phase and event count leaves
    the run row alone; every reader overlays the session's copy; a status change writes it
    all to the run row."""

    async def row(run_id: str) -> tuple[str, int, float]:
        (found,) = await sql(
            pg_database,
            f"SELECT phase, event_count, extract(epoch FROM updated_at) FROM {SCHEMA}.runs WHERE id = $1",
            run_id,
        )
        return found[0], found[1], found[2]

    async with backends(pg_database, 2) as (writer, reader):
        lease = await start_run(writer, "s", "r1")
        state = await writer.load_state("r1")
        await writer.commit(
            lease, state, Delta(Phase.MODEL_CALL, messages=[REPLY], run=RunPatch(iteration=1)), []
        )
        written = await row("r1")
        assert written[:2] == ("model_call", 1)

        await writer.append_events(lease, "r1", [event("r1", 2), event("r1", 3)])
        state = await writer.load_state("r1")
        moved = Delta(Phase.RAW_RESULT, tools=[tool_entry("r1", iteration=1)], events=[event("r1", 4)])
        await writer.commit(lease, state, moved, [])
        assert await row("r1") == written  # the run row was not rewritten

        # Every reader, in another process's backend, sees the progress.
        for record in (await reader.get_run("r1"), await reader.latest_run("s")):
            assert record is not None and (record.phase, record.event_count) == ("raw_result", 4)
        assert (await reader.load_state("r1")).phase is Phase.RAW_RESULT
        (summary,) = [s for s in await reader.recent_sessions(10) if s.session_id == "s"]
        assert summary.updated_at is not None and summary.updated_at > written[2]
        await sql(pg_database, f"UPDATE {SCHEMA}.runs SET updated_at = now() - interval '2 hours'")
        assert await reader.stuck_runs(3600) == []  # the session's copy is recent

        # Handing the lease over copies the progress to the run row (for a process of an
        # older harnessx that reads runs directly) and the session row lets go of it.
        await writer.release(lease)
        assert (await row("r1"))[:2] == ("raw_result", 4)
        held = await sql(pg_database, f"SELECT current_run, current_phase FROM {SCHEMA}.sessions")
        assert tuple(held[0]) == (None, None)
        # Another process takes over and numbers its events on from the count.
        lease = await reader.claim("s", "h2")
        record = await reader.latest_run("s")
        assert record is not None
        resumed = Delta(Phase.COMPLETED_RESULT, events=[event("r1", record.event_count + 1)])
        await reader.commit(lease, await reader.load_state("r1"), resumed, [])
        finish = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED, output="done"))
        await reader.commit(lease, await reader.load_state("r1"), finish, [event("r1", 6)])
        phase, count_, _ = await row("r1")
        assert (phase, count_) == ("finish", 6)  # a run that stops has its row written whole
        record = await reader.get_run("r1")
        assert record is not None and (record.status, record.phase, record.event_count) == (
            "completed",
            "finish",
            6,
        )

        # The next run starts its own progress; the finished one keeps its row's values.
        started = Delta(Phase.PREPARE_MODEL_CALL, events=[event("r2", 1)])
        await reader.create_run(lease, "r2", None, "again", started)
        state = await reader.load_state("r2")
        await reader.commit(lease, state, Delta(Phase.MODEL_CALL, events=[event("r2", 2)]), [])
        first, second = await reader.get_run("r1"), await reader.get_run("r2")
        assert first is not None and (first.phase, first.event_count) == ("finish", 6)
        assert second is not None and (second.phase, second.event_count) == ("model_call", 2)


async def test_a_lease_changing_hands_settles_progress_on_the_run_row(pg_database: str) -> None:
    """Every way a lease changes hands (claimed after expiry, dropped by the supervisor)
    copies the progress to the run row and clears it from the session row, so a process
    of an older harnessx that reads and writes the run row alone is never out of step."""

    async def run_row(run_id: str) -> tuple[str, int]:
        rows = await sql(pg_database, f"SELECT phase, event_count FROM {SCHEMA}.runs WHERE id = $1", run_id)
        return rows[0][0], rows[0][1]

    async with backends(pg_database, 2) as (a, b):
        for session_id, run_id in (("taken", "r1"), ("dropped", "r2")):
            lease = await start_run(a, session_id, run_id)
            state = await a.load_state(run_id)
            await a.commit(lease, state, Delta(Phase.DISPATCH, events=[event(run_id, 2)]), [])
            assert await run_row(run_id) == ("prepare_model_call", 1)  # progress alone so far
            await expire(pg_database, session_id)
            if session_id == "taken":
                await b.claim(session_id, "rescuer")
            else:
                (orphan,) = [o for o in await b.find_orphans() if o.session_id == session_id]
                term = await b.try_leadership("supervisor")
                assert term is not None
                recovered = await b.recover_orphan(term, orphan, requeue=True)
                assert recovered is not None and recovered.run_id == run_id
            assert await run_row(run_id) == ("dispatch", 2)

        # An older harnessx now writes the run row only; nothing stale overlays what it wrote.
        await sql(
            pg_database, f"UPDATE {SCHEMA}.runs SET phase = 'raw_result', event_count = 3 WHERE id = 'r1'"
        )
        record = await a.get_run("r1")
        assert record is not None and (record.phase, record.event_count) == ("raw_result", 3)


async def test_a_lease_changing_hands_writes_the_run_row_only_when_the_progress_is_newer(
    pg_database: str,
) -> None:
    """The settling trigger (schema 21) leaves a run row that is already as new as the
    session's progress alone: an execution's last checkpoint writes the run and gives the
    lease up in one statement, and used to write the run row twice."""
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        state = await backend.load_state("r1")
        await backend.commit(lease, state, Delta(Phase.DISPATCH, events=[event("r1", 2)]), [])
        conn = await asyncpg.connect(pg_database)
        try:
            updates = f"SELECT pg_stat_get_xact_tuples_updated('{SCHEMA}.runs'::regclass)"
            let_go = (
                f"UPDATE {SCHEMA}.sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = 's'"
            )
            for newer, written in ((True, 1), (False, 0)):
                undone = conn.transaction()  # each case from the same start
                await undone.start()
                try:
                    if not newer:  # as the finishing checkpoint leaves it: the row is newer
                        await conn.execute(
                            f"UPDATE {SCHEMA}.runs SET phase = 'finish', event_count = 3, "
                            "updated_at = now() + interval '1 second' WHERE id = 'r1'"
                        )
                    before = await conn.fetchval(updates)
                    await conn.execute(let_go)
                    assert await conn.fetchval(updates) - before == written, newer
                    phase = await conn.fetchval(f"SELECT phase FROM {SCHEMA}.runs WHERE id = 'r1'")
                    assert phase == ("dispatch" if newer else "finish")
                finally:
                    await undone.rollback()
        finally:
            await conn.close()


async def test_progress_the_session_row_does_not_hold_is_sent_again_whole(pg_database: str) -> None:
    async def run_row() -> tuple[str, int]:
        rows = await sql(pg_database, f"SELECT phase, event_count FROM {SCHEMA}.runs WHERE id = 'r1'")
        return rows[0][0], rows[0][1]

    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        # As after an upgrade to schema 3: the session row holds no run's progress yet.
        await sql(pg_database, f"UPDATE {SCHEMA}.sessions SET current_run = NULL")
        state = await backend.load_state("r1")
        await backend.commit(lease, state, Delta(Phase.MODEL_CALL, events=[event("r1", 2)]), [])
        assert await run_row() == ("model_call", 2)  # refused as progress alone, sent whole
        held = await sql(pg_database, f"SELECT current_run FROM {SCHEMA}.sessions WHERE id = 's'")
        assert held[0][0] == "r1"  # and the session row took the run's progress over
        await backend.append_events(lease, "r1", [event("r1", 3)])
        assert await run_row() == ("model_call", 2)  # from now on, progress alone
        record = await backend.get_run("r1")
        assert record is not None and record.event_count == 3
        assert [e.cursor for e in await backend.read_events("r1", 0)] == ["1", "2", "3"]


async def test_wait_for_events_wakes_on_another_backends_commit(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, follower):
        lease = await start_run(writer, "s", "r1")
        await follower.wait_for_events("r1", 0.01)  # starts the listener
        await eventually(lambda: follower._notifications.connection is not None)

        waiting = await waiting_for_events(follower, "r1")
        began = time.monotonic()
        await writer.append_events(lease, "r1", [event("r1", 2)])
        await asyncio.wait_for(waiting, 5)
        assert time.monotonic() - began < 2.0


@contextlib.asynccontextmanager
async def events_heard(dsn: str) -> AsyncIterator[list[str]]:
    """The run ids of the 'events' notifications heard by a plain LISTEN meanwhile."""
    (channel,) = (await sql(dsn, f"SELECT {SCHEMA}.harnessx_channel('events')"))[0]
    heard: list[str] = []
    listener = await asyncpg.connect(dsn)
    try:
        await listener.add_listener(channel, lambda *args: heard.append(args[3]))
        yield heard
    finally:
        await listener.close()


async def test_waiting_on_many_runs_keeps_nothing_once_the_waits_end(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, follower):
        lease = await start_run(writer, "s", "r1")
        await asyncio.gather(*(follower.wait_for_events(f"gone{n}", 0.05) for n in range(20)))
        # Two waiters on one run: the first to time out leaves the event to the other.
        for _ in range(5):
            listener = follower._notifications.connection
            second = await waiting_for_events(follower, "r1")
            await follower.wait_for_events("r1", 0.05)
            if not second.done():
                break
            # Only a lost listening connection wakes every waiter (notifications may have been
            # missed; a loaded machine can lose one): anything else waking it is the bug.
            assert follower._notifications.connection is not listener, "a timed-out wait woke another"
        assert not second.done()
        await writer.append_events(lease, "r1", [event("r1", 2)])
        await asyncio.wait_for(second, 5)
        assert len(follower._notifications._runs) == 0


async def test_one_notification_per_checkpoint_not_per_event(pg_database: str) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        barrier = await start_run(backend, "t", "r2")
        async with events_heard(pg_database) as heard:
            for run_id in ("r1", "r2"):  # someone follows both runs
                await backend._watch_run(run_id, 60)
            await backend.append_events(lease, "r1", [event("r1", n) for n in range(2, 12)])
            state = await backend.load_state("r1")
            await backend.commit(lease, state, Delta(Phase.PREPARE_TOOLS, tools=[tool_entry("r1")]), [])
            # Notifications arrive in commit order: once r2's is in, r1's are all in.
            await backend.append_events(barrier, "r2", [event("r2", 2)])
            await eventually(lambda: "r2" in heard)
        assert heard == ["r1", "r2"]


async def test_only_a_run_some_process_follows_sends_notifications(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, follower):
        followed = await start_run(writer, "s", "followed")
        alone = await start_run(writer, "t", "alone")
        lapsed = await start_run(writer, "u", "lapsed")
        async with events_heard(pg_database) as heard:
            assert await follower.wait_for_events("followed", 5) is None  # announces, looks again
            await follower._watch_run("lapsed", 0.05)
            lapsed_now = f"SELECT 1 FROM {SCHEMA}.sessions WHERE id = 'u' AND watched_until <= now()"
            # Lapsed by the database's clock.
            await eventually(lambda: sql(pg_database, lapsed_now))
            watched = await sql(
                pg_database,
                f"SELECT id, watched_until > now() FROM {SCHEMA}.sessions WHERE watched_until IS NOT NULL "
                "ORDER BY 1",
            )
            assert [tuple(row) for row in watched] == [("s", True), ("u", False)]
            await writer.append_events(alone, "alone", [event("alone", 2)])
            await writer.append_events(lapsed, "lapsed", [event("lapsed", 2)])
            await writer.append_events(followed, "followed", [event("followed", 2)])
            await eventually(lambda: "followed" in heard)
        assert heard == ["followed"]
        # Announcements only ever push the deadline forward.
        before = await sql(pg_database, f"SELECT watched_until FROM {SCHEMA}.sessions WHERE id = 's'")
        await writer._watch_run("followed", 1)
        after = await sql(pg_database, f"SELECT watched_until FROM {SCHEMA}.sessions WHERE id = 's'")
        assert after == before


async def test_a_result_waiter_hears_the_checkpoint_that_stops_the_run_and_no_other(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, waiter):
        lease = await start_run(writer, "s", "r1")
        barrier = await start_run(writer, "t", "r2")
        async with events_heard(pg_database) as heard:
            assert (await waiter.wait_until_stopped("r1", 5)) is not None  # announces (await_run)
            awaited = await sql(pg_database, f"SELECT id FROM {SCHEMA}.sessions WHERE awaited_until > now()")
            assert [row[0] for row in awaited] == ["s"]
            await writer.append_events(lease, "r1", [event("r1", 2)])
            state = await writer.load_state("r1")
            await writer.commit(lease, state, Delta(Phase.PREPARE_TOOLS, tools=[tool_entry("r1")]), [])
            await writer._watch_run("r2", 60)
            await writer.append_events(barrier, "r2", [event("r2", 2)])
            await eventually(lambda: "r2" in heard)
            assert heard == ["r2"]  # r1's running checkpoints sent nothing
            state = await writer.load_state("r1")
            done = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED), events=[event("r1", 3)])
            await writer.commit(lease, state, done, [])
            await eventually(lambda: "r1" in heard)
        assert heard == ["r2", "r1"]


async def test_waiting_until_a_run_stops_is_woken_by_the_stopping_commit(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, waiter):
        lease = await start_run(writer, "s", "r1")
        record = await waiter.wait_until_stopped("r1", 0.01)  # listens and announces
        assert record is not None and not record.stopped
        notifications = waiter._notifications
        # A long wait, under way: only a notification ends it early.
        waiting = asyncio.create_task(waiter.wait_until_stopped("r1", 60))
        await eventually(lambda: notifications._runs._waiting.get("r1", 0) > 0)
        state = await writer.load_state("r1")
        done = Delta(Phase.FINISH, run=RunPatch(status=RunStatus.COMPLETED), events=[event("r1", 2)])
        await writer.commit(lease, state, done, [])
        await asyncio.wait_for(waiting, 10)  # the row it returns was read before the wait
        record = await waiter.wait_until_stopped("r1", 60)
        assert record is not None and record.stopped and record.status is RunStatus.COMPLETED
        assert await waiter.wait_until_stopped("gone", 60) is None
        assert len(notifications._runs) == 0


async def test_a_process_listens_only_on_the_channels_it_waits_on(pg_database: str) -> None:
    async with backends(pg_database, 3) as (writer, worker, follower):
        lease = await start_run(writer, "s", "r1")
        # The first wait on a channel starts listening and returns at once: a commit just
        # before then was not heard, so the caller should look again.
        assert await worker.wait_for_work(30)
        began = time.monotonic()
        await follower.wait_for_events("r1", 30)
        assert time.monotonic() - began < 5

        listening = (
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE application_name = 'harnessx-listener' AND datname = current_database() GROUP BY 1"
        )
        assert (await sql(pg_database, listening))[0][1] == 2
        # What each listening connection is subscribed to, as the server sees it.
        for backend, wanted in ((worker, "work"), (follower, "events")):
            channels = await backend._notifications.connection.fetch("SELECT pg_listening_channels()")
            expected = (await sql(pg_database, f"SELECT {SCHEMA}.harnessx_channel('{wanted}')"))[0][0]
            assert [row[0] for row in channels] == [expected], wanted

        # Followers still wake on commits.
        waiting = await waiting_for_events(follower, "r1")
        await writer.append_events(lease, "r1", [event("r1", 2)])
        await asyncio.wait_for(waiting, 5)


async def test_wait_for_events_falls_back_to_waiting_while_the_listener_is_down(pg_database: str) -> None:
    async with backends(pg_database, 2) as (writer, follower):
        lease = await start_run(writer, "s", "r1")
        await follower.wait_for_events("r1", 0.01)
        await eventually(lambda: follower._notifications.connection is not None)
        await sql(
            pg_database,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'harnessx-listener' AND datname = current_database()",
        )
        await eventually(lambda: follower._notifications.connection is None)
        began = time.monotonic()
        await follower.wait_for_events("r1", 0.2)  # no error: it listens again, or waits plainly
        assert time.monotonic() - began < 2.0

        async def listening_again() -> bool:
            await follower.wait_for_events("r1", 0.05)
            return follower._notifications.connection is not None

        await eventually(listening_again)
        waiting = await waiting_for_events(follower, "r1")
        await writer.append_events(lease, "r1", [event("r1", 2)])
        await asyncio.wait_for(waiting, 5)


# ------------------------------------------------------------------ transient errors


class _LossyPool:
    """A pool whose connections run the first statement containing ``marker`` (it commits)
    and then fail as if the connection dropped before the reply arrived."""

    def __init__(
        self, pool: Any, marker: str, meanwhile: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._pool = pool
        self.marker = marker
        self.meanwhile = meanwhile  # what another process does before the retry
        self.calls = 0

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self._pool.acquire() as conn:
            yield _ReplyLost(conn, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


class _ReplyLost:
    def __init__(self, conn: Any, pool: _LossyPool) -> None:
        self._conn = conn
        self._pool = pool

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._lose_first(query, await self._conn.fetchval(query, *args))

    async def fetch(self, query: str, *args: Any) -> Any:
        return await self._lose_first(query, await self._conn.fetch(query, *args))

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self._lose_first(query, await self._conn.fetchrow(query, *args))

    async def _lose_first(self, query: str, result: Any) -> Any:
        if self._pool.marker in query:
            self._pool.calls += 1
            if self._pool.calls == 1:
                if self._pool.meanwhile is not None:
                    await self._pool.meanwhile()
                raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed mid-operation")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_checkpoint_whose_reply_was_lost_is_retried_without_duplicates(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        state = await backend.load_state("r1")
        lossy = _LossyPool(backend._pool, "last_checkpoint")
        monkeypatch.setattr(backend, "_pool", lossy)
        step = Delta(
            Phase.PREPARE_MODEL_CALL,
            messages=[{"role": "tool", "tool_call_id": "call_1", "content": "result"}],
            run=RunPatch(iteration=1),
        )
        await backend.commit(lease, state, step, [])  # no events: only the checkpoint id guards it
        monkeypatch.undo()
        assert lossy.calls == 2
        assert await count(pg_database, "messages") == 2
        rows = await sql(pg_database, f"SELECT message_count FROM {SCHEMA}.sessions")
        assert rows[0][0] == 2
        assert (await backend.load_state("r1")).iteration == 1


async def test_ending_a_run_whose_reply_was_lost_appends_its_events_once(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        lossy = _LossyPool(backend._pool, "last_checkpoint")
        monkeypatch.setattr(backend, "_pool", lossy)
        failed = RunResult("s", "r1", status=RunStatus.FAILED)
        closing = [event("r1", 0, RunEventType.ERROR), RunEvent(RunEventType.RUN_RESULT, failed, run_id="r1")]
        await backend.end_run(lease, "r1", status="failed", stop_reason="error", error=None, events=closing)
        monkeypatch.undo()
        assert lossy.calls == 2
        assert [e.cursor for e in closing] == ["2", "3"]  # numbered after the first event
        assert [e.cursor for e in await backend.read_events("r1", 0)] == ["1", "2", "3"]
        record = await backend.get_run("r1")
        assert record is not None and (record.status, record.event_count) == ("failed", 3)


async def test_progress_sent_again_whole_whose_reply_was_lost_is_applied_once(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresBackend(pg_database) as backend:
        lease = await start_run(backend, "s", "r1")
        await sql(pg_database, f"UPDATE {SCHEMA}.sessions SET current_run = NULL")
        state = await backend.load_state("r1")
        lossy = _LossyPool(backend._pool, "last_checkpoint")
        monkeypatch.setattr(backend, "_pool", lossy)
        # Refused as progress alone, committed whole, reply lost; the retry sends progress
        # alone again, which the session row would now take: the shared id stops it.
        await backend.commit(lease, state, Delta(Phase.MODEL_CALL, events=[event("r1", 2)]), [])
        monkeypatch.undo()
        assert lossy.calls == 2
        assert await count(pg_database, "events") == 2
        record = await backend.get_run("r1")
        assert record is not None and (record.phase, record.event_count) == ("model_call", 2)


async def test_progress_under_a_new_lease_is_sent_whole_at_once(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session row lets go of a run's progress whenever the lease changes hands, and the
    backend knows it: the first progress-only checkpoint under a new lease costs one
    statement, not a refused one and then the whole one."""
    sent: list[str] = []
    async with backends(pg_database, 2) as (a, b):
        lease = await start_run(a, "s", "r1")
        await a.release(lease)
        lease = await b.claim("s", "taker")
        real_fetchval = _ReplyLost.fetchval

        async def counted(self: _ReplyLost, query: str, *args: Any) -> Any:
            sent.append("progress" if "f.current" in query.split("SELECT CASE")[0] else "whole")
            return await self._conn.fetchval(query, *args)

        monkeypatch.setattr(_ReplyLost, "fetchval", counted)
        monkeypatch.setattr(b, "_pool", _LossyPool(b._pool, "never sent"))
        state = await b.load_state("r1")
        for seq, phase in ((2, Phase.DISPATCH), (3, Phase.RAW_RESULT)):
            await b.commit(lease, state, Delta(phase, events=[event("r1", seq)]), [])
        monkeypatch.setattr(_ReplyLost, "fetchval", real_fetchval)
        assert sent == ["whole", "progress"]
        record = await a.get_run("r1")
        assert record is not None and (record.phase, record.event_count) == ("raw_result", 3)


async def test_a_queued_run_whose_reply_was_lost_is_not_refused_after_a_worker_took_it(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backends(pg_database, 2) as (app, worker):
        await app.create_session("s", "sales:v1", {})
        lease = await app.claim("s", "app")

        async def worker_takes_it_over() -> None:
            [(taken, run_id)] = await worker.claim_queued("worker", None, 1)
            state = await worker.load_state(run_id)
            await worker.commit(taken, state, Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(iteration=1)), [])

        lossy = _LossyPool(app._pool, "last_checkpoint", worker_takes_it_over)
        monkeypatch.setattr(app, "_pool", lossy)
        # The retry finds the lease gone and another checkpoint id on the session: the run
        # it asked for exists, so the call succeeded.
        await app.create_run(lease, "r1", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
        monkeypatch.undo()
        assert lossy.calls == 2
        assert await count(pg_database, "runs") == 1
        assert (await app.load_state("r1")).iteration == 1


async def test_a_queue_claim_whose_reply_was_lost_returns_what_it_took(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresBackend(pg_database) as backend:
        for n in range(3):
            await backend.create_session(f"s{n}", "sales:v1", {})
            lease = await backend.claim(f"s{n}", "app")
            await backend.create_run(lease, f"r{n}", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
            await backend.release(lease)
        lossy = _LossyPool(backend._pool, "harnessx_claim_runs")
        monkeypatch.setattr(backend, "_pool", lossy)
        claimed = await backend.claim_queued("worker", None, 2)
        monkeypatch.undo()
        assert lossy.calls == 1  # the retry found the lost attempt's runs instead of claiming more
        assert sorted(run_id for _, run_id in claimed) == ["r0", "r1"]
        assert {lease.generation for lease, _ in claimed} == {2}
        assert (await backend.queue_stats()).depth == 1


async def test_dropped_connections_are_retried_and_liveness_is_retaken(pg_database: str) -> None:
    async with backends(pg_database, 2) as (a, b):
        lease = await start_run(a, "s", "r1")
        terminate = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = current_database()"
        )
        assert (await sql(pg_database, terminate, "harnessx-pool"))[0][0] >= 2
        assert await a.get_session("s") is not None
        await a.append_events(lease, "r1", [event("r1", 2)])
        assert [e.cursor for e in await b.read_events("r1", 0)] == ["1", "2"]

        dropped = a._liveness
        await sql(pg_database, terminate, "harnessx-liveness")
        await eventually(lambda: dropped.is_closed())
        # Taken again as soon as the connection drops, not at the next lease renewal.
        await eventually(lambda: a._liveness is not None and a._liveness is not dropped)
        await eventually(lambda: b.process_alive(lease.owner))
        await a.renew([lease])  # and the heartbeat still works


async def test_a_queue_claim_takes_nothing_while_the_process_holds_no_liveness_lock(pg_database: str) -> None:
    """Every other process sees a process without its liveness lock as dead (a supervisor takes
    its leases straight back), also while its own connection for the lock still looks open (a
    server restart it has not noticed yet; here the lock is let go behind its back): its claim
    takes nothing, and it takes the lock again for the next one."""
    async with backends(pg_database, 2) as (app, worker):
        await app.create_session("s", "a@v1", {})
        lease = await app.claim("s", "h")
        await app.create_run(lease, "r1", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
        held = worker._liveness
        assert held is not None
        await held.execute("SELECT pg_advisory_unlock_all()")
        assert not await app.process_alive(f"{worker.process_id}/worker")
        assert not held.is_closed()  # as far as the worker can tell, it holds the lock

        assert list(await worker.claim_queued("worker", None, 1)) == []
        assert await count(pg_database, "runs", "queued_at IS NOT NULL") == 1  # still queued
        await eventually(lambda: worker._liveness is not held)
        [(taken, run_id)] = await worker.claim_queued("worker", None, 1)
        assert run_id == "r1" and await app.process_alive(taken.owner)
        assert [o for o in await app.find_orphans() if o.session_id == "s"] == []


async def test_a_connection_lost_inside_a_transaction_is_retried(pg_database: str) -> None:
    """Leaving a transaction block on a connection that died in it raises asyncpg's
    InterfaceError, not a connection error: it used to end a worker's load_state during a
    server restart instead of being retried (chaos, restart-postgres)."""
    async with PostgresBackend(pg_database) as backend:
        attempts = 0

        async def read(conn: Any) -> int:
            nonlocal attempts
            attempts += 1
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                if attempts == 1:
                    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                return int(await conn.fetchval("SELECT 7"))

        assert await backend._run("reading in a transaction", read) == 7
        assert attempts == 2


async def test_a_closed_or_unopened_backend_says_so(pg_database: str) -> None:
    backend = PostgresBackend(pg_database)
    with pytest.raises(StorageError, match="not open"):
        await backend.get_session("s")
    await backend.initialize()
    await backend.initialize()  # idempotent
    await backend.aclose()
    await backend.aclose()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        await backend.get_session("s")
    await backend.initialize()  # opened again (as 0.9.1's), as another process
    assert await backend.get_session("s") is None
    await backend.aclose()


WITHOUT_ASYNCPG = """
import sys
sys.modules["asyncpg"] = None  # as if the 'postgres' extra were not installed
import harnessx
from harnessx import ConfigurationError
try:
    harnessx.PostgresBackend
except ConfigurationError as exc:
    print(exc)
"""


@pytest.mark.process
async def test_harnessx_imports_without_asyncpg_and_says_how_to_get_it() -> None:
    child = await spawn(WITHOUT_ASYNCPG)
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    # The advice installs the driver itself, never a 'harnessx' from the package index
    # (another project holds that name).
    assert "pip install 'asyncpg>=0.29'" in out.decode() and "pip install -e '.[postgres]'" in out.decode()
    assert "install 'harnessx" not in out.decode() and "harnessx[" not in out.decode()


# ---------------------------------------------------------------------------- secrets

PASSWORD = "p@ss:w/rd?#%x"
WRONG = "n0t@:/?#%it"


def _hidden(text: str) -> bool:
    return all(s not in text for s in (PASSWORD, quote(PASSWORD, safe=""), WRONG, quote(WRONG, safe="")))


@pytest.fixture(scope="module")
def scram_server(pg_bin_dir: Path) -> Iterator[tuple[int, str]]:
    """A cluster of our own where one role logs in by password (the shared one trusts all)."""
    role = "secretive"
    with ThrowawayCluster(pg_bin_dir) as pg:
        hba = pg.data_dir / "pg_hba.conf"
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        pg.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        pg.psql(f"CREATE DATABASE secrets OWNER {role}")
        pg.psql("SELECT pg_reload_conf()")
        yield pg.port, role


def test_redact_dsn_hides_every_form_of_password() -> None:
    encoded = quote(PASSWORD, safe="")
    assert redact_dsn(f"postgresql://u:{encoded}@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_dsn("postgres://u@h/db?sslmode=require&password=abc") == (
        "postgres://u@h/db?sslmode=require&password=***"
    )
    assert redact_dsn("postgresql://h/db") == "postgresql://h/db"
    # An unescaped '@' or '/' in the password is still hidden (everything up to the last '@').
    assert redact_dsn("postgresql://u:a/b@c@h/db") == "postgresql://u:***@h/db"
    with pytest.raises(ConfigurationError) as bad:
        PostgresBackend(f"host=h password={PASSWORD}")
    assert _hidden(str(bad.value))


@pytest.mark.slow  # a cluster of its own
async def test_the_password_never_appears_in_reprs_errors_or_logs(
    scram_server: tuple[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    port, role = scram_server
    good = f"postgresql://{role}:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/secrets"
    backend = PostgresBackend(good)
    assert (
        repr(backend)
        == f"PostgresBackend('postgresql://{role}:***@127.0.0.1:{port}/secrets', schema='harness_x')"
    )
    async with backend:  # the special characters survive the URL round trip
        await backend.create_session("s", None, {})
    via_query = f"postgresql://{role}@127.0.0.1:{port}/secrets?password={quote(PASSWORD, safe='')}"
    async with PostgresBackend(via_query) as backend:
        assert _hidden(repr(backend)) and await backend.get_session("s") is not None

    right, wrong = quote(PASSWORD, safe=""), quote(WRONG, safe="")
    cases = {
        f"postgresql://{role}:{wrong}@127.0.0.1:{port}/secrets": "check the user name and password",
        f"postgresql://{role}:{right}@127.0.0.1:{free_port()}/secrets": "check host/port",
        f"postgresql://{role}:{right}@127.0.0.1:{port}/nowhere": "does not exist",
    }
    for dsn, advice in cases.items():
        with pytest.raises(StorageError) as failed:
            await PostgresBackend.connect(dsn)
        shown = "".join(traceback.format_exception(failed.value))
        assert advice in str(failed.value) and redact_dsn(dsn) in str(failed.value)
        assert _hidden(shown), shown
    assert _hidden(caplog.text)


# ------------------------------------------------------------------------- privileges


@pytest.fixture
def limited_role(pg_database: str) -> Iterator[str]:
    """A login role with no privileges in ``pg_database`` beyond CONNECT."""
    role = f"hx_limited_{uuid.uuid4().hex[:8]}"
    run_psql(pg_database, f"CREATE ROLE {role} LOGIN")
    try:
        yield role
    finally:
        run_psql(pg_database, f"DROP OWNED BY {role}; DROP ROLE {role}")


async def test_missing_privileges_name_the_grant_to_run(pg_database: str, limited_role: str) -> None:
    dsn = dsn_as(pg_database, limited_role)
    database = urlsplit(pg_database).path.lstrip("/")
    with pytest.raises(SchemaError, match=rf'GRANT CREATE ON DATABASE "{database}" TO "{limited_role}"'):
        await PostgresBackend.connect(dsn)

    await script(pg_database, f"CREATE SCHEMA {SCHEMA}; GRANT USAGE ON SCHEMA {SCHEMA} TO {limited_role}")
    with pytest.raises(SchemaError, match=rf'GRANT USAGE, CREATE ON SCHEMA "{SCHEMA}" TO "{limited_role}"'):
        await PostgresBackend.connect(dsn)

    await PostgresBackend(pg_database).migrate()  # the owner migrates; the role may not read yet
    with pytest.raises(
        StorageError, match=rf"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA \"{SCHEMA}\""
    ):
        await PostgresBackend.connect(dsn, auto_migrate=False)

    # Exactly the grants the advice names are enough to run sessions.
    await script(pg_database, runtime_grants(SCHEMA, limited_role))
    async with PostgresBackend(dsn, auto_migrate=False) as backend:
        lease = await start_run(backend, "s", "r1")
        await backend.requeue(lease, "r1")
        assert (await backend.renew([lease])).held == {"s"}
        # Following a run announces it on its session.
        await backend._watch_run("r1", 60)
        watched = await sql(pg_database, f"SELECT id FROM {SCHEMA}.sessions WHERE watched_until > now()")
        assert [row[0] for row in watched] == ["s"]


async def test_a_schema_without_usage_names_the_grants_not_migrate(
    pg_database: str, limited_role: str
) -> None:
    # The owner migrated the schema but granted nothing: without USAGE the search path
    # skips the schema, so every table read as missing and the advice was "run migrate",
    # which (run by the owner or by this role) changed nothing.
    await PostgresBackend(pg_database).migrate()
    dsn = dsn_as(pg_database, limited_role)
    for options in ({"auto_migrate": False}, {"auto_migrate": True}):
        with pytest.raises(SchemaError) as refused:
            await PostgresBackend.connect(dsn, **options)
        text = str(refused.value)
        assert f"role {limited_role!r} may not use schema {SCHEMA!r}" in text and "no USAGE" in text
        assert runtime_grants(SCHEMA, limited_role) in text and "harnessx migrate" not in text
    # Following the advice works.
    await script(pg_database, runtime_grants(SCHEMA, limited_role))
    async with PostgresBackend(dsn, auto_migrate=False) as backend:
        await start_run(backend, "s", "r1")
    report = await PostgresBackend(dsn).migrate()
    assert report.applied == () and "nothing to apply" in report.describe()

    # Not migrated yet and no USAGE: either let the role migrate or have the owner do it.
    await script(pg_database, f"CREATE SCHEMA other; REVOKE ALL ON SCHEMA other FROM {limited_role}")
    with pytest.raises(SchemaError, match=r'GRANT USAGE, CREATE ON SCHEMA "other" TO .*or have the schema'):
        await PostgresBackend.connect(dsn, schema="other")


def test_system_schemas_are_refused() -> None:
    for schema in ("pg_catalog", "pg_toast", "information_schema"):
        with pytest.raises(ConfigurationError, match="one of PostgreSQL's own"):
            PostgresBackend("postgresql://h/db", schema=schema)


# ------------------------------------------------------------------------------- pool


async def test_queued_runs_are_claimed_once_each_by_concurrent_workers(pg_database: str) -> None:
    async with backends(pg_database, 3) as (app, w1, w2):
        for n in range(6):
            sid = f"s{n}"
            await app.create_session(sid, "sales:v1" if n < 5 else "other:v1", {})
            lease = await app.claim(sid, "app")
            await app.create_run(lease, f"r{n}", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
            await app.release(lease)
        stats = await app.queue_stats()
        assert stats.depth == 6 and set(stats.by_agent) == {"sales:v1", "other:v1"}

        first, second = await asyncio.gather(
            w1.claim_queued("w", ["sales:v1"], 3), w2.claim_queued("w", ["sales:v1"], 3)
        )
        claimed = [run_id for _, run_id in first + second]
        assert sorted(claimed) == ["r0", "r1", "r2", "r3", "r4"]  # each exactly once
        assert await w1.claim_queued("w", ["sales:v1"], 3) == []
        [(lease, run_id)] = await w1.claim_queued("w", None, 10)
        assert run_id == "r5" and lease.generation == 2
        assert (await app.queue_stats()).depth == 0

        await w1.requeue(lease, run_id)  # a drain hand-off
        await w1.release(lease)
        assert (await app.queue_stats()).by_agent.keys() == {"other:v1"}

        # A checkpoint keeps a running run queued; one that ends it takes it off the queue.
        lease = await app.claim("s5", "app")
        state = await app.load_state("r5")
        await app.commit(lease, state, Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(iteration=1)), [])
        assert (await app.queue_stats()).depth == 1
        await app.commit(lease, state, Delta(Phase.FINISH, run=RunPatch(status=RunStatus.CANCELLED)), [])
        assert (await app.queue_stats()).depth == 0


async def test_wait_for_work_wakes_when_another_process_queues_a_run(pg_database: str) -> None:
    async with backends(pg_database, 2) as (app, worker):
        assert await worker.wait_for_work(5)  # starts listening: look again at once
        assert worker._notifications.connection is not None
        began = time.monotonic()
        assert not await worker.wait_for_work(0.2)  # listening, nothing queued: plain waiting
        assert time.monotonic() - began >= 0.15

        await app.create_session("s", "sales:v1", {})
        lease = await app.claim("s", "app")
        waiting = await waiting_for_work(worker)
        await app.create_run(lease, "r1", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
        await asyncio.wait_for(waiting, 5)
        await app.release(lease)

        [(taken, _)] = await worker.claim_queued("w", None, 1)
        assert await app.wait_for_work(5)  # starts listening: look again at once
        waiting = await waiting_for_work(app)
        await worker.requeue(taken, "r1")  # a drain hand-off wakes the others too
        await asyncio.wait_for(waiting, 5)


async def test_work_queued_while_nobody_waits_is_heard_by_the_next_wait(pg_database: str) -> None:
    """A worker that was claiming when a run was queued (nobody waited for work then) still
    hears of it: its next wait returns at once rather than at the next poll, and only that
    one: the wait after it is plain waiting again."""
    async with backends(pg_database, 2) as (app, worker):
        assert await worker.wait_for_work(5)  # starts listening: look again at once
        await app.create_session("s", "sales:v1", {})
        lease = await app.claim("s", "app")
        await app.create_run(lease, "r1", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
        deadline = time.monotonic() + 10
        while not worker._notifications._work_unheard:  # the notification arrives, unawaited
            assert time.monotonic() < deadline, "the queued run's notification never arrived"
            await asyncio.sleep(0.01)
        assert await asyncio.wait_for(worker.wait_for_work(60), 5)
        began = time.monotonic()
        assert not await worker.wait_for_work(0.2)
        assert time.monotonic() - began >= 0.15
        await app.release(lease)


async def test_liveness_is_judged_by_one_view_that_every_statement_reads(pg_database: str) -> None:
    """A process is alive while it holds its liveness lock, as the view
    harnessx_live_processes (migration 17) lists it: the one place that reads pg_locks.
    Its keys are the locks' whole bigint keys (pg_locks shows them split in two), also the
    negative ones and the extremes; the statements that judge many owners read it once."""
    # lock_holders reads pg_locks for table locks (who a failed migration waited for), not
    # for liveness.
    assert [name for name, text in Q_PG.items() if "pg_locks" in text] == ["lock_holders"]
    assert "advisory" not in Q_PG["lock_holders"] and "l.relation" in Q_PG["lock_holders"]
    for name in ("pool_scan", "find_orphans", "running_workers"):
        assert "harnessx_live_processes" in Q_PG[name], name
    keys = [-1, -(2**63), 2**63 - 1, 1, 0x7FFFFFFF80000000, -0x0000000180000000]
    async with backends(pg_database, 1) as (store,):
        holder = await asyncpg.connect(pg_database, server_settings={"search_path": SCHEMA})
        reader = await asyncpg.connect(pg_database, server_settings={"search_path": SCHEMA})
        try:
            for key in keys:
                await holder.execute("SELECT pg_advisory_lock($1::bigint)", key)
            live = {row[0] for row in await reader.fetch("SELECT key FROM harnessx_live_processes")}
            assert set(keys) <= live
            mine = await reader.fetchval("SELECT harnessx_liveness_key($1)", store.process_id)
            assert mine in live  # the store's own liveness lock
            assert await store.process_alive(store.owner_for("x"))
            await holder.execute("SELECT pg_advisory_unlock_all()")
            live = {row[0] for row in await reader.fetch("SELECT key FROM harnessx_live_processes")}
            assert not set(keys) & live and mine in live
            # The supervisor's scan reads the lock table once for both of its liveness checks.
            plan = await reader.fetchval("EXPLAIN (FORMAT JSON) " + Q_PG["pool_scan"], "supervisor", [])
            assert json.dumps(plan).count("pg_lock_status") == 1, plan
        finally:
            await holder.close()
            await reader.close()


async def test_orphans_are_found_and_recovered_with_a_generation_bump(pg_database: str) -> None:
    async with backends(pg_database, 3) as (supervisor, dying, slow):
        dead_lease = await start_run(dying, "dead", "r1")
        slow_lease = await start_run(slow, "slow", "r2")
        await expire(pg_database, "slow")
        await dying.aclose()

        orphans = {o.session_id: o for o in await supervisor.find_orphans()}
        assert {sid: o.reason for sid, o in orphans.items()} == {"dead": "dead", "slow": "expired"}
        assert orphans["dead"].generation == dead_lease.generation

        term = await supervisor.try_leadership("supervisor")
        assert term is not None
        recovered = await supervisor.recover_orphan(term, orphans["dead"], requeue=True)
        assert recovered is not None and recovered.run_id == "r1"
        assert await supervisor.recover_orphan(term, orphans["dead"], requeue=True) is None  # already done
        released = await supervisor.recover_orphan(term, orphans["slow"], requeue=False)
        assert released is not None and released.run_id is None
        with pytest.raises(LeaseLostError):
            await slow.append_events(slow_lease, "r2", [event("r2", 2)])
        assert await supervisor.find_orphans() == []
        assert (await supervisor.queue_stats()).depth == 1
        session = await supervisor.get_session("dead")
        assert session is not None and session.lease_owner is None
        assert session.generation == dead_lease.generation + 1
        assert [s.run_id for s in await supervisor.stuck_runs(0)] == ["r1", "r2"]
        assert await supervisor.stuck_runs(3600) == []
        summaries = await supervisor.recent_sessions(10)
        assert {(s.session_id, s.run_id, s.run_status) for s in summaries} == {
            ("dead", "r1", "running"),
            ("slow", "r2", "running"),
        }


async def test_workers(pg_database: str) -> None:
    async with backends(pg_database, 2) as (a, b):
        worker = WorkerInfo(a.process_id, "host-1", 4242, ["sales:v1"], 8)
        await a.register_worker(worker)
        await a.register_worker(worker)  # a retried registration is harmless
        await a.worker_heartbeat(worker.id, draining=True)
        [seen] = await b.running_workers()
        assert (seen.id, seen.host, seen.pid, seen.agents, seen.concurrency, seen.draining) == (
            worker.id,
            "host-1",
            4242,
            ["sales:v1"],
            8,
            True,
        )
        assert seen.heartbeat_at >= seen.started_at > 0
        await b.stop_worker(worker.id)
        assert await a.running_workers() == []


async def test_every_connection_runs_without_jit(pg_database: str) -> None:
    """JIT compiling one of these short statements (a generic plan costed over
    jit_above_cost on a large table) takes longer than running it."""
    async with backends(pg_database, 1) as (store,):
        await store.get_session("none")  # the pool has opened its connections
        assert store._pool is not None
        async with store._pool.acquire() as conn:
            assert await conn.fetchval("SHOW jit") == "off"
        assert await sql(pg_database, "SHOW jit") == [("on",)]  # the server's default stays
