"""The calls of the original's example ``01-basics/progress_and_waiting.py``: a slow model
behind ``run_stream`` with ``ProgressPolicy`` shortened, a tool between two model calls,
and each event described by its typed payload (``event.data.name``, ``.content``,
``.status``, the text for text events, ``{"on", "seconds"}`` for ``waiting``).

How many ``waiting`` notices fit in a model call's silence depends on the machine's load,
so each silence is observed as: at least one notice, and the seconds reported are the
policy's schedule (first_after_seconds, then one repeat more each)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, ProgressPolicy, ProviderResponse, RunEventType, ToolCall
from harnessx.providers import LLMProvider

FIRST, REPEAT, DELAY = 0.2, 0.3, 1.0


class SlowReplies(LLMProvider):
    def __init__(self, replies: list[ProviderResponse]) -> None:
        self.replies = replies

    async def create(self, **kwargs: Any) -> ProviderResponse:
        await asyncio.sleep(DELAY)
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def count_stock(shop: str) -> str:
    """Count the stock of a shop.

    Args:
        shop: The shop's name.
    """
    await asyncio.sleep(0.1)
    return f"{shop}: 42 crates"


def describe(event: Any) -> str:
    kind = event.type
    if kind in (RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE):
        return f"{event.data.name}({json.dumps(event.data.input)})"
    if kind == RunEventType.TOOL_RESULT:
        return f"{'! ' if event.data.is_error else ''}{event.data.content}"
    if kind == RunEventType.RUN_RESULT:
        return f"status={event.data.status.value}"
    return repr(event.data) if isinstance(event.data, str) else type(event.data).__name__


async def main() -> None:
    provider = SlowReplies(
        [
            ProviderResponse(
                tool_calls=[ToolCall("c1", "count_stock", {"shop": "harbour"})], stop_reason="tool_use"
            ),
            ProviderResponse(text="The harbour shop has 42 crates."),
        ]
    )
    config = AgentConfig(
        system_prompt="You count stock.",
        progress=ProgressPolicy(first_after_seconds=FIRST, repeat_every_seconds=REPEAT),
    )
    lines: list[str] = []
    silences: list[list[float]] = []
    waiting_on: set[str] = set()
    async with (
        Agent(config=config, provider=provider, tools=[count_stock]) as agent,
        agent.run_stream("How many crates at the harbour?") as stream,
    ):
        async for event in stream:
            if event.type == RunEventType.WAITING:
                if not lines or lines[-1] != "waiting":
                    lines.append("waiting")
                    silences.append([])
                silences[-1].append(event.data["seconds"])
                waiting_on.add(event.data["on"])
                continue
            lines.append(f"{event.type.value} {describe(event)}")
        result = await stream.result()
    schedule = [round(FIRST + REPEAT * n, 1) for n in range(10)]
    emit(
        {
            "lines": lines,
            "waiting_on": sorted(waiting_on),
            "silences_on_schedule": [s == schedule[: len(s)] for s in silences],
            "output": result.output,
            "error": result.error,
        }
    )


asyncio.run(main())
