"""Model providers: the contract every provider implements, and the built-in HTTP ones."""

from __future__ import annotations

from harnessx.providers._anthropic import AnthropicProvider
from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)
from harnessx.providers._openai import OpenAIProvider

__all__ = [
    "AnthropicProvider",
    "LLMProvider",
    "OpenAIProvider",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
]
