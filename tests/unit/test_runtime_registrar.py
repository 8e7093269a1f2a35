"""``AgentRuntime(tool_registrar=...)`` (0.9.1's): a runtime that builds its own agent from
``agent_config`` lets a function register that agent's tools before the first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    ConfigurationError,
    ProviderResponse,
    SQLiteBackend,
    ToolCall,
    ToolRegistry,
)
from harnessx.providers import LLMProvider


class Counted(LLMProvider):
    """Calls ``lookup`` once, then answers with its result; counts its closes."""

    name = "counted"

    def __init__(self) -> None:
        self.closed = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        last = kwargs["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return ProviderResponse(text=f"found {results[0]['content']}")
        return ProviderResponse(tool_calls=[ToolCall("c", "lookup", {})], stop_reason="tool_use")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0

    async def aclose(self) -> None:
        self.closed += 1


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Counted:
    made = Counted()
    monkeypatch.setattr("harnessx.core.make_provider", lambda name: made)
    return made


async def test_the_registrar_registers_the_built_agents_tools(provider: Counted, tmp_path: Path) -> None:
    seen: list[ToolRegistry] = []

    def registrar(tools: ToolRegistry) -> None:
        seen.append(tools)
        tools.register(name="lookup", permission="allow")(lambda: "42")

    config = AgentConfig(provider="anthropic", planning=False)
    async with SQLiteBackend(tmp_path / "db") as backend:
        runtime = AgentRuntime(backend=backend, agent_config=config, tool_registrar=registrar)
        async with runtime:
            assert (await runtime.run("look it up")).output == "found 42"
        assert seen == [runtime.agent.tools]


async def test_a_failing_registrar_closes_the_agent_it_was_given(provider: Counted, tmp_path: Path) -> None:
    def registrar(tools: ToolRegistry) -> None:
        raise ValueError("registration failed")

    async with SQLiteBackend(tmp_path / "db") as backend:
        runtime = AgentRuntime(
            backend=backend, agent_config=AgentConfig(provider="anthropic"), tool_registrar=registrar
        )
        with pytest.raises(ValueError, match="registration failed"):
            await runtime.start()
        assert provider.closed == 1
        await runtime.stop()


def test_a_registrar_with_an_agent_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="only when no agent is given"):
        AgentRuntime(Agent(provider=Counted()), tool_registrar=lambda tools: None)
