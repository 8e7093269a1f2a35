"""Following a run's events from any process: stored pages first, then live ones."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from harnessx._committer import RunFeed
from harnessx._events import RunEvent, RunEventType
from harnessx._runlog import parse_cursor
from harnessx.store._protocol import Store

__all__ = ["follow_events", "stored_events"]

LocalFeed = Callable[[], RunFeed | None]


async def follow_events(
    store: Store,
    run_id: str,
    after: str,
    *,
    poll_interval: float,
    local_feed: LocalFeed = lambda: None,
) -> AsyncIterator[RunEvent]:
    """Events of ``run_id`` behind cursor ``after``, until the current execution ends.

    ``local_feed`` returns the feed of a run this process is driving (its text deltas
    arrive there before they are flushed to the store); other runs are read from the
    store and woken by its notifications, or by polling.
    """
    position = parse_cursor(after)
    result_at = -1
    session_id = await _session_of(store, run_id)
    while True:
        feed = local_feed()
        if feed is not None and feed.covers(position + 1):
            events = feed.after(position)
        else:
            events = await store.read_events(run_id, position)
        for event in events:
            position = int(event.cursor or position)
            yield _with_session(event, session_id)
            if event.type is RunEventType.RUN_RESULT:
                result_at = position
        if result_at == position and await _execution_over(store, run_id, position, feed):
            return
        if events:
            continue
        if feed is not None and not feed.closed:
            await feed.wait(poll_interval * 10)
        else:
            await store.wait_for_events(run_id, poll_interval)


async def stored_events(store: Store, run_id: str, after: str) -> AsyncIterator[RunEvent]:
    """The events of ``run_id`` stored behind cursor ``after``, page by page, then stop."""
    position = parse_cursor(after)
    session_id = await _session_of(store, run_id)
    while page := await store.read_events(run_id, position):
        for event in page:
            position = int(event.cursor or position)
            yield _with_session(event, session_id)


async def _session_of(store: Store, run_id: str) -> str:
    record = await store.get_run(run_id)
    return record.session_id if record is not None else ""


def _with_session(event: RunEvent, session_id: str) -> RunEvent:
    # Stored rows do not repeat their run's session; events a process emits live carry it.
    return event if event.session_id or not session_id else replace(event, session_id=session_id)


async def _execution_over(store: Store, run_id: str, seq: int, feed: RunFeed | None) -> bool:
    """A ``run_result`` ends an execution unless the run has moved on since."""
    if feed is not None and not feed.closed:
        return False
    record = await store.get_run(run_id)
    return record is None or (record.event_count <= seq and record.status != "running")
