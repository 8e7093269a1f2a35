"""Typed run events: what a stream consumer sees, and what a durable store keeps per run."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["RunEvent", "RunEventType", "new_event_id"]


class RunEventType(StrEnum):
    """Kinds of run event.

    - ``text_delta`` / ``thinking_delta``: provisional text while the model streams.
    - ``text_complete``: the model's full text for one call.
    - ``tool_call_start``: a tool call was dispatched (its intent is recorded first).
    - ``tool_call_complete``: the tool's raw result is in.
    - ``tool_result``: the result the model will see, after result middleware.
    - ``turn_complete``: the model finished its answer; the run is about to complete.
    - ``error``: the run failed.
    - ``approval_required`` / ``recovery_required``: a tool call waits for a decision.
    - ``attempt_reset``: discard provisional text of the interrupted model attempt.
    - ``todos_updated``: the task list changed (``{todos, completed, total, in_progress}``).
    - ``waiting``: a model call has been silent for a while (``{on, seconds}``; see
      ``ProgressPolicy``). A notice, not a stop.
    - ``run_result``: the last event of an execution, carrying the ``RunResult`` as a dict.
    """

    TEXT_DELTA = "text_delta"
    TEXT_COMPLETE = "text_complete"
    THINKING_DELTA = "thinking_delta"
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


def new_event_id() -> str:
    return uuid.uuid4().hex


@dataclass
class RunEvent:
    """One event of a run.

    ``cursor`` is the event's dense per-run sequence number as a string; pass it as
    ``after=`` to continue behind it. A synthesized terminal summary has ``cursor=None``.
    ``event_id`` is unique, so a consumer can drop a replayed duplicate.
    """

    type: RunEventType
    data: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    run_id: str = ""
    step_id: str = ""
    attempt_id: str = ""
    event_id: str = field(default_factory=new_event_id)
    cursor: str | None = None

    def __post_init__(self) -> None:
        self.type = RunEventType(self.type)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "data": self.data,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "step_id": self.step_id,
            "attempt_id": self.attempt_id,
            "event_id": self.event_id,
            "cursor": self.cursor,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunEvent:
        return cls(
            type=RunEventType(data["type"]),
            data=dict(data.get("data") or {}),
            session_id=str(data.get("session_id", "")),
            run_id=str(data.get("run_id", "")),
            step_id=str(data.get("step_id", "")),
            attempt_id=str(data.get("attempt_id", "")),
            event_id=str(data.get("event_id") or new_event_id()),
            cursor=data.get("cursor"),
        )
