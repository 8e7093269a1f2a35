"""Middleware subclasses on a durable run, a failing result middleware, and tool errors."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _probe import emit, event

from harnessx import (
    Agent,
    AgentRuntime,
    Middleware,
    ProviderResponse,
    SQLiteBackend,
    ToolCall,
    ToolResult,
    TransientToolError,
)
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.seen: list[Any] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        last = kwargs["messages"][-1]["content"]
        if isinstance(last, list):
            results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                self.seen.append(results)
                return ProviderResponse(text="result: " + results[0]["content"])
        return ProviderResponse(
            text="working", tool_calls=[ToolCall("c1", self.tool, {})], stop_reason="tool_use"
        )

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class FailsOnce(Middleware):
    def __init__(self) -> None:
        self.calls = 0

    async def after_tool_execution(self, result: ToolResult) -> ToolResult:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("middleware broke")
        return ToolResult(result.tool_call_id, result.content.upper(), result.is_error)


class Rewrites(Middleware):
    async def after_llm_call(self, response: Any) -> Any:
        response.text = response.text + "!"
        return response


def agent_with(tool: str) -> tuple[Agent, Provider]:
    provider = Provider(tool)
    agent = Agent(provider=provider)

    @agent.tools.register(replay_policy="manual")
    def report() -> str:
        """Write a report."""
        return "report written"

    @agent.tools.register()
    def explode() -> str:
        """Always fails."""
        raise ValueError("no disk")

    @agent.tools.register()
    def flaky() -> str:
        """Fails and says it had no effect."""
        raise TransientToolError("upstream busy")

    return agent, provider


async def main(folder: str) -> None:
    observed: dict[str, Any] = {}
    async with SQLiteBackend(str(Path(folder) / "runtime.db")) as backend:
        agent, _ = agent_with("report")
        middleware = FailsOnce()
        observed["registration"] = type(agent.middleware.add(middleware)).__name__
        runtime = AgentRuntime(agent, backend=backend)
        session_id = await runtime.start()
        failed = await runtime.run("report")
        observed["failed"] = {
            "status": failed.status.value,
            "error": failed.error,
            "stop_reason": failed.stop_reason,
        }
        handle = await runtime.resume(session_id)
        done = await handle.result() if handle else None
        observed["resumed"] = {
            "status": done.status.value if done else None,
            "output": done.output if done else None,
        }
        observed["middleware_calls"] = middleware.calls
        await runtime.stop()
    for tool in ("explode", "flaky"):
        agent, provider = agent_with(tool)
        await agent.run("go")
        observed[tool] = provider.seen[0]
    agent, provider = agent_with("report")
    agent.middleware.add(Rewrites())
    async with agent.run_stream("go") as stream:
        events = [event(e) for e in [e async for e in stream]]
    observed["rewritten_stream"] = [
        [e["type"], e["data"]] for e in events if e["type"] in ("text_delta", "text_complete")
    ]
    emit(observed)


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(tmp))
