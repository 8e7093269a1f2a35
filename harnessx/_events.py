"""Typed run events: what a stream consumer sees, and what a durable store keeps per run.

Each event type carries one kind of payload (``RunEvent.data``), as in harnessx 0.9.1:

=============================================================  ==================================
``text_delta``, ``text_complete``, ``thinking_delta``           the text (``str``)
``turn_complete``                                               the stop reason (``str``)
``error``                                                       the error message (``str``)
``tool_call_start``, ``tool_call_complete``                     the ``ToolCall``
``tool_call_delta``                                             a ``ToolCallDelta``
``tool_result``                                                 the ``ToolResult`` the model sees
``run_result``                                                  the ``RunResult``
``approval_required``, ``recovery_required``                    the pending call as a dict (the
                                                                keys of ``PendingTool.to_dict()``)
``attempt_reset``                                               ``{"attempt": int}``
``waiting``                                                     ``{"on": "model"|"tool"|"retry"|
                                                                "rate_limit", "seconds": float,
                                                                ...}``
``todos_updated``, ``gap``                                      a dict
=============================================================  ==================================

A store keeps ``encode_data``'s JSON form and ``decode_data`` turns it back into the type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from harnessx._ids import uuid7
from harnessx._results import RunResult, ToolResult
from harnessx.providers._base import ToolCall, ToolCallDelta

__all__ = ["RunEvent", "RunEventType", "decode_data", "encode_data", "new_event_id"]


class RunEventType(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """Kinds of run event.

    - ``text_delta`` / ``thinking_delta`` / ``tool_call_delta``: provisional output while the
      model streams; discard what arrived before an ``attempt_reset``.
    - ``text_complete``: the model's full text for one call.
    - ``tool_call_start``: a tool call was dispatched (its intent is recorded first).
    - ``tool_call_complete``: the tool's result is in; ``tool_result`` is what the model will
      see, after result middleware.
    - ``turn_complete``: the run completed; ``run_result`` follows.
    - ``error``: the run failed.
    - ``approval_required`` / ``recovery_required``: a tool call waits for a decision.
    - ``attempt_reset``: a model call is being made again (retried, or after a crash).
    - ``waiting``: a slow call is still running (a notice, not a stop).
    - ``todos_updated``: the agent's task list changed.
    - ``run_result``: the last event of an execution, carrying the ``RunResult``.
    - ``gap``: events were skipped.
    """

    TEXT_DELTA = "text_delta"
    TEXT_COMPLETE = "text_complete"
    THINKING_DELTA = "thinking_delta"
    TOOL_CALL_DELTA = "tool_call_delta"
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_COMPLETE = "tool_call_complete"
    TOOL_RESULT = "tool_result"
    TURN_COMPLETE = "turn_complete"
    ERROR = "error"
    APPROVAL_REQUIRED = "approval_required"
    RECOVERY_REQUIRED = "recovery_required"
    ATTEMPT_RESET = "attempt_reset"
    TODOS_UPDATED = "todos_updated"
    WAITING = "waiting"
    RUN_RESULT = "run_result"
    GAP = "gap"


_TEXT = frozenset(
    {
        RunEventType.TEXT_DELTA,
        RunEventType.TEXT_COMPLETE,
        RunEventType.THINKING_DELTA,
        RunEventType.TURN_COMPLETE,
        RunEventType.ERROR,
    }
)
_CALL = frozenset({RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE})
_PENDING = frozenset({RunEventType.APPROVAL_REQUIRED, RunEventType.RECOVERY_REQUIRED})
_PAYLOAD: dict[RunEventType, type] = {
    **dict.fromkeys(_TEXT, str),
    **dict.fromkeys(_CALL, ToolCall),
    RunEventType.TOOL_CALL_DELTA: ToolCallDelta,
    RunEventType.TOOL_RESULT: ToolResult,
    RunEventType.RUN_RESULT: RunResult,
}


def new_event_id() -> str:
    return uuid7()


@dataclass
class RunEvent:
    """One event of a run; ``data``'s type depends on ``type`` (see the module docstring).

    ``cursor`` is the event's per-run sequence number as a string; pass it as ``after=``
    to continue behind it. It counts every event (dense) except in a finished run whose
    streamed text was compacted, where one event carries several pieces and the cursor of the
    last; any cursor read before still continues at the same text. A synthesized terminal
    summary has ``cursor=""``.
    ``event_id`` is unique, so a consumer can drop a replayed duplicate.
    """

    type: RunEventType
    data: Any
    session_id: str = ""
    run_id: str = ""
    step_id: str = ""
    attempt_id: str = ""
    event_id: str = field(default_factory=new_event_id)
    cursor: str = ""

    def __post_init__(self) -> None:
        self.type = RunEventType(self.type)
        _check_payload(self.type, self.data)

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data; ``from_dict`` reads it back with typed payloads."""
        return {
            "type": self.type.value,
            "data": encode_data(self.type, self.data),
            "session_id": self.session_id,
            "run_id": self.run_id,
            "step_id": self.step_id,
            "attempt_id": self.attempt_id,
            "event_id": self.event_id,
            "cursor": self.cursor,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunEvent:
        kind = RunEventType(data["type"])
        return cls(
            type=kind,
            data=decode_data(kind, data.get("data")),
            session_id=str(data.get("session_id", "")),
            run_id=str(data.get("run_id", "")),
            step_id=str(data.get("step_id", "")),
            attempt_id=str(data.get("attempt_id", "")),
            event_id=str(data.get("event_id") or new_event_id()),
            cursor=str(data.get("cursor") or ""),
        )


_WAITING_ON = ("model", "tool", "retry", "rate_limit")


def _check_payload(kind: RunEventType, payload: Any) -> None:
    expected = _PAYLOAD.get(kind, dict)
    if not isinstance(payload, expected):
        raise TypeError(f"a {kind.value} event carries a {expected.__name__}, not {type(payload).__name__}")
    data: dict[str, Any] = payload if isinstance(payload, dict) else {}
    if kind in _PENDING and (
        not isinstance(data.get("execution_key"), str) or not isinstance(data.get("call"), dict)
    ):
        raise ValueError(f"a {kind.value} event needs 'execution_key' and 'call'")
    if kind is RunEventType.ATTEMPT_RESET and type(data.get("attempt")) is not int:
        raise ValueError("an attempt_reset event needs an int 'attempt'")
    if kind is RunEventType.WAITING:
        # The payload is what a consumer words its notice from (0.9.1's contract, plus
        # this project's rate-limit waits).
        if data.get("on") not in _WAITING_ON:
            raise ValueError(
                "a waiting event says what it waits on ('on': 'model', 'tool', 'retry' or 'rate_limit'), "
                f"not {data.get('on')!r}"
            )
        seconds = data.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError("a waiting event says how long it has waited ('seconds': a number)")


def encode_data(kind: RunEventType, data: Any) -> Any:
    """``data`` as JSON-ready values, in the form ``decode_data`` reads back."""
    if isinstance(data, ToolCall):
        return {"id": data.id, "name": data.name, "input": data.input}
    if isinstance(data, ToolResult | RunResult):
        return data.to_dict()
    if isinstance(data, ToolCallDelta):
        return dataclasses.asdict(data)
    return data


def decode_data(kind: RunEventType, value: Any) -> Any:
    """The typed payload of a ``kind`` event from ``encode_data``'s form."""
    if kind in _CALL:
        return ToolCall.from_dict(value)
    if kind is RunEventType.TOOL_CALL_DELTA:
        return ToolCallDelta(str(value["id"]), str(value["name"]), str(value.get("partial_json", "")))
    if kind is RunEventType.TOOL_RESULT:
        return ToolResult.from_dict(value)
    if kind is RunEventType.RUN_RESULT:
        return RunResult.from_dict(value)
    if kind is RunEventType.WAITING and isinstance(value, dict) and "seconds" not in value:
        # Stored before waiting events had to say how long (none are written so now).
        return {**value, "seconds": 0.0}
    return value
