"""Every statement on a hot path finds its rows through an index on a loaded database.

The store is loaded with 10,000 finished sessions copied from real runs (``replicate``), plus
2,000 stopped workers, and analysed; then a workload runs the hot paths for real: a durable run
and a decision, a pool run driven by a worker, lease renewal, the supervisor's scan recovering
an orphan, compaction, a retention pass, ``harnessx status``'s reads, an export and an erasure. Every
statement the store sent meanwhile is checked: its plan (PostgreSQL: auto_explain's, logged by
the server for every statement, those inside functions and triggers too; SQLite: ``EXPLAIN
QUERY PLAN`` of each statement the connection ran) reads no table of the history in full. The
plans are asserted, not timings: a statement that reads every row is as fast as any other on
a small database and the slowest thing there is on a large one.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget, make_agent

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentConfig,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
)
from harnessx._compaction import compact_pass
from harnessx._operator import Operator
from harnessx._retention import RetentionPolicy, prune_pass
from harnessx.testing import ThrowawayCluster, dsn_with_database, run_psql
from harnessx.testing._history import replicate
from supervisor import Supervisor, SupervisorConfig
from supervisor._supervisor import ROLE

pytestmark = pytest.mark.slow

COPIES = 10_000
HISTORY = {
    *("sessions", "runs", "messages", "tool_calls", "tool_results", "events", "journal", "audit"),
    "workers",
}
MONTH = 30 * 86400.0


def streaming_agent() -> Agent:
    """A 960-character answer streamed in 16-character pieces (about 60 text deltas)."""
    answer = "".join(f"part {i:03d} of it. " for i in range(60))[:960]
    return Agent(config=AgentConfig(system_prompt="You explain."), provider=ScriptedProvider([answer]))


def big_result_agent() -> Agent:
    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(text="Reading.", tool_calls=[ToolCall("call_0", "dump", {})])
        return "Read it."

    agent = Agent(config=AgentConfig(system_prompt="You read."), provider=ScriptedProvider(reply))

    @agent.tools.register(replay_policy="safe")
    def dump() -> str:
        """Return a large dump."""
        return "x" * 20_000

    return agent


def registry() -> AgentRegistry:
    agents = AgentRegistry()
    agents.register("plain", lambda: make_agent(policy="safe"), version="v1")
    return agents


async def templates(store: Any) -> list[str]:
    """Sessions real runs left: a tool call and a short answer, a streamed answer, a large
    result, a recorded run, and a run an operator cancelled (audit rows)."""
    found = []
    for agent, recording in (
        (make_agent(policy="safe"), False),
        (streaming_agent(), False),
        (big_result_agent(), False),
        (make_agent(policy="safe"), True),
    ):
        async with AgentRuntime(agent, backend=store, recording=recording) as runtime:
            found.append((await runtime.run("Write the report.")).session_id)
    async with AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store) as runtime:
        waiting = (await runtime.run("Write the report.")).session_id
    await Operator(store, "tester", "cli").cancel(waiting)
    return [*found, waiting]


async def load(store: Any) -> None:
    await replicate(store, await templates(store), COPIES)
    workers = [(f"stopped-{n:05d}", "old-host", n) for n in range(2000)]
    if store.dialect == "sqlite":
        statement = (
            "INSERT INTO workers (id, host, pid, agents, concurrency, started_at, heartbeat_at, stopped_at) "
            "VALUES (?, ?, ?, '[]', 1, 0, 0, 1)"
        )
        await store._call(lambda conn: conn.executemany(statement, workers))
        await store._call(lambda conn: conn.execute("ANALYZE"))
    else:
        statement = (
            "INSERT INTO workers (id, host, pid, agents, concurrency, started_at, heartbeat_at, stopped_at) "
            "VALUES ($1, $2, $3, '[]', 1, now() - interval '2 days', now(), now() - interval '2 days')"
        )
        await store._run("loading workers", lambda conn: conn.executemany(statement, workers))
        await store._run("analysing", lambda conn: conn.execute("ANALYZE"))


async def workload(store: Any, other: Any) -> None:
    """The hot paths, for real: ``store`` drives and supervises, ``other`` holds a lease and dies."""
    async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
        await runtime.run("Write the report.")
    async with AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store) as runtime:
        waiting = await runtime.run("Write the report.")
        (pending,) = waiting.pending
        resumed = await runtime.approve(pending, resume=True)
        assert resumed is not None and resumed.ok  # approve(resume=True) returns the RunResult
    lease = await store.claim(waiting.session_id, "holder")
    await store.renew([lease])
    await store.pending_controls()
    await store.release(lease)

    pool = AgentRuntime(AgentRef("plain", "v1"), backend=store, execution="pool")
    handle = await pool.submit("Write the report.")
    worker = Worker(store, registry(), WorkerConfig(concurrency=1, stats_interval=0.05))
    working = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.drain()
        await working
        await pool.stop()

    orphaned = AgentRuntime(AgentRef("plain", "v1"), backend=other, execution="pool")
    orphan = await orphaned.start()
    await orphaned.stop()  # a new session is written when its runtime first submits or stops
    await other.claim(orphan, "dies")
    await other.aclose()  # its liveness lock goes: the session is an orphan
    supervisor = Supervisor(store, SupervisorConfig(stuck_interval=0.0))
    term = await store.try_leadership(ROLE)
    assert term is not None
    await supervisor.scan(term)
    assert (await store.get_session(orphan)).lease_owner is None

    for summary in await store.recent_sessions(20):
        await store.session_summary(summary.session_id)
    record = await store.latest_run(waiting.session_id)
    await store.load_state(record.id)
    await store.read_events(record.id, 3)
    await store.tool_result(waiting.session_id, "call_0")
    await compact_pass(store, 0.0, batch=50)  # the runs above that finished
    await store.export_sessions([waiting.session_id])
    await prune_pass(store, RetentionPolicy(MONTH - 43_200, batch=50))  # the oldest half day
    await store.delete_session(waiting.session_id)
    await store.oldest_activity()


# ------------------------------------------------------------------------------ SQLite


def sqlite_plans(db: Path, statements: list[str]) -> Iterator[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        for statement in dict.fromkeys(statements):
            if not re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", statement, re.IGNORECASE):
                continue
            readable = re.sub(r"\bInf\b", "9e999", statement)  # the trace's infinity, as SQL reads it
            for row in conn.execute(f"EXPLAIN QUERY PLAN {readable}"):
                yield statement, str(row[3])
    finally:
        conn.close()


_NOT_ALIASES = {"where", "on", "join", "left", "inner", "cross", "order", "group", "limit", "using", "set"}


def aliases(statement: str) -> dict[str, str]:
    """The tables a statement names by an alias (SQLite's plans name a table by its alias)."""
    found = {}
    for table, alias in re.findall(
        r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", statement, re.IGNORECASE
    ):
        if alias and alias.lower() not in _NOT_ALIASES:
            found[alias] = table
    return found


@pytest.mark.timeout(600)  # loading the history takes a while on a busy machine
async def test_sqlite_hot_path_statements_use_indexes(tmp_path: Path) -> None:
    target = BackendTarget("sqlite", str(tmp_path / "loaded.sqlite3"))
    statements: list[str] = []
    async with target.open() as store:
        await load(store)
        await store._call(lambda conn: conn.set_trace_callback(statements.append))
        other = target.open()
        await other.initialize()
        await workload(store, other)
        await store._call(lambda conn: conn.set_trace_callback(None))
    scans = {
        (detail, statement)
        for statement, detail in sqlite_plans(Path(target.location), statements)
        if (match := re.match(r"SCAN (\w+)", detail))
        and aliases(statement).get(match.group(1), match.group(1)) in HISTORY
        and " INDEX " not in detail
    }
    assert scans == set(), "statements that read a whole table:\n" + "\n".join(f"{d}: {s}" for d, s in scans)


# -------------------------------------------------------------------------- PostgreSQL


def logged_plans(log: str) -> Iterator[dict[str, Any]]:
    """auto_explain's JSON plans in a server log: after 'plan:', the tab-indented lines."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if line.endswith("plan:"):
            body = []
            for following in lines[index + 1 :]:
                if not following.startswith("\t"):
                    break
                body.append(following)
            yield json.loads("\n".join(body))


def seq_scans(plan: dict[str, Any]) -> Iterator[str]:
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in HISTORY:
        yield str(plan["Relation Name"])
    for child in plan.get("Plans", []):
        yield from seq_scans(child)


@pytest.fixture
def explaining(pg_bin_dir: Path) -> Iterator[ThrowawayCluster]:
    with ThrowawayCluster(pg_bin_dir) as cluster:
        yield cluster


@pytest.mark.timeout(600)
async def test_postgres_hot_path_statements_use_indexes(explaining: ThrowawayCluster) -> None:
    run_psql(explaining.dsn, "CREATE DATABASE loaded")
    dsn = dsn_with_database(explaining.dsn, "loaded")
    target = BackendTarget("postgres", dsn)
    async with target.open() as store:
        await load(store)
    settings = {
        "session_preload_libraries": "auto_explain",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        # At the size a test can load, a seq scan of a few thousand rows is the planner's right
        # choice for some statements (and an index scan at a million). Seq scans disabled, the
        # planner takes an index wherever one serves the statement and still reads the whole
        # table where none does: which is what this test is about.
        "enable_seqscan": "off",
    }
    for name, value in settings.items():
        run_psql(explaining.dsn, f"ALTER DATABASE loaded SET {name} = '{value}'")
    start = explaining.log_file.stat().st_size
    async with target.open() as store, target.open() as other:
        await workload(store, other)
    with explaining.log_file.open(encoding="utf-8", errors="replace") as log:
        log.seek(start)
        plans = list(logged_plans(log.read()))
    assert len(plans) > 200, "auto_explain logged no plans: is it installed?"
    scans = {
        (relation, plan["Query Text"].strip()[:300]) for plan in plans for relation in seq_scans(plan["Plan"])
    }
    assert scans == set(), "statements that read a whole table:\n" + "\n".join(f"{r}: {q}" for r, q in scans)
