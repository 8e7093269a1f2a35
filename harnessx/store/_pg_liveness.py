"""Liveness and leadership on PostgreSQL (a part of ``PostgresBackend``).

Each instance holds a session-level advisory lock keyed to its ``process_id`` on a
connection of its own for as long as it is open; when the process dies, even by SIGKILL,
the server drops the connection and the lock at once, so others can tell a crashed holder
from a live one without waiting for its lease to expire. Leadership is another advisory
lock on that connection, taken in one statement with the role's next epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from harnessx._errors import (
    HarnessError,
    StorageError,
)
from harnessx.store._core import (
    Row,
)
from harnessx.store._pg_driver import (
    DRIVER_ERRORS,
    asyncpg,
    close_quietly,
)
from harnessx.store._pg_schema import PostgresSchema
from harnessx.store._pg_types import Connection
from harnessx.store._queries import load_queries
from harnessx.store._records import (
    Leadership,
)

__all__ = ["PostgresLiveness"]

logger = logging.getLogger("harnessx.store.postgres")

Q = load_queries("postgres")


class PostgresLiveness(PostgresSchema):
    """The liveness connection, its lock, and the leadership locks taken on it."""

    # Set by PostgresBackend.__init__.
    process_id: str
    _liveness: Connection | None
    _liveness_lock: asyncio.Lock
    _background: set[asyncio.Task[None]]
    _leaderships: dict[str, tuple[Connection, Leadership]]

    async def _hold_liveness(self) -> None:
        conn = await self._with_retries("connecting", lambda within: self._connect("liveness", within))
        try:
            with self._translated("taking the liveness lock"):
                await conn.fetchval(Q["hold_liveness"], self.process_id)
        except BaseException:
            await close_quietly(conn)
            raise
        self._liveness = conn
        # While the connection is down, other processes see this one as dead and take its
        # sessions; re-take the lock as soon as the server is back, not at the next renewal.
        conn.add_termination_listener(self._liveness_lost)

    def _liveness_lost(self, _: Any) -> None:
        # Others may judge this process dead and take its leases at once, before they expire.
        self._liveness_losses += 1
        self._deadlines.clear()
        if self._pool is not None and not self._closed:
            task = asyncio.get_running_loop().create_task(self._retake_liveness())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _liveness_missing(self) -> None:
        """A statement found this process's liveness lock gone while its connection looks
        open (a server restart the driver has not noticed yet, say): drop that connection,
        whose termination listener (``_liveness_lost``) takes the lock again. A connection
        already closed is being replaced (its listener ran), and the next claim's
        ``_keep_liveness`` waits for that."""
        logger.warning(
            "process %s does not hold its liveness lock on %s (others see it as dead): taking it again",
            self.process_id,
            self._where,
        )
        conn = self._liveness
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def _retake_liveness(self) -> None:
        # The server may still be restarting: keep trying until the backend closes.
        delay = 0.05
        while self._pool is not None and not self._closed:
            async with self._liveness_lock:
                try:
                    await self._live_connection()
                    return
                except StorageError as exc:
                    logger.warning("re-taking the liveness lock of process %s: %s", self.process_id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _live_connection(self) -> Connection:
        """The liveness connection, re-made (and the lock re-taken) if it dropped, e.g. in a
        server restart. Meanwhile other processes saw this one as dead; fencing keeps that
        safe. Callers hold ``_liveness_lock``: a connection runs one query at a time."""
        if self._pool is None:
            raise StorageError("the PostgresBackend is not open")
        if self._liveness is None or self._liveness.is_closed():
            stale, self._liveness = self._liveness, None
            await close_quietly(stale)
            await self._hold_liveness()
        assert self._liveness is not None  # _hold_liveness sets it or raises
        return self._liveness

    async def _keep_liveness(self) -> None:
        async with self._liveness_lock:
            try:
                await self._live_connection()
            except StorageError as exc:
                logger.warning("could not re-take the liveness lock of process %s: %s", self.process_id, exc)

    async def try_leadership(self, role: str) -> Leadership | None:
        """Hold ``role`` by an advisory lock on the liveness connection (it dies with the
        process, or with the connection) and take its next epoch in the same statement."""
        async with self._liveness_lock:
            conn = await self._live_connection()
            held = self._leaderships.get(role)
            if held is not None and held[0] is conn:
                return held[1]  # held, and on the connection that still holds it
            self._leaderships.pop(role, None)  # its lock went with an older connection
            with self._translated("taking leadership"):
                try:
                    row = await conn.fetchrow(Q["take_leadership"], role, self.process_id)
                except asyncpg.PostgresError:
                    # A session lock outlives the failed statement that took it: give it back.
                    with contextlib.suppress(*DRIVER_ERRORS):
                        await conn.fetchval(Q["release_leadership"], role)
                    raise
            if row is None:
                return None
            term = Leadership(role, self.process_id, int(row[0]), float(row[1]))
            self._leaderships[role] = (conn, term)
            return term

    async def holds_leadership(self, term: Leadership) -> bool:
        if not await self._lock_held(term):
            return False
        row = await self._run(
            "checking leadership", lambda conn: conn.fetchrow(Q["leadership_term"], term.role)
        )
        return await self._is_latest(term, row)

    async def _lock_held(self, term: Leadership) -> bool:
        """Whether this process still holds ``term``'s lock, as far as it can tell without
        asking the server."""
        async with self._liveness_lock:
            held = self._leaderships.get(term.role)
            if held is None or held[1] != term:
                return False
            if held[0].is_closed() or held[0] is not self._liveness:
                # The lock went with its connection (a server restart, say): someone else
                # may lead now.
                del self._leaderships[term.role]
                return False
        return True

    async def _is_latest(self, term: Leadership, latest: Row | None) -> bool:
        """Whether the role's stored term ``latest`` (epoch, holder) is ``term``; if not,
        let go of the lock."""
        if latest is not None and (int(latest[0]), str(latest[1])) == (term.epoch, term.holder):
            return True
        # A newer term exists: our lock means nothing now (and its connection may be gone).
        with contextlib.suppress(HarnessError):
            await self.release_leadership(term)
        return False

    async def release_leadership(self, term: Leadership) -> None:
        async with self._liveness_lock:
            held = self._leaderships.get(term.role)
            if held is None or held[1] != term:
                return
            del self._leaderships[term.role]
            conn = held[0]
            if conn.is_closed() or conn is not self._liveness:
                return  # the lock went with its connection
            with self._translated("releasing leadership"):
                await conn.fetchval(Q["release_leadership"], term.role)

    async def process_alive(self, owner: str) -> bool:
        alive = await self._run("checking liveness", lambda conn: conn.fetchval(Q["process_alive"], owner))
        return bool(alive)

    def _live(self) -> bool:
        return self._liveness is not None and not self._liveness.is_closed()
