"""Cancelling a durable run while a manual tool runs, then the session's next request."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _probe import emit

from harnessx import Agent, AgentRuntime, ProviderResponse, SQLiteBackend, ToolCall
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.requests.append(kwargs["messages"])
        if len(self.requests) == 1:
            return ProviderResponse(tool_calls=[ToolCall("c1", "slow", {})], stop_reason="tool_use")
        return ProviderResponse(text="next answer")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def main(folder: str) -> None:
    provider = Provider()
    agent = Agent(provider=provider)
    started = asyncio.Event()

    @agent.tools.register(replay_policy="manual")
    async def slow() -> str:
        """Takes long."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    async with (
        SQLiteBackend(str(Path(folder) / "runtime.db")) as backend,
        AgentRuntime(agent, backend=backend) as runtime,
    ):
        handle = await runtime.submit("go")
        await started.wait()
        await runtime.cancel()
        cancelled = await handle.result()
        events = [e.type.value async for e in handle.events()]
        again = await runtime.resume(cancelled.session_id)
        nxt = await runtime.run("and now?")
    emit(
        {
            "status": cancelled.status.value,
            "stop_reason": cancelled.stop_reason,
            "pending": [p.to_dict() for p in cancelled.pending],
            "events": events,
            "resume": repr(again),
            "next_run": nxt.output,
            "next_request": provider.requests[-1],
        }
    )


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(tmp))
