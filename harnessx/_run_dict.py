"""The original harnessx's run-state dict, and its pure step functions over it.

harnessx 0.9.1 drives a run as a plain dict (``phase``, ``status``, ``messages`` in the
content-block form, ``tools`` entries, the last ``response``) advanced by
``transition(state, command, outcome)``; ``harnessx.execution`` exports that function and
its helpers, and programs (and the original's own tests) call them to check what a step
decides. This harnessx drives runs on ``RunState`` (``_engine``), so these functions are a
view of the same rules on the original's dict: which reply's tool calls run, what answers
the calls a reply leaves open, how a finished or cancelled run ends. The rules and their
wording are the engine's, so that both say the same.

Commands, in the original's order: ``prepare_model`` -> ``model`` -> ``prepare_tools`` ->
``tools`` (the state keeps its phase while calls run) -> ``collect_tools`` ->
``prepare_model`` ..., and ``finish`` -> ``result``; ``compact`` condenses the history.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from harnessx._engine import CANCELLED_CALL, CUT_OFF_CALL_AT_LIMIT, NOT_RUN_AT_LIMIT
from harnessx._ids import uuid7
from harnessx._messages import close_open_calls, from_blocks, to_blocks
from harnessx._results import ToolResult
from harnessx.providers._base import StopReason, TokenUsage

__all__ = [
    "REFUSED_CALL",
    "cancel_state",
    "close_open_tool_calls",
    "new_state",
    "next_command",
    "transition",
]

# A reply refused or filtered by the provider: its calls are answered, never run.
REFUSED_CALL = "Not executed: the provider refused or filtered this reply."


def new_state(
    agent: Any, message: str, *, run_id: str | None = None, durable: bool = False
) -> dict[str, Any]:
    """A run's first state in the original's dict form (phase ``start``), from ``agent``'s
    session: its conversation (content blocks), metadata, usage and task list."""
    return {
        "version": 1,
        "session_id": agent.session_id,
        "run_id": run_id or uuid7(),
        "message": message,
        "messages": agent.memory.get_messages(),
        "metadata": copy.deepcopy(agent.session_metadata),
        "phase": "start",
        "status": "running",
        "durable": durable,
        "iterations": 0,
        "usage": TokenUsage().to_dict(),
        "total_usage": agent.total_usage.to_dict(),
        "lifetime_iterations": agent.lifetime_iterations,
        "tools": [],
        "attempt": 0,
        "usage_incomplete": False,
        "todos": copy.deepcopy(agent.todos),
    }


def next_command(state: Mapping[str, Any]) -> str:
    """The command a state asks for: its phase while running, else ``"result"``."""
    return str(state["phase"]) if state["status"] == "running" else "result"


def transition(state: Mapping[str, Any], command: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The state after ``command`` completed with ``outcome`` (merged into it); a new dict.

    Only a completed command moves the phase on: a ``tools`` command in flight keeps it,
    so a crash there finds the calls' intent still recorded."""
    advanced: dict[str, Any] = {**state, **outcome}
    if command == "prepare_model":
        # Preparing may decide the history is condensed first (phase "compact").
        advanced["phase"] = outcome.get("phase", "model")
    elif command == "model":
        return _after_model(advanced)
    elif command == "prepare_tools":
        advanced["phase"] = "tools"
    elif command == "collect_tools":
        advanced["phase"] = "prepare_model"
    elif command == "finish":
        advanced.update(phase="result", status="completed")
    return advanced


def _after_model(state: dict[str, Any]) -> dict[str, Any]:
    recovery = state.pop("recovery", None)
    if recovery:
        # The model command already answered the reply (an overflow is condensed first;
        # a truncated or empty reply is asked again).
        state["phase"] = "compact" if recovery == "context_overflow" else "prepare_model"
        return state
    response = state["response"]
    text = str(response.get("text") or "")
    calls = response.get("tool_calls") or []
    output = str(state.get("partial_output", "")) + text
    failure = state.pop("terminal_failure", None)
    if failure:
        state.update(status="failed", error=failure, phase="finish", output=output)
        return state
    if state.get("final_answer"):
        # The one last call of a run at Limits.max_iterations ends it whatever it holds.
        if calls:
            state = close_open_tool_calls(state, NOT_RUN_AT_LIMIT)
        state.update(phase="finish", output=output, stop_reason="max_iterations")
        return state
    stop = StopReason.coerce(response.get("stop_reason"))
    # The calls decide, not the stop reason ("end_turn" with calls is common), except for
    # a reply cut off at its budget (its arguments may be incomplete) or one refused.
    if calls and stop not in (StopReason.MAX_TOKENS, StopReason.SAFETY, StopReason.REFUSAL):
        state["phase"] = "prepare_tools"
        return state
    if calls:
        refused = stop in (StopReason.SAFETY, StopReason.REFUSAL)
        state = close_open_tool_calls(state, REFUSED_CALL if refused else CUT_OFF_CALL_AT_LIMIT)
    state.update(
        phase="finish",
        # A reply continued after a cut-off arrives in pieces; a last empty piece adds nothing.
        output=output if text.strip() else output.rstrip(),
        stop_reason=response.get("stop_reason", ""),
    )
    return state


def close_open_tool_calls(state: dict[str, Any], unanswered: str) -> dict[str, Any]:
    """``state`` with every call of its last assistant turn answered.

    A call that has a recorded result (its ``tools`` entry's ``result`` or ``raw_result``)
    is answered with it; the others with ``unanswered``, as an error. Calls already answered
    are left alone, so closing twice adds nothing. The answers are one user message of
    ``tool_result`` blocks, what a provider needs before the next request."""
    messages = list(state.get("messages") or [])
    if (
        not messages
        or messages[-1].get("role") != "assistant"
        or not isinstance(messages[-1].get("content"), list)
    ):
        return state
    recorded = {}
    for entry in state.get("tools") or []:
        result = entry.get("result") or entry.get("raw_result")
        if result:
            call_id = str(entry["call"]["id"])
            recorded[call_id] = ToolResult(call_id, result.get("content", ""), bool(result.get("is_error")))
    closing = close_open_calls(from_blocks(messages), recorded, unanswered)
    if not closing:
        return state
    answers = to_blocks(closing)[0]["content"]
    for block in answers:
        # The original's answers always say whether they are errors.
        block["is_error"] = bool(block.get("is_error", False))
    state["messages"] = [*messages, {"role": "user", "content": answers}]
    return state


def cancel_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` cancelled: open calls answered as possibly run (their entries, and so an
    ``uncertain`` outcome, are kept)."""
    state["status"] = "cancelled"
    return close_open_tool_calls(state, CANCELLED_CALL)
