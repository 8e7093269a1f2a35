"""Following a run's events from any process: stored pages first, then live ones.

A follower that waits on a run driven elsewhere also watches it, so it never waits for
ever without saying why: when the run's rows are gone (deleted under it) it stops with a
``StorageError``, and when a pool run has waited a few seconds with no worker claiming it,
it logs once what to start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from harnessx._committer import RunFeed
from harnessx._errors import HarnessError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunResult, RunStatus
from harnessx._runlog import parse_cursor
from harnessx.store._protocol import RunRecord, Store

__all__ = ["UNCLAIMED_WARNING_SECONDS", "finished_result", "follow_events", "stored_events", "until_stopped"]

logger = logging.getLogger("harnessx.observe")

LocalFeed = Callable[[], RunFeed | None]

UNCLAIMED_WARNING_SECONDS = 5.0
"""How long a follower waits on a queued pool run before it logs that no worker claimed it."""
_CHECK_EVERY = 1.0  # seconds between looks at the run's row while no events arrive
_PAGE = 500  # events read at a time


async def follow_events(
    store: Store,
    run_id: str,
    after: str,
    *,
    poll_interval: float,
    local_feed: LocalFeed = lambda: None,
    summarize: bool = True,
    session_id: str | None = None,
) -> AsyncIterator[RunEvent]:
    """Events of ``run_id`` behind cursor ``after``, until the current execution ends.

    The last event is always a ``run_result``: when the follower starts behind the stored
    one (``after`` is the last cursor of a finished or waiting run), a summary of the run as
    it stands is made up, with cursor ``""`` and an ``event_id`` that is the same every time.
    With ``summarize=False`` there is no summary: the follower waits for the run's next
    execution instead (a live view that stays open on a waiting run).

    ``local_feed`` returns the feed of a run this process is driving (its text deltas
    arrive there before they are flushed to the store); other runs are read from the
    store and woken by its notifications, or by polling.
    """
    position = parse_cursor(after)
    result_at = -1
    result_status: RunStatus | None = None
    if session_id is None:
        session_id = await _session_of(store, run_id)
    watch = _Watch(store, run_id)
    while True:
        feed = local_feed()
        caught_up = False
        if feed is not None and feed.covers(position + 1):
            events = feed.after(position)
        else:
            events = await store.read_events(run_id, position, _PAGE)
            # A short page is all there is for now: waiting follows at once, rather than
            # after another read (and a look at the run) that finds nothing new.
            caught_up = len(events) < _PAGE
        for event in events:
            position = int(event.cursor or position)
            yield _with_session(event, session_id)
            if event.type is RunEventType.RUN_RESULT:
                result_at, result_status = position, event.data.status
        driven_here = feed is not None and not feed.closed
        # The run's row tells whether the execution has ended: once its run_result is read,
        # and otherwise (nothing new) at most once a second, as a woken follower finds
        # nothing new whenever one read took the events of several notifications.
        if not driven_here and (result_at == position or (not events and watch.due())):
            record = await store.get_run(run_id, messages=False)
            if record is None:
                if result_at == position:
                    return  # ended with its run_result, and deleted since
                raise _gone(run_id)
            await watch.seen(record)
            settled = record.status is not RunStatus.RUNNING and not record.queued
            if settled and record.event_count <= position:
                # The execution ends when its process lets the session go: until then it
                # may still be finishing, or (a worker that has just taken the run off the
                # queue) about to reopen the run.
                if await _held(store, record.session_id):
                    await store.wait_for_events(run_id, poll_interval)
                    continue
                # The follower read the run_result, or it started behind it.
                if result_status == record.status:
                    return
                if not summarize:
                    await store.wait_for_events(run_id, poll_interval)
                    continue
                state = await store.load_state(run_id)
                yield RunEvent(
                    RunEventType.RUN_RESULT,
                    state.result(),
                    record.session_id,
                    run_id,
                    event_id=f"{run_id}:result:{record.status.value}",
                )
                return
        if events and not caught_up:
            continue
        if driven_here:
            assert feed is not None
            await feed.wait(poll_interval * 10)
        else:
            await watch.look()
            await store.wait_for_events(run_id, poll_interval)


class _Watch:
    """A look at the run's row now and then while a follower waits on it."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.since = time.monotonic()
        self.looked = float("-inf")
        self.warned = False

    def due(self) -> bool:
        """Whether it is time for another look at the row (counted as taken)."""
        now = time.monotonic()
        if now - self.looked < _CHECK_EVERY:
            return False
        self.looked = now
        return True

    async def look(self) -> None:
        if not self.due():
            return
        record = await self.store.get_run(self.run_id, messages=False)
        if record is None:
            raise _gone(self.run_id)
        await self.seen(record)

    async def seen(self, record: RunRecord) -> None:
        """What a look at the row found: a pool run nobody claims is worth a warning."""
        waited = time.monotonic() - self.since
        if record.queued and not self.warned and waited >= UNCLAIMED_WARNING_SECONDS:
            self.warned = True
            logger.warning("%s", await _unclaimed(self.store, record, waited))


