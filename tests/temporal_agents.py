"""Agents for the Temporal tests, importable by worker processes as ``temporal_agents:registry``.

The ledger agents ``safe``, ``idempotent`` and ``manual`` of ``chaos.agents`` (one tool call,
then an answer; tools write ``$HX_LEDGER`` and sleep ``$HX_SLOW_TOOL``), ``approval``, whose
tool needs a person's approval first (set on the agent, not at registration), and ``flaky`` /
``flaky_manual``, whose tool (``safe`` with ``ToolRetry(attempts=3)``, or ``manual``) raises
``TransientToolError`` on its first ``$HX_FLAKY_FAILURES`` tries of a call (each try writes a
ledger line first; ``$HX_LEDGER`` must be set); ``hooked``, the ``safe`` agent noting every
hook it fires in ``$HX_HOOKS``; ``truncated``, whose model's first reply is cut off at its
token budget (the second says what budget it was given); ``searching``, whose model pauses
its turn in a web search (a server tool's blocks) and finishes it when the turn comes back;
``recovering``, noting its hooks as ``hooked`` does, whose model replies empty, then cut
off, then pausing its turn, then answers; ``condensing`` and ``overflowing``, noting their
hooks too, whose conversations outgrow their model's window (counted before a call, or
refused as too long);
``batched``, whose model calls ``fetch_a``, ``s1``, ``fetch_b``, ``s2`` in one reply (the
``fetch`` tools concurrent, the ``s`` tools not; all ``safe``), then answers with their
results; ``vendor-rpm``, ``chaos.agents``' agent calling the model vendor at ``$HX_VENDOR_URL``;
``extended``, ``hooked`` with an extension noting its turn callbacks in ``$HX_HOOKS`` too,
``refusing``, whose extension's ``on_turn_start`` raises, ``extended_approval``, whose
tool needs approval, ``drafting``, the ``safe`` agent whose model streams its tool call as
the built-in providers do (``tool_call_delta`` chunks: the call's name, then its arguments in
pieces), and ``previewing``, whose tool returns two results too large to show whole
(``LONG_LINE``, ``RECORDS``), which the model then reads with ``read_tool_result``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from chaos.agents import LEDGER_POLICIES, ledger_agent, record, script, vendor_agent
from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    Extension,
    ExtensionContext,
    HookContext,
    HookEvent,
    Limits,
    PermissionLevel,
    ProviderResponse,
    RunResult,
    ScriptedProvider,
    ScriptedRequest,
    StreamChunk,
    ToolCall,
    ToolCallDelta,
    ToolRetry,
    TransientToolError,
    current_tool_context,
)
from harnessx.engine import SUMMARY_SYSTEM

__all__ = ["registry"]


def _approval() -> Agent:
    agent = ledger_agent("safe")
    agent.permissions.set_permission("safe_tool", PermissionLevel.ASK)
    return agent


def _flaky(policy: str) -> Agent:
    agent = Agent(config=AgentConfig(system_prompt="Flaky agent."), provider=script("flaky_tool"))
    retry = ToolRetry(attempts=3, backoff_seconds=0.05) if policy == "safe" else None

    @agent.tools.register(name="flaky_tool", replay_policy=policy, retry=retry)
    def flaky_tool(item: str) -> str:
        """Do the work, failing transiently at first.

        Args:
            item: What to do.
        """
        done = record("flaky_tool", item)
        key = current_tool_context().execution_key
        # Counted in the ledger, so every worker process agrees.
        with open(os.environ["HX_LEDGER"], encoding="utf-8") as lines:
            tries = sum(json.loads(line)["key"] == key for line in lines if line.strip())
        if tries <= int(os.environ.get("HX_FLAKY_FAILURES", "0") or 0):
            raise TransientToolError(f"the service is busy (try {tries})")
        return done

    return agent


def _hooked() -> Agent:
    """``safe``, with a callback on every hook event appending it to ``$HX_HOOKS``."""
    return _noting(ledger_agent("safe"))


def _noting(agent: Agent) -> Agent:
    """``agent`` with a callback on every hook event appending it to ``$HX_HOOKS``."""

    def note(context: HookContext) -> None:
        path = os.environ.get("HX_HOOKS")
        if path:
            data = {k: v for k, v in context.data.items() if isinstance(v, str | int)}
            if context.event is HookEvent.AGENT_END:
                data["result"] = context.data["result"].status.value
            if "tool_call" in context.data:
                data["tool"] = context.data["tool_call"].name
            with open(path, "a", encoding="utf-8") as lines:
                lines.write(json.dumps({"event": context.event.value, **data}) + "\n")

    for event in HookEvent:
        agent.hooks.on(event, note)
    return agent


def _note(entry: dict[str, object]) -> None:
    path = os.environ.get("HX_HOOKS")
    if path:
        with open(path, "a", encoding="utf-8") as lines:
            lines.write(json.dumps(entry) + "\n")


class _TurnNotes(Extension):
    """Notes its turn callbacks in ``$HX_HOOKS``; ``refuse``: its ``on_turn_start`` raises."""

    name = "turn-notes"

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse

    def install(self, ctx: ExtensionContext) -> None:
        pass

    async def on_turn_start(self, ctx: ExtensionContext, message: str) -> None:
        _note({"event": "on_turn_start", "message": message})
        if self.refuse:
            raise PermissionError("no turns today")

    async def on_turn_end(self, ctx: ExtensionContext, output: str) -> None:
        _note({"event": "on_turn_end", "output": output})

    async def on_turn_complete(self, ctx: ExtensionContext, result: RunResult) -> None:
        _note({"event": "on_turn_complete", "result": result.status.value})


def _extended(refuse: bool) -> Agent:
    """``hooked``, with the ``_TurnNotes`` extension."""
    agent = Agent(
        config=AgentConfig(system_prompt="Ledger agent (safe)."),
        provider=script("safe_tool"),
        extensions=[_TurnNotes(refuse)],
    )

    @agent.tools.register(name="safe_tool", replay_policy="safe")
    def safe_tool(item: str) -> str:
        """Do the work.

        Args:
            item: What to do.
        """
        return record("safe_tool", item)

    return _noting(agent)


def _asking(agent: Agent) -> Agent:
    agent.permissions.set_permission("safe_tool", PermissionLevel.ASK)
    return agent


def _truncated() -> Agent:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(text="The first half, ", stop_reason="max_tokens")
        return f"the rest (budget {request.max_tokens})."

    return Agent(
        config=AgentConfig(model="claude-sonnet-4-6", planning=False), provider=ScriptedProvider(reply)
    )


# A server tool's call and result, as AnthropicProvider keeps them (0.9.1's provider blocks).
SEARCH_CALL = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
}
SEARCH_RESULT = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
}


def _searching() -> Agent:
    """A turn the server pauses in the middle of a web search, then finishes once the paused
    turn comes back to it as it stands (the answer says whether it did)."""
    paused = [{"type": "text", "text": "Searching. "}, SEARCH_CALL]

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(content=paused, stop_reason="pause_turn")
        if request.last_message != {"role": "assistant", "content": paused}:
            return f"the paused turn came back as {json.dumps(request.last_message)}"
        return ProviderResponse(content=[SEARCH_RESULT, {"type": "text", "text": "Found it."}])

    return Agent(
        config=AgentConfig(model="claude-sonnet-4-6", planning=False), provider=ScriptedProvider(reply)
    )


def _recovering() -> Agent:
    """Every reply the driver recovers from after it is recorded, in turn, noting its hooks
    as ``hooked`` does: an empty reply, one cut off at its budget, a paused turn, an answer."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        # An empty reply is not kept in the conversation: the notice asking to go on shows it.
        nudged = "empty" in json.dumps(request.last_message)
        if request.turn == 0:
            if not nudged:
                return ProviderResponse(text="", stop_reason="end_turn")
            return ProviderResponse(text="The first half, ", stop_reason="max_tokens")
        if request.turn == 1:
            return ProviderResponse(text="paused, ", stop_reason="pause_turn")
        return f"the rest (budget {request.max_tokens})."

    return _noting(
        Agent(config=AgentConfig(model="claude-sonnet-4-6", planning=False), provider=ScriptedProvider(reply))
    )


