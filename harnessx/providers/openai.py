"""The original harnessx's ``harnessx.providers.openai``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too
(``ToolChoice``, ``normalize_tool_choice``, the response types, ``parse_tool_arguments``). Not
its imports from the standard library or the ``openai`` package (``AsyncOpenAI``): this one
works without that package installed.
"""

from __future__ import annotations

from harnessx._errors import IncompleteStreamError
from harnessx._policies import PromptCacheHint
from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
)
from harnessx.providers._http import marked_tool_arguments as parse_tool_arguments
from harnessx.providers._openai import OpenAIProvider
from harnessx.providers._tool_choice import ToolChoice, normalize_tool_choice

__all__ = [
    "IncompleteStreamError",
    "LLMProvider",
    "OpenAIProvider",
    "PromptCacheHint",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "normalize_tool_choice",
    "parse_tool_arguments",
]
