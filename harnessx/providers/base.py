"""The original harnessx's ``harnessx.providers.base``: the provider contract."""

from __future__ import annotations

from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)
from harnessx.providers._registry import make_provider

__all__ = [
    "LLMProvider",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "make_provider",
]
