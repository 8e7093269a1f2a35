"""How many round trips a run makes to its store: counted on the wire, so exact.

PostgreSQL through a loopback proxy that counts the client's Sync and Query messages;
SQLite by its backend's calls to the database thread (``harnessx.testing._round_trips``).
Counted after warm-up runs, so that no statement is being prepared for the first time.
A count that changes is either a regression or an improvement to record here (and in
docs/benchmarks.md): the failure lists every round trip with its statements.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from durable_support import BackendTarget, make_agent

from harnessx import AgentRef, AgentRuntime
from harnessx.testing._round_trips import PostgresRoundTrips, SQLiteRoundTrips

# A fresh run in the seed's pattern: a new AgentRuntime per request, one tool call, an answer.
FRESH_RUN = {"postgres": 7, "sqlite": 7}
# Submitting a run to the pool from a new runtime (the workers' round trips not counted).
POOL_SUBMISSION = {"postgres": 1, "sqlite": 1}


@asynccontextmanager
async def counted(target: BackendTarget) -> AsyncIterator[tuple[Any, Any]]:
    """The target's backend, opened through a round-trip counter, and the counter."""
    if target.kind == "sqlite":
        async with target.open() as backend:
            with SQLiteRoundTrips(backend) as counter:
                yield backend, counter
        return
    async with PostgresRoundTrips(target.location) as proxy, target.open_at(proxy.dsn) as backend:
        yield backend, proxy


def of_the_run(counter: Any) -> int:
    """Round trips the run made: the process's copy of the model rate limits, which every
    runtime on a store shares and reads again in the background at most every 5 s, is not the
    run's, nor is SQLite's look for pause/cancel requests every 0.25 s while a lease is held
    (``wait_for_control``): either would fall in the count only now and then."""
    background = ("rate_limits", "SELECT id, control FROM sessions")
    return sum(
        1 for trip in counter.trips if not any(b in statement for statement in trip for b in background)
    )


async def fresh_run(backend: Any) -> None:
    async with AgentRuntime(make_agent(policy="safe"), backend=backend) as runtime:
        result = await runtime.run("Write the report.")
    assert result.ok, result


async def test_a_fresh_run_makes_a_known_number_of_round_trips(target: BackendTarget) -> None:
    async with counted(target) as (backend, counter):
        for _ in range(2):
            await fresh_run(backend)  # every statement prepared once
        counter.reset()
        await fresh_run(backend)
        assert of_the_run(counter) == FRESH_RUN[target.kind], counter.describe()


async def pool_submission(backend: Any, **schedule: Any) -> str:
    runtime = AgentRuntime(AgentRef("sales", "v1"), backend=backend, execution="pool")
    try:
        return (await runtime.submit("Write the report.", **schedule)).run_id
    finally:
        await runtime.stop()


async def test_a_pool_submission_makes_a_known_number_of_round_trips(target: BackendTarget) -> None:
    async with counted(target) as (backend, counter):
        for _ in range(2):
            await pool_submission(backend)
        counter.reset()
        await pool_submission(backend)
        assert of_the_run(counter) == POOL_SUBMISSION[target.kind], counter.describe()


async def test_a_scheduled_pool_submission_is_as_many_round_trips_and_keeps_its_schedule(
    target: BackendTarget,
) -> None:
    # Priority, concurrency key, tenant and delay go with the new session's one statement
    # (they used to make the submission write the session, claim it and create the run apart).
    schedule = {
        "priority": 4,
        "concurrency_key": "crm",
        "tenant": "acme",
        "not_before": dt.timedelta(hours=1),
    }
    async with counted(target) as (backend, counter):
        for _ in range(2):
            await pool_submission(backend, **schedule)
        counter.reset()
        run_id = await pool_submission(backend, **schedule)
        assert of_the_run(counter) == POOL_SUBMISSION[target.kind], counter.describe()
        taken = await backend.schedule_of(run_id)
        assert taken is not None and taken.queued
        assert (taken.priority, taken.concurrency_key, taken.tenant) == (4, "crm", "acme")
        assert taken.not_before is not None and taken.not_before - taken.queued_at == pytest.approx(
            3600, abs=5
        )
        assert [share.queued for share in await backend.tenant_shares() if share.tenant == "acme"] == [3]
        await backend.publish_agent_defaults({"sales@v1": (7, None)})
        defaulted = await backend.schedule_of(await pool_submission(backend, concurrency_key="crm"))
        assert defaulted is not None and (defaulted.priority, defaulted.tenant) == (7, "crm")
        assert defaulted.not_before is None


