"""The event sink conformance kit (``harnessx.testing.EVENT_SINK_CHECKS``) on ``RedisEvents``
against a real Redis: the part of the store conformance kit that applies to the Temporal
binding (its ``event_cursors``; leases, fencing and the store's controls belong to Temporal
there), and the tool outcomes the workers share. And the kit fails sinks that break what
it checks."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from harnessx import RunEvent
from harnessx.temporal import RedisEvents
from harnessx.testing import (
    EVENT_SINK_CHECKS,
    EventSinkCheck,
    EventSinkConformanceError,
    EventSinkFactory,
    RedisServer,
    check_event_sink,
)
from harnessx.testing._sink_conformance import (
    sink_cursors,
    sink_idempotent_publish,
    sink_outcomes,
    sink_wait,
)

pytestmark = pytest.mark.timeout(120)


def _storage(redis: RedisServer, sink: type[RedisEvents] = RedisEvents) -> EventSinkFactory:
    """Sinks on a key prefix of their own: storage no other check or test uses."""
    prefix = f"conformance:{uuid.uuid4().hex}:"
    return lambda: sink(redis.url, prefix=prefix)


@pytest.mark.parametrize("check", EVENT_SINK_CHECKS, ids=lambda check: check.name)
async def test_redis_events_pass_the_event_sink_checks(
    check: EventSinkCheck, redis_server: RedisServer
) -> None:
    await check.run(_storage(redis_server))


async def test_check_event_sink_runs_every_check(redis_server: RedisServer) -> None:
    made: list[EventSinkFactory] = []

    def new_storage() -> EventSinkFactory:
        made.append(_storage(redis_server))
        return made[-1]

    await check_event_sink(new_storage)
    assert len(made) == len(EVENT_SINK_CHECKS)


class _Duplicating(RedisEvents):
    """Appends an event published again (as a sink without the event_id check would)."""

    async def publish(self, run_id: str, events: list[RunEvent]) -> int:
        for event in events:
            event.event_id = f"{event.event_id}#{uuid.uuid4().hex}"
        return await super().publish(run_id, events)


class _Inclusive(RedisEvents):
    """Reads ``after=`` inclusively."""

    async def read(self, run_id: str, after: int, *, limit: int = 500) -> list[RunEvent]:
        return await super().read(run_id, max(0, after - 1), limit=limit)


class _Eager(RedisEvents):
    """Says an event came without one."""

    async def wait(self, run_id: str, after: int, seconds: float) -> bool:
        return True


class _Overwriting(RedisEvents):
    """Keeps the last outcome recorded for a dispatch instead of the first."""

    async def record_outcome(self, dispatch: str, outcome: dict[str, Any]) -> None:
        await self.initialize()
        assert self.client is not None
        await self.client.set(self._outcome_key(dispatch), json.dumps(outcome))


class _ProcessLocal(RedisEvents):
    """Keeps outcomes in its own process's memory: a worker that takes over sees none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, dict[str, Any]] = {}

    async def record_outcome(self, dispatch: str, outcome: dict[str, Any]) -> None:
        self.outcomes.setdefault(dispatch, outcome)

    async def recorded_outcome(self, dispatch: str) -> dict[str, Any] | None:
        return self.outcomes.get(dispatch)


@pytest.mark.parametrize(
    ("sink", "check", "complaint"),
    [
        (_Duplicating, sink_idempotent_publish, "returned 4, expected 2"),
        (_Inclusive, sink_cursors, "after=2 read ['2', '3', '4', '5']"),
        (_Eager, sink_wait, "nothing new said an event came"),
        (_Overwriting, sink_outcomes, "a second outcome of the same dispatch replaced the first"),
        (_ProcessLocal, sink_outcomes, "another process read the outcome back as None"),
    ],
    ids=["duplicating", "inclusive", "eager", "overwriting", "process-local"],
)
async def test_the_kit_fails_a_sink_that_breaks_its_promise(
    sink: type[RedisEvents],
    check: Callable[[EventSinkFactory], object],
    complaint: str,
    redis_server: RedisServer,
) -> None:
    with pytest.raises(EventSinkConformanceError, match=re.escape(complaint)):
        await check(_storage(redis_server, sink))  # type: ignore[misc]


async def test_redis_events_keep_an_outcome_for_their_retention(redis_server: RedisServer) -> None:
    """A recorded outcome expires with the sink's retention, as a run's events do: the
    record is needed only until Temporal takes the dispatch's completion."""
    sink = RedisEvents(redis_server.url, prefix=f"retention:{uuid.uuid4().hex}:", retention_seconds=120)
    try:
        await sink.record_outcome("wf:run:tool:k#1", {"attempt": 1})
        assert sink.client is not None
        ttl = await sink.client.ttl(sink._outcome_key("wf:run:tool:k#1"))
        assert 0 < ttl <= 120
    finally:
        await sink.aclose()