OVERFLOW = "prompt is too long: 250000 tokens > 200000 maximum"


class _Crowded(ScriptedProvider):
    """A model whose window is always nearly full: it counts every request at 50,000 tokens."""

    async def count_tokens(self, **kwargs: object) -> int:
        return 50_000


def _reply_or_summary(request: ScriptedRequest) -> str:
    if request.system == SUMMARY_SYSTEM:
        return "SUMMARY: the questions so far, answered."
    return f"reply {request.turn} to {json.dumps(request.last_message.get('content'))[:40]}"


def _condensing() -> Agent:
    """Condenses before a call (``Limits.max_context_tokens``: its model counts every request
    as too big), noting its hooks as ``hooked`` does."""
    config = AgentConfig(
        model="m-window", max_tokens=1_000, planning=False, limits=Limits(max_context_tokens=10_000)
    )
    return _noting(Agent(config=config, provider=_Crowded(_reply_or_summary)))


def _overflowing() -> Agent:
    """Its model refuses a request of five messages or more as too long until it is
    condensed (then answers), noting its hooks as ``hooked`` does."""

    def reply(request: ScriptedRequest) -> str:
        condensed = "[Earlier conversation, condensed]" in json.dumps(request.messages)
        if request.system != SUMMARY_SYSTEM and len(request.messages) >= 5 and not condensed:
            raise ValueError(OVERFLOW)
        return _reply_or_summary(request)

    config = AgentConfig(model="m-window", max_tokens=1_000, planning=False)
    return _noting(Agent(config=config, provider=ScriptedProvider(reply)))