async def test_the_proxy_counts_each_wait_for_the_server(postgres_dsn: str) -> None:
    """The counter itself: a statement is one round trip once prepared (its first use
    prepares it: one more), a transaction block adds its BEGIN and COMMIT."""
    import asyncpg  # type: ignore[import-untyped]

    async with PostgresRoundTrips(postgres_dsn) as proxy:
        conn = await asyncpg.connect(proxy.dsn)
        try:
            proxy.reset()
            await conn.fetchval("SELECT $1::int", 1)
            assert proxy.count == 2, proxy.describe()  # prepare, then bind and execute
            proxy.reset()
            await conn.fetchval("SELECT $1::int", 2)
            assert proxy.count == 1, proxy.describe()
            proxy.reset()
            async with conn.transaction():
                await conn.fetchval("SELECT $1::int", 3)
            assert proxy.count == 3, proxy.describe()
            assert proxy.trips[0][0].startswith("BEGIN") and proxy.trips[2][0].startswith("COMMIT")
        finally:
            await conn.close()


async def test_the_sqlite_counter_counts_calls_and_commits(tmp_path: Any) -> None:
    from harnessx import SQLiteBackend

    async with SQLiteBackend(tmp_path / "db.sqlite3") as backend:
        with SQLiteRoundTrips(backend) as counter:
            await backend.create_session("s", None, {})
            await backend.get_session("s")
        assert (counter.count, counter.transactions, counter.commits) == (2, 1, 1), counter.describe()
        await backend.get_session("s")
        assert counter.count == 2  # no longer counting


async def test_the_one_statement_load_reads_what_get_run_reads(pg_database: str) -> None:
    """load_run repeats get_run's columns (run_record reads them by position): a column
    added to one must be added to the other."""
    from harnessx.store import PostgresBackend
    from harnessx.store._queries import load_queries

    queries = load_queries("postgres")
    async with PostgresBackend(pg_database) as backend, backend._pool.acquire() as conn:
        run = [(a.name, a.type.name) for a in (await conn.prepare(queries["get_run"])).get_attributes()]
        load = [(a.name, a.type.name) for a in (await conn.prepare(queries["load_run"])).get_attributes()]
        assert [t for _, t in load[: len(run)]] == [t for _, t in run]
        # Then the session, the conversation, the tool calls, their results and the kept
        # rate reservations' buckets.
        assert [t for _, t in load[len(run) :]] == ["record", "text[]", "record[]", "record[]", "text[]"]


async def test_loading_a_claimed_run_reads_row_session_and_state_at_once(target: BackendTarget) -> None:
    """What a worker reads for a run it claimed (Store.load_run) is what get_run,
    get_session and load_state read one by one."""
    async with target.open() as backend:
        async with AgentRuntime(make_agent(policy="safe"), backend=backend) as runtime:
            result = await runtime.run("Write the report.")
        loaded = await backend.load_run(result.run_id)
        assert loaded is not None and loaded.problem is None
        assert loaded.record == await backend.get_run(result.run_id, messages=False)
        assert loaded.session == await backend.get_session(result.session_id)
        assert loaded.state == await backend.load_state(result.run_id)
        assert await backend.load_run("no-such-run") is None


async def test_the_last_checkpoint_gives_the_lease_back_and_keeps_the_final_phase(
    target: BackendTarget,
) -> None:
    """The finishing checkpoint releases the lease in its own transaction; on PostgreSQL
    the lease changing hands settles the session row's progress, which must not put the
    phase of the checkpoint before it back over the finished run's (migration 0010)."""
    async with counted(target) as (backend, counter):
        async with AgentRuntime(make_agent(policy="safe"), backend=backend) as runtime:
            result = await runtime.run("Write the report.")
            assert result.ok
            assert not any("lease_owner = NULL" in s for trip in counter.trips[:-1] for s in trip)
        session = await backend.get_session(result.session_id)
        assert session is not None and session.lease_owner is None
        record = await backend.get_run(result.run_id)
        assert record is not None and (record.status, record.phase) == ("completed", "finish")
        assert (await backend.load_state(result.run_id)).phase == "finish"
        # Another process can take the session at once.
        async with target.open() as other:
            lease = await other.claim(result.session_id, "next")
            await other.release(lease)


