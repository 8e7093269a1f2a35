"""The runtime's verbs on a real Temporal server, with a worker in this process.

Every test has its own task queue; the agents are the pool tests' (one tool call, then
an answer) and ``approval`` (its tool needs approval).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_agents import registry
from temporal_support import TemporalSetup, ledger, wait_until
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowHistory

from harnessx import (
    Agent,
    AgentRef,
    AgentRuntime,
    ConfigurationError,
    ResolutionError,
    RunEventType,
    RunStatus,
    SessionBusyError,
    SQLiteBackend,
    StorageError,
    ToolCallDelta,
    UnknownExecutionKey,
)
from harnessx.temporal import TemporalBackend, TemporalWorkerMetrics, replayer
from harnessx.temporal._backend import _update_cut_off

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "temporal"


async def test_a_run_with_a_tool_and_an_answer(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    result = await runtime.run("the report")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "Done: safe_tool did the report"
    assert result.usage.input_tokens > 0
    status = await runtime.status()
    assert status["state"] == "running" and status["run"].run_id == result.run_id  # the runtime's state


async def test_stop_returns_the_run_it_last_knew(backend: TemporalBackend) -> None:
    """As on SQLite and PostgreSQL: the run this runtime waited for or read last, without
    asking a worker again (``None`` when it knows of none)."""
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    result = await runtime.run("the report")
    stopped = await runtime.stop()
    assert stopped == {"session_id": result.session_id, "run": result, "state": "stopped"}
    assert await runtime.stop() == stopped
    reader = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    await reader.start(result.session_id)
    status = await reader.status()
    assert status["run"] == result
    assert await reader.stop() == {**status, "state": "stopped"}
    idle = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    await idle.start(result.session_id)
    assert await idle.stop() == {"session_id": result.session_id, "run": None, "state": "stopped"}


async def test_a_reply_cut_off_at_its_budget_is_continued(backend: TemporalBackend) -> None:
    """The engine's truncation recovery in the workflow, the raised budget in the activity."""
    result = await AgentRuntime(AgentRef("truncated", "v1"), backend=backend).run("write")
    assert result.ok and result.output == "The first half, the rest (budget 64000)."


async def test_a_paused_turn_goes_back_with_the_servers_blocks(backend: TemporalBackend) -> None:
    """A server tool's blocks (provider blocks) pass through the activity, the workflow's
    state and the store: the paused turn goes back verbatim and the conversation keeps them."""
    from temporal_agents import SEARCH_CALL, SEARCH_RESULT

    runtime = AgentRuntime(AgentRef("searching", "v1"), backend=backend)
    result = await runtime.run("search")
    assert result.ok and result.output == "Searching. Found it."
    stored = await backend.latest_run(result.session_id)
    assert stored is not None
    replies = [m["content"] for m in stored["messages"] if m["role"] == "assistant"]
    assert replies == [
        [{"type": "text", "text": "Searching. "}, SEARCH_CALL],
        [SEARCH_RESULT, {"type": "text", "text": "Found it."}],
    ]


async def _event_types(runtime: AgentRuntime, message: str) -> list[str]:
    handle = await runtime.submit(message)
    types = []
    cursors = []
    async for event in handle.events():
        types.append(event.type.value)
        cursors.append(int(event.cursor or 0))
    assert cursors == list(range(1, len(cursors) + 1)), "cursors are dense per run"
    return types


class _CountingBackend(TemporalBackend):
    """Notes the status of every answer the workflow gives (each one a query)."""

    answers: list[str]

    async def run_record(self, session_id: str, run_id: str) -> dict[str, Any]:
        record = await super().run_record(session_id, run_id)
        self.answers.append(str(record.get("status")))
        return record


