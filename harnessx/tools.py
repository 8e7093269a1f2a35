"""The original harnessx's ``harnessx.tools``: the tool registry.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import HarnessError, TransientToolError
from harnessx._permissions import PermissionLevel, PermissionManager
from harnessx._policies import DEFAULT_TOOL_TIMEOUT_SECONDS, ToolPolicy, ToolRetry
from harnessx._results import ToolResult
from harnessx._retry import is_transient, is_transient_text
from harnessx._tools import (
    ReplayPolicy,
    ToolDefinition,
    ToolNotFoundError,
    ToolRegistry,
    normalize_tool_registry,
    retry_wanted,
)
from harnessx.providers._base import ToolCall

__all__ = [
    "retry_wanted",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "HarnessError",
    "PermissionLevel",
    "PermissionManager",
    "ReplayPolicy",
    "ToolCall",
    "ToolDefinition",
    "ToolNotFoundError",
    "ToolPolicy",
    "ToolRegistry",
    "ToolResult",
    "ToolRetry",
    "TransientToolError",
    "is_transient",
    "is_transient_text",
    "normalize_tool_registry",
]
