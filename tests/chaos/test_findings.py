"""Product bugs the chaos suite found, each reduced to a deterministic reproduction.

They run the real ``Worker`` and ``Supervisor`` in this process against real stores. Every
bug here is fixed: each test failed before its fix and guards it now (docs/chaos.md lists
the findings).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

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
    current_tool_context,
)
from harnessx._state import Delta, ToolStatus
from harnessx.store._protocol import Lease, RunRecord, Store
from harnessx.testing import ThrowawayCluster
from supervisor._supervisor import ROLE, Supervisor, SupervisorConfig

pytestmark = pytest.mark.process


def _agent(tool: Callable[[], Any], policy: str = "safe") -> Agent:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(text="working", tool_calls=[ToolCall("c1", "work", {})])
        return "done"

    agent = Agent(config=AgentConfig(system_prompt="finding"), provider=ScriptedProvider(reply))
    agent.tools.register(name="work", replay_policy=policy)(tool)
    return agent


def _registry(tool: Callable[[], Any], policy: str = "safe") -> AgentRegistry:
    registry = AgentRegistry()
    registry.register("finding", lambda: _agent(tool, policy))
    return registry


async def _submit(store: Store) -> tuple[str, str]:
    runtime = AgentRuntime(AgentRef("finding", "v1"), backend=store, execution="pool")
    handle = await runtime.submit("go")
    await runtime.stop()
    return handle.session_id, handle.run_id


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest, **options: Any) -> Store:
    """A store of ``kind`` for a test (each call a new backend on the same database)."""
    if kind == "sqlite":
        return SQLiteBackend(tmp_path / "db.sqlite3", **options)
    from harnessx.store import PostgresBackend

    backend: Store = PostgresBackend(request.getfixturevalue("pg_database"), **options)
    return backend


async def finished(store: Store, run_id: str) -> RunRecord | None:
    """The run's record once it is no longer running."""
    run = await store.get_run(run_id)
    return run if run is not None and run.status != "running" else None


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
        async with _running(Worker(worker_store, registry, WorkerConfig(concurrency=1))) as worker:
            # Claimed, stalled, fenced at the raw-result commit: the worker is done with it.
            await wait_until(
                lambda: worker.metrics.runs_claimed._value.get() >= 1 and not worker._tasks,
                "the first worker to claim the run and let it go",
            )
        supervisor = Supervisor(supervisor_store)
        term = await supervisor_store.try_leadership(ROLE)
        assert term is not None

        async def scanned_and_finished() -> RunRecord | None:
            # The supervisor scans as it does in service. The stalled worker's heartbeat may
            # have renewed the lease after the stall (nobody had taken it), so the orphan
            # shows once that renewal expires rather than at the first scan.
            await supervisor.scan(term)
            return await finished(client, run_id)

        # Another worker gets its chance to continue the run.
        async with _running(Worker(second_store, _registry(lambda: "ok"), WorkerConfig(concurrency=1))):
            run = await wait_until(scanned_and_finished, "the supervisor to requeue the run and it to finish")
        assert run.status == "completed", (run, await client.get_session(run.session_id))


