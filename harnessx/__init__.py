"""harnessx: LLM agents whose runs survive a crash.

Start with ``Agent`` for a run in this process. Everything public is importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx._agent import Agent
from harnessx._config import AgentConfig, Limits, RetryPolicy
from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
    HarnessError,
    LeaseLostError,
    ProviderError,
    ResolutionError,
    RunAwaitingInput,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunPaused,
    RunRefused,
    RuntimeStateError,
    RunTruncated,
    SchemaError,
    SessionBusyError,
    StorageError,
    TransientToolError,
    UnknownExecutionKey,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._handle import RunHandle
from harnessx._hooks import HookContext, HookEvent, Hooks
from harnessx._journal import RecordingError
from harnessx._middleware import Middleware, ModelRequest
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
from harnessx._results import PendingTool, RunResult, RunStatus, ToolResult
from harnessx._runtime import AgentRuntime, RuntimeConfig
from harnessx._stream import RunStream
from harnessx._tools import (
    PermissionLevel,
    PermissionManager,
    ReplayPolicy,
    Tool,
    ToolContext,
    ToolRegistry,
    current_tool_context,
)
from harnessx.providers import (
    AnthropicProvider,
    LLMProvider,
    OpenAIProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)
from harnessx.providers._scripted import ScriptedProvider, ScriptedRequest
from harnessx.store import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store import PostgresBackend

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentRef",
    "AgentRegistry",
    "AgentRuntime",
    "AnthropicProvider",
    "BundleLimits",
    "ConfigurationError",
    "CorruptStateError",
    "ExportPolicy",
    "HarnessError",
    "HookContext",
    "HookEvent",
    "Hooks",
    "IncidentError",
    "IncidentRecorder",
    "LLMProvider",
    "LeaseLostError",
    "Limits",
    "Middleware",
    "ModelRequest",
    "OpenAIProvider",
    "PendingTool",
    "PermissionLevel",
    "PermissionManager",
    "Playback",
    "PostgresBackend",
    "ProviderError",
    "ProviderResponse",
    "RecordingError",
    "ReplayPolicy",
    "ResolutionError",
    "RetryPolicy",
    "RunAwaitingInput",
    "RunCancelled",
    "RunError",
    "RunEvent",
    "RunEventType",
    "RunFailed",
    "RunHandle",
    "RunLimitReached",
    "RunPaused",
    "RunRefused",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunTruncated",
    "RuntimeConfig",
    "RuntimeStateError",
    "SQLiteBackend",
    "SchemaError",
    "ScriptedProvider",
    "ScriptedRequest",
    "SessionBusyError",
    "StopReason",
    "StorageError",
    "StreamChunk",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "TransientToolError",
    "UnknownExecutionKey",
    "VerificationReport",
    "__version__",
    "agents",
    "current_tool_context",
    "export_incident",
]


def __getattr__(name: str) -> object:
    # PostgresBackend needs asyncpg, an optional extra: import it only when asked for.
    if name == "PostgresBackend":
        from harnessx.store import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module 'harnessx' has no attribute {name!r}")
