"""Real crashes: a child process driving a run is killed with SIGKILL; this process resumes.

The child is a separate OS process (``durable_support.py``); its tool appends to a ledger
file, so the counts below are what really ran.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from durable_support import BackendTarget, ChildRun, holder_gone, ledger_lines, make_agent, spawn_child

from harnessx import (
    AgentRuntime,
    ResolutionError,
    RunEventType,
    RunStatus,
    SessionBusyError,
    ToolResult,
    UnknownExecutionKey,
)

pytestmark = pytest.mark.process


def killed_mid_tool(target: BackendTarget, tmp_path: Path, policy: str) -> tuple[ChildRun, str]:
    ledger = str(tmp_path / "ledger")
    marker = tmp_path / "tool-started"
    child = spawn_child(
        target, tmp_path, agent={"policy": policy, "ledger": ledger, "block_marker": str(marker)}
    )
    child.wait_for(marker)
    child.kill()
    return child, ledger


async def test_manual_tool_killed_mid_call_becomes_uncertain(target: BackendTarget, tmp_path: Path) -> None:
    child, ledger = killed_mid_tool(target, tmp_path, "manual")
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(policy="manual", ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)  # at once: the dead holder's lock is gone
        assert handle is not None
        result = await handle.result()
        assert result.status is RunStatus.AWAITING_INPUT
        (pending,) = result.pending
        assert pending.status == "uncertain" and pending.policy == "manual" and pending.attempt == 1
        kinds = [event.type async for event in handle.events()]
        assert RunEventType.RECOVERY_REQUIRED in kinds
        assert len(ledger_lines(ledger)) == 1  # not re-run

        with pytest.raises(ResolutionError):
            await runtime.resolve_tool(pending, retry=True, abort=True)
        with pytest.raises(ResolutionError):
            await runtime.resolve_tool(pending)
        with pytest.raises(UnknownExecutionKey):
            await runtime.resolve_tool(pending.execution_key + "x", retry=True)

        await runtime.resolve_tool(pending, result=ToolResult(content="verified: report exists"))
        resumed = await runtime.resume(child.session_id)
        assert resumed is not None
        final = await resumed.result()
        await runtime.stop()
    assert final.ok and final.output == "Done: verified: report exists"
    assert len(ledger_lines(ledger)) == 1


async def test_resolve_retry_invokes_the_tool_again(target: BackendTarget, tmp_path: Path) -> None:
    child, ledger = killed_mid_tool(target, tmp_path, "manual")
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(policy="manual", ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        (pending,) = (await handle.result()).pending
        await runtime.resolve_tool(pending, retry=True)
        resumed = await runtime.resume(child.session_id)
        assert resumed is not None
        final = await resumed.result()
        await runtime.stop()
    assert final.ok
    assert [line["attempt"] for line in ledger_lines(ledger)] == [1, 2]


async def test_resolve_abort_cancels_the_run(target: BackendTarget, tmp_path: Path) -> None:
    child, ledger = killed_mid_tool(target, tmp_path, "manual")
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(policy="manual", ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        (pending,) = (await handle.result()).pending
        await runtime.resolve_tool(pending, abort=True)
        assert await runtime.resume(child.session_id) is None
        status = await runtime.status()
        await runtime.stop()
    run = status["run"]
    assert run.status is RunStatus.CANCELLED and run.stop_reason == ""
    # Nothing is undone: the call stays uncertain, and the model would read why.
    assert [p.status for p in run.pending] == ["uncertain"]
    assert len(ledger_lines(ledger)) == 1


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
async def test_replayable_tool_killed_mid_call_runs_again_once(
    target: BackendTarget, tmp_path: Path, policy: str
) -> None:
    child, ledger = killed_mid_tool(target, tmp_path, policy)
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(policy=policy, ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        result = await handle.result()
        await runtime.stop()
    assert result.ok and result.output == "Done: report for R0 written"
    lines = ledger_lines(ledger)
    assert [line["attempt"] for line in lines] == [1, 2]
    assert lines[0]["key"] == lines[1]["key"]  # the same execution key both times


async def test_committed_raw_result_is_never_rerun(target: BackendTarget, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    child = spawn_child(
        target, tmp_path, agent={"policy": "manual", "ledger": ledger}, kill_at_phase="raw_result"
    )
    code, _, _ = child.finish()
    assert code == -9
    assert len(ledger_lines(ledger)) == 1
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(policy="manual", ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        result = await handle.result()
        await runtime.stop()
    assert result.ok and result.output == "Done: report for R0 written"
    assert len(ledger_lines(ledger)) == 1


async def test_session_held_by_a_live_process_is_busy_until_it_dies(
    target: BackendTarget, tmp_path: Path
) -> None:
    marker = tmp_path / "tool-started"
    child = spawn_child(target, tmp_path, agent={"policy": "safe", "block_marker": str(marker)})
    child.wait_for(marker)
    try:
        async with target.open() as backend:
            runtime = AgentRuntime(make_agent(policy="safe"), backend=backend)
            with pytest.raises(SessionBusyError):
                await runtime.resume(child.session_id)
            child.kill()
            await holder_gone(backend, child.session_id)
            handle = await runtime.resume(child.session_id)  # no wait for the 30 s lease
            assert handle is not None
            assert (await handle.result()).ok
            await runtime.stop()
    finally:
        if child.process.poll() is None:
            child.kill()


async def test_approval_persists_across_processes(target: BackendTarget, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    child = spawn_child(target, tmp_path, agent={"permission": "ask", "ledger": ledger})
    code, out, err = child.finish()
    assert code == 0, err
    assert '"awaiting_input"' in out
    assert ledger_lines(ledger) == []
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(permission="ask", ledger=ledger), backend=backend)
        status = AgentRuntime(make_agent(permission="ask"), backend=backend)
        rebound = await status.resume(child.session_id)  # the run goes straight back to waiting
        assert rebound is not None and (await rebound.result()).needs_input
        (pending,) = (await status.status())["run"].pending
        await status.stop()
        result = await runtime.approve(pending, resume=True)
        await runtime.stop()
    assert result.ok
    assert len(ledger_lines(ledger)) == 1


async def test_decline_across_processes_tells_the_model(target: BackendTarget, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    child = spawn_child(target, tmp_path, agent={"permission": "ask", "ledger": ledger})
    assert child.finish()[0] == 0
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(permission="ask", ledger=ledger), backend=backend)
        rebound = await runtime.resume(child.session_id)
        assert rebound is not None and (await rebound.result()).needs_input
        (pending,) = (await runtime.status())["run"].pending
        result = await runtime.decline(pending, resume=True)
        await runtime.stop()
    assert result.output == "Done: Permission denied"
    assert ledger_lines(ledger) == []


@pytest.mark.parametrize("control", ["cancel", "pause"])
async def test_a_request_the_dead_holder_never_acted_on_is_acted_on_when_resumed(
    target: BackendTarget, tmp_path: Path, control: str
) -> None:
    """The request reached the session while its holder was frozen mid-tool (SIGSTOP: alive,
    so the verb writes the request for it, but unable to act), then the holder died. The
    request is not lost with it: the run resumed here acts on it at once."""
    ledger = str(tmp_path / "ledger")
    marker = tmp_path / "tool-started"
    child = spawn_child(
        target, tmp_path, agent={"policy": "safe", "ledger": ledger, "block_marker": str(marker)}
    )
    child.wait_for(marker)
    child.process.send_signal(signal.SIGSTOP)
    try:
        async with target.open() as backend:
            assert await backend.set_control(child.session_id, control)
    finally:
        child.kill()
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(policy="safe", ledger=ledger), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        result = await handle.result()
        expected = RunStatus.CANCELLED if control == "cancel" else RunStatus.PAUSED
        assert result.status is expected, result
        session = await backend.get_session(child.session_id)
        assert session is not None and session.control is None  # acted on: cleared
        await runtime.stop()


async def test_a_paused_search_killed_before_it_is_continued_goes_back_verbatim(
    target: BackendTarget, tmp_path: Path
) -> None:
    """The process dies as it asks the model to continue a paused turn holding a server
    tool's blocks; the run resumed here sends that turn back as it was stored."""
    child = spawn_child(target, tmp_path, agent={"script": "search_dying"}, prompt="Search.")
    code, _, _ = child.finish()
    assert code == -signal.SIGKILL
    async with target.open() as backend:
        await holder_gone(backend, child.session_id)
        runtime = AgentRuntime(make_agent(script="search"), backend=backend)
        handle = await runtime.resume(child.session_id)
        assert handle is not None
        result = await handle.result()
        await runtime.stop()
    assert result.ok and result.output == "Searching. Found it."
