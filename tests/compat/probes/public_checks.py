"""Small public questions and checks: an injected provider against AgentConfig.provider,
RetryPolicy.spent and first_event_timeout, what a waiting event must carry, and a
backend opened again by a second ``async with``."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, ProviderResponse, RetryPolicy, RunEvent, RunEventType, SQLiteBackend
from harnessx.providers import LLMProvider


class Custom(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        return ProviderResponse(text="x")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class NamedOpenAI(Custom):
    name = "openai"


class NamedAnthropic(Custom):
    name = "anthropic"


class NamedOwn(Custom):
    name = "own"


def outcome(make: Callable[[], object]) -> str:
    try:
        make()
    except Exception as exc:
        return type(exc).__name__
    return "ok"


async def reopened() -> str:
    backend = SQLiteBackend(os.path.join(tempfile.mkdtemp(), "db.sqlite3"))
    async with backend:
        pass
    async with backend:
        return "ok"


def main() -> None:
    policy = RetryPolicy()
    emit(
        {
            "provider_name": repr(LLMProvider.name),
            "binding": {
                "custom_as_anthropic": outcome(
                    lambda: Agent(provider=Custom(), config=AgentConfig(provider="anthropic"))
                ),
                "openai_as_openai": outcome(
                    lambda: Agent(provider=NamedOpenAI(), config=AgentConfig(provider="openai", model="m"))
                ),
                "openai_as_anthropic": outcome(
                    lambda: Agent(provider=NamedOpenAI(), config=AgentConfig(provider="anthropic"))
                ),
                "openai_without_config": outcome(lambda: Agent(provider=NamedOpenAI())),
                "anthropic_without_config": outcome(lambda: Agent(provider=NamedAnthropic())),
                "own_as_openai": outcome(
                    lambda: Agent(provider=NamedOwn(), config=AgentConfig(provider="openai", model="m"))
                ),
            },
            "spent": [
                policy.spent(3, rate_limited=False),
                policy.spent(4, rate_limited=False),
                policy.spent(4, rate_limited=True, waited=10, next_wait=5),
                policy.spent(4, rate_limited=True, waited=118, next_wait=5),
                policy.spent(8, rate_limited=True),
            ],
            "first_event_timeout": [
                [policy.first_event_timeout(0, attempt=n) for n in (1, 2, 3, 4)],
                policy.first_event_timeout(100_000),
                RetryPolicy(stream_idle_timeout_seconds=50).first_event_timeout(0, attempt=4),
                RetryPolicy(stream_first_event_timeout_seconds=None).first_event_timeout(10),
            ],
            "waiting": {
                name: outcome(lambda data=data: RunEvent(RunEventType.WAITING, data))
                for name, data in {
                    "whole": {"on": "model", "seconds": 12.0},
                    "no_subject": {"seconds": 1.0},
                    "no_elapsed": {"on": "model"},
                    "unknown_subject": {"on": "weather", "seconds": 1.0},
                }.items()
            },
            "backend_reopened": asyncio.run(reopened()),
        }
    )


main()
