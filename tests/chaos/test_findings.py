"""Product bugs the chaos suite found, each reduced to a deterministic reproduction.

They run the real ``Worker`` and ``Supervisor`` in this process against real stores. Each
is marked ``xfail(strict=True)`` with the bug as its reason: when the product is fixed the
test passes, strict xfail turns that into a failure, and the marker should be removed so
the test guards the fix from then on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from harness_workers._worker import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentConfig,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    SQLiteBackend,
    StorageError,
    ToolCall,
)
from harnessx.store._protocol import Store
from harnessx.testing import ThrowawayCluster
from supervisor._supervisor import ROLE, Supervisor, SupervisorConfig

pytestmark = pytest.mark.process


def _registry(tool: Callable[[], Any]) -> AgentRegistry:
    def build() -> Agent:
        def reply(request: ScriptedRequest) -> ProviderResponse | str:
            if request.turn == 0:
                return ProviderResponse(text="working", tool_calls=[ToolCall("c1", "work", {})])
            return "done"

        agent = Agent(config=AgentConfig(system_prompt="finding"), provider=ScriptedProvider(reply))
        agent.tools.register(name="work", replay_policy="safe")(tool)
        return agent

    registry = AgentRegistry()
    registry.register("finding", build)
    return registry


async def _submit(store: Store) -> tuple[str, str]:
    runtime = AgentRuntime(AgentRef("finding", "v1"), backend=store, execution="pool")
    handle = await runtime.submit("go")
    await runtime.stop()
    return handle.session_id, handle.run_id


@asynccontextmanager
async def _running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.drain()
        await asyncio.wait_for(task, 30)


async def test_a_run_whose_lease_expired_is_not_stranded(tmp_path: Path) -> None:
    async def work() -> str:
        """Stall the event loop past the lease, like a long GC pause."""
        time.sleep(1.5)  # noqa: ASYNC251 - blocking the loop is the point: no renewals meanwhile
        return "ok"

    registry = _registry(work)
    path = tmp_path / "db.sqlite3"
    async with (
        SQLiteBackend(path, lease_seconds=1) as client,
        SQLiteBackend(path, lease_seconds=1) as worker_store,
        SQLiteBackend(path, lease_seconds=1) as supervisor_store,
        SQLiteBackend(path, lease_seconds=1) as second_store,
    ):
        _, run_id = await _submit(client)
        async with _running(Worker(worker_store, registry, WorkerConfig(concurrency=1))):
            await asyncio.sleep(3)  # claimed, stalled, fenced at the raw-result commit
        supervisor = Supervisor(supervisor_store)
        term = await supervisor_store.try_leadership(ROLE)
        assert term is not None
        for _ in range(3):
            await supervisor.scan(term)
        # Another worker gets its chance to continue the run.
        async with _running(Worker(second_store, _registry(lambda: "ok"), WorkerConfig(concurrency=1))):
            deadline = time.monotonic() + 20
            while (run := await client.get_run(run_id)) is not None and run.status == "running":
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
        assert run is not None and run.status == "completed", (run, await client.get_session(run.session_id))


async def test_a_run_whose_lease_could_not_be_given_back_is_not_stranded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 5: a worker whose drive failed and whose release failed too (the database
    restarting) left the lease to expire, but its heartbeat renewed every lease the process
    owned, so while it drove any other run the stranded one never expired."""
    calls = 0

    async def work() -> str:
        """Keep the worker's heartbeat going on the first run; return at once on the others."""
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(12)
        return "ok"

    path = tmp_path / "db.sqlite3"
    async with (
        SQLiteBackend(path, lease_seconds=1) as client,
        SQLiteBackend(path, lease_seconds=1) as worker_store,
        SQLiteBackend(path, lease_seconds=1) as supervisor_store,
    ):
        worker = Worker(worker_store, _registry(work), WorkerConfig(concurrency=2, drain_timeout=0.5))
        supervisor = Supervisor(supervisor_store, SupervisorConfig(scan_interval=0.1))
        supervising = asyncio.create_task(supervisor.run())
        try:
            async with _running(worker):
                await _submit(client)
                while calls == 0:
                    await asyncio.sleep(0.05)
                # The next run's first load fails, and so does giving its lease back.
                failures = {"load_state": 1, "release": 1}

                def fail_once(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
                    async def failing(*args: Any) -> Any:
                        if failures[name]:
                            failures[name] -= 1
                            raise StorageError(f"{name} failed (injected)")
                        return await real(*args)

                    return failing

                for name in failures:
                    monkeypatch.setattr(worker_store, name, fail_once(name, getattr(worker_store, name)))
                _, stranded = await _submit(client)
                deadline = time.monotonic() + 8  # the first run's tool call lasts 12 s
                while (run := await client.get_run(stranded)) is not None and run.status == "running":
                    assert time.monotonic() < deadline, "stranded behind a lease its worker kept renewing"
                    await asyncio.sleep(0.1)
                assert failures == {"load_state": 0, "release": 0}
                assert run is not None and run.status == "completed"
        finally:
            supervisor.stop()
            await supervising


@pytest.fixture
def cluster(pg_bin_dir: Path) -> Any:
    with ThrowawayCluster(pg_bin_dir) as created:
        yield created


@pytest.mark.timeout(120)
async def test_a_live_worker_is_not_judged_dead_after_a_database_restart(cluster: ThrowawayCluster) -> None:
    from harnessx.store import PostgresBackend

    async def work() -> str:
        """Take a moment."""
        await asyncio.sleep(0.3)
        return "ok"

    registry = _registry(work)
    async with (
        PostgresBackend(cluster.dsn, lease_seconds=30) as client,
        PostgresBackend(cluster.dsn, lease_seconds=30) as worker_store,
        PostgresBackend(cluster.dsn, lease_seconds=30) as supervisor_store,
    ):
        supervisor = Supervisor(supervisor_store, SupervisorConfig(scan_interval=0.1))
        supervising = asyncio.create_task(supervisor.run())
        try:
            async with _running(Worker(worker_store, registry, WorkerConfig(concurrency=2))):
                await asyncio.sleep(1)
                await asyncio.to_thread(cluster.restart, "fast")
                session_id, run_id = await _submit(client)
                deadline = time.monotonic() + 10
                while (run := await client.get_run(run_id)) is not None and run.status == "running":
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
                session = await client.get_session(session_id)
        finally:
            supervisor.stop()
            await supervising
        # The submit's claim and the worker's: anything more is the supervisor taking it away.
        assert session is not None and run is not None
        assert session.generation <= 2, f"generation {session.generation}, run {run.status}"
        assert run.status == "completed"


@pytest.mark.timeout(120)
async def test_one_supervisor_leads_after_a_database_restart(cluster: ThrowawayCluster) -> None:
    from harnessx.store import PostgresBackend

    async with (
        PostgresBackend(cluster.dsn) as first_store,
        PostgresBackend(cluster.dsn) as second_store,
    ):
        config = SupervisorConfig(scan_interval=0.1, leader_retry=0.2)
        first, second = Supervisor(first_store, config), Supervisor(second_store, config)
        tasks = [asyncio.create_task(first.run())]
        await asyncio.sleep(0.5)
        tasks.append(asyncio.create_task(second.run()))
        await asyncio.sleep(0.5)
        assert first.is_leader and not second.is_leader
        await asyncio.to_thread(cluster.restart, "fast")
        await asyncio.sleep(3)
        both = first.is_leader and second.is_leader
        for supervisor in (first, second):
            supervisor.stop()
        await asyncio.gather(*tasks)
        assert not both, "two supervisors act as leader at once"


@pytest.mark.timeout(120)
async def test_a_supervisor_outlives_a_database_outage_longer_than_its_retries(
    cluster: ThrowawayCluster,
) -> None:
    from harnessx.store import PostgresBackend

    async with PostgresBackend(cluster.dsn) as store:
        supervisor = Supervisor(store, SupervisorConfig(scan_interval=0.1, leader_retry=0.2))
        task = asyncio.create_task(supervisor.run())
        await asyncio.sleep(0.5)
        assert supervisor.is_leader
        await asyncio.to_thread(cluster.stop, "fast")
        outage = time.monotonic()
        # The store gives up after about 4 s of retries; the outage lasts at least twice that,
        # and until the supervisor reports itself unready (how soon depends on the machine).
        while time.monotonic() - outage < 8 or supervisor.readiness_problem() is None:
            assert not task.done(), task.exception() if task.done() else None
            assert time.monotonic() - outage < 60, "the supervisor never reported the outage"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(cluster.start)
        deadline = time.monotonic() + 20
        while not (supervisor.is_leader and supervisor.readiness_problem() is None):
            assert not task.done(), task.exception() if task.done() else None
            assert time.monotonic() < deadline, "the supervisor did not lead again"
            await asyncio.sleep(0.1)
        supervisor.stop()
        await task


@pytest.mark.timeout(120)
async def test_a_worker_and_its_run_outlive_a_database_outage_longer_than_its_retries(
    cluster: ThrowawayCluster,
) -> None:
    from harnessx.store import PostgresBackend

    async def work() -> str:
        """Outlast the outage."""
        await asyncio.sleep(10)
        return "ok"

    async with (
        PostgresBackend(cluster.dsn) as client,
        PostgresBackend(cluster.dsn) as worker_store,
    ):
        config = WorkerConfig(concurrency=1, control_interval=0.1, stats_interval=0.1)
        worker = Worker(worker_store, _registry(work), config)
        async with _running(worker):
            _, run_id = await _submit(client)
            while not worker.active:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(cluster.stop, "fast")
            await asyncio.sleep(8)  # longer than the store's ~4 s of retries
            await asyncio.to_thread(cluster.start)
            deadline = time.monotonic() + 30
            while (run := await client.get_run(run_id)) is not None and run.status == "running":
                assert time.monotonic() < deadline, "the run did not finish after the outage"
                await asyncio.sleep(0.1)
            assert worker._fatal is None
        assert run is not None and run.status == "completed"


@pytest.mark.timeout(120)
async def test_a_leader_deposed_by_a_database_restart_cannot_recover_orphans(
    cluster: ThrowawayCluster,
) -> None:
    """Finding 3, as a full run met it after the first fix: the restart takes the leader's
    lock, a standby takes over, and the old leader, which checked its lock just before,
    recovers an orphan anyway. Now its write carries its epoch and the database refuses it."""
    from harnessx._errors import LeadershipLostError
    from harnessx.store import PostgresBackend

    async with (
        PostgresBackend(cluster.dsn) as client,
        PostgresBackend(cluster.dsn) as old_store,
        PostgresBackend(cluster.dsn) as new_store,
    ):
        session_id, _ = await _submit(client)
        holder = PostgresBackend(cluster.dsn)
        await holder.initialize()
        lease = await holder.claim(session_id, "worker")
        await holder.aclose()  # the holder dies: its lease is an orphan
        old = await old_store.try_leadership(ROLE)
        assert old is not None and await old_store.holds_leadership(old)  # checked...
        (orphan,) = await old_store.find_orphans()
        await asyncio.to_thread(cluster.restart, "fast")  # ...deposed...
        deadline = time.monotonic() + 30
        while (new := await new_store.try_leadership(ROLE)) is None:
            assert time.monotonic() < deadline, "the standby never took over"
            await asyncio.sleep(0.1)
        assert new.epoch == old.epoch + 1
        with pytest.raises(LeadershipLostError):  # ...and acts: refused
            await old_store.recover_orphan(old, orphan, requeue=True)
        session = await client.get_session(session_id)
        assert session is not None and session.generation == lease.generation
        assert await new_store.recover_orphan(new, orphan, requeue=True) is not None  # the new leader may
        session = await client.get_session(session_id)
        assert session is not None and session.generation == lease.generation + 1
