"""``RunHandle``: access to one submitted or resumed execution of a run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from harnessx._events import RunEvent
from harnessx._results import RunResult
from harnessx._stream import RunStream

if TYPE_CHECKING:
    from harnessx._runtime import AgentRuntime

__all__ = ["RunHandle"]


class RunHandle:
    """Follow a run's events and wait for its result. Store the ids, not the handle."""

    def __init__(
        self,
        runtime: AgentRuntime,
        session_id: str,
        run_id: str,
        *,
        start_seq: int = 0,
        task: asyncio.Future[RunResult] | None = None,
    ) -> None:
        self._runtime = runtime
        self.session_id = session_id
        self.run_id = run_id
        self._start_seq = start_seq
        self._task = task

    def __repr__(self) -> str:
        return f"RunHandle(session_id={self.session_id!r}, run_id={self.run_id!r})"

    async def result(self) -> RunResult:
        """The result of this execution: it may be completed, or stopped to wait, or failed.

        Raises ``LeaseLostError`` if this process lost the session to another one.
        """
        if self._task is not None:
            return await asyncio.shield(self._task)
        return await self._runtime._await_result(self.run_id, self._start_seq)

    def events(self, after: str = "0") -> AsyncIterator[RunEvent]:
        """Stored events behind cursor ``after``, then live ones until the execution ends."""
        return self._runtime._follow(self.run_id, after)

    def stream(self, after: str = "0") -> RunStream:
        return RunStream(self.events, self.result, after=after)
