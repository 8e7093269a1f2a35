"""0.9.1's module of the extension contract; the names live in ``harnessx.extensions``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._config import AgentConfig
from harnessx._extensions import Extension, ExtensionContext
from harnessx._hooks import HookEvent, HookManager, Registration
from harnessx._memory import ConversationMemory
from harnessx._middleware import Middleware, MiddlewarePipeline
from harnessx._permissions import PermissionLevel
from harnessx._policies import ToolRetry
from harnessx._results import ToolResult
from harnessx._tools import ReplayPolicy, ToolRegistry

__all__ = [
    "AgentConfig",
    "ConversationMemory",
    "Extension",
    "ExtensionContext",
    "HookEvent",
    "HookManager",
    "Middleware",
    "MiddlewarePipeline",
    "PermissionLevel",
    "Registration",
    "ReplayPolicy",
    "ToolRegistry",
    "ToolResult",
    "ToolRetry",
]
