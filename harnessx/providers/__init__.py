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

# 0.9.1's package imported its public modules, so ``import harnessx.providers`` alone made
# ``harnessx.providers.openai`` (and the others) attributes a program can reach; so here.
from harnessx.providers import anthropic, base, fallback, openai, registry, retry  # noqa: F401
