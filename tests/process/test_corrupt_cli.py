"""The operator commands on a run whose stored state cannot be read, on each backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from durable_support import HERE, BackendTarget, make_agent

from harnessx import AgentRuntime

pytestmark = pytest.mark.process


def harnessx(target: BackendTarget, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    store = ["--sqlite", target.location] if target.kind == "sqlite" else ["--dsn", target.location]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "harnessx", *args, *store],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


async def test_status_events_resume_and_cancel_work_on_a_damaged_run(
    target: BackendTarget, tmp_path: Path
) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        waiting = await runtime.run("Write the report.")
    # The model's reply, damaged: it no longer decodes as a message.
    damage = f"UPDATE messages SET body = '[\"not a message\"]' WHERE run_id = '{waiting.run_id}'"
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            conn.execute(damage)
    else:
        import asyncpg

        conn = await asyncpg.connect(target.location)
        await conn.execute("SET search_path TO harness_x; " + damage)
        await conn.close()
    sid, rid = waiting.session_id, waiting.run_id

    status = harnessx(target, "status", sid, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout.split("\n", 1)[1])
    assert (shown["run_id"], shown["status"]) == (rid, "awaiting_input")
    assert "cannot be loaded" in shown["unreadable"]

    events = harnessx(target, "events", rid, cwd=tmp_path)
    assert events.returncode == 0, events.stderr
    assert json.loads(events.stdout.splitlines()[-1])["type"] == "run_result"

    resumed = harnessx(target, "resume", sid, "--agent", "durable_support:make_agent", cwd=tmp_path)
    assert resumed.returncode == 1 and "Traceback" not in resumed.stderr
    assert "cannot be loaded" in resumed.stderr and f"harnessx cancel {sid}" in resumed.stderr

    cancelled = harnessx(target, "cancel", sid, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"cancelled run {rid}"
    after = json.loads(harnessx(target, "status", sid, cwd=tmp_path).stdout.split("\n", 1)[1])
    assert after["status"] == "cancelled"
    last = json.loads(harnessx(target, "events", rid, cwd=tmp_path).stdout.splitlines()[-1])
    assert (last["type"], last["data"]["status"]) == ("run_result", "cancelled")
    again = harnessx(target, "cancel", sid, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to cancel" in again.stdout
