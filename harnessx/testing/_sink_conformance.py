"""The event sink conformance kit: what any ``EventSink`` of the Temporal binding must do.

On Temporal a run's state is its workflow's history and its events go through an event
sink (``RedisEvents``, or any object with the ``EventSink`` methods passed as
``TemporalBackend(events=...)``). Followers read it with the same cursors as a store's
events, so it owes them what the store conformance kit's ``event_cursors`` check holds a
store to, and what the binding's publishing relies on: the workflow's publish is retried
until the sink takes it, so publishing an event again must append nothing.

Each check is an ``async`` function of a *sink factory*: a callable that returns a new, not
yet initialized sink on one and the same storage each time it is called (two calls are two
processes sharing it). The checks initialize and close the sinks they make. They need
storage of their own (for Redis, a key prefix no one else uses).

The sink also keeps each tool dispatch's outcome for the workers: an activity attempt whose
completion the Temporal server lost is attempted again, maybe on another worker, and
returns the recorded outcome instead of running the tool again.

- ``sink_cursors``: the sink numbers each run's events densely from ``"1"`` in publishing
  order, whatever ids they carry; ``publish`` returns the last cursor; ``read(after=)`` is
  exclusive, ``limit`` pages, content round-trips, runs do not mix, and another process
  reads the same.
- ``sink_idempotent_publish``: an event published again (same ``event_id``), alone or in a
  batch with new ones and from any process, is not appended again.
- ``sink_wait``: ``wait(run, after, seconds)`` is ``True`` at once when an event is already
  behind ``after``, wakes when another process publishes one, and is ``False`` when none
  came within ``seconds``.
- ``sink_outcomes``: ``record_outcome(dispatch, outcome)`` is read back by
  ``recorded_outcome(dispatch)`` from another process and from a sink opened later, whole;
  the first outcome recorded for a dispatch stays (another recorded later, from any
  process, does not replace it); dispatches do not mix; one never recorded is ``None``.

With pytest and pytest-asyncio in ``asyncio_mode = auto``::

    import uuid

    import pytest
    from harnessx.temporal import RedisEvents
    from harnessx.testing import EVENT_SINK_CHECKS, EventSinkCheck

    @pytest.mark.parametrize("check", EVENT_SINK_CHECKS, ids=lambda check: check.name)
    async def test_my_sink(check: EventSinkCheck) -> None:
        prefix = f"conformance:{uuid.uuid4().hex}:"
        await check.run(lambda: RedisEvents("redis://127.0.0.1:6379/0", prefix=prefix))

Without it: ``await check_event_sink(new_storage)`` runs every check, each on the sink
factory ``new_storage()`` returns for storage of its own. A failure is a
``EventSinkConformanceError`` (an ``AssertionError``) saying what the sink did instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harnessx._events import RunEvent, RunEventType

if TYPE_CHECKING:
    from harnessx.temporal._events import EventSink

__all__ = [
    "EVENT_SINK_CHECKS",
    "EventSinkCheck",
    "EventSinkConformanceError",
    "EventSinkFactory",
    "check_event_sink",
]

EventSinkFactory = Callable[[], "EventSink"]
"""``factory()``: a new, uninitialized event sink on the checks' storage."""

_WITHIN = 15.0  # seconds a wait the checks expect to be woken may take (a loaded machine)


class EventSinkConformanceError(AssertionError):
    """An event sink did not do what the binding relies on."""


@dataclass(frozen=True)
class EventSinkCheck:
    """One conformance check: ``await check.run(factory)``."""

    name: str
    run: Callable[[EventSinkFactory], Awaitable[None]]

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip()


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise EventSinkConformanceError(what)


@contextlib.asynccontextmanager
async def _opened(factory: EventSinkFactory, count: int) -> AsyncIterator[list[EventSink]]:
    sinks: list[EventSink] = []
    try:
        for _ in range(count):
            sink = factory()
            sinks.append(sink)
            await sink.initialize()
        yield sinks
    finally:
        for sink in sinks:
            await sink.aclose()


