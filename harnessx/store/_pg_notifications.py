"""Waiting for other processes' commits on PostgreSQL: LISTEN on a connection of its own.

A checkpoint that adds events sends one NOTIFY on the schema's ``events`` channel, but
only while some process follows the session (``sessions.watched_until``, which a follower
pushes forward while it waits); queueing a run sends one on the ``work`` channel (see
postgres.sql); a pause/cancel request one on the ``control`` channel, which lease holders
hear so that they renew (and so take it) at once. A notifying commit holds a cluster-wide
lock until it is flushed, so a run nobody follows from elsewhere must not notify. A process
that only waits for a run's result announces that instead (``sessions.awaited_until``): the
checkpoint that stops the execution notifies, the others do not. This
process LISTENs on a channel only once something in it has waited on that channel: a pool
worker waits for work and never hears the events of every run in the cluster; a process that
follows runs driven elsewhere hears events and no work. A notification is only a hint to look
again; whenever the connection is down, waiting is plain waiting and callers poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, TypeVar

from harnessx.store._pg_types import Connection
from harnessx.store._waiters import RunWaiters

__all__ = ["Notifications"]

_Row = TypeVar("_Row")
# What an announcement says: the process follows the run's events, or waits for its result.
Interest = Literal["watch", "await"]

logger = logging.getLogger("harnessx.store.postgres")

# After a failed attempt to listen, callers wait by polling this long before another try.
_RETRY_SECONDS = 1.0
# How long one announcement that this process follows a run lasts; it is renewed once half
# of that has passed, by the next wait.
WATCH_SECONDS = 60.0
# Announcements remembered at most; past this, those that have run out are forgotten.
_MAX_WATCHING = 1000
# How long a wait for a run to stop may last while this process hears every commit that stops
# one: past the caller's poll interval, as no look in between could find anything new (the
# looks left are for a run deleted meanwhile and the follower's warning about a run nobody
# claims, which comes at the first look past its 5 s).
_SETTLED_WAIT = 3.0


class Notifications:
    """Who in this process waits for which run or for work, the announcements that make
    other processes notify, and the connection that hears them. Local commits wake waiters
    directly (``wake_run``, ``wake_work``)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        watch: Callable[[str, float, Interest], Coroutine[Any, Any, None]],
        driver_errors: tuple[type[BaseException], ...],
        scrub: Callable[[str], str],
    ) -> None:
        self._connect = connect
        self._watch = watch  # announce (run id, seconds, interest) in the database
        # (interest, run id) -> when its announcement runs out
        self._watching: dict[tuple[Interest, str], float] = {}
        self._announcing: dict[tuple[Interest, str], asyncio.Task[None]] = {}
        self._driver_errors = driver_errors
        self._scrub = scrub
        self.events_channel: str | None = None  # set once the schema is known
        self.work_channel: str | None = None
        self.control_channel: str | None = None
        self.connection: Connection | None = None
        self._listening: set[str] = set()  # channels LISTENed on ``connection``
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()  # one connection, set up and subscribed one step at a time
        self._retry_at = 0.0
        self._runs = RunWaiters()
        self._work = asyncio.Event()  # replaced each time it is set
        # Work was announced since the last wait for it returned (the worker was claiming):
        # the next wait returns at once rather than leave that run to the next poll.
        self._work_unheard = False
        self._control = asyncio.Event()  # likewise

    async def wait_for_run(self, run_id: str, max_wait: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        async with self._runs.waiting(run_id) as waiter:
            announced = self.events_channel is not None and await self._announce(run_id, max_wait)
            return await self._wait(self.events_channel, waiter, deadline - loop.time(), look_again=announced)

    async def until_stopped(
        self,
        run_id: str,
        max_wait: float,
        read: Callable[[], Awaitable[_Row]],
        stopped: Callable[[_Row], bool],
    ) -> _Row:
        """``read()`` the run's row; unless ``stopped`` by it, wait for a commit that may stop
        the run's execution, up to ``max_wait`` seconds (longer while listening: every such
        commit is heard), and return the row as read. The waiter is in place before the read
        and the announcement made before it, so no commit between the read and the wait goes
        unheard."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        async with self._runs.waiting(run_id) as waiter:
            channel = self.events_channel
            if channel is not None:
                await self._listen(channel, max(max_wait, 0.0))
                if channel in self._listening:
                    await self._announce(run_id, max_wait, "await")
                    if self._watching.get(("await", run_id), 0.0) > time.monotonic():
                        deadline = max(deadline, loop.time() + _SETTLED_WAIT)
            row = await read()
            if stopped(row):
                return row
            remaining = deadline - loop.time()
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), remaining)
            return row

    async def wait_for_work(self, max_wait: float) -> bool:
        unheard, self._work_unheard = self._work_unheard, False
        woken = await self._wait(self.work_channel, self._work, max_wait, look_again=unheard)
        # Whatever was announced until now, the caller looks at the queue after this.
        self._work_unheard = False
        return woken

    async def wait_for_control(self, max_wait: float) -> bool:
        # Unlike the waits above, beginning to listen is no reason to look at once: the
        # caller's next lease renewal returns a request written before that anyway.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        waiter = self._control
        if self.control_channel is not None:
            await self._listen(self.control_channel, max(max_wait, 0.0))
        remaining = deadline - loop.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), remaining)
        return waiter.is_set()

    async def _wait(
        self, channel: str | None, waiter: asyncio.Event, max_wait: float, *, look_again: bool = False
    ) -> bool:
        """Whether something may have changed: ``waiter`` fired within ``max_wait`` seconds,
        or this call began to listen on ``channel`` (a commit just before that was not
        heard, so the caller should look again now rather than wait for the next one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        began_listening = channel is not None and await self._listen(channel, max(max_wait, 0.0))
        if began_listening or look_again:
            return True
        remaining = deadline - loop.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), remaining)
        return waiter.is_set()

    async def _listen(self, channel: str, budget: float) -> bool:
        """Whether ``channel`` went from not listened on to listened on during this call."""
        if channel in self._listening:
            return False
        task = self._tasks.get(channel)
        if task is None or task.done():
            if time.monotonic() < self._retry_at:
                return False  # failed a moment ago: poll until it is worth another try
            task = self._tasks[channel] = asyncio.create_task(
                self._subscribe(channel), name=f"harnessx-pg-listen-{channel}"
            )
        # Shielded: a short wait must not cancel a connection attempt that is under way, and
        # a black-holed server must not hold the caller longer than it meant to wait.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), budget)
        return channel in self._listening

    async def _announce(self, run_id: str, budget: float, interest: Interest = "watch") -> bool:
        """Make sure the database knows this process follows ``run_id`` (or waits for its
        result); whether it did not know before this call (commits until now sent no
        notification for it)."""
        now = time.monotonic()
        key = (interest, run_id)
        until = self._watching.get(key, 0.0)
        if until - now > WATCH_SECONDS / 2:
            return False
        task = self._announcing.get(key)
        # One that a caller stopped waiting for and that has finished since is taken as it
        # is: announcing again would be one more statement for nothing.
        if task is None:
            task = self._announcing[key] = asyncio.create_task(
                self._watch(run_id, WATCH_SECONDS, interest), name=f"harnessx-pg-{interest}-{run_id}"
            )
        # Shielded, as in _listen: the caller waits no longer than it meant to.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), max(budget, 0.0))
        if not task.done():
            return False
        self._announcing.pop(key, None)
        if task.cancelled():
            return False
        failure = task.exception()
        if failure is not None:
            logger.info("cannot announce that run %s is followed, polling: %s", run_id, failure)
            return False
        if len(self._watching) >= _MAX_WATCHING:
            self._watching = {k: end for k, end in self._watching.items() if end > now}
        self._watching[key] = now + WATCH_SECONDS
        return until <= now

    async def _subscribe(self, channel: str) -> None:
        fresh = None
        try:
            async with self._lock:
                conn = self.connection
                if conn is None or conn.is_closed():
                    conn = fresh = await self._connect()
                    conn.add_termination_listener(self._lost)
                    self.connection, self._listening = conn, set()
                    fresh = None
                await conn.add_listener(channel, self._heard)
                self._listening.add(channel)
        except self._driver_errors as exc:
            self._retry_at = time.monotonic() + _RETRY_SECONDS
            logger.info("cannot listen for notifications, waiting by polling: %s", self._scrub(str(exc)))
        finally:
            if fresh is not None:
                await _close_quietly(fresh)

    def _heard(self, conn: Connection, pid: int, channel: str, payload: str) -> None:
        if channel == self.work_channel:
            self.wake_work()
        elif channel == self.control_channel:
            self.wake_control()
        else:
            self.wake_run(payload)

    def _lost(self, conn: Connection) -> None:
        if self.connection is conn:
            self.connection, self._listening = None, set()
            # Notifications may have been missed, and a restored backup may have lost the
            # announcements: make them again.
            self._watching.clear()
        # Notifications may have been missed: let every waiter look for itself.
        self.wake_all()

    def wake_run(self, run_id: str) -> None:
        self._runs.wake(run_id)

    def wake_work(self) -> None:
        waiter, self._work = self._work, asyncio.Event()
        self._work_unheard = True
        waiter.set()

    def wake_control(self) -> None:
        waiter, self._control = self._control, asyncio.Event()
        waiter.set()

    def wake_all(self) -> None:
        self._runs.wake_all()
        self.wake_work()
        self.wake_control()

    async def close(self) -> None:
        """Stop listening; until the channels are set again, waiting is plain waiting."""
        self.events_channel = self.work_channel = self.control_channel = None
        tasks = [*self._tasks.values(), *self._announcing.values()]
        self._tasks, self._announcing, self._watching = {}, {}, {}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        conn, self.connection, self._listening = self.connection, None, set()
        await _close_quietly(conn)
        self.wake_all()


async def _close_quietly(conn: Connection | None) -> None:
    """Close a listening connection; if that fails (it is already broken), just drop it."""
    if conn is None:
        return
    try:
        await asyncio.wait_for(conn.close(), 10.0)
    except Exception:
        conn.terminate()
    except asyncio.CancelledError:
        conn.terminate()
        raise
