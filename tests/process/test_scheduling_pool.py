"""Scheduling with real harness-worker processes: concurrency limits hold across the fleet,
checked from what the database recorded of each drive (its claim, its events), and a killed
worker's slot is given back when the supervisor takes its lease away."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget
from pool_support import Pool, audit_generations, driving_intervals, ledger, most_at_once

from harnessx import AgentRef, AgentRuntime, RunHandle

pytestmark = pytest.mark.process


@pytest.fixture
def pool(target: BackendTarget, tmp_path: Path):  # type: ignore[no-untyped-def]
    created = Pool(target, tmp_path)
    created.migrate()
    yield created
    created.stop_all()


def limits(pool: Pool, *args: str) -> str:
    done = pool.cli("limits", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def submit(store: Any, agent: str, count: int, **schedule: Any) -> list[tuple[AgentRuntime, RunHandle]]:
    submitted = []
    for index in range(count):
        runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
        await runtime.start()
        submitted.append((runtime, await runtime.submit(f"job {index}", **schedule)))
    return submitted


async def finish(submitted: list[tuple[AgentRuntime, RunHandle]], within: float = 120) -> None:
    results = await asyncio.wait_for(asyncio.gather(*(handle.result() for _, handle in submitted)), within)
    for runtime, _ in submitted:
        await runtime.stop()
    assert all(result.ok for result in results), results


async def test_a_key_limited_to_two_never_has_three_driving_across_four_workers(pool: Pool) -> None:
    pool.slow_tool = 0.3
    assert "at most 2 runs of crm" in limits(pool, "set", "crm", "2")
    # One run at a time per worker: two runs of the key at once are two processes' claims.
    for name in ("w1", "w2", "w3", "w4"):
        pool.worker(name, concurrency=1)
    await pool.wait_for_workers(4)
    async with pool.target.open(auto_migrate=False) as store:
        keyed = await submit(store, "safe", 16, concurrency_key="crm")
        free = await submit(store, "safe", 4)
        await finish(keyed + free)
    drives = await driving_intervals(pool.target)
    crm = [(start, end) for _, key, _, start, end in drives if key == "crm"]
    assert len(crm) == 16 and len(drives) == 20
    assert most_at_once(crm) == 2  # the limit held, and was reached
    assert await audit_generations(pool.target) == []
    assert "crm" in limits(pool, "list")


async def test_a_registrys_max_concurrent_holds_across_workers(pool: Pool) -> None:
    pool.slow_tool = 0.3
    for name in ("w1", "w2", "w3"):
        pool.worker(name, concurrency=4)
    await pool.wait_for_workers(3)
    async with pool.target.open(auto_migrate=False) as store:
        await finish(await submit(store, "limited", 10))
    drives = await driving_intervals(pool.target)
    limited = [(start, end) for _, _, agent, start, end in drives if agent == "limited@v1"]
    assert len(limited) == 10 and most_at_once(limited) == 2
    listing = limits(pool, "list")
    assert "agent:limited@v1" in listing and "registry" in listing


async def test_a_killed_workers_slot_is_freed_when_its_lease_goes(pool: Pool) -> None:
    pool.slow_tool = 1.0
    limits(pool, "set", "solo", "1")
    workers = [pool.worker("w1", concurrency=4), pool.worker("w2", concurrency=4)]
    pool.supervisor("s1")
    await pool.wait_for_workers(2)
    async with pool.target.open(auto_migrate=False) as store:
        submitted = await submit(store, "safe", 3, concurrency_key="solo")
        first = (await pool.wait_for_ledger(lambda lines: len(lines) >= 1))[0]
        (victim,) = [w for w in workers if w.popen.pid == first["pid"]]
        started = time.monotonic()
        victim.signal(signal.SIGKILL)  # it holds the key's only slot, mid-tool
        victim.wait()
        await finish(submitted)
        elapsed = time.monotonic() - started
    # The slot came back when the supervisor dropped the dead worker's lease, long before
    # the 30 s lease would have expired; never two runs of the key at once.
    assert elapsed < pool.lease_seconds
    drives = await driving_intervals(pool.target)
    # Four drives: the killed one's, the rest of that run's elsewhere, and the other two runs'.
    assert len(drives) == 4 and most_at_once([(start, end) for *_, start, end in drives]) == 1
    assert await audit_generations(pool.target) == []
    pids = [line["pid"] for line in ledger(pool.ledger_path)]
    assert len(pids) == 4 and victim.popen.pid not in pids[1:]  # the killed call ran again elsewhere
