"""A provider of one's own that fails once with ConnectionError; usage; no provider at all."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from _probe import emit, event

from harnessx import Agent, AgentConfig, HookEvent, ProviderResponse, RetryPolicy
from harnessx.providers import LLMProvider


class Flaky(LLMProvider):
    def __init__(self) -> None:
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("connection reset by peer")
        return ProviderResponse(text="ok")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class Silent(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        return ProviderResponse(text="no usage reported", usage=None)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class Broken(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        raise ValueError("a bad request")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def main() -> None:
    flaky = Flaky()
    agent = Agent(provider=flaky, config=AgentConfig(retry=RetryPolicy(backoff_seconds=0.01)))
    retries: list[dict[str, Any]] = []
    agent.hooks.on(HookEvent.RETRY, lambda ctx: retries.append(dict(ctx.data)))
    async with agent.run_stream("hi") as stream:
        events = [event(e) async for e in stream]
        result = await stream.result()
    silent = await Agent(provider=Silent()).run("hi")
    broken_agent = Agent(provider=Broken(), config=AgentConfig(retry=RetryPolicy(backoff_seconds=0.01)))
    broken = await broken_agent.run("hi")
    unconfigured = await Agent().run("hi")
    emit(
        {
            "retried": {
                "status": result.status.value,
                "output": result.output,
                "usage_incomplete": result.usage_incomplete,
                "calls": flaky.calls,
                "events": events,
                "retry_hook_keys": sorted(retries[0]) if retries else None,
                "retry_hook": {
                    k: retries[0][k] for k in ("kind", "attempt", "next_attempt", "error", "provider")
                }
                if retries
                else None,
            },
            "no_usage": {
                "usage_incomplete": silent.usage_incomplete,
                "usage": dataclasses.asdict(silent.usage),
            },
            "not_transient": {
                "status": broken.status.value,
                "error": broken.error,
                "stop_reason": broken.stop_reason,
            },
            "no_provider": {
                "type": type(unconfigured).__name__,
                "status": unconfigured.status.value,
                "error_keys": sorted(unconfigured.error or {}),
            },
        }
    )


asyncio.run(main())
