"""A session whose holder is letting go: resume, decide and cancel wait for it.

A worker that pauses a run (or stops it to wait for a decision) commits that boundary,
and only then releases the session. A caller acting in between used to take the held
session for a run being driven: ``resume()`` returned a handle following a run nobody
drives (it waited for ever), a decision or a cancel failed or was lost.
"""

from __future__ import annotations

import asyncio
from typing import Any

from durable_support import BackendTarget, make_agent
from waiting import wait_until

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    RunStatus,
    ScriptedProvider,
    SessionBusyError,
)


def registry() -> AgentRegistry:
    agents = AgentRegistry()
    agents.register("plain", lambda: Agent(provider=ScriptedProvider(["all done"])), version="v1")
    return agents


async def held_then_released(holder: Any, store: Any, session_id: str, action: Any) -> Any:
    """Run ``action`` (on ``store``) while another live process holds the session, then let
    go of it."""
    lease = await holder.claim(session_id, "letting-go")
    refused = [0]
    claim = store.claim

    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await claim(*args, **kwargs)
        except SessionBusyError:
            refused[0] += 1
            raise

    store.claim = counted
    acting = asyncio.create_task(action())
    # The action meets the held session, and tries it again rather than give up.
    await wait_until(lambda: refused[0] >= 2 or acting.done(), "the action to meet the held session twice")
    assert not acting.done(), "it did not wait for the holder"
    await holder.release(lease)
    return await asyncio.wait_for(acting, 30)


async def test_resume_of_a_paused_pool_run_waits_for_its_holder_to_let_go(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as holder, target.open() as worker_store:
        runtime = AgentRuntime(AgentRef("plain", "v1"), backend=store, execution="pool")
        handle = await runtime.submit("go")  # no worker yet: it stays queued
        await runtime.pause()
        assert (await handle.result()).status is RunStatus.PAUSED
        resumed = await held_then_released(
            holder, store, handle.session_id, lambda: runtime.resume(handle.session_id)
        )
        record = await store.get_run(handle.run_id)
        assert record is not None and record.queued  # back in the queue, not followed in vain
        worker = Worker(worker_store, registry(), WorkerConfig(concurrency=1))
        running = asyncio.create_task(worker.run())
        try:
            result = await asyncio.wait_for(resumed.result(), 30)
        finally:
            worker.drain()
            await running
            await runtime.stop()
    assert result.ok and result.output == "all done"


async def test_a_decision_waits_for_the_holder_to_let_go(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as holder:
        runtime = AgentRuntime(make_agent(permission="ask"), backend=store)
        waiting = await runtime.run("Write the report.")
        (pending,) = waiting.pending
        await held_then_released(holder, store, waiting.session_id, lambda: runtime.approve(pending))
        resumed = await runtime.resume(waiting.session_id)
        assert resumed is not None
        assert (await resumed.result()).ok
        await runtime.stop()


async def test_cancel_of_a_waiting_run_waits_for_the_holder_to_let_go(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as holder:
        runtime = AgentRuntime(make_agent(permission="ask"), backend=store)
        waiting = await runtime.run("Write the report.")
        await held_then_released(holder, store, waiting.session_id, runtime.cancel)
        record = await store.latest_run(waiting.session_id)
        assert record is not None and record.status == "cancelled"  # not a request left for nobody
        await runtime.stop()
