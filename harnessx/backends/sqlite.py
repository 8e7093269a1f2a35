"""The original harnessx's ``harnessx.backends.sqlite``.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx.store._sqlite import SQLiteBackend

__all__ = [
    "LeaseLostError",
    "SQLiteBackend",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
]
