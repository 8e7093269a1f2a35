"""A first agent with one tool, offline: the model is scripted.

Run: python examples/first_agent.py
"""

from __future__ import annotations

import asyncio

from harnessx import Agent, ProviderResponse, ScriptedProvider, ToolCall

# Swap ScriptedProvider for AnthropicProvider() or OpenAIProvider() to use a real model.
model = ScriptedProvider(
    [
        ProviderResponse(tool_calls=[ToolCall("call_1", "get_weather", {"city": "Oslo"})]),
        "It is sunny in Oslo.",
        "Tomorrow looks sunny too.",
    ]
)
agent = Agent(provider=model)


@agent.tools.register(replay_policy="safe")
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: City name, e.g. Oslo.
    """
    return f"sunny in {city}"


async def main() -> None:
    async with agent:
        result = await agent.run("What's the weather in Oslo?")
        print(result.status.value, "-", result.output)
        async for text in agent.stream_text("And tomorrow?"):
            print(text, end="", flush=True)
        print()


if __name__ == "__main__":
    asyncio.run(main())
