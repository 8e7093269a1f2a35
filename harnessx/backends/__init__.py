"""The original harnessx's ``harnessx.backends``: the durable stores and their errors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx._errors import LeaseLostError, SchemaError, SessionBusyError, StorageError
from harnessx.store._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store._postgres import PostgresBackend
    from harnessx.temporal import RedisEvents, TemporalBackend

__all__ = [
    "LeaseLostError",
    "PostgresBackend",
    "RedisEvents",
    "SQLiteBackend",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
    "TemporalBackend",
]


def __getattr__(name: str) -> object:
    if name == "PostgresBackend":  # needs asyncpg, an optional extra
        from harnessx.store._postgres import PostgresBackend

        return PostgresBackend
    if name in ("TemporalBackend", "RedisEvents"):  # the temporal extra
        from harnessx import temporal

        return getattr(temporal, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
