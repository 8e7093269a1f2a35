"""Agents for the deploy tests, loaded by real ``harness-worker`` processes as
``deploy_agents:registry``.

One agent per replay policy; each run calls its tool once and then answers. The tool
appends ``{"pid": ..., "key": ...}`` to ``$HX_DEPLOY_LEDGER`` when it starts and then sleeps
``$HX_DEPLOY_TOOL_SECONDS``, so a test can kill a worker while a tool is in flight.
"""

from __future__ import annotations

import json
import os
import time

from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    current_tool_context,
)

__all__ = ["POLICIES", "registry"]

POLICIES = ("safe", "idempotent", "manual")


def _work(item: str) -> str:
    ledger = os.environ.get("HX_DEPLOY_LEDGER")
    if ledger:
        line = {"pid": os.getpid(), "key": current_tool_context().execution_key}
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    time.sleep(float(os.environ.get("HX_DEPLOY_TOOL_SECONDS", "0") or 0))
    return f"did {item}"


def _agent(policy: str) -> Agent:
    tool = f"{policy}_work"

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            call = ToolCall("call_0", tool, {"item": str(request.last_message.get("content", ""))})
            return ProviderResponse(text="Working.", tool_calls=[call])
        return "Finished: " + "; ".join(str(m["content"]) for m in request.tool_results)

    agent = Agent(
        config=AgentConfig(system_prompt=f"Deploy test agent ({policy})."), provider=ScriptedProvider(reply)
    )

    def handler(item: str) -> str:
        """Do one piece of work.

        Args:
            item: What to do.
        """
        return _work(item)

    handler.__name__ = tool
    agent.tools.register(name=tool, replay_policy=policy)(handler)
    return agent


registry = AgentRegistry()
for _policy in POLICIES:
    registry.register(_policy, lambda policy=_policy: _agent(policy), version="v1")
