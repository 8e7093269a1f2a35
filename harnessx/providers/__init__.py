"""Model providers: the contract every provider implements, the built-in HTTP ones, the
provider names ``AgentConfig(provider=...)`` accepts, and failover across providers."""

from __future__ import annotations

from harnessx._policies import Fallback
from harnessx.providers._anthropic import AnthropicProvider
from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)
from harnessx.providers._fallback import FallbackProvider
from harnessx.providers._openai import OpenAIProvider
from harnessx.providers._registry import (
    BUILTIN_PROVIDERS,
    make_provider,
    register_provider,
    registered_providers,
    unregister_provider,
)

__all__ = [
    "AnthropicProvider",
    "BUILTIN_PROVIDERS",
    "Fallback",
    "FallbackProvider",
    "LLMProvider",
    "OpenAIProvider",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "make_provider",
    "register_provider",
    "registered_providers",
    "unregister_provider",
]
