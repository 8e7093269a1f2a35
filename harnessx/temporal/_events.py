"""Where a Temporal run's events go: a Redis stream per run, numbered like a store's.

On Temporal the workflow holds the run's state; its events are delivered through an event
sink. ``RedisEvents`` keeps each run's events in a Redis stream whose entry ids are
``0-<seq>``: Redis numbers them densely (``XADD … 0-*``), so an event's cursor is its
sequence number as a string, exactly as with SQLite and PostgreSQL, and ``XREAD BLOCK``
wakes followers. Publishing is idempotent by ``event_id`` (one Lua script checks and
appends), so an activity retried after a lost reply cannot publish an event twice.

The sink is also what every worker shares, so it keeps the outcome of each tool dispatch
(``record_outcome``): an activity attempt whose completion the Temporal server lost is
attempted again, maybe on another worker, and that attempt returns the recorded outcome
instead of running the tool a second time.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Protocol

from harnessx._errors import ConfigurationError, StorageError
from harnessx._events import RunEvent
from harnessx._redaction import redact

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["EventSink", "RedisEvents"]

# KEYS[1]: the run's stream, KEYS[2]: the event ids it holds. ARGV[1]: retention seconds,
# then (event_id, event JSON) pairs. Returns the stream's last sequence number.
_PUBLISH = """
local added = 0
for i = 2, #ARGV, 2 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], '0-*', 'e', ARGV[i + 1])
    added = added + 1
  end
