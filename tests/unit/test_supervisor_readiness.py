"""A leading supervisor whose scans fail reports itself unready at once, not after its
health window: noticing that the leadership lock went with the store can take longer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from harnessx import StorageError
from harnessx.store import SQLiteBackend
from harnessx.store._protocol import Leadership, PoolScan
from supervisor import Supervisor, SupervisorConfig


async def test_a_failing_scan_makes_the_leader_unready_until_a_scan_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SQLiteBackend(tmp_path / "runs.db") as store:
        supervisor = Supervisor(store, SupervisorConfig(scan_interval=0.01, leader_retry=0.01))
        failing = True
        real_scan = store.pool_scan

        async def pool_scan(term: Leadership, tracked: Sequence[str]) -> PoolScan:
            if failing:
                raise StorageError("cannot reach the store (injected)")
            return await real_scan(term, tracked)

        monkeypatch.setattr(store, "pool_scan", pool_scan)
        task = asyncio.create_task(supervisor.run())
        try:
            async with asyncio.timeout(10):
                while supervisor.readiness_problem() is None:
                    await asyncio.sleep(0.01)
            assert supervisor.is_leader
            assert "injected" in (supervisor.readiness_problem() or "")
            assert supervisor.health_problem() is None  # still within its health window
            failing = False
            async with asyncio.timeout(10):
                while supervisor.readiness_problem() is not None:
                    await asyncio.sleep(0.01)
        finally:
            supervisor.stop()
            await task
