"""The workload agent, loaded by every worker with ``--agents chaos.agents:registry``.

``chaos@v1`` has a scripted model that follows the run's plan (``chaos.plan``) and one tool
per entry of ``TOOLS``. Each tool call takes a random time (seeded by its execution key)
and records itself in the effects ledger; ``idempotent`` and ``manual`` tools apply their
effect through the fenced effects table. The worker learns where the ledger is from:

- ``CHAOS_LEDGER``: the invocation-lines folder; ``CHAOS_EFFECTS``: the effects database;
- ``CHAOS_SEED``; ``CHAOS_TOOL_MS``: ``"low,high"`` tool durations in milliseconds;
- ``CHAOS_FSYNC=1``: fsync every invocation line.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from chaos.ledger import EffectsTable, InvocationLog
from chaos.plan import TOOLS, ToolSpec, make_plan, parse_plan_seed, tool_duration, tool_output
from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    PermissionLevel,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    current_tool_context,
)

__all__ = ["AGENT", "registry"]

AGENT = "chaos"


class _Settings:
    """Read from the environment on first use, so importing this module needs none of it."""

    def __init__(self) -> None:
        self.seed = int(os.environ.get("CHAOS_SEED", "0"))
        low, _, high = os.environ.get("CHAOS_TOOL_MS", "50,500").partition(",")
        self.low_ms, self.high_ms = int(low), int(high or low)
        self.log = InvocationLog(
            Path(os.environ.get("CHAOS_LEDGER", "chaos-ledger")), fsync=os.environ.get("CHAOS_FSYNC") == "1"
        )
        self.effects = EffectsTable(Path(os.environ.get("CHAOS_EFFECTS", "chaos-effects.sqlite3")))


_settings: _Settings | None = None


def settings() -> _Settings:
    global _settings
    if _settings is None:
        _settings = _Settings()
    return _settings


def reply(request: ScriptedRequest) -> ProviderResponse | str:
    """The plan's next turn; a function of the conversation only, so a resumed run (in any
    process) gets the reply that comes next."""
    first = next(m for m in request.messages if m.get("role") == "user")
    plan = make_plan(parse_plan_seed(str(first["content"])))
    if request.turn < len(plan.turns):
        calls = [ToolCall(c.call_id, c.tool, {"item": c.item}) for c in plan.turns[request.turn]]
        return ProviderResponse(text=f"Step {request.turn + 1} of plan {plan.seed}.", tool_calls=calls)
    return f"Plan {plan.seed} done after {len(plan.turns)} steps."


def _handler(spec: ToolSpec) -> Callable[[str], Awaitable[str]]:
    async def handler(item: str) -> str:
        """Do one unit of chaos work.

        Args:
            item: What to work on.
        """
        config = settings()
        context = current_tool_context()
        key, token, pid = context.execution_key, context.fencing_token or 0, os.getpid()
        inv = uuid.uuid4().hex
        config.log.write(
            {
                "e": "start",
                "inv": inv,
                "key": key,
                "tool": spec.name,
                "policy": spec.policy,
                "attempt": context.attempt,
                "token": token,
                "pid": pid,
                "t": time.time(),
            }
        )
        if spec.policy != "safe":
            # Announce the token before working, as a fenced external API would see it.
            await asyncio.to_thread(config.effects.register, key, token)
        await asyncio.sleep(tool_duration(config.seed, key, config.low_ms, config.high_ms))
        output = tool_output(spec.name, item)
        outcome = "done"
        if spec.policy != "safe":
            outcome = await asyncio.to_thread(
                lambda: config.effects.apply(
                    key=key, tool=spec.name, policy=spec.policy, inv=inv, token=token, pid=pid, output=output
                )
            )
        config.log.write(
            {"e": "end", "inv": inv, "key": key, "pid": pid, "outcome": outcome, "t": time.time()}
        )
        if outcome == "rejected_stale":
            raise RuntimeError(f"effect of {key} refused: fencing token {token} is stale")
        return output

    handler.__name__ = spec.name
    return handler


def build() -> Agent:
    agent = Agent(
        config=AgentConfig(system_prompt="You are the chaos workload."), provider=ScriptedProvider(reply)
    )
    for spec in TOOLS.values():
        agent.tools.register(
            name=spec.name,
            replay_policy=spec.policy,
            permission=PermissionLevel.ASK if spec.ask else None,
            concurrent=spec.concurrent,
        )(_handler(spec))
    return agent


registry = AgentRegistry()
registry.register(AGENT, build, version="v1")
