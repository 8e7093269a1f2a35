"""RunWaiters: a commit wakes every waiter of its run, and nothing is kept once waits end."""

from __future__ import annotations

import asyncio
import contextlib

from waiting import wait_until

from harnessx.store._waiters import RunWaiters


async def wait(waiters: RunWaiters, run_id: str, seconds: float) -> bool:
    async with waiters.waiting(run_id) as event:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
        return event.is_set()


async def test_a_commit_wakes_every_waiter_of_its_run_only() -> None:
    waiters = RunWaiters()
    first = asyncio.create_task(wait(waiters, "r1", 5))
    second = asyncio.create_task(wait(waiters, "r1", 5))
    other = asyncio.create_task(wait(waiters, "r2", 0.1))
    await wait_until(lambda: waiters._waiting == {"r1": 2, "r2": 1}, "the three waits to begin")
    waiters.wake("r1")
    assert await first and await second and not await other
    assert len(waiters) == 0


async def test_waits_that_time_out_keep_nothing_but_leave_the_event_to_a_waiter_still_there() -> None:
    waiters = RunWaiters()
    assert not any(await asyncio.gather(*(wait(waiters, f"r{n}", 0.01) for n in range(50))))
    assert len(waiters) == 0
    patient = asyncio.create_task(wait(waiters, "r1", 5))
    assert not await wait(waiters, "r1", 0.01)
    waiters.wake("r1")
    assert await patient
    assert len(waiters) == 0


async def test_wake_all_wakes_every_run() -> None:
    waiters = RunWaiters()
    tasks = [asyncio.create_task(wait(waiters, f"r{n}", 5)) for n in range(3)]
    await wait_until(lambda: len(waiters._waiting) == 3, "the three waits to begin")
    waiters.wake_all()
    assert all(await asyncio.gather(*tasks))
