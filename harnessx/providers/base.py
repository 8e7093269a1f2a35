"""The original harnessx's ``harnessx.providers.base``: the provider contract."""

from __future__ import annotations

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
from harnessx.providers._registry import make_provider

__all__ = [
    "INVALID_ARGUMENTS",
    "LLMProvider",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "make_provider",
    "native_continuation",
    "parse_tool_arguments",
    "streams",
]

# 0.9.1's name: whether a provider streams replies itself (the stall deadlines apply).
streams = streams_natively
