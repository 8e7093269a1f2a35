"""What a run loaded from the store must satisfy before anything drives it.

A row can decode and still be wrong: edited by hand, written by something other than
harnessx, damaged on disk. Driving such a state can repeat work a person must not see
repeated: an assistant message whose role no longer reads ``assistant`` at phase
``model_call`` makes the engine take an *earlier* reply's tool calls for the current one
and run them again, a ``manual`` tool included, under new execution keys. So a loaded state
is checked against the rules every transition of the engine keeps, and a state that breaks
one is refused (``CorruptStateError``, raised by the codec with the run named) instead of
being driven. Each check returns what is wrong, phrased for the operator, or ``None``.
"""

from __future__ import annotations

from typing import Any

from harnessx._results import RunStatus
from harnessx._state import ExecutionKey, Phase, RunState, ToolStatus
from harnessx._tools import ReplayPolicy

__all__ = ["MESSAGE_ROLES", "call_problem", "message_problem", "state_problem"]

MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
_POLICIES = frozenset(policy.value for policy in ReplayPolicy)
# Phases at which the current iteration's tool calls have been prepared.
_TOOL_PHASES = frozenset({Phase.PREPARE_TOOLS, Phase.DISPATCH, Phase.RAW_RESULT, Phase.COMPLETED_RESULT})


def call_problem(call: Any) -> str | None:
    """A stored tool call (``ToolCall.to_dict()``): a non-empty id and name, an object input."""
    if not isinstance(call, dict):
        return f"a tool call is a {type(call).__name__}, not an object"
    for key in ("id", "name"):
        if not isinstance(call.get(key), str) or not call[key]:
            return f"tool call has no valid {key!r}"
    if not isinstance(call.get("input", {}), dict):
        return f"tool call {call['id']!r} has an input that is not an object"
    if call.get("parse_error") is not None and not isinstance(call["parse_error"], str):
        return f"tool call {call['id']!r} has a parse_error that is not text"
    return None


def message_problem(message: Any) -> str | None:
    """One message of a conversation: a known role, text or blocks, well-formed tool calls."""
    if not isinstance(message, dict):
        return f"a message is a {type(message).__name__}, not an object"
    role = message.get("role")
    if role not in MESSAGE_ROLES:
        return f"a message has role {role!r}; roles are {', '.join(sorted(MESSAGE_ROLES))}"
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return f"a {role} message has content of type {type(content).__name__}"
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            return f"a {role} message has tool_calls that are not a list on an assistant message"
        for call in calls:
            problem = call_problem(call)
            if problem is not None:
                return problem
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return "a tool message names no tool_call_id"
    return None


def state_problem(state: RunState) -> str | None:
    """The rules of a whole run, checked once its rows have decoded."""
    if state.iteration < 0:
        return f"iteration is {state.iteration}"
    if not 0 <= state.history_length <= len(state.messages):
        return f"history_length is {state.history_length} but the session has {len(state.messages)} messages"
    for index, message in enumerate(state.messages):
        problem = message_problem(message)
        if problem is not None:
            return f"message {index + 1} of the session: {problem}"
    for entry in state.tools.values():
        problem = _entry_problem(state, entry)
        if problem is not None:
            return f"tool call {entry.execution_key}: {problem}"
    if state.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        return None  # never driven again, so the phase rules below no longer matter
    return _phase_problem(state)


def _entry_problem(state: RunState, entry: Any) -> str | None:
    # Keys written before 0.2 counted iterations from 0; both forms name the same call.
    if not ExecutionKey(state.run_id, entry.iteration, entry.call.id).names(entry.execution_key):
        return "its key does not match its run, iteration and call id"
    if not 0 <= entry.iteration <= state.iteration:
        return f"iteration {entry.iteration} is outside the run's 0..{state.iteration}"
    if entry.index < 0 or entry.attempt < 0:
        return "negative index or attempt"
    if entry.policy not in _POLICIES:
        return f"replay policy {entry.policy!r} is not one of {', '.join(sorted(_POLICIES))}"
    if entry.status is ToolStatus.STARTED and entry.attempt < 1:
        return "started but never dispatched (attempt 0)"
    if entry.status is ToolStatus.RAW_COMPLETED and entry.raw_result is None:
        return "raw_completed without a raw result"
    if entry.status is ToolStatus.COMPLETED and entry.result is None:
        return "completed without a result"
    return None


def _phase_problem(state: RunState) -> str | None:
    current = [e for e in state.tools.values() if e.iteration == state.iteration]
    if state.phase is Phase.MODEL_CALL:
        # The model's reply was committed with this phase; the next step prepares its tool
        # calls. Anything else here would make the engine prepare (and run) other calls.
        if len(state.messages) <= state.history_length or state.messages[-1].get("role") != "assistant":
            return "phase model_call, but the run's last message is not the model's reply"
        if current:
            return f"phase model_call, but iteration {state.iteration} already has tool calls"
    elif state.phase in _TOOL_PHASES and not current:
        return f"phase {state.phase.value}, but iteration {state.iteration} has no tool calls"
    return None
