"""The original harnessx's ``harnessx.providers.fallback``."""

from __future__ import annotations

from harnessx._policies import Fallback
from harnessx.providers._fallback import FallbackProvider

__all__ = ["Fallback", "FallbackProvider"]