async def test_waiting_for_a_result_asks_the_workflow_only_when_the_run_stopped(
    setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A query costs a workflow task on a worker; polling one per event starved the
    # workers under load (the chaos profile). The event stream says when to ask.
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    monkeypatch.setenv("HX_SLOW_TOOL", "3")
    backend = await _CountingBackend.connect(
        setup.target, events=setup.events(), registry=registry, task_queue=setup.task_queue
    )
    backend.answers = []
    try:
        async with await backend.worker():
            handle = await AgentRuntime(AgentRef("safe", "v1"), backend=backend).submit("patiently")
            result = await handle.result()
    finally:
        await backend.aclose()
    assert result.status is RunStatus.COMPLETED
    assert backend.answers.count("running") == 1, backend.answers
    assert backend.answers[-1] == "completed"


async def test_events_are_those_of_a_sqlite_run(backend: TemporalBackend, tmp_path: Path) -> None:
    remote = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    on_temporal = await _event_types(remote, "x")
    local = AgentRuntime(registry.create(AgentRef("safe", "v1")), backend=SQLiteBackend(tmp_path / "db"))
    try:
        in_sqlite = await _event_types(local, "x")
    finally:
        await local.stop()
    assert on_temporal == in_sqlite
    assert on_temporal[0] == "text_delta" and on_temporal[-1] == "run_result"
    assert "tool_call_start" in on_temporal and "tool_result" in on_temporal


async def _deltas(runtime: AgentRuntime, message: str) -> tuple[list[str], list[Any]]:
    handle = await runtime.submit(message)
    events = [event async for event in handle.events()]
    assert (await handle.result()).ok
    kinds = [event.type.value for event in events]
    return kinds, [event.data for event in events if event.type is RunEventType.TOOL_CALL_DELTA]


async def test_tool_call_deltas_travel_as_text_deltas_do(backend: TemporalBackend, tmp_path: Path) -> None:
    """A model streaming its tool call (the built-in providers' tool_call_delta chunks): the
    Temporal run's stream carries the same TOOL_CALL_DELTA events as a SQLite run's, each a
    ToolCallDelta, before the call is dispatched (as 0.9.1's Temporal worker publishes them
    with the text deltas)."""
    remote = AgentRuntime(AgentRef("drafting", "v1"), backend=backend)
    on_temporal, deltas = await _deltas(remote, "draft")
    local = AgentRuntime(registry.create(AgentRef("drafting", "v1")), backend=SQLiteBackend(tmp_path / "db"))
    try:
        in_sqlite, local_deltas = await _deltas(local, "draft")
    finally:
        await local.stop()
    assert on_temporal == in_sqlite
    assert on_temporal.index("tool_call_delta") < on_temporal.index("tool_call_start")
    assert deltas == local_deltas and all(isinstance(d, ToolCallDelta) for d in deltas)
    assert deltas[0] == ToolCallDelta("call_0", "safe_tool")
    assert json.loads("".join(d.partial_json for d in deltas)) == {"item": "draft"}


def _hooks_noted(path: Path) -> list[dict[str, Any]]:
    noted = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    path.unlink(missing_ok=True)
    # Ids differ between the two runs, and a Temporal worker always streams the model's
    # reply (run() on SQLite does not); what fired, in which order and with what, must not.
    ignored = ("session_id", "run_id", "stream")
    return [{k: v for k, v in n.items() if k not in ignored} for n in noted]


async def test_hooks_are_those_of_a_sqlite_run(
    backend: TemporalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workflow's own boundaries fire CHECKPOINT and the run's lifecycle hooks on the
    # worker, as the driver does; the model and tool hooks fire inside the activities.
    noted = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("HX_HOOKS", str(noted))
    remote = await AgentRuntime(AgentRef("hooked", "v1"), backend=backend).run("x")
    on_temporal = _hooks_noted(noted)
    local = AgentRuntime(registry.create(AgentRef("hooked", "v1")), backend=SQLiteBackend(tmp_path / "db"))
    try:
        await local.run("x")
    finally:
        await local.stop()
    in_sqlite = _hooks_noted(noted)
    assert remote.ok
    assert on_temporal == in_sqlite
    kinds = [n["event"] for n in on_temporal]
    assert kinds[:2] == ["checkpoint", "agent_start"] and kinds[-1] == "agent_end"
    assert {"tool_call_start", "tool_call_end", "loop_iteration_end", "llm_response"} <= set(kinds)
    checkpoints = [n for n in on_temporal if n["event"] == "checkpoint"]
    assert checkpoints[-1]["status"] == "completed" and checkpoints[-1]["phase"] == "result"
    # Firing them is part of the workflow's history, and replays the same way.
    history = await backend.handle(remote.session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


@pytest.mark.parametrize("agent", ["extended", "refusing"])
async def test_extension_turn_callbacks_are_those_of_a_sqlite_run(
    backend: TemporalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    # on_turn_start before the first model call (a failure fails the run), on_turn_end and
    # on_turn_complete once it ends: called on the worker, in the driver's order among the
    # hooks.
    noted = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("HX_HOOKS", str(noted))
    monkeypatch.setenv("HX_LEDGER", str(tmp_path / "ledger.jsonl"))
    remote = await AgentRuntime(AgentRef(agent, "v1"), backend=backend).run("x")
    on_temporal = _hooks_noted(noted)
    local = AgentRuntime(registry.create(AgentRef(agent, "v1")), backend=SQLiteBackend(tmp_path / "db"))
    try:
        in_sqlite = await local.run("x")
    finally:
        await local.stop()
    assert on_temporal == _hooks_noted(noted)
    kinds = [n["event"] for n in on_temporal]
    if agent == "extended":
        assert remote.ok and in_sqlite.ok
        assert kinds.index("agent_start") < kinds.index("on_turn_start") < kinds.index("llm_request")
        assert kinds[-4:] == ["on_turn_end", "loop_iteration_end", "on_turn_complete", "agent_end"]
    else:
        assert remote.error == in_sqlite.error == {"type": "PermissionError", "message": "no turns today"}
        assert "llm_request" not in kinds and "on_turn_end" not in kinds
        assert kinds[-2:] == ["on_turn_complete", "agent_end"]
    history = await backend.handle(remote.session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


async def test_cancelling_a_waiting_run_tells_its_extensions_and_hooks(
    backend: TemporalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    noted = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("HX_HOOKS", str(noted))
    monkeypatch.setenv("HX_LEDGER", str(tmp_path / "ledger.jsonl"))
    remote = AgentRuntime(AgentRef("extended_approval", "v1"), backend=backend)
    assert (await remote.run("x")).status is RunStatus.AWAITING_INPUT
    _hooks_noted(noted)
    await remote.cancel()
    on_temporal = _hooks_noted(noted)
    local = AgentRuntime(
        registry.create(AgentRef("extended_approval", "v1")), backend=SQLiteBackend(tmp_path / "db")
    )
    try:
        assert (await local.run("x")).status is RunStatus.AWAITING_INPUT
        _hooks_noted(noted)
        await local.cancel()
    finally:
        await local.stop()
    # on_turn_complete, then the AGENT_END hook, as on SQLite and PostgreSQL.
    assert on_temporal == _hooks_noted(noted)
    assert on_temporal[-2:] == [
        {"event": "on_turn_complete", "result": "cancelled"},
        {"event": "agent_end", "result": "cancelled"},
    ]
    history = await backend.handle(remote.session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


async def test_recovery_hooks_are_those_of_a_sqlite_run(
    backend: TemporalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model activity reports the reply budgets; the workflow decides the recovery and
    # fires RECOVERY after the reply's boundary, as the driver does after its commit.
    noted = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("HX_HOOKS", str(noted))
    remote = await AgentRuntime(AgentRef("recovering", "v1"), backend=backend).run("write")
    on_temporal = _hooks_noted(noted)
    local = AgentRuntime(
        registry.create(AgentRef("recovering", "v1")), backend=SQLiteBackend(tmp_path / "db")
    )
    try:
        await local.run("write")
    finally:
        await local.stop()
    in_sqlite = _hooks_noted(noted)
    assert remote.ok
    assert on_temporal == in_sqlite
    assert [n for n in on_temporal if n["event"] == "recovery"] == [
        {"event": "recovery", "reason": "empty_reply", "attempt": 1, "reply_budget": 32000},
        {"event": "recovery", "reason": "truncated_text", "attempt": 1, "reply_budget": 64000},
        {"event": "recovery", "reason": "paused_turn", "attempt": 1, "reply_budget": 64000},
    ]
    history = await backend.handle(remote.session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


async def test_a_history_recorded_before_the_recovery_hooks_replays() -> None:
    """A session of the ``recovering`` agent recorded by the workflow before it fired the
    RECOVERY hooks (tests/fixtures/temporal/recovery_before_hooks.json: an empty reply, one
    cut off, a paused turn, an answer; its worker fired no RECOVERY) replays on this one:
    the hooks are behind the patch marker ``harnessx-recovery-hooks-1``, so what that
    history decided is decided again, with no local activity it does not have."""
    recorded = FIXTURES / "recovery_before_hooks.json"
    history = WorkflowHistory.from_json("harnessx-session:recorded", recorded.read_text())
    replay = await replayer(registry).replay_workflow(history, raise_on_replay_failure=True)
    assert replay.replay_failure is None


async def test_a_history_recorded_before_the_previews_took_0_9_1s_layout_replays() -> None:
    """A session of the ``previewing`` agent recorded before large results were shown as
    0.9.1 shows them (tests/fixtures/temporal/previews_before_0_9_1_layout.json: two results
    over the limit, both previewed in the earlier wording, then read with
    ``read_tool_result``) replays on this one: the preview is only what the next model call
    is given, no decision of the workflow's."""
    recorded = FIXTURES / "previews_before_0_9_1_layout.json"
    history = WorkflowHistory.from_json("harnessx-session:recorded", recorded.read_text())
    replay = await replayer(registry).replay_workflow(history, raise_on_replay_failure=True)
    assert replay.replay_failure is None


async def test_events_after_a_cursor(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    handle = await runtime.submit("y")
    everything = [e async for e in handle.events()]
    middle = everything[3].cursor
    assert middle is not None
    rest = [e async for e in handle.events(after=middle)]
    assert [e.event_id for e in rest] == [e.event_id for e in everything[4:]]
    assert all(e.session_id == handle.session_id for e in everything)


async def test_request_id_is_deduplicated(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    first = await runtime.run("once", request_id="r-1")
    again = await runtime.run("once", request_id="r-1")
    assert again.run_id == first.run_id and again.output == first.output
    with pytest.raises(ConfigurationError, match="already used"):
        await runtime.submit("different", request_id="r-1")


async def test_stream_text(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    text = "".join([chunk async for chunk in runtime.stream_text("words")])
    assert text == "On it.Done: safe_tool did words"


async def test_run_stream(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    async with runtime.run_stream("s") as stream:
        kinds = [event.type async for event in stream]
        result = await stream.result()
    assert kinds[-1] is RunEventType.RUN_RESULT and result.ok


async def test_the_worker_counts_the_runs_that_stopped_by_status(setup: TemporalSetup) -> None:
    # harnessx_runs_finished_total{status}, as a pool worker counts its executions' ends.
    metrics = TemporalWorkerMetrics()
    backend = await setup.backend(registry)
    try:
        async with await backend.worker(metrics=metrics):
            runtime = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
            waiting = await runtime.run("ask first")
            assert waiting.status is RunStatus.AWAITING_INPUT
            done = await runtime.approve(waiting.pending[0], resume=True)
            assert done.status is RunStatus.COMPLETED
    finally:
        await backend.aclose()
    counted = {
        status: metrics.registry.get_sample_value("harnessx_runs_finished_total", {"status": status})
        for status in ("awaiting_input", "completed", "failed")
    }
    assert counted == {"awaiting_input": 1.0, "completed": 1.0, "failed": None}


async def test_approve_and_decline(backend: TemporalBackend, setup: TemporalSetup) -> None:
    runtime = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
    waiting = await runtime.run("ask first")
    assert waiting.status is RunStatus.AWAITING_INPUT
    [pending] = waiting.pending
    assert pending.status == "approval"
    with pytest.raises(ResolutionError, match="awaits approval"):  # as a store-backed runtime refuses it
        await runtime.resolve_tool(pending, retry=True)
    with pytest.raises(UnknownExecutionKey) as unknown:
        await runtime.approve(f"{waiting.run_id}:1:nothing")
    assert unknown.value.execution_key == f"{waiting.run_id}:1:nothing"
    done = await runtime.approve(pending, resume=True)
    assert done.status is RunStatus.COMPLETED and done.output == "Done: safe_tool did ask first"

    # A second session; the decision comes from a runtime bound to none (it finds the session).
    declined = await AgentRuntime(AgentRef("approval", "v1"), backend=backend).run("no")
    other = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
    assert (await other.decline(declined.pending[0], resume=True)).output == "Done: Permission denied"


async def test_busy_session_and_resume(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
    waiting = await runtime.run("hold")
    with pytest.raises(SessionBusyError):
        await runtime.submit("another")
    follower = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
    handle = await follower.resume(waiting.session_id)
    assert handle is not None
    assert (await handle.result()).status is RunStatus.AWAITING_INPUT
    with pytest.raises(ConfigurationError, match="runs agent approval@v1"):
        await AgentRuntime(AgentRef("safe", "v1"), backend=backend).resume(waiting.session_id)
    with pytest.raises(ConfigurationError, match="no session"):
        await follower.resume("no-such-session")


async def test_pause_then_resume(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    monkeypatch.setenv("HX_SLOW_TOOL", "1")
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    handle = await runtime.submit("slowly")
    await wait_until(lambda: ledger(setup.ledger_path), what="the tool started")
    await runtime.pause()
    paused = await handle.result()
    assert paused.status is RunStatus.PAUSED
    monkeypatch.setenv("HX_SLOW_TOOL", "0")
    resumed = await runtime.resume(paused.session_id)
    assert resumed is not None
    done = await resumed.result()
    assert done.status is RunStatus.COMPLETED
    assert len(ledger(setup.ledger_path)) == 1, "the settled tool is not run again"


async def test_stop_pauses_the_run_it_drives(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on SQLite and PostgreSQL: leaving the runtime's context leaves no run going on; the
    # tool in flight settles and the run waits, paused, for resume().
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    monkeypatch.setenv("HX_SLOW_TOOL", "1")
    async with AgentRuntime(AgentRef("safe", "v1"), backend=backend) as runtime:
        handle = await runtime.submit("then stop")
        await wait_until(lambda: ledger(setup.ledger_path), what="the tool started")
    await runtime.stop()  # again: nothing more happens
    paused = await backend.wait_result(handle.session_id, handle.run_id)
    assert paused.status is RunStatus.PAUSED
    monkeypatch.setenv("HX_SLOW_TOOL", "0")
    later = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    resumed = await later.resume(handle.session_id)
    assert resumed is not None
    assert (await resumed.result()).status is RunStatus.COMPLETED
    assert len(ledger(setup.ledger_path)) == 1, "the settled tool is not run again"


async def test_stop_is_recorded_with_no_worker_up(
    setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    monkeypatch.setenv("HX_SLOW_TOOL", "1")
    backend = await setup.backend(registry)
    try:
        runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
        async with await backend.worker():
            handle = await runtime.submit("stop while down")
            await wait_until(lambda: ledger(setup.ledger_path), what="the tool started")
        # The worker is gone (its tool was cancelled with it): stop() does not wait for one.
        await asyncio.wait_for(runtime.stop(), 20)
        async with await backend.worker():
            paused = await backend.wait_result(handle.session_id, handle.run_id)
        assert paused.status is RunStatus.PAUSED
    finally:
        await backend.aclose()


async def test_cancel_interrupts_a_tool(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    monkeypatch.setenv("HX_SLOW_TOOL", "30")
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
    handle = await runtime.submit("forever")
    await wait_until(lambda: ledger(setup.ledger_path), what="the tool started")
    await asyncio.wait_for(runtime.cancel(), 20)
    result = await handle.result()
    assert result.status is RunStatus.CANCELLED
    assert await runtime.resume(result.session_id) is None


async def test_a_request_cut_off_is_a_cancellation_or_a_storage_error(setup: TemporalSetup) -> None:
    backend = await setup.backend(registry)  # no worker polls this task queue: updates wait
    try:
        runtime = AgentRuntime(AgentRef("safe", "v1"), backend=backend)
        await runtime.start()
        # The caller's own deadline: a cancellation, as for any coroutine (not an SDK error).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(runtime.submit("nobody polls"), 1)
        # The server giving up on the call (here its RPC deadline): a StorageError to retry.
        assert runtime.session_id is not None
        with pytest.raises(RPCTimeoutOrCancelledError) as cut:
            await backend.handle(runtime.session_id).execute_update(
                "resume", rpc_timeout=timedelta(milliseconds=300)
            )
        error = _update_cut_off(backend, runtime.session_id, "resume", cut.value)
        assert isinstance(error, StorageError)
        assert "try again" in str(error) and backend.task_queue in str(error)
    finally:
        await backend.aclose()


async def test_bad_bindings_are_clear_errors(backend: TemporalBackend) -> None:
    with pytest.raises(ConfigurationError, match="pass AgentRef"):
        AgentRuntime(Agent(), backend=backend)
    with pytest.raises(ConfigurationError, match="keeps no journal"):
        AgentRuntime(AgentRef("safe", "v1"), backend=backend, recording=True)
    runtime = AgentRuntime(AgentRef("nobody", "v9"), backend=backend)
    with pytest.raises(ConfigurationError, match="unknown agent nobody@v9: the workers of task queue"):
        await runtime.submit("who?")


async def test_history_replays_deterministically(backend: TemporalBackend) -> None:
    runtime = AgentRuntime(AgentRef("approval", "v1"), backend=backend)
    waiting = await runtime.run("replay me")
    await runtime.approve(waiting.pending[0], resume=True)
    await runtime.run("and again")
    history = await backend.handle(waiting.session_id).fetch_history()
    checker = replayer(registry, backend.client.data_converter)
    result = await checker.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
