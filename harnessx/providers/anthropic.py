"""The original harnessx's ``harnessx.providers.anthropic``."""

from __future__ import annotations

from harnessx.providers._anthropic import AnthropicProvider

__all__ = ["AnthropicProvider"]
