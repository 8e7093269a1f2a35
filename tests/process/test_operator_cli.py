"""The operator's verbs in the terminal, against runs of a real pool (harness-worker and
harness-supervisor processes), on both backends. The ``harnessx`` processes hold no agent
code: they decide from the stored runs and requeue for the workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from durable_support import BackendTarget
from pool_support import Pool

from harnessx import AgentRef, AgentRuntime
from harnessx._operator import default_actor

pytestmark = pytest.mark.process
BIN = Path(sys.executable).parent


@pytest.fixture
def pool(target: BackendTarget, tmp_path: Path):  # type: ignore[no-untyped-def]
    created = Pool(target, tmp_path)
    created.migrate()
    yield created
    created.stop_all()


def hx(pool: Pool, *args: str) -> subprocess.CompletedProcess[str]:
    store = ["--sqlite", pool.target.location] if pool.target.kind == "sqlite" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSX_")}
    if pool.target.kind == "postgres":
        env["HARNESSX_DSN"] = pool.target.location  # kept out of the process list
    # No PYTHONPATH: this process cannot import the pool's agents.
    return subprocess.run(
        [str(BIN / "harnessx"), *args, *store],
        capture_output=True,
        text=True,
        env=env,
        cwd=pool.folder,
        check=False,
    )


async def submit(pool: Pool, agent: str) -> tuple[str, str]:
    async with pool.target.open(auto_migrate=False) as store:
        runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
        handle = await runtime.submit(f"job for {agent}")
        await runtime.stop()
    return handle.session_id, handle.run_id


async def request_taken(pool: Pool, session_id: str, within: float = 60) -> None:
    """Wait until a worker's lease renewal has returned the session's pause or cancel request
    (``sessions.control_sent``; the request itself stays until the run's stop clears it).
    Read from the session row: ``pending_controls`` lists only the reading process's leases."""
    query = "SELECT control IS NOT NULL AND control_sent FROM sessions WHERE id = $1"
    deadline = asyncio.get_running_loop().time() + within
    while not await _row_value(pool, query, session_id):
        assert asyncio.get_running_loop().time() < deadline, "no worker took the request"
        await asyncio.sleep(0.02)


async def _row_value(pool: Pool, query: str, *args: Any) -> Any:
    """One value read from the pool's database, outside harnessx."""
    if pool.target.kind == "sqlite":
        with sqlite3.connect(pool.target.location) as conn:
            row = conn.execute(query.replace("$1", "?"), args).fetchone()
        return None if row is None else row[0]
    conn = await asyncpg.connect(pool.target.location, server_settings={"search_path": "harness_x"})
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def status_of(pool: Pool, run_id: str, wanted: str, within: float = 60) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        shown = hx(pool, "show", run_id, "--json")
        assert shown.returncode == 0, shown.stderr
        detail = json.loads(shown.stdout)
        if detail["status"] == wanted:
            return detail  # type: ignore[no-any-return]
        assert loop.time() < deadline, f"run {run_id} stayed {detail['status']}, not {wanted}"
        await asyncio.sleep(0.1)


async def test_list_show_and_approve_a_pool_run(pool: Pool) -> None:
    pool.worker("w1")
    pool.supervisor("s1")
    await pool.wait_for_workers(1)
    session_id, run_id = await submit(pool, "asks")
    waiting = await status_of(pool, run_id, "awaiting_input")
    [call] = waiting["tool_calls"]
    listed = hx(pool, "runs", "--status", "awaiting_input", "--json")
    assert [json.loads(line)["run_id"] for line in listed.stdout.splitlines()] == [run_id]
    table = hx(pool, "runs")
    assert table.stdout.splitlines()[0].split()[:4] == ["RUN", "SESSION", "STATUS", "AGENT"]
    assert run_id in table.stdout and "asks@v1" in table.stdout
    shown = hx(pool, "show", run_id)
    assert f"harnessx approve {session_id} {call['execution_key']}" in shown.stdout, shown.stdout
    approved = hx(pool, "approve", session_id, "--as", "alice")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "approved; the run is queued for any worker"
    done = await status_of(pool, run_id, "completed")
    assert done["result"]["output"] == "Done: safe_tool did job for asks"
    [action] = done["actions"]
    assert (action["actor"], action["via"], action["action"], action["outcome"]) == (
        "alice",
        "cli",
        "approve",
        "ok",
    )
    again = hx(pool, "approve", session_id)
    assert again.returncode == 1 and "has no tool call waiting for approval" in again.stderr
    status = hx(pool, "status")
    assert status.stdout.splitlines()[0].split()[:5] == ["SESSION", "STATUS", "AGENT", "CREATED", "UPDATED"]


async def test_pause_resume_cancel_and_resolve_from_the_terminal(pool: Pool) -> None:
    pool.hold_tools()  # each call stays in flight until the test has done what it must meanwhile
    worker = pool.worker("w1")
    pool.supervisor("s1")
    await pool.wait_for_workers(1)
    session_id, run_id = await submit(pool, "safe")
    await pool.wait_for_ledger(lambda lines: len(lines) == 1)
    paused = hx(pool, "pause", session_id)
    assert paused.stdout.strip() == f"asked the process driving run {run_id} to pause it at its next boundary"
    await request_taken(pool, session_id)  # the worker has it: the run pauses after the call
    pool.release_tools()
    await status_of(pool, run_id, "paused")
    resumed = hx(pool, "resume", session_id, "--as", "bob")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == f"run {run_id} is queued for any worker"
    detail = await status_of(pool, run_id, "completed")
    assert [(a["action"], a["actor"]) for a in detail["actions"]] == [
        ("pause", default_actor()),
        ("resume", "bob"),
    ]

    # A manual call cut off by a worker's death: uncertain, settled from the terminal.
    pool.hold_tools()
    manual_session, manual_run = await submit(pool, "manual")
    await pool.wait_for_ledger(lambda lines: len(lines) == 2)
    worker.signal(signal.SIGKILL)
    worker.wait()
    pool.release_tools()
    pool.worker("w2")
    waiting = await status_of(pool, manual_run, "awaiting_input")
    [call] = waiting["tool_calls"]
    assert call["status"] == "uncertain"
    wrong = hx(pool, "resolve", manual_session, call["execution_key"], "--retry", "--abort")
    assert wrong.returncode == 2 and "exactly one of" in wrong.stderr
    resolved = hx(pool, "resolve", manual_session, call["execution_key"], "--result", "did it by hand")
    assert resolved.returncode == 0, resolved.stderr
    assert resolved.stdout.strip() == "recorded the call's result; the run is queued for any worker"
    finished = await status_of(pool, manual_run, "completed")
    assert finished["result"]["output"] == "Done: did it by hand"

    # Cancelling a run nobody serves.
    lonely_session, lonely_run = await submit(pool, "nobody")
    cancelled = hx(pool, "cancel", lonely_session)
    assert cancelled.stdout.strip() == f"cancelled run {lonely_run}"
    assert hx(pool, "cancel", lonely_session).stdout.startswith("nothing to cancel")
