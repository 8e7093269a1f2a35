"""A recorded run killed with SIGKILL mid-tool: the incident is exported from the store alone,
shows the call whose outcome is unknown, and plays back in a fresh process with no network."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from durable_support import BackendTarget, ledger_lines, make_agent, spawn_child

from harnessx import (
    AgentRuntime,
    ExportPolicy,
    IncidentRecorder,
    RunStatus,
    ToolResult,
    export_incident,
)

pytestmark = pytest.mark.process

OFFLINE = textwrap.dedent(
    """
    import asyncio, json, socket, sys

    def forbidden(*args, **kwargs):
        raise AssertionError("offline playback touched a live dependency")

    socket.socket.connect = forbidden
    import harnessx
    harnessx.Agent.__init__ = forbidden
    harnessx.AgentRuntime.__init__ = forbidden
    harnessx.LLMProvider.__init__ = forbidden

    async def main():
        playback = await harnessx.IncidentRecorder().playback(sys.argv[1])
        print(json.dumps({"ids": [r["id"] for r in playback.records], "issues": playback.report.issues}))

    asyncio.run(main())
    """
)


async def test_a_recorded_crash_exports_plays_back_and_resolves(
    target: BackendTarget, tmp_path: Path
) -> None:
    ledger = str(tmp_path / "ledger")
    marker = tmp_path / "tool-started"
    child = spawn_child(
        target,
        tmp_path,
        agent={"policy": "manual", "ledger": ledger, "block_marker": str(marker)},
        recording=True,
    )
    child.wait_for(marker)
    child.kill()
    session_id = child.session_id
    payloads = ExportPolicy(include_payloads=True)
    async with target.open() as backend:
        crashed = await backend.latest_run(session_id)
        assert crashed is not None and crashed.status == "running"
        # From the store alone: no agent, no runtime, nothing resumed.
        before = await export_incident(
            backend, session_id, crashed.id, tmp_path / "crashed.hx", policy=payloads
        )
        report = await IncidentRecorder().verify(before)
        assert report.valid
        assert {
            "run_not_terminal_at_export",
            "unresolved_tool_outcome",
            "tool_attempt_outcome_unresolved",
        } <= set(report.issues)
        playback = await IncidentRecorder().playback(before)
        (operation,) = playback.manifest["unresolved_operations"]
        assert operation["status"] == "started" and operation["attempt"] == 1
        assert len(playback.of_kind("tool.dispatched")) == 1 and not playback.of_kind("tool.returned")

        runtime = AgentRuntime(make_agent(policy="manual", ledger=ledger), backend=backend)
        handle = await runtime.resume(session_id)
        assert handle is not None and runtime.recording  # the session says so
        waiting = await handle.result()
        assert waiting.status is RunStatus.AWAITING_INPUT and waiting.pending[0].status == "uncertain"
        await runtime.resolve_tool(
            waiting.pending[0], result=ToolResult(content="verified: the report exists")
        )
        resumed = await runtime.resume(session_id)
        assert resumed is not None
        finished = await resumed.result()
        assert finished.status is RunStatus.COMPLETED
        bundle = await runtime.export_incident(
            finished.run_id, destination=tmp_path / "resolved.hx", policy=payloads
        )
        await runtime.stop()
    assert len(ledger_lines(ledger)) == 1  # the tool ran once, before the crash
    playback = await IncidentRecorder().playback(bundle)
    assert playback.report.valid and playback.report.complete, playback.report.issues
    (resolved,) = playback.of_kind("tool.resolved")
    assert resolved["payload"]["result"]["content"] == "verified: the report exists"
    assert [r["payload"]["previous_status"] for r in playback.of_kind("run.resumed")] == [
        "running",
        "awaiting_input",
    ]

    command = [sys.executable, "-c", OFFLINE, str(bundle)]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    offline = json.loads(done.stdout)
    assert offline == {"ids": [r["id"] for r in playback.records], "issues": []}
