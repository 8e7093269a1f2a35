"""The original harnessx's ``harnessx.core``: ``Agent``, and ``make_provider``, which an
``Agent`` given no provider calls (through this module, so that replacing it here changes
what agents build, as in 0.9.1)."""

from __future__ import annotations

from harnessx._agent import Agent
from harnessx.providers._registry import make_provider

__all__ = ["Agent", "make_provider"]
