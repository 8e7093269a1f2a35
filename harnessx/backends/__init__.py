"""The original harnessx's ``harnessx.backends``: the durable stores and their errors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx._errors import LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx.store._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store._postgres import PostgresBackend

__all__ = [
    "LeaseLostError",
    "PostgresBackend",
    "SQLiteBackend",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
]


def __getattr__(name: str) -> object:
    if name == "PostgresBackend":  # needs asyncpg, an optional extra
        from harnessx.store._postgres import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
