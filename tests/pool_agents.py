"""Agents for the pool tests, importable by worker processes as ``pool_agents:registry``.

``asks@v1``'s tool waits for approval. Tools append a JSON line per invocation to
``$HX_LEDGER``; while ``$HX_SLOW_TOOL`` is set, each tool call sleeps that many seconds (so a
test can kill a worker mid-call), and ``$HX_HANG_FIRST_ATTEMPT`` seconds on a call's first
attempt only. While the file ``$HX_HOLD`` exists, each call waits for it to go away (a test
that must act while a call is in flight holds it there for as long as it takes). The
factory of agent ``fragile`` raises while the file ``$HX_FACTORY_BROKEN`` exists (a deploy
missing a secret).
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

__all__ = ["registry"]


def _script(tool: str) -> ScriptedProvider:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(
                text="On it.",
                tool_calls=[ToolCall("call_0", tool, {"item": request.last_message["content"]})],
            )
        return "Done: " + "; ".join(m["content"] for m in request.tool_results)

    return ScriptedProvider(reply)


def _ledger(name: str, item: str) -> str:
    context = current_tool_context()
    ledger = os.environ.get("HX_LEDGER")
    if ledger:
        line = {
            "tool": name,
            "key": context.execution_key,
            "attempt": context.attempt,
            "token": context.fencing_token,
            "pid": os.getpid(),
        }
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    hold = os.environ.get("HX_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.01)
    slow = float(os.environ.get("HX_SLOW_TOOL", "0") or 0)
    if context.attempt == 1:
        slow += float(os.environ.get("HX_HANG_FIRST_ATTEMPT", "0") or 0)
    if slow:
        time.sleep(slow)
    return f"{name} did {item}"


def _agent(policy: str, permission: str | None = None) -> Agent:
    tool = f"{policy}_tool"
    agent = Agent(config=AgentConfig(system_prompt=f"Pool agent ({policy})."), provider=_script(tool))

    def handler(item: str) -> str:
        """Do the work.

        Args:
            item: What to do.
        """
        return _ledger(tool, item)

    handler.__name__ = tool
    agent.tools.register(name=tool, replay_policy=policy, permission=permission)(handler)
    return agent


def _fragile() -> Agent:
    broken = os.environ.get("HX_FACTORY_BROKEN")
    if broken and os.path.exists(broken):
        raise RuntimeError("the model's API key is missing from this deploy")
    return _agent("safe")


registry = AgentRegistry()
for _policy in ("safe", "idempotent", "manual"):
    registry.register(_policy, lambda policy=_policy: _agent(policy), version="v1")
# A safe tool that asks a person first (the operator console's approvals).
registry.register("asks", lambda: _agent("safe", "ask"), version="v1")
registry.register("fragile", _fragile, version="v1")
