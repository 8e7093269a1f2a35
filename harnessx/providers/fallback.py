"""The original harnessx's ``harnessx.providers.fallback``: ``FallbackProvider``, ``Fallback``,
and ``make_provider``, through which a chain builds the members it is given by name (so
that replacing it here changes what chains build, as in 0.9.1).

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._model_limits import lookup_model_limits, resolve_model_limits
from harnessx._policies import Fallback, PromptCacheHint
from harnessx._retry import is_transient
from harnessx._retry import retry_after as retry_after_seconds
from harnessx.providers._base import LLMProvider, ProviderResponse, StreamChunk, native_continuation
from harnessx.providers._fallback import FallbackProvider
from harnessx.providers._registry import make_provider

__all__ = [
    "retry_after_seconds",
    "MemberSpec",
    "Fallback",
    "FallbackProvider",
    "LLMProvider",
    "PromptCacheHint",
    "ProviderResponse",
    "StreamChunk",
    "is_transient",
    "lookup_model_limits",
    "make_provider",
    "native_continuation",
    "resolve_model_limits",
]

# What a chain's member may be given as: a Fallback, a provider, or a provider's name.
MemberSpec = Fallback | LLMProvider | str
