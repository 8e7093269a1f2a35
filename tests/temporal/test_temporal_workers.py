"""Real ``harness-worker --temporal`` processes killed with SIGKILL mid-tool and restarted.

The sessions' heartbeat timeout is 2 s (``TemporalSetup``), so a lost worker's activity is
given up 2 s after its last heartbeat. Tools append a ledger line as they start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporal_support import BIN, TemporalSetup, ledger

from harnessx import AgentRef, AgentRuntime, RunEventType, RunStatus, ToolResult
from harnessx.temporal import TemporalBackend
from harnessx.testing import free_port

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]


@pytest.fixture
async def client(setup: TemporalSetup) -> AsyncIterator[TemporalBackend]:
    backend = await setup.backend()
    try:
        yield backend
    finally:
        await backend.aclose()


async def test_sigkill_mid_safe_tool_runs_it_again_on_another_worker(
    setup: TemporalSetup, client: TemporalBackend
) -> None:
    doomed = setup.worker("doomed", slow_tool=60)
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=client)
    handle = await runtime.submit("the job")
    [started] = await setup.wait_for_ledger(lambda lines: len(lines) == 1)
    doomed.kill()
    survivor = setup.worker("survivor")
    result = await asyncio.wait_for(handle.result(), 90)
    assert result.status is RunStatus.COMPLETED, survivor.text()[-3000:]
    lines = ledger(setup.ledger_path)
    assert len(lines) == 2, "the effect ledger shows two attempts at most"
    assert [line["attempt"] for line in lines] == [1, 2]
    assert lines[0]["token"] < lines[1]["token"], "the fencing token grows with the attempt"
    assert lines[0]["key"] == lines[1]["key"] == started["key"]
    assert lines[0]["pid"] != lines[1]["pid"]


@pytest.mark.parametrize("choice", ["result", "retry", "abort"])
async def test_sigkill_mid_manual_tool_is_uncertain_and_resolved(
    setup: TemporalSetup, client: TemporalBackend, choice: str
) -> None:
    doomed = setup.worker("doomed", slow_tool=60)
    runtime = AgentRuntime(AgentRef("manual", "v1"), backend=client)
    handle = await runtime.submit("pay the invoice")
    await setup.wait_for_ledger(lambda lines: len(lines) == 1)
    doomed.kill()
    setup.worker("survivor")
    waiting = await asyncio.wait_for(handle.result(), 90)
    assert waiting.status is RunStatus.AWAITING_INPUT
    [pending] = waiting.pending
    assert pending.status == "uncertain" and pending.policy == "manual"
    assert len(ledger(setup.ledger_path)) == 1, "a manual tool is never retried automatically"
    events = [e.type async for e in handle.events()]
    assert RunEventType.RECOVERY_REQUIRED in events

    if choice == "result":
        await runtime.resolve_tool(pending, result=ToolResult(content="paid, checked by hand"))
    elif choice == "retry":
        await runtime.resolve_tool(pending, retry=True)
    else:
        await runtime.resolve_tool(pending, abort=True)
        aborted = (await runtime.status())["run"]
        assert aborted.status is RunStatus.CANCELLED and aborted.stop_reason == ""
        assert await runtime.resume(waiting.session_id) is None
        assert len(ledger(setup.ledger_path)) == 1
        return
    resumed = await runtime.resume(waiting.session_id)
    assert resumed is not None
    done = await asyncio.wait_for(resumed.result(), 60)
    assert done.status is RunStatus.COMPLETED
    lines = ledger(setup.ledger_path)
    if choice == "result":
        assert done.output == "Done: paid, checked by hand" and len(lines) == 1
    else:
        assert len(lines) == 2 and lines[1]["attempt"] == 2
        assert done.output == "Done: manual_tool did pay the invoice"


async def test_approval_survives_a_worker_restart_and_events_follow_across_it(
    setup: TemporalSetup, client: TemporalBackend
) -> None:
    first = setup.worker("first")
    runtime = AgentRuntime(AgentRef("approval", "v1"), backend=client)
    waiting = await asyncio.wait_for(runtime.run("deploy"), 60)
    assert waiting.status is RunStatus.AWAITING_INPUT
    [pending] = waiting.pending
    seen = []
    follower = await runtime.resume(waiting.session_id)
    assert follower is not None
    async for event in follower.events():
        seen.append(event)
    cursor = seen[-1].cursor
    assert cursor is not None and seen[-1].type is RunEventType.RUN_RESULT
    first.kill()
    # The decision is made while no worker runs: the update waits for one.
    second = setup.worker("second")
    done = await asyncio.wait_for(runtime.approve(pending, resume=True), 60)
    assert done.status is RunStatus.COMPLETED, second.text()[-3000:]
    assert done.output == "Done: safe_tool did deploy"
    later = [e async for e in follower.events(after=cursor)]
    assert [int(e.cursor or 0) for e in later] == list(range(int(cursor) + 1, int(cursor) + 1 + len(later)))
    kinds = [e.type for e in later]
    assert kinds[0] is RunEventType.TOOL_CALL_START and kinds[-1] is RunEventType.RUN_RESULT
    assert len(ledger(setup.ledger_path)) == 1


async def test_the_documented_example(setup: TemporalSetup) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "HARNESSX_TEMPORAL": setup.target,
        "HARNESSX_EVENTS_URL": setup.redis_url,
        "HARNESSX_TEMPORAL_TASK_QUEUE": setup.task_queue,
        "PYTHONPATH": str(root / "examples"),
    }
    worker = subprocess.Popen(  # noqa: ASYNC220 - a child that outlives this call
        [str(BIN / "harness-worker"), "--agents", "agents:registry", "--metrics-addr", "off"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(root / "examples/temporal_client.py"), "count these four words"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        worker.kill()
        worker.wait(30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "completed - Your message has 4 words."
    assert lines[0].split() == ["1", "tool_call_start"]


async def test_worker_probes_metrics_logs_and_drain(setup: TemporalSetup, client: TemporalBackend) -> None:
    port = free_port()
    worker = setup.worker("observed", extra=["--metrics-addr", f"127.0.0.1:{port}"])
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(timeout=5) as http:

        async def ready() -> bool:
            try:
                return (await http.get(base + "/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        deadline = asyncio.get_running_loop().time() + 30
        while not await ready():
            assert asyncio.get_running_loop().time() < deadline, worker.text()[-2000:]
            await asyncio.sleep(0.05)
        assert (await http.get(base + "/healthz")).status_code == 200
        result = await AgentRuntime(AgentRef("safe", "v1"), backend=client).run("measure me")
        assert result.ok
        metrics = (await http.get(base + "/metrics")).text
    assert 'harnessx_tool_calls_total{outcome="ok",policy="safe"} 1.0' in metrics
    assert 'harnessx_temporal_activities_total{kind="model",outcome="ok"} 2.0' in metrics
    assert 'harnessx_runs_finished_total{status="completed"} 1.0' in metrics
    assert "harnessx_worker_up 1.0" in metrics
    worker.popen.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.popen.wait, 60) == 0
    records = [json.loads(line) for line in worker.text().splitlines() if line.startswith("{")]
    # Every line of an activity names its run, as the pool worker's lines do.
    tool_lines = [r for r in records if r.get("message", "").startswith("tool call ")]
    assert tool_lines and all(r["run_id"] == result.run_id for r in tool_lines), tool_lines
    assert tool_lines[0]["session_id"] == result.session_id
    assert any("polling task queue" in r.get("message", "") for r in records)
    assert any("draining" in r.get("message", "") for r in records)
