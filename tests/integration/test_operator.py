"""Operators' actions (the console's and the terminal's), on both backends: each goes through
the runtime's verbs, needs no agent code, requeues a pool run, and lands in the audit trail."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget, ledger_lines, make_agent, spawn_child

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    ToolCall,
)
from harnessx._errors import ConfigurationError, UnknownExecutionKey
from harnessx._operator import Operator
from harnessx.store._protocol import Store


def asks_registry(release: threading.Event) -> AgentRegistry:
    def script(request: Any) -> ProviderResponse | str:
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
            release.wait(30)
            return f"step {n} done"

        return agent

    def build_manual() -> Agent:
        agent = Agent(provider=ScriptedProvider(script))

        @agent.tools.register(replay_policy="manual", timeout_seconds=0.05)
        def step(n: int) -> str:
            """One step that outlives its timeout, so its outcome is uncertain.

            Args:
                n: Step number.
            """
            release.wait(30)
            return f"step {n} done"

        return agent

    registry = AgentRegistry()
    registry.register("asks", lambda: build("ask"))
    registry.register("plain", lambda: build(None))
    registry.register("manual", build_manual)
    return registry


Fixture = tuple[Store, threading.Event, Worker]


@pytest.fixture
async def pool(target: BackendTarget) -> AsyncIterator[Fixture]:
    release = threading.Event()
    async with target.open() as worker_store, target.open() as client:
        config = WorkerConfig(concurrency=4, stats_interval=0.05)
        worker = Worker(worker_store, asks_registry(release), config)
        task = asyncio.create_task(worker.run())
        await worker.registered.wait()
        try:
            yield client, release, worker
        finally:
            release.set()
            worker.drain()
            await task


async def submit(store: Store, name: str) -> tuple[str, str]:
    runtime = AgentRuntime(AgentRef(name, "v1"), backend=store, execution="pool")
    handle = await runtime.submit("go")
    await runtime.stop()
    return handle.session_id, handle.run_id


async def wait_status(store: Store, run_id: str, status: str, within: float = 30) -> None:
    for _ in range(int(within / 0.02)):
        record = await store.get_run(run_id)
        if record is not None and record.status == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not become {status}: {record}")


async def pending_key(store: Store, run_id: str) -> str:
    [entry] = [e for e in await store.tool_calls(run_id) if e.pending()]
    return entry.execution_key


async def test_approving_a_pool_run_requeues_it_and_is_audited(pool: Fixture) -> None:
    store, release, _ = pool
    release.set()
    _, run_id = await submit(store, "asks")
    await wait_status(store, run_id, "awaiting_input")
    key = await pending_key(store, run_id)
    done = await Operator(store, "alice", "console").approve(key)
    assert done.requeued and "queued for any worker" in done.message
    await wait_status(store, run_id, "completed")
    [action] = await store.run_actions(run_id)
    assert (action.actor, action.via, action.action, action.outcome) == ("alice", "console", "approve", "ok")
    assert action.execution_key == key and action.detail == {"requeued": True}
    # The same call cannot be decided twice; the refusal is said before anything is recorded.
    with pytest.raises(UnknownExecutionKey, match="it is completed"):
        await Operator(store, "bob", "cli").approve(key, allow=False)
    assert len(await store.run_actions(run_id)) == 1


async def test_declining_a_pool_run(pool: Fixture) -> None:
    store, release, _ = pool
    release.set()
    _, run_id = await submit(store, "asks")
    await wait_status(store, run_id, "awaiting_input")
    done = await Operator(store, "alice", "cli").approve(await pending_key(store, run_id), allow=False)
    assert done.requeued
    await wait_status(store, run_id, "completed")
    state = await store.load_state(run_id)
    assert state.output == "finished: Permission denied"
    assert [a.action for a in await store.run_actions(run_id)] == ["decline"]


async def test_recording_the_result_of_an_uncertain_call_of_a_pool_run(pool: Fixture) -> None:
    store, release, _ = pool
    _, run_id = await submit(store, "manual")
    await wait_status(store, run_id, "awaiting_input")
    release.set()
    done = await Operator(store, "alice", "console").resolve(
        await pending_key(store, run_id), result="stepped by hand"
    )
    assert done.requeued
    await wait_status(store, run_id, "completed")
    # The model was given the recorded result as the call's answer.
    assert (await store.load_state(run_id)).output == "finished: stepped by hand"


async def test_pause_resume_and_cancel_a_running_pool_run(pool: Fixture) -> None:
    store, release, worker = pool
    session_id, run_id = await submit(store, "plain")
    await wait_status(store, run_id, "running")
    operator = Operator(store, "carol", "console")
    for _ in range(500):  # until the worker holds it (the tool waits on the event)
        session = await store.get_session(session_id)
        if session is not None and session.lease_owner is not None:
            break
        await asyncio.sleep(0.02)
    paused = await operator.pause(session_id)
    assert "asked the process driving" in paused.message
    for _ in range(500):  # until the worker relays the request to the run it drives
        if run_id in worker.active and worker.active[run_id].control.pause_requested:
            break
        await asyncio.sleep(0.02)
    release.set()
    await wait_status(store, run_id, "paused")
    with pytest.raises(ConfigurationError, match="not running"):
        await operator.pause(session_id)
    resumed = await operator.resume(session_id)
    assert resumed.requeued
    await wait_status(store, run_id, "completed")
    with pytest.raises(ConfigurationError, match="nothing to cancel"):
        await operator.cancel(session_id)
    assert [a.action for a in await store.run_actions(run_id)] == ["pause", "resume"]
    assert {a.outcome for a in await store.run_actions(run_id)} == {"ok"}


async def test_cancelling_a_queued_run_nobody_serves(pool: Fixture) -> None:
    store, _, _ = pool
    session_id, run_id = await submit(store, "unknown-agent")
    done = await Operator(store, "dave", "cli").cancel(session_id)
    assert done.message == f"cancelled run {run_id}"
    record = await store.get_run(run_id)
    assert record is not None and record.status == "cancelled"
    assert (await store.count_runs()).get("queued", 0) == 0


@pytest.mark.process
@pytest.mark.parametrize("choice", ["result", "retry", "abort"])
async def test_resolving_an_uncertain_call_of_a_local_session(
    target: BackendTarget, tmp_path: Path, choice: str
) -> None:
    """A session started with an Agent instance: the operator needs no agent code to decide;
    the application continues it."""
    ledger = str(tmp_path / "ledger")
    agent = {"policy": "manual", "ledger": ledger}
    child = spawn_child(target, tmp_path, agent=agent, kill_at_phase="dispatch")
    code, _, _ = child.finish()
    assert code == -9
    async with target.open() as store:
        app = AgentRuntime(make_agent(**agent), backend=store)
        handle = await app.resume(child.session_id)
        assert handle is not None
        waiting = await handle.result()
        assert waiting.needs_input and waiting.pending[0].status == "uncertain"
        key = waiting.pending[0].execution_key
        # A runtime without the agent's definition may not decide for it (checks_definition);
        # the operator's runtime decides with no definition at all.
        bare = AgentRuntime(backend=store)
        with pytest.raises(ConfigurationError, match="is not registered on this agent"):
            await bare.resolve_tool(key, retry=True)
        await bare.aclose()
        operator = Operator(store, "erin", "console")
        if choice == "result":
            done = await operator.resolve(key, result="the report was written by hand")
        elif choice == "retry":
            done = await operator.resolve(key, retry=True)
        else:
            done = await operator.resolve(key, abort=True)
        assert not done.requeued
        [action] = await store.run_actions(waiting.run_id)
        assert (action.action, action.outcome) == (f"resolve_{choice}", "ok")
        if choice == "abort":
            assert "ended cancelled" in done.message
            assert (await store.get_run(waiting.run_id)).status == "cancelled"  # type: ignore[union-attr]
            return
        assert "AgentRuntime.resume" in done.message  # the application continues it
        again = await app.resume(child.session_id)
        assert again is not None
        result = await again.result()
        await app.stop()
    assert result.ok
    invoked = len(ledger_lines(ledger))
    if choice == "result":
        assert "the report was written by hand" in result.output and invoked == 0
    else:
        assert invoked == 1  # invoked again, once
