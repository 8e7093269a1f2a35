"""The original harnessx's ``harnessx.core``: ``Agent``, and ``make_provider``, which an
``Agent`` given no provider calls (through this module, so that replacing it here changes
what agents build, as in 0.9.1).

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._agent import Agent
from harnessx._config import AgentConfig
from harnessx._errors import ConfigurationError, RuntimeStateError
from harnessx._extensions import Extension
from harnessx._guardrails import GuardrailsEngine
from harnessx._hooks import HookManager
from harnessx._memory import ConversationMemory
from harnessx._middleware import MiddlewarePipeline
from harnessx._permissions import PermissionLevel, PermissionManager
from harnessx._results import RunResult
from harnessx._sessions import PersistentMemory, SessionState
from harnessx._stream import RunStream
from harnessx._tools import ToolRegistry, normalize_tool_registry
from harnessx.providers._base import LLMProvider
from harnessx.providers._registry import BUILTIN_PROVIDERS, make_provider

__all__ = [
    "BUILTIN_PROVIDERS",
    "Agent",
    "AgentConfig",
    "ConfigurationError",
    "ConversationMemory",
    "Extension",
    "GuardrailsEngine",
    "HookManager",
    "LLMProvider",
    "MiddlewarePipeline",
    "PermissionLevel",
    "PermissionManager",
    "PersistentMemory",
    "RunResult",
    "RunStream",
    "RuntimeStateError",
    "SessionState",
    "ToolRegistry",
    "make_provider",
    "normalize_tool_registry",
]