async def test_a_worker_drives_a_claimed_run_in_a_known_number_of_round_trips(pg_database: str) -> None:
    """A pool worker's round trips for one run it claims: the claim, one load (its row,
    session and state), five checkpoints of which the last gives the lease back (eight
    boundaries, two pairs of them committed together). The
    worker's own loops (heartbeat, controls, queue stats, idle claims) are not counted."""
    from chaos.agents import registry
    from harness_workers._worker import Worker, WorkerConfig
    from harnessx.store import PostgresBackend

    # The queue claim's statement begins "WITH claimer" (its liveness look) before it calls
    # harnessx_claim_runs; an idle worker claims many times.
    own = ("workers", "pending", "LISTEN", "queue", "candidates", "claimer", "claim_runs", "rate_limits")
    async with (
        PostgresRoundTrips(pg_database) as client_proxy,
        PostgresBackend(client_proxy.dsn) as client,
        PostgresRoundTrips(pg_database) as proxy,
        PostgresBackend(proxy.dsn) as store,
    ):
        worker = Worker(store, registry, WorkerConfig(concurrency=1, stats_interval=60))
        running = asyncio.create_task(worker.run())
        try:
            for attempt in range(3):
                if attempt == 2:
                    proxy.reset()
                runtime = AgentRuntime(AgentRef("safe", "v1"), backend=client, execution="pool")
                handle = await runtime.submit("Write the report.")
                client_proxy.reset()
                assert (await handle.result()).ok
                await runtime.stop()
            of_the_run = [trip for trip in proxy.trips if not any(k in " ".join(trip) for k in own)]
            assert len(of_the_run) == 7, proxy.describe()
            # The submitter's result(): the announcement that it waits, a look at the row before
            # and after the run stops (or one, when it had stopped already), the events read
            # once; nothing more for a finished run (no second look at the row or the session).
            waited = [" ".join(trip) for trip in client_proxy.trips if "rate_limits" not in " ".join(trip)]
            assert sum("FROM events" in trip or "e.seq" in trip for trip in waited) == 1, (
                client_proxy.describe()
            )
            assert not any("agent_ref, fingerprint" in trip for trip in waited), client_proxy.describe()
            assert len(waited) <= 4, client_proxy.describe()
        finally:
            worker.drain()
            await running


async def test_runtimes_on_one_store_share_its_copy_of_the_rate_limits(target: BackendTarget) -> None:
    """A runtime made per request would otherwise read the model rate limits once per run."""
    from harnessx._rate_gate import RateGate

    async with counted(target) as (backend, counter):
        await fresh_run(backend)
        counter.reset()
        for _ in range(3):
            await fresh_run(backend)
        reads = [trip for trip in counter.trips if any("rate_limits" in s for s in trip)]
        assert len(reads) <= 1, counter.describe()  # only a refresh of a copy gone stale
        runtime = AgentRuntime(make_agent(), backend=backend)
        await runtime._ready()
        assert runtime._executor is not None and runtime._executor.rates is RateGate.shared(backend)
        await runtime.stop()


