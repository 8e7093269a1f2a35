"""Databases written by the original harnessx 0.9.1, on SQLite and PostgreSQL: recognised, and
imported by ``harnessx migrate --from-original`` so that their unfinished runs resume here.

The databases are real: ``original_store_probe.py`` runs under the original package (named by
``HARNESSX_ORIGINAL_PYTHON``; ``.ci/run`` installs one with its PostgreSQL extra) and leaves a
completed run, a run waiting for an approval, two runs killed by SIGKILL inside a tool
(``manual`` and ``safe``) and a completed run of an inline agent. Without that interpreter
these tests skip with the reason, or fail when ``CI`` is true or ``HARNESSX_REQUIRE_ORIGINAL=1``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from harnessx import (
    Agent,
    AgentConfig,
    AgentRegistry,
    AgentRuntime,
    PermissionLevel,
    RunStatus,
    SchemaError,
    ScriptedProvider,
    SQLiteBackend,
    ToolResult,
)
from harnessx.store import PostgresBackend

pytestmark = pytest.mark.process

PROBE = Path(__file__).with_name("original_store_probe.py")
SCENARIOS = ("completed", "approval", "crash-manual", "crash-safe", "inline")


@pytest.fixture(scope="module")
def original_python() -> str:
    python = os.environ.get("HARNESSX_ORIGINAL_PYTHON", "")
    problem = None
    if not python:
        problem = (
            "HARNESSX_ORIGINAL_PYTHON is not set (a Python with 'pip install harnessx[postgres]==0.9.1')"
        )
    else:
        found = subprocess.run(
            [python, "-I", "-c", "import importlib.metadata as m, psycopg; print(m.version('harnessx'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if found.stdout.strip() != "0.9.1":
            said = found.stdout.strip() or found.stderr.strip()
            problem = f"{python} has no harnessx 0.9.1 with psycopg ({said})"
    if problem is not None:
        if (
            os.environ.get("CI", "").lower() in ("true", "1")
            or os.environ.get("HARNESSX_REQUIRE_ORIGINAL") == "1"
        ):
            pytest.fail(f"the original harnessx is required here: {problem}", pytrace=False)
        pytest.skip(problem)
    return python


def write_with_the_original(python: str, folder: Path, where: list[str]) -> dict[str, dict[str, Any]]:
    """Every scenario, each in its own process of the original package."""
    seen = {}
    for scenario in SCENARIOS:
        out = folder / f"{scenario}.json"
        done = subprocess.run(
            [python, "-I", str(PROBE), scenario, str(out), *where],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=folder,
        )
        killed = scenario.startswith("crash")
        assert done.returncode == (-9 if killed else 0), done.stderr
        seen[scenario] = json.loads(out.read_text())
    return seen


def ledger() -> Agent:
    """This harnessx's definition of the probe's agent: same configuration, same tools."""
    agent = Agent(
        config=AgentConfig(system_prompt="You keep the ledger.", planning=False),
        provider=ScriptedProvider(["(the call made under the original)", "Recorded 42."]),
    )
    calls = agent.session_metadata.setdefault("calls", [])
    for name, policy in (("record", "safe"), ("pay", "manual"), ("charge", "manual"), ("lookup", "safe")):
        permission = PermissionLevel.ASK if name == "pay" else None

        def tool(amount: int, name: str = name) -> str:
            calls.append(name)
            return f"{name} {amount} done"

        agent.tools.register(name=name, permission=permission, replay_policy=policy)(tool)
    return agent


async def resume_everything(backend: Any, seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Continue each imported session as an application would after switching packages."""
    registry = AgentRegistry()
    made: list[Agent] = []

    def factory() -> Agent:
        made.append(ledger())
        return made[-1]

    ref = registry.register("ledger", factory, version="v1")
    outcome: dict[str, Any] = {}
    for scenario in ("completed", "approval", "crash-manual", "crash-safe"):
        runtime = AgentRuntime(ref, backend=backend, registry=registry)
        session_id = seen[scenario]["session_id"]
        try:
            if scenario == "approval":
                handle = await runtime.resume(session_id)
                assert handle is not None
                waiting = await handle.result()
                assert waiting.needs_input and waiting.pending[0].call.name == "pay"
                await runtime.approve(waiting.pending[0])
                handle = await runtime.resume(session_id)
            elif scenario == "crash-manual":
                handle = await runtime.resume(session_id)
                assert handle is not None
                waiting = await handle.result()
                # Dispatched under the original, no result recorded: a person decides.
                assert waiting.needs_input and waiting.pending[0].status == "uncertain"
                await runtime.resolve_tool(
                    waiting.pending[0], result=ToolResult("call_1", "charged (checked)")
                )
                handle = await runtime.resume(session_id)
            else:
                handle = await runtime.resume(session_id)
            result = await handle.result() if handle is not None else (await runtime.status())["run"]
            outcome[scenario] = result
        finally:
            await runtime.stop()
    outcome["calls"] = [call for agent in made for call in agent.session_metadata["calls"]]
    inline = AgentRuntime(ledger(), backend=backend)
    try:
        assert await inline.resume(seen["inline"]["session_id"]) is None
        outcome["inline"] = (await inline.status())["run"]
    finally:
        await inline.stop()
    return outcome


