"""The agents a pool of workers runs: an ``AgentRegistry`` for ``harness-worker --agents``.

A worker imports this module by name, so it must be importable where the worker runs: put
the folder that holds it on ``PYTHONPATH`` (or install it as part of your package)::

    export HARNESSX_DSN='postgresql://harnessx:PASSWORD@db.example:5432/harnessx'
    harnessx migrate
    PYTHONPATH=examples harness-worker --agents agents:registry --concurrency 8

An application then submits work by reference, with no agent code of its own::

    AgentRuntime(AgentRef("assistant", "v1"), backend=backend, execution="pool")

The model here is scripted, so the example runs offline; swap ``ScriptedProvider`` for
``AnthropicProvider()`` or ``OpenAIProvider()`` to use a real one. A new version of an
agent is registered beside the old one (``version="v2"``): runs that started on v1 finish
on v1.
"""

from __future__ import annotations

from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
)


def _reply(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        text = str(request.last_message["content"])
        return ProviderResponse(tool_calls=[ToolCall("call_1", "count_words", {"text": text})])
    return f"Your message has {request.tool_results[0]['content']} words."


def build_assistant() -> Agent:
    """A fresh agent per run: workers call the factory for every run they drive."""
    agent = Agent(
        config=AgentConfig(model="scripted-assistant", system_prompt="You count words."),
        provider=ScriptedProvider(_reply),
    )

    @agent.tools.register(replay_policy="safe")  # no side effects: safe to call again after a crash
    def count_words(text: str) -> int:
        """Count the words in a text.

        Args:
            text: The text to count.
        """
        return len(text.split())

    return agent


registry = AgentRegistry()
registry.register("assistant", build_assistant, version="v1")