def _gone(run_id: str) -> StorageError:
    return StorageError(
        f"run {run_id} is not in the store (any more): its rows were deleted while it was "
        "followed, or it never existed here; nothing more will happen to it"
    )


async def _unclaimed(store: Store, record: RunRecord, waited: float) -> str:
    """Why nobody has claimed a queued run, as far as the store can tell, and what to start."""
    said = f"run {record.id} has waited {waited:.0f} s and no pool worker has claimed it yet"
    start = "harness-worker --agents MODULE:REGISTRY with the same store (--dsn/--schema or --sqlite)"
    try:
        session = await store.get_session(record.session_id)
        agent = (session.agent_ref if session else None) or "?"
        workers = [w for w in await store.running_workers() if w.alive]
    except (HarnessError, OSError):  # a read-only store, say: advise without the details
        return f"{said}; is a harness-worker running? Start one: {start} as this process"
    if not workers:
        return (
            f"{said}: no harness-worker is running on this store. Start one whose registry has "
            f"agent {agent}: {start} as this process"
        )
    knowing = [w for w in workers if agent in w.agents]
    if not knowing:
        return (
            f"{said}: {len(workers)} worker(s) run on this store, but none has agent {agent} in its "
            f"registry. Start one whose --agents registry registers {agent}"
        )
    return (
        f"{said}: the {len(knowing)} worker(s) that know agent {agent} are busy, or the run waits "
        "to be tried again (see its events). Start more workers, or raise their --concurrency"
    )


async def until_stopped(store: Store, run_id: str, *, poll_interval: float) -> RunRecord | None:
    """Return once the run's execution has stopped (its row neither running nor queued) or
    the run is gone, reading nothing but its row: what waiting for the result of a run
    driven elsewhere does before it reads the run's events once (``follow_events`` then
    decides as always). Following the events instead would read them after every checkpoint
    and make every checkpoint notify; this waits for the one commit that stops the run.
    Returns the stopped run's row (``None``: gone)."""
    watch = _Watch(store, run_id)
    while True:
        record = await store.wait_until_stopped(run_id, poll_interval)
        if record is None or record.stopped:
            return record
        await watch.seen(record)


async def finished_result(store: Store, record: RunRecord, after: str) -> RunResult | None:
    """The result of the execution that ``record`` (a row ``until_stopped`` returned) shows
    finished: its closing ``run_result``, read with the events behind cursor ``after`` in one
    pass, with no further look at the run or its session. A finished execution writes
    nothing after its closing event (a paused or waiting one may yet be cancelled, so only a
    finished one is read so). ``None`` when the run is not finished or its events say more
    than the row (another execution since): then the caller follows the run as always."""
    if not record.status.finished:
        return None
    position = parse_cursor(after)
    last: RunResult | None = None
    while page := await store.read_events(record.id, position, _PAGE):
        for event in page:
            position = int(event.cursor or position)
            if event.type is RunEventType.RUN_RESULT:
                last = event.data
        if len(page) < _PAGE:
            break
    if last is None or position != record.event_count or last.status is not record.status:
        return None
    return last


async def stored_events(store: Store, run_id: str, after: str) -> AsyncIterator[RunEvent]:
    """The events of ``run_id`` stored behind cursor ``after``, page by page, then stop."""
    position = parse_cursor(after)
    session_id = await _session_of(store, run_id)
    while page := await store.read_events(run_id, position):
        for event in page:
            position = int(event.cursor or position)
            yield _with_session(event, session_id)


async def _session_of(store: Store, run_id: str) -> str:
    record = await store.get_run(run_id, messages=False)
    return record.session_id if record is not None else ""


def _with_session(event: RunEvent, session_id: str) -> RunEvent:
    # Stored rows do not repeat their run's session; events a process emits live carry it.
    return event if event.session_id or not session_id else replace(event, session_id=session_id)


async def _held(store: Store, session_id: str) -> bool:
    """Whether some process holds the session's lease (it may be about to move the run on)."""
    session = await store.get_session(session_id)
    if session is None or session.lease_owner is None:
        return False
    return (session.lease_expires_at or 0.0) > time.time()
