"""``harnessx prune``, ``compact``, ``delete``, ``export`` and ``import`` as a user runs them, on both
backends."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from durable_support import BackendTarget, make_agent
from lifecycle_support import age, rows_of

from harnessx import AgentRuntime

pytestmark = pytest.mark.process


def harnessx(
    target: BackendTarget, *args: str, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESSX_DSN", "HARNESSX_SQLITE")}
    if target.kind == "sqlite":
        env["HARNESSX_SQLITE"] = target.location
    else:
        env["HARNESSX_DSN"] = target.location  # the password stays out of the process list
    return subprocess.run(
        [sys.executable, "-m", "harnessx", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def old_sessions(target: BackendTarget) -> tuple[list[str], str]:
    """Three finished sessions idle for 40 days, and one awaiting approval as long."""
    async with target.open() as store:
        finished = []
        for _ in range(3):
            async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
                finished.append((await runtime.run("Write the report.")).session_id)
        async with AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store) as runtime:
            waiting = (await runtime.run("Write the report.")).session_id
        for session_id in [*finished, waiting]:
            await age(store, session_id, 40)
    return finished, waiting


async def test_prune_export_import_and_delete_from_the_terminal(
    target: BackendTarget, tmp_path: Path
) -> None:
    finished, waiting = await old_sessions(target)

    dry = harnessx(target, "prune", "--older-than", "30d", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would prune 3 finished session(s) idle for more than 30d")
    assert set(dry.stdout.splitlines()[1:]) == set(finished)

    exported = harnessx(target, "export", "--older-than", "30d", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "exported 3 session(s)" in exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(r["session"]["id"] for r in records) == sorted(finished)
    assert {(r["format"], r["version"]) for r in records} == {("harnessx.session", 1)}
    archive = tmp_path / "exported.jsonl"
    archive.write_text(exported.stdout, encoding="utf-8")

    pruned = harnessx(
        target, "prune", "--older-than", "30d", "--archive", str(tmp_path / "archive"), cwd=tmp_path
    )
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("pruned 3 finished session(s)") and "archived to" in pruned.stdout
    (written,) = (tmp_path / "archive").iterdir()
    assert sorted(json.loads(line)["session"]["id"] for line in written.read_text().splitlines()) == sorted(
        finished
    )

    restored = harnessx(target, "import", str(archive), cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.strip() == "imported 3 session(s); 0 skipped (a session with the same id exists)"
    again = harnessx(target, "import", "-", cwd=tmp_path, stdin=archive.read_text())
    assert again.stdout.strip().startswith("imported 0 session(s); 3 skipped")
    status = harnessx(target, "status", finished[0], cwd=tmp_path)
    assert status.returncode == 0 and '"status": "completed"' in status.stdout

    refused = harnessx(target, "delete", waiting, cwd=tmp_path)
    assert refused.returncode == 1 and "awaiting_input" in refused.stderr and "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    forced = harnessx(target, "delete", waiting, "--force", "--as", "erasure-desk", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith(f"deleted session {waiting}: ")
    async with target.open() as store:
        assert set((await rows_of(store, waiting)).values()) == {0}


async def test_bad_input_gets_a_clear_error_and_changes_nothing(
    target: BackendTarget, tmp_path: Path
) -> None:
    finished, _ = await old_sessions(target)
    wrong = harnessx(target, "prune", "--older-than", "30x", cwd=tmp_path)
    assert wrong.returncode == 2 and "not a duration" in wrong.stderr and "30d" in wrong.stderr
    first = harnessx(target, "export", "--session", finished[0], cwd=tmp_path).stdout
    async with target.open() as store:
        await store.delete_session(finished[0])
    (tmp_path / "bad.jsonl").write_text(first + "not json\n")
    bad = harnessx(target, "import", "bad.jsonl", cwd=tmp_path)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert (
        "bad.jsonl line 2 is not JSON" in bad.stderr and "1 session(s) before it were imported" in bad.stderr
    )
    unknown = harnessx(target, "export", "--session", "nope", cwd=tmp_path)
    assert unknown.returncode == 1 and "no session 'nope'" in unknown.stderr and unknown.stdout == ""
    async with target.open() as store:
        assert [(await rows_of(store, sid))["runs"] for sid in finished] == [1, 1, 1]
    truncated = harnessx(
        target,
        "import",
        "-",
        cwd=tmp_path,
        stdin=json.dumps({"format": "harnessx.session", "version": 1, "session": {"id": "x"}}),
    )
    assert truncated.returncode == 1 and "lacks a value this table needs" in truncated.stderr


async def test_compact_from_the_terminal(target: BackendTarget, tmp_path: Path) -> None:
    from harnessx import Agent, ScriptedProvider

    answer = "The EMEA region grew by three percent this quarter."
    async with (
        target.open() as store,
        AgentRuntime(Agent(provider=ScriptedProvider([answer], chunk_size=5)), backend=store) as rt,
    ):
        handle = await rt.submit("Report.")  # streamed: 11 pieces
        assert (await handle.result()).ok
    recent = harnessx(target, "compact", cwd=tmp_path)  # finished within the hour: not yet
    assert recent.returncode == 0, recent.stderr
    assert recent.stdout.startswith("compacted the streamed text of 0 finished run(s)"), recent.stdout
    await asyncio.sleep(1.1)
    done = harnessx(target, "compact", "--older-than", "1s", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("compacted the streamed text of 1 finished run(s): 10 event row(s)"), (
        done.stdout
    )
    async with target.open() as store:
        events = await store.read_events(handle.run_id, 0)
        assert events[0].data == answer and len(events) == 4
    wrong = harnessx(target, "compact", "--older-than", "soon", cwd=tmp_path)
    assert wrong.returncode == 2 and "is not a duration" in wrong.stderr and "Traceback" not in wrong.stderr
