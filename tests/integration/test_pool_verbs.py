"""Pool mode from the submitting process: every runtime verb works by reference.

A worker and a supervisor run in this process (with their own backends, so liveness and
leases behave as across processes); the submitter holds no agent code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget
from waiting import wait_until

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ExportPolicy,
    IncidentRecorder,
    ProviderResponse,
    RunStatus,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
)
from supervisor import Supervisor


@dataclass
class Gate:
    """Lets a test hold a tool call open (tools run in threads)."""

    entered: threading.Event
    release: threading.Event
    worker: Worker | None = None


def registry_with(gate: Gate) -> AgentRegistry:
    def script(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall("c", "step", {"n": 1})])
        return f"finished: {request.tool_results[0]['content']}"

    def build(permission: str | None) -> Agent:
        agent = Agent(provider=ScriptedProvider(script))

        @agent.tools.register(permission=permission, replay_policy="safe")
        def step(n: int) -> str:
            """One step.

            Args:
                n: Step number.
            """
            gate.entered.set()
            gate.release.wait(30)
            return f"step {n} done"

        return agent

    registry = AgentRegistry()
    registry.register("plain", lambda: build(None))
    registry.register("asks", lambda: build("ask"))
    return registry


@pytest.fixture
async def pool(target: BackendTarget) -> AsyncIterator[tuple[Any, Gate]]:
    gate = Gate(threading.Event(), threading.Event())
    async with target.open() as worker_store, target.open() as supervisor_store, target.open() as client:
        config = WorkerConfig(concurrency=4, stats_interval=0.05)
        worker = Worker(worker_store, registry_with(gate), config)
        gate.worker = worker
        supervisor = Supervisor(supervisor_store)
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(supervisor.run())]
        await worker.registered.wait()
        try:
            yield client, gate
        finally:
            gate.release.set()
            worker.drain()
            supervisor.stop()
            await asyncio.gather(*tasks)


def pooled(store: Any, name: str) -> AgentRuntime:
    return AgentRuntime(AgentRef(name, "v1"), backend=store, execution="pool")


async def test_submit_events_and_result_follow_a_worker(pool: tuple[Any, Gate]) -> None:
    store, gate = pool
    gate.release.set()
    async with pooled(store, "plain") as runtime:
        handle = await runtime.submit("go", request_id="r1")
        events = [event async for event in handle.events()]
        result = await handle.result()
        assert result.ok and result.output == "finished: step 1 done"
        assert [e.cursor for e in events] == [str(i) for i in range(1, len(events) + 1)]
        assert (await runtime.status())["run"].status is RunStatus.COMPLETED
        again = await runtime.submit("go", request_id="r1")
        assert again.run_id == handle.run_id


async def test_approve_with_resume_requeues_for_the_worker(pool: tuple[Any, Gate]) -> None:
    store, gate = pool
    gate.release.set()
    async with pooled(store, "asks") as runtime:
        waiting = await (await runtime.submit("go")).result()
        assert waiting.needs_input and waiting.pending[0].status == "approval"
        # Pool mode too returns the finished result: a worker drove the run meanwhile.
        final = await runtime.approve(waiting.pending[0], resume=True)
        assert final.output == "finished: step 1 done"


async def test_decline_then_resume(pool: tuple[Any, Gate]) -> None:
    store, _ = pool
    async with pooled(store, "asks") as runtime:
        waiting = await (await runtime.submit("go")).result()
        await runtime.decline(waiting.pending[0])
        handle = await runtime.resume(waiting.session_id)
        assert handle is not None
        assert (await handle.result()).output == "finished: Permission denied"


async def test_cancel_reaches_the_worker(pool: tuple[Any, Gate]) -> None:
    store, gate = pool
    async with pooled(store, "plain") as runtime:
        handle = await runtime.submit("go")
        await asyncio.to_thread(gate.entered.wait, 30)
        await runtime.cancel()
        result = await handle.result()
        assert result.status is RunStatus.CANCELLED
        assert await runtime.resume(result.session_id) is None


async def test_pause_then_resume_through_the_queue(pool: tuple[Any, Gate]) -> None:
    store, gate = pool
    async with pooled(store, "plain") as runtime:
        handle = await runtime.submit("go")
        await asyncio.to_thread(gate.entered.wait, 30)
        await runtime.pause()
        assert gate.worker is not None
        worker = gate.worker
        # The tool may return once the worker has the request: the run pauses at the next boundary.
        await wait_until(
            lambda: any(e.control.pause_requested for e in worker.active.values()),
            "the worker to pick the pause request up from the store",
        )
        gate.release.set()
        paused = await handle.result()
        assert paused.status is RunStatus.PAUSED
        resumed = await runtime.resume(paused.session_id)
        assert resumed is not None
        assert (await resumed.result()).ok


async def test_a_run_for_an_unknown_agent_waits_and_is_reported(pool: tuple[Any, Gate]) -> None:
    store, gate = pool
    async with pooled(store, "nobody-knows") as runtime:
        handle = await runtime.submit("go")
        assert gate.worker is not None
        unknown = gate.worker.metrics.queued_unknown.labels(agent="nobody-knows@v1")
        await wait_until(lambda: unknown._value.get() == 1, "the worker to report the unknown agent's run")
        stats = await store.queue_stats()
        assert stats.by_agent["nobody-knows@v1"][0] == 1  # still queued, untouched
        record = await store.get_run(handle.run_id)
        assert record is not None and record.event_count == 0


def unknown_agent_series(worker: Worker) -> dict[str, float]:
    (family,) = [
        m for m in worker.metrics.registry.collect() if m.name == "harnessx_queued_unknown_agent_runs"
    ]
    return {sample.labels["agent"]: sample.value for sample in family.samples}


async def test_made_up_agent_references_make_a_bounded_number_of_series(pool: tuple[Any, Gate]) -> None:
    from harness_workers._metrics import OTHER_AGENTS, UNKNOWN_AGENT_SERIES

    store, gate = pool
    made_up = [f"made-up-{n:03d}" for n in range(3 * UNKNOWN_AGENT_SERIES)]
    for name in made_up:
        async with pooled(store, name) as runtime:
            await runtime.submit("go")
    worker = gate.worker
    assert worker is not None

    def all_counted() -> dict[str, float] | None:  # the worker's next queue scan has seen them all
        series = unknown_agent_series(worker)
        return series if sum(series.values()) == len(made_up) else None

    series = await wait_until(all_counted, f"the worker to count {len(made_up)} runs of unknown agents")
    assert len(series) == UNKNOWN_AGENT_SERIES + 1
    assert series[OTHER_AGENTS] == len(made_up) - UNKNOWN_AGENT_SERIES
    assert set(series) - {OTHER_AGENTS} == {f"{name}@v1" for name in made_up[:UNKNOWN_AGENT_SERIES]}


async def test_a_recorded_pool_session_is_journaled_by_its_workers(
    pool: tuple[Any, Gate], tmp_path: Path
) -> None:
    store, gate = pool
    gate.release.set()
    runtime = AgentRuntime(AgentRef("asks", "v1"), backend=store, execution="pool", recording=True)
    async with runtime:
        waiting = await (await runtime.submit("go")).result()
        result = await runtime.approve(waiting.pending[0], resume=True)
        assert result.output == "finished: step 1 done"
        bundle = await runtime.export_incident(
            result.run_id, destination=tmp_path / "pool.hx", policy=ExportPolicy(include_payloads=True)
        )
    playback = await IncidentRecorder().playback(bundle)
    assert playback.report.valid and playback.report.complete, playback.report.issues
    assert playback.manifest["agent"] == {"name": "asks", "version": "v1"}
    (started,) = playback.of_kind("run.started")
    assert started["payload"]["agent"] == {"name": "asks", "version": "v1"}
    assert started["payload"]["config"] is None  # the submitter holds no definition
    kinds = [r["kind"] for r in playback.records]
    # The first claim from the queue is no resume; the one after the approval is.
    assert kinds.count("run.resumed") == 1
    assert kinds.index("tool.resolved") < kinds.index("run.resumed") < kinds.index("tool.started")
    assert [r["payload"]["content"] for r in playback.of_kind("tool.returned")] == ["step 1 done"]
