"""The original harnessx's run policies in durable runs, on each real backend."""

from __future__ import annotations

import asyncio

from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentRuntime,
    PermissionLevel,
    PermissionManager,
    ProviderResponse,
    RunEventType,
    RunStatus,
    ScriptedProvider,
    ToolCall,
    ToolResult,
)


async def test_a_manual_tool_that_times_out_becomes_uncertain(target: BackendTarget) -> None:
    agent = Agent(
        provider=ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "charge", {})]), "Charged."])
    )

    @agent.tools.register(timeout_seconds=0.05)
    async def charge() -> str:
        """Charge the card."""
        await asyncio.sleep(30)
        return "charged"

    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Charge it.")
        # The call may have had its effect: a person decides, as after a crash.
        assert result.status is RunStatus.AWAITING_INPUT
        (pending,) = result.pending
        assert pending.status == "uncertain" and pending.call.name == "charge"
        await runtime.resolve_tool(pending, result=ToolResult("c", "charged (checked by hand)"))
        handle = await runtime.resume(runtime.session_id or "")
        assert handle is not None and (await handle.result()).output == "Charged."


async def test_ask_waits_for_approval_even_when_granted_and_deny_never_runs(target: BackendTarget) -> None:
    ran: list[str] = []
    script = [ProviderResponse(tool_calls=[ToolCall("a", "ship", {}), ToolCall("b", "wipe", {})]), "Done."]
    permissions = PermissionManager(PermissionLevel.ALLOW)
    agent = Agent(provider=ScriptedProvider(script), permissions=permissions)
    agent.tools.register(name="ship", permission=PermissionLevel.ASK)(lambda: ran.append("ship") or "shipped")
    agent.tools.register(name="wipe")(lambda: ran.append("wipe") or "wiped")
    permissions.set_permission("wipe", PermissionLevel.DENY)
    permissions.grant_session("ship")  # a plain-run grant; a durable run still records an approval
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Ship, then wipe.")
        assert result.needs_input and [p.call.name for p in result.pending] == ["ship"]
        await runtime.approve(result.pending[0])
        handle = await runtime.resume(runtime.session_id or "")
        assert handle is not None and (await handle.result()).ok
    assert ran == ["ship"]


async def test_the_task_list_and_large_results_survive_a_resume(target: BackendTarget) -> None:
    """A run stopped for an approval, continued by a fresh agent in a fresh runtime: the task
    list (kept in the committed conversation) and a large result (kept on its tool call)
    are both still readable there."""
    plan = [{"content": "Collect", "status": "in_progress"}, {"content": "Report", "status": "pending"}]
    big = "\n".join(f"row {i}" for i in range(30_000))
    replies: list[ProviderResponse | str] = [
        ProviderResponse(
            tool_calls=[
                ToolCall("w", "write_todos", {"todos": plan}),
                ToolCall("d", "dump", {}),
                ToolCall("g", "gate", {}),
            ]
        ),
        ProviderResponse(
            tool_calls=[
                ToolCall("r", "read_todos", {}),
                ToolCall("x", "read_tool_result", {"result_id": "d", "pattern": "row 29999"}),
            ]
        ),
        "Reported.",
    ]

    def make(provider: ScriptedProvider) -> Agent:
        agent = Agent(provider=provider)
        agent.tools.register(name="dump", replay_policy="safe")(lambda: big)
        agent.tools.register(name="gate", permission=PermissionLevel.ASK)(lambda: "open")
        return agent

    async with (
        target.open() as backend,
        AgentRuntime(make(ScriptedProvider(replies)), backend=backend) as runtime,
    ):
        handle = await runtime.submit("Collect and report.")
        events = [e async for e in handle.events()]
        waiting = await handle.result()
        session_id = runtime.session_id or ""
    assert waiting.needs_input
    (update,) = [e.data for e in events if e.type is RunEventType.TODOS_UPDATED] or [None]
    assert update is None  # announced when the step's calls are all answered, after the approval

    provider = ScriptedProvider(replies)
    async with target.open() as backend:
        runtime = AgentRuntime(make(provider), backend=backend)
        try:
            await runtime.approve(waiting.pending[0])
            resumed = await runtime.resume(session_id)
            assert resumed is not None
            events = [e async for e in resumed.events()]
            result = await resumed.result()
        finally:
            await runtime.stop()
    assert result.ok and result.output == "Reported."
    assert [e.data["total"] for e in events if e.type is RunEventType.TODOS_UPDATED] == [2]
    todos, found = provider.requests[-1].tool_results
    assert "[~] Collect" in todos["content"]
    assert not found.get("is_error") and "row 29999" in found["content"]
    # The 200 kB result reached the model as a preview, in the resumed run too.
    answers = [
        block
        for m in provider.requests[-1].messages
        if isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]
    assert answers and all(len(block["content"]) <= 12_000 for block in answers)
