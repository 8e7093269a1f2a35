"""A tool's transient failures on Temporal: each try is an activity attempt, retried by
Temporal under the retry policy built from the tool's ``ToolRetry``.

The ``flaky`` agent's tool (``safe``, ``ToolRetry(attempts=3, backoff_seconds=0.05)``) raises
``TransientToolError`` on its first ``$HX_FLAKY_FAILURES`` tries; ``flaky_manual``'s is
``manual``. The workflow's history is read back to show which attempt Temporal ran and why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporal_agents import registry
from temporal_support import TemporalSetup, ledger

from harnessx import AgentRef, AgentRuntime, RunStatus
from harnessx.temporal import TemporalBackend

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def backend(setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TemporalBackend]:
    monkeypatch.setenv("HX_LEDGER", str(setup.ledger_path))
    backend = await setup.backend(registry)
    try:
        async with await backend.worker():
            yield backend
    finally:
        await backend.aclose()


async def _tool_activity(backend: TemporalBackend, session_id: str) -> dict[str, Any]:
    """What the history says of the run's one tool activity."""
    history = await backend.handle(session_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "harnessx.tool.v1"
    ]
    assert len(scheduled) == 1
    (scheduled_id,) = [
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "harnessx.tool.v1"
    ]
    (started,) = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled_id
    ]
    policy = scheduled[0].retry_policy
    return {
        "attempt": started.attempt,
        "last_failure_type": started.last_failure.application_failure_info.type,
        "initial_interval": policy.initial_interval.ToTimedelta().total_seconds(),
        "backoff_coefficient": policy.backoff_coefficient,
        "maximum_attempts": policy.maximum_attempts,
    }


async def test_transient_tool_error_is_retried_by_temporal(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_FLAKY_FAILURES", "2")
    runtime = AgentRuntime(AgentRef("flaky", "v1"), backend=backend)
    result = await runtime.run("the report")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "Done: flaky_tool did the report"
    tries = ledger(setup.ledger_path)
    # Each try was its own activity attempt: current_tool_context() says which.
    assert [t["attempt"] for t in tries] == [1, 2, 3]
    assert [t["token"] for t in tries] == [1, 2, 3]
    activity = await _tool_activity(backend, result.session_id)
    assert activity["attempt"] == 3
    assert activity["last_failure_type"] == "TransientToolError"
    # Temporal's retry policy is the tool's ToolRetry back-off; lost workers are not capped.
    assert activity["initial_interval"] == pytest.approx(0.05)
    assert activity["backoff_coefficient"] == 2.0
    assert activity["maximum_attempts"] == 0


async def test_transient_failures_past_the_tools_attempts_are_its_error_result(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_FLAKY_FAILURES", "99")
    runtime = AgentRuntime(AgentRef("flaky", "v1"), backend=backend)
    result = await runtime.run("never works")
    # As in every binding: the last try's failure goes to the model as an error result.
    assert result.status is RunStatus.COMPLETED
    assert result.output == "Done: Tool execution error: the service is busy (try 3)"
    assert [t["attempt"] for t in ledger(setup.ledger_path)] == [1, 2, 3]
    assert (await _tool_activity(backend, result.session_id))["attempt"] == 3


async def test_a_manual_tools_transient_error_is_not_retried(
    backend: TemporalBackend, setup: TemporalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_FLAKY_FAILURES", "1")
    runtime = AgentRuntime(AgentRef("flaky_manual", "v1"), backend=backend)
    result = await runtime.run("once only")
    assert result.output == "Done: Tool execution error: the service is busy (try 1)"
    assert len(ledger(setup.ledger_path)) == 1
    activity = await _tool_activity(backend, result.session_id)
    assert activity["attempt"] == 1 and activity["maximum_attempts"] == 1


async def test_a_model_call_on_a_lost_worker_is_retried_without_limit(
    backend: TemporalBackend, setup: TemporalSetup
) -> None:
    # A provider's errors come back as values (the run fails with them); what Temporal sees
    # fail is a lost or starved worker, and that must not fail the run after a few tries.
    result = await AgentRuntime(AgentRef("flaky", "v1"), backend=backend).run("think")
    history = await backend.handle(result.session_id).fetch_history()
    policies = [
        e.activity_task_scheduled_event_attributes.retry_policy
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "harnessx.model.v1"
    ]
    assert len(policies) == 2  # the tool call's turn and the answer's
    assert all(p.maximum_attempts == 0 for p in policies)
