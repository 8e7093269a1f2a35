"""Supervisor leadership as a fencing token, on both backends.

Taking leadership takes the role's next epoch in the store; every write the leader makes as
leader carries its term and applies only while that term is the latest. A leader deposed
without noticing (on PostgreSQL: its lock went with a terminated connection, as in a server
restart; on SQLite: its lock file was removed under it) is refused by the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget
from pool_support import cut_leader_connection

from harnessx._errors import LeadershipLostError
from harnessx._state import Delta, Phase
from harnessx.store._protocol import Leadership, Lease, PoolScan, Store, WorkerInfo
from harnessx.store._queries import load_queries
from harnessx.testing import quote_ident
from supervisor import Supervisor, SupervisorConfig
from supervisor._supervisor import ROLE

SCHEMA = "harness_x"


async def pg(dsn: str, query: str, *args: Any) -> list[Any]:
    import asyncpg

    conn = await asyncpg.connect(dsn, server_settings={"search_path": quote_ident(SCHEMA)})
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def depose(target: BackendTarget) -> None:
    """Take the leader's lock away without telling it, as a server restart (PostgreSQL) or
    an operator removing the lock file (SQLite) would."""
    if target.kind == "sqlite":
        Path(f"{target.location}.{ROLE}.lock").unlink()
        return
    await cut_leader_connection(target.location)


async def orphan_run(store: Store, session_id: str, run_id: str) -> Lease:
    """A pool session whose holder is then closed (dead to everyone else), with its run."""
    await store.initialize()
    await store.create_session(session_id, "sales:v1", {})
    lease = await store.claim(session_id, "h")
    start = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}])
    await store.create_run(lease, run_id, None, "hi", start)
    await store.register_worker(WorkerInfo(store.process_id, "host", 4242, ["sales:v1"], 1))
    await store.aclose()
    return lease


async def test_each_takeover_takes_the_next_epoch(target: BackendTarget) -> None:
    async with target.open() as a, target.open() as b:
        first = await a.try_leadership(ROLE)
        assert first is not None and (first.role, first.holder, first.epoch) == (ROLE, a.process_id, 1)
        assert await a.try_leadership(ROLE) == first  # already ours: the same term
        assert await b.try_leadership(ROLE) is None
        assert await a.holds_leadership(first)
        await a.release_leadership(first)
        assert not await a.holds_leadership(first)
        second = await b.try_leadership(ROLE)
        assert second is not None and (second.holder, second.epoch) == (b.process_id, 2)
        assert second.since >= first.since
        await b.aclose()  # the hold dies with its holder
        third = await a.try_leadership(ROLE)
        assert third is not None and (third.holder, third.epoch) == (a.process_id, 3)


async def test_a_deposed_leaders_writes_are_refused_by_the_database(target: BackendTarget) -> None:
    async with target.open() as old, target.open() as new:
        dead_lease = await orphan_run(target.open(), "s1", "r1")
        deposed = await old.try_leadership(ROLE)
        assert deposed is not None
        (orphan,) = await old.find_orphans()
        await depose(target)
        taken = await new.try_leadership(ROLE)
        assert taken is not None and taken.epoch == deposed.epoch + 1
        assert taken.since >= deposed.since

        # The old leader has not noticed (it did not check): the database refuses it anyway.
        with pytest.raises(LeadershipLostError, match=f"epoch {deposed.epoch}"):
            await old.recover_orphan(deposed, orphan, requeue=True)
        with pytest.raises(LeadershipLostError):
            await old.mark_worker_dead(deposed, dead_lease.owner.split("/")[0])
        session = await new.get_session("s1")
        assert session is not None
        assert (session.lease_owner, session.generation) == (dead_lease.owner, dead_lease.generation)
        assert (await new.queue_stats()).depth == 0
        assert [w.id for w in await new.running_workers()] == [dead_lease.owner.split("/")[0]]
        assert not await old.holds_leadership(deposed)

        # The new leader's writes apply, after its term began.
        recovery = await new.recover_orphan(taken, orphan, requeue=True)
        assert recovery is not None and recovery.run_id == "r1"
        assert recovery.at >= taken.since
        marked = await new.mark_worker_dead(taken, dead_lease.owner.split("/")[0])
        assert marked is not None and marked >= taken.since
        assert await new.mark_worker_dead(taken, dead_lease.owner.split("/")[0]) is None  # already
        assert await new.running_workers() == []
        assert (await new.queue_stats()).depth == 1


async def test_a_leader_that_misses_its_deposition_steps_down_at_its_first_refused_write(
    target: BackendTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before each scan races with a takeover (checked, then deposed, then acts);
    the refused write is what makes the old leader stop."""
    async with target.open() as old_store, target.open() as new_store:
        old = Supervisor(old_store, SupervisorConfig(scan_interval=0.02, leader_retry=0.02))
        await orphan_run(target.open(), "s1", "r1")

        real_scan = old_store.pool_scan

        async def still_holds(term: Leadership, tracked: Sequence[str]) -> PoolScan:
            # As if each scan's check passed just before the deposition.
            view = await real_scan(term, tracked)
            if not view.holds:
                view = PoolScan(True, await old_store.find_orphans(), await old_store.running_workers())
            return view

        running = asyncio.create_task(old.run())
        try:
            while not old.is_leader:
                await asyncio.sleep(0.01)
            monkeypatch.setattr(old_store, "pool_scan", still_holds)
            await depose(target)
            assert await new_store.try_leadership(ROLE) is not None
            # An orphan the old leader finds only after the takeover.
            second = await orphan_run(target.open(), "s2", "r2")
            deadline = time.monotonic() + 20
            while old.is_leader:
                assert time.monotonic() < deadline, "the deposed leader kept leading"
                await asyncio.sleep(0.01)
        finally:
            old.stop()
            await running
        sample = old.metrics.registry.get_sample_value
        assert sample("harnessx_supervisor_writes_refused_total") == 1
        assert sample("harnessx_supervisor_leader") == 0 and sample("harnessx_supervisor_leader_epoch") == 0
        session = await new_store.get_session("s2")
        assert session is not None and session.generation == second.generation  # untouched
        assert "s2" in {o.session_id for o in await new_store.find_orphans()}


