"""The original harnessx's ``harnessx.permissions``: permission managers, the guardrails and limit errors.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import CostLimitError, HarnessError, MaxIterationsError
from harnessx._guardrails import GuardrailsEngine
from harnessx._permissions import CliPermissionManager, PermissionLevel, PermissionManager
from harnessx._tools import ToolDefinition
from harnessx.providers._base import TokenUsage, ToolCall

__all__ = [
    "CliPermissionManager",
    "CostLimitError",
    "GuardrailsEngine",
    "HarnessError",
    "MaxIterationsError",
    "PermissionLevel",
    "PermissionManager",
    "TokenUsage",
    "ToolCall",
    "ToolDefinition",
]
