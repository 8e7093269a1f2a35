"""Callers in this process waiting for a run's next commit, and waking them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["RunWaiters"]


class RunWaiters:
    """One event per run that something waits on. A commit of the run sets and drops it;
    the last waiter of a run that nothing woke drops it too, or a process that follows many
    runs would keep one for every run it ever waited on."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}  # run id -> calls waiting on it now

    @contextlib.asynccontextmanager
    async def waiting(self, run_id: str) -> AsyncIterator[asyncio.Event]:
        """The event that the run's next commit sets, for as long as the caller waits."""
        event = self._events.setdefault(run_id, asyncio.Event())
        self._waiting[run_id] = self._waiting.get(run_id, 0) + 1
        try:
            yield event
        finally:
            left = self._waiting.pop(run_id) - 1
            if left:
                self._waiting[run_id] = left
            elif self._events.get(run_id) is event:
                del self._events[run_id]

    def wake(self, run_id: str) -> None:
        event = self._events.pop(run_id, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def __len__(self) -> int:
        return len(self._events) + len(self._waiting)
