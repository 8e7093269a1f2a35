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
    than claim again at once, in the way of the runs it has just claimed. Its polls are 30 s
    apart here, so only the run finishing can wake it."""
    from chaos.agents import registry
    from harness_workers._worker import Worker, WorkerConfig

    async with target.open() as store:
        submitted: list[str] = []
        seen: list[str | None] = []  # at each claim after the submission: the run's status
        claim = store.claim_queued

        async def claim_queued(*args: Any, **kwargs: Any) -> Any:
            if submitted:
                run = await store.get_run(submitted[0], messages=False)
                seen.append(None if run is None else run.status.value)
            return await claim(*args, **kwargs)

        store.claim_queued = claim_queued
        config = WorkerConfig(concurrency=4, stats_interval=60, poll_min=30, poll_max=30)
        worker = Worker(store, registry, config)
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(worker.registered.wait(), 30)
            runtime = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
            handle = await runtime.submit("Write the report.")
            submitted.append(handle.run_id)
            assert (await asyncio.wait_for(handle.result(), 60)).ok
            await runtime.stop()
            deadline = asyncio.get_running_loop().time() + 30
            while len(seen) < 2:  # the claim that took it, then the one its end woke
                assert asyncio.get_running_loop().time() < deadline, seen
                await asyncio.sleep(0.01)
            # Woken by the submission, the first took the run; the next came once it ended,
            # not at once (the run still running).
            assert seen[1] == "completed", seen
        finally:
            worker.drain()
            await running