def _event(run_id: str, event_id: str, text: str) -> RunEvent:
    return RunEvent(
        RunEventType.TEXT_DELTA,
        text,
        session_id="conformance",
        run_id=run_id,
        step_id="1",
        attempt_id="1",
        event_id=event_id,
    )


async def _woken(sink: EventSink, run_id: str, after: int) -> bool:
    """Whether ``wait`` saw an event behind ``after`` within ``_WITHIN`` seconds (a sink may
    end a wait early with ``False``: followers look again, as this does)."""
    deadline = time.monotonic() + _WITHIN
    while (left := deadline - time.monotonic()) > 0:
        if await sink.wait(run_id, after, left):
            return True
    return False


def _cursors(events: list[RunEvent]) -> list[str]:
    return [event.cursor for event in events]


async def sink_cursors(factory: EventSinkFactory) -> None:
    """Each run's events are numbered densely from ``"1"`` in publishing order; ``publish``
    returns the last cursor; ``after=`` is exclusive, ``limit`` pages, content round-trips,
    runs do not mix, and another process reads the same."""
    async with _opened(factory, 2) as (writer, reader):
        # Ids in no order of their own: the sink's numbering is the publishing order.
        first = [_event("run-a", f"a:{name}", f"event {name}") for name in ("z", "b", "m")]
        last = await writer.publish("run-a", first)
        _expect(last == 3, f"publishing three events to a new run returned {last}, expected 3")
        _expect(await writer.publish("run-b", [_event("run-b", "b:1", "other")]) == 1, "run-b's cursor")
        more = [_event("run-a", "a:4", 'streamed ✓ "quoted"\nline'), _event("run-a", "a:5", "")]
        last = await writer.publish("run-a", more)
        _expect(last == 5, f"publishing two more returned {last}, expected 5")
        _expect(await writer.publish("run-a", []) == 5, "publishing nothing did not return the last cursor")

        everything = await reader.read("run-a", 0)
        cursors = _cursors(everything)
        _expect(cursors == ["1", "2", "3", "4", "5"], f"cursors read back {cursors}, expected '1'..'5'")
        ids = [event.event_id for event in everything]
        _expect(ids == ["a:z", "a:b", "a:m", "a:4", "a:5"], f"events read back in the order {ids}")
        sent = [*first, *more]
        for got, want in zip(everything, sent, strict=True):
            fields = ("type", "data", "session_id", "run_id", "step_id", "attempt_id")
            changed = [name for name in fields if getattr(got, name) != getattr(want, name)]
            _expect(not changed, f"event {want.event_id} came back with other {changed}")
        after = _cursors(await reader.read("run-a", 2))
        _expect(after == ["3", "4", "5"], f"after=2 read {after}, expected ['3', '4', '5']")
        page = _cursors(await reader.read("run-a", 1, limit=2))
        _expect(page == ["2", "3"], f"after=1, limit=2 read {page}, expected ['2', '3']")
        _expect(await reader.read("run-a", 5) == [], "reading after the last event gave some")
        _expect(await reader.read("run-never", 0) == [], "a run with no events read some")
        others = await reader.read("run-b", 0)
        found = [(e.cursor, e.event_id) for e in others]
        _expect(found == [("1", "b:1")], f"runs' events mixed: run-b read {found}")
    async with _opened(factory, 1) as (later,):
        _expect(len(await later.read("run-a", 0)) == 5, "a sink opened after the others closed lost events")


