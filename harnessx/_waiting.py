"""Waiting on something slow while saying so (``ProgressPolicy``), as 0.9.1's
``harnessx.engine.await_with_notices``.

The wait runs in the caller's task and the notices are written by it, so they are ordered
with the run's other events. A policy that is off costs nothing: the work is awaited as
it is. Cancelling the wait cancels the work and returns once it has ended, so that a next
attempt never overlaps it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from harnessx._events import RunEventType
from harnessx._policies import ProgressPolicy

__all__ = ["await_with_notices"]

T = TypeVar("T")

Notice = Callable[[RunEventType, dict[str, Any]], Awaitable[Any]]


async def await_with_notices(
    awaitable: Awaitable[T],
    policy: ProgressPolicy | None,
    event: Notice,
    *,
    on: str,
    name: str | None = None,
) -> T:
    """``awaitable``'s outcome; while it is silent, ``event(RunEventType.WAITING, {"on": on,
    "seconds": <elapsed>, "name": name})`` after ``policy.first_after_seconds`` and then every
    ``policy.repeat_every_seconds`` (``name`` only when given)."""
    if policy is None or not policy.enabled or policy.first_after_seconds is None:
        return await awaitable
    task = asyncio.ensure_future(awaitable)
    try:
        waited = 0.0
        delay = policy.first_after_seconds
        while True:
            done, _ = await asyncio.wait({task}, timeout=delay)
            if done:
                return task.result()
            waited += delay
            data: dict[str, Any] = {"on": on, "seconds": round(waited, 1)}
            if name:
                data["name"] = name
            await event(RunEventType.WAITING, data)
            delay = policy.repeat_every_seconds
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
