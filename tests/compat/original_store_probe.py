"""Write a real database with the original harnessx 0.9.1: run under that package.

    python original_store_probe.py SCENARIO OUT.json (--sqlite PATH | --dsn DSN --schema NAME)

Each scenario starts one session of the ``ledger`` agent (an ``AgentRef`` in a registry),
except ``inline`` (an ``Agent`` instance), and leaves it the way its name says:

- ``completed``: one finished run whose tool was called once;
- ``approval``: a run stopped for the approval of an ``ASK`` tool;
- ``crash-manual`` / ``crash-safe``: the process is killed with SIGKILL inside a ``manual``
  (``safe``) tool, so the run is left running with the call dispatched and no result;
- ``inline``: a finished run of an agent passed as an instance.

``OUT.json`` gets ``{"session_id": ..., "run_id": ...}`` before anything can kill the process.
Test scaffolding: it uses the original's public API only, never this project's code.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    AgentRuntime,
    PermissionLevel,
    ProviderResponse,
    SQLiteBackend,
    ToolCall,
)
from harnessx.providers import LLMProvider


class Script(LLMProvider):
    """A tool call first, then an answer: the reply depends on the conversation only."""

    def __init__(self, tool):
        self.tool = tool

    async def create(self, **kwargs):
        answered = any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in kwargs["messages"]
        )
        if not answered:
            return ProviderResponse(
                text="Recording it.",
                tool_calls=[ToolCall("call_1", self.tool, {"amount": 42})],
                stop_reason="tool_use",
            )
        return ProviderResponse(text="Recorded 42.")

    async def count_tokens(self, **kwargs):
        return 0


def agent_for(scenario):
    tool = {"approval": "pay", "crash-manual": "charge", "crash-safe": "lookup"}.get(scenario, "record")
    agent = Agent(
        config=AgentConfig(system_prompt="You keep the ledger.", planning=False), provider=Script(tool)
    )

    @agent.tools.register(name="record", replay_policy="safe")
    def record(amount: int) -> str:
        return f"recorded {amount}"

    @agent.tools.register(name="pay", permission=PermissionLevel.ASK)
    def pay(amount: int) -> str:
        return f"paid {amount}"

    @agent.tools.register(name="charge")
    def charge(amount: int) -> str:
        os.kill(os.getpid(), signal.SIGKILL)

    @agent.tools.register(name="lookup", replay_policy="safe")
    def lookup(amount: int) -> str:
        os.kill(os.getpid(), signal.SIGKILL)

    return agent


async def main(scenario, out, where):
    if where[0] == "--sqlite":
        backend = SQLiteBackend(where[1])
    else:
        from harnessx import PostgresBackend

        backend = PostgresBackend(where[1], schema=where[3])
    if scenario == "inline":
        runtime = AgentRuntime(agent_for(scenario), backend=backend)
    else:
        registry = AgentRegistry()
        ref = registry.register("ledger", lambda: agent_for(scenario), version="v1")
        runtime = AgentRuntime(ref, backend=backend, registry=registry)
    session_id = await runtime.start()
    handle = await runtime.submit("Record 42.", request_id=f"{scenario}-request")
    with open(out, "w") as f:
        json.dump({"session_id": session_id, "run_id": handle.run_id}, f)
    result = await handle.result()
    with open(out, "w") as f:
        json.dump({"session_id": session_id, "run_id": handle.run_id, "status": result.status.value}, f)
    await runtime.stop()
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