def check(outcome: dict[str, Any], seen: dict[str, dict[str, Any]]) -> None:
    for scenario in ("completed", "approval", "crash-manual", "crash-safe", "inline"):
        result = outcome[scenario]
        assert result.status is RunStatus.COMPLETED and result.output == "Recorded 42.", scenario
        assert result.run_id == seen[scenario]["run_id"], scenario
    # Approved pay ran once; the manual charge was not run again; the safe lookup was.
    assert sorted(outcome["calls"]) == ["lookup", "pay"]


def sqlite_tables(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}
    finally:
        conn.close()


def test_a_sqlite_database_of_the_original_is_imported_and_resumed(
    original_python: str, tmp_path: Path
) -> None:
    path = tmp_path / ".agent_sessions" / "runtime.sqlite3"
    path.parent.mkdir()
    seen = write_with_the_original(original_python, tmp_path, ["--sqlite", str(path)])
    before = sqlite_tables(path)

    async def refused() -> None:
        async with SQLiteBackend(path):
            pass

    with pytest.raises(SchemaError, match=r"original harnessx 0\.9\.1.*migrate --from-original"):
        asyncio.run(refused())
    assert sqlite_tables(path) == before  # refusing changed nothing

    migrated = subprocess.run(
        [sys.executable, "-m", "harnessx", "migrate", "--from-original", "--sqlite", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "imported 5 session(s) with 5 run(s)" in migrated.stdout
    after = sqlite_tables(path)
    # Nothing of the original was deleted: its tables are kept under a prefix, rows and all.
    assert {f"harnessx_0_9_1_{name}": count for name, count in before.items()} == {
        name: count for name, count in after.items() if name.startswith("harnessx_0_9_1_")
    }

    async def go() -> dict[str, Any]:
        async with SQLiteBackend(path) as backend:
            return await resume_everything(backend, seen)

    check(asyncio.run(go()), seen)
    again = subprocess.run(
        [sys.executable, "-m", "harnessx", "migrate", "--from-original", "--sqlite", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        again.returncode == 0
        and "imported 0 session(s)" in again.stdout
        and again.stdout.count("skipped") == 5
    )


def test_a_postgres_schema_of_the_original_is_imported_and_resumed(
    original_python: str, tmp_path: Path, pg_database: str
) -> None:
    seen = write_with_the_original(original_python, tmp_path, ["--dsn", pg_database, "--schema", "harness_x"])

    async def refused() -> None:
        async with PostgresBackend(pg_database):
            pass

    with pytest.raises(SchemaError, match=r"original harnessx 0\.9\.1.*migrate --from-original"):
        asyncio.run(refused())

    migrated = subprocess.run(
        [sys.executable, "-m", "harnessx", "migrate", "--from-original"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HARNESSX_DSN": pg_database},
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "imported 5 session(s) with 5 run(s)" in migrated.stdout

    async def go() -> dict[str, Any]:
        conn = await asyncpg.connect(pg_database)
        try:
            kept = await conn.fetchval("SELECT count(*) FROM harness_x_0_9_1.runs")
        finally:
            await conn.close()
        assert kept == 5  # the original's schema is kept, renamed
        async with PostgresBackend(pg_database) as backend:
            return await resume_everything(backend, seen)

    check(asyncio.run(go()), seen)