async def test_a_supervisor_scan_is_one_statement_however_many_runs_and_workers(
    target: BackendTarget,
) -> None:
    """Every scan_interval (100 ms) the leader checks its term, finds orphans, follows the
    runs it requeued and judges every worker: one statement, not one per run or worker."""
    from harnessx._state import Delta, Phase
    from harnessx.store._protocol import WorkerInfo
    from supervisor import Supervisor, SupervisorConfig
    from supervisor._supervisor import ROLE

    hour = 3600.0  # no periodic report falls in the counted scan
    config = SupervisorConfig(
        record_interval=hour, queue_interval=hour, shape_interval=hour, housekeeping_interval=hour,
        stuck_interval=hour,
    )  # fmt: skip
    workers = [target.open() for _ in range(2)]
    async with counted(target) as (backend, counter):
        for n in range(3):  # a pool session whose holder died: recovered, then tracked
            holder = target.open()
            await holder.initialize()
            await holder.create_session(f"s{n}", "sales:v1", {})
            lease = await holder.claim(f"s{n}", "h")
            start = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}])
            await holder.create_run(lease, f"r{n}", None, "hi", start)
            await holder.register_worker(WorkerInfo(holder.process_id, "host", 1000 + n, ["sales:v1"], 1))
            await holder.aclose()
        for worker in workers:  # live workers
            await worker.initialize()
            await worker.register_worker(WorkerInfo(worker.process_id, "host", 4242, ["sales:v1"], 1))
        supervisor = Supervisor(backend, config)
        term = await backend.try_leadership(ROLE)
        assert term is not None
        assert await supervisor.scan(term)  # recovers the orphans, marks their holders dead
        assert await supervisor.scan(term)  # every statement prepared
        assert sorted(supervisor._pending) == ["r0", "r1", "r2"]  # no worker claims them
        counter.reset()
        assert await supervisor.scan(term)
        assert counter.count == 1, counter.describe()
        assert sorted(supervisor._pending) == ["r0", "r1", "r2"]
        assert supervisor.metrics.workers_live._value.get() == 2
        assert supervisor.metrics.workers_dead._value.get() == 3
        # A tracked run a worker claims is recovered, still in one statement.
        await workers[0].claim("s0", "w")
        counter.reset()
        assert await supervisor.scan(term)
        assert counter.count == 1, counter.describe()
        assert sorted(supervisor._pending) == ["r1", "r2"]
        assert supervisor.metrics.registry.get_sample_value("harnessx_orphan_recovery_seconds_count") == 1
    for worker in workers:
        await worker.aclose()


async def test_reading_events_is_one_statement_whatever_results_they_refer_to(target: BackendTarget) -> None:
    """A page of events whose tool_result events refer to their calls' results (over 1 KiB:
    stored once, on the call; over 16 KiB: apart, in tool_results) is read in one statement,
    not one more per result, and every result reads back whole."""
    from harnessx import Agent, ProviderResponse, RunEventType, ScriptedProvider, ToolCall

    texts = {f"c{i}": f"{i}" * (2_000 * (i + 1)) for i in range(3)}
    texts["big"] = "b" * 20_000
    calls = [ToolCall(call_id, "fetch", {"call_id": call_id}) for call_id in texts]
    agent = Agent(provider=ScriptedProvider([ProviderResponse(tool_calls=calls), "Fetched."]))
    agent.tools.register(name="fetch", replay_policy="safe")(lambda call_id: texts[call_id])
    async with counted(target) as (backend, counter):
        async with AgentRuntime(agent, backend=backend) as runtime:
            done = await runtime.run("Fetch them.")
        await backend.read_events(done.run_id, 0)  # prepared once
        counter.reset()
        events = await backend.read_events(done.run_id, 0)
        trips = [trip for trip in counter.trips if trip]
        assert len(trips) == 1 and len(trips[0]) == 1, counter.describe()
    results = {e.data.tool_call_id: e.data.content for e in events if e.type is RunEventType.TOOL_RESULT}
    assert results == texts


async def test_a_pooled_connection_asks_the_server_about_types_once(pg_database: str) -> None:
    """asyncpg asks the server about every array type it does not know the first time a
    statement on a connection uses one (a query that costs more to plan than most of ours
    cost to run): a new pooled connection learns them all in one question, and a run, its
    load, a renewal and the pool's own statements ask no more."""
    from harnessx.store import PostgresBackend

    async with PostgresRoundTrips(pg_database) as proxy, PostgresBackend(proxy.dsn, pool_size=1) as backend:
        await fresh_run(backend)
        async with AgentRuntime(make_agent(policy="safe"), backend=backend) as runtime:
            result = await runtime.run("Write the report.")
        assert await backend.load_run(result.run_id) is not None
        lease = await backend.claim(result.session_id, "someone")
        await backend.renew([lease])
        await backend.publish_agent_defaults({"a@v1": (1, 2)})
        questions = [
            trip for trip in proxy.trips if any(s.startswith("WITH RECURSIVE typeinfo_tree") for s in trip)
        ]
        assert len(questions) == 1, proxy.describe()
