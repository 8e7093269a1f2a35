"""Replies a run recovers from, or gives up on: empty replies, paused turns, and an empty
reply while the task list is open (the RECOVERY hooks, the output, the stop reason)."""

from __future__ import annotations

import asyncio
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, HookEvent, ProviderResponse, TokenUsage, ToolCall
from harnessx.providers import LLMProvider


class Script(LLMProvider):
    def __init__(self, replies: list[ProviderResponse]) -> None:
        self.replies = list(replies)
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls += 1
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def observe(replies: list[ProviderResponse], *, planning: bool = False) -> dict[str, Any]:
    provider = Script(replies)
    agent = Agent(config=AgentConfig(model="m", planning=planning), provider=provider)
    hooks: list[list[Any]] = []
    agent.hooks.on(HookEvent.RECOVERY, lambda ctx: hooks.append([ctx.data["reason"], ctx.data["attempt"]]))
    result = await agent.run("go")
    return {
        "status": result.status.value,
        "output": result.output,
        "stop_reason": str(result.stop_reason),
        "error": result.error,
        "input_tokens": result.usage.input_tokens,
        "calls": provider.calls,
        "recoveries": hooks,
    }


async def main() -> None:
    plan = [{"content": "Step", "status": "pending"}]
    paused = ProviderResponse(text="part", stop_reason="pause_turn", usage=TokenUsage(input_tokens=3))
    emit(
        {
            "empty_replies": await observe([ProviderResponse(text="")] * 5),
            "paused_again_and_again": await observe([paused] * 7),
            "paused_then_answered": await observe(
                [
                    ProviderResponse(text="Searching... ", stop_reason="pause_turn"),
                    ProviderResponse(text="found it."),
                ]
            ),
            "silent_with_an_open_plan": await observe(
                [
                    ProviderResponse(
                        tool_calls=[ToolCall("p1", "write_todos", {"todos": plan})], stop_reason="tool_use"
                    ),
                    ProviderResponse(text=""),
                    ProviderResponse(text=""),
                    ProviderResponse(text="Step is left for you."),
                ],
                planning=True,
            ),
        }
    )


asyncio.run(main())
