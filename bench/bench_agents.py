"""Agents the pool benchmark's workers load (``--agents bench_agents:registry``)."""

from __future__ import annotations

import json
import os
import time

from harnessx import (
    Agent,
    AgentRegistry,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    current_tool_context,
)

__all__ = ["registry"]


def _script(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        return ProviderResponse(tool_calls=[ToolCall("c", "work", {"job": request.last_message["content"]})])
    return "done"


def _agent(slow: bool) -> Agent:
    agent = Agent(provider=ScriptedProvider(_script, chunk_size=64))

    @agent.tools.register(replay_policy="safe")
    def work(job: str) -> str:
        """Do the job.

        Args:
            job: The job.
        """
        context = current_tool_context()
        ledger = os.environ.get("HX_BENCH_LEDGER")
        if ledger:
            line = {
                "key": context.execution_key,
                "attempt": context.attempt,
                "pid": os.getpid(),
                "t": time.time(),
            }
            with open(ledger, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")
        if slow and context.attempt == 1:
            time.sleep(30)  # long enough to be killed in the middle of it
        return f"did {job}"

    return agent


registry = AgentRegistry()
registry.register("slow", lambda: _agent(True))
registry.register("fast", lambda: _agent(False))
