"""harnessx: LLM agents whose runs survive a crash.

Start with ``Agent`` for a run in this process. Everything public is importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx._agent import Agent
from harnessx._config import AgentConfig, Limits, RetryPolicy, RuntimeState
from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
    CostLimitError,
    HarnessError,
    LeaseLostError,
    MaxIterationsError,
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
    ToolApprovalRequired,
    TransientToolError,
    UnknownExecutionKey,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._extensions import Extension, ExtensionContext
from harnessx._guardrails import GuardrailsEngine
from harnessx._handle import RunHandle
from harnessx._hooks import HookContext, HookEvent, HookManager, Hooks, Registration
from harnessx._journal import RecordingError
from harnessx._memory import ConversationMemory
from harnessx._messages import Message
from harnessx._middleware import Middleware, MiddlewarePipeline, ModelRequest
from harnessx._model_limits import ModelLimits, register_model_limits
from harnessx._permissions import CliPermissionManager, PermissionLevel, PermissionManager
from harnessx._policies import (
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_TOOL_TIMEOUT_SECONDS,
    Fallback,
    LoopGuard,
    ProgressPolicy,
    PromptCacheHint,
    PromptCachePolicy,
    ToolPolicy,
    ToolRetry,
)
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
from harnessx._result_spill import ResultSpillExtension
from harnessx._results import PendingTool, RunResult, RunStatus, ToolResult
from harnessx._runtime import AgentRuntime, RuntimeConfig
from harnessx._sessions import CheckpointData, PersistentMemory, RuntimeStatus, SessionState
from harnessx._stream import RunStream
from harnessx._tools import (
    ReplayPolicy,
    Tool,
    ToolContext,
    ToolDefinition,
    ToolExecutionContext,
    ToolNotFoundError,
    ToolRegistry,
    current_tool_context,
    normalize_tool_registry,
)
from harnessx._unsupported import install_finder, unsupported_name
from harnessx.execution import RunFailure
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
from harnessx.providers._base import ToolCallDelta
from harnessx.providers._fallback import FallbackProvider
from harnessx.providers._registry import make_provider, register_provider
from harnessx.providers._scripted import ScriptedProvider, ScriptedRequest
from harnessx.providers._tool_choice import ToolChoice
from harnessx.store import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store import PostgresBackend
    from harnessx.temporal import RedisEvents, TemporalBackend

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentRef",
    "AgentRegistry",
    "AgentRuntime",
    "AnthropicProvider",
    "BundleLimits",
    "CheckpointData",
    "CliPermissionManager",
    "ConfigurationError",
    "ConversationMemory",
    "CorruptStateError",
    "CostLimitError",
    "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "ExportPolicy",
    "Extension",
    "ExtensionContext",
    "Fallback",
    "FallbackProvider",
    "GuardrailsEngine",
    "HarnessError",
    "HookContext",
    "HookEvent",
    "HookManager",
    "Hooks",
    "IncidentError",
    "IncidentRecorder",
    "LLMProvider",
    "LeaseLostError",
    "Limits",
    "LoopGuard",
    "MaxIterationsError",
    "Message",
    "Middleware",
    "MiddlewarePipeline",
    "ModelLimits",
    "ModelRequest",
    "OpenAIProvider",
    "PendingTool",
    "PermissionLevel",
    "PermissionManager",
    "PersistentMemory",
    "Playback",
    "PostgresBackend",
    "ProgressPolicy",
    "PromptCacheHint",
    "PromptCachePolicy",
    "ProviderError",
    "ProviderResponse",
    "RecordingError",
    "RedisEvents",
    "Registration",
    "ReplayPolicy",
    "ResolutionError",
    "ResultSpillExtension",
    "RetryPolicy",
    "RunAwaitingInput",
    "RunCancelled",
    "RunError",
    "RunEvent",
    "RunEventType",
    "RunFailed",
    "RunFailure",
    "RunHandle",
    "RunLimitReached",
    "RunPaused",
    "RunRefused",
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
    "ScriptedProvider",
    "ScriptedRequest",
    "SessionBusyError",
    "SessionState",
    "StopReason",
    "StorageError",
    "StreamChunk",
    "TemporalBackend",
    "TokenUsage",
    "Tool",
    "ToolApprovalRequired",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolContext",
    "ToolDefinition",
    "ToolExecutionContext",
    "ToolNotFoundError",
    "ToolPolicy",
    "ToolRegistry",
    "ToolResult",
    "ToolRetry",
    "TransientToolError",
    "UnknownExecutionKey",
    "VerificationReport",
    "__version__",
    "agents",
    "current_tool_context",
    "export_incident",
    "make_provider",
    "normalize_tool_registry",
    "register_model_limits",
    "register_provider",
]


install_finder()


def __getattr__(name: str) -> object:
    # PostgresBackend needs asyncpg, and the Temporal binding temporalio and redis, optional
    # extras: import them only when asked for.
    if name == "PostgresBackend":
        from harnessx.store import PostgresBackend

        return PostgresBackend
    if name in ("TemporalBackend", "RedisEvents"):
        from harnessx import temporal

        return getattr(temporal, name)
    # A name of the original harnessx this one does not have: say so, and where to look.
    error = unsupported_name(name)
    if error is not None:
        raise error
    raise AttributeError(f"module 'harnessx' has no attribute {name!r}")