async def sink_idempotent_publish(factory: EventSinkFactory) -> None:
    """An event published again (its ``event_id`` already there) is not appended again, alone
    or in a batch with new ones, from the same process or another: the binding retries a
    publish whose answer was lost."""
    async with _opened(factory, 2) as (one, other):
        batch = [_event("run", f"e{n}", f"event {n}") for n in (1, 2)]
        _expect(await one.publish("run", batch) == 2, "a first publish of two did not return 2")
        again = await other.publish("run", batch)
        _expect(again == 2, f"publishing the same two again returned {again}, expected 2")
        mixed = await one.publish("run", [batch[1], _event("run", "e3", "event 3")])
        _expect(mixed == 3, f"a batch of one old and one new event returned {mixed}, expected 3")
        ids = [event.event_id for event in await other.read("run", 0)]
        _expect(ids == ["e1", "e2", "e3"], f"the run holds {ids}, expected each event once")


async def sink_wait(factory: EventSinkFactory) -> None:
    """``wait(run, after, seconds)``: ``True`` at once for an event already behind ``after``;
    woken when another process publishes one; ``False`` when none came in ``seconds``."""
    async with _opened(factory, 2) as (follower, publisher):
        await publisher.publish("waited", [_event("waited", "w1", "first")])
        _expect(await _woken(follower, "waited", 0), "wait() missed an event already there")
        _expect(not await follower.wait("waited", 1, 0.2), "wait() with nothing new said an event came")
        _expect(not await follower.wait("quiet", 0, 0.2), "wait() on a run with no events said one came")
        woken = asyncio.ensure_future(_woken(follower, "waited", 1))
        try:
            await asyncio.sleep(0.05)  # usually already waiting; either order must wake it
            await publisher.publish("waited", [_event("waited", "w2", "second")])
            _expect(await woken, f"wait() was not woken by a publish within {_WITHIN:g} s")
        finally:
            woken.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await woken
        woke = _cursors(await follower.read("waited", 1))
        _expect(woke == ["2"], f"after the publish that woke wait(), read {woke}, expected ['2']")


async def sink_outcomes(factory: EventSinkFactory) -> None:
    """``record_outcome(dispatch, outcome)`` is read back whole by ``recorded_outcome`` from
    another process and from a sink opened later; the first outcome recorded for a dispatch
    stays; dispatches do not mix; one never recorded is ``None``. (The binding records a
    tool's outcome so that an attempt of the same dispatch on any worker, after Temporal
    lost the completion, returns it instead of running the tool again.)"""
    first = {
        "result": {"content": 'done ✓ "quoted"\nline', "is_error": False, "metadata": {"n": [1, 2.5, None]}},
        "attempt": 1,
    }
    later = {"result": {"content": "ran again", "is_error": False}, "attempt": 2}
    dispatch = "harnessx-session:s:run-1:tool:run-1:1:c0#1"
    async with _opened(factory, 2) as (worker, other):
        _expect(await worker.recorded_outcome(dispatch) is None, "a dispatch never recorded has an outcome")
        await worker.record_outcome(dispatch, first)
        found = await other.recorded_outcome(dispatch)
        _expect(found == first, f"another process read the outcome back as {found!r}, expected {first!r}")
        await other.record_outcome(dispatch, later)
        kept = await worker.recorded_outcome(dispatch)
        _expect(kept == first, f"a second outcome of the same dispatch replaced the first: read {kept!r}")
        _expect(
            await other.recorded_outcome(dispatch.replace("#1", "#2")) is None,
            "another dispatch of the same call read this dispatch's outcome",
        )
    async with _opened(factory, 1) as (restarted,):
        found = await restarted.recorded_outcome(dispatch)
        _expect(found == first, f"a sink opened after the others closed read {found!r}")


EVENT_SINK_CHECKS: tuple[EventSinkCheck, ...] = tuple(
    EventSinkCheck(check.__name__, check)
    for check in (sink_cursors, sink_idempotent_publish, sink_wait, sink_outcomes)
)
"""Every check of the kit, in the order ``check_event_sink`` runs them."""


async def check_event_sink(new_storage: Callable[[], EventSinkFactory]) -> None:
    """Run every check, each on the factory ``new_storage()`` makes for storage of its own."""
    for check in EVENT_SINK_CHECKS:
        await check.run(new_storage())
