"""A tool activity whose completion the Temporal server lost: the next attempt of the same
dispatch returns the outcome the first one recorded in the event sink, and the tool does not
run again.

An overloaded dev server once failed to persist two activity completions ("context deadline
exceeded"); it timed the attempts out and started them again, and two ``safe`` tools ran a
second time with no fault of a worker. Here the tool activity runs under
``temporalio.testing.ActivityEnvironment`` at attempt 1 and then at attempt 2 of the same
dispatch (what Temporal does after a lost completion), in one worker and in two sharing one
Redis; and end to end on a real server, with a worker interceptor that keeps attempt 1's
completion from ever reaching it (the activity completes "asynchronously", and never does):
a ``safe`` call is not run again, and a ``manual`` one (which Temporal never attempts twice)
takes the recorded outcome instead of becoming uncertain.

The ledger agents (``tests/temporal_agents.py``) append a line to ``$HX_LEDGER`` each time
their tool body runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_agents import registry
from temporal_support import TemporalSetup, ledger
from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from harnessx import AgentRef, AgentRuntime, ProviderResponse, RunEventType, RunStatus, ToolCall
from harnessx._engine import Dispatch, PrepareTools
from harnessx._state import Delta, RunState
from harnessx.temporal import RedisEvents, TemporalBackend, replayer
from harnessx.temporal._activities import SessionActivities
from harnessx.temporal._codec import state_to_dict
from harnessx.temporal._workflow import ACTIVITY_TOOL
from harnessx.testing import RedisServer, free_port

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "temporal"


@pytest.fixture
def tool_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger"
    monkeypatch.setenv("HX_LEDGER", str(path))
    return path


def _dispatched(agent: str, tool: str) -> tuple[RunState, str]:
    """A run of ``agent`` whose model called ``tool`` once, its dispatch recorded: what the
    workflow hands the tool activity."""
    engine = registry.create(AgentRef.parse(agent)).engine(durable=True)
    state = RunState(f"session-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex)
    state.apply(engine.start(state, "the job"))
    state.apply(
        engine.model_responded(state, ProviderResponse(tool_calls=[ToolCall("c0", tool, {"item": "x"})]))
    )
    while not isinstance(step := engine.next_step(state), Dispatch):
        if isinstance(step, PrepareTools):
            step = engine.prepare_tools(state, list(step.calls))
        assert isinstance(step, Delta), step
        state.apply(step)
    state.apply(engine.dispatched(state, step.keys))
    (key,) = step.keys
    return state, key


class _Dispatch:
    """One dispatch of a tool call, attempted as Temporal attempts it: every attempt has the
    same workflow run and activity id, and its own attempt number."""

    def __init__(self, agent: str, tool: str) -> None:
        self.agent = agent
        self.state, self.key = _dispatched(agent, tool)
        self.workflow_run_id = str(uuid.uuid4())

    async def attempt(self, activities: SessionActivities, number: int) -> dict[str, Any]:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            ActivityEnvironment.default_info(),
            activity_type=ACTIVITY_TOOL,
            activity_id=f"tool:{self.key}#{self.state.tools[self.key].attempt}",
            workflow_id=f"harnessx-session:{self.state.session_id}",
            workflow_run_id=self.workflow_run_id,
            attempt=number,
            heartbeat_timeout=timedelta(seconds=2),
        )
        args = {
            "agent": self.agent,
            "state": state_to_dict(self.state),
            "key": self.key,
            "heartbeat_timeout": 2.0,
        }
        outcome: dict[str, Any] = await env.run(activities.tool, args)
        return outcome


@pytest.fixture
async def events(redis_server: RedisServer) -> AsyncIterator[RedisEvents]:
    sink = RedisEvents(redis_server.url, prefix=f"lost:{uuid.uuid4().hex}:")
    yield sink
    await sink.aclose()


async def test_a_later_attempt_of_the_same_dispatch_returns_the_recorded_outcome(
    events: RedisEvents, tool_ledger: Path
) -> None:
    activities = SessionActivities(registry, events)
    dispatch = _Dispatch("safe@v1", "safe_tool")
    first = await dispatch.attempt(activities, 1)
    assert first == {"result": first["result"], "attempt": 1}
    assert first["result"]["content"] == "safe_tool did x"
    # Temporal lost attempt 1's completion and starts attempt 2 of the same dispatch.
    again = await dispatch.attempt(activities, 2)
    assert again == first
    assert len(ledger(tool_ledger)) == 1, "the tool ran once"
    await activities.aclose()


async def test_another_worker_returns_the_outcome_too(
    events: RedisEvents, redis_server: RedisServer, tool_ledger: Path
) -> None:
    # Two worker processes' activities, each with its own connection to the same Redis.
    other_events = RedisEvents(redis_server.url, prefix=events.prefix)
    one, other = SessionActivities(registry, events), SessionActivities(registry, other_events)
    try:
        dispatch = _Dispatch("idempotent@v1", "idempotent_tool")
        first = await dispatch.attempt(one, 1)
        assert await dispatch.attempt(other, 2) == first
        assert await dispatch.attempt(other, 3) == first
        assert len(ledger(tool_ledger)) == 1
    finally:
        await one.aclose()
        await other.aclose()
        await other_events.aclose()


async def test_a_new_dispatch_or_another_run_runs_the_tool(events: RedisEvents, tool_ledger: Path) -> None:
    """The record belongs to one dispatch: a call dispatched again (``resolve_tool(retry=True)``
    makes a new activity id) or the same activity id in another workflow run runs the tool."""
    activities = SessionActivities(registry, events)
    dispatch = _Dispatch("safe@v1", "safe_tool")
    await dispatch.attempt(activities, 1)
    dispatch.workflow_run_id = str(uuid.uuid4())
    await dispatch.attempt(activities, 2)
    entry = dispatch.state.tools[dispatch.key]
    dispatch.state.tools[dispatch.key] = entry.moved(attempt=entry.attempt + 1)
    await dispatch.attempt(activities, 2)
    assert len(ledger(tool_ledger)) == 3
    await activities.aclose()


async def test_a_transient_failure_records_nothing_and_its_retry_runs_the_tool(
    events: RedisEvents, tool_ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_FLAKY_FAILURES", "1")
    activities = SessionActivities(registry, events)
    dispatch = _Dispatch("flaky@v1", "flaky_tool")
    with pytest.raises(ApplicationError) as failed:
        await dispatch.attempt(activities, 1)
    assert failed.value.type == "TransientToolError" and not failed.value.non_retryable
    # Temporal's retry of a transient failure is meant to run the tool again.
    second = await dispatch.attempt(activities, 2)
    assert second["result"]["content"] == "flaky_tool did x" and second["attempt"] == 2
    # And once that one is recorded, a lost completion of it does not run it a third time.
    assert await dispatch.attempt(activities, 3) == second
    assert [line["attempt"] for line in ledger(tool_ledger)] == [1, 2]
    await activities.aclose()


async def test_with_the_sink_unreachable_the_tool_runs_and_answers(
    tool_ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sink that cannot be reached costs the record, not the call: attempt 1 answers; a
    later attempt runs the tool again (a ``safe`` tool may), saying why in the log."""
    down = RedisEvents(f"redis://127.0.0.1:{free_port()}/0")
    activities = SessionActivities(registry, down)
    try:
        dispatch = _Dispatch("safe@v1", "safe_tool")
        assert (await dispatch.attempt(activities, 1))["attempt"] == 1
        assert (await dispatch.attempt(activities, 2))["attempt"] == 2
    finally:
        await activities.aclose()
        await down.aclose()
    assert len(ledger(tool_ledger)) == 2
    assert "recording the outcome of harnessx-session:" in caplog.text
    assert "the tool runs again" in caplog.text


