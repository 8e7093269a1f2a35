"""The weather agent the real-model tests run, in this process or in a child process.

As a script it drives one durable run on a SQLite file (``run`` or ``resume``) against a
running llama-server, so a test can SIGKILL it inside its tool and resume it from a fresh
process::

    python weather.py '{"action": "run", "db": ..., "base_url": ..., ...}'

Its tool appends a line to ``ledger`` per invocation; with ``block_marker`` its first
invocation creates that file and then hangs until killed. Each model call is logged to
``calls_log``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from harnessx import Agent, AgentConfig, AgentRuntime, LLMProvider, OpenAIProvider, SQLiteBackend

SYSTEM = "You are a weather assistant. Always call the get_weather tool to answer weather questions."
# SmolLM2-135M seldom decides to call a tool by itself: sampled (temperature 1.3, a seed per
# try) it called get_weather for "Call the get_weather tool for Oslo." once in 84 tries on
# this build. Asked to repeat a call in the format its chat template uses, it copies it, greedily
# and so every time: the server's tool-call parser, the wire format and our provider are still
# the real ones, and the model still has to produce every token of the call.
QUESTION = (
    'Repeat after me: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
)
TOOL_RESULT = "It is 21 degrees and sunny in Oslo."
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Name of the city, e.g. Oslo."}},
    "required": ["city"],
    "additionalProperties": False,
}
TEMPERATURE = 0.0  # greedy: the same request always gets the same reply
MAX_TOKENS = 80


def weather_agent(
    provider: LLMProvider, *, ledger: str | None = None, block_marker: str | None = None
) -> tuple[Agent, list[dict[str, Any]]]:
    """The agent, and the list its tool appends each call's input to (in this process)."""
    config = AgentConfig(
        model="smollm2", max_tokens=MAX_TOKENS, system_prompt=SYSTEM, temperature=TEMPERATURE, planning=False
    )
    agent = Agent(config, provider=provider)
    # get_weather alone, as in the recorded requests: the built-in tools would change the
    # prompt the tool-call rate was measured with.
    agent.tools.unregister("read_tool_result")
    calls: list[dict[str, Any]] = []

    def get_weather(city: str) -> str:
        calls.append({"city": city})
        if ledger:
            with open(ledger, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"city": city}) + "\n")
        if block_marker and not Path(block_marker).exists():
            Path(block_marker).touch()
            time.sleep(3600)  # killed here
        return TOOL_RESULT

    agent.tools.register_with_schema(
        "get_weather", "Get the current weather for a city.", SCHEMA, get_weather, replay_policy="safe"
    )
    return agent, calls


class LoggedOpenAI(OpenAIProvider):
    """Appends one line per model call to ``calls_log``: which process asked, and how long
    the conversation it sent was (1 message: the question; 3 or more: after a tool result)."""

    calls_log = ""

    def _log(self, kwargs: dict[str, Any]) -> None:
        with open(self.calls_log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "messages": len(kwargs["messages"])}) + "\n")

    async def create(self, **kwargs: Any) -> Any:
        self._log(kwargs)
        return await super().create(**kwargs)

    def stream(self, **kwargs: Any) -> Any:
        self._log(kwargs)
        return super().stream(**kwargs)


async def _main(spec: dict[str, Any]) -> None:
    provider = LoggedOpenAI("smollm2", base_url=f"{spec['base_url']}/v1", timeout=600.0)
    provider.calls_log = spec["calls_log"]
    agent, _ = weather_agent(provider, ledger=spec.get("ledger"), block_marker=spec.get("block_marker"))
    async with SQLiteBackend(spec["db"]) as backend:
        runtime = AgentRuntime(agent, backend=backend)
        if spec["action"] == "run":
            session_id = await runtime.start()
            Path(spec["session_file"]).write_text(json.dumps({"session_id": session_id}))
            result = await runtime.run(QUESTION)
        else:
            handle = await runtime.resume(spec["session_id"])
            result = await handle.result() if handle else None
        print(json.dumps(result.to_dict() if result else None))
        await runtime.stop()
    await provider.aclose()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
