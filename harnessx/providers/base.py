"""The original harnessx's ``harnessx.providers.base``: the provider contract.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._model_limits import DEFAULT_OUTPUT_CAP, ModelLimits, default_reply_budget, lookup_model_limits
from harnessx._policies import PromptCacheHint
from harnessx._retry import is_rate_limited, is_transient, sdk_connection_failure
from harnessx._retry import retry_after as retry_after_seconds
from harnessx.providers._base import (
    INVALID_ARGUMENTS,
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
    native_continuation,
    streams_natively,
)
from harnessx.providers._http import marked_tool_arguments as parse_tool_arguments
from harnessx.providers._registry import (
    BUILTIN_PROVIDERS,
    make_provider,
    provider_factory,
    registered_providers,
)
from harnessx.providers._tool_choice import TOOL_CHOICES, ToolChoice, normalize_tool_choice

__all__ = [
    "BUILTIN_PROVIDERS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_OUTPUT_CAP",
    "INVALID_ARGUMENTS",
    "TOOL_CHOICES",
    "LLMProvider",
    "ModelLimits",
    "PromptCacheHint",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "ToolChoice",
    "default_reply_budget",
    "is_rate_limited",
    "is_transient",
    "lookup_model_limits",
    "make_provider",
    "native_continuation",
    "normalize_tool_choice",
    "parse_tool_arguments",
    "provider_factory",
    "registered_providers",
    "retry_after_seconds",
    "sdk_connection_failure",
    "streams",
]

# 0.9.1's name: whether a provider streams replies itself (the stall deadlines apply).
streams = streams_natively

# 0.9.1's name: the reply budget a model call asks for when nothing else decides it.
DEFAULT_MAX_TOKENS = DEFAULT_OUTPUT_CAP