end
if added > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[1])
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then return info[i + 1] end
end
return '0-0'
"""


class EventSink(Protocol):
    """What the Temporal binding needs from an event store."""

    async def initialize(self) -> None: ...

    async def publish(self, run_id: str, events: list[RunEvent]) -> int:
        """Append the events not already there (by ``event_id``); the last cursor."""
        ...

    async def read(self, run_id: str, after: int, *, limit: int = 500) -> list[RunEvent]: ...

    async def wait(self, run_id: str, after: int, seconds: float) -> bool:
        """Wait up to ``seconds`` for an event behind ``after``; whether one came."""
        ...

    async def record_outcome(self, dispatch: str, outcome: dict[str, Any]) -> None:
        """Keep the outcome of the tool dispatch ``dispatch`` for a while (the sink's
        retention), where every worker reads it; the first outcome recorded for a dispatch
        stays, a later one is ignored."""
        ...

    async def recorded_outcome(self, dispatch: str) -> dict[str, Any] | None:
        """The outcome recorded for ``dispatch``, or ``None`` (none yet, or expired)."""
        ...

    async def aclose(self) -> None: ...


class RedisEvents:
    """Run events in Redis streams. ``RedisEvents("redis://127.0.0.1:6379/0")``.

    ``retention_seconds`` is how long a run's events stay after its last one (a follower
    that comes back later reads nothing; the run's result stays in Temporal), and how long
    a tool dispatch's recorded outcome stays.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Redis | None = None,
        retention_seconds: int = 86400,
        prefix: str = "harnessx:events:",
    ) -> None:
        if url is None and client is None:
            raise ConfigurationError("RedisEvents needs a URL (redis://host:port/db) or client=")
        if retention_seconds < 1:
            raise ConfigurationError("RedisEvents retention_seconds must be at least 1")
        self.url = url
        self.client = client
        self.retention_seconds = int(retention_seconds)
        self.prefix = prefix
        self._owns_client = client is None
        self._script: Any = None
        self._waits: asyncio.Semaphore | None = None

    def __repr__(self) -> str:
        where = redact(self.url) if self.url else "client"
        return f"RedisEvents({where!r})"

    async def initialize(self) -> None:
        if self.client is None:
            try:
                from redis.asyncio import Redis
            except ImportError:
                raise ConfigurationError(
                    "RedisEvents needs the redis package: pip install 'harnessx-durable[temporal]'"
                ) from None
            assert self.url is not None
            self.client = Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=5)
        if self._script is None:
            self._script = self.client.register_script(_PUBLISH)

    def _key(self, run_id: str) -> str:
        return self.prefix + run_id

    def _outcome_key(self, dispatch: str) -> str:
        # Run ids are hex, so no run's stream is named like this.
        return f"{self.prefix}outcome:{dispatch}"

    async def publish(self, run_id: str, events: list[RunEvent]) -> int:
        await self.initialize()
        args: list[Any] = [self.retention_seconds]
        for event in events:
            data = event.to_dict()
            data.pop("cursor", None)
            args += [event.event_id, json.dumps(data, separators=(",", ":"), default=str)]
        key = self._key(run_id)
        try:
            last = await self._script(keys=[key, key + ":ids"], args=args)
        except Exception as exc:
            raise StorageError(f"publishing events of run {run_id} failed: {redact(str(exc))}") from exc
        return _seq(last)

    async def read(self, run_id: str, after: int, *, limit: int = 500) -> list[RunEvent]:
        await self.initialize()
        assert self.client is not None
        try:
            rows = await self.client.xrange(self._key(run_id), min=f"(0-{after}", max="+", count=limit)
        except Exception as exc:
            raise StorageError(f"reading events of run {run_id} failed: {redact(str(exc))}") from exc
        return [_event(entry_id, fields or {}) for entry_id, fields in rows or []]

    async def wait(self, run_id: str, after: int, seconds: float) -> bool:
        await self.initialize()
        assert self.client is not None
        # A blocking read holds a pooled connection while it waits: at most half the pool
        # waits at once, so reads and publishes always find one (redis-py refuses past its
        # max_connections). A wait that finds no slot sleeps briefly; callers look again.
        if self._waits is None:
            limit = getattr(self.client.connection_pool, "max_connections", 100) or 100
            self._waits = asyncio.Semaphore(max(1, min(int(limit), 2**16) // 2))
        if self._waits.locked():
            await asyncio.sleep(min(seconds, 0.2))
            return False
        # Below the socket timeout, so a quiet stream is not mistaken for a dead connection.
        block = max(1, min(int(seconds * 1000), 5000))
        async with self._waits:
            try:
                found = await self.client.xread({self._key(run_id): f"0-{after}"}, count=1, block=block)
            except Exception as exc:
                raise StorageError(f"waiting for events of run {run_id} failed: {redact(str(exc))}") from exc
        return bool(found)

    async def record_outcome(self, dispatch: str, outcome: dict[str, Any]) -> None:
        await self.initialize()
        assert self.client is not None
        text = json.dumps(outcome, separators=(",", ":"), default=str)
        try:
            # NX: the first outcome stays (a later attempt of the same dispatch that ran the
            # tool too, its first worker only starved, does not replace it).
            await self.client.set(self._outcome_key(dispatch), text, nx=True, ex=self.retention_seconds)
        except Exception as exc:
            raise StorageError(f"recording the outcome of {dispatch} failed: {redact(str(exc))}") from exc

    async def recorded_outcome(self, dispatch: str) -> dict[str, Any] | None:
        await self.initialize()
        assert self.client is not None
        try:
            text = await self.client.get(self._outcome_key(dispatch))
        except Exception as exc:
            raise StorageError(f"reading the outcome of {dispatch} failed: {redact(str(exc))}") from exc
        if text is None:
            return None
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            raise StorageError(f"the outcome recorded for {dispatch} is not one this binding wrote")
        return found

    async def aclose(self) -> None:
        if self.client is not None and self._owns_client:
            await self.client.aclose()
            self.client = None
            self._script = None


def _seq(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return int(text.partition("-")[2] or 0)


def _event(entry_id: Any, fields: dict[Any, Any]) -> RunEvent:
    raw = fields.get(b"e", fields.get("e"))
    data = json.loads(raw or "{}")
    data["cursor"] = str(_seq(entry_id))
    return RunEvent.from_dict(data)
