"""What a run ends with: ``RunResult``, its status, and the tool calls it waits on."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
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
from harnessx._policies import DEFAULT_TIMEOUT_SECONDS, ToolRetry
from harnessx.providers._base import TokenUsage, ToolCall

__all__ = [
    "CLOSED_STATUSES",
    "FINISHED_STATUSES",
    "UNFINISHED_STATUSES",
    "PendingTool",
    "RunResult",
    "RunStatus",
    "ToolResult",
]


class RunStatus(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """Where a run stands. ``running`` is also the last state persisted before a crash.

    A ``str`` enum, so ``status == "completed"`` holds; ``str(status)`` is the member's name
    (``RunStatus.COMPLETED``) and ``status.value`` the bare string, as in harnessx 0.9.1.
    """

    RUNNING = "running"
    COMPLETED = "completed"
    PAUSED = "paused"
    AWAITING_INPUT = "awaiting_input"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        """True for states no resume can change (completed, cancelled, failed)."""
        return self in FINISHED_STATUSES


# The groups of statuses the code decides by, declared once, in a fixed order (they are also
# shown, e.g. as a CLI's choices). A ``str`` enum's members compare equal to their values, so
# ``"running" in UNFINISHED_STATUSES`` holds as well.
FINISHED_STATUSES: tuple[RunStatus, ...] = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.FAILED)
"""No run in one goes on by itself (a failed one may be resumed)."""
UNFINISHED_STATUSES: tuple[RunStatus, ...] = (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.AWAITING_INPUT)
"""A run in one holds its session: it is going, or waits for a resume or a decision."""
CLOSED_STATUSES: tuple[RunStatus, ...] = (RunStatus.COMPLETED, RunStatus.CANCELLED)
"""Not even a resume moves a run in one on: there is nothing left to resume."""


@dataclass(init=False)
class ToolResult:
    """The outcome of one tool call as the model sees it. ``tool_use_id`` is another name
    for ``tool_call_id`` (both spellings are accepted)."""

    tool_call_id: str = ""
    content: str = ""
    is_error: bool = False

    def __init__(
        self, tool_call_id: str = "", content: str = "", is_error: bool = False, tool_use_id: str = ""
    ) -> None:
        if tool_call_id and tool_use_id and tool_call_id != tool_use_id:
            raise ValueError(
                f"ToolResult got two different call ids ({tool_call_id!r} and {tool_use_id!r}); pass one"
            )
        self.tool_call_id = tool_call_id or tool_use_id
        self.content = content
        self.is_error = is_error

    @property
    def tool_use_id(self) -> str:
        return self.tool_call_id

    @tool_use_id.setter
    def tool_use_id(self, value: str) -> None:
        self.tool_call_id = value

    def to_dict(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "content": self.content, "is_error": self.is_error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(
            str(data.get("tool_call_id") or data.get("tool_use_id") or ""),
            str(data.get("content", "")),
            bool(data.get("is_error")),
        )


@dataclass(frozen=True)
class PendingTool:
    """A tool call the run waits on.

    ``status`` is ``approval`` (an ASK permission needs a decision) or ``uncertain`` (the
    call was dispatched, and its outcome is unknown: the process died, or the run was
    cancelled, before its result committed, and its replay policy forbids calling it again
    on its own). ``concurrent``, ``timeout_seconds`` and ``retry`` are the tool's settings
    when the call was prepared. Settle it with ``AgentRuntime.approve``/``decline`` or
    ``AgentRuntime.resolve_tool``.
    """

    execution_key: str
    call: ToolCall
    status: Literal["approval", "uncertain"]
    attempt: int = 0
    policy: str = "manual"
    concurrent: bool = False
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    retry: ToolRetry | None = None

    def __post_init__(self) -> None:
        if self.status not in ("approval", "uncertain") or not isinstance(self.execution_key, str):
            raise ValueError(
                f"a pending tool needs a str execution_key and status 'approval' or 'uncertain', "
                f"got {self.execution_key!r} and {self.status!r}"
            )
        # Dicts are accepted for both, as from a stored entry.
        if isinstance(self.call, dict):
            object.__setattr__(self, "call", ToolCall.from_dict(self.call))
        if isinstance(self.retry, dict):
            object.__setattr__(self, "retry", ToolRetry.from_dict(self.retry))  # type: ignore[unreachable]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "call": {"id": self.call.id, "name": self.call.name, "input": self.call.input},
            "status": self.status,
            "attempt": self.attempt,
            "execution_key": self.execution_key,
            "policy": self.policy,
            "concurrent": self.concurrent,
            "timeout": self.timeout_seconds,
        }
        if self.retry is not None:
            data["retry"] = self.retry.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingTool:
        """Reads ``to_dict``'s shape, and the one harnessx stored before 0.2 (with ``reason``)."""
        status = data["status"]
        if status not in ("approval", "uncertain"):
            raise ValueError(f"unknown pending tool status {status!r}")
        timeout = data.get("timeout", data.get("timeout_seconds"))
        return cls(
            execution_key=str(data["execution_key"]),
            call=ToolCall.from_dict(data["call"]),
            status=status,
            attempt=int(data.get("attempt", 0)),
            policy=str(data.get("policy", "manual")),
            concurrent=bool(data.get("concurrent", False)),
            timeout_seconds=float(timeout) if timeout is not None else DEFAULT_TIMEOUT_SECONDS,
            retry=ToolRetry.from_dict(data["retry"]) if data.get("retry") else None,
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
        if self.error is not None and not all(
            isinstance(self.error.get(k), str) for k in ("type", "message")
        ):
            raise ValueError("RunResult.error needs str 'type' and 'message'")
        self.pending = [p if isinstance(p, PendingTool) else PendingTool.from_dict(p) for p in self.pending]

    @property
    def ok(self) -> bool:
        """Completed with a whole answer: not truncated, limited, refused or left unfinished."""
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
        """Return ``self`` when it completed (and is not truncated, limited or refused);
        otherwise raise the ``RunError`` that fits."""
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
        if self.refused:
            return RunRefused
        if self.limited:
            return RunLimitReached
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


_NOT_OK_STOPS = frozenset({"max_tokens", "max_iterations", "refusal", "safety", "pause_turn", "empty_reply"})
