"""The supervisor's housekeeping on both backends: retention on the leader only, fenced by its
term; one liveness read for every worker; stopped workers forgotten; queue statistics read
less often than orphans are scanned."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from durable_support import BackendTarget, make_agent
from lifecycle_support import TABLES, age, rows_of

from harnessx import Agent, AgentRuntime, ScriptedProvider
from harnessx._errors import LeadershipLostError
from harnessx._retention import RetentionPolicy
from harnessx.store._protocol import Leadership, WorkerInfo
from supervisor import Supervisor, SupervisorConfig
from supervisor._supervisor import ROLE

MONTH = 30 * 86400.0


async def old_finished(store: Any, count: int) -> list[str]:
    sessions = []
    for _ in range(count):
        async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
            sessions.append((await runtime.run("Write the report.")).session_id)
    for session_id in sessions:
        await age(store, session_id, 40)
    return sessions


def sample(supervisor: Supervisor, name: str, **labels: str) -> float:
    value = supervisor.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


async def until(condition: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        assert time.monotonic() < deadline, "the condition was not met in time"
        await asyncio.sleep(0.02)


async def test_the_leader_prunes_in_batches_and_the_standby_does_not(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as first_store, target.open() as second_store:
        sessions = await old_finished(store, 3)
        async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
            recent = (await runtime.run("Write the report.")).session_id
        events = sum([(await rows_of(store, sid))["events"] for sid in sessions])
        # No grace: on PostgreSQL the events a prune leaves for their day go at the next
        # housekeeping (today's partition is not past, so row by row).
        config = SupervisorConfig(
            scan_interval=0.02,
            leader_retry=0.02,
            retention=RetentionPolicy(MONTH, batch=1),
            housekeeping_interval=0.05,
            partitions_grace=0.0,
        )
        supervisors = [Supervisor(first_store, config), Supervisor(second_store, config)]
        running = [asyncio.create_task(s.run()) for s in supervisors]
        try:

            async def all_gone() -> bool:
                return all([await store.get_session(sid) is None for sid in sessions])

            await until(all_gone)
            await until(lambda: _passes(supervisors))

            async def events_counted() -> bool:
                counted = [
                    sample(s, "harnessx_retention_rows_pruned_total", table="events") for s in supervisors
                ]
                return sum(counted) == events

            await until(events_counted)
        finally:
            for supervisor in supervisors:
                supervisor.stop()
            await asyncio.gather(*running)
        (leader,) = [s for s in supervisors if sample(s, "harnessx_retention_sessions_pruned_total")]
        assert sample(leader, "harnessx_retention_sessions_pruned_total") == 3
        assert sample(leader, "harnessx_retention_rows_pruned_total", table="events") == events
        assert sample(leader, "harnessx_retention_batch_seconds_count") >= 3  # one session each
        assert 0 < sample(leader, "harnessx_retention_oldest_activity_age_seconds") < 3600
        for sid in sessions:
            assert await rows_of(store, sid) == dict.fromkeys(TABLES, 0)
        assert (await rows_of(store, recent))["runs"] == 1


async def _passes(supervisors: list[Supervisor]) -> bool:
    return any(sample(s, "harnessx_retention_pass_seconds_count") >= 1 for s in supervisors)


async def test_the_leader_compacts_the_text_of_runs_that_finished_long_enough_ago(
    target: BackendTarget,
) -> None:
    answer = "The EMEA region grew by three percent this quarter, APAC by five."
    agent = Agent(provider=ScriptedProvider([answer], chunk_size=4))
    async with target.open() as store, target.open() as leading:
        async with AgentRuntime(agent, backend=store) as runtime:
            handle = await runtime.submit("Report.")  # streamed: 17 pieces
            assert (await handle.result()).ok
        pieces = len(await store.read_events(handle.run_id, 0)) - 3  # all but the answer's last 3
        # Compacting runs finished a second ago, after each retention interval (no retention).
        config = SupervisorConfig(
            scan_interval=0.02, leader_retry=0.02, retention_interval=0.05, compact_after=1.0
        )
        supervisor = Supervisor(leading, config)
        running = asyncio.create_task(supervisor.run())
        try:

            async def compacted() -> bool:
                return sample(supervisor, "harnessx_compaction_runs_total") == 1

            await until(compacted)
        finally:
            supervisor.stop()
            await running
        assert sample(supervisor, "harnessx_compaction_rows_total") == pieces - 1
        events = await store.read_events(handle.run_id, 0)
        assert [e.type.value for e in events][:1] == ["text_delta"] and len(events) == 4
        assert events[0].data == answer


async def test_a_deposed_leader_prunes_nothing(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as other:
        (session_id,) = await old_finished(store, 1)
        old = await store.try_leadership(ROLE)
        assert old is not None
        await store.release_leadership(old)
        newer = await other.try_leadership(ROLE)
        assert newer is not None and newer.epoch > old.epoch
        with pytest.raises(LeadershipLostError):
            await store.prune(MONTH, limit=10, term=old)
        with pytest.raises(LeadershipLostError):
            await store.prune_workers(old, 0.0)
        assert (await rows_of(store, session_id))["runs"] == 1
        batch = await other.prune(MONTH, limit=10, term=newer)
        assert batch.pruned == [session_id]


async def test_worker_liveness_is_read_once_and_stopped_workers_are_forgotten(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as live:
        dead = []
        for _ in range(3):
            gone = target.open()
            await gone.initialize()
            await gone.register_worker(WorkerInfo(gone.process_id, "host", 1, ["a@v1"], 1))
            dead.append(gone.process_id)
            await gone.aclose()  # its liveness lock goes with it
        await live.register_worker(WorkerInfo(live.process_id, "host", 2, ["a@v1"], 1))
        judged = {w.id: w.alive for w in await store.running_workers()}
        assert judged == {**dict.fromkeys(dead, False), live.process_id: True}

        supervisor = Supervisor(store, SupervisorConfig(worker_retention=3600.0))
        term = await store.try_leadership(ROLE)
        assert term is not None
        await supervisor.scan(term)
        assert [w.id for w in await store.running_workers()] == [live.process_id]
        assert sample(supervisor, "harnessx_workers_live") == 1
        assert sample(supervisor, "harnessx_workers_pruned_total") == 0  # stopped just now: kept
        assert len(await store.list_workers()) == 4

        assert await store.prune_workers(term, 0.0) == 3
        assert [w.id for w in await store.list_workers()] == [live.process_id]


async def test_queue_statistics_are_read_less_often_than_orphans_are_scanned(target: BackendTarget) -> None:
    async with target.open() as store:
        calls = 0
        read = store.queue_stats

        async def counted() -> Any:
            nonlocal calls
            calls += 1
            return await read()

        store.queue_stats = counted
        supervisor = Supervisor(store, SupervisorConfig(queue_interval=3600.0))
        term = await store.try_leadership(ROLE)
        assert isinstance(term, Leadership)
        for _ in range(5):
            await supervisor.scan(term)
        assert calls == 1 and sample(supervisor, "harnessx_supervisor_scans_total") == 5
