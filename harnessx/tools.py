"""The original harnessx's ``harnessx.tools``: the tool registry."""

from __future__ import annotations

from harnessx._tools import ToolDefinition, ToolNotFoundError, ToolRegistry, normalize_tool_registry

__all__ = ["ToolDefinition", "ToolNotFoundError", "ToolRegistry", "normalize_tool_registry"]