def _batched() -> Agent:
    names = ("fetch_a", "s1", "fetch_b", "s2")

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall(f"c{i}", n, {}) for i, n in enumerate(names)])
        return "Done: " + ", ".join(r["content"] for r in request.tool_results)

    agent = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider(reply))
    for name in names:

        def tool(done: str = f"{name} did it") -> str:
            """Do one thing."""
            return done

        agent.tools.register(
            name=name,
            permission=PermissionLevel.ALLOW,
            replay_policy="safe",
            concurrent=name.startswith("fetch"),
        )(tool)
    return agent


class _Drafting(ScriptedProvider):
    """``script``'s model, streaming each tool call as the built-in providers do."""

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        async for chunk in super().stream(**kwargs):
            if chunk.kind == "response":
                for call in chunk.data.tool_calls:
                    yield StreamChunk("tool_call_delta", ToolCallDelta(call.id, call.name))
                    arguments = json.dumps(call.input)
                    for start in range(0, len(arguments), 5):
                        yield StreamChunk(
                            "tool_call_delta", ToolCallDelta(call.id, call.name, arguments[start : start + 5])
                        )
            yield chunk


def _drafting() -> Agent:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            call = ToolCall("call_0", "safe_tool", {"item": str(request.last_message.get("content", ""))})
            return ProviderResponse(text="On it.", tool_calls=[call])
        return "Done: " + "; ".join(str(m["content"]) for m in request.tool_results)

    agent = Agent(config=AgentConfig(system_prompt="Ledger agent (safe)."), provider=_Drafting(reply))

    @agent.tools.register(name="safe_tool", replay_policy="safe")
    def safe_tool(item: str) -> str:
        """Do the work.

        Args:
            item: What to do.
        """
        return record("safe_tool", item)

    return agent


# The large results of ``previewing``: one long line, and a list of records a little over the limit.
LONG_LINE = "".join(f"[{i:05d}]" for i in range(500))
RECORDS = json.dumps({"results": [{"title": f"S{i}", "content": "w " * 300} for i in range(4)]})


def _previewing() -> Agent:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(
                tool_calls=[
                    ToolCall("line", "dump", {"which": "line"}),
                    ToolCall("recs", "dump", {"which": "recs"}),
                ]
            )
        if request.turn == 1:
            reads = [{"result_id": "line", "char_offset": 1_000}, {"result_id": "recs", "pattern": "S3"}]
            return ProviderResponse(
                tool_calls=[ToolCall(f"r{i}", "read_tool_result", a) for i, a in enumerate(reads)]
            )
        return "Read: " + " / ".join(r["content"][:40] for r in request.tool_results)

    config = AgentConfig(planning=False, limits=Limits(max_result_chars=2_500))
    agent = Agent(config=config, provider=ScriptedProvider(reply))

    @agent.tools.register(permission=PermissionLevel.ALLOW, replay_policy="safe")
    def dump(which: str) -> str:
        """Return a large result."""
        return LONG_LINE if which == "line" else RECORDS

    return agent


registry = AgentRegistry()
for _policy in LEDGER_POLICIES:
    registry.register(_policy, lambda policy=_policy: ledger_agent(policy), version="v1")
registry.register("approval", _approval, version="v1")
registry.register("flaky", lambda: _flaky("safe"), version="v1")
registry.register("flaky_manual", lambda: _flaky("manual"), version="v1")
registry.register("hooked", _hooked, version="v1")
registry.register("truncated", _truncated, version="v1")
registry.register("searching", _searching, version="v1")
registry.register("recovering", _recovering, version="v1")
registry.register("condensing", _condensing, version="v1")
registry.register("overflowing", _overflowing, version="v1")
registry.register("batched", _batched, version="v1")
registry.register("previewing", _previewing, version="v1")
registry.register("extended", lambda: _extended(refuse=False), version="v1")
registry.register("refusing", lambda: _extended(refuse=True), version="v1")
registry.register("extended_approval", lambda: _asking(_extended(refuse=False)), version="v1")
registry.register("drafting", _drafting, version="v1")
# Calls the model vendor at $HX_VENDOR_URL as gpt-rpm (tests/fake_vendor.py; the rate limits).
registry.register("vendor-rpm", functools.partial(vendor_agent, "gpt-rpm"), version="v1")