@pytest.mark.parametrize("target", ["postgres"], indirect=True)
async def test_a_takeover_waits_for_a_leader_write_in_flight(target: BackendTarget) -> None:
    """A leader write holds its term's row FOR SHARE until it commits, so the takeover that
    follows begins after it (the order the chaos checker relies on)."""
    import asyncpg

    async with target.open() as old, target.open() as new:
        await orphan_run(target.open(), "s1", "r1")
        deposed = await old.try_leadership(ROLE)
        assert deposed is not None
        (orphan,) = await old.find_orphans()
        await depose(target)
        conn = await asyncpg.connect(target.location, server_settings={"search_path": quote_ident(SCHEMA)})
        try:
            writing = conn.transaction()
            await writing.start()
            row = await conn.fetchrow(
                load_queries("postgres")["recover_orphan"],
                *(orphan.session_id, orphan.owner, orphan.generation, True),
                *(deposed.role, deposed.epoch, deposed.holder),
            )
            assert row is not None and row[0] and row[1]  # its term held when it started
            taking = asyncio.create_task(new.try_leadership(ROLE))
            deadline = time.monotonic() + 10
            while not await pg(
                target.location,
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'harnessx-liveness' "
                "AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO leadership%'",
            ):
                assert not taking.done(), "the takeover did not wait for the write in flight"
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await writing.commit()
        finally:
            await conn.close()
        taken = await asyncio.wait_for(taking, 10)
        assert taken is not None and taken.epoch == deposed.epoch + 1
        assert taken.since > row[4]


async def test_a_database_from_before_epochs_upgrades_and_leads(tmp_path: Path) -> None:
    from harnessx import SQLiteBackend
    from harnessx.store._migrations import load_migrations
    from harnessx.store._sqlite_file import _statements

    path = tmp_path / "db.sqlite3"
    # A database as the harnessx before leadership epochs left it: migrations 1 to 3.
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE harnessx_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                     "checksum TEXT NOT NULL, applied_at REAL NOT NULL)")  # fmt: skip
        for migration in load_migrations("sqlite"):
            if migration.name == "leadership":
                break
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO harnessx_migrations VALUES (?, ?, ?, 0)",
                (migration.version, migration.name, migration.checksum),
            )
    async with SQLiteBackend(path) as store:
        term = await store.try_leadership(ROLE)
        assert term is not None and term.epoch == 1
