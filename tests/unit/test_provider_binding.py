"""Providers say their registry names (0.9.1's ``LLMProvider.name``), and an injected one is
not refused for a config that names another built-in (a deliberate difference: see
docs/compatibility.md, *Agent and configuration*)."""

from __future__ import annotations

from typing import Any

from harnessx import Agent, AgentConfig, ProviderResponse
from harnessx._driver import served_by
from harnessx.providers import AnthropicProvider, LLMProvider, OpenAIProvider


class Custom(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        return ProviderResponse(text="x")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def test_the_built_in_providers_say_their_names() -> None:
    assert (Custom.name, AnthropicProvider.name, OpenAIProvider.name) == ("", "anthropic", "openai")
    # What a RETRY hook names as the provider, as 0.9.1's.
    assert served_by(OpenAIProvider("gpt-4o", api_key="k")) == "openai"
    assert served_by(Custom()) == "Custom"


def test_an_injected_built_in_runs_under_the_default_config() -> None:
    agent = Agent(config=AgentConfig(model="gpt-4o"), provider=OpenAIProvider("gpt-4o", api_key="k"))
    assert agent.provider.name == "openai"
