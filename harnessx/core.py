"""The original harnessx's ``harnessx.core``: ``Agent``."""

from __future__ import annotations

from harnessx._agent import Agent

__all__ = ["Agent"]
