"""The original harnessx's ``harnessx.providers.fallback``: ``FallbackProvider``, ``Fallback``,
and ``make_provider``, through which a chain builds the members it is given by name (so
that replacing it here changes what chains build, as in 0.9.1)."""

from __future__ import annotations

from harnessx._policies import Fallback
from harnessx.providers._fallback import FallbackProvider
from harnessx.providers._registry import make_provider

__all__ = ["Fallback", "FallbackProvider", "make_provider"]
