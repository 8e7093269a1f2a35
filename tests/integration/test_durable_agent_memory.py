"""After a durable run the agent's memory shows the session's conversation, as in harnessx
0.9.1 (where the engine works on it); the loop guard's notice and hook work there too."""

from __future__ import annotations

from typing import Any

from durable_support import BackendTarget

from harnessx import Agent, AgentConfig, AgentRuntime, HookEvent, ProviderResponse, ScriptedProvider, ToolCall


async def test_the_agent_memory_holds_the_durable_conversation(target: BackendTarget) -> None:
    calls = [ProviderResponse(tool_calls=[ToolCall(f"c{i}", "poll", {})]) for i in range(4)]
    agent = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider([*calls, "stuck", "bye"]))
    agent.tools.register(name="poll", replay_policy="safe")(lambda: "still running")
    trips: list[dict[str, Any]] = []
    agent.hooks.on(HookEvent.REPETITION, lambda ctx: trips.append(dict(ctx.data)))
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        assert (await runtime.run("wait for the job")).output == "stuck"
        messages = agent.memory.get_messages()
        assert messages[0] == {"role": "user", "content": "wait for the job"}
        assert messages[-1]["content"] == [{"type": "text", "text": "stuck"}]
        assert any("[harness] Loop guard" in str(m["content"]) for m in messages)
        assert trips == [{"period": 1, "laps": 3, "tool": "poll"}]
        await runtime.run("thanks")
        assert agent.memory.message_count == len(messages) + 2
