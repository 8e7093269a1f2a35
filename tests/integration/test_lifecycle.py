"""Retention, erasure and archives on both backends: what goes is exactly what may go (with its
rows in every table), what is still in use stays, and an archive restores what it held."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget, make_agent
from lifecycle_support import TABLES, age, all_rows, rows_of

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentConfig,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    RunStatus,
    ScriptedProvider,
    ScriptedRequest,
    SessionBusyError,
    ToolCall,
)
from harnessx._erasure import erase_session
from harnessx._errors import ConfigurationError
from harnessx._operator import Operator
from harnessx._retention import ArchiveWriter, RetentionPolicy, prune_pass
from harnessx.store._archive import parse_record

DAY = 86400.0
MONTH = 30 * DAY


def big_result_agent() -> Agent:
    """One tool call whose result (20 KiB) is stored once in tool_results."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(text="Reading.", tool_calls=[ToolCall("call_0", "dump", {})])
        return "Read it."

    agent = Agent(config=AgentConfig(system_prompt="You read dumps."), provider=ScriptedProvider(reply))

    @agent.tools.register(replay_policy="safe")
    def dump() -> str:
        """Return a large dump."""
        return "x" * 20_000

    return agent


def failing_agent() -> Agent:
    def reply(request: ScriptedRequest) -> str:
        raise ValueError("the provider rejected the request")

    return Agent(config=AgentConfig(system_prompt="You fail."), provider=ScriptedProvider(reply))


async def finished(store: Any, agent: Agent, *, recording: bool = False) -> str:
    runtime = AgentRuntime(agent, backend=store, recording=recording)
    session_id = await runtime.start()
    await runtime.run("Write the report.")
    await runtime.stop()
    return session_id


async def waiting(store: Any) -> str:
    """A session whose run waits for an approval."""
    runtime = AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store)
    session_id = await runtime.start()
    result = await runtime.run("Write the report.")
    assert result.status is RunStatus.AWAITING_INPUT
    await runtime.stop()
    return session_id


async def sessions_in_every_state(store: Any) -> tuple[set[str], set[str]]:
    """Sessions a 30-day prune must remove, and those it must keep."""
    gone = {
        await finished(store, make_agent(policy="safe")),
        await finished(store, big_result_agent()),
        await finished(store, make_agent(policy="safe"), recording=True),
        await finished(store, failing_agent()),
    }
    cancelled = await waiting(store)
    await Operator(store, "tester", "cli").cancel(cancelled)  # leaves audit rows
    empty = AgentRuntime(make_agent(), backend=store)
    gone |= {cancelled, await empty.start()}
    await empty.stop()
    kept_waiting = await waiting(store)  # awaiting approval for 40 days: kept
    queued = AgentRuntime(AgentRef("nobody-serves", "v1"), backend=store, execution="pool")
    kept_queued = await queued.start()
    await queued.submit("Queued for a worker that never comes.")
    await queued.stop()
    for session_id in {*gone, kept_waiting, kept_queued}:
        await age(store, session_id, 40)
    recent = await finished(store, make_agent(policy="safe"))  # finished, but yesterday
    await age(store, recent, 1)
    continued = await finished(store, make_agent(policy="safe"))  # an old run, then a new one
    await age(store, continued, 40)
    again = AgentRuntime(make_agent(policy="safe"), backend=store)
    await again.start(continued)
    await again.run("And once more.")
    await again.stop()
    return gone, {kept_waiting, kept_queued, recent, continued}


