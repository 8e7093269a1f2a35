"""``RunStream``: follow one run's events, then get its result.

Closing a durable run's stream never cancels the run (it is followed, not driven, here);
closing an in-memory run's stream (``Agent.run_stream``) before the run ends cancels it, as
harnessx 0.9.1's does: nobody is left to read it, and it would go on calling the model.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunResult

__all__ = ["EventSource", "RunStream", "text_of"]

EventSource = Callable[[str], AsyncIterator[RunEvent]]
# Called with no arguments on each attempt_reset: discard the text shown so far.
OnReset = Callable[[], Any]


class RunStream:
    """An async iterator of ``RunEvent`` and an async context manager.

    ``source(after)`` yields the run's events behind cursor ``after`` and ends with the
    execution; ``result()`` waits for the execution's ``RunResult``. ``start``, when given,
    begins the run on first use (iteration, ``async with`` or ``result()``).
    """

    def __init__(
        self,
        source: EventSource,
        result: Callable[[], Awaitable[RunResult]],
        *,
        after: str = "0",
        start: Callable[[], Awaitable[None] | None] | None = None,
        cancel: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._source = source
        self._cancel = cancel
        self._result = result
        self._after = after
        self._start = start
        self._iterator: AsyncIterator[RunEvent] | None = None
        self._closed = False

    async def _ensure_started(self) -> None:
        if self._start is not None:
            start, self._start = self._start, None
            outcome = start()
            if inspect.isawaitable(outcome):
                await outcome

    def __aiter__(self) -> AsyncIterator[RunEvent]:
        return self

    async def __anext__(self) -> RunEvent:
        if self._closed:
            raise StopAsyncIteration
        await self._ensure_started()
        if self._iterator is None:
            self._iterator = self._source(self._after)
        event = await self._iterator.__anext__()
        if event.cursor:
            self._after = event.cursor
        return event

    async def __aenter__(self) -> RunStream:
        await self._ensure_started()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def result(self) -> RunResult:
        await self._ensure_started()
        return await self._result()

    async def text(self, *, on_reset: OnReset | None = None) -> AsyncIterator[str]:
        """Only the answer's text deltas; ``on_reset()`` is called on each ``attempt_reset``.
        Raises the fitting ``RunError`` at the end if the run is not ``ok``."""
        async for event in self:
            chunk = await text_of(event, on_reset)
            if chunk:
                yield chunk
        (await self.result()).raise_for_status()

    async def aclose(self) -> None:
        """Stop following; an in-memory run not finished yet is cancelled (see the module)."""
        self._closed = True
        iterator, self._iterator = self._iterator, None
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()
        if self._cancel is not None:
            cancel, self._cancel = self._cancel, None
            await cancel()


async def text_of(event: RunEvent, on_reset: OnReset | None) -> str:
    """The text a streaming consumer should show for ``event`` ('' for none)."""
    if event.type is RunEventType.TEXT_DELTA:
        return str(event.data)
    if event.type is RunEventType.ATTEMPT_RESET and on_reset is not None:
        outcome = on_reset()
        if inspect.isawaitable(outcome):
            await outcome
    return ""
