"""asyncpg as the PostgreSQL store uses it: which errors mean what, and connections that
are opened, pooled, retired and closed without surprises."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from harnessx._errors import ConfigurationError

try:
    import asyncpg  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigurationError(
        "PostgresBackend needs the asyncpg driver: pip install 'asyncpg>=0.29' in this environment "
        "(from a checkout of this project: pip install -e '.[postgres]')"
    ) from exc

from harnessx.store._pg_types import Connection, Pool

__all__ = [
    "BROKEN_CONNECTION",
    "CONFLICTS",
    "CONNECT_TIMEOUT",
    "DRIVER_ERRORS",
    "SCHEMA_MISSING",
    "TRANSIENT",
    "asyncpg",
    "close_quietly",
    "create_pool",
    "on_pooled",
]

logger = logging.getLogger("harnessx.store.postgres")

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0  # seconds; PostgresBackend(connect_timeout=...), --connect-timeout

_exc = asyncpg.exceptions
# The connection itself is gone or unusable: retire it, and try again on another.
BROKEN_CONNECTION = (
    _exc.PostgresConnectionError,  # includes ConnectionDoesNotExistError
    _exc.CannotConnectNowError,
    _exc.AdminShutdownError,
    _exc.CrashShutdownError,
    _exc.TooManyConnectionsError,
    # A connection the server dropped while it sat idle in the pool can fail this way
    # before asyncpg notices that it is closed.
    _exc.InternalClientError,
    ConnectionError,  # reset, refused, aborted
    TimeoutError,
)
# The server rolled the transaction back on its own to end a conflict with another one.
CONFLICTS = (_exc.SerializationError, _exc.DeadlockDetectedError)
# Errors after which the operation may simply be tried again: either of the above.
TRANSIENT = (*BROKEN_CONNECTION, *CONFLICTS)
DRIVER_ERRORS = (_exc.PostgresError, asyncpg.InterfaceError, _exc.InternalClientError, OSError, TimeoutError)
SCHEMA_MISSING = (
    _exc.UndefinedTableError,
    _exc.UndefinedFunctionError,
    _exc.UndefinedColumnError,
    _exc.InvalidSchemaNameError,
)


async def create_pool(size: int, options: dict[str, Any]) -> Pool:
    pool: Pool = await asyncpg.create_pool(
        min_size=1, max_size=size, reset=_keep_session, init=_learn_types, **options
    )
    return pool


# Every array type the store's statements send or read, and an array of rows (load_run's).
_ARRAY_TYPES = (
    "SELECT NULL::bigint[], NULL::integer[], NULL::boolean[], NULL::json[], NULL::jsonb[], "
    "NULL::float8[], ARRAY[ROW(1)]"
)


async def _learn_types(conn: Connection) -> None:
    """A new pooled connection learns the array types at once. asyncpg knows no array type
    but text[] and oid[] by itself: it asks the server about the others the first time a
    statement on a connection uses one, with a query that costs the server more to plan
    than most of ours cost to run, and it asked once per type per connection (25 times in a
    300-run pool benchmark). One statement that names them all asks once."""
    await conn.prepare(_ARRAY_TYPES)


async def _keep_session(conn: Connection) -> None:
    """The pool's reset on release: nothing. asyncpg's default sends 'pg_advisory_unlock_all;
    CLOSE ALL; UNLISTEN *; RESET ALL', one more round trip on every operation (it made a
    checkpoint 0.13 ms slower, a quarter of its cost), to undo session state that pooled
    connections never keep here: locks are transaction-scoped, settings are fixed at connect,
    and LISTEN and the liveness lock have connections of their own. asyncpg still rolls back
    an open transaction before this is called."""


async def on_pooled(pool: Pool, op: Callable[[Connection], Awaitable[T]]) -> T:
    """``op`` on a connection from ``pool``; a connection that broke under it is retired."""
    async with pool.acquire() as conn:
        try:
            return await op(conn)
        except BROKEN_CONNECTION:
            _retire(conn)
            raise
        except asyncpg.InterfaceError as exc:
            # A connection that died inside a transaction block fails again as the block
            # is left ("the underlying connection is closed"), and that error hides the
            # broken-connection one: say what happened, so that the caller tries again.
            if not _is_closed(conn):
                raise
            raise _exc.ConnectionDoesNotExistError(
                f"the connection closed under the operation ({exc})"
            ) from exc


def _is_closed(conn: Connection) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # the pool has already detached it from its connection
        return True


def _retire(conn: Connection) -> None:
    """Make the pool replace a broken connection rather than hand it out again."""
    with contextlib.suppress(asyncpg.InterfaceError):  # asyncpg already detached it
        conn.terminate()


async def close_quietly(resource: Connection | Pool | None) -> None:
    """Close a connection or pool; if that fails (it is already broken), just drop it."""
    if resource is None:
        return
    try:
        await asyncio.wait_for(resource.close(), CONNECT_TIMEOUT)
    except Exception as exc:
        logger.debug("closing %r failed (%s); terminating it", type(resource).__name__, type(exc).__name__)
        resource.terminate()
    except asyncio.CancelledError:
        resource.terminate()
        raise
