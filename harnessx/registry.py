"""The original harnessx's ``harnessx.registry``: agents by reference."""

from __future__ import annotations

from harnessx._registry import AgentRef, AgentRegistry, agents

__all__ = ["AgentRef", "AgentRegistry", "agents"]