async def test_prune_removes_exactly_the_eligible_sessions_with_all_their_rows(target: BackendTarget) -> None:
    async with target.open() as store:
        gone, kept = await sessions_in_every_state(store)
        before = {sid: await rows_of(store, sid) for sid in gone | kept}
        assert {table for sid in gone for table, n in before[sid].items() if n} == set(TABLES)
        totals = await all_rows(store)

        dry = await prune_pass(store, RetentionPolicy(MONTH, batch=2), dry_run=True)
        assert set(dry.sample) == gone and await all_rows(store) == totals

        report = await prune_pass(store, RetentionPolicy(MONTH, batch=2))

        assert report.sessions == len(gone)
        for sid in gone:
            assert await rows_of(store, sid) == dict.fromkeys(TABLES, 0), sid
        for sid in kept:
            assert await rows_of(store, sid) == before[sid], sid
        removed = {table: sum(before[sid][table] for sid in gone) for table in TABLES}
        rows = dict(report.rows)
        # PostgreSQL leaves the events of runs in day partitions to go with their day (schema
        # 22); today's is not past, so after the grace (here none) they go row by row.
        days = await store.maintain_partitions(7 * 86400, grace=0)
        if days is not None:
            assert days.dropped == [] and days.problem is None
            rows["events"] += days.purged
        assert rows == removed
        assert await all_rows(store) == {t: totals[t] - removed[t] for t in TABLES}
        # A second pass finds nothing more, and looks at none of those it set aside.
        again = await prune_pass(store, RetentionPolicy(MONTH, batch=2))
        assert again.sessions == 0 and again.examined == 0


async def test_prune_by_status_keeps_the_other_finished_sessions(target: BackendTarget) -> None:
    async with target.open() as store:
        completed = await finished(store, make_agent(policy="safe"))
        failed = await finished(store, failing_agent())
        for sid in (completed, failed):
            await age(store, sid, 40)
        policy = RetentionPolicy(MONTH, statuses=frozenset({"failed"}))
        report = await prune_pass(store, policy)
        assert report.sample == [failed]
        assert (await rows_of(store, completed))["runs"] == 1
        assert (await prune_pass(store, RetentionPolicy(MONTH))).sample == [completed]


async def test_erasure_is_refused_while_a_run_is_unfinished_and_force_cancels_it(
    target: BackendTarget,
) -> None:
    async with target.open() as store:
        session_id = await waiting(store)
        before = await rows_of(store, session_id)
        runtime = AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store)
        with pytest.raises(SessionBusyError, match=r"unfinished run .* \(awaiting_input\).*force"):
            await runtime.delete_session(session_id)
        assert await rows_of(store, session_id) == before  # nothing deleted

        deleted = await runtime.delete_session(session_id, force=True)

        assert deleted["sessions"] == 1 and deleted["runs"] == 1 and deleted["audit"] == 1
        assert await rows_of(store, session_id) == dict.fromkeys(TABLES, 0)
        with pytest.raises(ConfigurationError, match="no session"):
            await runtime.delete_session(session_id)
        await runtime.stop()


async def test_erasure_of_a_finished_session_leaves_the_others(target: BackendTarget) -> None:
    async with target.open() as store:
        erased, other = await finished(store, big_result_agent()), await finished(store, big_result_agent())
        kept = await rows_of(store, other)
        async with AgentRuntime(make_agent(), backend=store) as runtime:
            deleted = await runtime.delete_session(erased)
        assert deleted["tool_results"] == 1 and await rows_of(store, erased) == dict.fromkeys(TABLES, 0)
        assert await rows_of(store, other) == kept


def hanging_agent(started: asyncio.Event) -> Agent:
    """One tool call that waits until cancelled."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(text="Waiting.", tool_calls=[ToolCall("call_0", "hang", {})])
        return "Done."

    agent = Agent(config=AgentConfig(system_prompt="You wait."), provider=ScriptedProvider(reply))

    @agent.tools.register(replay_policy="safe")
    async def hang() -> str:
        """Wait for ever."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    return agent


