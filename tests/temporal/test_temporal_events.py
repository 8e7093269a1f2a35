"""RedisEvents against a real Redis: many followers waiting at once leave the pool usable."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from harnessx.temporal import RedisEvents
from harnessx.testing import RedisServer

pytestmark = pytest.mark.timeout(60)


async def test_waiting_followers_leave_connections_for_reads(redis_server: RedisServer) -> None:
    # Each blocking wait holds a pooled connection; redis-py refuses one past max_connections.
    client = Redis.from_url(redis_server.url, max_connections=4)
    events = RedisEvents(client=client)
    try:
        waits = [asyncio.create_task(events.wait(f"quiet-{i}", 0, 2.0)) for i in range(10)]
        await asyncio.sleep(0.2)
        assert await events.read("quiet-0", 0) == []  # a connection is free for this
        assert not any(await asyncio.gather(*waits))
    finally:
        await client.aclose()
