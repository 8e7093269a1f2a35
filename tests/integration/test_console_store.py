"""The store reads and records of the operator console, on a real SQLite file and a real
PostgreSQL database: listing runs by filter with keyset pages, counts, tool calls, workers,
leadership, the audit trail and console sign-ins."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
)
from harnessx._errors import ConfigurationError, LeadershipLostError
from harnessx.store._protocol import Action, RunFilter, RunRow, WorkerInfo


def _agent(permission: str | None) -> Agent:
    def script(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall("c1", "step", {"n": 1})])
        return "done"

    agent = Agent(provider=ScriptedProvider(script))

    @agent.tools.register(permission=permission, replay_policy="safe")
    def step(n: int) -> str:
        """One step.

        Args:
            n: Step number.
        """
        return f"step {n}"

    return agent


REGISTRY = AgentRegistry()
REGISTRY.register("plain", lambda: _agent(None))
REGISTRY.register("asks", lambda: _agent("ask"))


async def make_runs(store: Any) -> dict[str, list[str]]:
    """Runs of two agents in three sessions: some complete, some wait for approval."""
    made: dict[str, list[str]] = {"plain": [], "asks": []}
    for name, sessions, per_session in (("plain", 2, 2), ("asks", 1, 1)):
        for _ in range(sessions):
            runtime = AgentRuntime(AgentRef(name, "v1"), backend=store, registry=REGISTRY)
            await runtime.start()
            for index in range(per_session):
                result = await runtime.run(f"job {index}", request_id=f"{name}-{uuid.uuid4().hex[:6]}")
                made[name].append(result.run_id)
            await runtime.stop()
    return made


def ids(rows: list[RunRow]) -> list[str]:
    return [row.id for row in rows]


async def test_runs_are_listed_newest_first_in_keyset_pages(target: BackendTarget) -> None:
    async with target.open() as store:
        made = await make_runs(store)
        everything = await store.list_runs(RunFilter(), limit=100)
        assert everything.next is None
        assert len(everything.runs) == 5
        assert set(ids(everything.runs)) == {*made["plain"], *made["asks"]}
        order = [(row.created_at, row.id) for row in everything.runs]
        assert order == sorted(order, reverse=True)
        pages, before = [], None
        while True:
            page = await store.list_runs(RunFilter(), limit=2, before=before)
            pages.append(ids(page.runs))
            if page.next is None:
                break
            before = page.next
        assert [run for page in pages for run in page] == ids(everything.runs)
        assert [len(page) for page in pages] == [2, 2, 1]


async def test_runs_are_filtered_by_status_agent_session_and_ids(target: BackendTarget) -> None:
    async with target.open() as store:
        made = await make_runs(store)
        waiting = await store.list_runs(RunFilter(status="awaiting_input"))
        assert ids(waiting.runs) == made["asks"]
        assert waiting.runs[0].agent_ref == "asks@v1"
        completed = await store.list_runs(RunFilter(status="completed"))
        assert set(ids(completed.runs)) == set(made["plain"])
        by_agent = await store.list_runs(RunFilter(agent_ref="plain@v1"))
        assert set(ids(by_agent.runs)) == set(made["plain"])
        none = await store.list_runs(RunFilter(agent_ref="plain@v1", status="awaiting_input"))
        assert none.runs == []
        first = (await store.list_runs(RunFilter(run_id=made["plain"][0]))).runs
        assert ids(first) == [made["plain"][0]]
        session = first[0].session_id
        in_session = await store.list_runs(RunFilter(session_id=session))
        assert set(ids(in_session.runs)) == set(made["plain"][:2])
        assert first[0].request_id is not None
        by_request = await store.list_runs(RunFilter(request_id=first[0].request_id))
        assert ids(by_request.runs) == [made["plain"][0]]
        newest = (await store.list_runs(RunFilter(), limit=1)).runs[0]
        since = await store.list_runs(RunFilter(created_from=newest.created_at))
        assert newest.id in ids(since.runs)
        until = await store.list_runs(RunFilter(created_to=newest.created_at))
        assert newest.id not in ids(until.runs) and len(until.runs) == 4
        counts = await store.count_runs()
        assert counts == {"completed": 4, "awaiting_input": 1, "queued": 0}


async def test_a_bad_status_or_limit_is_a_clear_error(target: BackendTarget) -> None:
    async with target.open() as store:
        with pytest.raises(ConfigurationError, match="unknown run status 'done'"):
            await store.list_runs(RunFilter(status="done"))
        with pytest.raises(ConfigurationError, match="limit must be between"):
            await store.list_runs(RunFilter(), limit=0)


async def test_queued_runs_are_their_own_status(target: BackendTarget) -> None:
    async with target.open() as store:
        runtime = AgentRuntime(AgentRef("plain", "v1"), backend=store, execution="pool")
        handle = await runtime.submit("later")
        queued = (await store.list_runs(RunFilter(status="queued"))).runs
        assert ids(queued) == [handle.run_id] and queued[0].shown_status == "queued"
        assert (await store.list_runs(RunFilter(status="running"))).runs == []
        assert (await store.count_runs()) == {"running": 1, "queued": 1}
        await runtime.stop()


async def test_tool_calls_and_the_audit_trail(target: BackendTarget) -> None:
    async with target.open() as store:
        made = await make_runs(store)
        run_id = made["asks"][0]
        [entry] = await store.tool_calls(run_id)
        assert entry.status.value == "approval" and entry.call.name == "step" and entry.policy == "safe"
        record = await store.get_run(run_id)
        assert record is not None
        action = Action(
            id=uuid.uuid4().hex,
            actor="alice",
            via="console",
            action="approve",
            session_id=record.session_id,
            run_id=run_id,
            execution_key=entry.execution_key,
            detail={"note": "looks right"},
        )
        await store.add_action(action)
        assert action.at > 0
        [shown] = await store.run_actions(run_id)
        assert (shown.actor, shown.outcome, shown.detail) == ("alice", None, {"note": "looks right"})
        action.outcome, action.detail["requeued"] = "ok", False
        await store.finish_action(action)
        [done] = await store.recent_actions()
        assert done.outcome == "ok" and done.finished_at is not None and done.finished_at >= done.at
        assert done.detail == {"note": "looks right", "requeued": False}
        assert await store.run_actions("no-such-run") == []


async def test_console_sign_ins_end_everywhere(target: BackendTarget) -> None:
    async with target.open() as first, target.open() as second:
        await first.add_login("hash-1", "alice", "operator", "tok-a", 3600)
        login = await second.get_login("hash-1")
        assert login is not None and login.valid and (login.name, login.role) == ("alice", "operator")
        await second.end_login("hash-1")
        ended = await first.get_login("hash-1")
        assert ended is not None and not ended.valid
        await first.add_login("hash-2", "bob", "viewer", "tok-b", -1)  # already expired
        expired = await second.get_login("hash-2")
        assert expired is not None and not expired.valid
        assert await first.get_login("unknown") is None


async def test_workers_with_their_leases_and_the_leader_scans(target: BackendTarget) -> None:
    async with target.open() as store, target.open() as worker_store:
        worker = WorkerInfo(worker_store.process_id, "host-a", 123, ["plain@v1"], 4)
        await worker_store.register_worker(worker)
        await store.create_session("s1", "plain@v1", {})
        await worker_store.claim("s1", "w")
        [shown] = await store.list_workers()
        assert (shown.id, shown.leases, shown.stopped_at, shown.concurrency) == (worker.id, 1, None, 4)
        await worker_store.stop_worker(worker.id)
        [stopped] = await store.list_workers()
        assert stopped.stopped_at is not None
        assert await store.leader_states() == []
        term = await store.try_leadership("supervisor")
        assert term is not None
        await store.record_scan(term, scans=12, recovered=3)
        [state] = await store.leader_states()
        assert (state.epoch, state.holder, state.scans, state.recovered) == (term.epoch, term.holder, 12, 3)
        assert state.scanned_at is not None
        await store.release_leadership(term)
        newer = await worker_store.try_leadership("supervisor")
        assert newer is not None and newer.epoch == term.epoch + 1
        [fresh] = await store.leader_states()
        assert (fresh.scans, fresh.recovered, fresh.scanned_at) == (0, 0, None)
        with pytest.raises(LeadershipLostError):
            await store.record_scan(term, scans=13, recovered=3)


async def test_the_leading_supervisor_records_its_scans(target: BackendTarget) -> None:
    import asyncio

    from supervisor import Supervisor, SupervisorConfig

    async with target.open() as store, target.open() as supervisor_store:
        supervisor = Supervisor(supervisor_store, SupervisorConfig(scan_interval=0.02, record_interval=0.05))
        task = asyncio.create_task(supervisor.run())
        try:
            for _ in range(500):
                states = await store.leader_states()
                if states and states[0].scans >= 3:
                    break
                await asyncio.sleep(0.02)
            [state] = states
            assert state.role == "supervisor" and state.holder == supervisor_store.process_id
            assert state.scans >= 3 and state.recovered == 0 and state.scanned_at is not None
        finally:
            supervisor.stop()
            await task


SHAPES = [
    RunFilter(),
    RunFilter(status="awaiting_input"),
    RunFilter(status="running"),
    RunFilter(status="queued"),
    RunFilter(agent_ref="plain@v1"),
    RunFilter(agent_ref="plain@v1", status="failed"),
    RunFilter(created_to=2e9),
    RunFilter(session_id="s"),
    RunFilter(request_id="r"),
]


@pytest.mark.parametrize("where", SHAPES, ids=lambda w: ",".join(k for k, v in vars(w).items() if v) or "all")
async def test_every_listing_walks_an_index_in_order(target: BackendTarget, where: RunFilter) -> None:
    """Newest first from an index, never a sort of every matching run: what keeps a page
    fast with millions of runs (bench/console.py)."""
    from harnessx.store._listing import list_query

    async with target.open() as store:
        if target.kind == "sqlite":
            query = list_query("sqlite", where, limit=50, before=(1.0, "x"))
            plan = " | ".join(
                str(row[-1]) for row in store.conn.execute(f"EXPLAIN QUERY PLAN {query.sql}", query.args)
            )
            assert "USING" in plan, plan
            # One session's runs are few: sorting those of the same instant by id is no cost.
            if where.session_id is None and where.request_id is None:
                assert "TEMP B-TREE" not in plan, plan
            return
        from harnessx.store._pg_console import _timestamp

        query = list_query("postgres", where, limit=50, before=(1, "x"), time=_timestamp)
        async with store._pool.acquire() as conn, conn.transaction():
            # The tables are empty: tell the planner a sort or a scan of everything costs too much.
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute("SET LOCAL enable_sort = off")
            rows = await conn.fetch(f"EXPLAIN {query.sql}", *query.args)
        plan = " | ".join(row[0] for row in rows)
        assert "Seq Scan on runs" not in plan, plan
        if where.session_id is None and where.request_id is None:
            assert "Sort" not in plan, plan


async def test_listed_statuses_are_run_statuses_shown_as_plain_text(target: BackendTarget) -> None:
    """Listings carry a ``RunStatus`` (not bare text), and every place that shows one shows its
    value: a str enum formats as ``RunStatus.COMPLETED`` in an f-string, never what a script
    reading the CLI or the console's JSON expects."""
    from harnessx import RunStatus
    from harnessx.cli import _shown_status

    async with target.open() as store:
        made = await make_runs(store)
        rows = (await store.list_runs(RunFilter(), limit=100)).runs
        assert {row.status for row in rows} == {RunStatus.COMPLETED, RunStatus.AWAITING_INPUT}
        assert all(type(row.status) is RunStatus for row in rows)
        assert {row.shown_status for row in rows} == {"completed", "awaiting_input"}
        assert all(type(row.shown_status) is str for row in rows)
        summaries = await store.recent_sessions(10)
        assert all(type(s.run_status) is RunStatus for s in summaries)
        assert {_shown_status(s) for s in summaries} == {"completed", "awaiting_input"}
        one = await store.session_summary(summaries[0].session_id)
        assert one is not None and type(one.run_status) is RunStatus
        stuck = await store.stuck_runs(-3600.0)  # every unfinished run counts as stuck
        assert [s.run_id for s in stuck] == made["asks"]
        assert stuck[0].status is RunStatus.AWAITING_INPUT