async def test_erasure_of_a_session_this_runtime_drives_needs_force(target: BackendTarget) -> None:
    started = asyncio.Event()
    async with target.open() as store:
        runtime = AgentRuntime(hanging_agent(started), backend=store)
        session_id = await runtime.start()
        await runtime.submit("Wait.")
        await asyncio.wait_for(started.wait(), 30)
        with pytest.raises(SessionBusyError, match="driving run"):
            await runtime.delete_session(session_id)
        assert (await store.latest_run(session_id)).status == "running"
        deleted = await runtime.delete_session(session_id, force=True)
        assert deleted["sessions"] == 1 and await rows_of(store, session_id) == dict.fromkeys(TABLES, 0)
        assert runtime.session_id is None
        await runtime.stop()


async def test_export_prune_import_round_trips(target: BackendTarget, tmp_path: Path) -> None:
    async with target.open() as store:
        gone, _ = await sessions_in_every_state(store)
        seen = {sid: await readable(store, sid) for sid in gone}
        folder = tmp_path / "archive"
        report = await prune_pass(store, RetentionPolicy(MONTH, batch=3, archive=folder))
        assert report.sessions == len(gone) and report.archived_to is not None
        assert [sid for sid in gone if await store.get_session(sid) is not None] == []

        lines = report.archived_to.read_text(encoding="utf-8").splitlines()
        assert sorted(json.loads(line)["session"]["id"] for line in lines) == sorted(gone)
        for number, line in enumerate(lines, 1):
            assert await store.import_session(parse_record(line, f"line {number}"))
        for sid in gone:
            assert await readable(store, sid) == seen[sid], sid
        # Importing again changes nothing; restored sessions outlive one more retention period.
        assert not await store.import_session(parse_record(lines[0], "line 1"))
        assert (await prune_pass(store, RetentionPolicy(MONTH))).sessions == 0


async def test_an_archive_restores_into_the_other_dialect(target: BackendTarget, tmp_path: Path) -> None:
    async with target.open() as store:
        session_id = await finished(store, big_result_agent(), recording=True)
        seen = await readable(store, session_id)
        (record,) = await store.export_sessions([session_id])
    other = BackendTarget("sqlite", str(tmp_path / "other.sqlite3"))
    async with other.open() as restored:
        assert await restored.import_session(parse_record(json.dumps(record), "the record"))
        assert await readable(restored, session_id) == seen


async def test_an_archive_from_a_newer_schema_is_refused(target: BackendTarget) -> None:
    async with target.open() as store:
        session_id = await finished(store, make_agent(policy="safe"))
        (record,) = await store.export_sessions([session_id])
        await store.delete_session(session_id)
        record["runs"][0]["from_a_later_schema"] = "acme"
        with pytest.raises(ConfigurationError, match=r"columns .* lacks \(runs\.from_a_later_schema\)"):
            await store.import_session(parse_record(json.dumps(record), "line 1"))
        assert await store.get_session(session_id) is None


async def test_an_archive_writer_never_overwrites(tmp_path: Path) -> None:
    writer = ArchiveWriter(tmp_path)
    writer([{"a": 1}])
    writer.close()
    assert writer.path is not None and writer.path.read_text() == '{"a":1}\n'


async def readable(store: Any, session_id: str) -> dict[str, Any]:
    """What a reader sees of a session: each run's status and result, its events, its state."""
    runs = []
    record = await store.latest_run(session_id)
    summary = await store.session_summary(session_id)
    for run in [record] if record is not None else []:
        state = await store.load_state(run.id)
        events = await store.read_events(run.id, 0, 10_000)
        runs.append(
            {
                "status": run.status,
                "result": state.result().to_dict(),
                "messages": state.messages,
                "tools": {key: entry.to_dict() for key, entry in state.tools.items()},
                "events": [(e.cursor, e.to_dict()) for e in events],
            }
        )
    return {"summary": (summary.run_id, summary.run_status, summary.agent_ref), "runs": runs}


async def test_erase_session_refuses_an_unknown_session(target: BackendTarget) -> None:
    async with target.open() as store:
        with pytest.raises(ConfigurationError, match="no session 'nope'"):
            await erase_session(store, "nope", force=False, actor="tester", via="api")


