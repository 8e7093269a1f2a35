"""SQLiteBackend specifics: schema checks, durability settings, liveness locks, bad rows."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from durable_support import make_agent
from waiting import wait_until

from harnessx import (
    AgentRuntime,
    ConfigurationError,
    CorruptStateError,
    SchemaError,
    SQLiteBackend,
    StorageError,
)
from harnessx._state import Delta, Phase
from harnessx.store._migrations import load_migrations


def raw(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql, params).fetchall()


async def test_fresh_database_is_migrated_in_wal_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    async with SQLiteBackend(path) as backend:
        mode = await backend._call(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0])
        sync = await backend._call(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
        thread = await backend._call(lambda conn: threading.current_thread().name)
    assert mode == "wal" and sync == 2  # 2 = FULL
    assert thread.startswith("harnessx-sqlite") and thread != threading.current_thread().name
    versions = raw(path, "SELECT version FROM harnessx_migrations")
    assert versions == [(m.version,) for m in load_migrations("sqlite")]


async def test_schema_checks_say_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    raw(path, "CREATE TABLE unrelated (x)")
    with pytest.raises(SchemaError, match=r"no harnessx schema: run 'harnessx migrate --sqlite"):
        await SQLiteBackend.connect(path, auto_migrate=False)

    await (await SQLiteBackend.connect(path)).aclose()
    await (await SQLiteBackend.connect(path, auto_migrate=False)).aclose()  # up to date: fine

    raw(path, "INSERT INTO harnessx_migrations VALUES (99, 'future', 'x', 0)")
    with pytest.raises(SchemaError, match="version 99, newer than this harnessx knows"):
        await SQLiteBackend.connect(path)
    raw(path, "DELETE FROM harnessx_migrations WHERE version = 99")

    raw(path, "UPDATE harnessx_migrations SET checksum = 'tampered' WHERE version = 1")
    with pytest.raises(SchemaError, match="altered after it was applied"):
        await SQLiteBackend.connect(path, auto_migrate=False)


async def test_bad_paths_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="needs a file path"):
        SQLiteBackend(":memory:")
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello, this is not a database" * 100)
    with pytest.raises(StorageError, match="harnessx database"):
        await SQLiteBackend.connect(not_a_db)


async def test_liveness_lock_lives_with_the_backend(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    backend = await SQLiteBackend.connect(path)
    lock = backend.owners_dir / f"{backend.process_id}.lock"
    assert lock.exists()
    other = await SQLiteBackend.connect(path)
    assert await other.process_alive(backend.owner_for("x"))
    await backend.aclose()
    assert not lock.exists()
    assert not await other.process_alive(backend.owner_for("x"))
    await other.aclose()


async def test_renew_reports_lost_leases_in_one_call(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    async with SQLiteBackend(path, lease_seconds=0.2) as mine, SQLiteBackend(path) as theirs:
        await mine.create_session("a", None, {})
        await mine.create_session("b", None, {})
        lease_a = await mine.claim("a", "h")
        lease_b = await mine.claim("b", "h")
        raw(path, "UPDATE sessions SET lease_expires_at = 0 WHERE id = 'b'")
        await theirs.claim("b", "thief")
        renewal = await mine.renew([lease_a, lease_b])
        assert renewal.held == {"a"} and renewal.lost == {"b"}


async def test_a_corrupt_row_is_reported_and_nothing_else_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    async with (
        SQLiteBackend(path) as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        waiting = await runtime.run("go")
    raw(path, "UPDATE tool_calls SET call = '{not json' WHERE run_id = ?", waiting.run_id)
    async with SQLiteBackend(path) as backend:
        runtime = AgentRuntime(make_agent(permission="ask"), backend=backend)
        with pytest.raises(CorruptStateError, match=r"loaded: tool call .* restore the database"):
            await runtime.resume(waiting.session_id)
        await runtime.stop()
    # The rest of the session is untouched.
    assert raw(path, "SELECT status FROM runs WHERE id = ?", waiting.run_id) == [("awaiting_input",)]


async def test_only_migrating_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "db.sqlite3"
    for options in ({"auto_migrate": False}, {"read_only": True}):
        with pytest.raises(
            SchemaError, match=r"no SQLite database at .*: check the path, or create one with"
        ):
            await SQLiteBackend.connect(missing, **options)
    assert list(tmp_path.iterdir()) == []
    report = await SQLiteBackend(missing).migrate()  # never opened: creates the file, says so
    assert report.before == 0 and report.after == len(load_migrations("sqlite"))
    assert report.describe().startswith(f"created the harnessx schema (version {report.after}) in {missing}")
    assert (await SQLiteBackend(missing).migrate()).applied == ()


async def test_a_read_only_backend_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    async with SQLiteBackend(path) as backend:
        await backend.create_session("s1", None, {})
    async with SQLiteBackend(path, read_only=True) as reader:
        assert (await reader.get_session("s1")) is not None
        assert [row.session_id for row in await reader.recent_sessions(5)] == ["s1"]
        with pytest.raises(StorageError, match="readonly"):
            await reader.create_session("s2", None, {})
        assert list((tmp_path / "db.sqlite3.owners").iterdir()) == []  # it takes no liveness lock


async def test_waiting_for_runs_other_processes_drive_is_one_look_for_all_of_them(tmp_path: Path) -> None:
    """A process waiting for many runs to stop looks at all of them in one statement per
    poll interval (StopPoller), and one run's stop, committed by another process, ends the
    wait for that run only."""
    import asyncio

    from harnessx._observe import until_stopped
    from harnessx._state import Delta, Phase
    from harnessx.testing._round_trips import SQLiteRoundTrips

    path = tmp_path / "db.sqlite3"
    async with SQLiteBackend(path) as driver, SQLiteBackend(path) as waiter:
        leases = {}
        for n in range(20):
            await driver.create_session(f"s{n}", None, {})
            leases[n] = await driver.claim(f"s{n}", "h")
            await driver.create_run(leases[n], f"r{n}", None, "hi", Delta(Phase.PREPARE_MODEL_CALL))
        with SQLiteRoundTrips(waiter) as trips:
            waits = {
                n: asyncio.ensure_future(until_stopped(waiter, f"r{n}", poll_interval=0.01))
                for n in range(20)
            }
            looks = "r.status = 'running'"  # the poller's statement
            await wait_until(lambda: sum(looks in " ".join(t) for t in trips.trips) >= 20, "twenty looks")
            # Run by run, that would have been 20 x 20 reads; here 20 first reads, the looks and
            # a waiter's own read now and then (every 3 s).
            assert trips.count < 20 + 20 + 20 * 3
            await driver.end_run(
                leases[7], "r7", status="completed", stop_reason="end_turn", error=None, events=[]
            )
            record = await asyncio.wait_for(waits.pop(7), 30)
            assert record is not None and record.stopped
            assert not any(wait.done() for wait in waits.values())
        for wait in waits.values():
            wait.cancel()
        await asyncio.gather(*waits.values(), return_exceptions=True)
        assert len(waiter._waiters) == 0 and not waiter._stops._runs


def copy_queued_run(path: Path, run_id: str, upto: int) -> None:
    """Runs ``run_id``-1 .. ``run_id``-``upto`` queued (those not there yet): copies of the
    queued run ``run_id`` and its session, made in SQL (thousands in a second)."""
    renamed = {
        "sessions": {"id": "id || '-' || g.n"},
        "runs": {"id": "id || '-' || g.n", "session_id": "session_id || '-' || g.n"},
    }
    key = {"sessions": "id = (SELECT session_id FROM runs WHERE id = ?2)", "runs": "id = ?2"}
    with sqlite3.connect(path) as conn:
        for table, names in renamed.items():
            columns = [row[1] for row in conn.execute(f"PRAGMA table_xinfo({table})") if row[6] == 0]
            values = ", ".join(names.get(name, name) for name in columns)
            conn.execute(
                f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1) "
                f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) SELECT {values} FROM {table}, g "
                f"WHERE {key[table]}",
                (upto, run_id),
            )


@pytest.mark.parametrize("own", [True, False], ids=["own-run", "none-own"])
async def test_a_claim_naming_its_agents_does_not_read_other_agents_backlog(
    tmp_path: Path, own: bool
) -> None:
    # A worker names the agents it serves. Through schema 15 its claim read the tenant's queue
    # in rank order and passed over every run of other agents ranked before its own (24 ms a
    # claim with 20,000 of them); schema 16 reads each named agent's queue through its own
    # index. Counted in SQLite's virtual machine instructions (a progress handler's calls).
    path = tmp_path / "claims.sqlite3"
    steps: dict[int, int] = {}
    async with SQLiteBackend(path) as store:
        queued = [("other", "batch@v1", "r")] + ([("mine", "sales@v1", "own")] if own else [])
        for session, agent, run in queued:  # the worker's own run last: ranked behind them
            await store.create_session(session, agent, {})
            lease = await store.claim(session, "submitter")
            await store.create_run(lease, run, None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
            await store.release(lease)
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0  # go on

        for backlog in (200, 5_000):
            copy_queued_run(path, "r", backlog)
            counted[0] = 0
            await store._call(lambda conn: conn.set_progress_handler(count, 1))
            claimed = await store.claim_queued("w", ["sales@v1"], 1)
            await store._call(lambda conn: conn.set_progress_handler(None, 0))
            steps[backlog] = counted[0]
            assert [run_id for _, run_id in claimed] == (["own"] if own else [])
            for lease, run_id in claimed:  # back in the queue, behind the others again
                await store.requeue(lease, run_id)
                await store.release(lease)
    # Schema 16: about as many at 5,000 as at 200; schema 15 read every one of them.
    print("STEPS", steps)
    assert steps[5_000] < 1.5 * steps[200], steps