async def test_a_run_whose_lease_could_not_be_given_back_is_not_stranded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 5: a worker whose drive failed and whose release failed too (the database
    restarting) left the lease to expire, but its heartbeat renewed every lease the process
    owned, so while it drove any other run the stranded one never expired."""
    calls = 0
    first_done = asyncio.Event()

    async def work() -> str:
        """Keep the worker's heartbeat going on the first run; return at once on the others."""
        nonlocal calls
        calls += 1
        if calls == 1:
            await first_done.wait()
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
                await wait_until(lambda: calls == 1, "the first run's tool call to start")
                # The next run's first load fails, and so does giving its lease back (which
                # the checkpoint that finishes the run does: it fails as a whole).
                failures = {"load_run": 1, "commit": 1}

                def fail_once(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
                    async def failing(*args: Any, **kwargs: Any) -> Any:
                        if failures[name] and (name != "commit" or kwargs.get("release")):
                            failures[name] -= 1
                            raise StorageError(f"{name} failed (injected)")
                        return await real(*args, **kwargs)

                    return failing

                for name in failures:
                    monkeypatch.setattr(worker_store, name, fail_once(name, getattr(worker_store, name)))
                _, stranded = await _submit(client)
                # While the first run's tool call goes on (and the heartbeat with it).
                run = await wait_until(
                    lambda: finished(client, stranded),
                    "the stranded run to finish (stranded behind a lease its worker kept renewing?)",
                    within=60,
                )
                assert calls >= 2 and not first_done.is_set()
                first_done.set()
                assert failures == {"load_run": 0, "commit": 0}
                assert run.status == "completed"
        finally:
            first_done.set()
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
            async with _running(Worker(worker_store, registry, WorkerConfig(concurrency=2))) as worker:
                await wait_until(
                    lambda: supervisor.is_leader and worker.registered.is_set(), "a live worker and a leader"
                )
                await asyncio.to_thread(cluster.restart, "fast")
                session_id, run_id = await _submit(client)
                run = await wait_until(lambda: finished(client, run_id), "the run to finish")
                session = await client.get_session(session_id)
        finally:
            supervisor.stop()
            await supervising
        # The submit's claim and the worker's: anything more is the supervisor taking it away.
        assert session is not None
        assert session.generation <= 2, f"generation {session.generation}, run {run.status}"
        assert run.status == "completed"


def counted_looks(*supervisors: Supervisor) -> dict[Supervisor, int]:
    """How many times each supervisor has checked or tried for the lead (a pass of its loop)."""
    looks = dict.fromkeys(supervisors, 0)
    for supervisor in supervisors:

        async def look(supervisor: Supervisor = supervisor, real: Any = supervisor._lead) -> Any:
            term = await real()
            looks[supervisor] += 1
            return term

        supervisor._lead = look  # type: ignore[method-assign]
    return looks


@pytest.mark.timeout(120)
async def test_one_supervisor_leads_after_a_database_restart(cluster: ThrowawayCluster) -> None:
    from harnessx.store import PostgresBackend

    async with (
        PostgresBackend(cluster.dsn) as first_store,
        PostgresBackend(cluster.dsn) as second_store,
    ):
        config = SupervisorConfig(scan_interval=0.1, leader_retry=0.2)
        first, second = Supervisor(first_store, config), Supervisor(second_store, config)
        looks = counted_looks(first, second)
        tasks = [asyncio.create_task(first.run())]
        await wait_until(lambda: first.is_leader, "the first supervisor to lead")
        tasks.append(asyncio.create_task(second.run()))
        await wait_until(lambda: looks[second] >= 1, "the second supervisor to look for the lead")
        assert first.term is not None and not second.is_leader
        before = first.term.epoch
        await asyncio.to_thread(cluster.restart, "fast")
        # The restart takes the leader's lock: whoever leads next holds a newer term...
        leader = await wait_until(
            lambda: next((s for s in (first, second) if s.term is not None and s.term.epoch > before), None),
            "a supervisor to lead after the restart",
        )
        # ...and the other one has looked at its own standing since then.
        other = second if leader is first else first
        seen = looks[other]
        await wait_until(lambda: looks[other] >= seen + 2, "the other supervisor to look again")
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
        await wait_until(lambda: supervisor.is_leader, "the supervisor to lead")
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

    in_flight, back = asyncio.Event(), asyncio.Event()

    async def work() -> str:
        """Outlast the outage."""
        in_flight.set()
        await back.wait()
        return "ok"

    async with (
        PostgresBackend(cluster.dsn) as client,
        PostgresBackend(cluster.dsn) as worker_store,
    ):
        config = WorkerConfig(concurrency=1, stats_interval=0.1)
        worker = Worker(worker_store, _registry(work), config)
        async with _running(worker):
            _, run_id = await _submit(client)
            # The outage starts with the tool call in flight (its dispatch committed).
            await asyncio.wait_for(in_flight.wait(), 30)
            await asyncio.to_thread(cluster.stop, "fast")
            await asyncio.sleep(8)  # the outage: longer than the store's ~4 s of retries
            await asyncio.to_thread(cluster.start)
            back.set()
            run = await wait_until(
                lambda: finished(client, run_id), "the run to finish after the outage", within=60
            )
            assert worker._fatal is None
        assert run.status == "completed"


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


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_tool_whose_dispatch_reply_arrives_after_a_takeover_does_not_run(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 6, from a full run (cut-connections, black-holed): a worker's dispatch intent
    committed, but the reply was held up past the lease; meanwhile the supervisor handed the
    run on, the new holder found the manual call uncertain, and the operator retried it. When
    the reply finally arrived, the old worker invoked the manual tool anyway, under its stale
    lease: a manual call run twice."""
    calls: list[int | None] = []

    def work() -> str:
        """A manual tool: it has an effect nobody may repeat."""
        calls.append(current_tool_context().fencing_token)
        return "sent"

    def open_store() -> Store:
        return _store(kind, tmp_path, request, lease_seconds=1)

    registry = _registry(work, policy="manual")
    async with open_store() as client, open_store() as zombie_store, open_store() as other_store:
        cut, healed = asyncio.Event(), asyncio.Event()
        real_commit, real_renew = zombie_store.commit, zombie_store.renew

        async def commit(lease: Lease, state: Any, delta: Delta, *args: Any, **kwargs: Any) -> None:
            await real_commit(lease, state, delta, *args, **kwargs)  # committed at the server...
            if any(entry.status == ToolStatus.STARTED for entry in delta.tools):
                cut.set()
                await healed.wait()  # ...but the reply is held up in a black-holed connection

        async def renew(leases: list[Lease]) -> Any:
            if cut.is_set():
                raise StorageError("renewing leases: the connection is black-holed (injected)")
            return await real_renew(leases)

        monkeypatch.setattr(zombie_store, "commit", commit)
        monkeypatch.setattr(zombie_store, "renew", renew)
        session_id, run_id = await _submit(client)
        zombie = Worker(zombie_store, registry, WorkerConfig(concurrency=1))
        async with _running(zombie):
            await asyncio.wait_for(cut.wait(), 30)
            # The lease runs out; the supervisor hands the run to another worker, which finds
            # the manual call uncertain: the run waits for a person.
            supervisor = Supervisor(other_store, SupervisorConfig(scan_interval=0.05))
            supervising = asyncio.create_task(supervisor.run())
            try:
                async with _running(Worker(other_store, registry, WorkerConfig(concurrency=1))):
                    deadline = time.monotonic() + 30
                    while (run := await client.get_run(run_id)) is None or run.status != "awaiting_input":
                        assert time.monotonic() < deadline, run
                        await asyncio.sleep(0.05)
            finally:
                supervisor.stop()
                await supervising
            healed.set()  # the reply arrives; renewals still fail, so none can stop the zombie first
            deadline = time.monotonic() + 30
            while zombie.active:
                assert time.monotonic() < deadline, "the old worker kept the run"
                await asyncio.sleep(0.05)
        assert calls == [], f"the manual tool ran under the stale lease (generation {calls})"
        session = await client.get_session(session_id)
        assert session is not None and session.generation > 2


async def _seqs(store: Store, run_id: str) -> list[int]:
    return [int(event.cursor) for event in await store.read_events(run_id, 0, 1000)]


def _failing_raw_result(store: Store, monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[int]:
    """Make the commit of the first raw result fail once with ``error``, writing nothing."""
    failed: list[int] = []
    real = store.commit

    async def commit(lease: Lease, state: Any, delta: Delta, *args: Any, **kwargs: Any) -> None:
        if not failed and any(entry.status == ToolStatus.RAW_COMPLETED for entry in delta.tools):
            failed.append(len(delta.events))
            raise error
        await real(lease, state, delta, *args, **kwargs)

    monkeypatch.setattr(store, "commit", commit)
    return failed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_checkpoint_that_fails_for_good_leaves_the_run_to_its_next_holder(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 7, from a quick run (restart-postgres on a busy machine): a raw result's
    commit gave up during a slow restart; the driver then committed the run's failure from
    its in-memory state, numbering its events after the lost ones (a gap in the stream), with
    the tool call still in flight; every resume of the failed run then failed again."""
    calls: list[int | None] = []

    def work() -> str:
        """A safe tool."""
        calls.append(current_tool_context().fencing_token)
        return "ok"

    async with _store(kind, tmp_path, request) as store:
        failed = _failing_raw_result(store, monkeypatch, StorageError("cannot reach the store (injected)"))
        runtime = AgentRuntime(_agent(work), backend=store)
        session_id = await runtime.start()
        handle = await runtime.submit("go")
        with pytest.raises(StorageError, match="injected"):
            await handle.result()
        assert failed and calls == [1]
        run = await store.get_run(handle.run_id)
        assert run is not None and run.status == "running"  # nothing written from a state in doubt
        resumed = await runtime.resume(session_id)
        assert resumed is not None
        result = await resumed.result()
        await runtime.stop()
        assert result.status.value == "completed", result
        seqs = await _seqs(store, handle.run_id)
        assert seqs == list(range(1, len(seqs) + 1))
        assert len(calls) == 2  # a safe call cut off before its raw result committed runs again


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_run_that_failed_with_a_call_in_flight_can_be_resumed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 7's other half: a run can still fail with a call in flight (an unexpected error
    while committing its raw result), and resume() continues failed runs; it used to fail
    again at once ('tool calls ... are in flight; recover() the state first'), every time.
    The failure's events must follow the stream densely too."""
    calls: list[int | None] = []

    def work() -> str:
        """A safe tool."""
        calls.append(current_tool_context().fencing_token)
        return "ok"

    async with _store(kind, tmp_path, request) as store:
        _failing_raw_result(store, monkeypatch, RuntimeError("unexpected (injected)"))
        runtime = AgentRuntime(_agent(work), backend=store)
        session_id = await runtime.start()
        first = await runtime.run("go")
        assert first.status.value == "failed" and calls == [1]
        seqs = await _seqs(store, first.run_id)
        assert seqs == list(range(1, len(seqs) + 1)), "a gap where the failed commit's events were"
        resumed = await runtime.resume(session_id)
        assert resumed is not None
        result = await resumed.result()
        await runtime.stop()
        assert result.status.value == "completed", result
        seqs = await _seqs(store, first.run_id)
        assert seqs == list(range(1, len(seqs) + 1))
        assert len(calls) == 2
