"""The original harnessx's ``harnessx.backends.postgres`` (needs ``harnessx[postgres]``).

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._errors import LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx.store._postgres import PostgresBackend

__all__ = [
    "LeaseLostError",
    "PostgresBackend",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
]
