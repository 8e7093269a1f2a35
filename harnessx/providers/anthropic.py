"""The original harnessx's ``harnessx.providers.anthropic``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import IncompleteStreamError
from harnessx._model_limits import ModelLimits, lookup_model_limits
from harnessx._policies import PromptCacheHint
from harnessx.providers._anthropic import AnthropicProvider
from harnessx.providers._base import (
    INVALID_ARGUMENTS,
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
)
from harnessx.providers._tool_choice import ToolChoice, normalize_tool_choice

__all__ = [
    "INVALID_ARGUMENTS",
    "AnthropicProvider",
    "IncompleteStreamError",
    "LLMProvider",
    "ModelLimits",
    "PromptCacheHint",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "lookup_model_limits",
    "normalize_tool_choice",
]
