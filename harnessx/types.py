"""The original harnessx's ``harnessx.types``: configuration and data types in one namespace.

Everything here is also importable from ``harnessx``.
It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._config import AgentConfig, Limits, RetryPolicy, RuntimeState
from harnessx._errors import ConfigurationError
from harnessx._permissions import PermissionLevel
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
    call_timeout_for,
)
from harnessx._results import ToolResult
from harnessx._runtime import RuntimeConfig
from harnessx._sessions import CheckpointData, RuntimeStatus, SessionState
from harnessx._tools import ReplayPolicy, ToolDefinition
from harnessx.providers._base import (
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
)
from harnessx.providers._tool_choice import ToolChoice

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "AgentConfig",
    "CheckpointData",
    "ConfigurationError",
    "Fallback",
    "Limits",
    "LoopGuard",
    "PermissionLevel",
    "ProgressPolicy",
    "PromptCacheHint",
    "PromptCachePolicy",
    "ProviderResponse",
    "ReplayPolicy",
    "RetryPolicy",
    "RuntimeConfig",
    "RuntimeState",
    "RuntimeStatus",
    "SessionState",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolDefinition",
    "ToolPolicy",
    "ToolResult",
    "ToolRetry",
    "call_timeout_for",
]
