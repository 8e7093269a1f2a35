"""The original harnessx's ``harnessx.runtime``: ``AgentRuntime`` and ``RunHandle``."""

from __future__ import annotations

from harnessx._handle import RunHandle
from harnessx._runtime import AgentRuntime

__all__ = ["AgentRuntime", "RunHandle"]
