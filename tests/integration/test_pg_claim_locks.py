"""A claim does not pass over a queued run because something else is writing its session's
row at that moment (PostgreSQL).

Claimers pass over each other's runs (``SKIP LOCKED`` on the run's row): two workers never
wait for, or get, the same run. But the session's row is also written by processes that are
not claiming: the submitter that awaits the run announces it on the session
(``await_run``, ``watch_run``) straight after queueing it, which is exactly when the workers,
woken by the run's notification, claim it. A claim that skipped a session row locked by
that announcement came back empty, and the run waited for the workers' next poll (20 ms and
more: the claim latency's p99 of ~30 ms in bench/scheduling.py's plain modes). The claim
waits for the session's row instead (a short write), and then checks the session again.

Each path of ``harnessx_claim_runs`` is exercised: plain runs, a worker that names its
agents, a tenant's runs (the fair-share path) and a run under a key's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from harnessx._state import Delta, Phase
from harnessx.store import PostgresBackend
from harnessx.store._scheduling import Schedule

SCHEMA = "harness_x"

PATHS: dict[str, tuple[Schedule | None, list[str] | None]] = {
    "plain": (None, None),
    "named agents": (None, ["sales:v1", "other:v1"]),
    "tenant": (Schedule(tenant="acme"), None),
    "limited key": (Schedule(concurrency_key="key:1"), None),
}


async def queued_run(store: PostgresBackend, session_id: str, schedule: Schedule | None) -> None:
    await store.create_session(session_id, "sales:v1", {})
    lease = await store.claim(session_id, "app")
    await store.create_run(
        lease,
        f"{session_id}-run",
        None,
        "go",
        Delta(Phase.PREPARE_MODEL_CALL),
        queued=True,
        schedule=schedule,
    )
    await store.release(lease)


@contextlib.asynccontextmanager
async def holding(dsn: str, statement: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """``statement`` run in a transaction of another connection, held open until the
    yielded ``commit`` is awaited (or the block ends)."""
    conn: Any = await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute(statement)
        yield transaction.commit
    finally:
        await conn.close()


async def blocked_on_a_row(dsn: str, claim: asyncio.Task[Any]) -> None:
    """Return once a backend waits for a row lock (the claim, behind the held row); fail if
    the claim finishes first (it passed the row over) or nothing waits within 10 s."""
    conn: Any = await asyncpg.connect(dsn)
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'transactionid'"
        ):
            assert not claim.done(), f"the claim did not wait for the session's row: {claim.result()}"
            assert asyncio.get_running_loop().time() < deadline, "the claim never waited for the row"
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


@pytest.mark.parametrize("path", list(PATHS))
async def test_a_claim_waits_for_a_session_row_being_written_rather_than_passing_the_run_over(
    pg_database: str, path: str
) -> None:
    schedule, agents = PATHS[path]
    async with PostgresBackend(pg_database) as store:
        if path == "limited key":
            await store.set_concurrency_limit("key:*", 5)
        await queued_run(store, "s", schedule)
        # What await_run does, held open a moment: the session's row is locked.
        awaiting = "UPDATE sessions SET awaited_until = now() + interval '5 s' WHERE id = 's'"
        async with holding(pg_database, awaiting) as commit:
            claim = asyncio.create_task(store.claim_queued("w", agents, 4))
            await blocked_on_a_row(pg_database, claim)
            await commit()
            claims = await asyncio.wait_for(claim, 10)
        assert [run_id for _, run_id in claims] == ["s-run"]
        lease, _ = claims[0]
        assert lease.generation == 2  # the app's claim was 1: the session's latest row, leased


async def test_a_session_taken_while_the_claim_waited_is_not_claimed(pg_database: str) -> None:
    """The session's row is checked again once the claim has it: a session whose lease was
    taken meanwhile (by the writer the claim waited for) is not leased a second time."""
    async with PostgresBackend(pg_database) as store:
        await queued_run(store, "s", None)
        taking = (
            "UPDATE sessions SET lease_owner = 'other/x', generation = generation + 1, "
            "lease_expires_at = clock_timestamp() + interval '60 s' WHERE id = 's'"
        )
        async with holding(pg_database, taking) as commit:
            claim = asyncio.create_task(store.claim_queued("w", None, 4))
            await blocked_on_a_row(pg_database, claim)
            await commit()
            claims = await asyncio.wait_for(claim, 10)
        assert list(claims) == []


async def test_a_session_held_against_removal_only_does_not_hold_a_claim_up(pg_database: str) -> None:
    """A session's row held FOR KEY SHARE (a foreign key's check, compaction's batch) leaves
    a claim free to lease it at once: the claim's lock is the lease's own, FOR NO KEY UPDATE."""
    async with PostgresBackend(pg_database) as store:
        await queued_run(store, "s", None)
        async with holding(pg_database, "SELECT 1 FROM sessions WHERE id = 's' FOR KEY SHARE"):
            claims = await asyncio.wait_for(store.claim_queued("w", None, 4), 5)  # while it holds
        assert [run_id for _, run_id in claims] == ["s-run"]
