"""What a run ends with: ``RunResult``, its status, and the tool calls it waits on."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from harnessx._errors import (
    RunAwaitingInput,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunPaused,
    RunRefused,
    RunTruncated,
)
from harnessx.providers._base import TokenUsage, ToolCall

__all__ = ["PendingTool", "RunResult", "RunStatus", "ToolResult"]


class RunStatus(StrEnum):
    """Where a run stands. ``running`` is also the last state persisted before a crash."""

    RUNNING = "running"
    COMPLETED = "completed"
    PAUSED = "paused"
    AWAITING_INPUT = "awaiting_input"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        """True for states no resume can change (completed, cancelled, failed)."""
        return self in _FINISHED


_FINISHED = frozenset({RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.FAILED})


@dataclass
class ToolResult:
    """The outcome of one tool call as the model sees it."""

    tool_call_id: str = ""
    content: str = ""
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "content": self.content, "is_error": self.is_error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(
            str(data.get("tool_call_id", "")), str(data.get("content", "")), bool(data.get("is_error"))
        )


@dataclass
class PendingTool:
    """A tool call the run waits on.

    ``status`` is ``approval`` (an ASK permission needs a decision) or ``uncertain`` (the
    call was dispatched, the process died before its result committed, and its replay
    policy forbids calling it again on its own).
    """

    execution_key: str
    call: ToolCall
    status: Literal["approval", "uncertain"]
    attempt: int = 0
    policy: str = "manual"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "execution_key": self.execution_key,
            "call": self.call.to_dict(),
            "status": self.status,
            "attempt": self.attempt,
            "policy": self.policy,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingTool:
        status = data["status"]
        if status not in ("approval", "uncertain"):
            raise ValueError(f"unknown pending tool status {status!r}")
        return cls(
            execution_key=str(data["execution_key"]),
            call=ToolCall.from_dict(data["call"]),
            status=status,
            attempt=int(data.get("attempt", 0)),
            policy=str(data.get("policy", "manual")),
            reason=str(data.get("reason", "")),
        )


@dataclass
class RunResult:
    """How a run ended (or where it stopped). Check ``ok`` before using ``output``."""

    session_id: str
    run_id: str
    output: str = ""
    status: RunStatus = RunStatus.COMPLETED
    stop_reason: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    error: dict[str, str] | None = None
    pending: list[PendingTool] = field(default_factory=list)
    usage_incomplete: bool = False

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)

    @property
    def ok(self) -> bool:
        """Completed with a full answer: not truncated, limited or refused."""
        return self.status is RunStatus.COMPLETED and self.stop_reason not in _NOT_OK_STOPS

    @property
    def failed(self) -> bool:
        return self.status is RunStatus.FAILED

    @property
    def needs_input(self) -> bool:
        return self.status is RunStatus.AWAITING_INPUT

    @property
    def truncated(self) -> bool:
        return self.status is RunStatus.COMPLETED and self.stop_reason == "max_tokens"

    @property
    def limited(self) -> bool:
        return self.status is RunStatus.COMPLETED and self.stop_reason == "max_iterations"

    @property
    def refused(self) -> bool:
        return self.status is RunStatus.COMPLETED and self.stop_reason in ("refusal", "safety")

    def raise_for_status(self) -> RunResult:
        """Return ``self`` when ``ok``; otherwise raise the ``RunError`` that fits."""
        error = self._error_class()
        if error is None:
            return self
        raise error(self)

    def _error_class(self) -> type[RunError] | None:
        if self.status is RunStatus.FAILED:
            return RunFailed
        if self.status is RunStatus.AWAITING_INPUT:
            return RunAwaitingInput
        if self.status is RunStatus.CANCELLED:
            return RunCancelled
        if self.status in (RunStatus.PAUSED, RunStatus.RUNNING):
            return RunPaused
        if self.truncated:
            return RunTruncated
        if self.limited:
            return RunLimitReached
        if self.refused:
            return RunRefused
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "output": self.output,
            "status": self.status.value,
            "stop_reason": self.stop_reason,
            "usage": self.usage.to_dict(),
            "error": dict(self.error) if self.error else None,
            "pending": [p.to_dict() for p in self.pending],
            "usage_incomplete": self.usage_incomplete,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            session_id=str(data["session_id"]),
            run_id=str(data["run_id"]),
            output=str(data.get("output", "")),
            status=RunStatus(data.get("status", "completed")),
            stop_reason=str(data.get("stop_reason", "")),
            usage=TokenUsage.from_dict(data.get("usage")),
            error=dict(data["error"]) if data.get("error") else None,
            pending=[PendingTool.from_dict(p) for p in data.get("pending") or []],
            usage_incomplete=bool(data.get("usage_incomplete", False)),
        )


_NOT_OK_STOPS = frozenset({"max_tokens", "max_iterations", "refusal", "safety"})
