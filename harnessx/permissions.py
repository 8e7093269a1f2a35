"""The original harnessx's ``harnessx.permissions``: permission managers and limit errors."""

from __future__ import annotations

from harnessx._errors import CostLimitError, MaxIterationsError
from harnessx._permissions import CliPermissionManager, PermissionLevel, PermissionManager

__all__ = [
    "CliPermissionManager",
    "CostLimitError",
    "MaxIterationsError",
    "PermissionLevel",
    "PermissionManager",
]
