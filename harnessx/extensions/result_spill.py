"""0.9.1's module of ``ResultSpillExtension``; the name lives in ``harnessx.extensions``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._extensions import Extension
from harnessx._middleware import Middleware
from harnessx._permissions import PermissionLevel
from harnessx._result_spill import ResultSpillExtension
from harnessx._results import ToolResult

__all__ = [
    "Extension",
    "Middleware",
    "PermissionLevel",
    "ResultSpillExtension",
    "ToolResult",
]
