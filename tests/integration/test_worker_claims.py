"""How a pool worker's claim loop spends its claims, with a worker in this process on both
backends (a real SQLite file, a real PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_support import BackendTarget

from harnessx import AgentRef, AgentRuntime


async def test_a_claim_that_comes_back_short_is_not_made_again_at_once(target: BackendTarget) -> None:
    """A claim that took fewer runs than the worker had free slots found no more it may take:
    the worker waits (for a run of its own to finish, a run to be queued, or its poll) rather
    than claim again at once, in the way of the runs it has just claimed. Its polls are 5 s
    apart here, far longer than the run takes. The run is submitted through a store
    of its own, as by another process (a store also wakes its own process's waiters at once,
    and its notification would then come a second time, during the claim)."""
    from chaos.agents import registry
    from harness_workers._worker import Worker, WorkerConfig

    async with target.open() as store, target.open() as submitter:
        taken: list[str] = []  # the run the first claim to take one took
        seen: list[str | None] = []  # at each claim after that one: that run's status
        claim = store.claim_queued

        async def claim_queued(*args: Any, **kwargs: Any) -> Any:
            if taken:
                run = await store.get_run(taken[0], messages=False)
                seen.append(None if run is None else run.status.value)
            claims = await claim(*args, **kwargs)
            if not taken:
                taken.extend(run_id for _, run_id in claims)
            return claims

        # The run is submitted only while the worker waits for work, listening: a notification
        # that came during a claim instead (the worker just started) is kept for the next
        # wait, which then claims at once, as it should, but not in the way this test counts.
        # On PostgreSQL the first wait only begins to listen and returns at once.
        waits: list[bool] = []  # one a wait entered: True while it lasts
        wait = store.wait_for_work

        async def wait_for_work(max_wait: float) -> bool:
            waits.append(True)
            try:
                return await wait(max_wait)
            finally:
                waits[-1] = False

        store.claim_queued, store.wait_for_work = claim_queued, wait_for_work
        config = WorkerConfig(concurrency=4, stats_interval=60, poll_min=5, poll_max=5)
        worker = Worker(store, registry, config)
        running = asyncio.create_task(worker.run())
        try:
            listening = 2 if target.kind == "postgres" else 1
            deadline = asyncio.get_running_loop().time() + 30
            while not (len(waits) >= listening and waits[-1]):
                assert asyncio.get_running_loop().time() < deadline, "the worker never waited for work"
                await asyncio.sleep(0.01)
            runtime = AgentRuntime(AgentRef("safe", "v1"), backend=submitter, execution="pool")
            handle = await runtime.submit("Write the report.")
            assert (await asyncio.wait_for(handle.result(), 60)).ok
            await runtime.stop()
            assert taken == [handle.run_id]
            deadline = asyncio.get_running_loop().time() + 30
            while not seen:  # the claim after the one that took it: woken by its end
                assert asyncio.get_running_loop().time() < deadline, "no claim after the run ended"
                await asyncio.sleep(0.01)
            # Not at once, while the run was still running.
            assert seen[0] == "completed", seen
        finally:
            worker.drain()
            await running
