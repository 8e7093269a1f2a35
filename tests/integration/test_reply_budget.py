"""A reply budget the provider refuses as too large is lowered to the limit the refusal
names and remembered, in a durable run as in a plain one (harnessx 0.9.1's reply_limit
recovery): the run goes on instead of failing on the first call."""

from __future__ import annotations

from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import Agent, AgentConfig, AgentRuntime, HookEvent, ProviderResponse
from harnessx import models as model_limits
from harnessx.providers import LLMProvider

REFUSAL = "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for m-2"


class RefusesLargeBudgets(LLMProvider):
    """A model that writes at most 8,192 tokens and says so when asked for more."""

    def __init__(self) -> None:
        self.budgets: list[int | None] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.budgets.append(kwargs["max_tokens"])
        if kwargs["max_tokens"] > 8_192:
            raise ValueError(REFUSAL)
        return ProviderResponse(text=f"answer {len(self.budgets)}")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


@pytest.fixture(autouse=True)
def clean_registry() -> Any:
    saved = dict(model_limits._learned)
    model_limits._learned.clear()
    yield
    model_limits._learned.clear()
    model_limits._learned.update(saved)


def agent(provider: LLMProvider, recoveries: list[dict[str, Any]]) -> Agent:
    built = Agent(config=AgentConfig(model="m-2", planning=False), provider=provider)
    built.hooks.on(HookEvent.RECOVERY, lambda ctx: recoveries.append(dict(ctx.data)))
    built.hooks.on(HookEvent.RETRY, lambda ctx: recoveries.append({"retry": ctx.data["attempt"]}))
    return built


async def test_a_refused_budget_is_lowered_and_remembered_in_a_plain_run() -> None:
    provider, recoveries = RefusesLargeBudgets(), []
    async with agent(provider, recoveries) as plain:
        first = await plain.run("go")
        second = await plain.run("again")
    assert first.ok and second.ok
    assert provider.budgets == [32_000, 8_192, 8_192]
    assert recoveries == [{"reason": "reply_limit", "attempt": 1, "reply_budget": 8_192}]


async def test_a_refused_budget_is_lowered_and_remembered_in_a_durable_run(target: BackendTarget) -> None:
    provider, recoveries = RefusesLargeBudgets(), []
    async with (
        target.open() as backend,
        AgentRuntime(agent(provider, recoveries), backend=backend) as runtime,
    ):
        first = await runtime.run("go")
        second = await runtime.run("again")
    assert (first.output, second.output) == ("answer 2", "answer 3")
    assert provider.budgets == [32_000, 8_192, 8_192]
    assert recoveries == [{"reason": "reply_limit", "attempt": 1, "reply_budget": 8_192}]


async def test_a_refusal_naming_no_lower_budget_fails_as_before() -> None:
    class Refuses(RefusesLargeBudgets):
        async def create(self, **kwargs: Any) -> ProviderResponse:
            self.budgets.append(kwargs["max_tokens"])
            raise ValueError("max_tokens: 32000 > 64000, which is the maximum allowed")

    provider, recoveries = Refuses(), []
    async with agent(provider, recoveries) as plain:
        result = await plain.run("go")
    assert result.failed and provider.budgets == [32_000] and recoveries == []
