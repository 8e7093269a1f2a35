"""The original harnessx's ``harnessx.backends.store``: the storage errors.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import HarnessError, LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx._events import RunEvent

__all__ = [
    "HarnessError",
    "LeaseLostError",
    "RunEvent",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
]
