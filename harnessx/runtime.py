"""The original harnessx's ``harnessx.runtime``: ``AgentRuntime`` and ``RunHandle``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._agent import Agent
from harnessx._config import AgentConfig, RuntimeState
from harnessx._errors import (
    ConfigurationError,
    ResolutionError,
    RuntimeStateError,
    SessionBusyError,
    UnknownExecutionKey,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._handle import RunHandle
from harnessx._hooks import HookEvent
from harnessx._registry import AgentRef, AgentRegistry, agents
from harnessx._results import PendingTool, RunResult
from harnessx._run_dict import cancel_state, new_state
from harnessx._runtime import AgentRuntime, RuntimeConfig
from harnessx._snapshot import restore
from harnessx._stream import RunStream
from harnessx.execution import result_from_state
from harnessx.store._sqlite import SQLiteBackend

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentRef",
    "AgentRegistry",
    "AgentRuntime",
    "ConfigurationError",
    "HookEvent",
    "PendingTool",
    "ResolutionError",
    "RunEvent",
    "RunEventType",
    "RunHandle",
    "RunResult",
    "RunStream",
    "RuntimeConfig",
    "RuntimeState",
    "RuntimeStateError",
    "SQLiteBackend",
    "SessionBusyError",
    "UnknownExecutionKey",
    "agents",
    "cancel_state",
    "new_state",
    "restore",
    "result_from_state",
]
