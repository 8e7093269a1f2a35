"""An in-memory run with one tool call: its events, hooks, and what the provider receives."""

from __future__ import annotations

import asyncio
from typing import Any

from _probe import emit, event

from harnessx import Agent, HookEvent, ProviderResponse, ToolCall
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls.append(kwargs)
        last = kwargs["messages"][-1]["content"]
        results = (
            [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
            if isinstance(last, list)
            else []
        )
        if results:
            return ProviderResponse(text="done: " + results[0]["content"])
        return ProviderResponse(
            text="calling", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})], stop_reason="tool_use"
        )

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def main() -> None:
    provider = Provider()
    agent = Agent(provider=provider)
    hooks: list[list[Any]] = []
    for kind in HookEvent:
        agent.hooks.on(kind, lambda ctx: hooks.append([ctx.event.value, sorted(ctx.data)]))

    @agent.tools.register()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    async with agent.run_stream("add 1 and 2") as stream:
        events = [e async for e in stream]
        result = await stream.result()
    run = await agent.run("once more")
    emit(
        {
            "events": [event(e) for e in events],
            "cursors": [e.cursor for e in events],
            "event_ids_distinct": len({e.event_id for e in events}) == len(events),
            "run_result_is_the_result": events[-1].data == result,
            "hooks": hooks,
            "provider_kwargs": sorted(provider.calls[0]),
            "requests": [call["messages"] for call in provider.calls],
            "system": provider.calls[0]["system"],
            "max_tokens": provider.calls[0]["max_tokens"],
            "result": result.to_dict(),
            "second_run_output": run.output,
        }
    )


asyncio.run(main())
