"""The original harnessx's ``harnessx.execution``: run results, events and tool context.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from typing import Any, TypedDict

from harnessx._driver import current_agent
from harnessx._errors import (
    HarnessError,
    RunAwaitingInput,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunRefused,
    RunTruncated,
    ToolApprovalRequired,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._policies import DEFAULT_TIMEOUT_SECONDS, ToolRetry
from harnessx._results import PendingTool, RunResult, RunStatus, ToolResult
from harnessx._run_dict import cancel_state, close_open_tool_calls, next_command, transition
from harnessx._stream import RunStream
from harnessx._tools import ReplayPolicy, ToolExecutionContext, current_tool_context
from harnessx._unsupported import unsupported_attribute
from harnessx._wire import wire
from harnessx.providers._base import TokenUsage, ToolCall, ToolCallDelta

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "HarnessError",
    "PendingTool",
    "ReplayPolicy",
    "RunAwaitingInput",
    "RunCancelled",
    "RunError",
    "RunEvent",
    "RunEventType",
    "RunFailed",
    "RunFailure",
    "RunLimitReached",
    "RunRefused",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunTruncated",
    "TokenUsage",
    "ToolApprovalRequired",
    "ToolCall",
    "ToolCallData",
    "ToolCallDelta",
    "ToolExecutionContext",
    "ToolResult",
    "ToolRetry",
    "cancel_state",
    "close_open_tool_calls",
    "current_agent",
    "current_tool_context",
    "next_command",
    "result_from_state",
    "transition",
    "wire",
]


class RunFailure(TypedDict):
    """``RunResult.error``: the failure's type name and message."""

    type: str
    message: str


class ToolCallData(TypedDict):
    id: str
    name: str
    input: dict[str, Any]


def result_from_state(state: dict[str, Any]) -> RunResult:
    """The ``RunResult`` a stored run state describes (``backend.get_run(...)``)."""
    return RunResult.from_dict(
        {
            **state,
            "output": state.get("output", ""),
            "pending": [t for t in state.get("tools", []) if t.get("status") in ("approval", "uncertain")],
        }
    )


def __getattr__(name: str) -> object:
    # Only for names this module lacks: the original's that are not here say why.
    raise unsupported_attribute(__name__, name)
