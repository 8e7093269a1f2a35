"""The original harnessx's ``harnessx.permissions``: permission managers, the guardrails and limit errors."""

from __future__ import annotations

from harnessx._errors import CostLimitError, MaxIterationsError
from harnessx._guardrails import GuardrailsEngine
from harnessx._permissions import CliPermissionManager, PermissionLevel, PermissionManager

__all__ = [
    "CliPermissionManager",
    "CostLimitError",
    "GuardrailsEngine",
    "MaxIterationsError",
    "PermissionLevel",
    "PermissionManager",
]
