"""How the calls of one model reply run (harnessx 0.9.1's batches): ``concurrent=True``
calls together, the ``concurrent=False`` ones taking turns in the model's order *beside*
them; each call's dispatch and raw result committed as it happens, on each real backend.

The overlaps are shown with events, not timing: a serial call that waits for a concurrent
one to start cannot finish unless they run at the same time (``asyncio.wait_for`` only
turns the hang of a regression into a failure)."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentRuntime,
    Middleware,
    PermissionLevel,
    ProviderResponse,
    RunEventType,
    RunStatus,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
)

LIMIT = 10  # seconds a call waits for one it must overlap before the test fails


class Batch:
    """Tools ``fetch_a``, ``fetch_b`` (concurrent) and ``s1``, ``s2`` (serial) that log
    when they start and end; ``s1`` returns only once ``fetch_b`` has started."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.started: dict[str, asyncio.Event] = {}
        self.requests: list[ScriptedRequest] = []

    def agent(self, *names: str) -> Agent:
        def reply(request: ScriptedRequest) -> ProviderResponse | str:
            self.requests.append(request)
            if request.turn == 0:
                return ProviderResponse(tool_calls=[ToolCall(f"c{i}", n, {}) for i, n in enumerate(names)])
            return "done"

        agent = Agent(provider=ScriptedProvider(reply))
        for name in ("fetch_a", "fetch_b", "s1", "s2"):
            self.started[name] = asyncio.Event()
            agent.tools.register(
                name=name, permission=PermissionLevel.ALLOW, concurrent=name.startswith("fetch")
            )(self._tool(name))
        return agent

    def _tool(self, name: str) -> Any:
        async def tool() -> str:
            """Do one thing."""
            self.log.append(f"start {name}")
            self.started[name].set()
            if name == "s1":
                await asyncio.wait_for(self.started["fetch_b"].wait(), LIMIT)
            await asyncio.sleep(0)
            self.log.append(f"end {name}")
            return name

        return tool


async def test_a_serial_call_runs_beside_the_concurrent_ones() -> None:
    batch = Batch()
    agent = batch.agent("s1", "fetch_a", "fetch_b")
    result = await asyncio.wait_for(agent.run("go"), 2 * LIMIT)
    assert result.ok, result.error
    # s1 waited for fetch_b: it was not run alone first (harnessx-durable before 0.9.1's
    # batches ran a serial call by itself and timed out here).
    assert batch.log.index("start fetch_b") < batch.log.index("end s1")


async def test_serial_calls_take_turns_in_the_models_order_on_each_backend(target: BackendTarget) -> None:
    batch = Batch()
    agent = batch.agent("fetch_a", "s1", "fetch_b", "s2")
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("go")
        result = await asyncio.wait_for(handle.result(), 2 * LIMIT)
        assert result.ok, result.error
        events = [e async for e in handle.events()]
    assert batch.log.index("end s1") < batch.log.index("start s2"), "serial calls never overlap"
    assert batch.log.index("start fetch_b") < batch.log.index("end s1"), "but run beside the others"
    # Stored: each call's start (its dispatch) and its raw result, as they happened; the
    # first three start together in the model's order, s2 once s1's result is committed.
    seen = [
        (e.type, e.data.name)
        for e in events
        if e.type in (RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE)
    ]
    starts = [name for kind, name in seen if kind is RunEventType.TOOL_CALL_START]
    assert starts == ["fetch_a", "s1", "fetch_b", "s2"]
    assert seen.index((RunEventType.TOOL_CALL_COMPLETE, "s1")) < seen.index(
        (RunEventType.TOOL_CALL_START, "s2")
    )
    # The model reads the results in its own order.
    assert [r["tool_use_id"] for r in batch.requests[1].tool_results] == ["c0", "c1", "c2", "c3"]


async def test_a_failing_result_middleware_waits_for_the_calls_in_flight(target: BackendTarget) -> None:
    """The result middleware of ``quick`` raises while ``slow`` still runs: the run fails,
    but only once ``slow`` has returned and its raw result is committed (cancelling it
    would leave it dispatched with no result, to run again or to ask a person about)."""
    broke = asyncio.Event()
    ran: list[str] = []
    script = [ProviderResponse(tool_calls=[ToolCall("a", "quick", {}), ToolCall("b", "slow", {})]), "done"]
    agent = Agent(provider=ScriptedProvider(script))

    @agent.tools.register(permission=PermissionLevel.ALLOW)
    async def quick() -> str:
        """Return at once."""
        return "quick"

    @agent.tools.register(permission=PermissionLevel.ALLOW)
    async def slow() -> str:
        """Return once quick's middleware has failed."""
        await asyncio.wait_for(broke.wait(), LIMIT)
        await asyncio.sleep(0.05)
        ran.append("slow")
        return "slow"

    class Fails(Middleware):
        async def after_tool_execution(self, result: Any) -> Any:
            if result.content == "quick":
                broke.set()
                raise ValueError("the middleware broke")
            return result

    agent.middleware.add(Fails())
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await asyncio.wait_for(runtime.run("go"), 2 * LIMIT)
        assert result.status is RunStatus.FAILED and "the middleware broke" in str(result.error)
        record = await backend.latest_run(result.session_id)
    statuses = {t["call"]["name"]: t["status"] for t in record["tools"]}
    assert statuses == {"quick": "raw_completed", "slow": "raw_completed"}
    assert ran == ["slow"]
