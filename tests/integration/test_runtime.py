"""AgentRuntime on each real backend, in one process: the durable-runs page's behaviours."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget, ledger_lines, make_agent
from waiting import claim_once_expired

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    ConfigurationError,
    HookEvent,
    LeaseLostError,
    ProviderResponse,
    ResolutionError,
    RunEvent,
    RunEventType,
    RunResult,
    RunStatus,
    RuntimeState,
    ScriptedProvider,
    ScriptedRequest,
    SessionBusyError,
    StorageError,
    ToolCall,
    UnknownExecutionKey,
)
from harnessx._messages import request_messages
from harnessx._state import Delta, Phase, RunPatch


async def test_run_completes_with_checkpoint_hook_on_every_boundary(
    target: BackendTarget, tmp_path: Path
) -> None:
    agent = make_agent(policy="safe", ledger=str(tmp_path / "ledger"))
    checkpoints: list[dict[str, Any]] = []
    agent.hooks.on(HookEvent.CHECKPOINT, lambda ctx: checkpoints.append(dict(ctx.data)))
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Write the report.")
        assert result.ok and result.output == "Done: report for R0 written"
        assert result.session_id == runtime.session_id
        status = await runtime.status()
        assert status == {"session_id": runtime.session_id, "state": "running", "run": result}
        assert runtime.state is RuntimeState.RUNNING
    assert runtime.state is RuntimeState.STOPPED
    assert all(set(c) == {"session_id", "run_id", "status", "phase"} for c in checkpoints)
    # Phases are named as in harnessx 0.9.1: what comes next, or the result.
    phases = [c["phase"] for c in checkpoints]
    assert phases == ["prepare_model", "prepare_tools", *["tools"] * 4, "prepare_model", "finish", "result"]
    assert checkpoints[-1]["status"] == "completed"
    assert len(ledger_lines(tmp_path / "ledger")) == 1


async def test_request_id_deduplicates_within_a_session(target: BackendTarget) -> None:
    async with target.open() as backend, AgentRuntime(make_agent(), backend=backend) as runtime:
        first = await runtime.submit("Write it.", request_id="req-1")
        await first.result()
        again = await runtime.submit("Write it.", request_id="req-1")
        assert again.run_id == first.run_id
        assert (await again.result()).ok
        with pytest.raises(ConfigurationError, match="different message"):
            await runtime.submit("Something else.", request_id="req-1")
        other = await runtime.submit("Write it.", request_id="req-2")
        assert other.run_id != first.run_id


async def test_at_most_one_unfinished_run_per_session(target: BackendTarget) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        waiting = await runtime.run("Write it.")
        assert waiting.needs_input
        with pytest.raises(SessionBusyError, match="unfinished run"):
            await runtime.submit("Another request.")


async def test_approvals_one_decision_each_then_one_resume(target: BackendTarget, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(permission="ask", count=2, ledger=ledger), backend=backend)
        await runtime.start()
        result = await runtime.run("Write two reports.")
        assert result.needs_input and [p.status for p in result.pending] == ["approval", "approval"]
        approve_me, decline_me = result.pending
        assert await runtime.approve(approve_me) is None
        await runtime.decline(decline_me.execution_key)
        with pytest.raises(UnknownExecutionKey):
            await runtime.approve(approve_me)  # already decided
        handle = await runtime.resume(result.session_id)
        assert handle is not None and handle.run_id == result.run_id
        final = await handle.result()
        await runtime.stop()
    assert final.ok
    assert final.output == "Done: report for R0 written; Permission denied"
    assert [line["key"] for line in ledger_lines(ledger)] == [approve_me.execution_key]


async def test_approve_with_resume_continues_in_the_same_call(target: BackendTarget) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        result = await runtime.run("Write it.")
        # As in harnessx 0.9.1: the finished run's result, not a handle.
        final = await runtime.approve(result.pending[0], resume=True)
        assert isinstance(final, RunResult) and final.ok and final.run_id == result.run_id


async def test_decline_with_resume_returns_the_finished_result(target: BackendTarget) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        result = await runtime.run("Write it.")
        final = await runtime.decline(result.pending[0], resume=True)
        assert isinstance(final, RunResult) and final.ok
        assert final.output == "Done: Permission denied"


async def test_a_decision_that_does_not_fit_the_call_is_a_resolution_error(target: BackendTarget) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        result = await runtime.run("Write it.")
        (pending,) = result.pending
        with pytest.raises(ResolutionError):
            await runtime.resolve_tool(pending, retry=True)  # it awaits approval, not reconciliation
        with pytest.raises(ResolutionError):
            await runtime.resolve_tool(pending)  # no choice at all
        with pytest.raises(UnknownExecutionKey) as caught:
            await runtime.approve(f"{result.run_id}:1:nope")
        assert caught.value.execution_key == f"{result.run_id}:1:nope"


async def test_pause_during_a_tool_stops_before_the_next_model_call(target: BackendTarget) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    provider = ScriptedProvider(
        [ProviderResponse(tool_calls=[ToolCall("c", "slow", {})]), "finished after the pause"]
    )
    agent = Agent(provider=provider)

    @agent.tools.register(replay_policy="safe")
    async def slow() -> str:
        """Takes a while."""
        started.set()
        await release.wait()
        return "slow result"

    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("go")
        await started.wait()
        await runtime.pause()
        release.set()
        paused = await handle.result()
        assert paused.status is RunStatus.PAUSED
        assert len(provider.requests) == 1  # no model call after the pause
        resumed = await runtime.resume(paused.session_id)
        assert resumed is not None
        done = await resumed.result()
        assert done.ok and done.output == "finished after the pause"
        assert provider.requests[-1].tool_results[0]["content"] == "slow result"


async def test_cancel_then_resume_returns_none_and_status_keeps_the_result(target: BackendTarget) -> None:
    started = asyncio.Event()
    agent = Agent(provider=ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "hang", {})])]))

    @agent.tools.register()
    async def hang() -> str:
        """Never finishes on its own."""
        started.set()
        await asyncio.sleep(600)
        return "never"

    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("go")
        await started.wait()
        await runtime.cancel()
        cancelled = await handle.result()
        assert cancelled.status is RunStatus.CANCELLED and cancelled.stop_reason == ""
        # The call may have had its effect: it is uncertain, and its answer says so, so that
        # the session's next request holds no call without a result.
        (pending,) = cancelled.pending
        assert pending.status == "uncertain" and pending.call.name == "hang" and pending.attempt == 1
        state = await backend.load_state(cancelled.run_id)
        assert state.messages[-1] == {
            "role": "tool",
            "tool_call_id": "c",
            "name": "hang",
            "content": "Run cancelled; execution outcome may be unknown.",
            "is_error": True,
        }
        # ... which is the tool_result block the next request carries.
        assert request_messages(state.messages)[-1]["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "c",
                "content": "Run cancelled; execution outcome may be unknown.",
                "is_error": True,
            }
        ]
        assert await runtime.resume(cancelled.session_id) is None
        assert (await runtime.status())["run"].status is RunStatus.CANCELLED
        with pytest.raises(ResolutionError, match="cancelled"):
            await runtime.resolve_tool(pending, retry=True)
        with pytest.raises(ResolutionError, match="uncertain"):
            await runtime.approve(pending)


async def test_cancel_a_waiting_run_from_another_runtime(target: BackendTarget) -> None:
    async with target.open() as backend:
        async with AgentRuntime(make_agent(permission="ask"), backend=backend) as first:
            waiting = await first.run("go")
        second = AgentRuntime(make_agent(permission="ask"), backend=backend)
        assert await second.resume(waiting.session_id) is not None  # waits again at once
        await second.cancel()
        status = await second.status()
        assert status["state"] == "running" and status["run"].status is RunStatus.CANCELLED
        stopped = await second.stop()
        assert stopped == {**status, "state": "stopped"}
        assert await second.stop() == stopped


async def test_resume_returns_none_for_completed_or_empty_sessions(target: BackendTarget) -> None:
    async with target.open() as backend:
        async with AgentRuntime(make_agent(), backend=backend) as runtime:
            empty = await runtime.start()
            assert await runtime.resume(empty) is None
            assert (await runtime.status()) == {"session_id": empty, "state": "running", "run": None}
            done = await runtime.run("go")
        fresh = AgentRuntime(make_agent(), backend=backend)
        assert await fresh.resume(done.session_id) is None
        assert (await fresh.status())["run"].output == done.output
        with pytest.raises(StorageError, match="no session"):
            await fresh.resume("does-not-exist")
        await fresh.stop()


async def test_resume_refuses_an_incompatible_agent(target: BackendTarget) -> None:
    async with target.open() as backend:
        async with AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime:
            waiting = await runtime.run("go")
        other_prompt = AgentRuntime(make_agent(system_prompt="Something else."), backend=backend)
        with pytest.raises(ConfigurationError, match="system_prompt"):
            await other_prompt.resume(waiting.session_id)
        no_tool = AgentRuntime(
            Agent(config=AgentConfig(system_prompt="You write sales reports.")), backend=backend
        )
        with pytest.raises(ConfigurationError, match="tool 'write_report' is not registered"):
            await no_tool.resume(waiting.session_id)
        other_policy = AgentRuntime(make_agent(policy="safe"), backend=backend)
        with pytest.raises(ConfigurationError, match="replay policy"):
            await other_policy.resume(waiting.session_id)
        for runtime in (other_prompt, no_tool, other_policy):
            await runtime.stop()


async def test_events_reconnect_with_cursor_gets_exactly_the_rest(target: BackendTarget) -> None:
    async with target.open() as backend, AgentRuntime(make_agent(), backend=backend) as runtime:
        handle = await runtime.submit("go")
        seen = []
        async for event in handle.events():
            seen.append(event)
            if len(seen) == 3:
                break
        await handle.result()
        rest = [event async for event in handle.events(after=seen[-1].cursor or "0")]
        everything = [event async for event in handle.events(after="0")]
    assert [e.event_id for e in seen + rest] == [e.event_id for e in everything]
    assert [e.cursor for e in everything] == [str(i) for i in range(1, len(everything) + 1)]
    assert everything[-2].type is RunEventType.TURN_COMPLETE
    assert everything[-1].type is RunEventType.RUN_RESULT


async def test_events_after_the_last_cursor_end_with_a_summary(target: BackendTarget) -> None:
    """The reconnect helper of the durable-runs page: a second call must end, not hang."""
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(permission="ask"), backend=backend) as runtime,
    ):
        handle = await runtime.submit("go")
        first = [event async for event in handle.events()]
        waiting = await handle.result()
        again = [event async for event in handle.events(after=first[-1].cursor)]
        (summary,) = again
        assert summary.type is RunEventType.RUN_RESULT and summary.cursor == ""
        assert summary.data == waiting and summary.session_id == waiting.session_id
        # Its id is stable, so a consumer that deduplicates by id drops a repeat.
        (repeat,) = [event async for event in handle.events(after=first[-1].cursor)]
        assert repeat.event_id == summary.event_id
        done = await runtime.approve(waiting.pending[0], resume=True)
        everything = [event async for event in handle.events()]
        assert everything[-1].type is RunEventType.RUN_RESULT and everything[-1].data == done
        assert everything[-1].cursor == str(len(everything))  # read from the store, not made up


async def test_thousands_of_events_replay_across_pages(target: BackendTarget) -> None:
    text = "x" * 3000
    agent = Agent(provider=ScriptedProvider([text], chunk_size=1))
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("go")
        live = [event async for event in handle.events()]
        result = await handle.result()
        assert result.output == text
        fresh = AgentRuntime(Agent(provider=ScriptedProvider([text])), backend=backend)
        replayed = [event async for event in fresh._follow(handle.run_id, "0")]
        await fresh.stop()
    deltas = [e for e in replayed if e.type is RunEventType.TEXT_DELTA]
    assert "".join(e.data for e in deltas) == text
    assert [e.cursor for e in replayed] == [str(i) for i in range(1, len(replayed) + 1)]
    assert [e.event_id for e in replayed] == [e.event_id for e in live]


async def test_stream_text_and_run_stream(target: BackendTarget) -> None:
    async with target.open() as backend, AgentRuntime(make_agent(), backend=backend) as runtime:
        text = "".join([chunk async for chunk in runtime.stream_text("go")])
        assert text == "Writing the report.Done: report for R0 written"
        kinds = []
        async with runtime.run_stream("again") as stream:
            async for event in stream:
                kinds.append(event.type)
            assert (await stream.result()).ok
        # The session's second run: the script answers in text at once.
        assert kinds == [
            RunEventType.TEXT_DELTA,
            RunEventType.TEXT_COMPLETE,
            RunEventType.TURN_COMPLETE,
            RunEventType.RUN_RESULT,
        ]


async def test_stale_writer_gets_lease_lost_and_writes_nothing(target: BackendTarget) -> None:
    async with target.open(lease_seconds=0.3) as holder, target.open() as taker:
        runtime = AgentRuntime(make_agent(), backend=holder)
        session_id = await runtime.start()
        result = await runtime.run("go")
        stale = await holder.claim(session_id, "zombie")
        fresh = await claim_once_expired(taker, session_id, "rescuer")  # nobody renews the lease
        assert fresh.generation == stale.generation + 1
        state = await holder.load_state(result.run_id)
        before = await holder.read_events(result.run_id, 0, 10_000)
        delta = Delta(
            Phase.FINISH,
            messages=[{"role": "user", "content": "zombie write"}],
            run=RunPatch(output="zombie"),
        )
        with pytest.raises(LeaseLostError):
            await holder.commit(stale, state, delta, [])
        zombie_event = RunEvent(
            RunEventType.TEXT_DELTA, "z", session_id, result.run_id, cursor=str(len(before) + 1)
        )
        with pytest.raises(LeaseLostError):
            await holder.append_events(stale, result.run_id, [zombie_event])
        after = await taker.load_state(result.run_id)
        assert after.output == result.output
        assert len(after.messages) == len(state.messages)
        assert len(await taker.read_events(result.run_id, 0, 10_000)) == len(before)
        await taker.release(fresh)
        await runtime.stop()


async def test_runtime_owned_default_backend_uses_storage_dir(tmp_path: Path) -> None:
    from harnessx import RuntimeConfig

    async with AgentRuntime(
        make_agent(), runtime_config=RuntimeConfig(storage_dir=str(tmp_path / "sessions"))
    ) as runtime:
        assert (await runtime.run("go")).ok
    assert (tmp_path / "sessions" / "runtime.sqlite3").exists()
    await runtime.stop()  # idempotent


async def test_scripted_function_sees_tool_results(target: BackendTarget) -> None:
    def script(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall("a", "write_report", {"region": 5})])
        return request.tool_results[0]["content"]

    agent = make_agent()
    agent._provider = ScriptedProvider(script)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("go")
    assert "region" in result.output and "string" in result.output  # malformed args reach the model


async def test_renewal_extends_only_the_leases_it_names(target: BackendTarget) -> None:
    """A lease the process let go of but could not give back (its release failed while the
    database was down) must expire, so that the supervisor hands the run on: renewing every
    lease the process owns kept such a run stuck for ever (chaos finding 5)."""
    async with target.open() as store:
        for session_id in ("kept", "abandoned"):
            await store.create_session(session_id, "sales:v1", {})
        kept = await store.claim("kept", "worker")
        abandoned = await store.claim("abandoned", "worker")
        before = await store.get_session("abandoned")
        renewal = await store.renew([kept])
        assert renewal.held == {"kept"} and renewal.lost == set()
        after = await store.get_session("abandoned")
        assert before is not None and after is not None
        assert after.lease_expires_at == before.lease_expires_at  # not extended
        assert (await store.renew([kept, abandoned])).held == {"kept", "abandoned"}
        assert (await store.renew([])).held == set()


async def test_queueing_a_run_gives_the_lease_up_in_the_same_commit(target: BackendTarget) -> None:
    async with target.open() as app, target.open() as worker:
        await app.create_session("s", "sales:v1", {})
        lease = await app.claim("s", "app")
        await app.create_run(lease, "r1", None, "go", Delta(Phase.PREPARE_MODEL_CALL), queued=True)
        # No release call: a worker can take the run the moment it sees it.
        [(taken, run_id)] = await worker.claim_queued("worker", None, 1)
        assert run_id == "r1" and taken.generation == lease.generation + 1
        with pytest.raises(LeaseLostError):
            await app.append_events(
                lease, "r1", [RunEvent(RunEventType.TEXT_DELTA, "late", "s", "r1", cursor="2")]
            )
        # A run created without queueing keeps its lease.
        await app.create_session("t", "sales:v1", {})
        kept = await app.claim("t", "app")
        await app.create_run(kept, "r2", None, "go", Delta(Phase.PREPARE_MODEL_CALL))
        assert (await app.renew([kept])).held == {"t"}
        with pytest.raises(SessionBusyError):
            await worker.claim("t", "worker")
