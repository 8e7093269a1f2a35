"""How the PostgreSQL store talks to the server (a part of ``PostgresBackend``): its
connections, running an operation on a pooled one with retries, and the one place where
driver errors become harnessx errors, in words that never show the DSN's password.

Every operation is safe to repeat, so transient errors (a dropped connection, a server
restart, a serialization failure) are retried with tenacity's exponential back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from harnessx._errors import (
    ConfigurationError,
    HarnessError,
    SchemaError,
    StorageError,
)
from harnessx.store._core import (
    Row,
    StoreCore,
    lease_lost,
    request_taken,
    unfinished_run,
)
from harnessx.store._pg_driver import (
    BROKEN_CONNECTION,
    CONFLICTS,
    DRIVER_ERRORS,
    SCHEMA_MISSING,
    TRANSIENT,
    asyncpg,
    create_pool,
    on_pooled,
)
from harnessx.store._pg_dsn import ENCODING_ADVICE, Dsn
from harnessx.store._pg_types import Connection, Pool
from harnessx.store._queries import load_queries
from harnessx.store._records import (
    Lease,
)

__all__ = ["DEFAULT_SCHEMA", "PostgresExecution", "missing_partition_advice", "quote_ident", "runtime_grants"]

logger = logging.getLogger("harnessx.store.postgres")

T = TypeVar("T")
Q = load_queries("postgres")

DEFAULT_SCHEMA = "harness_x"
# After a server restart every pooled connection may be dead; each failed attempt retires
# one, so allow a few more attempts than that takes (about 4 s of back-off in all).
_RETRY_ATTEMPTS = 8


def runtime_grants(schema: str, role: str) -> str:
    """The statements that let ``role`` run sessions in a schema someone else migrated."""
    s, r = quote_ident(schema), quote_ident(role)
    return (
        f"GRANT USAGE ON SCHEMA {s} TO {r}; "
        f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {s} TO {r}; "
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}; "
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r};"
    )


def missing_partition_advice(schema: str) -> str:
    """What to do when an event's day has no partition (the advice works as the schema's owner
    or as any role that may run sessions: the function runs as its owner)."""
    return (
        "no partition of events covers this run's day: harness-supervisor's leader makes them "
        "7 days ahead (is one running?); to make them now run: SELECT "
        f"{quote_ident(schema)}.harnessx_add_event_partitions(now() + interval '7 days')"
    )


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT)


def _is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, CONFLICTS)


def _retrying(
    *,
    within: float | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
    retry_on: Callable[[BaseException], bool] = _is_transient,
) -> AsyncRetrying:
    stop = stop_after_attempt(_RETRY_ATTEMPTS)
    return AsyncRetrying(
        retry=retry_if_exception(retry_on),
        stop=stop if within is None else stop | stop_after_delay(within),
        # 50 ms, 100 ms, 200 ms... plus jitter so processes that failed together spread out.
        wait=wait_exponential(multiplier=0.05, max=1.0) + wait_random(0, 0.05),
        reraise=True,
        before_sleep=before_sleep,
    )


def _attempts(retrying: AsyncRetrying) -> str:
    count = retrying.statistics.get("attempt_number", 1)
    elapsed = retrying.statistics.get("delay_since_first_attempt", 0.0)
    return f"{count} attempt{'s' if count != 1 else ''} in {elapsed:.1f} s"


class PostgresExecution(StoreCore):
    """The base of ``PostgresBackend``'s parts: its connections and operations."""

    # Set by PostgresBackend.__init__.
    _dsn: Dsn
    _raw_dsn: str
    schema: str
    connect_timeout: float
    pool_size: int
    _pool: Pool | None
    _closed: bool

    @property
    def _where(self) -> str:
        return f"PostgreSQL {self._dsn.redacted} (schema {self.schema!r})"

    @property
    def _migrate_command(self) -> str:
        """How to migrate this database, in words: the DSN goes in the environment, where
        the process list does not show its password."""
        command = "harnessx migrate"
        if self.schema != DEFAULT_SCHEMA:
            command += f" --schema {shlex.quote(self.schema)}"
        return f"'{command}' with HARNESSX_DSN set to {self._dsn.redacted}"

    def _connect_options(self, purpose: str, timeout: float) -> dict[str, Any]:
        return {
            "dsn": self._raw_dsn,
            "timeout": timeout,
            "server_settings": {
                # Every connection sees only our schema, so no query needs to name it.
                "search_path": quote_ident(self.schema),
                # Tells an operator's pg_stat_activity what each connection is for.
                "application_name": f"harnessx-{purpose}",
                # Every statement here is short and reads through an index, but on a large
                # table a generic plan's cost estimate can pass jit_above_cost, and compiling
                # it takes longer than any run of it (1.36 s for recent_sessions at 1M runs).
                "jit": "off",
            },
        }

    async def _create_pool(self, within: float) -> Pool:
        # Every pooled connection, opened now or later, gets the whole connect_timeout
        # (asyncpg keeps one set of options per pool), so ``within`` is not used here.
        with self._parsing_dsn():
            return await create_pool(self.pool_size, self._connect_options("pool", self.connect_timeout))

    async def _connect(self, purpose: str, within: float) -> Connection:
        with self._parsing_dsn():
            conn: Connection = await asyncpg.connect(**self._connect_options(purpose, within))
            return conn

    @contextlib.contextmanager
    def _parsing_dsn(self) -> Iterator[None]:
        """asyncpg parses the DSN as it connects and raises a bare ValueError for what it
        cannot read, whose text may quote part of the password: say it in our words."""
        try:
            yield
        except asyncpg.InterfaceError:
            raise  # its own configuration errors name an option, not a secret: translated later
        except ValueError as exc:
            # The driver's reason only when the DSN holds no secret it could be quoting.
            reason = f" ({exc})" if len(self._dsn.secrets) == 1 else ""
            raise ConfigurationError(
                f"the PostgreSQL driver could not parse the DSN {self._dsn.redacted}{reason}: check its "
                f"form (postgresql://user:password@host:5432/database) and {ENCODING_ADVICE}"
            ) from None

    async def _with_retries(self, what: str, make: Callable[[float], Awaitable[T]]) -> T:
        """Connect with ``make(timeout)``, trying again after refusals and drops, for at most
        connect_timeout in all: a server that accepts but never answers costs one timeout,
        not one per attempt."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        retrying = _retrying(within=self.connect_timeout, before_sleep=self._log_retry(what))
        with self._translated(what, retrying=retrying):
            async for attempt in retrying:
                with attempt:
                    return await make(max(deadline - loop.time(), 0.1))
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _log_retry(self, what: str) -> Callable[[RetryCallState], None]:
        def log(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome is not None else None
            logger.info(
                "%s: PostgreSQL at %s failed (%s); trying again, for up to %g s in all",
                what,
                self._dsn.redacted,
                self._describe(failure) if failure is not None else "?",
                self.connect_timeout,
            )

        return log

    async def _until_no_conflict(self, what: str, transaction: Callable[[], Awaitable[T]]) -> T:
        """Run ``transaction`` (on a connection the caller holds) again each time the server
        fails it to end a conflict with another transaction (a deadlock, a serialization
        failure), after a wait that grows. Other errors are raised as they are."""
        retrying = _retrying(before_sleep=self._log_conflict(what), retry_on=_is_conflict)
        try:
            async for attempt in retrying:
                with attempt:
                    return await transaction()
        except CONFLICTS as exc:
            # Translated here, so that no caller's own retrying (``_run``'s) starts over.
            error = self._translate(exc, what, None, None, retrying)
            raise error from (None if self._dsn.leaks(exc) else exc)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def _log_conflict(self, what: str) -> Callable[[RetryCallState], None]:
        def log(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome is not None else None
            logger.warning(
                "%s on %s: the server failed the transaction to end a conflict with another one "
                "(%s); trying again (attempt %d of %d)",
                what,
                self._where,
                self._describe(failure) if failure is not None else "?",
                state.attempt_number + 1,
                _RETRY_ATTEMPTS,
            )

        return log

    def _describe(self, exc: BaseException) -> str:
        """A driver error as text that is safe to show, never empty (TimeoutError has none)."""
        if isinstance(exc, TimeoutError) and not str(exc):
            return f"TimeoutError: no answer within {self.connect_timeout:g} s"
        return self._dsn.scrub(f"{type(exc).__name__}: {exc}")

    async def _run(
        self,
        what: str,
        op: Callable[[Connection], Awaitable[T]],
        *,
        lease: Lease | None = None,
        request_id: str | None = None,
    ) -> T:
        """Run ``op`` on a pooled connection, retrying transient errors (every ``op`` here
        is safe to repeat) and translating what finally fails."""
        if self._pool is None:
            raise StorageError(
                "the PostgresBackend is not open: use 'async with' or await initialize()"
                if not self._closed
                else "the PostgresBackend is closed"
            )
        pool = self._pool
        return await self._tried(what, lambda: on_pooled(pool, op), lease=lease, request_id=request_id)

    async def _run_on_own(
        self,
        what: str,
        op: Callable[[Connection], Awaitable[T]],
        held: list[Connection | None],
        *,
        lease: Lease | None = None,
    ) -> T:
        """Run ``op`` as ``_run`` does, but on a connection of its own (``held[0]``, opened
        when missing, replaced when it breaks): for statements one task sends one after
        another, which are then prepared and planned on one connection rather than on every
        pooled one in turn, without a pool's hand-over around each. The caller makes sure
        that one ``op`` at a time uses it."""
        if self._pool is None:
            raise StorageError(
                "the PostgresBackend is closed" if self._closed else "the PostgresBackend is not open"
            )
        return await self._tried(what, lambda: self._on_own(op, held), lease=lease)

    async def _tried(
        self,
        what: str,
        once: Callable[[], Awaitable[T]],
        *,
        lease: Lease | None = None,
        request_id: str | None = None,
    ) -> T:
        """``once()``, again after transient errors, and what finally fails translated."""
        # The first attempt runs without the retry machinery, as nearly all succeed; if it
        # fails, that failure is the retry loop's first attempt, so the back-off and the
        # number of attempts are as if the loop had made it.
        first_failure: BaseException | None
        with self._translated(what, lease=lease, request_id=request_id):
            try:
                return await once()
            except TRANSIENT as exc:
                first_failure = exc
        retrying = _retrying()
        with self._translated(what, lease=lease, request_id=request_id, retrying=retrying):
            async for attempt in retrying:
                with attempt:
                    if first_failure is not None:
                        failure, first_failure = first_failure, None
                        raise failure
                    return await once()
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _on_own(self, op: Callable[[Connection], Awaitable[T]], held: list[Connection | None]) -> T:
        conn = held[0]
        if conn is None or conn.is_closed():
            conn = held[0] = await self._connect("checkpoints", self.connect_timeout)
        try:
            # Cancelled in the middle of a statement, the driver asks the server to cancel
            # it, and the connection's next statement waits until it has.
            return await op(conn)
        except BROKEN_CONNECTION:
            held[0] = None
            conn.terminate()
            raise

    # The core's primitives (``_core``): one named statement on a pooled connection.

    async def _one(self, what: str, query: str, *args: Any) -> Row | None:
        row = await self._run(what, lambda conn: conn.fetchrow(Q[query], *args))
        return None if row is None else tuple(row)

    async def _all(self, what: str, query: str, *args: Any) -> list[Row]:
        return [tuple(row) for row in await self._run(what, lambda conn: conn.fetch(Q[query], *args))]

    async def _change(self, what: str, query: str, *args: Any) -> None:
        await self._run(what, lambda conn: conn.execute(Q[query], *args))

    @contextlib.contextmanager
    def _translated(
        self,
        what: str,
        *,
        lease: Lease | None = None,
        request_id: str | None = None,
        retrying: AsyncRetrying | None = None,
    ) -> Iterator[None]:
        """The one place where driver errors become harnessx errors."""
        try:
            yield
        except HarnessError:
            raise
        except DRIVER_ERRORS as exc:
            error = self._translate(exc, what, lease, request_id, retrying)
            # Chain the original unless its text would show the password.
            raise error from (None if self._dsn.leaks(exc) else exc)

    def _translate(
        self,
        exc: BaseException,
        what: str,
        lease: Lease | None,
        request_id: str | None,
        retrying: AsyncRetrying | None = None,
    ) -> HarnessError:
        detail = self._describe(exc)
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate == "HX001" and lease is not None:
            return lease_lost(lease)
        if isinstance(exc, asyncpg.exceptions.UniqueViolationError):
            return self._conflict(exc, what, detail, lease, request_id)
        if isinstance(exc, SCHEMA_MISSING):
            return SchemaError(
                f"{self._where} is missing part of the harnessx schema while {what} ({detail}): run "
                f"{self._migrate_command}, which adds what is missing, or names the privilege to grant "
                "or the repair when migrating cannot add it"
            )
        if isinstance(exc, asyncpg.exceptions.InsufficientPrivilegeError):
            return StorageError(self._privilege_advice(what, detail))
        if sqlstate == "23514" and "no partition of relation" in str(exc):
            advice = missing_partition_advice(self.schema)
            return StorageError(f"{what} on {self._where}: {advice} ({detail})")
        if isinstance(exc, asyncpg.exceptions.InvalidAuthorizationSpecificationError):
            return StorageError(
                f"PostgreSQL refused the login for {self._dsn.redacted} ({detail}): check the user name "
                "and password (the password is not shown) and pg_hba.conf"
            )
        if isinstance(exc, asyncpg.exceptions.InvalidCatalogNameError):
            return StorageError(
                f"the database in {self._dsn.redacted} does not exist ({detail}): create it or fix the DSN"
            )
        tried = ""
        if retrying is not None and _is_transient(exc):  # only where a retry loop ran
            tried = f"; gave up after {_attempts(retrying)}"
        if isinstance(exc, (*BROKEN_CONNECTION, OSError)):
            return StorageError(
                f"cannot reach PostgreSQL at {self._dsn.redacted} while {what} ({detail}{tried}): check "
                "host/port, credentials, that the database exists and that the server accepts connections"
            )
        if tried:  # serialization failures or deadlocks, again and again
            return StorageError(
                f"{what} on {self._where} kept conflicting with other transactions ({detail}{tried})"
            )
        if isinstance(exc, CONFLICTS):
            return StorageError(
                f"{what} on {self._where} conflicted with another transaction, and the server undid "
                f"this one to resolve it ({detail}): nothing of it was kept; try again"
            )
        return StorageError(f"PostgreSQL error while {what} on {self._where}: {detail}")

    def _conflict(
        self, exc: Any, what: str, detail: str, lease: Lease | None, request_id: str | None
    ) -> HarnessError:
        session = lease.session_id if lease is not None else "?"
        if exc.constraint_name == "runs_request_unique":
            return request_taken(session, request_id)
        if exc.constraint_name == "runs_one_unfinished":
            return unfinished_run(session)
        return StorageError(f"{what} on {self._where} conflicts with a stored row ({detail})")

    def _privilege_advice(self, what: str, detail: str) -> str:
        role = self._dsn.user or "<role>"
        return (
            f"the PostgreSQL role lacks a privilege while {what} on {self._where} ({detail}): as the "
            f"schema's owner, run: {runtime_grants(self.schema, role)}"
        )
