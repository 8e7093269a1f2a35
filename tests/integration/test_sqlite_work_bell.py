"""SQLite's work bell (``_sqlite_bell``): a store that queues a run wakes the stores of the
same database that wait for work, in this process and in others; the poll stays for what
no bell announces."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from harnessx._state import Delta, Phase
from harnessx.store import SQLiteBackend
from harnessx.store._records import Leadership, Orphan
from harnessx.store._scheduling import Schedule
from harnessx.store._sqlite_bell import SUPPORTED

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="the work bell needs Linux's abstract sockets")

START = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "go"}])
# Far longer than any wake-up takes: a waiter still waiting this long was not rung (and the
# waits below are for the ring, never for a poll).
NEVER = 60.0


async def queue(store: SQLiteBackend, run_id: str, **schedule: float) -> None:
    session = f"s-{run_id}"
    await store.create_session(session, "a@v1", {})
    lease = await store.claim(session, "submitter")
    await store.create_run(lease, run_id, None, "go", START, queued=True, schedule=Schedule(**schedule))


async def waiting(store: SQLiteBackend) -> asyncio.Task[bool]:
    """``store`` waiting for work, its bell bound."""
    assert await store.wait_for_work(0.001) is False  # nothing rang: the wait ran out
    return asyncio.create_task(store.wait_for_work(NEVER))


async def test_a_run_another_store_queues_wakes_a_store_waiting_for_work(tmp_path: Path) -> None:
    db = tmp_path / "pool.sqlite3"
    async with SQLiteBackend(db) as worker, SQLiteBackend(db) as submitter:
        woken = await waiting(worker)
        await queue(submitter, "r1")
        assert await asyncio.wait_for(woken, NEVER / 2) is True
        # A burst rings once per run; the waiter after it is not woken by the burst's rest.
        await queue(submitter, "r2")
        await queue(submitter, "r3")
        assert await asyncio.wait_for(worker.wait_for_work(NEVER), NEVER / 2) is True
        assert await worker.wait_for_work(0.05) is False


async def test_a_delayed_run_does_not_ring(tmp_path: Path) -> None:
    db = tmp_path / "pool.sqlite3"
    async with SQLiteBackend(db) as worker, SQLiteBackend(db) as submitter:
        await waiting(worker)
        woken = asyncio.create_task(worker.wait_for_work(0.3))
        await queue(submitter, "later", delay=3600.0)
        assert await woken is False  # its time comes by polling


async def test_a_requeue_and_an_orphans_recovery_ring(tmp_path: Path) -> None:
    db = tmp_path / "pool.sqlite3"
    async with SQLiteBackend(db) as worker, SQLiteBackend(db) as other:
        await queue(other, "r1")
        ((lease, run_id),) = await other.claim_queued("w", None, 1)
        woken = await waiting(worker)
        await other.requeue(lease, run_id)
        assert await asyncio.wait_for(woken, NEVER / 2) is True
        await other.release(lease)  # as a worker handing the run off does next

        ((lease, run_id),) = await other.claim_queued("w", None, 1)
        term = await other.try_leadership("supervisor")
        assert isinstance(term, Leadership)
        woken = await waiting(worker)
        orphan = Orphan(lease.session_id, lease.owner, lease.generation, "a@v1", "dead")
        recovery = await other.recover_orphan(term, orphan, requeue=True)
        assert recovery is not None and recovery.run_id == run_id
        assert await asyncio.wait_for(woken, NEVER / 2) is True


WAITER = textwrap.dedent(
    """
    import asyncio, sys
    from harnessx.store import SQLiteBackend

    async def main():
        async with SQLiteBackend(sys.argv[1]) as store:
            await store.wait_for_work(0.001)  # binds the bell
            print("ready", flush=True)
            print(await store.wait_for_work(float(sys.argv[2])), flush=True)

    asyncio.run(main())
    """
)


async def test_a_worker_process_is_woken_by_another_process(tmp_path: Path) -> None:
    db = tmp_path / "pool.sqlite3"
    async with SQLiteBackend(db) as submitter:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WAITER, str(db), str(NEVER), stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        try:
            assert await child.stdout.readline() == b"ready\n"
            await queue(submitter, "r1")
            assert await asyncio.wait_for(child.stdout.readline(), NEVER / 2) == b"True\n"
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