def slow_registry() -> AgentRegistry:
    """``slow@v1``: one tool call that takes a little while, then an answer."""

    def build() -> Agent:
        def reply(request: ScriptedRequest) -> ProviderResponse | str:
            if request.turn == 0:
                return ProviderResponse(text="Working.", tool_calls=[ToolCall("call_0", "work", {})])
            return "Worked."

        agent = Agent(config=AgentConfig(system_prompt="You work."), provider=ScriptedProvider(reply))

        @agent.tools.register(replay_policy="safe")
        async def work() -> str:
            """Do some work."""
            await asyncio.sleep(random.uniform(0.01, 0.15))
            return "worked"

        return agent

    agents = AgentRegistry()
    agents.register("slow", build, version="v1")
    return agents


@pytest.mark.slow
async def test_a_prune_during_pool_runs_removes_only_idle_sessions_and_halves_nothing(
    target: BackendTarget,
) -> None:
    async with target.open() as store, target.open() as worker_store:
        idle = [await finished(store, make_agent(policy="safe")) for _ in range(12)]
        busy = []
        for index in range(16):
            runtime = AgentRuntime(AgentRef("slow", "v1"), backend=store, execution="pool")
            session_id = await runtime.start()
            await age(store, session_id, 40)  # old sessions, in which a run is about to go
            await runtime.submit(f"job {index}")
            await runtime.stop()
            busy.append(session_id)
        for session_id in idle:
            await age(store, session_id, 40)
        worker = Worker(worker_store, slow_registry(), WorkerConfig(concurrency=4))
        working = asyncio.create_task(worker.run())
        pruned: set[str] = set()
        try:
            while True:  # prune, one session per transaction, while the runs finish
                done = [await store.latest_run(sid) for sid in busy]
                report = await prune_pass(store, RetentionPolicy(MONTH, batch=1, pause=0))
                pruned.update(report.sample)
                if all(run is not None and run.status == "completed" for run in done):
                    break
        finally:
            worker.drain()
            await working
        assert pruned == set(idle)
        for session_id in busy:
            session = await store.get_session(session_id)
            run = await store.latest_run(session_id)
            assert session is not None and run is not None and run.status == "completed", session_id
            events = await store.read_events(run.id, 0, 10_000)
            assert [int(e.cursor or 0) for e in events] == list(range(1, len(events) + 1))
            assert events[-1].type.value == "run_result" and len(events) == run.event_count
            state = await store.load_state(run.id)
            assert state.result().ok and len(state.messages) == (await rows_of(store, session_id))["messages"]


async def test_a_sqlite_prune_gives_every_freed_page_back_and_keeps_the_store_durable(tmp_path: Path) -> None:
    """A pass gives the file every page its batches freed (it gave at most 16,384 back, 64 MiB,
    however much it freed: a pruned file kept its size), in short steps; its batches commit
    without waiting for the disk, and every later write does again (synchronous=FULL)."""
    import sqlite3

    from harnessx import SQLiteBackend
    from harnessx.testing._history import replicate

    path = tmp_path / "store.sqlite3"
    async with SQLiteBackend(path) as store:
        template = await finished(store, big_result_agent())
        # About 25 KB a session: two thirds of 6,000 free some 24,000 pages (4 KiB).
        await replicate(store, [template], 6_000, days=90.0, ordered=True)
        statements: list[str] = []
        await store._call(lambda conn: conn.set_trace_callback(statements.append))
        report = await prune_pass(store, RetentionPolicy(MONTH, batch=100))
        await store._call(lambda conn: conn.set_trace_callback(None))
        assert report.sessions > 3_900
        with sqlite3.connect(path) as conn:
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            assert free == 0
        batch = statements.index("BEGIN IMMEDIATE")
        assert statements[batch - 1] == "PRAGMA synchronous=NORMAL"
        assert statements[-1] == "PRAGMA synchronous=FULL"
        (mode,) = await store._call(lambda conn: conn.execute("PRAGMA synchronous").fetchone())
        assert mode == 2  # FULL
