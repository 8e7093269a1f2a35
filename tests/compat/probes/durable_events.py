"""A durable run on SQLite (or Temporal, see ``_durable``): events live and read back,
checkpoints, status, reconnecting."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from typing import Any

from _durable import durable
from _probe import emit, event

from harnessx import Agent, HookEvent, ProviderResponse, ToolCall
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        last = kwargs["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return ProviderResponse(text="done")
        return ProviderResponse(
            text="calling", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})], stop_reason="tool_use"
        )

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


checkpoints: list[list[Any]] = []


def adder() -> Agent:
    agent = Agent(provider=Provider())
    agent.hooks.on(
        HookEvent.CHECKPOINT,
        lambda ctx: checkpoints.append([sorted(ctx.data), ctx.data["phase"], ctx.data["status"]]),
    )

    @agent.tools.register()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


async def main(folder: str) -> None:
    async with durable(folder, {"adder": adder}) as (_, make):
        runtime = make("adder")
        state_before = repr(runtime.state)
        await runtime.start()
        state_started = repr(runtime.state)
        handle = await runtime.submit("add")
        live = [e async for e in handle.events()]
        result = await handle.result()
        stored = [e async for e in handle.events(after="0")]
        behind = [e async for e in handle.events(after=live[-1].cursor)]
        status = await runtime.status()
        stopped = await runtime.stop()
    emit(
        {
            "states": [state_before, state_started, repr(runtime.state)],
            "live": [event(e) for e in live],
            "stored_equals_live": [event(e) for e in stored] == [event(e) for e in live],
            "stored_ids_equal_live": [e.event_id for e in stored] == [e.event_id for e in live],
            "cursors": [e.cursor for e in live],
            "session_ids": sorted({e.session_id == result.session_id for e in live}),
            "checkpoint_keys": sorted({" ".join(c[0]) for c in checkpoints}),
            "checkpoint_phases": sorted({c[1] for c in checkpoints}),
            "first_checkpoint": checkpoints[0][1:],
            "last_checkpoint": checkpoints[-1][1:],
            "behind_the_last_cursor": [
                [e.type.value, e.cursor, type(e.data).__name__, e.data == result] for e in behind
            ],
            "status": {"keys": sorted(status), "state": status["state"], "run": type(status["run"]).__name__},
            "stopped": {
                "type": type(stopped).__name__,
                "state": stopped["state"],
                "run": type(stopped["run"]).__name__,
            },
        }
    )


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(tmp))
sys.exit(0)