# ------------------------------------------------- end to end, on a real Temporal server


class _LoseFirstCompletions(Interceptor):
    """Keeps the completion of every tool activity's first attempt from the server: the
    activity reports that it completes asynchronously (and never does), so the server waits
    for the heartbeat timeout and starts attempt 2, as when it fails to persist a
    completion. ``lost`` collects the activity ids."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        lost = self.lost

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                result = await self.next.execute_activity(input)
                info = activity.info()
                if info.activity_type == ACTIVITY_TOOL and info.attempt == 1:
                    lost.append(info.activity_id)
                    activity.raise_complete_async()
                return result

        return Inbound(next)


@pytest.fixture
async def lossy(
    setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[TemporalBackend, _LoseFirstCompletions]]:
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    backend = await setup.backend(registry)
    losing = _LoseFirstCompletions()
    try:
        async with await backend.worker(interceptors=[losing]):
            yield backend, losing
    finally:
        await backend.aclose()


async def _tool_attempts(backend: TemporalBackend, session_id: str) -> list[int]:
    """The attempt Temporal recorded for each tool activity it started (the last one)."""
    history = await backend.handle(session_id).fetch_history()
    tools = {
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_TOOL
    }
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id in tools
    ]


async def test_a_safe_tool_whose_completion_was_lost_runs_once(
    lossy: tuple[TemporalBackend, _LoseFirstCompletions], setup: TemporalSetup
) -> None:
    backend, losing = lossy
    result = await asyncio.wait_for(AgentRuntime(AgentRef("safe", "v1"), backend=backend).run("the job"), 90)
    assert result.status is RunStatus.COMPLETED
    assert result.output == "Done: safe_tool did the job"
    assert len(losing.lost) == 1, "attempt 1's completion never reached the server"
    assert await _tool_attempts(backend, result.session_id) == [2], "Temporal ran a second attempt"
    lines = ledger(setup.ledger_path)
    assert len(lines) == 1, f"the tool ran {len(lines)} times"
    assert lines[0]["attempt"] == 1


async def test_a_manual_tool_whose_completion_was_lost_has_its_recorded_outcome(
    lossy: tuple[TemporalBackend, _LoseFirstCompletions], setup: TemporalSetup
) -> None:
    """Temporal never attempts a ``manual`` call twice: its lost attempt fails the activity.
    The workflow then reads the outcome the attempt recorded (patch marker
    ``harnessx-recorded-outcome-1``) instead of making the call uncertain, which it does
    only when nothing was recorded (a worker killed mid-tool, ``test_temporal_workers.py``)."""
    backend, losing = lossy
    runtime = AgentRuntime(AgentRef("manual", "v1"), backend=backend)
    handle = await runtime.submit("pay the invoice")
    result = await asyncio.wait_for(handle.result(), 90)
    assert len(losing.lost) == 1
    assert result.status is RunStatus.COMPLETED, result.pending
    assert result.output == "Done: manual_tool did pay the invoice"
    assert await _tool_attempts(backend, result.session_id) == [1], "Temporal did not attempt it again"
    assert len(ledger(setup.ledger_path)) == 1, "a manual tool is never run twice"
    assert RunEventType.RECOVERY_REQUIRED not in [e.type async for e in handle.events()]
    history = await backend.handle(result.session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


async def test_a_history_recorded_before_the_outcome_lookup_replays() -> None:
    """A session recorded by the workflow before it read a lost manual call's outcome
    (tests/fixtures/temporal/manual_lost_before_lookup.json: the ``manual`` agent, its tool
    activity's completion lost as above, the call made uncertain, resolved with a result,
    resumed and completed) replays on this one: the lookup is behind the patch marker
    ``harnessx-recorded-outcome-1``, so the call is made uncertain again, as recorded."""
    recorded = FIXTURES / "manual_lost_before_lookup.json"
    history = WorkflowHistory.from_json("harnessx-session:recorded", recorded.read_text())
    replay = await replayer(registry).replay_workflow(history, raise_on_replay_failure=True)
    assert replay.replay_failure is None
