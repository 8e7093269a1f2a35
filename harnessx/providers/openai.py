"""The original harnessx's ``harnessx.providers.openai``."""

from __future__ import annotations

from harnessx.providers._openai import OpenAIProvider

__all__ = ["OpenAIProvider"]
