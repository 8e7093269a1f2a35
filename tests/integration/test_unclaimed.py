"""A pool run nobody claims: its follower says so, once, and what to start."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from durable_support import BackendTarget
from waiting import wait_until

from harness_workers import Worker, WorkerConfig
from harnessx import Agent, AgentRef, AgentRegistry, AgentRuntime, RunStatus
from harnessx._observe import UNCLAIMED_WARNING_SECONDS, _Watch

# Each test waits out the follower's warning delay and then watches it stay quiet.
pytestmark = pytest.mark.slow

NOTICE = "no pool worker has claimed it yet"


async def notices(caplog: pytest.LogCaptureFixture, within: float = 30) -> list[str]:
    deadline = time.monotonic() + within
    while not (found := [r.getMessage() for r in caplog.records if NOTICE in r.getMessage()]):
        assert time.monotonic() < deadline, "no notice was logged"
        await asyncio.sleep(0.05)
    return found


def count_looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The looks the follower takes at the run's row (where it decides to warn), counted as
    they happen: ``[n]``."""
    looks = [0]
    seen = _Watch.seen

    async def counted(watch: _Watch, record: Any) -> None:
        looks[0] += 1
        await seen(watch, record)

    monkeypatch.setattr(_Watch, "seen", counted)
    return looks


async def follow_then_cancel(
    runtime: AgentRuntime, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Any]:
    looks = count_looks(monkeypatch)
    handle = await runtime.submit("Summarise the week.")
    started = time.monotonic()
    result = asyncio.create_task(handle.result())
    said = await notices(caplog)
    assert time.monotonic() - started >= UNCLAIMED_WARNING_SECONDS - 0.5  # a few seconds, not at once
    # It is said once: three more looks at the run later, still one line.
    seen = looks[0]
    await wait_until(lambda: looks[0] >= seen + 3, "three more looks at the run")
    assert len(await notices(caplog)) == 1 and not result.done()
    await runtime.cancel()  # the follower still gets its answer
    return said, await asyncio.wait_for(result, 30)


async def test_with_no_worker_running_the_follower_says_what_to_start(
    target: BackendTarget, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="harnessx.observe")
    async with target.open() as store:
        runtime = AgentRuntime(AgentRef("assistant", "v1"), backend=store, execution="pool")
        (said,), result = await follow_then_cancel(runtime, caplog, monkeypatch)
        await runtime.stop()
    assert "no harness-worker is running on this store" in said
    assert "assistant@v1" in said and "harness-worker --agents MODULE:REGISTRY" in said
    assert result.status is RunStatus.CANCELLED


async def test_with_workers_that_lack_the_agent_the_follower_says_so(
    target: BackendTarget, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="harnessx.observe")
    registry = AgentRegistry()
    registry.register("billing", lambda: Agent(), version="v3")
    async with target.open() as worker_store, target.open() as store:
        worker = Worker(worker_store, registry, WorkerConfig(concurrency=1))
        running = asyncio.create_task(worker.run())
        await worker.registered.wait()
        runtime = AgentRuntime(AgentRef("assistant", "v1"), backend=store, execution="pool")
        try:
            (said,), result = await follow_then_cancel(runtime, caplog, monkeypatch)
        finally:
            await runtime.stop()
            worker.drain()
            await running
    assert "1 worker(s) run on this store, but none has agent assistant@v1" in said
    assert result.status is RunStatus.CANCELLED
