"""Waiting for a condition, not for a length of time.

A test that sleeps "long enough" for another task or process to act fails when the machine
is slow and wastes time when it is fast. ``wait_until`` polls a condition instead and fails
with what it was waiting for once ``within`` seconds have passed.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["claim_once_expired", "wait_until"]


async def wait_until(
    condition: Callable[[], Any | Awaitable[Any]], what: str, within: float = 30.0, interval: float = 0.02
) -> Any:
    """The condition's first true value (it may be a coroutine function); AssertionError
    naming ``what`` when it stays false for ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within:g} s for {what}; it did not happen (last: {value!r})")
        await asyncio.sleep(interval)


async def claim_once_expired(store: Any, session_id: str, holder: str, within: float = 30.0) -> Any:
    """``store.claim(session_id, holder)`` as soon as it succeeds: once the lease another
    holder has on the session (and no longer renews) has expired."""
    from harnessx import SessionBusyError

    async def attempt() -> Any:
        try:
            return await store.claim(session_id, holder)
        except SessionBusyError:
            return None

    return await wait_until(attempt, f"the lease on session {session_id} to expire", within)
