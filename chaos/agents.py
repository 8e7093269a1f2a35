"""The agents of every worker process the tests, the benchmarks and the chaos suite start:
``--agents chaos.agents:registry``, with the checkout's root on ``PYTHONPATH``.

**Ledger agents** (the pool, deploy, Temporal and benchmark workers). ``safe``,
``idempotent`` and ``manual`` (``@v1``) have a scripted model that calls their one tool,
``<policy>_tool``, once with the prompt and then answers ``Done: <result>``; ``asks`` is
``safe`` with a tool that needs a person's approval; ``fragile``'s factory raises while the
file ``$HX_FACTORY_BROKEN`` exists (a deploy missing a secret); ``slow`` is ``safe`` with a
first attempt of 30 s, long enough to be killed in the middle of it; ``limited`` is ``safe``
with at most two runs driving at once across the fleet (``max_concurrent=2``);
``vendor-rpm``, ``vendor-tpm``, ``vendor-pause`` and ``vendor-hold`` call the model vendor
at ``$HX_VENDOR_URL`` as models ``gpt-rpm``, ``gpt-tpm``, ``gpt-pause`` and ``gpt-hold`` (the
rate-limit tests). Each tool
call appends ``{"tool", "key", "attempt", "token", "pid", "t"}`` as one JSON line to the file
``$HX_LEDGER`` (when set), then sleeps ``$HX_SLOW_TOOL`` seconds, plus
``$HX_HANG_FIRST_ATTEMPT`` on a call's first attempt; while the file ``$HX_HOLD`` exists, each
call waits for it to go away (a test that must act while a call is in flight holds it there
for as long as it takes). The variables are read at each call.

**The chaos workload** ``chaos@v1`` has a scripted model that follows the run's plan
(``chaos.plan``) and one tool per entry of ``TOOLS``. Each tool call takes a random time
(seeded by its execution key) and records itself in the effects ledger; ``idempotent`` and
``manual`` tools apply their effect through the fenced effects table. The worker learns
where the ledger is from:

- ``CHAOS_LEDGER``: the invocation-lines folder; ``CHAOS_EFFECTS``: the effects database;
- ``CHAOS_SEED``; ``CHAOS_TOOL_MS``: ``"low,high"`` tool durations in milliseconds;
- ``CHAOS_FSYNC=1``: fsync every invocation line.
"""

from __future__ import annotations

import asyncio
import functools
import json
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
from harnessx.providers import OpenAIProvider

__all__ = ["AGENT", "LEDGER_POLICIES", "build", "ledger_agent", "record", "registry", "script"]

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


# ------------------------------------------------------------------ ledger agents

LEDGER_POLICIES = ("safe", "idempotent", "manual")


def _seconds(name: str) -> float:
    return float(os.environ.get(name, "0") or 0)


def script(tool: str) -> ScriptedProvider:
    """A model that calls ``tool`` once with the prompt as ``item``, then reports the result."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            call = ToolCall("call_0", tool, {"item": str(request.last_message.get("content", ""))})
            return ProviderResponse(text="On it.", tool_calls=[call])
        return "Done: " + "; ".join(str(m["content"]) for m in request.tool_results)

    # Streamed in chunks of 64: the benchmarks measure the pool, not the text deltas.
    return ScriptedProvider(reply, chunk_size=64)


def record(tool: str, item: str, *, first_attempt_seconds: float = 0.0) -> str:
    """What a ledger agent's tool does (see the module's doc); returns its result."""
    context = current_tool_context()
    ledger = os.environ.get("HX_LEDGER")
    if ledger:
        line = {
            "tool": tool,
            "key": context.execution_key,
            "attempt": context.attempt,
            "token": context.fencing_token,
            "pid": os.getpid(),
            "t": time.time(),
        }
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    hold = os.environ.get("HX_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.01)
    pause = _seconds("HX_SLOW_TOOL")
    if context.attempt == 1:
        pause += _seconds("HX_HANG_FIRST_ATTEMPT") + first_attempt_seconds
    if pause:
        time.sleep(pause)
    return f"{tool} did {item}"


def ledger_agent(policy: str, *, permission: str | None = None, first_attempt_seconds: float = 0.0) -> Agent:
    """An agent whose one tool, ``<policy>_tool``, writes the ledger (see the module's doc)."""
    tool = f"{policy}_tool"
    agent = Agent(config=AgentConfig(system_prompt=f"Ledger agent ({policy})."), provider=script(tool))

    def handler(item: str) -> str:
        """Do the work.

        Args:
            item: What to do.
        """
        return record(tool, item, first_attempt_seconds=first_attempt_seconds)

    handler.__name__ = tool
    agent.tools.register(name=tool, replay_policy=policy, permission=permission)(handler)
    return agent


def _fragile() -> Agent:
    broken = os.environ.get("HX_FACTORY_BROKEN")
    if broken and os.path.exists(broken):
        raise RuntimeError("the model's API key is missing from this deploy")
    return ledger_agent("safe")


def vendor_agent(model: str) -> Agent:
    """An agent that calls the model vendor at ``$HX_VENDOR_URL`` (the rate-limit tests'
    ``tests/fake_vendor.py``) as ``model``, with no tools."""
    provider = OpenAIProvider(model, api_key="sk-test-not-a-secret", base_url=os.environ["HX_VENDOR_URL"])
    return Agent(
        config=AgentConfig(model=model, system_prompt="Be brief.", max_tokens=50, planning=False),
        provider=provider,
    )


def _registry() -> AgentRegistry:
    found = AgentRegistry()
    found.register(AGENT, build, version="v1")
    for policy in LEDGER_POLICIES:
        found.register(policy, functools.partial(ledger_agent, policy), version="v1")
    found.register("asks", lambda: ledger_agent("safe", permission="ask"), version="v1")
    found.register("fragile", _fragile, version="v1")
    found.register("slow", lambda: ledger_agent("safe", first_attempt_seconds=30.0), version="v1")
    # At most two of its runs drive at once across the fleet (the registry's limit).
    found.register("limited", functools.partial(ledger_agent, "safe"), version="v1", max_concurrent=2)
    for model in ("rpm", "tpm", "pause", "hold"):
        found.register(f"vendor-{model}", functools.partial(vendor_agent, f"gpt-{model}"), version="v1")
    return found


registry = _registry()
