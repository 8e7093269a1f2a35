"""Where a driver commits a run's boundaries, and the in-memory one used by a plain ``Agent``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from harnessx._events import RunEvent
from harnessx._state import Delta, RunState

__all__ = ["Committer", "MemoryRunLog", "event_position", "parse_cursor"]


class Committer(Protocol):
    """Persists a run's boundaries for a driver.

    ``commit`` makes a delta and its events durable (assigning event cursors) or raises;
    ``provisional`` records a streamed event (text deltas) that may be batched and is
    lost, harmlessly, if the process dies before the next commit; ``flush`` writes the
    provisional events held back so far (before a long wait, so that followers see it);
    ``confirm`` returns once the run may start an effect outside the store (a tool call), or
    raises; ``pending_cancel`` says whether another process has asked to cancel the run (a
    durable run's request that its pause did not act on), looked at when the run stops
    without finishing.
    """

    async def commit(self, state: RunState, delta: Delta) -> None: ...

    async def provisional(self, state: RunState, event: RunEvent) -> None: ...

    async def flush(self) -> None: ...

    async def confirm(self) -> None: ...

    async def pending_cancel(self) -> bool: ...


def parse_cursor(after: str | None) -> int:
    """A cursor string as its sequence number; ``"0"``/``None``/``""`` mean the start."""
    if after in (None, ""):
        return 0
    try:
        value = int(str(after))
    except ValueError:
        raise ValueError(f"invalid event cursor {after!r}: pass a cursor from an event, or '0'") from None
    if value < 0:
        raise ValueError(f"invalid event cursor {after!r}: cursors are not negative")
    return value


def event_position(after: int | str | None) -> int:
    """A position to read events after: a number as it is, a cursor string parsed
    (``parse_cursor``)."""
    return after if isinstance(after, int) else parse_cursor(after)


class MemoryRunLog:
    """Events of one in-process run, with live followers. Nothing survives the process."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self._changed = asyncio.Event()
        self._closed = False

    async def commit(self, state: RunState, delta: Delta) -> None:
        for event in delta.events:
            self._append(event)

    async def provisional(self, state: RunState, event: RunEvent) -> None:
        self._append(event)

    async def flush(self) -> None:
        return None  # nothing is held back

    async def confirm(self) -> None:
        return None  # nobody else can take an in-memory run over

    async def pending_cancel(self) -> bool:
        return False  # no other process can ask anything of an in-memory run

    def _append(self, event: RunEvent) -> None:
        event.cursor = str(len(self.events) + 1)
        self.events.append(event)
        self._wake()

    def close(self) -> None:
        """No more events will come; followers finish once they have read everything."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, after: str = "0") -> AsyncIterator[RunEvent]:
        position = parse_cursor(after)
        while True:
            while position < len(self.events):
                position += 1
                yield self.events[position - 1]
            if self._closed:
                return
            await self._changed.wait()
