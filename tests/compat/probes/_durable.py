"""Where a durable probe's runs live: a SQLite file in the probe's folder (both packages),
or, when ``HARNESSX_PROBE_TEMPORAL`` holds ``{"target", "redis", "task_queue"}`` as JSON, a
Temporal cluster (this project only: ``tests/temporal/test_temporal_probes.py``). On
Temporal a runtime is built by reference (``AgentRef(name, "v1")``) and this process runs
the worker, whose registry holds the probe's agent factories."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from harnessx import Agent, AgentRuntime, SQLiteBackend

ON_TEMPORAL = bool(os.environ.get("HARNESSX_PROBE_TEMPORAL"))


@asynccontextmanager
async def durable(folder: str, agents: dict[str, Callable[[], Agent]]) -> AsyncIterator[Any]:
    """Yields ``(backend, runtime)``, ``runtime(name, **options)`` an ``AgentRuntime`` of the
    agent ``agents[name]`` makes."""
    settings = os.environ.get("HARNESSX_PROBE_TEMPORAL")
    if not settings:
        async with SQLiteBackend(str(Path(folder) / "runtime.db")) as backend:
            yield backend, lambda name, **options: AgentRuntime(agents[name](), backend=backend, **options)
        return
    from harnessx import AgentRef, AgentRegistry
    from harnessx.temporal import RedisEvents, TemporalBackend

    where = json.loads(settings)
    registry = AgentRegistry()
    for name, factory in agents.items():
        registry.register(name, factory, version="v1")
    backend = await TemporalBackend.connect(
        where["target"],
        events=RedisEvents(where["redis"]),
        registry=registry,
        task_queue=where["task_queue"],
        heartbeat_timeout=2.0,
    )
    await backend.initialize()
    try:
        async with await backend.worker():
            yield (
                backend,
                lambda name, **options: AgentRuntime(AgentRef(name, "v1"), backend=backend, **options),
            )
    finally:
        await backend.aclose()
