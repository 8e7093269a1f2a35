"""SQLite: waiting for runs driven by other processes to stop, with one read for all of them.

SQLite has no notifications, so a process that waits for the results of runs other processes
drive (a pool submitter) has to look. Looking run by run costs one statement per waiting run
per poll interval: a thousand queued runs, ten thousand reads a second. Here every run some
caller waits on is looked at in one statement per interval, and the waiters of those that have
stopped (or are gone) are woken; a waiter then reads its own row once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from harnessx._errors import HarnessError
from harnessx.store._records import RunRecord
from harnessx.store._waiters import RunWaiters

__all__ = ["StopPoller"]

logger = logging.getLogger("harnessx.store.sqlite")

# How long one wait for a run to stop lasts while the poller looks for it: the poller wakes it
# within its interval, so the waiter's own look is only a safety net.
_STOP_WAIT = 3.0


class StopPoller:
    """Runs waited on until they stop. ``going(run_ids)`` reads ``(id, still running or
    queued)`` for those of them in the store; the waiters in ``waiters`` of the others are
    woken."""

    def __init__(
        self, going: Callable[[list[str]], Awaitable[Sequence[Sequence[Any]]]], waiters: RunWaiters
    ) -> None:
        self._going = going
        self._waiters = waiters
        self._runs: dict[str, int] = {}  # run id -> callers waiting for it to stop
        self._interval = math.inf  # the shortest a caller asked for, while the poll runs
        self._task: asyncio.Task[None] | None = None

    async def until_stopped(
        self, run_id: str, max_wait: float, read: Callable[[], Awaitable[RunRecord | None]]
    ) -> RunRecord | None:
        """``read()`` the run's row; unless it has stopped, wait until the poller (every
        ``max_wait`` seconds) or a commit of this process wakes it, or ``_STOP_WAIT``; return
        the row as read. The waiter is in place before the read."""
        async with self._waiters.waiting(run_id) as waiter, self.watching(run_id, max_wait):
            record = await read()
            if record is not None and not record.stopped:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), max(max_wait, _STOP_WAIT))
            return record

    @contextlib.asynccontextmanager
    async def watching(self, run_id: str, interval: float) -> AsyncIterator[None]:
        """While inside, ``run_id`` is looked at every ``interval`` seconds (or sooner)."""
        self._runs[run_id] = self._runs.get(run_id, 0) + 1
        self._interval = min(self._interval, max(interval, 0.001))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="harnessx-sqlite-stops")
        try:
            yield
        finally:
            left = self._runs.pop(run_id) - 1
            if left:
                self._runs[run_id] = left

    async def _poll(self) -> None:
        try:
            while self._runs:
                await asyncio.sleep(self._interval)
                runs = list(self._runs)
                if not runs:
                    break
                try:
                    going = {row[0] for row in await self._going(runs) if row[1]}
                except HarnessError as exc:  # the next look tries again; each waiter also times out
                    logger.info("cannot look at the runs waited on: %s", exc)
                    continue
                for run_id in runs:
                    if run_id not in going:  # stopped, or gone
                        self._waiters.wake(run_id)
        finally:
            self._interval = math.inf

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
