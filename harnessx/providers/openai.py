"""The original harnessx's ``harnessx.providers.openai``.

``ToolChoice`` and ``normalize_tool_choice`` are here too, as 0.9.1's module imported them.
"""

from __future__ import annotations

from harnessx.providers._openai import OpenAIProvider
from harnessx.providers._tool_choice import ToolChoice, normalize_tool_choice

__all__ = ["OpenAIProvider", "ToolChoice", "normalize_tool_choice"]
