"""A reply's calls on Temporal run in harnessx 0.9.1's batches, as on SQLite: the serial
calls take turns beside the concurrent ones (the ``batched`` agent of
``tests/temporal_agents.py``: ``fetch_a``, ``s1``, ``fetch_b``, ``s2``), and histories
recorded before replay as they were decided (patch marker ``harnessx-serial-beside-1``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporal_agents import registry
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from harnessx import AgentRef, AgentRuntime, RunEventType, SQLiteBackend
from harnessx.temporal import TemporalBackend, replayer

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "temporal"
BATCHED = AgentRef("batched", "v1")


def _tool_events(events: list[Any]) -> list[tuple[str, str]]:
    wanted = (RunEventType.TOOL_CALL_START, RunEventType.TOOL_CALL_COMPLETE)
    return [(e.type.value, e.data.name) for e in events if e.type in wanted]


def _scheduled_before_a_completion(history: WorkflowHistory) -> int:
    """How many tool activities the workflow scheduled before the first one completed."""
    count = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and count:
            break
        scheduled = event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        if (
            scheduled
            and event.activity_task_scheduled_event_attributes.activity_type.name == "harnessx.tool.v1"
        ):
            count += 1
    return count


async def test_serial_calls_run_beside_the_concurrent_ones_as_on_sqlite(
    backend: TemporalBackend, tmp_path: Path
) -> None:
    runtime = AgentRuntime(BATCHED, backend=backend)
    handle = await runtime.submit("go")
    remote = await handle.result()
    on_temporal = _tool_events([e async for e in handle.events()])
    local = AgentRuntime(registry.create(BATCHED), backend=SQLiteBackend(tmp_path / "db"))
    try:
        local_handle = await local.submit("go")
        assert (await local_handle.result()).output == remote.output
        in_sqlite = _tool_events([e async for e in local_handle.events()])
    finally:
        await local.stop()
    assert remote.output == "Done: fetch_a did it, s1 did it, fetch_b did it, s2 did it"
    for events in (on_temporal, in_sqlite):
        # The calls that start together return in any order; s2 waits for s1.
        starts = [name for kind, name in events if kind == "tool_call_start"]
        assert starts == ["fetch_a", "s1", "fetch_b", "s2"]
        assert events.index(("tool_call_complete", "s1")) < events.index(("tool_call_start", "s2"))
        assert events[:3] == [("tool_call_start", name) for name in starts[:3]]
    history = await backend.handle(remote.session_id).fetch_history()
    # fetch_a, s1 and fetch_b were sent together (before: fetch_a alone, then s1 alone).
    assert _scheduled_before_a_completion(history) == 3
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None


async def test_a_history_recorded_before_these_batches_replays() -> None:
    """tests/fixtures/temporal/batches_before_serial_beside.json: a session of the
    ``batched`` agent recorded by the workflow before 0.9.1's batches (fetch_a, then s1,
    fetch_b and s2 each alone) replays on this one with the batches it was decided with."""
    recorded = FIXTURES / "batches_before_serial_beside.json"
    history = WorkflowHistory.from_json("harnessx-session:recorded", recorded.read_text())
    assert _scheduled_before_a_completion(history) == 1
    replay = await replayer(registry).replay_workflow(history, raise_on_replay_failure=True)
    assert replay.replay_failure is None
