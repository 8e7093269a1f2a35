"""Durable execution in one namespace (the original harnessx's ``harnessx.durable``):
the runtime, the stores, and their errors. Everything here is also exported from
``harnessx``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx._config import RuntimeState
from harnessx._errors import (
    LeaseLostError,
    ResolutionError,
    RunAwaitingInput,
    RuntimeStateError,
    RunTruncated,
    SchemaError,
    SessionBusyError,
    StorageError,
    UnknownExecutionKey,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._handle import RunHandle
from harnessx._journal import RecordingError
from harnessx._recorder import (
    BundleLimits,
    ExportPolicy,
    IncidentError,
    IncidentRecorder,
    Playback,
    VerificationReport,
    export_incident,
)
from harnessx._registry import AgentRef, AgentRegistry, agents
from harnessx._results import PendingTool, RunResult, RunStatus
from harnessx._runtime import AgentRuntime, RuntimeConfig
from harnessx._sessions import RuntimeStatus
from harnessx._stream import RunStream
from harnessx._tools import current_tool_context
from harnessx._unsupported import unsupported_name
from harnessx.store._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store._postgres import PostgresBackend
    from harnessx.temporal import RedisEvents, TemporalBackend

__all__ = [
    "AgentRef",
    "AgentRegistry",
    "AgentRuntime",
    "BundleLimits",
    "ExportPolicy",
    "IncidentError",
    "IncidentRecorder",
    "LeaseLostError",
    "PendingTool",
    "Playback",
    "PostgresBackend",
    "RedisEvents",
    "RecordingError",
    "ResolutionError",
    "RunAwaitingInput",
    "RunEvent",
    "RunEventType",
    "RunHandle",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunTruncated",
    "RuntimeConfig",
    "RuntimeState",
    "RuntimeStateError",
    "RuntimeStatus",
    "SQLiteBackend",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
    "TemporalBackend",
    "UnknownExecutionKey",
    "VerificationReport",
    "agents",
    "current_tool_context",
    "export_incident",
]


def __getattr__(name: str) -> object:
    if name == "PostgresBackend":  # needs asyncpg, an optional extra
        from harnessx.store._postgres import PostgresBackend

        return PostgresBackend
    if name in ("TemporalBackend", "RedisEvents"):  # the temporal extra
        from harnessx import temporal

        return getattr(temporal, name)
    error = unsupported_name(name)
    if error is not None:
        raise error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
