"""The original harnessx's ``harnessx.backends.store``: the storage errors."""

from __future__ import annotations

from harnessx._errors import LeaseLostError, SchemaError, SessionBusyError, StorageError

__all__ = ["LeaseLostError", "SchemaError", "SessionBusyError", "StorageError"]
