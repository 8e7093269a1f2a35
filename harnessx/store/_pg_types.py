"""What the PostgreSQL store uses of asyncpg's connections and pools, as types.

asyncpg ships no type information, so its objects reach us as ``Any``; these protocols say
which of their methods the store calls, so that every function handed a connection is typed
by them. This module imports nothing of asyncpg: ``_original`` types against it too, and
harnessx must import without asyncpg installed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

__all__ = ["Connection", "Pool"]


class Connection(Protocol):
    """An asyncpg connection (or the pool's proxy of one)."""

    async def execute(self, query: str, *args: Any) -> str: ...

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...

    async def prepare(self, query: str) -> Any: ...

    def transaction(
        self, *, isolation: str | None = None, readonly: bool = False, deferrable: bool = False
    ) -> AbstractAsyncContextManager[Any]: ...

    def is_closed(self) -> bool: ...

    def add_termination_listener(self, callback: Callable[[Any], None]) -> None: ...

    async def add_listener(self, channel: str, callback: Callable[[Any, int, str, str], None]) -> None: ...

    async def close(self) -> None: ...

    def terminate(self) -> None: ...


class Pool(Protocol):
    """An asyncpg pool."""

    def acquire(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[Connection]: ...

    async def close(self) -> None: ...

    def terminate(self) -> None: ...
