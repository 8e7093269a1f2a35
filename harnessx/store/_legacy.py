"""Reading what harnessx stored before 0.2: event payloads as dicts.

Before 0.2 every event's ``data`` was a dict (``{"text": ...}`` for text, the call's fields
for tool events, ``{"reason": ...}`` for ``attempt_reset`` and ``waiting``), its step id
named the step (``model:0``, ``tool:<execution key>``, ``run``) and iterations counted from
0. Those rows are upgraded as they are read, so runs stored by an older harnessx (or by an
older worker during a rolling upgrade) read like new ones: nothing is rewritten on disk.
"""

from __future__ import annotations

from typing import Any

from harnessx._events import RunEventType
from harnessx._policies import DEFAULT_TIMEOUT_SECONDS

__all__ = ["NEEDS_CALL", "upgrade_event"]

_TEXT_KEYS = {
    RunEventType.TEXT_DELTA: "text",
    RunEventType.TEXT_COMPLETE: "text",
    RunEventType.THINKING_DELTA: "text",
    RunEventType.ERROR: "message",
}

# Stands in for the input of a ``tool_call_complete`` stored before 0.2, which did not
# record it: the reader fills the call in from the run's tool calls.
NEEDS_CALL = "__harnessx_needs_call__"


def upgrade_event(
    kind: RunEventType, value: Any, step_id: str, attempt_id: str
) -> tuple[Any, str, str] | None:
    """``(data, step_id, attempt_id)`` in the current form, or ``None`` for an event that has
    no counterpart any more (a ``waiting`` event at an approval or pause stop)."""
    if not isinstance(value, dict) or not _is_legacy(kind, value):
        return value, step_id, attempt_id
    step, attempt = _legacy_ids(step_id, attempt_id)
    if kind in _TEXT_KEYS:
        return str(value.get(_TEXT_KEYS[kind], "")), step, attempt
    if kind is RunEventType.TURN_COMPLETE:
        # It carried the output; the stop reason is on the run_result that follows.
        return "end_turn", step, attempt
    if kind in (RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE):
        call = _call(value)
        if "input" not in value:
            call["input"] = {NEEDS_CALL: str(value.get("execution_key", ""))}
        return call, step, attempt
    if kind in (RunEventType.APPROVAL_REQUIRED, RunEventType.RECOVERY_REQUIRED):
        pending = {
            "call": _call(value),
            "status": "approval" if kind is RunEventType.APPROVAL_REQUIRED else "uncertain",
            "attempt": int(value.get("attempt", 0)),
            "execution_key": str(value.get("execution_key", "")),
            "policy": str(value.get("policy", "manual")),
            "concurrent": False,
            "timeout": DEFAULT_TIMEOUT_SECONDS,
        }
        return pending, step, attempt
    if kind is RunEventType.TOOL_RESULT:
        content = value.get("content", "")
        result = {"tool_call_id": str(value.get("tool_call_id", "")), "content": content}
        return {**result, "is_error": bool(value.get("is_error"))}, step, attempt
    if kind is RunEventType.ATTEMPT_RESET:
        return {"attempt": 1}, step, attempt
    if kind is RunEventType.WAITING:
        return None
    return value, step, attempt


def _is_legacy(kind: RunEventType, value: dict[str, Any]) -> bool:
    if kind in _TEXT_KEYS or kind is RunEventType.TURN_COMPLETE:
        return True  # these carry a str now
    if kind in (RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE):
        return "id" not in value
    if kind is RunEventType.TOOL_RESULT:
        return "execution_key" in value  # today's is a ToolResult's three fields
    if kind in (RunEventType.APPROVAL_REQUIRED, RunEventType.RECOVERY_REQUIRED):
        return "call" not in value
    if kind is RunEventType.ATTEMPT_RESET:
        return type(value.get("attempt")) is not int
    if kind is RunEventType.WAITING:
        return "on" not in value
    return False


def _call(value: dict[str, Any]) -> dict[str, Any]:
    arguments = value.get("input")
    return {
        "id": str(value.get("tool_call_id", "")),
        "name": str(value.get("name", "")),
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _legacy_ids(step_id: str, attempt_id: str) -> tuple[str, str]:
    """``model:3`` -> ``4`` (iterations now count from 1); ``tool:<run>:<iteration>:<call>``
    -> the iteration + 1, with the attempt after ``#``; ``run`` (no iteration recorded) ->
    ``""``."""
    if step_id.startswith("model:"):
        return _next(step_id.removeprefix("model:")), ""
    if step_id.startswith("tool:"):
        parts = step_id.removeprefix("tool:").split(":")
        attempt = attempt_id.rpartition("#")[2] if "#" in attempt_id else ""
        return (_next(parts[1]) if len(parts) >= 3 else ""), attempt
    return "", ""


def _next(iteration: str) -> str:
    return str(int(iteration) + 1) if iteration.isdigit() else ""
