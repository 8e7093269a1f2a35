"""Durable stores: the protocol the runtime writes through, and its implementations.

``PostgresBackend`` is imported on first use, so harnessx works without asyncpg installed
until a PostgreSQL store is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harnessx.store._protocol import Lease, Renewal, RunRecord, SessionRecord, SessionSummary, Store
from harnessx.store._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from harnessx.store._postgres import PostgresBackend

__all__ = [
    "Lease",
    "PostgresBackend",
    "Renewal",
    "RunRecord",
    "SQLiteBackend",
    "SessionRecord",
    "SessionSummary",
    "Store",
]


def __getattr__(name: str) -> object:
    if name == "PostgresBackend":
        # Raises ConfigurationError saying how to install asyncpg when it is missing.
        from harnessx.store._postgres import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
